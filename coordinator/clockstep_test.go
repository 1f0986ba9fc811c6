package coordinator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/wire"
)

// steppingClock is a coordinator.MonotonicClock whose wall clock can be stepped
// (as NTP steps it) while its monotonic reading goes on undisturbed, as the
// system clock's does.
type steppingClock struct {
	mu         sync.Mutex
	wall, mono time.Time
}

func newSteppingClock() *steppingClock {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return &steppingClock{wall: t0, mono: t0}
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.wall
}

func (c *steppingClock) Monotonic() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono
}

// Advance lets d pass on both clocks.
func (c *steppingClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall, c.mono = c.wall.Add(d), c.mono.Add(d)
}

// StepWall moves the wall clock alone.
func (c *steppingClock) StepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
}

// stepRig is a coordinator on a stepping clock with members a and b converged
// on a group of two shards (lease 15 s, rebalance timeout 60 s).
type stepRig struct {
	t     *testing.T
	clock *steppingClock
	log   *events.MemLog
	c     *coordinator.Coordinator
	epoch map[string]int64
	n     int
}

func newStepRig(t *testing.T) *stepRig {
	t.Helper()
	r := &stepRig{t: t, clock: newSteppingClock(), log: events.NewMemLog(), epoch: map[string]int64{}}
	r.c = coordinator.New(coordinator.Config{DisableProvisioning: true, MemberLease: 15 * time.Second, RebalanceTimeout: time.Minute,
		TickInterval: time.Hour, ShardCheckInterval: -1, BarrierCheckInterval: time.Hour, SnapshotEvery: -1}, r.log, nil, nil, r.clock)
	if err := r.c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	r.c.Run()
	t.Cleanup(r.c.Close)
	if _, err := r.c.CreateGroup(context.Background(), events.Meta{Actor: "test"}, commands.CreateGroupInput{
		StreamPrefix: simKey.StreamPrefix, ConsumerGroup: simKey.ConsumerGroup, InitialShardCount: ptr(2), RequestedBy: "test",
	}); err != nil {
		t.Fatal(err)
	}
	r.must("a", 0, nil, wire.StatusOK)
	r.must("a", 0, []int{0, 1}, wire.StatusOK)
	r.must("b", 0, nil, wire.StatusOK)
	r.must("a", 0, []int{0, 1}, wire.StatusOK) // told to keep only 0
	r.must("a", 0, []int{0}, wire.StatusOK)
	r.must("b", 0, nil, wire.StatusOK)
	r.must("b", 0, []int{1}, wire.StatusOK)
	return r
}

func (r *stepRig) heartbeat(id string, mvAbove int64, owned []int) (*wire.HeartbeatResponse, error) {
	r.n++
	g, _ := r.c.State().Group(simKey)
	req := &wire.HeartbeatRequest{
		ProtocolVersion: ptr(wire.ProtocolVersion), RequestID: fmt.Sprintf("r%d", r.n), MemberID: id, MemberName: ptr(id),
		MemberEpoch: ptr(r.epoch[id]), MetadataVersion: ptr(g.MetadataVersion + mvAbove),
		RuntimeConsumerCapacity: &wire.Capacity{RuntimeMaxConcurrency: ptr(1), AvailableConcurrency: ptr(1)},
		OwnedShards:             shardIDs(owned), RevokingShards: []wire.RevokingReport{}, ShardProgress: []wire.ShardProgress{},
	}
	resp, err := r.c.Heartbeat(context.Background(), simKey, id, "", req)
	if err == nil {
		switch resp.Status {
		case wire.StatusOK, wire.StatusSyncMetadata, wire.StatusRevokePending:
			r.epoch[id] = resp.MemberEpoch
		}
	}
	return resp, err
}

func (r *stepRig) must(id string, mvAbove int64, owned []int, want string) {
	r.t.Helper()
	resp, err := r.heartbeat(id, mvAbove, owned)
	if err != nil || resp.Status != want {
		r.t.Fatalf("heartbeat of %s: %+v %v, want %s", id, resp, err, want)
	}
}

// ended lists the members the log records as expired or fenced.
func (r *stepRig) ended() []string {
	var out []string
	for _, rec := range decoded(r.t, r.log.Entries()) {
		switch ev := rec.Event.(type) {
		case *events.MembersExpired:
			out = append(out, ev.MemberIDs...)
		case *events.MemberFenced:
			out = append(out, ev.MemberID+" (fenced)")
		}
	}
	return out
}

// An NTP step of the wall clock by the whole member lease (or the whole
// rebalance timeout) expires and fences nobody: leases and deadlines are
// measured on the monotonic clock. The same span passing on the monotonic
// clock still expires the members that fell silent.
func TestWallClockStepExpiresNoMember(t *testing.T) {
	r := newStepRig(t)
	ctx := context.Background()

	r.clock.Advance(10 * time.Second)
	r.must("a", 0, []int{0}, wire.StatusOK)
	r.must("b", 0, []int{1}, wire.StatusOK)
	r.clock.Advance(time.Second)
	r.clock.StepWall(15 * time.Second)
	r.c.Tick(ctx)
	if got := r.ended(); len(got) > 0 {
		t.Fatalf("a 15 s step of the wall clock ended members %v, whose leases have 14 s left on the monotonic clock", got)
	}

	// b reports a metadata version above the log's: a correction round opens,
	// due to fence it after the rebalance timeout (60 s) of the timers' clock.
	r.must("b", 5, []int{1}, wire.StatusSyncMetadata)
	if !r.c.CorrectionOpen(simKey) {
		t.Fatal("no correction round opened")
	}
	r.clock.StepWall(2 * time.Minute)
	r.c.Tick(ctx)
	if _, err := r.heartbeat("b", 5, []int{1}); err != nil {
		t.Fatal(err)
	}
	if got := r.ended(); len(got) > 0 {
		t.Fatalf("a 2 min step of the wall clock ended members %v, 2 min before their round's deadline on the monotonic clock", got)
	}

	// Silence, on the monotonic clock: both leases lapse (b's was renewed
	// by its last heartbeat, a's a second before the round opened).
	r.clock.Advance(16 * time.Second)
	r.c.Tick(ctx)
	if got := fmt.Sprint(r.ended()); got != "[a b]" {
		t.Fatalf("members ended after 16 s of silence: %s, want [a b]", got)
	}
}
