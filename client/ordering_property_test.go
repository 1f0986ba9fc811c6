package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// The ordering property, end to end: two groups in the same run, one with
// ordering KEY and one with NONE, get the same workload and the same faults
// at the same moments, with the real coordinator binary:
//
//   - 4 producers (4 producer.Producer instances) per group publish each of
//     240 keys in sequence (a key's next message only after its previous
//     publish returned), never paused, about 800 messages/s per group;
//     about one message in 97 fails its first attempt in the handler;
//   - 4 logical members per group in 2 processes: this one (member.Start,
//     Concurrency 2) and a child process (Concurrency 2), whose handlers
//     record every message in Redis (seqChecker);
//   - the groups are scaled 4 -> 7 -> 3 -> 8 -> 5, then 5 -> 7 rolled back
//     with "policy": "drain" once entries reached the new shards; before each
//     change the handlers stop for 0.5 s (producers go on), so every change
//     cuts over with a backlog on the shards that lose keys;
//   - the child process is killed (SIGKILL) mid-stream and replaced;
//   - the coordinator is killed (SIGKILL) and started again on the same Redis
//     while the 3 -> 8 change waits for its backlog.
//
// The ordered group must show 0 inversions and 0 lost messages; the plain
// group 0 lost and at least one inversion from a resharding (so the check
// can fail).
func TestIntegrationOrderingPropertyUnderReshardingCrashAndRestart(t *testing.T) {
	skipShort(t)
	c := startCluster(t)
	start := time.Now()
	groups := []*propGroup{startPropGroup(t, c, "ordered", client.OrderingKey, true), startPropGroup(t, c, "plain", client.OrderingNone, true)}
	for _, g := range groups {
		c.waitStable(g.name, g.name, g.members...)
	}
	for _, g := range groups {
		g.pub = startKeyPublisher(g.producers, propKeys, propRound, propFailEvery)
	}
	time.Sleep(time.Second)
	step := func(what string) {
		t.Helper()
		msg := fmt.Sprintf("[%5.1fs] %s:", time.Since(start).Seconds(), what)
		for _, g := range groups {
			pub, _, _ := g.pub.published()
			msg += fmt.Sprintf("\n    %-7s %d published; %s", g.name, total(pub), g.chk.stats(t))
		}
		t.Log(msg)
	}
	step("warm-up")

	scaleAll(t, c, groups, 7, nil)
	step("scale-out 4 -> 7")

	t.Log("SIGKILL the member processes mid-stream; a new process replaces each")
	for _, g := range groups {
		_ = g.helper.Process.Signal(syscall.SIGKILL)
		_ = g.helper.Wait()
	}
	for _, g := range groups {
		var orphaned int64
		for i := 0; i < g.shards; i++ {
			_, byConsumer := c.pendingOn(routing.StreamKey(g.name, i), g.name)
			orphaned += byConsumer["b-m0"] + byConsumer["b-m1"]
		}
		t.Logf("%s: the killed members left %d entries pending", g.name, orphaned)
	}
	for _, g := range groups {
		g.members = []string{"a-m0", "a-m1"}
		c.waitStable(g.name, g.name, g.members...)
	}
	for _, g := range groups {
		g.helper = startCheckedMember(t, c, g.name, g.name, "b2", 2, propHelperSleep, propRetry, g.name, g.helperEnv()...)
		g.members = []string{"a-m0", "a-m1", "b2-m0", "b2-m1"}
	}
	for _, g := range groups {
		c.waitStable(g.name, g.name, g.members...)
	}
	step("member process killed and replaced")

	scaleAll(t, c, groups, 3, nil)
	step("scale-in 7 -> 3")

	scaleAll(t, c, groups, 8, func() {
		t.Log("SIGKILL the coordinator while the change waits for its backlog; start it again")
		c.restartCoordinator()
	})
	step("scale-out 3 -> 8 with a coordinator restart")

	scaleAll(t, c, groups, 5, nil)
	step("scale-in 8 -> 5")

	rollbackAll(t, c, groups, 7)
	step("scale-out 5 -> 7 rolled back with policy drain")

	for _, g := range groups {
		pub, failures, lastErr := g.pub.halt()
		g.published = pub
		if failures > 0 {
			t.Logf("%s: %d publish batches had failures (retried with the same sequence numbers), last: %v", g.name, failures, lastErr)
		}
	}
	for _, g := range groups {
		c.waitFor(60*time.Second, g.name+": every published message handled", func() bool {
			return len(g.chk.lost(t, g.published)) == 0
		})
		c.waitFor(20*time.Second, g.name+": nothing pending", func() bool {
			for i := 0; i < g.shards; i++ {
				if n, _ := c.pendingOn(routing.StreamKey(g.name, i), g.name); n != 0 {
					return false
				}
			}
			return true
		})
	}
	step("producers stopped, everything handled")

	ordered, plain := groups[0], groups[1]
	os, ps := ordered.chk.stats(t), plain.chk.stats(t)
	if os.inversions() != 0 {
		t.Errorf("ordered group: %s; first ones:\n%s", os, joinLines(ordered.chk.examples(t)))
	}
	if os.Failed == 0 {
		t.Errorf("ordered group: no handler failure happened; the in-place retries were not exercised")
	}
	if ps.Reorder == 0 {
		t.Errorf("plain group: %s: the workload provoked no inversion from a resharding, so the check could not tell an ordered group from a plain one", ps)
	}
	for _, g := range groups {
		if n := int64(total(g.published)); g.chk.stats(t).Handled != n {
			t.Errorf("%s: %d messages handled for the first time, %d published", g.name, g.chk.stats(t).Handled, n)
		}
	}
	t.Logf("ordered: %d published, %s; members %+v", total(ordered.published), os, ordered.local.Stats())
	t.Logf("plain:   %d published, %s; members %+v; first inversions:\n%s", total(plain.published), ps, plain.local.Stats(), joinLines(plain.chk.examples(t)))
}

const (
	propKeys        = 240
	propProducers   = 4
	propRound       = 300 * time.Millisecond // every producer publishes one message of each of its keys per round
	propFailEvery   = 97
	propLocalSleep  = time.Millisecond
	propHelperSleep = 2 * time.Millisecond
	propRetry       = 50 * time.Millisecond
	// propBacklog is how long the handlers stop before a change: the
	// backlog the change cuts over with; propAfter how long they stay
	// stopped after it, while producers publish on the new layout.
	propBacklog = 500 * time.Millisecond
	propAfter   = 300 * time.Millisecond
)

// propGroup is one group of the property test and what drives it.
type propGroup struct {
	name      string // the stream prefix, the consumer group and the checker's name
	ordering  string
	shards    int
	chk       *seqChecker
	producers []*producer.Producer
	pub       *keyPublisher
	published map[string]int
	local     *member.Runtime
	helper    *exec.Cmd
	members   []string // the live logical members
}

// plainHeartbeats: the group without ordering has its members heartbeat
// plainly (as the reference clients), so that its scale-out is still ACTIVE
// when the rollback comes: held heartbeats complete it within milliseconds.
// The ordered group's members hold theirs (the SDK's default); its barriers
// keep the scale-out ACTIVE until its backlog was handled.
func (g *propGroup) plainHeartbeats() bool { return g.ordering == client.OrderingNone }

// helperEnv is the environment that makes a member process heartbeat as
// plainHeartbeats says.
func (g *propGroup) helperEnv() []string {
	if g.plainHeartbeats() {
		return []string{"RSC_T_PLAIN=1"}
	}
	return nil
}

// startPropGroup creates a group of 4 shards with its producers and 4
// logical members: 2 in this process (member ids a-m0, a-m1) and 2 in a
// child process (b-m0, b-m1), or without childProcess in this one too.
func startPropGroup(t *testing.T, c *cluster, name, ordering string, childProcess bool) *propGroup {
	t.Helper()
	ctx := context.Background()
	shards := 4
	if err := c.Admin.Do(ctx, http.MethodPost, client.GroupPath(name, name),
		wire.CreateRequest{RequestedBy: "test", InitialShardCount: &shards, Ordering: &ordering}, nil); err != nil {
		t.Fatal(err)
	}
	g := &propGroup{name: name, ordering: ordering, shards: shards, chk: newSeqChecker(c.KV, name)}
	for i := 0; i < propProducers; i++ {
		p, err := producer.New(producer.Config{Coordinator: c.Reader(), Redis: c.KV, StreamPrefix: name, ConsumerGroup: name, RefreshInterval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		g.producers = append(g.producers, p)
	}
	startMembers := func(base string, sleep time.Duration) *member.Runtime {
		rt, err := member.Start(ctx, member.Config{
			Coordinator: c.Member(), Redis: c.KV, StreamPrefix: name, ConsumerGroup: name,
			MemberIDBase: base, Concurrency: 2, MemberLease: 2500 * time.Millisecond,
			Block: 100 * time.Millisecond, ClaimMinIdle: time.Second, RetryBackoff: propRetry,
			PlainHeartbeats: g.plainHeartbeats(),
		}, g.chk.handler(sleep))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rt.Close() })
		return rt
	}
	g.local = startMembers("a", propLocalSleep)
	if childProcess {
		g.helper = startCheckedMember(t, c, name, name, "b", 2, propHelperSleep, propRetry, name, g.helperEnv()...)
	} else {
		startMembers("b", propHelperSleep)
	}
	g.members = []string{"a-m0", "a-m1", "b-m0", "b-m1"}
	return g
}

// cutover stops the handlers of every group for propBacklog, runs change
// (which starts the layout changes), lets producers publish on the new
// layouts for propAfter while during (if any) runs, then lets the handlers
// go on.
func cutover(t *testing.T, groups []*propGroup, change func(), during func()) {
	t.Helper()
	for _, g := range groups {
		g.chk.pause(t)
	}
	time.Sleep(propBacklog)
	change()
	time.Sleep(propAfter)
	if during != nil {
		during()
	}
	for _, g := range groups {
		g.chk.resume(t)
	}
}

// scaleAll scales every group to n at the same moment (cutting over with a
// backlog, see cutover; during runs while the changes wait for it), then
// waits until every change completed, its barriers were released, removed
// shards were retired and the members read the new layout.
func scaleAll(t *testing.T, c *cluster, groups []*propGroup, n int, during func()) {
	t.Helper()
	ctx := context.Background()
	ids := map[string]string{}
	cutover(t, groups, func() {
		for _, g := range groups {
			ids[g.name] = startScale(t, c, g, n)
		}
	}, during)
	for _, g := range groups {
		waitChange(t, c, g, ids[g.name], "DEPRECATED")
		for i := n; i < g.shards; i++ {
			key := routing.StreamKey(g.name, i)
			c.waitFor(20*time.Second, key+" retired", func() bool {
				e, err := c.KV.Exists(ctx, key).Result()
				return err == nil && e == 0
			})
		}
		g.shards = n
		c.waitStable(g.name, g.name, g.members...)
	}
}

// startScale asks for a scale (again while the group's last change still
// waits for its barriers: 409) and refreshes the group's producers, as the
// runbook says.
func startScale(t *testing.T, c *cluster, g *propGroup, n int) string {
	t.Helper()
	ctx := context.Background()
	var m *client.Migration
	retryConflict(t, c, fmt.Sprintf("%s: scale %d -> %d", g.name, g.shards, n), func() error {
		var err error
		m, err = c.Admin.Scale(ctx, g.name, g.name, n, "test", fmt.Sprintf("property test %d -> %d", g.shards, n))
		return err
	})
	for _, p := range g.producers {
		if err := p.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return m.ReshardingID
}

// retryConflict runs call until it does not fail with a 409 (a barrier or a
// metadata correction round in the way), for up to 20 s.
func retryConflict(t *testing.T, c *cluster, what string, call func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := call()
		var apiErr *client.APIError
		if err == nil {
			return
		}
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitChange waits until resharding id is in state and the group has no
// barrier waiting.
func waitChange(t *testing.T, c *cluster, g *propGroup, id, state string) {
	t.Helper()
	ctx := context.Background()
	c.waitFor(45*time.Second, fmt.Sprintf("%s: resharding %s %s, no barrier waiting", g.name, id, state), func() bool {
		m, err := c.Admin.Migration(ctx, g.name, g.name, id)
		if err != nil || m.State != state {
			return false
		}
		gr, err := c.Admin.Group(ctx, g.name, g.name)
		return err == nil && len(gr.Barriers) == 0
	})
}

// rollbackAll scales every group out to n and, once producers wrote entries
// to a new shard of each, rolls the scale-out back with "policy": "drain";
// it waits until the rollbacks are ROLLED_BACK, their barriers released, the
// new shards retired and the members read the old layout again.
func rollbackAll(t *testing.T, c *cluster, groups []*propGroup, n int) {
	t.Helper()
	ctx := context.Background()
	ids := map[string]string{}
	cutover(t, groups, func() {
		for _, g := range groups {
			ids[g.name] = startScale(t, c, g, n)
			// A probe on every new shard at once, so the rollback comes well
			// before the members could complete the scale-out.
			for i := g.shards; i < n; i++ {
				if _, err := g.producers[0].Publish(ctx, probeKey(i, n), map[string]any{"probe": "1"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		for _, g := range groups {
			c.waitFor(10*time.Second, g.name+": entries on a new shard", func() bool {
				for i := g.shards; i < n; i++ {
					if l, _ := c.KV.XLen(ctx, routing.StreamKey(g.name, i)).Result(); l > 0 {
						return true
					}
				}
				return false
			})
			var m client.Migration
			path := client.GroupPath(g.name, g.name) + "/migrations/" + ids[g.name] + "/rollback"
			retryConflict(t, c, g.name+": rollback", func() error {
				return c.Admin.Do(ctx, http.MethodPost, path, wire.RollbackRequest{RequestedBy: "test", Reason: "property test", Policy: "drain"}, &m)
			})
			if m.State != "ROLLING_BACK" {
				t.Fatalf("%s: rollback with policy drain answered %s, want ROLLING_BACK (the new shards had entries)", g.name, m.State)
			}
			for _, p := range g.producers {
				if err := p.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
	}, nil)
	for _, g := range groups {
		waitChange(t, c, g, ids[g.name], "ROLLED_BACK")
		for i := g.shards; i < n; i++ {
			key := routing.StreamKey(g.name, i)
			c.waitFor(20*time.Second, key+" retired", func() bool {
				e, err := c.KV.Exists(ctx, key).Result()
				return err == nil && e == 0
			})
		}
		c.waitStable(g.name, g.name, g.members...)
	}
}

// probeKey returns a partition key routed to shard of n.
func probeKey(shard, n int) string {
	for i := 0; ; i++ {
		k := "probe-" + strconv.Itoa(i)
		if s, _ := routing.RouteKey(k, n); s == shard {
			return k
		}
	}
}

func joinLines(lines []string) string {
	out := ""
	for _, l := range lines {
		out += "    " + l + "\n"
	}
	return out
}
