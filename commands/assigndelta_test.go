package commands

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// deltaFromScratch is what reconcile computed before the target index:
// Assign over the whole target, diffed against it.
func deltaFromScratch(g *projection.Group, n int) (events.Targets, []string) {
	prev := map[string][]int{}
	for id, t := range g.EachTarget() {
		prev[id] = t
	}
	return diffAssignment(prev, Assign(prev, g.LiveMemberIDs(), n))
}

// randomMembership is a random step of a group's life as the log records
// it: joins, leaves, expiries, fences, prunes, the shard count changing, and
// target assignments: mostly what reconcile decides, sometimes an arbitrary
// one (unbalanced, with shards out of range or given twice).
func randomMembership(r *rand.Rand, w *world, ids []string, n *int) events.Event {
	g := w.group()
	id := ids[r.IntN(len(ids))]
	m := g.Member(id)
	switch k := r.IntN(20); {
	case k < 5:
		return &events.MemberJoined{MemberID: id, MemberName: id, MaxConcurrency: 1, Epochs: w.bump()}
	case k < 7 && m != nil:
		return &events.MemberLeft{MemberID: id, Epochs: w.bump()}
	case k < 8 && m != nil:
		return &events.MembersExpired{MemberIDs: []string{id}, Epochs: w.bump()}
	case k < 9 && m != nil:
		return &events.MemberFenced{MemberID: id, Reason: "test", MemberEpoch: m.Epoch + 1, Epochs: w.bump()}
	case k < 10 && m != nil && !m.Live():
		w.mv++
		return &events.MembersPruned{MemberIDs: []string{id}, MetadataVersion: w.mv}
	case k < 11:
		*n = 1 + r.IntN(24)
		return &events.ReshardingActivated{ReshardingID: "r", ShardCount: *n, AssignableCount: *n, Epochs: w.bump()}
	case k < 13:
		targets := events.Targets{}
		for i := 0; i < 1+r.IntN(3); i++ {
			var t []int
			for j := 0; j < r.IntN(4); j++ {
				t = append(t, r.IntN(*n+3)-1)
			}
			targets[ids[r.IntN(len(ids))]] = t
		}
		return &events.AssignmentChanged{AssignmentEpoch: w.g, Targets: targets}
	default:
		changed, removed := deltaFromScratch(g, *n)
		return &events.AssignmentChanged{AssignmentEpoch: w.g, Targets: changed, Removed: removed}
	}
}

// TestAssignmentDeltaIsAssign: on random group histories, the assignment
// reconcile computes from the target index (moves) is the one Assign computes
// from the whole target, for the State's groups and for groups an overlay
// folded a few more records into.
func TestAssignmentDeltaIsAssign(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 11))
			n := 8
			w := group(n)
			ids := make([]string, 3+r.IntN(12))
			for i := range ids {
				ids[i] = fmt.Sprintf("m%02d", i)
			}
			check := func(what string, g *projection.Group) {
				t.Helper()
				gotC, gotR := assignmentDelta(g, n)
				wantC, wantR := deltaFromScratch(g, n)
				if !reflect.DeepEqual(gotC, wantC) || !reflect.DeepEqual(gotR, wantR) {
					t.Fatalf("%s after %d events: the index's delta is %v removed %v, Assign's %v removed %v", what, w.n, gotC, gotR, wantC, wantR)
				}
			}
			fast := 0
			for step := 0; step < 300; step++ {
				w.apply(randomMembership(r, w, ids, &n))
				g := w.group()
				check("the State's group", g)
				if x, ok := g.TargetIndex(); ok {
					if _, _, ok := moves(g, x, n); ok {
						fast++
					}
				}
				ov := w.st.NewOverlayLocked()
				for i := 0; i < 1+r.IntN(4); i++ {
					ev := randomMembership(r, w, ids, &n)
					ov.Apply(events.Record{Type: ev.EventType(), Schema: events.SchemaVersion, Event: ev,
						Meta: events.Meta{StreamPrefix: rulesKey.StreamPrefix, ConsumerGroup: rulesKey.ConsumerGroup, Time: t0.Add(time.Hour)}})
				}
				check("an overlay's group", ov.Group(rulesKey))
			}
			if fast == 0 {
				t.Error("the index never decided: the test compares nothing")
			}
		})
	}
}
