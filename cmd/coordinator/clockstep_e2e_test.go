package main

import (
	"sync"
	"testing"
	"time"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// steppingClock is a commands.MonotonicClock: its wall clock can be stepped
// (as NTP steps the system's) while its monotonic reading goes on.
type steppingClock struct {
	mu         sync.Mutex
	wall, mono time.Time
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

func (c *steppingClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall, c.mono = c.wall.Add(d), c.mono.Add(d)
}

func (c *steppingClock) StepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall = c.wall.Add(d)
}

// The reproduction: an NTP step of 15 s expired every member at
// once (leases compared wall-clock times). Three members of a group on a
// real Redis; the wall clock steps 15 s; two members keep heartbeating and
// the third falls silent. The silent one expires when its lease passes on
// the monotonic clock; the others stay.
func TestIntegrationWallClockStepExpiresNoMember(t *testing.T) {
	rs := redistest.Start(t)
	now := time.Now().UTC()
	clk := &steppingClock{wall: now, mono: now}
	tc := startCoordinator(t, rs, func(m *Main) {
		m.coordClock = clk
		m.TickInterval = 20 * time.Millisecond
		m.MemberLease = 15 * time.Second
	})
	tc.Do("POST", "/coord/v1/streams/ntp/groups/g", map[string]any{"initialShardCount": 3, "requestedBy": "test"}).MustStatus(t, 201)
	epochs, owned := map[string]int64{}, map[string][]int{}
	beat := func(id string) {
		t.Helper()
		g, _ := tc.Main.Coordinator().State().Group(projection.GroupKey{StreamPrefix: "ntp", ConsumerGroup: "g"})
		res := heartbeatAnswer(t, tc, "ntp", "g", id, epochs[id], g.MetadataVersion, owned[id])
		if res.Status == wire.StatusUnknownMember || res.Status == wire.StatusFenced {
			t.Fatalf("heartbeat of %s answered %s", id, res.Status)
		}
		epochs[id] = res.MemberEpoch
		owned[id] = owned[id][:0]
		for _, s := range res.Assignment.AssignedShards {
			owned[id] = append(owned[id], s.ShardIndex)
		}
	}
	for range 3 {
		for _, id := range []string{"a", "b", "c"} {
			beat(id)
		}
	}
	state := func(id string) string {
		g, _ := tc.Main.Coordinator().State().Group(projection.GroupKey{StreamPrefix: "ntp", ConsumerGroup: "g"})
		if m := g.Member(id); m != nil {
			return m.State
		}
		return "gone"
	}

	// a and b heartbeat every few seconds, c falls silent; a second after
	// their last heartbeat the wall clock steps 15 s: past a's and b's
	// leases on the wall clock, not on the monotonic one.
	clk.Advance(10 * time.Second)
	beat("a")
	beat("b")
	clk.Advance(time.Second)
	clk.StepWall(15 * time.Second)
	clk.Advance(5 * time.Second) // c silent for 16 s of the monotonic clock
	eventually(t, 10*time.Second, "c to expire", func() bool { return state("c") == projection.MemberExpired })
	for _, id := range []string{"a", "b"} {
		if got := state(id); got == projection.MemberExpired {
			t.Fatalf("%s is %s after a 15 s step of the wall clock; its lease has 9 s left on the monotonic clock", id, got)
		}
		beat(id)
	}
}
