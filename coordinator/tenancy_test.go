package coordinator_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// Tenants, part two (#29): quotas per principal and per prefix, empty
// groups that expire, and what a group's delete removes (removal.go,
// expiry.go, quota.go), on the in-memory log and fake shard streams. The
// same stories against a real Redis and the real program are in
// cmd/coordinator/quota_e2e_test.go.

// beatAs sends member id's heartbeat to prefix/group as principal.
func (h *streamHarness) beatAs(principal, prefix, group, id string, epoch int64) (*wire.HeartbeatResponse, error) {
	req := &wire.HeartbeatRequest{
		ProtocolVersion: ptr(wire.ProtocolVersion), RequestID: fmt.Sprintf("r%d", h.n.Add(1)), MemberID: id, MemberName: ptr(id),
		MemberEpoch: ptr(epoch), MetadataVersion: ptr(int64(1)),
		RuntimeConsumerCapacity: &wire.Capacity{RuntimeMaxConcurrency: ptr(1), AvailableConcurrency: ptr(1)},
		OwnedShards:             []wire.ShardRef{}, RevokingShards: []wire.RevokingReport{}, ShardProgress: []wire.ShardProgress{},
	}
	return h.c.Heartbeat(context.Background(), projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: group}, id, principal, req)
}

// withGroup lists the fake shard streams of prefix 0..n-1 that have consumer group name.
func (h *streamHarness) withGroup(prefix, name string, n int) []int {
	var out []int
	for i := 0; i < n; i++ {
		for _, g := range h.fakeGroups(streamKey(prefix, i)) {
			if g == name {
				out = append(out, i)
			}
		}
	}
	return out
}

// putGroup adds consumer group name to the fake stream key (made if missing).
func (h *streamHarness) putGroup(key, name string) {
	h.fake.mu.Lock()
	defer h.fake.mu.Unlock()
	st := h.fake.streams[key]
	if st == nil {
		st = &fakeStream{groups: map[string]*fakeGroup{}}
		h.fake.streams[key] = st
	}
	st.groups[name] = &fakeGroup{}
}

func (h *streamHarness) deleteGroup(prefix, group string) error {
	_, err := h.c.DeleteGroup(context.Background(), meta, projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: group},
		commands.DeleteGroupInput{RequestedBy: "alice", Reason: "test", Force: true})
	return err
}

// lastOf is the last record of type typ.
func (h *streamHarness) lastOf(typ string) events.Record {
	h.t.Helper()
	recs := h.records()
	for i := len(recs) - 1; i >= 0; i-- {
		if recs[i].Type == typ {
			return recs[i]
		}
	}
	h.t.Fatalf("no %s in the log: %v", typ, typesOf(recs))
	return events.Record{}
}

// TestDeleteDestroysTheConsumerGroupsItCreated: a group's delete names the
// shard streams it destroys the group's consumer group on, destroys them and
// records that it did; a stranger's consumer group on the same shard stays.
func TestDeleteDestroysTheConsumerGroupsItCreated(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	if _, err := h.createStream("orders", 4); err != nil {
		t.Fatal(err)
	}
	h.putGroup("orders:1", "stranger")
	if _, err := h.createGroup("orders", "billing", nil); err != nil {
		t.Fatal(err)
	}
	if got := h.withGroup("orders", "billing", 4); !reflect.DeepEqual(got, []int{0, 1, 2, 3}) {
		t.Fatalf("provisioned on %v", got)
	}
	if err := h.deleteGroup("orders", "billing"); err != nil {
		t.Fatal(err)
	}
	del := h.lastOf("group.deleted").Event.(*events.GroupDeleted)
	if want := []string{"orders:0", "orders:1", "orders:2", "orders:3"}; !reflect.DeepEqual(del.Destroy, want) {
		t.Fatalf("group.deleted destroys %v, want %v", del.Destroy, want)
	}
	if got := h.withGroup("orders", "billing", 4); len(got) != 0 {
		t.Fatalf("consumer group billing left on %v", got)
	}
	if got := h.fakeGroups("orders:1"); !reflect.DeepEqual(got, []string{"stranger"}) {
		t.Fatalf("orders:1 has %v, want the stranger's consumer group alone", got)
	}
	done := h.lastOf("group.consumer_groups_destroyed").Event.(*events.ConsumerGroupsDestroyed)
	if !reflect.DeepEqual(done.StreamKeys, del.Destroy) {
		t.Fatalf("destroyed %v, want %v", done.StreamKeys, del.Destroy)
	}
	if _, pending := h.c.State().Removal(projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "billing"}); pending {
		t.Fatal("the removal is still pending")
	}
}

// TestDeleteKeepsAConsumerGroupItFound: on an adopted stream where a
// consumer group of the group's name was there before, the create records
// the shard as someone else's and the delete leaves that consumer group.
func TestDeleteKeepsAConsumerGroupItFound(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	for i := 0; i < 3; i++ {
		h.stranger(streamKey("legacy", i))
	}
	h.putGroup("legacy:1", "billing")
	if _, err := h.c.AdoptStream(context.Background(), meta, commands.AdoptStreamInput{StreamPrefix: "legacy", ShardCount: ptr(3), RequestedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.createGroup("legacy", "billing", nil); err != nil {
		t.Fatal(err)
	}
	if got := h.lastOf("group.created").Event.(*events.GroupCreated).ForeignShards; !reflect.DeepEqual(got, []int{1}) {
		t.Fatalf("foreignShards %v, want [1]", got)
	}
	if err := h.deleteGroup("legacy", "billing"); err != nil {
		t.Fatal(err)
	}
	if got := h.withGroup("legacy", "billing", 3); !reflect.DeepEqual(got, []int{1}) {
		t.Fatalf("billing left on %v, want on legacy:1 only (it was there before)", got)
	}
	if del := h.lastOf("group.deleted").Event.(*events.GroupDeleted); !reflect.DeepEqual(del.Destroy, []string{"legacy:0", "legacy:2"}) {
		t.Fatalf("destroy %v", del.Destroy)
	}
}

// TestRemovalSurvivesAFailedDestroy: Redis fails the destroy after the
// delete was recorded: the removal stays pending in the projection (and in
// a coordinator started again from the log), a create of the same name is
// refused while it is (its consumer groups would be destroyed under it), and
// the next reconciler pass finishes it; then the name is created again with
// consumer groups of its own.
func TestRemovalSurvivesAFailedDestroy(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	k := projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "billing"}
	if _, err := h.createStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := h.createGroup("orders", "billing", nil); err != nil {
		t.Fatal(err)
	}
	h.fake.mu.Lock()
	h.fake.downUntil = h.clock.Now().Add(time.Minute)
	h.fake.mu.Unlock()
	if err := h.deleteGroup("orders", "billing"); err != nil {
		t.Fatalf("delete with Redis down: %v (the decision is recorded; the destroy waits)", err)
	}
	if _, pending := h.c.State().Removal(k); !pending {
		t.Fatal("no pending removal after a failed destroy")
	}
	_, err := h.createGroup("orders", "billing", nil)
	wantCode(t, err, commands.ErrProvisioningFailed, "destroy")

	// A coordinator started from the log has the removal pending too.
	again := coordinator.New(coordinator.Config{TickInterval: time.Hour, ShardCheckInterval: -1, BarrierCheckInterval: time.Hour, SnapshotEvery: -1}, h.log, h.fake, nil, h.clock)
	if err := again.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if _, pending := again.State().Removal(k); !pending {
		t.Fatal("a coordinator loaded from the log lost the pending removal")
	}
	again.Close()

	h.clock.Advance(2 * time.Minute)
	if got := h.withGroup("orders", "billing", 2); len(got) != 2 {
		t.Fatalf("consumer groups %v before the pass", got)
	}
	h.c.Tick(context.Background())
	if _, pending := h.c.State().Removal(k); pending {
		t.Fatal("the reconciler pass did not finish the removal")
	}
	if got := h.withGroup("orders", "billing", 2); len(got) != 0 {
		t.Fatalf("consumer groups left on %v", got)
	}
	if _, err := h.createGroup("orders", "billing", nil); err != nil {
		t.Fatal(err)
	}
	if got := h.withGroup("orders", "billing", 2); len(got) != 2 {
		t.Fatalf("the new group has consumer groups on %v", got)
	}
}

// TestCreateAgainFinishesThePendingRemovalFirst: a create of a name whose
// removal is pending (Redis failed it; Redis is back) finishes the removal
// (its consumer groups destroyed and recorded) before it provisions: the
// new group starts on consumer groups of its own, at the streams' end, and
// the log says so in that order.
func TestCreateAgainFinishesThePendingRemovalFirst(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	if _, err := h.createStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := h.createGroup("orders", "billing", nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		h.fake.publish("orders", 0)
	}
	h.fake.consume("orders", "billing", 0)
	h.fake.mu.Lock()
	h.fake.downUntil = h.clock.Now().Add(time.Second)
	h.fake.mu.Unlock()
	if err := h.deleteGroup("orders", "billing"); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(2 * time.Second)
	n := len(h.records())
	if _, err := h.createGroup("orders", "billing", nil); err != nil {
		t.Fatal(err)
	}
	if got, want := h.typesSince(n), []string{"group.consumer_groups_destroyed", "group.created"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	if p := h.fake.pending("orders", "billing", 0); p != 0 {
		t.Fatalf("the new group inherited %d pending entries of the old one", p)
	}
}

// TestEmptyRegisteredGroupExpires: a group a member's heartbeat registered
// is removed (with its consumer groups) once it had no live member for the
// retention, at the first tick after it, not before; a group an operator
// created never expires.
func TestEmptyRegisteredGroupExpires(t *testing.T) {
	retention := time.Hour
	h := newStreamHarness(t, coordinator.Config{EmptyGroupRetention: retention, MemberLease: 10 * time.Second})
	if _, err := h.createStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := h.createGroup("orders", "operators", nil); err != nil {
		t.Fatal(err)
	}
	if r, err := h.beatAs("svc", "orders", "orders-consumr", "m-1", 0); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("registration: %+v %v", r, err)
	}
	k := projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "orders-consumr"}
	// The member vanishes: its lease lapses, and the group is empty from then.
	h.clock.Advance(11 * time.Second)
	h.c.Tick(context.Background())
	g, ok := h.c.State().Group(k)
	if !ok || g.LiveCount() != 0 || g.EmptySince.IsZero() {
		t.Fatalf("after the lease: %+v", g)
	}
	h.clock.Advance(retention - 2*time.Second)
	h.c.Tick(context.Background())
	if _, ok := h.c.State().Group(k); !ok {
		t.Fatal("expired before the retention passed")
	}
	h.clock.Advance(2 * time.Second)
	h.c.Tick(context.Background())
	if _, ok := h.c.State().Group(k); ok {
		t.Fatal("not expired after the retention")
	}
	del := h.lastOf("group.deleted")
	if ev := del.Event.(*events.GroupDeleted); !ev.Expired || len(ev.Destroy) != 2 || del.Actor != commands.Actor {
		t.Fatalf("group.deleted %+v by %s", ev, del.Actor)
	}
	if got := h.withGroup("orders", "orders-consumr", 2); len(got) != 0 {
		t.Fatalf("consumer groups left on %v", got)
	}
	h.clock.Advance(10 * retention)
	h.c.Tick(context.Background())
	if _, ok := h.c.State().Group(projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "operators"}); !ok {
		t.Fatal("an operator's group expired")
	}
}

// TestQuotasPerPrincipalAndPrefix, one rule at a time: at the quota is
// accepted, one past it refused with the quota's code (and nothing
// provisioned), another principal or prefix unaffected.
func TestQuotasPerPrincipalAndPrefix(t *testing.T) {
	t.Run("groups per principal", func(t *testing.T) {
		h := newStreamHarness(t, coordinator.Config{MaxGroupsPerPrincipal: 3})
		if _, err := h.createStream("orders", 2); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if r, err := h.beatAs("svc", "orders", fmt.Sprintf("g%d", i), "m", 0); err != nil || r.Status != wire.StatusOK {
				t.Fatalf("registration %d: %+v %v", i, r, err)
			}
		}
		_, err := h.beatAs("svc", "orders", "g3", "m", 0)
		wantCode(t, err, commands.ErrPrincipalGroupQuota, "--max-groups-per-principal is 3")
		if got := h.withGroup("orders", "g3", 2); len(got) != 0 {
			t.Fatalf("a refused registration provisioned %v", got)
		}
		if r, err := h.beatAs("other", "orders", "g3", "m", 0); err != nil || r.Status != wire.StatusOK {
			t.Fatalf("another principal: %+v %v", r, err)
		}
		// The delete of one frees its place.
		if err := h.deleteGroup("orders", "g0"); err != nil {
			t.Fatal(err)
		}
		if r, err := h.beatAs("svc", "orders", "g4", "m", 0); err != nil || r.Status != wire.StatusOK {
			t.Fatalf("after a delete: %+v %v", r, err)
		}
	})
	t.Run("groups per prefix", func(t *testing.T) {
		h := newStreamHarness(t, coordinator.Config{MaxGroupsPerPrefix: 2})
		for _, g := range []string{"a", "b"} {
			if _, err := h.createGroup("orders", g, ptr(1)); err != nil {
				t.Fatal(err)
			}
		}
		_, err := h.createGroup("orders", "c", ptr(1))
		wantCode(t, err, commands.ErrPrefixGroupQuota, "--max-groups-per-prefix is 2")
		if _, err := h.createGroup("payments", "c", ptr(1)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("shards per prefix", func(t *testing.T) {
		h := newStreamHarness(t, coordinator.Config{MaxShardsPerPrefix: 8})
		if _, err := h.createGroup("orders", "a", ptr(4)); err != nil {
			t.Fatal(err)
		}
		if _, err := h.createGroup("orders", "b", nil); err != nil {
			t.Fatal(err)
		}
		_, err := h.createGroup("orders", "c", nil) // the stream's 4 more
		wantCode(t, err, commands.ErrPrefixShardQuota, "--max-shards-per-prefix is 8")
		if got := h.withGroup("orders", "c", 4); len(got) != 0 {
			t.Fatalf("a refused create provisioned %v", got)
		}
		if _, err := h.createGroup("solo", "x", ptr(8)); err != nil {
			t.Fatal(err)
		}
		_, err = h.c.Scale(context.Background(), meta, projection.GroupKey{StreamPrefix: "solo", ConsumerGroup: "x"}, commands.ScaleInput{TargetShardCount: ptr(9), RequestedBy: "alice", Reason: "more"})
		wantCode(t, err, commands.ErrPrefixShardQuota, "")
		if got := h.withGroup("solo", "x", 9); len(got) != 8 {
			t.Fatalf("a refused scale-out provisioned: %v", got)
		}
	})
	t.Run("shards per principal", func(t *testing.T) {
		h := newStreamHarness(t, coordinator.Config{MaxShardsPerPrincipal: 6})
		if _, err := h.createGroup("orders", "a", ptr(4)); err != nil {
			t.Fatal(err)
		}
		_, err := h.createGroup("payments", "b", ptr(3))
		wantCode(t, err, commands.ErrPrincipalShardQuota, "--max-shards-per-principal is 6")
		if _, err := h.createGroup("payments", "b", ptr(2)); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("members per principal", func(t *testing.T) {
		h := newStreamHarness(t, coordinator.Config{MaxMembersPerPrincipal: 3})
		for _, g := range []string{"a", "b"} {
			if _, err := h.createGroup("orders", g, ptr(2)); err != nil {
				t.Fatal(err)
			}
		}
		for i, g := range []string{"a", "a", "b"} {
			if r, err := h.beatAs("svc", "orders", g, fmt.Sprintf("m%d", i), 0); err != nil || r.Status != wire.StatusOK {
				t.Fatalf("join %d: %+v %v", i, r, err)
			}
		}
		_, err := h.beatAs("svc", "orders", "b", "m3", 0)
		wantCode(t, err, commands.ErrPrincipalMemberQuota, "--max-members-per-principal is 3")
		if r, err := h.beatAs("other", "orders", "b", "o1", 0); err != nil || r.Status != wire.StatusOK {
			t.Fatalf("another principal: %+v %v", r, err)
		}
		// A leave frees a place.
		if _, err := h.beatAs("svc", "orders", "a", "m0", -1); err != nil {
			t.Fatal(err)
		}
		if r, err := h.beatAs("svc", "orders", "b", "m3", 0); err != nil || r.Status != wire.StatusOK {
			t.Fatalf("after a leave: %+v %v", r, err)
		}
	})
}

// TestChurnBudgetPerPrincipal: joins and leaves spread over many groups are
// held to the principal's budget across them (here 40 a minute: 10 at
// once), while each group's own budget (600 a minute) is far from spent;
// another principal keeps its own.
func TestChurnBudgetPerPrincipal(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{PrincipalChurnPerMinute: 40})
	for i := 0; i < 20; i++ {
		if _, err := h.createGroup("orders", fmt.Sprintf("g%d", i), ptr(1)); err != nil {
			t.Fatal(err)
		}
	}
	accepted := 0
	var refused error
	for i := 0; i < 20; i++ {
		_, err := h.beatAs("svc", "orders", fmt.Sprintf("g%d", i), "m", 0)
		if err != nil {
			refused = err
			continue
		}
		accepted++
	}
	if accepted != 10 {
		t.Fatalf("%d joins accepted over 20 groups, want the principal's burst of 10", accepted)
	}
	wantCode(t, refused, commands.ErrRateLimited, "--principal-churn-per-minute")
	if ce := refused.(*commands.Error); ce.RetryAfter <= 0 {
		t.Fatalf("no Retry-After: %+v", ce)
	}
	if r, err := h.beatAs("other", "orders", "g19", "o", 0); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("another principal: %+v %v", r, err)
	}
	h.clock.Advance(1500 * time.Millisecond) // one token at 40 a minute
	if _, err := h.beatAs("svc", "orders", "g15", "m", 0); err != nil {
		t.Fatalf("after the refill: %v", err)
	}
}

// TestRefusedRegistrationLeavesNoConsumerGroup: a first heartbeat whose
// member the principal's member quota refuses is refused before its group's
// consumer groups are provisioned; and one that another decision overtook
// between its provisioning and its own decision (the principal's last group
// registered elsewhere meanwhile) destroys the consumer groups it made:
// nobody records them, nobody would remove them.
func TestRefusedRegistrationLeavesNoConsumerGroup(t *testing.T) {
	t.Run("member quota, before provisioning", func(t *testing.T) {
		h := newStreamHarness(t, coordinator.Config{MaxMembersPerPrincipal: 1})
		if _, err := h.createStream("orders", 2); err != nil {
			t.Fatal(err)
		}
		if r, err := h.beatAs("svc", "orders", "a", "m1", 0); err != nil || r.Status != wire.StatusOK {
			t.Fatalf("first: %+v %v", r, err)
		}
		provisions := 0
		h.fake.late = func(call string) {
			if call == "Provision" {
				provisions++
			}
		}
		_, err := h.beatAs("svc", "orders", "b", "m2", 0)
		wantCode(t, err, commands.ErrPrincipalMemberQuota, "")
		if got := h.withGroup("orders", "b", 2); len(got) != 0 || provisions != 0 {
			t.Fatalf("the refused registration provisioned %d times: consumer groups on %v", provisions, got)
		}
	})
	t.Run("overtaken after provisioning", func(t *testing.T) {
		h := newStreamHarness(t, coordinator.Config{MaxGroupsPerPrincipal: 1})
		for _, p := range []string{"orders", "other"} {
			if _, err := h.createStream(p, 2); err != nil {
				t.Fatal(err)
			}
		}
		once := false
		h.fake.late = func(call string) {
			if call == "Provision" && !once {
				once = true
				if r, err := h.beatAs("svc", "other", "first", "m9", 0); err != nil || r.Status != wire.StatusOK {
					t.Errorf("the overtaking registration: %+v %v", r, err)
				}
			}
		}
		_, err := h.beatAs("svc", "orders", "late", "m1", 0)
		wantCode(t, err, commands.ErrPrincipalGroupQuota, "")
		if got := h.withGroup("orders", "late", 2); len(got) != 0 {
			t.Fatalf("consumer groups of the overtaken registration left on %v", got)
		}
		if got := h.withGroup("other", "first", 2); len(got) != 2 {
			t.Fatalf("the overtaking registration's consumer groups on %v", got)
		}
	})
}
