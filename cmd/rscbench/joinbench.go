package main

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
)

// runJoins measures what one member join appends to the log as a group grows:
// members join one at a time (a heartbeat with epoch 0 each, nobody else
// heartbeats) into a 128-shard group on a Redis log; the log's MEMORY USAGE
// (SAMPLES 0) is read before the first join, after the --joins-early-th and
// after the last. The bytes per join late in the growth are compared with the
// bytes per join early on (cost proportional to change: the ratio stays near
// 1), and the assignment event each join appended with what the whole-target
// event of earlier builds (assignment.computed) would have weighed for the
// same joins. One round of heartbeats of every member after the last join is
// measured too: each member adopts the new assignment epoch (member.synced).
func (b *bench) runJoins(ctx context.Context, rep *Report) error {
	o := b.o
	early, total := o.joinsEarly, o.joins
	b.logf("joins: %d members join a %d-shard group one at a time (log MEMORY USAGE at 0, %d, %d)", total, o.joinShards, early, total)
	key := b.st.key("joins")
	b.st.track(key)
	defer func() { _ = b.st.drop(context.WithoutCancel(ctx), key) }()
	rlog := redisstore.NewLog(b.st.rdb, key)
	b.st.trackLog(rlog)
	clock := &virtualClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	c, err := runCoordinator(ctx, coordinator.Config{
		DisableProvisioning: true, TickInterval: time.Hour, SnapshotEvery: -1, ShardCheckInterval: -1,
		MaxMembersPerGroup: total + 1, Logger: zerolog.Nop(),
		MemberChurnPerMinute: -1, PrincipalChurnPerMinute: -1, // joins on a virtual clock: the budgets are not measured here
	}, rlog, nil, nil, clock)
	if err != nil {
		return err
	}
	defer c.Close()
	k := projection.GroupKey{StreamPrefix: "joins", ConsumerGroup: "workers"}
	shards := o.joinShards
	if _, err := c.CreateGroup(ctx, events.Meta{Actor: "rscbench"}, commands.CreateGroupInput{
		StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, InitialShardCount: &shards, RequestedBy: "rscbench", Reason: "benchmark",
	}); err != nil {
		return err
	}
	usage := func() (int64, error) { return b.st.rdb.MemoryUsage(ctx, key, 0).Result() }
	members := make([]*member, total)
	var assignmentBytes, wholeTargetBytes [2]int64
	join := func(i int) error {
		m := &member{id: fmt.Sprintf("member-%04d", i), prefix: k.StreamPrefix, group: k.ConsumerGroup}
		members[i] = m
		before := c.State().LastID()
		if err := m.beat(ctx, c, "join"); err != nil {
			return err
		}
		phase := 0
		if i >= early {
			phase = 1
		}
		// What this join appended to the assignment, and what the whole target
		// would have weighed.
		entries, err := rlog.Read(ctx, before, 100)
		if err != nil {
			return err
		}
		for _, e := range entries {
			rec, err := events.Decode(e.ID, e.Data)
			if err != nil {
				return err
			}
			if ev, ok := rec.Event.(*events.AssignmentChanged); ok {
				assignmentBytes[phase] += int64(len(e.Data))
				g, _ := c.State().Group(k)
				whole, err := events.Encode(rec.Meta, &events.AssignmentComputed{AssignmentEpoch: ev.AssignmentEpoch, Targets: maps.Collect(g.EachTarget())})
				if err != nil {
					return err
				}
				wholeTargetBytes[phase] += int64(len(whole))
			}
		}
		clock.advance(time.Millisecond)
		return nil
	}
	u0, err := usage()
	if err != nil {
		return err
	}
	for i := 0; i < early; i++ {
		if err := join(i); err != nil {
			return err
		}
	}
	u1, err := usage()
	if err != nil {
		return err
	}
	for i := early; i < total; i++ {
		if err := join(i); err != nil {
			return err
		}
	}
	u2, err := usage()
	if err != nil {
		return err
	}
	// One heartbeat of every member: each adopts the last assignment epoch.
	n0, _ := rlog.Len(ctx)
	for _, m := range members {
		if err := m.beat(ctx, c, "heartbeat of"); err != nil {
			return err
		}
	}
	n1, _ := rlog.Len(ctx)
	u3, err := usage()
	if err != nil {
		return err
	}

	s := rep.section("log.joins", "What a member join appends to the log as the group grows")
	s.param("shards", shards)
	s.param("joins", total)
	s.param("early joins", early)
	earlyPer := float64(u1-u0) / float64(early)
	latePer := float64(u2-u1) / float64(total-early)
	s.baseline(fmt.Sprintf("log bytes per join, 0 -> %d members", early), earlyPer, "B")
	s.measured(fmt.Sprintf("log bytes per join, %d -> %d members", early, total), latePer, "B", fmt.Sprintf("log bytes per join, 0 -> %d members", early))
	s.baseline(fmt.Sprintf("whole-target assignment event per join, %d -> %d (earlier builds)", early, total), float64(wholeTargetBytes[1])/float64(total-early), "B")
	s.measured(fmt.Sprintf("assignment.changed per join, %d -> %d", early, total), float64(assignmentBytes[1])/float64(total-early), "B",
		fmt.Sprintf("whole-target assignment event per join, %d -> %d (earlier builds)", early, total))
	s.info(fmt.Sprintf("log bytes, one heartbeat of each of the %d members after the last join", total), float64(u3-u2), "B")
	s.info(fmt.Sprintf("events, one heartbeat of each of the %d members after the last join", total), float64(n1-n0), "events")
	s.note("MEMORY USAGE <log> SAMPLES 0 before the first join, after %d and after %d joins; a join is one heartbeat with epoch 0 (member.joined, assignment.changed, member.synced)", early, total)
	return nil
}
