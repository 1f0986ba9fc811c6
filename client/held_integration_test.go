package client_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/routing"
)

// handled records, in the test process, which member handled which payload.
type handled struct {
	mu sync.Mutex
	by map[string]string // payload -> member id
}

func (h *handled) handler(ctx context.Context, m member.Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[string]string{}
	}
	h.by[m.Field("p")] = m.MemberID
	return nil
}

func (h *handled) who(payload string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.by[payload]
}

// publishTo adds an entry with payload p to a shard stream directly.
func publishTo(t *testing.T, rdb *redis.Client, prefix string, shard int, p string) {
	t.Helper()
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: routing.StreamKey(prefix, shard), Values: []any{"p", p}}).Err(); err != nil {
		t.Fatal(err)
	}
}

// The coordinator's interval is a minute and its lease two: a plain
// heartbeat would tell a member of any change up to a minute late, and an
// expiry would wait two. Every step below must complete in 10 s, which only
// held heartbeats (a change pushed to the members it concerns), and for the
// crash the connection's close, can do.
var slowHeartbeats = []string{"--heartbeat-interval", "60s", "--member-lease", "120s"}

// TestIntegrationHeldHeartbeatsPushChanges: with held heartbeats (30 s
// each) two members converge on a new group, a scale-out's new shards are
// granted and consumed, and a leaving member's shards are taken over, each
// well before any member's next plain heartbeat would be due.
func TestIntegrationHeldHeartbeatsPushChanges(t *testing.T) {
	skipShort(t)
	c := startClusterWith(t, slowHeartbeats...)
	const prefix, group = "orders", "billing"
	c.createGroup(prefix, group, 2)
	var got handled
	start := func(base string) *member.Runtime {
		rt, err := member.Start(context.Background(), member.Config{
			Coordinator: c.Member(), Redis: c.RDB, StreamPrefix: prefix, ConsumerGroup: group, MemberIDBase: base,
			HeartbeatHold: 30 * time.Second, Block: 100 * time.Millisecond,
		}, got.handler)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rt.Close() })
		return rt
	}
	a := start("a")
	c.waitFor(10*time.Second, "a reading both shards", func() bool { return len(a.Members()[0].Owned) == 2 })
	b := start("b")
	c.waitFor(10*time.Second, "a and b reading a shard each", func() bool {
		return len(a.Members()[0].Owned) == 1 && len(b.Members()[0].Owned) == 1
	})

	t.Log("scale-out 2 -> 4: the new shards are granted and consumed")
	if _, err := c.Admin.Scale(context.Background(), prefix, group, 4, "test", "held heartbeats"); err != nil {
		t.Fatal(err)
	}
	c.waitFor(10*time.Second, "every shard read", func() bool {
		return len(a.Members()[0].Owned)+len(b.Members()[0].Owned) == 4
	})
	for s := 2; s < 4; s++ {
		p := fmt.Sprintf("new-%d", s)
		publishTo(t, c.RDB, prefix, s, p)
		c.waitFor(10*time.Second, p+" consumed", func() bool { return got.who(p) != "" })
	}

	t.Log("a leaves: b takes its shards over")
	gone := a.Members()[0].Owned
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	c.waitFor(10*time.Second, "b reading every shard", func() bool { return len(b.Members()[0].Owned) == 4 })
	for _, s := range gone {
		p := fmt.Sprintf("after-leave-%d", s)
		publishTo(t, c.RDB, prefix, s, p)
		c.waitFor(10*time.Second, p+" consumed by b", func() bool { return got.who(p) == "b" })
	}
	if st := b.Stats(); st.HeldHeartbeats == 0 {
		t.Fatalf("b's stats %+v: no held heartbeat", st)
	}
}

// TestIntegrationKilledMemberSeenByItsConnection: a member process killed
// (SIGKILL) while its heartbeat is held: its connection closes, and the
// coordinator expires it after the grace (1 s), not the lease (2 min); the
// survivor takes its shard over.
func TestIntegrationKilledMemberSeenByItsConnection(t *testing.T) {
	skipShort(t)
	c := startClusterWith(t, slowHeartbeats...)
	const prefix, group = "orders", "billing"
	c.createGroup(prefix, group, 2)
	var got handled
	survivor, err := member.Start(context.Background(), member.Config{
		Coordinator: c.Member(), Redis: c.RDB, StreamPrefix: prefix, ConsumerGroup: group, MemberIDBase: "a",
		HeartbeatHold: 30 * time.Second, Block: 100 * time.Millisecond, ClaimMinIdle: 100 * time.Millisecond,
	}, got.handler)
	if err != nil {
		t.Fatal(err)
	}
	defer survivor.Close()
	victim := startHelperMember(t, c, prefix, group, "k", 1, 0, "test:consumed")
	c.waitStable(prefix, group, "a", "k")
	c.waitFor(10*time.Second, "the victim's heartbeat held", func() bool {
		ms, err := c.Admin.Members(context.Background(), prefix, group)
		return err == nil && len(ms) == 2 && len(survivor.Members()[0].Owned) == 1
	})
	if err := victim.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.Wait()
	c.waitFor(10*time.Second, "the killed member expired", func() bool { return c.memberState(prefix, group, "k") == "EXPIRED" })
	c.waitFor(10*time.Second, "the survivor reading both shards", func() bool { return len(survivor.Members()[0].Owned) == 2 })
	for s := 0; s < 2; s++ {
		p := fmt.Sprintf("after-kill-%d", s)
		publishTo(t, c.RDB, prefix, s, p)
		c.waitFor(10*time.Second, p+" consumed by the survivor", func() bool { return got.who(p) == "a" })
	}
}
