package commands

import (
	"errors"
	"fmt"
	"sort"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

// Fenced layout changes. Every layout change of every group (an activation,
// or a rollback after one) raises the fences of step 1 below, whatever the
// group's ordering; steps 2 (the record of the cutover and its barriers) and
// 3 are ordered resharding's (a group created with ordering KEY; docs/ordered-groups.md):
//
//  1. The reconciler raises, on every shard of the layout before the change
//     whose keys move elsewhere, the group's fence to the metadata version the
//     change takes the group to (producers that fence their publishes with an
//     older routing version are refused from then on), and reads in the same
//     atomic step where each shard stands (its cutover id) and whether the
//     group already read and acknowledged everything up to it.
//  2. The decision that changes the layout checks the fence is exactly the
//     version it bumps to (else the reconciler fences again) and records
//     resharding.cutover with the barriers: each shard of the new layout that
//     gains keys from shards not yet done holds its entries after its own
//     cutover until those shards are proven read and acknowledged up to theirs.
//  3. The reconciler reads that proof from Redis (barrier loop) and a decision
//     records resharding.barrier_released; members (heartbeat answers) hold
//     entries beyond an unreleased barrier.
//
// A resharding of an ordered group completes only once its barriers are
// released, and no new resharding starts while any barrier waits.

// cutoverEvidence is what the reconciler read while fencing one layout change
// of one group.
type CutoverEvidence struct {
	Fence int64
	// streamFence is the stream metadata version the change takes the
	// stream to (0 without stream metadata), raised under
	// routing.StreamFenceField on the same shards.
	StreamFence int64
	From, To    int
	Shards      []events.CutoverRead
	// removed is where the shards from..to-1 that still exist stand (shards
	// a scale-in removed and a rollback routes again), by index.
	Removed map[int]string
}

// cutovers is the cutover evidence of a layout change, per group (absent for
// a group that needs none).
type Cutovers map[projection.GroupKey]*CutoverEvidence

// OrderingInput switches a group's ordering.
type OrderingInput struct {
	Ordering    *string
	RequestedBy string
	Reason      string
}

// checkOrdering validates an ordering value from a request ("" or nil is
// NONE).
func CheckOrdering(o *string) (string, []string) {
	if o == nil || *o == "" || *o == events.OrderingNone {
		return "", nil
	}
	if *o == events.OrderingKey {
		return events.OrderingKey, nil
	}
	return "", []string{`ordering: must be "KEY" or "NONE"`}
}

// setOrdering records group.ordering_changed while no resharding is active
// and no barrier waits; the ordering the group has changes nothing.
func SetOrdering(t *Tx, k projection.GroupKey, ordering string, in OrderingInput) (projection.GroupView, error) {
	g := t.Group(k)
	if g == nil {
		return projection.GroupView{}, ErrGroupNotFound
	}
	if g.Ordering == ordering {
		return projection.ViewGroup(g), nil
	}
	if m := g.Active(); m != nil {
		return projection.GroupView{}, WithMsg(ErrActiveResharding, "Group has an active migration: %s (%d -> %d, %s); switch the ordering once it finished", m.ReshardingID, m.From, m.To, m.State)
	}
	if len(g.Barriers) > 0 {
		return projection.GroupView{}, WithMsg(ErrActiveResharding, "Group still has %s; switch the ordering once they are released", describeBarriers(g.Barriers))
	}
	name := events.OrderingNone
	if ordering != "" {
		name = ordering
	}
	g = t.emit(k, &events.GroupOrderingChanged{Ordering: name, RequestedBy: in.RequestedBy, Reason: in.Reason})
	return projection.ViewGroup(g), nil
}

// describeBarriers names waiting barriers for an error message.
func describeBarriers(bs []*projection.Barrier) string {
	var shards []int
	for _, b := range bs {
		if !ContainsInt(shards, b.Shard) {
			shards = append(shards, b.Shard)
		}
	}
	sort.Ints(shards)
	return fmt.Sprintf("ordering barriers waiting on shards %v (resharding %s)", shards, bs[0].ReshardingID)
}

// layoutChange is the shard layout a decision is about to switch a group to:
// from the current shard count to to; ok false when the decision changes no
// layout (the group is not ordered, or the resharding is not at that step).
type LayoutChange func(g *projection.Group) (to int, ok bool)

func ContainsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// recordCutover is the decision's half of a layout change of k to shard
// count to: for an ordered group it checks the evidence is about this very
// change (fences at the version it bumps to, the current layout) and records
// resharding.cutover with its barriers; errRefence when it is not.
func recordCutover(t *Tx, k projection.GroupKey, id string, to int, co Cutovers) error {
	g := t.Group(k)
	if g == nil || !t.Rules.Streams {
		return nil // no shard streams to fence (tests without Redis)
	}
	ev := co[k]
	if ev == nil || ev.Fence != g.MetadataVersion+1 || ev.From != g.ShardCount || ev.To != to || len(ev.Shards) != ev.From ||
		ev.StreamFence != streamVersionAfter(t, k.StreamPrefix, to) {
		return ErrRefence
	}
	if !g.Ordered() {
		return nil // fenced; the barriers and their record are ordering KEY's
	}
	out := &events.ReshardingCutover{ReshardingID: id, Fence: ev.Fence, FromCount: ev.From, ToCount: ev.To, Shards: make([]events.ShardCutover, len(ev.Shards)),
		StreamFence: ev.StreamFence}
	for i, s := range ev.Shards {
		out.Shards[i] = s.ShardCutover
	}
	for target := 0; target < to; target++ {
		var sources []int
		for _, s := range routing.Sources(ev.From, to, target) {
			if !ev.Shards[s].Done {
				sources = append(sources, s)
			}
		}
		if len(sources) == 0 {
			continue
		}
		after := "0-0"
		if target < ev.From {
			after = ev.Shards[target].LastID
		} else if id, ok := ev.Removed[target]; ok {
			after = id
		}
		out.Barriers = append(out.Barriers, events.CutoverBarrier{ShardIndex: target, After: after, Sources: sources})
	}
	t.emitAs(Actor, k, out)
	return nil
}

// barrierSources lists the distinct source shards the group's barriers wait on.
func BarrierSources(g *projection.Group) []events.ShardCutover {
	seen := map[string]bool{}
	var out []events.ShardCutover
	for _, b := range g.Barriers {
		for _, s := range b.Sources {
			key := s.StreamKey + " " + s.LastID
			if !seen[key] {
				seen[key] = true
				out = append(out, s)
			}
		}
	}
	return out
}

func AnyProven(reads []events.BarrierRead) bool {
	for _, rd := range reads {
		if projection.SourceProven(rd.BarrierProof) {
			return true
		}
	}
	return false
}

// releaseBarriers releases the barriers of k whose every source the reads
// prove, one barrier_released per cutover, records the unfenced entries
// found after the cutovers (per cutover), then lets the resharding advance.
func ReleaseBarriers(t *Tx, k projection.GroupKey, reads []events.BarrierRead, unfenced []UnfencedCount) {
	g := t.Group(k)
	if g == nil || len(g.Barriers) == 0 {
		return
	}
	proof := map[string]events.BarrierProof{}
	for _, rd := range reads {
		proof[rd.StreamKey+" "+rd.CutoverID] = rd.BarrierProof
	}
	type release struct {
		id       string
		shards   []int
		evidence []events.BarrierProof
		seen     map[string]bool
	}
	var order []int64
	byFence := map[int64]*release{}
	owner := map[string]*projection.Barrier{} // source -> a barrier waiting on it
	for _, b := range g.Barriers {
		all := true
		var ev []events.BarrierProof
		for _, s := range b.Sources {
			key := s.StreamKey + " " + s.LastID
			if owner[key] == nil {
				owner[key] = b
			}
			p, ok := proof[key]
			if !ok || !projection.SourceProven(p) {
				all = false
				continue
			}
			ev = append(ev, p)
		}
		if !all {
			continue
		}
		r := byFence[b.Fence]
		if r == nil {
			r = &release{id: b.ReshardingID, seen: map[string]bool{}}
			byFence[b.Fence] = r
			order = append(order, b.Fence)
		}
		r.shards = append(r.shards, b.Shard)
		for _, p := range ev {
			if key := p.StreamKey + " " + p.CutoverID; !r.seen[key] {
				r.seen[key] = true
				r.evidence = append(r.evidence, p)
			}
		}
	}
	// Unfenced entries first: the release is the last word on a cutover.
	writes := map[int64]*events.UnfencedWrites{}
	var wOrder []int64
	for _, u := range unfenced {
		b := owner[u.StreamKey+" "+u.CutoverID]
		if b == nil {
			continue
		}
		w := writes[b.Fence]
		if w == nil {
			w = &events.UnfencedWrites{ReshardingID: b.ReshardingID, Fence: b.Fence}
			writes[b.Fence] = w
			wOrder = append(wOrder, b.Fence)
		}
		w.Shards = append(w.Shards, events.ShardWrites{ShardIndex: u.Shard, StreamKey: u.StreamKey, Count: u.Count, FirstID: u.First})
	}
	for _, fence := range wOrder {
		t.emitAs(Actor, k, writes[fence])
	}
	for _, fence := range order {
		r := byFence[fence]
		sort.Ints(r.shards)
		sort.Slice(r.evidence, func(i, j int) bool { return r.evidence[i].ShardIndex < r.evidence[j].ShardIndex })
		t.emitAs(Actor, k, &events.BarrierReleased{ReshardingID: r.id, Fence: fence, Shards: r.shards, Evidence: r.evidence})
	}
	if len(order) > 0 {
		advance(t, k)
	}
}

// unfencedCount is a number of unfenced entries found after one cutover.
type UnfencedCount struct {
	Shard     int
	StreamKey string
	CutoverID string
	Count     int64
	First     string
}

// errRefence: the group moved on between raising the fences and the decision
// (another metadata version, another layout); fence again.
var ErrRefence = errors.New("fences are behind the group's metadata version")
