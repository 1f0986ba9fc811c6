package projection_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// The generator below writes random but valid logs: the events a coordinator
// could have written, with epochs that only move forward, members that join
// before they sync, reshardings that go through their states in order. It
// keeps its own small model of each group to stay valid; it never reads the
// projection it is testing.

type genMember struct {
	state string
	epoch int64
	owned []int
}

type genResharding struct {
	id       string
	from, to int
	stage    string
}

type genGroup struct {
	key                         projection.GroupKey
	exists                      bool
	shardCount, assignable      int
	groupEpoch, assignEpoch, mv int64
	members                     map[string]*genMember
	targets                     map[string][]int
	nextMember, nextResharding  int
	rsh                         *genResharding
	unretired                   []string // finished scale-ins whose streams are not retired yet
	ordered                     bool
	barriers                    []genBarrier // unreleased
	removing                    bool         // its group.deleted named consumer groups to destroy
}

type genBarrier struct {
	id    string
	fence int64
	shard int
}

type generator struct {
	r      *rand.Rand
	now    time.Time
	groups []*genGroup
	out    []events.Record // without ids
	terms  int64           // coordinator.term_started written so far
	// streams is the stream metadata of each prefix that has some: solo
	// has no group, the others get it from their first group's create.
	streams map[string]*genStream
}

type genStream struct {
	shardCount int
	mv         int64
}

// solo is the prefix of a stream without consumer groups.
const solo = "solo"

func newGenerator(seed uint64) *generator {
	g := &generator{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: t0, streams: map[string]*genStream{}}
	for _, k := range []projection.GroupKey{orders, payments} {
		g.groups = append(g.groups, &genGroup{key: k})
	}
	return g
}

// streamChange is the stream metadata version a layout change of gr's
// prefix takes it to (0 without metadata).
func (g *generator) streamChange(gr *genGroup, to int) int64 {
	st := g.streams[gr.key.StreamPrefix]
	if st == nil {
		return 0
	}
	st.shardCount = to
	st.mv++
	return st.mv
}

// soloStep creates, adopts or scales the stream without groups.
func (g *generator) soloStep() {
	st := g.streams[solo]
	k := projection.GroupKey{StreamPrefix: solo}
	switch {
	case st == nil && g.r.IntN(2) == 0:
		n := 1 + g.r.IntN(4)
		g.streams[solo] = &genStream{shardCount: n, mv: 1}
		g.emit(k, "alice", &events.StreamCreated{ShardCount: n, Provisioned: true, RequestedBy: "alice", Reason: "generated", CreatedShards: upTo(n)})
	case st == nil:
		n := 1 + g.r.IntN(4)
		g.streams[solo] = &genStream{shardCount: n, mv: 1}
		g.emit(k, "alice", &events.StreamAdopted{ShardCount: n, RequestedBy: "alice", Reason: "generated"})
	default:
		to := g.r.IntN(6)
		if to == st.shardCount {
			to++
		}
		ev := &events.StreamScaled{From: st.shardCount, To: to, MetadataVersion: st.mv + 1, RequestedBy: "alice", Reason: "generated", CreatedShards: []int{}, KeptKeys: []string{}}
		for i := st.shardCount; i < to; i++ {
			ev.CreatedShards = append(ev.CreatedShards, i)
		}
		for i := to; i < st.shardCount; i++ {
			ev.KeptKeys = append(ev.KeptKeys, fmt.Sprintf("%s:%d", solo, i))
		}
		st.shardCount, st.mv = to, st.mv+1
		g.emit(k, "alice", ev)
	}
}

// generateRecords returns n records (ids not set yet) from a seeded generator.
func generateRecords(seed uint64, n int) []events.Record {
	g := newGenerator(seed)
	for len(g.out) < n {
		g.step()
	}
	return g.out[:n]
}

func (g *generator) emit(k projection.GroupKey, actor string, ev events.Event) {
	// Decision times move forward by up to two seconds, with nanoseconds.
	g.now = g.now.Add(time.Duration(g.r.IntN(2000))*time.Millisecond + time.Duration(g.r.IntN(1000)))
	g.out = append(g.out, events.Record{
		Type: ev.EventType(), Schema: events.SchemaVersion, Event: ev,
		Meta: events.Meta{
			StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, Time: g.now,
			Actor: actor, RequestID: fmt.Sprintf("req-%d", len(g.out)),
		},
	})
}

func (g *generator) bump(gr *genGroup) events.Epochs {
	gr.groupEpoch++
	gr.mv++
	return events.Epochs{GroupEpoch: gr.groupEpoch, MetadataVersion: gr.mv}
}

func (gr *genGroup) ids(states ...string) []string {
	var out []string
	for id, m := range gr.members {
		for _, s := range states {
			if m.state == s {
				out = append(out, id)
			}
		}
	}
	sort.Strings(out)
	return out
}

func (g *generator) pick(ids []string) string { return ids[g.r.IntN(len(ids))] }

// subset returns a random subset of s, sorted (possibly empty, never nil).
func (g *generator) subset(s []int) []int {
	out := []int{}
	for _, v := range s {
		if g.r.IntN(3) > 0 {
			out = append(out, v)
		}
	}
	return out
}

// assign recomputes the target round robin over live members.
func (g *generator) assign(gr *genGroup) {
	live := gr.ids(projection.MemberActive)
	prev := gr.targets
	gr.targets = map[string][]int{}
	for _, id := range live {
		gr.targets[id] = []int{}
	}
	if len(live) > 0 {
		for s := 0; s < gr.assignable; s++ {
			id := live[s%len(live)]
			gr.targets[id] = append(gr.targets[id], s)
		}
	}
	gr.assignEpoch = gr.groupEpoch
	if g.r.IntN(4) == 0 {
		// What builds before assignment.changed wrote: the whole target.
		g.emit(gr.key, "coordinator", &events.AssignmentComputed{AssignmentEpoch: gr.assignEpoch, Targets: gr.copyTargets()})
		return
	}
	g.emit(gr.key, "coordinator", gr.assignmentChanged(prev))
}

// assignmentChanged is the delta from prev to the model's target.
func (gr *genGroup) assignmentChanged(prev map[string][]int) *events.AssignmentChanged {
	ev := &events.AssignmentChanged{AssignmentEpoch: gr.assignEpoch, Targets: events.Targets{}}
	for id, t := range gr.targets {
		if p, ok := prev[id]; !ok || fmt.Sprint(p) != fmt.Sprint(t) {
			ev.Targets[id] = append([]int{}, t...)
		}
	}
	for id := range prev {
		if _, ok := gr.targets[id]; !ok {
			ev.Removed = append(ev.Removed, id)
		}
	}
	sort.Strings(ev.Removed)
	return ev
}

// copyTargets copies the target, so an emitted event never shares the model's map.
func (gr *genGroup) copyTargets() map[string][]int {
	out := make(map[string][]int, len(gr.targets))
	for id, t := range gr.targets {
		out[id] = append([]int{}, t...)
	}
	return out
}

func (g *generator) step() {
	gr := g.groups[g.r.IntN(len(g.groups))]
	if !gr.exists {
		if gr.removing {
			// A group of the name is created again only once its old
			// consumer groups are destroyed.
			gr.removing = false
			g.emit(gr.key, "coordinator", &events.ConsumerGroupsDestroyed{StreamKeys: []string{gr.key.StreamPrefix + ":0"}})
			return
		}
		gr.exists = true
		gr.shardCount = 1 + g.r.IntN(8)
		gr.assignable = gr.shardCount
		gr.groupEpoch, gr.assignEpoch, gr.mv = 1, 1, 1
		gr.members, gr.targets, gr.rsh, gr.unretired = map[string]*genMember{}, map[string][]int{}, nil, nil
		gr.ordered, gr.barriers = g.r.IntN(2) == 0, nil
		created := &events.GroupCreated{ShardCount: gr.shardCount, Provisioned: true, RequestedBy: "alice", Reason: "generated"}
		switch g.r.IntN(3) {
		case 0:
			created.Principal = "alice"
		case 1:
			created.Anonymous, created.ForeignShards = true, []int{0}
		}
		if gr.ordered {
			created.Ordering = events.OrderingKey
		}
		switch st := g.streams[gr.key.StreamPrefix]; {
		case st != nil:
			// A group of a stream with metadata takes its layout.
			gr.shardCount, gr.assignable, gr.mv = st.shardCount, st.shardCount, st.mv
			created.ShardCount, created.MetadataVersion, created.KeysChecked = st.shardCount, st.mv, true
			if g.r.IntN(3) == 0 {
				created.RegisteredBy = "m-first"
			}
		case g.r.IntN(2) == 0:
			// The first group of a bare prefix writes the stream's metadata.
			g.streams[gr.key.StreamPrefix] = &genStream{shardCount: gr.shardCount, mv: 1}
			g.emit(projection.GroupKey{StreamPrefix: gr.key.StreamPrefix}, "alice", &events.StreamCreated{ShardCount: gr.shardCount, Provisioned: true,
				RequestedBy: "alice", Reason: "generated", Group: gr.key.ConsumerGroup, CreatedShards: upTo(gr.shardCount)})
			created.KeysChecked = true
		}
		g.emit(gr.key, "alice", created)
		return
	}
	if g.r.IntN(40) == 0 {
		g.soloStep()
		return
	}
	live := gr.ids(projection.MemberActive)
	holding := gr.ids(projection.MemberActive, projection.MemberLeaving)
	terminal := gr.ids(projection.MemberExpired, projection.MemberFenced)
	switch x := g.r.IntN(100); {
	case x < 14 && len(gr.members) < 6 || len(gr.members) == 0:
		g.join(gr, "")
	case x < 16 && len(terminal) > 0:
		g.join(gr, g.pick(terminal))
	case x < 30 && len(live) > 0:
		id := g.pick(live)
		m := gr.members[id]
		m.epoch = gr.assignEpoch
		g.emit(gr.key, id, &events.MemberSynced{MemberID: id, MemberEpoch: m.epoch, Granted: g.subset(gr.targets[id])})
	case x < 45 && len(holding) > 0:
		id := g.pick(holding)
		m := gr.members[id]
		owned := []int{}
		if m.state == projection.MemberActive {
			owned = g.subset(gr.targets[id])
		}
		revoking := []int{}
		for _, s := range m.owned {
			if !containsInt(owned, s) && g.r.IntN(2) == 0 {
				revoking = append(revoking, s)
			}
		}
		m.owned = owned
		g.emit(gr.key, id, &events.OwnershipReported{MemberID: id, Owned: owned, Revoking: revoking})
	case x < 48 && len(holding) > 0:
		id := g.pick(holding)
		g.emit(gr.key, id, &events.RevokeAcknowledged{MemberID: id, Shards: g.subset(gr.members[id].owned)})
	case x < 51 && len(live) > 0:
		id := g.pick(live)
		g.emit(gr.key, id, &events.MemberUpdated{MemberID: id, MemberName: fmt.Sprintf("worker-%s-%d", id, g.r.IntN(100)), MaxConcurrency: g.r.IntN(16)})
	case x < 55 && len(live) > 0:
		id := g.pick(live)
		gr.members[id].state, gr.members[id].epoch = projection.MemberLeaving, -1
		g.emit(gr.key, id, &events.MemberLeft{MemberID: id, Epochs: g.bump(gr)})
		g.assign(gr)
	case x < 60 && len(live) > 0:
		ids := []string{g.pick(live)}
		if other := g.pick(live); other != ids[0] && g.r.IntN(2) == 0 {
			ids = append(ids, other)
			sort.Strings(ids)
		}
		for _, id := range ids {
			gr.members[id].state = projection.MemberExpired
			gr.members[id].epoch++
		}
		g.emit(gr.key, "coordinator", &events.MembersExpired{MemberIDs: ids, Epochs: g.bump(gr)})
		g.assign(gr)
	case x < 63 && len(holding) > 0:
		id := g.pick(holding)
		m := gr.members[id]
		wasLive := m.state == projection.MemberActive
		m.state, m.epoch, m.owned = projection.MemberFenced, m.epoch+1, nil
		g.emit(gr.key, "coordinator", &events.MemberFenced{MemberID: id, Reason: "generated", MemberEpoch: m.epoch, Epochs: g.bump(gr)})
		if wasLive {
			g.assign(gr)
		}
	case x < 67 && len(terminal) > 0:
		for _, id := range terminal {
			delete(gr.members, id)
			delete(gr.targets, id)
		}
		gr.mv++
		g.emit(gr.key, "coordinator", &events.MembersPruned{MemberIDs: terminal, MetadataVersion: gr.mv})
	case x < 88:
		g.reshard(gr)
	case x < 95:
		k := gr.key
		if g.r.IntN(3) == 0 {
			k = projection.GroupKey{StreamPrefix: "ghost", ConsumerGroup: "nobody"}
		}
		g.emit(k, "bob", &events.CommandRejected{Command: "group.delete", ErrorCode: "CONFLICT", Message: "generated", RequestedBy: "bob"})
		if g.r.IntN(4) == 0 {
			// A new leader's term marker belongs to no group.
			g.terms++
			g.emit(projection.GroupKey{}, "coordinator", &events.TermStarted{Term: g.terms, Holder: fmt.Sprintf("replica-%d#00ff", g.terms%3), URL: "http://replica:8080"})
			if g.terms%5 == 0 {
				// A repair's record belongs to no group either.
				g.emit(projection.GroupKey{}, "ops", &events.LogRepaired{RequestedBy: "ops", Reason: "generated", Skipped: []string{"1-0"}, SkippedCount: 1, PreviousLog: "{log}:before-repair:1"})
			}
			if g.terms%4 == 0 {
				// A restore continues the state before it: the previous
				// record's id (MustGeneratedLog numbers them from 1).
				g.emit(projection.GroupKey{}, "coordinator", &events.LogRestored{RestoredFrom: fmt.Sprintf("%d-0", len(g.out)), LogLastID: events.ZeroID,
					Cause: "LOG_GONE", RequestedBy: "ops", Reason: "generated", Coordinator: "replica-0"})
			}
		}
	case x < 96 && len(gr.barriers) > 0:
		// Release the barriers of the oldest cutover on some of its shards.
		b0 := gr.barriers[0]
		var shards []int
		var kept []genBarrier
		for _, b := range gr.barriers {
			if b.fence == b0.fence && (len(shards) == 0 || g.r.IntN(2) == 0) {
				shards = append(shards, b.shard)
				continue
			}
			kept = append(kept, b)
		}
		gr.barriers = kept
		g.emit(gr.key, "coordinator", &events.BarrierReleased{ReshardingID: b0.id, Fence: b0.fence, Shards: shards, Evidence: []events.BarrierProof{
			{ShardIndex: 0, StreamKey: gr.key.StreamPrefix + ":0", CutoverID: "5-0", LastDelivered: "6-0", Exists: true},
		}})
		if g.r.IntN(3) == 0 {
			g.emit(gr.key, "coordinator", &events.UnfencedWrites{ReshardingID: b0.id, Fence: b0.fence, Shards: []events.ShardWrites{
				{ShardIndex: 0, StreamKey: gr.key.StreamPrefix + ":0", Count: int64(1 + g.r.IntN(5)), FirstID: "7-0"},
			}})
		}
	case x < 96 && gr.rsh == nil && len(gr.barriers) == 0:
		gr.ordered = !gr.ordered
		o := events.OrderingNone
		if gr.ordered {
			o = events.OrderingKey
		}
		g.emit(gr.key, "alice", &events.GroupOrderingChanged{Ordering: o, RequestedBy: "alice", Reason: "generated"})
	case x < 97 && g.r.IntN(3) == 0:
		switch g.r.IntN(3) {
		case 0:
			g.emit(gr.key, "alice", &events.AutoscalingConfigured{
				Enabled: g.r.IntN(4) > 0, MinShards: 1, MaxShards: 1 + g.r.IntN(16), TargetRate: float64(g.r.IntN(5000)) + 0.5,
				MaxLagSeconds: float64(g.r.IntN(3)) * 7.5, ScaleOutCooldown: 60, ScaleInCooldown: 300, EvaluationWindow: 30 + g.r.IntN(60),
				MaxStepFactor: 2, DryRun: g.r.IntN(2) == 0, RequestedBy: "alice", Reason: "generated",
			})
		case 1:
			g.emit(gr.key, "alice", &events.AutoscalingDisabled{RequestedBy: "alice", Reason: "generated"})
		default:
			dir := events.ScaleOut
			if g.r.IntN(2) == 0 {
				dir = events.ScaleIn
			}
			g.emit(gr.key, "autoscaler", &events.AutoscalingDecided{
				From: gr.shardCount, To: 1 + g.r.IntN(8), Direction: dir, DryRun: true, Reason: "generated",
				Window: 60, Rate: float64(g.r.IntN(100000)) / 8, Shards: []events.ShardLoad{{ShardIndex: 0, Rate: 12.25, Lag: int64(g.r.IntN(10)) - 1, LagSeconds: 0.75}},
			})
		}
	case x < 97:
		gr.exists = false
		del := &events.GroupDeleted{RequestedBy: "alice", Reason: "generated", Force: g.r.IntN(2) == 0}
		if g.r.IntN(2) == 0 {
			del.Destroy, del.Expired, gr.removing = []string{gr.key.StreamPrefix + ":0", gr.key.StreamPrefix + ":1"}, g.r.IntN(2) == 0, true
		}
		g.emit(gr.key, "alice", del)
	case x < 98:
		g.emit(gr.key, "coordinator", &events.ShardsRepaired{Shards: []events.ShardRepair{
			{ShardIndex: 0, StreamKey: gr.key.StreamPrefix + ":0", StreamMissing: g.r.IntN(2) == 0, GroupMissing: true},
		}})
	default:
		g.emit(gr.key, "coordinator", &events.AssignmentComputed{AssignmentEpoch: gr.assignEpoch, Targets: gr.copyTargets()})
	}
}

// cutover records the fences and barriers of a layout change of an ordered
// group (the metadata version the change is about to bump to).
func (g *generator) cutover(gr *genGroup, id string, from, to int) {
	fence := gr.mv + 1
	ev := &events.ReshardingCutover{ReshardingID: id, Fence: fence, FromCount: from, ToCount: to}
	for s := 0; s < from; s++ {
		ev.Shards = append(ev.Shards, events.ShardCutover{ShardIndex: s, StreamKey: fmt.Sprintf("%s:%d", gr.key.StreamPrefix, s), LastID: fmt.Sprintf("%d-%d", 100+g.r.IntN(50), g.r.IntN(3)), Fenced: g.r.IntN(4) > 0})
	}
	for t := 0; t < to; t++ {
		if g.r.IntN(2) == 0 {
			continue
		}
		after := "0-0"
		if t < from {
			after = ev.Shards[t].LastID
		}
		ev.Barriers = append(ev.Barriers, events.CutoverBarrier{ShardIndex: t, After: after, Sources: []int{(t + 1) % from}})
		gr.barriers = append(gr.barriers, genBarrier{id: id, fence: fence, shard: t})
	}
	g.emit(gr.key, "coordinator", ev)
}

func (g *generator) join(gr *genGroup, id string) {
	rejoin := id != ""
	if !rejoin {
		gr.nextMember++
		id = fmt.Sprintf("m-%d", gr.nextMember)
	}
	gr.members[id] = &genMember{state: projection.MemberActive}
	g.emit(gr.key, id, &events.MemberJoined{MemberID: id, MemberName: "worker-" + id, MaxConcurrency: 1 + g.r.IntN(8), Rejoin: rejoin, Principal: []string{"", "svc-a", "svc-b"}[int(id[len(id)-1])%3], Epochs: g.bump(gr)})
	g.assign(gr)
}

func (g *generator) evidence(gr *genGroup, lo, hi int) []events.ShardDrain {
	out := []events.ShardDrain{}
	for s := lo; s < hi; s++ {
		out = append(out, events.ShardDrain{
			ShardIndex: s, StreamKey: fmt.Sprintf("%s:%d", gr.key.StreamPrefix, s), Exists: g.r.IntN(4) > 0,
			Groups: []events.GroupDrain{{Name: gr.key.ConsumerGroup, Pending: int64(g.r.IntN(2)), Lag: int64(g.r.IntN(3) - 1)}},
		})
	}
	return out
}

// reshard moves the group's resharding one step (or starts or retires one).
func (g *generator) reshard(gr *genGroup) {
	k := gr.key
	rs := gr.rsh
	if rs == nil {
		if len(gr.unretired) > 0 && g.r.IntN(2) == 0 {
			id := gr.unretired[0]
			gr.unretired = gr.unretired[1:]
			g.emit(k, "coordinator", &events.ShardsRetired{ReshardingID: id, StreamKeys: []string{k.StreamPrefix + ":9"}, Kept: g.r.IntN(2) == 0})
			return
		}
		gr.nextResharding++
		to := 1 + g.r.IntN(8)
		if to == gr.shardCount {
			to++
		}
		gr.rsh = &genResharding{id: fmt.Sprintf("rsh-%d", gr.nextResharding), from: gr.shardCount, to: to, stage: "preparing"}
		prep := &events.ReshardingPreparing{ReshardingID: gr.rsh.id, FromShardCount: gr.shardCount, ToShardCount: to, RequestedBy: "alice", Reason: "generated"}
		if g.r.IntN(2) == 0 {
			prep.KeysChecked = true
			for i := gr.shardCount; i < to; i++ {
				prep.CreatedShards = append(prep.CreatedShards, i)
			}
		}
		g.emit(k, "alice", prep)
		return
	}
	scaleIn := rs.to < rs.from
	switch rs.stage {
	case "preparing":
		if g.r.IntN(4) == 0 {
			g.rollBack(gr, "metadata")
			return
		}
		rs.stage = "provisioned"
		g.emit(k, "coordinator", &events.ReshardingProvisioned{ReshardingID: rs.id, Shards: max(rs.from, rs.to)})
	case "provisioned":
		if gr.ordered {
			g.cutover(gr, rs.id, rs.from, rs.to)
		}
		rs.stage = "active"
		gr.shardCount, gr.assignable = rs.to, rs.to
		if scaleIn {
			gr.assignable = rs.from
		}
		g.emit(k, "coordinator", &events.ReshardingActivated{ReshardingID: rs.id, ShardCount: gr.shardCount, AssignableCount: gr.assignable, Epochs: g.bump(gr),
			StreamMetadataVersion: g.streamChange(gr, gr.shardCount)})
		g.assign(gr)
	case "active":
		if g.r.IntN(5) == 0 {
			if scaleIn {
				g.rollBack(gr, "metadata")
			} else {
				g.rollBack(gr, "drain")
			}
			return
		}
		rs.stage = "draining"
		g.emit(k, "coordinator", &events.ReshardingDraining{ReshardingID: rs.id, Epochs: g.bump(gr)})
	case "draining":
		if !scaleIn {
			g.complete(gr, projection.Deprecated, nil)
			return
		}
		rs.stage = "drained"
		gr.assignable = rs.to
		g.emit(k, "coordinator", &events.ReshardingDrained{ReshardingID: rs.id, AssignableCount: gr.assignable, Evidence: g.evidence(gr, rs.to, rs.from), Epochs: g.bump(gr)})
		g.assign(gr)
	case "drained":
		if g.r.IntN(4) == 0 {
			rs.stage = "draining"
			gr.assignable = rs.from
			g.emit(k, "coordinator", &events.ReshardingReopened{ReshardingID: rs.id, AssignableCount: gr.assignable, Evidence: g.evidence(gr, rs.to, rs.from), Epochs: g.bump(gr)})
			g.assign(gr)
			return
		}
		g.complete(gr, projection.Deprecated, g.evidence(gr, rs.to, rs.from))
	case "rolling-back":
		rs.stage = "rolled-back-drained"
		gr.assignable = rs.from
		g.emit(k, "coordinator", &events.ReshardingDrained{ReshardingID: rs.id, AssignableCount: gr.assignable, Evidence: g.evidence(gr, rs.from, rs.to), Epochs: g.bump(gr)})
		g.assign(gr)
	case "rolled-back-drained":
		g.complete(gr, projection.RolledBack, nil)
	}
}

func (g *generator) rollBack(gr *genGroup, policy string) {
	rs := gr.rsh
	state := projection.RolledBack
	if gr.ordered && rs.stage != "preparing" && rs.stage != "provisioned" {
		g.cutover(gr, rs.id, rs.to, rs.from) // the layout goes back
	}
	gr.shardCount, gr.assignable = rs.from, rs.from
	if policy == "drain" {
		state = projection.RollingBack
		gr.assignable = rs.to
		rs.stage = "rolling-back"
	} else {
		gr.rsh = nil
	}
	var streamMV int64
	if rs.stage != "preparing" {
		streamMV = g.streamChange(gr, gr.shardCount)
	}
	g.emit(gr.key, "bob", &events.ReshardingRolledBack{
		ReshardingID: rs.id, Policy: policy, State: state, ShardCount: gr.shardCount, AssignableCount: gr.assignable,
		RequestedBy: "bob", Reason: "generated", Epochs: g.bump(gr), StreamMetadataVersion: streamMV,
	})
	g.assign(gr)
}

func (g *generator) complete(gr *genGroup, state string, evidence []events.ShardDrain) {
	rs := gr.rsh
	gr.mv++
	g.emit(gr.key, "coordinator", &events.ReshardingCompleted{ReshardingID: rs.id, State: state, Evidence: evidence, MetadataVersion: gr.mv})
	if rs.to < rs.from || state == projection.RolledBack {
		gr.unretired = append(gr.unretired, rs.id)
	}
	gr.rsh = nil
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// MustGeneratedLog encodes n generated records into a MemLog, appended in
// batches of 1 to 5 as the coordinator would, and returns the log and the
// records as they were before encoding (with their ids), which is what the
// coordinator applies to its projection after an append.
func MustGeneratedLog(tb testing.TB, seed uint64, n int) (*events.MemLog, []events.Record) {
	tb.Helper()
	recs := generateRecords(seed, n)
	batchRand := rand.New(rand.NewPCG(seed, 1))
	l := events.NewMemLog()
	ctx := context.Background()
	last := events.ZeroID
	for i := 0; i < len(recs); {
		size := min(1+batchRand.IntN(5), len(recs)-i)
		batch := make([][]byte, size)
		for j := range batch {
			data, err := events.Encode(recs[i+j].Meta, recs[i+j].Event)
			if err != nil {
				tb.Fatalf("encode %s: %v", recs[i+j].Type, err)
			}
			batch[j] = data
		}
		ids, err := l.Append(ctx, last, batch)
		if err != nil {
			tb.Fatalf("append: %v", err)
		}
		for j, id := range ids {
			recs[i+j].ID = id
		}
		last = ids[len(ids)-1]
		i += size
	}
	return l, recs
}

var determinismSeeds = []uint64{1, 2, 3, 42, 20240501}

const generatedEvents = 3000

func TestGeneratorCoversEveryEventType(t *testing.T) {
	seen := map[string]bool{}
	for _, seed := range determinismSeeds {
		for _, rec := range generateRecords(seed, generatedEvents) {
			seen[rec.Type] = true
		}
	}
	for _, typ := range events.Types() {
		if !seen[typ] {
			t.Errorf("the generator never writes %q", typ)
		}
	}
}

func TestFoldIsDeterministic(t *testing.T) {
	for _, seed := range determinismSeeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			l, _ := MustGeneratedLog(t, seed, generatedEvents)
			first := MustFold(t, MustDecodeAll(t, MustReadEntries(t, l)))
			second := MustFold(t, MustDecodeAll(t, MustReadEntries(t, l)))
			assertSameState(t, "two folds of one log", second, first)
			if first.LastID() != MustReadEntries(t, l)[generatedEvents-1].ID || first.Applied() != generatedEvents {
				t.Errorf("lastID/applied = %s/%d", first.LastID(), first.Applied())
			}
		})
	}
}

func TestSnapshotThenFoldEqualsFullFold(t *testing.T) {
	for _, seed := range determinismSeeds[:3] {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			l, _ := MustGeneratedLog(t, seed, generatedEvents)
			recs := MustDecodeAll(t, MustReadEntries(t, l))
			full := MustFold(t, recs)
			r := rand.New(rand.NewPCG(seed, 2))
			for _, n := range []int{0, 1, len(recs) / 3, r.IntN(len(recs)), len(recs) - 1, len(recs)} {
				t.Run(fmt.Sprintf("after=%d", n), func(t *testing.T) {
					partial := MustFold(t, recs[:n])
					restored, err := projection.Restore(MustEncodeState(t, partial))
					if err != nil {
						t.Fatalf("Restore: %v", err)
					}
					assertSameState(t, "restored snapshot", restored, partial)
					if restored.LastID() != partial.LastID() {
						t.Fatalf("restored lastID = %s, want %s", restored.LastID(), partial.LastID())
					}
					MustApply(t, restored, recs[n:]...)
					assertSameState(t, "snapshot plus the rest", restored, full)
				})
			}
		})
	}
}

func TestCaptureIsNotAffectedByLaterApplies(t *testing.T) {
	l, _ := MustGeneratedLog(t, 7, 1000)
	recs := MustDecodeAll(t, MustReadEntries(t, l))
	s := MustFold(t, recs[:500])
	capture := s.Capture()
	MustApply(t, s, recs[500:]...)
	data, err := capture.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if capture.LastID() != recs[499].ID {
		t.Errorf("capture lastID = %s, want %s", capture.LastID(), recs[499].ID)
	}
	if got, want := canonical(t, data), MustCanonicalState(t, MustFold(t, recs[:500])); !reflect.DeepEqual(got, want) {
		t.Error("a capture changed when the state applied more records")
	}
}

// TestLiveRecordsFoldLikeDecoded: the coordinator applies the records it just
// appended without decoding them; a replay decodes them. Both must give the
// same state.
func TestLiveRecordsFoldLikeDecoded(t *testing.T) {
	for _, seed := range determinismSeeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			l, live := MustGeneratedLog(t, seed, generatedEvents)
			replayed := MustFold(t, MustDecodeAll(t, MustReadEntries(t, l)))
			assertSameState(t, "live fold vs replay", MustFold(t, live), replayed)
		})
	}
}

// TestOverlayMatchesState: folding a batch into an Overlay gives the groups
// the State has after applying the same records, and leaves the State alone.
func TestOverlayMatchesState(t *testing.T) {
	for _, seed := range determinismSeeds[:3] {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			l, _ := MustGeneratedLog(t, seed, generatedEvents)
			recs := MustDecodeAll(t, MustReadEntries(t, l))
			r := rand.New(rand.NewPCG(seed, 3))
			s := projection.New()
			for i := 0; i < len(recs); {
				batch := recs[i:min(i+1+r.IntN(20), len(recs))]
				i += len(batch)

				s.Lock()
				touched := map[projection.GroupKey]bool{}
				for _, rec := range batch {
					touched[projection.KeyOf(rec)] = true
				}
				before := map[projection.GroupKey]any{}
				for k := range touched {
					before[k] = MustCanonicalGroup(t, s.GroupLocked(k))
				}
				lastID := s.LastIDLocked()
				ov := s.NewOverlayLocked()
				for _, rec := range batch {
					ov.Apply(rec)
				}
				seen := map[projection.GroupKey]any{}
				for k := range touched {
					seen[k] = MustCanonicalGroup(t, ov.Group(k))
				}
				seenStreams := map[string]any{}
				for k := range touched {
					seenStreams[k.StreamPrefix] = mustCanonicalStream(t, ov.Stream(k.StreamPrefix))
				}
				keys := ov.Keys()
				for k := range touched {
					if !reflect.DeepEqual(MustCanonicalGroup(t, s.GroupLocked(k)), before[k]) || s.LastIDLocked() != lastID {
						s.Unlock()
						t.Fatalf("batch ending %s: folding into the overlay changed the state's group %v", batch[len(batch)-1].ID, k)
					}
				}
				for _, rec := range batch {
					if err := s.ApplyLocked(rec); err != nil {
						s.Unlock()
						t.Fatal(err)
					}
				}
				stateKeys := s.GroupKeysLocked()
				s.Unlock()

				for k, want := range seen {
					got, _ := s.Group(k)
					if !reflect.DeepEqual(want, MustCanonicalGroup(t, got)) {
						t.Fatalf("batch ending %s: overlay group %v differs from the state's", batch[len(batch)-1].ID, k)
					}
				}
				for p, want := range seenStreams {
					got, _ := s.Stream(p)
					if !reflect.DeepEqual(want, mustCanonicalStream(t, got)) {
						t.Fatalf("batch ending %s: overlay stream %s differs from the state's", batch[len(batch)-1].ID, p)
					}
				}
				if !reflect.DeepEqual(keys, stateKeys) {
					t.Fatalf("batch ending %s: overlay sees groups %v, state has %v", batch[len(batch)-1].ID, keys, stateKeys)
				}
			}
		})
	}
}

// TestOverlayKeysAfterDeleteAndRecreate: Keys lists the groups as the State will
// list them once the batch is applied: each once, in creation order.
func TestOverlayKeysAfterDeleteAndRecreate(t *testing.T) {
	ghost := projection.GroupKey{StreamPrefix: "ghost", ConsumerGroup: "g"}
	tests := []struct {
		name  string
		base  []projection.GroupKey // groups created before the overlay
		batch []struct {
			k      projection.GroupKey
			delete bool
		}
	}{
		{
			name: "create, delete and create a new group",
			base: []projection.GroupKey{orders},
			batch: []struct {
				k      projection.GroupKey
				delete bool
			}{{ghost, false}, {ghost, true}, {ghost, false}},
		},
		{
			name: "delete and recreate an existing group",
			base: []projection.GroupKey{orders, payments},
			batch: []struct {
				k      projection.GroupKey
				delete bool
			}{{orders, true}, {orders, false}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r recorder
			s := projection.New()
			for _, k := range tc.base {
				MustApply(t, s, r.rec(k, created()))
			}
			var batch []events.Record
			for _, b := range tc.batch {
				var ev events.Event = created()
				if b.delete {
					ev = &events.GroupDeleted{RequestedBy: "alice"}
				}
				batch = append(batch, r.rec(b.k, ev))
			}
			s.Lock()
			ov := s.NewOverlayLocked()
			for _, rec := range batch {
				ov.Apply(rec)
			}
			got := ov.Keys()
			for _, rec := range batch {
				if err := s.ApplyLocked(rec); err != nil {
					t.Fatal(err)
				}
			}
			want := s.GroupKeysLocked()
			s.Unlock()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("overlay Keys() = %v, state lists %v after the batch", got, want)
			}
		})
	}
}

// upTo is the shard indexes 0..n-1.
func upTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func mustCanonicalStream(tb testing.TB, st *projection.Stream) any {
	tb.Helper()
	if st == nil {
		return nil
	}
	data, err := events.Marshal(st)
	if err != nil {
		tb.Fatal(err)
	}
	return canonical(tb, data)
}
