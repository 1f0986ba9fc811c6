package coordinator_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
)

// slowFences is the fake shard Redis whose shard check can be held: once
// armed (after the groups are created: a create lowers fences too), the
// first Damage call (the check's read of a group's shard streams, after
// that group's fences) waits until its context ends or the test closes
// hold, so the test can act while a pass over every group is in flight.
// calls counts the armed LowerFences calls (two per group and pass: the
// group's fence and its stream's); atEntry is calls when the hold began.
type slowFences struct {
	*fakeShards
	armed   atomic.Bool
	calls   atomic.Int32
	damages atomic.Int32
	atEntry int32
	entered chan struct{}
	hold    chan struct{}
}

func (s *slowFences) LowerFences(ctx context.Context, prefix, group string, count int, mv int64) (int, error) {
	if s.armed.Load() {
		s.calls.Add(1)
	}
	return s.fakeShards.LowerFences(ctx, prefix, group, count, mv)
}

func (s *slowFences) Damage(ctx context.Context, prefix, group string, shards []int) ([]events.ShardRepair, error) {
	if s.armed.Load() && s.damages.Add(1) == 1 {
		s.atEntry = s.calls.Load()
		close(s.entered)
		select {
		case <-ctx.Done():
		case <-s.hold:
		}
	}
	return s.fakeShards.Damage(ctx, prefix, group, shards)
}

func newSlowFenceCoordinator(t *testing.T, groups int, check time.Duration, lease coordinator.LeaderLease) (*coordinator.Coordinator, *slowFences) {
	t.Helper()
	fs := &slowFences{fakeShards: newFakeShards(newSimClock(time.Now())), entered: make(chan struct{}), hold: make(chan struct{})}
	cfg := coordinator.Config{TickInterval: time.Hour, ShardCheckInterval: check, BarrierCheckInterval: time.Hour, SnapshotEvery: -1, Logger: zerolog.Nop()}
	if lease != nil {
		// A lease long enough that a loaded machine renews it in time
		// (at 60 ms, creating the groups was refused NOT_LEADER under
		// load); stepping down on a renewal that finds another holder
		// takes a third of it.
		cfg.Lease, cfg.LeaseTTL = lease, 600*time.Millisecond
	}
	c := coordinator.New(cfg, events.NewMemLog(), fs, nil, nil)
	if err := c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c.Run()
	t.Cleanup(c.Close)
	if lease != nil {
		waitFor(t, "leading", c.IsLeader)
	}
	one := 1
	for i := range groups {
		if _, err := c.CreateGroup(context.Background(), events.Meta{Actor: "test"}, commands.CreateGroupInput{
			StreamPrefix: fmt.Sprintf("p%d", i), ConsumerGroup: "g", InitialShardCount: &one, RequestedBy: "test",
		}); err != nil {
			t.Fatal(err)
		}
	}
	fs.armed.Store(true)
	return c, fs
}

// TestCloseStopsTheShardCheckBetweenGroups: the shard check visits every
// group (fences, then the shard streams), and on a coordinator with
// thousands of groups a pass takes minutes against a slow Redis. Close used
// to wait for the pass to end (its context was never cancelled), so a
// coordinator with 4,700 groups took 205 s to shut down in the log failover
// test. Now Close cancels the leader's loops, and the pass stops at the next
// group.
func TestCloseStopsTheShardCheckBetweenGroups(t *testing.T) {
	const groups = 50
	c, fs := newSlowFenceCoordinator(t, groups, time.Millisecond, nil)
	select {
	case <-fs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the shard check did not run within 10 s")
	}
	// The held read ends when Close cancels the loop's context (before the
	// fix: at the read's own 5 s timeout, and the pass went on).
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30 s")
	}
	if n := fs.calls.Load() - fs.atEntry; n > 0 {
		t.Fatalf("the shard check made %d more fence calls after Close (%d groups, two calls each per pass); want it to stop at the next group", n, groups)
	}
}

// TestShardCheckStopsWhenItsContextEnds: RepairShards with a context that
// ends part-way visits no further group.
func TestShardCheckStopsWhenItsContextEnds(t *testing.T) {
	const groups = 20
	c, fs := newSlowFenceCoordinator(t, groups, -1, nil)
	close(fs.hold)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c.RepairShards(ctx)
	if n := fs.calls.Load(); n != 0 {
		t.Fatalf("a shard check with an ended context made %d fence calls", n)
	}
	c.RepairShards(context.Background())
	if n := fs.calls.Load(); n < groups {
		t.Fatalf("a whole shard check made %d fence calls, want one for each of %d groups at least", n, groups)
	}
}

// TestDeposedLeaderStopsTheShardCheck: a replica that loses the lease in the
// middle of a shard check stops at the next group. Lowering fences from its
// own state, which no longer follows the log, it would lower the fences its
// successor raised for a layout change, and producers on the old layout
// could then write past the cutover.
func TestDeposedLeaderStopsTheShardCheck(t *testing.T) {
	const groups = 50
	lease := &scriptedLease{}
	c, fs := newSlowFenceCoordinator(t, groups, time.Millisecond, lease)
	select {
	case <-fs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the shard check did not run within 10 s")
	}
	lease.set(func(l *scriptedLease) { l.holder, l.token = "other", l.token+1 })
	waitFor(t, "stepping down", func() bool { return !c.IsLeader() })
	close(fs.hold)
	// The pass in flight stops at the next group; a pass run now (the loop's
	// next tick, or by hand) must not visit any.
	c.RepairShards(context.Background())
	if n := fs.calls.Load() - fs.atEntry; n > 0 {
		t.Fatalf("a deposed leader made %d more fence calls (%d groups); want it to stop at the next group", n, groups)
	}
}
