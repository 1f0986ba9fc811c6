package main

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

// logGen writes a plausible coordinator history without running the
// coordinator (driving 1,000,000 events through heartbeats would be slow): a few
// groups, members joining, leaving and expiring, the member.synced /
// ownership_reported / revoke_acknowledged rounds that follow every new target,
// pruning, rejected commands, and scale-out and scale-in reshardings. Each
// decision reads a shadow projection folded from the events written so far, so
// epochs, targets (commands.Assign) and grants follow the protocol's order, and
// its records after the first are marked as continuing it, as the writer
// marks them (events.Meta.Continues).
type logGen struct {
	rng    *rand.Rand
	shadow *projection.State
	now    time.Time
	limit  int
	n      int
	counts map[string]int
	// inDecision counts the records of the decision being written (decide
	// starts one).
	inDecision int
	req        string // the decision's request id

	out   *events.MemLog
	last  string
	batch [][]byte

	groups  []projection.GroupKey
	members map[projection.GroupKey]int // member ids handed out
	reshard int
}

const (
	genGroups     = 6
	genMinMembers = 3
	genMaxMembers = 40
)

var genShardCounts = []int{16, 32, 64, 128, 64, 32}

// generateLog returns a MemLog holding exactly n generated events, and how many
// of each type it holds.
func generateLog(ctx context.Context, n int, seed int64) (*events.MemLog, map[string]int, error) {
	g := &logGen{
		rng: rand.New(rand.NewSource(seed)), shadow: projection.New(),
		now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), limit: n, counts: map[string]int{},
		out: events.NewMemLog(), last: events.ZeroID, members: map[projection.GroupKey]int{},
	}
	for i := 0; i < genGroups; i++ {
		k := projection.GroupKey{StreamPrefix: fmt.Sprintf("orders-%d", i), ConsumerGroup: "billing"}
		g.groups = append(g.groups, k)
		g.decide()
		g.emit(k, "ops", &events.GroupCreated{ShardCount: genShardCounts[i%len(genShardCounts)], Provisioned: true, RequestedBy: "ops", Reason: "benchmark"})
	}
	for g.n < g.limit {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		g.step(g.groups[g.rng.Intn(len(g.groups))])
		if len(g.batch) >= 4096 {
			if err := g.flush(ctx); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := g.flush(ctx); err != nil {
		return nil, nil, err
	}
	return g.out, g.counts, nil
}

func (g *logGen) flush(ctx context.Context) error {
	if len(g.batch) == 0 {
		return nil
	}
	ids, err := g.out.Append(ctx, g.last, g.batch)
	if err != nil {
		return err
	}
	g.last, g.batch = ids[len(ids)-1], g.batch[:0]
	return nil
}

// decide starts a decision: the records emitted until the next one are its
// own, written at one time under one request.
func (g *logGen) decide() {
	g.inDecision = 0
	g.req = fmt.Sprintf("req-%08d", g.n+1)
	g.now = g.now.Add(time.Duration(1+g.rng.Intn(20)) * time.Millisecond)
}

// emit encodes an event of the decision being written for the log and folds
// it into the shadow. Past the limit it does nothing, so the log ends inside
// an episode, as a log may.
func (g *logGen) emit(k projection.GroupKey, actor string, ev events.Event) {
	if g.n >= g.limit {
		return
	}
	g.n++
	m := events.Meta{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, Time: g.now, Actor: actor, Continues: g.inDecision > 0}
	g.inDecision++
	if actor != commands.Actor {
		m.RequestID = g.req
	}
	data, err := events.Encode(m, ev)
	if err != nil {
		panic(fmt.Sprintf("generate: encode %s: %v", ev.EventType(), err))
	}
	g.batch = append(g.batch, data)
	g.counts[ev.EventType()]++
	if err := g.shadow.Apply(events.Record{ID: fmt.Sprintf("%d-0", g.n), Type: ev.EventType(), Schema: events.SchemaVersion, Meta: m, Event: ev}); err != nil {
		panic(fmt.Sprintf("generate: shadow fold: %v", err))
	}
}

// group is the shadow's group; only this goroutine touches the shadow.
func (g *logGen) group(k projection.GroupKey) projection.ReadOnlyGroup {
	var out projection.ReadOnlyGroup
	g.shadow.Read(func(st projection.Reader) { out = st.Group(k) })
	return out
}

func (g *logGen) step(k projection.GroupKey) {
	g.decide()
	grp := g.group(k)
	live := grp.LiveMemberIDs()
	r := g.rng.Intn(100)
	switch {
	case len(live) < genMinMembers:
		g.join(k)
	case r < 35:
		if len(live) < genMaxMembers {
			g.join(k)
		} else {
			g.leave(k, live)
		}
	case r < 55:
		g.leave(k, live)
	case r < 65:
		g.expire(k, live)
	case r < 73:
		id := live[g.rng.Intn(len(live))]
		g.emit(k, id, &events.MemberUpdated{MemberID: id, MemberName: id, MaxConcurrency: 1 + g.rng.Intn(16)})
	case r < 83:
		g.prune(k)
	case r < 88:
		g.emit(k, "ops", &events.CommandRejected{Command: "group.scale", ErrorCode: "SHARD_COUNT_UNCHANGED", Message: "group already has this shard count", RequestedBy: "ops"})
	case r < 93 && !grp.Active().Exists():
		g.resharding(k)
	default:
		g.join(k)
	}
}

func bumped(grp projection.ReadOnlyGroup) events.Epochs {
	return events.Epochs{GroupEpoch: grp.GroupEpoch() + 1, MetadataVersion: grp.MetadataVersion() + 1}
}

func (g *logGen) join(k projection.GroupKey) {
	g.members[k]++
	id := fmt.Sprintf("member-%05d", g.members[k])
	g.emit(k, id, &events.MemberJoined{MemberID: id, MemberName: id, MaxConcurrency: 4, Epochs: bumped(g.group(k))})
	g.reassign(k)
	g.converge(k)
}

// leave is a graceful leave of a member that stopped reading at once.
func (g *logGen) leave(k projection.GroupKey, live []string) {
	id := live[g.rng.Intn(len(live))]
	g.emit(k, id, &events.MemberLeft{MemberID: id, Epochs: bumped(g.group(k))})
	if m := g.group(k).Member(id); m.Exists() && (m.Current().Len() > 0 || m.Revoking().Len() > 0) {
		g.emit(k, id, &events.OwnershipReported{MemberID: id, Owned: []int{}, Revoking: []int{}})
	}
	g.reassign(k)
	g.converge(k)
}

func (g *logGen) expire(k projection.GroupKey, live []string) {
	ids := []string{live[g.rng.Intn(len(live))]}
	if len(live) > genMinMembers+1 && g.rng.Intn(4) == 0 {
		if other := live[g.rng.Intn(len(live))]; other != ids[0] {
			ids = append(ids, other)
		}
	}
	sort.Strings(ids)
	g.emit(k, commands.Actor, &events.MembersExpired{MemberIDs: ids, Epochs: bumped(g.group(k))})
	g.reassign(k)
	g.converge(k)
}

func (g *logGen) prune(k projection.GroupKey) {
	grp := g.group(k)
	var gone []string
	for _, id := range grp.MemberIDs() {
		m := grp.Member(id)
		if m.State() == projection.MemberExpired || m.State() == projection.MemberFenced ||
			(m.State() == projection.MemberLeaving && m.Current().Len() == 0 && m.Revoking().Len() == 0) {
			gone = append(gone, id)
		}
	}
	if len(gone) == 0 {
		g.join(k)
		return
	}
	g.emit(k, commands.Actor, &events.MembersPruned{MemberIDs: gone, MetadataVersion: grp.MetadataVersion() + 1})
}

// reassign records a new target when the live set or the assignable count changed.
func (g *logGen) reassign(k projection.GroupKey) {
	grp := g.group(k)
	targets := commands.Assign(grp.Targets(), grp.LiveMemberIDs(), grp.AssignableCount())
	// What the coordinator writes: only the members whose target changed.
	ev := &events.AssignmentChanged{AssignmentEpoch: grp.GroupEpoch(), Targets: events.Targets{}}
	for id, t := range targets {
		if prev, ok := grp.TargetOf(id); !ok || fmt.Sprint(prev) != fmt.Sprint(t) {
			ev.Targets[id] = t
		}
	}
	for id := range grp.Targets() {
		if _, ok := targets[id]; !ok {
			ev.Removed = append(ev.Removed, id)
		}
	}
	sort.Strings(ev.Removed)
	g.emit(k, commands.Actor, ev)
}

// converge plays heartbeat rounds until every live member holds its target, as
// the coordinator records them: a member reports what its last grant allowed
// (releasing what it lost), then is granted what nobody else holds any more.
func (g *logGen) converge(k projection.GroupKey) {
	for round := 0; round < 16 && g.n < g.limit; round++ {
		before := g.n
		for _, id := range g.group(k).LiveMemberIDs() {
			g.decide() // the member's heartbeat
			grp := g.group(k)
			m := grp.Member(id)
			if m.Epoch() > 0 && !m.Current().Equal(m.Granted().Copy()) {
				released := minusInts(m.Current().Copy(), m.Granted().Copy())
				g.emit(k, id, &events.OwnershipReported{MemberID: id, Owned: projection.SortedInts(m.Granted().Copy()), Revoking: []int{}})
				if acked := minusInts(released, grp.Target(id)); len(acked) > 0 {
					g.emit(k, id, &events.RevokeAcknowledged{MemberID: id, Shards: acked})
				}
			}
			assigned, _ := grp.Grantable(id)
			// The coordinator records a member's epoch only with a new grant.
			if !m.Granted().Equal(assigned) {
				g.emit(k, id, &events.MemberSynced{MemberID: id, MemberEpoch: grp.AssignmentEpoch(), Granted: assigned})
			}
		}
		if g.n == before {
			return
		}
	}
}

// resharding doubles or halves the shard count and plays the whole lifecycle:
// a scale-out completes once converged; a scale-in drains, revokes the removed
// shards, completes and retires their streams.
func (g *logGen) resharding(k projection.GroupKey) {
	grp := g.group(k)
	from := grp.ShardCount()
	to := from * 2
	if from >= 256 || (from > 16 && g.rng.Intn(2) == 0) {
		to = from / 2
	}
	g.reshard++
	id := fmt.Sprintf("reshard-%06d", g.reshard)
	g.emit(k, "ops", &events.ReshardingPreparing{ReshardingID: id, FromShardCount: from, ToShardCount: to, RequestedBy: "ops", Reason: "benchmark"})
	g.decide() // provisioned, the activation and its target
	g.emit(k, commands.Actor, &events.ReshardingProvisioned{ReshardingID: id, Shards: to})
	g.emit(k, commands.Actor, &events.ReshardingActivated{ReshardingID: id, ShardCount: to, AssignableCount: max(from, to), Epochs: bumped(g.group(k))})
	g.reassign(k)
	g.converge(k)
	if to > from {
		g.decide()
		g.emit(k, commands.Actor, &events.ReshardingCompleted{ReshardingID: id, State: projection.Deprecated, MetadataVersion: g.group(k).MetadataVersion() + 1})
		return
	}
	g.decide() // draining and its target
	g.emit(k, commands.Actor, &events.ReshardingDraining{ReshardingID: id, Epochs: bumped(g.group(k))})
	g.reassign(k)
	g.converge(k)
	var evidence []events.ShardDrain
	var keys []string
	for s := to; s < from; s++ {
		key := routing.StreamKey(k.StreamPrefix, s)
		keys = append(keys, key)
		evidence = append(evidence, events.ShardDrain{ShardIndex: s, StreamKey: key, Exists: true, Groups: []events.GroupDrain{{Name: k.ConsumerGroup}}})
	}
	g.decide() // drained and its target
	g.emit(k, commands.Actor, &events.ReshardingDrained{ReshardingID: id, AssignableCount: to, Evidence: evidence, Epochs: bumped(g.group(k))})
	g.reassign(k)
	g.converge(k)
	g.decide()
	g.emit(k, commands.Actor, &events.ReshardingCompleted{ReshardingID: id, State: projection.Deprecated, Evidence: evidence, MetadataVersion: g.group(k).MetadataVersion() + 1})
	g.decide()
	g.emit(k, commands.Actor, &events.ShardsRetired{ReshardingID: id, StreamKeys: keys})
}

func minusInts(a, b []int) []int {
	out := []int{}
	for _, x := range a {
		found := false
		for _, y := range b {
			found = found || x == y
		}
		if !found {
			out = append(out, x)
		}
	}
	return out
}
