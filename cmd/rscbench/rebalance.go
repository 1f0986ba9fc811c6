package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// virtualClock is the coordinator's clock in the rebalance benchmark: one round
// is one heartbeat interval, whatever the machine's speed.
type virtualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *virtualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// rebalanceSim is one group on an in-process coordinator over an events.MemLog.
type rebalanceSim struct {
	c     *coordinator.Coordinator
	log   *events.MemLog
	clock *virtualClock
	k     projection.GroupKey
}

// runRebalance lets members join a group and converge, then some leave
// gracefully, counting heartbeat rounds until the group is stable and the shards
// that moved, against the fewest moves possible.
func (b *bench) runRebalance(ctx context.Context, rep *Report) error {
	o := b.o
	b.logf("rebalance: %d members join a %d-shard group, then %d leave", o.rbMembers, o.rbShards, o.rbLeavers)
	sim := &rebalanceSim{
		log:   events.NewMemLog(),
		clock: &virtualClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
		k:     projection.GroupKey{StreamPrefix: "rebalance", ConsumerGroup: "workers"},
	}
	// The ticker never fires on its own: the benchmark ticks once per round.
	var err error
	if sim.c, err = runCoordinator(ctx, coordinator.Config{
		DisableProvisioning: true, TickInterval: time.Hour, SnapshotEvery: -1,
		MaxShardCount: max(1024, o.rbShards), Logger: zerolog.Nop(),
		MemberChurnPerMinute: -1, PrincipalChurnPerMinute: -1, // joins on a virtual clock: the budgets are not measured here
	}, sim.log, nil, nil, sim.clock); err != nil {
		return err
	}
	defer sim.c.Close()
	count := o.rbShards
	if _, err := sim.c.CreateGroup(ctx, events.Meta{Actor: "rscbench"}, commands.CreateGroupInput{
		StreamPrefix: sim.k.StreamPrefix, ConsumerGroup: sim.k.ConsumerGroup, InitialShardCount: &count, RequestedBy: "rscbench", Reason: "benchmark",
	}); err != nil {
		return err
	}
	members := make([]*member, o.rbMembers)
	for i := range members {
		members[i] = &member{id: fmt.Sprintf("member-%03d", i), prefix: sim.k.StreamPrefix, group: sim.k.ConsumerGroup}
	}

	// Joins: every member's first heartbeat is in round 1.
	empty := make([]string, o.rbShards)
	pos0, _ := sim.log.Len(ctx)
	join, err := sim.phase(ctx, "join", members, nil, pos0)
	if err != nil {
		return err
	}

	// Leaves, spread over the member list: a leaver's only heartbeat is its leave
	// in the first round.
	leaving := map[string]bool{}
	for i := 0; i < o.rbLeavers; i++ {
		leaving[members[i*o.rbMembers/o.rbLeavers].id] = true
	}
	mustMove := 0
	for _, owner := range join.owners {
		if leaving[owner] {
			mustMove++
		}
	}
	leave, err := sim.phase(ctx, "leave", members, leaving, join.pos)
	if err != nil {
		return err
	}

	s := rep.section("heartbeat.rebalance", "rebalance in-process (Coordinator on events.MemLog, virtual clock): rounds until stable and shards moved vs the minimum")
	s.param("shards", o.rbShards)
	s.param("members", o.rbMembers)
	s.param("leavers", o.rbLeavers)
	s.param("round", "every live member heartbeats once, then the clock moves one heartbeat interval and maintenance ticks")
	s.param("stable", "group STABLE and every live member reporting exactly its target")
	s.param("loadAfterJoin", join.loads)
	s.param("loadAfterLeave", leave.loads)
	s.info("join: rounds until stable", float64(join.rounds), "rounds")
	s.baseline("join: minimum (every shard assigned once)", float64(o.rbShards), "shards")
	s.measured("join: shards assigned, empty -> stable", float64(movedShards(empty, join.owners)), "shards", "join: minimum (every shard assigned once)")
	s.measured("join: grants while converging", float64(join.grants), "shards", "join: minimum (every shard assigned once)")
	s.info("join: events appended", float64(join.pos-pos0), "events")
	s.info("join: wall time", ms(join.time), "ms")
	s.info("leave: rounds until stable", float64(leave.rounds), "rounds")
	s.baseline("leave: minimum (the leavers' shards)", float64(mustMove), "shards")
	s.measured("leave: shards moved between stable states", float64(movedShards(join.owners, leave.owners)), "shards", "leave: minimum (the leavers' shards)")
	s.measured("leave: grants while converging", float64(leave.grants), "shards", "leave: minimum (the leavers' shards)")
	s.info("leave: events appended", float64(leave.pos-join.pos), "events")
	s.info("leave: wall time", ms(leave.time), "ms")
	return nil
}

// rebalancePhase is what one phase of the simulation did: heartbeat rounds
// until stable and their wall time, the log's length after them, the owners
// and loads then, and the shards granted while converging.
type rebalancePhase struct {
	rounds int
	time   time.Duration
	pos    int64
	owners []string
	loads  string
	grants int
}

// phase runs rounds until the group is stable (the members in leaving leave)
// from log position pos and measures them; errors of the rounds are prefixed
// with name.
func (sim *rebalanceSim) phase(ctx context.Context, name string, members []*member, leaving map[string]bool, pos int64) (rebalancePhase, error) {
	var ph rebalancePhase
	t0 := time.Now()
	granted := sim.granted()
	rounds, err := sim.roundsUntilStable(ctx, members, leaving)
	if err != nil {
		return ph, fmt.Errorf("%s: %w", name, err)
	}
	ph.rounds, ph.time = rounds, time.Since(t0)
	ph.pos, _ = sim.log.Len(ctx)
	ph.owners, ph.loads = sim.owners()
	ph.grants, err = sim.grants(pos, ph.pos, granted)
	return ph, err
}

// roundsUntilStable heartbeats in rounds until the group is stable. Members in
// leaving send their leave (epoch -1) in the first round and nothing after.
func (sim *rebalanceSim) roundsUntilStable(ctx context.Context, members []*member, leaving map[string]bool) (int, error) {
	interval := sim.c.Config().HeartbeatInterval
	for round := 1; round <= maxConvergeRounds; round++ {
		var live []*member
		for _, m := range members {
			if m.epoch == -1 {
				continue
			}
			leave := leaving[m.id]
			req := m.request(leave)
			resp, err := sim.c.Heartbeat(ctx, sim.k, m.id, "", req)
			if err != nil {
				return round, fmt.Errorf("heartbeat of %s: %w", m.id, err)
			}
			if leave {
				if resp.Status != wire.StatusOK {
					return round, fmt.Errorf("leave of %s answered %s", m.id, resp.Status)
				}
				m.epoch, m.owned = -1, nil
				continue
			}
			if err := m.adopt(req, resp); err != nil {
				return round, err
			}
			live = append(live, m)
		}
		sim.clock.advance(interval)
		sim.c.Tick(ctx)
		if sim.stable(live) {
			return round, nil
		}
	}
	return maxConvergeRounds, fmt.Errorf("not stable after %d rounds", maxConvergeRounds)
}

// stable: the group is STABLE and every live member reports exactly its target.
func (sim *rebalanceSim) stable(live []*member) bool {
	g, ok := sim.c.State().Group(sim.k)
	if !ok || g.State() != "STABLE" {
		return false
	}
	for _, m := range live {
		if !slices.Equal(m.owned, g.Target(m.id)) {
			return false
		}
	}
	return true
}

// owners is each shard's owner ("" for none) and the spread of shards per live member.
func (sim *rebalanceSim) owners() ([]string, string) {
	g, _ := sim.c.State().Group(sim.k)
	out := make([]string, g.ShardCount)
	lo, hi := -1, 0
	for _, id := range g.LiveMemberIDs() {
		m := g.Member(id)
		for _, s := range m.Current {
			if s < len(out) {
				out[s] = id
			}
		}
		n := len(m.Current)
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	return out, fmt.Sprintf("%d..%d shards per member", max(lo, 0), hi)
}

func (sim *rebalanceSim) granted() map[string][]int {
	g, _ := sim.c.State().Group(sim.k)
	out := map[string][]int{}
	for id, m := range g.EachMember() {
		out[id] = m.Granted
	}
	return out
}

// grants counts shard hand-offs in log entries [from, to): shards that appear in
// a member.synced grant that the member was not granted before.
func (sim *rebalanceSim) grants(from, to int64, granted map[string][]int) (int, error) {
	entries := sim.log.Entries()[from:to]
	n := 0
	for _, e := range entries {
		rec, err := events.Decode(e.ID, e.Data)
		if err != nil {
			return 0, err
		}
		switch ev := rec.Event.(type) {
		case *events.MemberSynced:
			n += len(minusInts(ev.Granted, granted[ev.MemberID]))
			granted[ev.MemberID] = ev.Granted
		case *events.MemberJoined:
			granted[ev.MemberID] = nil
		case *events.MemberLeft:
			granted[ev.MemberID] = nil
		case *events.MemberFenced:
			granted[ev.MemberID] = nil
		case *events.MembersExpired:
			for _, id := range ev.MemberIDs {
				granted[id] = nil
			}
		}
	}
	return n, nil
}

func movedShards(before, after []string) int {
	n := 0
	for s := range after {
		var prev string
		if s < len(before) {
			prev = before[s]
		}
		if prev != after[s] {
			n++
		}
	}
	return n
}
