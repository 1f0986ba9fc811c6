package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// holdHarness drives held heartbeats against a coordinator on an in-memory
// log. Its clock is virtual (leases never pass unless a test moves it); the
// holds' bounds and the drop grace run on the real clock.
type holdHarness struct {
	t     *testing.T
	c     *coordinator.Coordinator
	log   *events.MemLog
	clock *simClock
	n     int
}

// hmember is a member as a well-behaved client keeps it: the epoch and
// metadata version of its last answer, and the shards it reads (what its
// last OK answer assigned).
type hmember struct {
	id, principal string
	epoch, mv     int64
	owned         []int
}

func newHoldHarness(t *testing.T, shards int, cfg coordinator.Config) *holdHarness {
	t.Helper()
	h := &holdHarness{t: t, clock: newSimClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), log: events.NewMemLog()}
	cfg.TickInterval, cfg.ShardCheckInterval, cfg.BarrierCheckInterval, cfg.SnapshotEvery = time.Hour, -1, time.Hour, -1
	cfg.Logger = zerolog.Nop()
	h.c = coordinator.New(cfg, h.log, newFakeShards(h.clock), nil, h.clock)
	if err := h.c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	h.c.Run()
	t.Cleanup(h.c.Close)
	if _, err := h.c.CreateGroup(context.Background(), events.Meta{Actor: "test"}, commands.CreateGroupInput{
		StreamPrefix: simKey.StreamPrefix, ConsumerGroup: simKey.ConsumerGroup, InitialShardCount: &shards, RequestedBy: "test",
	}); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *holdHarness) group() *projection.Group {
	h.t.Helper()
	g, ok := h.c.State().Group(simKey)
	if !ok {
		h.t.Fatal("no group")
	}
	return g
}

// request is m's next heartbeat: what it reads, nothing revoking.
func (h *holdHarness) request(m *hmember) *wire.HeartbeatRequest {
	h.n++
	return &wire.HeartbeatRequest{
		ProtocolVersion: ptr(wire.ProtocolVersion), RequestID: fmt.Sprintf("r%d", h.n), MemberID: m.id, MemberName: ptr(m.id),
		MemberEpoch: ptr(m.epoch), MetadataVersion: ptr(m.mv),
		RuntimeConsumerCapacity: &wire.Capacity{RuntimeMaxConcurrency: ptr(1), AvailableConcurrency: ptr(1)},
		OwnedShards:             shardIDs(m.owned), RevokingShards: []wire.RevokingReport{}, ShardProgress: []wire.ShardProgress{},
	}
}

// adopt applies an answer as the client does: epochs always, the assigned
// shards on OK (what it no longer has assigned, it releases at once).
func (m *hmember) adopt(r *wire.HeartbeatResponse) {
	m.epoch, m.mv = r.MemberEpoch, r.MetadataVersion
	if r.Status == wire.StatusOK {
		m.owned = refInts(r.Assignment.AssignedShards)
		sort.Ints(m.owned)
	}
}

// beat sends m's plain heartbeat and adopts the answer.
func (h *holdHarness) beat(m *hmember) *wire.HeartbeatResponse {
	h.t.Helper()
	r, err := h.c.Heartbeat(context.Background(), simKey, m.id, m.principal, h.request(m))
	if err != nil || r.Status != wire.StatusOK {
		h.t.Fatalf("heartbeat of %s: %+v %v", m.id, r, err)
	}
	m.adopt(r)
	return r
}

// settle heartbeats every member until none of their answers changes
// anything (each reads exactly what it is assigned, nothing pending).
func (h *holdHarness) settle(ms ...*hmember) {
	h.t.Helper()
	for round := 0; round < 20; round++ {
		quietAll := true
		for _, m := range ms {
			before := *m
			r := h.beat(m)
			if before.epoch != m.epoch || before.mv != m.mv || fmt.Sprint(before.owned) != fmt.Sprint(m.owned) || len(r.Assignment.PendingShards) > 0 {
				quietAll = false
			}
		}
		if quietAll {
			return
		}
	}
	h.t.Fatal("members did not settle in 20 rounds")
}

// heldCall is a held heartbeat in flight.
type heldCall struct {
	done   chan struct{}
	cancel context.CancelFunc
	resp   *wire.HeartbeatResponse
	why    coordinator.HoldOutcome
	err    error
}

// hold sends m's heartbeat asking to be held for bound.
func (h *holdHarness) hold(m *hmember, bound time.Duration, release <-chan struct{}) *heldCall {
	ctx, cancel := context.WithCancel(context.Background())
	c := &heldCall{done: make(chan struct{}), cancel: cancel}
	req := h.request(m)
	go func() {
		defer close(c.done)
		c.resp, c.why, c.err = h.c.HeldHeartbeat(ctx, simKey, m.id, m.principal, req, coordinator.HoldRequest{Bound: bound, Release: release})
	}()
	h.t.Cleanup(cancel)
	return c
}

// wait waits for the call's answer (10 s at most: none of these waits for a
// timer of the protocol).
func (c *heldCall) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no answer after 10s", what)
	}
}

func (c *heldCall) answered() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// waitHeld waits until n heartbeats are held.
func (h *holdHarness) waitHeld(n int) {
	h.t.Helper()
	waitFor(h.t, fmt.Sprintf("%d held heartbeats", n), func() bool { return h.c.HeldHeartbeats() == n })
}

func (h *holdHarness) logLen() int {
	h.t.Helper()
	n, err := h.log.Len(context.Background())
	if err != nil {
		h.t.Fatal(err)
	}
	return int(n)
}

// TestHeldHeartbeatReleaseWakesOnlyTheWaitingMember: three members on three
// shards, the third (c) just joined and waits for the shard a must give up.
// b (nothing to do) and c (a shard pending) hold their heartbeats; a's
// heartbeat that releases the shard wakes c, whose answer grants it, and
// not b, whose answer did not change: b's is held to its bound. Without the
// wake-up c would learn of the grant at its next plain heartbeat.
func TestHeldHeartbeatReleaseWakesOnlyTheWaitingMember(t *testing.T) {
	h := newHoldHarness(t, 3, coordinator.Config{})
	a, b, c := &hmember{id: "a"}, &hmember{id: "b"}, &hmember{id: "c"}
	h.settle(a)
	h.settle(a, b)
	giver, keeper := a, b // the one reading two shards gives one to c
	if len(b.owned) > len(a.owned) {
		giver, keeper = b, a
	}
	h.beat(c) // joins: every shard is held, so its target is pending
	// a and b learn the new version; the giver's answer takes a shard away.
	h.beat(a)
	h.beat(b)
	if len(giver.owned) != 1 || len(keeper.owned) != 1 {
		t.Fatalf("after c joined a reads %v, b %v: want one shard each left", a.owned, b.owned)
	}
	// The giver adopted its answer but has not told the coordinator yet:
	// the log still has it holding c's shard.
	before := h.logLen()
	kc := h.hold(keeper, 2*time.Second, nil)
	cc := h.hold(c, 30*time.Second, nil)
	h.waitHeld(2)
	if h.logLen() != before {
		t.Fatalf("holding two heartbeats appended %d entries", h.logLen()-before)
	}
	h.beat(giver) // reports the release
	cc.wait(t, "c's held heartbeat")
	if cc.err != nil || cc.why != coordinator.HoldWoken || cc.resp.Status != wire.StatusOK || len(cc.resp.Assignment.AssignedShards) != 1 {
		t.Fatalf("c: %v %+v %v, want woken with its shard assigned", cc.why, cc.resp, cc.err)
	}
	if kc.answered() {
		t.Fatalf("the keeper's held heartbeat was answered (%s) by a release that does not concern it", kc.why)
	}
	kc.wait(t, "the keeper's held heartbeat")
	if kc.err != nil || kc.why != coordinator.HoldElapsed || kc.resp.Status != wire.StatusOK {
		t.Fatalf("keeper: %v %+v %v, want elapsed", kc.why, kc.resp, kc.err)
	}
}

// TestHeldHeartbeatElapsedAppendsNothing: a heartbeat held to its bound is
// answered as a steady heartbeat then, and appends nothing.
func TestHeldHeartbeatElapsedAppendsNothing(t *testing.T) {
	h := newHoldHarness(t, 2, coordinator.Config{})
	a := &hmember{id: "a"}
	h.settle(a)
	before := h.logLen()
	call := h.hold(a, 50*time.Millisecond, nil)
	call.wait(t, "held heartbeat")
	if call.err != nil || call.why != coordinator.HoldElapsed || call.resp.Status != wire.StatusOK || len(call.resp.Assignment.AssignedShards) != 2 {
		t.Fatalf("%v %+v %v, want elapsed with both shards", call.why, call.resp, call.err)
	}
	if h.logLen() != before {
		t.Fatalf("a held heartbeat that ended with no change appended %d entries", h.logLen()-before)
	}
}

// TestHeldHeartbeatWithNewsIsAnsweredAtOnce: a heartbeat whose answer
// tells the member something it did not report (another metadata version,
// shards to start) or that reports a revoke is not held.
func TestHeldHeartbeatWithNewsIsAnsweredAtOnce(t *testing.T) {
	h := newHoldHarness(t, 2, coordinator.Config{})
	a := &hmember{id: "a"}
	h.settle(a)
	stale := *a
	stale.mv--
	call := h.hold(&stale, time.Hour, nil)
	call.wait(t, "a heartbeat with an older metadata version")
	if call.why != coordinator.HoldAnswered || call.err != nil {
		t.Fatalf("%v %v, want answered at once", call.why, call.err)
	}
	req := h.request(a)
	req.RevokingShards = []wire.RevokingReport{{Shard: &wire.ShardRef{ShardIndex: 0}, State: wire.RevokeRevoked}}
	resp, why, err := h.c.HeldHeartbeat(context.Background(), simKey, a.id, "", req, coordinator.HoldRequest{Bound: time.Hour})
	if err != nil || why != coordinator.HoldAnswered {
		t.Fatalf("a heartbeat with a revoke report: %v %+v %v, want answered at once", why, resp, err)
	}
}

// TestHeldHeartbeatsBounded: past the bound per principal, and past the
// bound in total, a heartbeat that asks to be held is answered at once
// (limit); at the bound it is held.
func TestHeldHeartbeatsBounded(t *testing.T) {
	h := newHoldHarness(t, 8, coordinator.Config{MaxHeldHeartbeats: 3, MaxHeldHeartbeatsPerPrincipal: 2})
	p1a, p1b, p1c := &hmember{id: "p1-a", principal: "p1"}, &hmember{id: "p1-b", principal: "p1"}, &hmember{id: "p1-c", principal: "p1"}
	p2a, p3a := &hmember{id: "p2-a", principal: "p2"}, &hmember{id: "p3-a", principal: "p3"}
	h.settle(p1a, p1b, p1c, p2a, p3a)
	release := make(chan struct{})
	calls := []*heldCall{h.hold(p1a, time.Minute, release), h.hold(p1b, time.Minute, release)}
	h.waitHeld(2)
	third := h.hold(p1c, time.Minute, release)
	third.wait(t, "p1's third held heartbeat")
	if third.err != nil || third.why != coordinator.HoldLimit || third.resp.Status != wire.StatusOK {
		t.Fatalf("p1's third: %v %+v %v, want limit (2 per principal)", third.why, third.resp, third.err)
	}
	calls = append(calls, h.hold(p2a, time.Minute, release))
	h.waitHeld(3)
	over := h.hold(p3a, time.Minute, release)
	over.wait(t, "the fourth held heartbeat")
	if over.err != nil || over.why != coordinator.HoldLimit {
		t.Fatalf("the fourth: %v %v, want limit (3 in total)", over.why, over.err)
	}
	close(release)
	for i, c := range calls {
		c.wait(t, "a released heartbeat")
		if c.err != nil || c.why != coordinator.HoldReleased || c.resp.Status != wire.StatusOK {
			t.Fatalf("call %d: %v %+v %v, want released with its answer", i, c.why, c.resp, c.err)
		}
	}
	if n := h.c.HeldHeartbeats(); n != 0 {
		t.Fatalf("%d heartbeats still held after every call returned", n)
	}
}

// TestHeldHeartbeatSupersededByNewerOne: a member has at most one held
// heartbeat; a newer one answers the older at once.
func TestHeldHeartbeatSupersededByNewerOne(t *testing.T) {
	h := newHoldHarness(t, 2, coordinator.Config{})
	a := &hmember{id: "a"}
	h.settle(a)
	first := h.hold(a, time.Minute, nil)
	h.waitHeld(1)
	second := h.hold(a, time.Minute, nil)
	first.wait(t, "the first held heartbeat")
	if first.why != coordinator.HoldReleased || first.err != nil {
		t.Fatalf("first: %v %v, want released", first.why, first.err)
	}
	h.waitHeld(1)
	second.cancel()
	second.wait(t, "the second held heartbeat")
}

// TestHeldHeartbeatDroppedExpiresMemberAfterGrace: the caller of a held
// heartbeat goes away (its connection closed) and the member does not
// heartbeat again: it is expired at the end of the grace, its lease far
// from over (the virtual clock never moves), with the reason in the log;
// its shards go to the other member, whose held heartbeat is woken.
func TestHeldHeartbeatDroppedExpiresMemberAfterGrace(t *testing.T) {
	h := newHoldHarness(t, 2, coordinator.Config{HeartbeatDropGrace: 50 * time.Millisecond})
	a, b := &hmember{id: "a"}, &hmember{id: "b"}
	h.settle(a, b)
	bc := h.hold(b, time.Minute, nil)
	ac := h.hold(a, time.Minute, nil)
	h.waitHeld(2)
	ac.cancel()
	ac.wait(t, "a's held heartbeat")
	if ac.why != coordinator.HoldDropped || !errors.Is(ac.err, context.Canceled) {
		t.Fatalf("a: %v %v, want dropped", ac.why, ac.err)
	}
	bc.wait(t, "b's held heartbeat")
	if bc.why != coordinator.HoldWoken || bc.err != nil || len(bc.resp.Assignment.AssignedShards) != 2 {
		t.Fatalf("b: %v %+v %v, want woken with both shards", bc.why, bc.resp, bc.err)
	}
	if m := h.group().Member("a"); m.State != projection.MemberExpired {
		t.Fatalf("a is %s, want expired", m.State)
	}
	entries, err := h.log.Read(context.Background(), events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, rec := range decoded(t, entries) {
		if ev, ok := rec.Event.(*events.MembersExpired); ok && len(ev.MemberIDs) == 1 && ev.MemberIDs[0] == "a" && ev.Reason != "" {
			found = true
		}
	}
	if !found {
		t.Fatal("no member.expired of a with a reason in the log")
	}
}

// TestHeldHeartbeatsReleasedOnClose: shutting the coordinator down answers
// every held heartbeat at once, with the answer it was held with.
func TestHeldHeartbeatsReleasedOnClose(t *testing.T) {
	h := newHoldHarness(t, 2, coordinator.Config{})
	a := &hmember{id: "a"}
	h.settle(a)
	call := h.hold(a, time.Minute, nil)
	h.waitHeld(1)
	h.c.Close()
	call.wait(t, "held heartbeat at shutdown")
	if call.err != nil || call.why != coordinator.HoldReleased || call.resp.Status != wire.StatusOK || len(call.resp.Assignment.AssignedShards) != 2 {
		t.Fatalf("%v %+v %v, want released with the answer", call.why, call.resp, call.err)
	}
	// Nothing is held after shutdown.
	resp, why, err := h.c.HeldHeartbeat(context.Background(), simKey, a.id, "", h.request(a), coordinator.HoldRequest{Bound: time.Minute})
	if err == nil && why != coordinator.HoldReleased {
		t.Fatalf("after Close: %v %+v, want an error or released", why, resp)
	}
}

// TestHeldHeartbeatsReleasedOnLostLeadership: a replica that loses the
// leader lease answers its held heartbeats at once.
func TestHeldHeartbeatsReleasedOnLostLeadership(t *testing.T) {
	lease := &scriptedLease{}
	log := events.NewMemLog()
	c := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop(), Lease: lease, LeaseTTL: 60 * time.Millisecond}, log, nil, nil, nil)
	if err := c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c.Run()
	defer c.Close()
	waitFor(t, "leading", c.IsLeader)
	n := 2
	if _, err := c.CreateGroup(context.Background(), events.Meta{Actor: "t"}, commands.CreateGroupInput{StreamPrefix: simKey.StreamPrefix, ConsumerGroup: simKey.ConsumerGroup, InitialShardCount: &n, RequestedBy: "t"}); err != nil {
		t.Fatal(err)
	}
	h := &holdHarness{t: t, c: c, log: log}
	a := &hmember{id: "a"}
	h.settle(a)
	call := h.hold(a, time.Minute, nil)
	h.waitHeld(1)
	lease.set(func(l *scriptedLease) { l.holder, l.token = "other", l.token+1 })
	call.wait(t, "held heartbeat when the lease is lost")
	if call.err != nil || call.why != coordinator.HoldReleased || call.resp.Status != wire.StatusOK {
		t.Fatalf("%v %+v %v, want released", call.why, call.resp, call.err)
	}
}

// TestScaleOutGrantsNewShardsWithActivation: a scale-out's activation
// grants the new shards to their members in the same decision; the held
// heartbeats it wakes are answered with them, and nothing more is decided
// for them (no member.synced after the activation's).
func TestScaleOutGrantsNewShardsWithActivation(t *testing.T) {
	h := newHoldHarness(t, 2, coordinator.Config{})
	a, b := &hmember{id: "a"}, &hmember{id: "b"}
	h.settle(a, b)
	ac, bc := h.hold(a, time.Minute, nil), h.hold(b, time.Minute, nil)
	h.waitHeld(2)
	to := 4
	if _, err := h.c.Scale(context.Background(), events.Meta{Actor: "test"}, simKey, commands.ScaleInput{TargetShardCount: &to, RequestedBy: "test", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if h.group().AssignableCount != 4 {
		h.c.Tick(context.Background()) // provisioning and activation, if the scale left them to the reconciler
	}
	total := 0
	for _, call := range []*heldCall{ac, bc} {
		call.wait(t, "held heartbeat during the scale-out")
		if call.err != nil || call.why != coordinator.HoldWoken || call.resp.Status != wire.StatusOK {
			t.Fatalf("%v %+v %v, want woken", call.why, call.resp, call.err)
		}
		total += len(call.resp.Assignment.AssignedShards)
	}
	if total != 4 {
		t.Fatalf("the woken answers assign %d shards, want all 4", total)
	}
	entries, err := h.log.Read(context.Background(), events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}
	recs := decoded(t, entries)
	activated := -1
	for i, rec := range recs {
		if rec.Type == "resharding.activated" {
			activated = i
		}
		if rec.Type == "member.synced" && activated >= 0 && rec.Actor != commands.Actor {
			t.Fatalf("member.synced by %s after the activation: the grant was not made with it (log %v)", rec.Actor, typesOf(recs))
		}
	}
	if activated < 0 {
		t.Fatalf("no activation in %v", typesOf(recs))
	}
}

// TestHeldHeartbeatDroppedThenRenewedKeepsMember: a member whose held
// heartbeat's connection dropped and that heartbeats again within the grace
// (a client that cancelled its hold to report something, a connection that
// flapped) is not expired when the grace ends.
func TestHeldHeartbeatDroppedThenRenewedKeepsMember(t *testing.T) {
	h := newHoldHarness(t, 2, coordinator.Config{HeartbeatDropGrace: 200 * time.Millisecond})
	a := &hmember{id: "a"}
	h.settle(a)
	before := h.logLen()
	call := h.hold(a, time.Minute, nil)
	h.waitHeld(1)
	call.cancel()
	call.wait(t, "a's held heartbeat")
	if call.why != coordinator.HoldDropped {
		t.Fatalf("%v, want dropped", call.why)
	}
	h.beat(a) // again, on another connection
	waitFor(t, "the grace decided", func() bool { return h.c.PendingGraces() == 0 })
	if m := h.group().Member("a"); !m.Live() {
		t.Fatalf("a is %s after it heartbeat again within the grace", m.State)
	}
	if h.logLen() != before {
		t.Fatalf("%d entries appended", h.logLen()-before)
	}
}
