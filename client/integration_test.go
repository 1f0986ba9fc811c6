package client_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/routing"
)

func skipShort(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: runs the coordinator binary and redis-server")
	}
}

// Every published message is consumed at least once, and none is left
// pending, through a scale-out, a member crash (killed mid-batch), a member
// leave and a scale-in, with producers publishing all along.
func TestIntegrationEveryMessageConsumedThroughReshardingCrashAndLeave(t *testing.T) {
	skipShort(t)
	c := startCluster(t)
	ctx := context.Background()
	const prefix, group, consumed = "orders", "billing", "test:consumed"
	c.createGroup(prefix, group, 4)

	memberCfg := func(base string, n int) member.Config {
		return member.Config{
			Coordinator: c.Member(), Redis: c.RDB, StreamPrefix: prefix, ConsumerGroup: group,
			MemberIDBase: base, Concurrency: n, MemberLease: 2500 * time.Millisecond,
			Block: 100 * time.Millisecond, ClaimMinIdle: time.Second, RetryBackoff: time.Second,
		}
	}
	survivors, err := member.Start(ctx, memberCfg("a", 2), recordingHandler(c.RDB, consumed, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer survivors.Close()
	// The crasher is a separate process with a slow handler, so a batch is
	// always in flight when it is killed.
	crasher := startHelperMember(t, c, prefix, group, "c", 2, 15*time.Millisecond, consumed)

	p, err := producer.New(producer.Config{Coordinator: c.Reader(), Redis: c.RDB, StreamPrefix: prefix, ConsumerGroup: group,
		EventIDField: "eventId", RefreshInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	load := startLoad(t, p, 5, 20*time.Millisecond)

	t.Log("step 1: four logical members in two processes share four shards")
	c.waitStable(prefix, group, "a-m0", "a-m1", "c-m0", "c-m1")

	t.Log("step 2: scale out 4 -> 8")
	c.scale(prefix, group, 4, 8, nil)
	assign := c.waitStable(prefix, group, "a-m0", "a-m1", "c-m0", "c-m1")
	t.Logf("after scale-out: %v", assign)

	t.Log("step 3: kill the crasher process mid-batch")
	c.waitFor(10*time.Second, "the crasher to handle messages", func() bool {
		n, _ := c.RDB.HGet(ctx, consumed+":by-member", "c-m0").Int()
		return n > 20
	})
	// Its members keep up with the load (no backlog: they are granted the
	// new shards as the scale-out activates them), so wait for a batch in
	// flight.
	c.waitFor(10*time.Second, "the crasher mid-batch", func() bool {
		for i := 0; i < 8; i++ {
			if _, byConsumer := c.pendingOn(routing.StreamKey(prefix, i), group); byConsumer["c-m0"]+byConsumer["c-m1"] > 0 {
				return true
			}
		}
		return false
	})
	if err := crasher.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = crasher.Wait()
	var orphaned int64
	for i := 0; i < 8; i++ {
		_, byConsumer := c.pendingOn(routing.StreamKey(prefix, i), group)
		orphaned += byConsumer["c-m0"] + byConsumer["c-m1"]
	}
	t.Logf("the killed members left %d entries pending", orphaned)
	if orphaned == 0 {
		t.Fatal("the crasher was killed between batches; the test wants it killed mid-batch")
	}
	c.waitFor(15*time.Second, "the coordinator to expire the killed members", func() bool {
		return c.memberState(prefix, group, "c-m0") == "EXPIRED" && c.memberState(prefix, group, "c-m1") == "EXPIRED"
	})
	assign = c.waitStable(prefix, group, "a-m0", "a-m1")
	t.Logf("after the crash: %v", assign)
	c.waitFor(15*time.Second, "the survivors to claim the orphaned entries", func() bool {
		for i := 0; i < 8; i++ {
			_, byConsumer := c.pendingOn(routing.StreamKey(prefix, i), group)
			if byConsumer["c-m0"]+byConsumer["c-m1"] > 0 {
				return false
			}
		}
		return true
	})
	if st := survivors.Stats(); st.Claimed == 0 {
		t.Fatalf("survivors claimed nothing: %+v", st)
	}

	t.Log("step 4: a member joins, then leaves gracefully")
	leaver, err := member.Start(ctx, memberCfg("l", 1), recordingHandler(c.RDB, consumed, 0))
	if err != nil {
		t.Fatal(err)
	}
	assign = c.waitStable(prefix, group, "a-m0", "a-m1", "l")
	t.Logf("with the newcomer: %v", assign)
	leftAt := time.Now()
	if err := leaver.Close(); err != nil {
		t.Fatal(err)
	}
	if st := c.memberState(prefix, group, "l"); st != "LEAVING" {
		t.Fatalf("after a graceful stop the member is %q, want LEAVING", st)
	}
	assign = c.waitStable(prefix, group, "a-m0", "a-m1")
	if took := time.Since(leftAt); took > 2500*time.Millisecond {
		t.Fatalf("handover after a leave took %s: it should not wait for the member lease", took)
	}
	t.Logf("after the leave: %v", assign)

	t.Log("step 5: scale in 8 -> 3 (removed shards drain, then retire)")
	c.scale(prefix, group, 8, 3, func() {
		// The runbook: producers refresh their routing right after a resharding.
		if err := p.Refresh(ctx); err != nil {
			t.Error(err)
		}
	})
	c.waitStable(prefix, group, "a-m0", "a-m1")

	t.Log("step 6: stop producing; everything published is consumed and acked")
	time.Sleep(300 * time.Millisecond)
	ids, errs := load.halt()
	if len(errs) > 0 {
		t.Fatalf("%d publish errors, first: %v", len(errs), errs[0])
	}
	c.waitFor(30*time.Second, "every published message consumed", func() bool {
		return len(missing(t, c.RDB, consumed, ids)) == 0
	})
	c.waitFor(10*time.Second, "nothing pending", func() bool {
		for i := 0; i < 3; i++ {
			if n, _ := c.pendingOn(routing.StreamKey(prefix, i), group); n != 0 {
				return false
			}
		}
		return true
	})
	for i := 3; i < 8; i++ {
		if n, _ := c.RDB.Exists(ctx, routing.StreamKey(prefix, i)).Result(); n != 0 {
			t.Fatalf("removed shard %d was not retired", i)
		}
	}
	dup, _ := c.RDB.HGetAll(ctx, consumed+":by-member").Result()
	t.Logf("published %d messages; handled per member: %v; survivors: %+v", len(ids), dup, survivors.Stats())
}

// A producer whose cached routing still names a retired shard gets a nil XADD
// (NOMKSTREAM), refreshes and lands on a live shard.
func TestIntegrationStaleProducerAfterScaleIn(t *testing.T) {
	skipShort(t)
	c := startCluster(t)
	ctx := context.Background()
	const prefix, group = "events", "audit"
	c.createGroup(prefix, group, 6)
	stale, err := producer.New(producer.Config{Coordinator: c.Reader(), Redis: c.RDB, StreamPrefix: prefix, ConsumerGroup: group, RefreshInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if rt, err := stale.Routing(ctx); err != nil || rt.ShardCount != 6 {
		t.Fatalf("routing %+v %v", rt, err)
	}
	// No members: the scale-in drains at once (nothing was published).
	c.scale(prefix, group, 6, 2, nil)
	key := ""
	for i := 0; key == ""; i++ {
		k := "k" + strings.Repeat("x", i)
		if s, _ := routing.RouteKey(k, 6); s >= 2 {
			key = k
		}
	}
	res, err := stale.Publish(ctx, key, map[string]any{"v": "1"})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := routing.RouteKey(key, 2)
	if res.Attempts != 2 || res.ShardIndex != want {
		t.Fatalf("result %+v, want the second attempt on shard %d", res, want)
	}
	// The group can also be scaled to zero: publishing then fails, typed.
	if _, err := c.Admin.Scale(ctx, prefix, group, 0, "test", "scale to zero"); err != nil {
		t.Fatal(err)
	}
	if err := stale.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Publish(ctx, key, map[string]any{"v": "2"}); !errors.Is(err, producer.ErrNoShards) {
		t.Fatalf("publish to a group with no shards: %v", err)
	}
}

// Producer routing needs credentials with the READ role.
func TestIntegrationRoutingNeedsCredentials(t *testing.T) {
	skipShort(t)
	c := startCluster(t)
	c.createGroup("p", "g", 1)
	anonymous := client.New(c.URL, nil)
	_, err := anonymous.ProducerRouting(context.Background(), "p", "g")
	if !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("routing without credentials: %v, want ErrUnauthorized", err)
	}
	tok, _, err := anonymous.Login(context.Background(), "admin", "password")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := client.New(c.URL, tok).ProducerRouting(context.Background(), "p", "g")
	if err != nil || rt.ShardCount != 1 {
		t.Fatalf("routing with a bearer token: %+v %v", rt, err)
	}
	if _, err := c.Reader().ProducerRouting(context.Background(), "p", "nope"); !errors.Is(err, client.ErrGroupNotFound) {
		t.Fatalf("unknown group: %v", err)
	}
}
