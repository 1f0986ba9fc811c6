package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
)

// fastTimings makes leases and ticks short so lifecycle tests finish quickly.
func fastTimings(m *Main) {
	m.MemberLease = 2 * time.Second
	m.TickInterval = 100 * time.Millisecond
	m.HeartbeatInterval = 200 * time.Millisecond
	m.RebalanceTimeout = 5 * time.Second
}

func createGroup(t *testing.T, tc *testCoordinator, prefix, group string, shards int) {
	t.Helper()
	tc.Do("POST", fmt.Sprintf("/coord/v1/streams/%s/groups/%s", prefix, group), map[string]any{"initialShardCount": shards, "requestedBy": "test"}).MustStatus(t, 201)
}

func scale(t *testing.T, tc *testCoordinator, prefix, group string, target int) string {
	t.Helper()
	r := tc.Do("POST", fmt.Sprintf("/coord/v1/streams/%s/groups/%s/scale", prefix, group), map[string]any{"targetShardCount": target, "requestedBy": "test", "reason": "e2e"}).MustStatus(t, 202)
	return r.JSON["reshardingId"].(string)
}

func waitState(t *testing.T, tc *testCoordinator, prefix, group, id, want string, timeout time.Duration) map[string]any {
	t.Helper()
	var last map[string]any
	eventually(t, timeout, "resharding "+id+" to reach "+want, func() bool {
		last = tc.migration(prefix, group, id)
		return last["state"] == want
	})
	return last
}

// waitDrainRefused waits until the reconciler has read the removed shards of a
// scale-in (DRAINING, every drain row with Redis evidence, some shard not
// drained), then watches for a few ticks that the drain stays unproven.
func waitDrainRefused(t *testing.T, tc *testCoordinator, prefix, group, id string, tick time.Duration) map[string]any {
	t.Helper()
	var last map[string]any
	apiEventually(t, 15*time.Second, "resharding "+id+" DRAINING with Redis evidence of a shard not drained", func() (bool, string) {
		last = tc.migration(prefix, group, id)
		if last["drainProven"] != false || last["state"] == "DEPRECATED" {
			t.Fatalf("resharding %s with entries left: state %v drainProven %v, want DRAINING, unproven", id, last["state"], last["drainProven"])
		}
		rows, _ := last["drain"].([]any)
		read, undrained := len(rows) > 0, false
		for _, r := range rows {
			row, _ := r.(map[string]any)
			src, _ := row["evidenceSource"].(string)
			read = read && strings.HasPrefix(src, "redis@")
			undrained = undrained || row["drained"] == false
		}
		return last["state"] == "DRAINING" && read && undrained, fmt.Sprintf("state %v drain %v", last["state"], rows)
	})
	consistently(t, 5*tick, "a scale-in with entries left stays DRAINING, its drain unproven", func() bool {
		last = tc.migration(prefix, group, id)
		return last["state"] == "DRAINING" && last["drainProven"] == false
	})
	return last
}

func routedCount(t *testing.T, tc *testCoordinator, prefix, group string) int {
	t.Helper()
	r := tc.Do("GET", fmt.Sprintf("/coord/v1/streams/%s/groups/%s/producer-routing", prefix, group), nil).MustStatus(t, 200)
	return int(r.JSON["shardCount"].(float64))
}

func TestIntegrationScaleOutConverges(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	createGroup(t, tc, "so", "g", 4)
	rdb := rs.Client(t)
	a, b := newSimMember(tc, "so", "g", "a", rdb, false), newSimMember(tc, "so", "g", "b", rdb, false)
	a.start(100 * time.Millisecond)
	b.start(100 * time.Millisecond)
	defer a.stop()
	defer b.stop()
	eventually(t, 10*time.Second, "4 shards split 2/2", func() bool { return len(a.ownedNow()) == 2 && len(b.ownedNow()) == 2 })

	id := scale(t, tc, "so", "g", 8)
	if got := routedCount(t, tc, "so", "g"); got != 8 {
		t.Fatalf("routing after activation: %d shards, want 8 at once", got)
	}
	deadline := time.Now().Add(15 * time.Second)
	for tc.migration("so", "g", id)["state"] != "DEPRECATED" {
		noOverlap(t, a, b)
		if time.Now().After(deadline) {
			t.Fatalf("scale-out did not complete: %v", tc.migration("so", "g", id))
		}
		time.Sleep(20 * time.Millisecond)
	}
	eventually(t, 5*time.Second, "8 shards split 4/4", func() bool { return len(a.ownedNow()) == 4 && len(b.ownedNow()) == 4 })
	for i := 0; i < 8; i++ {
		groups, err := rdb.XInfoGroups(context.Background(), fmt.Sprintf("so:%d", i)).Result()
		if err != nil || len(groups) != 1 || groups[0].Name != "g" {
			t.Fatalf("shard so:%d not provisioned: %v %v", i, groups, err)
		}
	}
}

// TestIntegrationScaleInDrainsThenRetires: entries left on removed shards are
// consumed by their owners (the shards stay assigned while draining), then the
// shards are revoked, the resharding completes and the streams are deleted.
func TestIntegrationScaleInDrainsThenRetires(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	ctx := context.Background()
	createGroup(t, tc, "si", "g", 4)
	rdb := rs.Client(t)
	a := newSimMember(tc, "si", "g", "a", rdb, false) // not consuming yet
	a.start(100 * time.Millisecond)
	defer a.stop()
	eventually(t, 10*time.Second, "a owns all 4 shards", func() bool { return len(a.ownedNow()) == 4 })
	for i := 0; i < 20; i++ {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: fmt.Sprintf("si:%d", 2+i%2), Values: map[string]any{"payload": i}})
	}
	id := scale(t, tc, "si", "g", 2)
	if got := routedCount(t, tc, "si", "g"); got != 2 {
		t.Fatalf("routing: %d shards, want 2 at activation", got)
	}
	// Nobody consumed: the drain is not proven, the removed shards stay with a.
	waitDrainRefused(t, tc, "si", "g", id, 100*time.Millisecond)
	if got := a.ownedNow(); len(got) != 4 {
		t.Fatalf("member owns %v while draining, want all 4 (removed shards stay assigned)", got)
	}
	a.setConsume(true)
	a.stop()
	a.start(100 * time.Millisecond)
	waitState(t, tc, "si", "g", id, "DEPRECATED", 15*time.Second)
	if a.ackedNow() != 20 {
		t.Fatalf("acked %d entries, want the 20 left on removed shards", a.ackedNow())
	}
	eventually(t, 5*time.Second, "removed streams deleted", func() bool {
		n, _ := rdb.Exists(ctx, "si:2", "si:3").Result()
		return n == 0
	})
	eventually(t, 5*time.Second, "member back to shards 0,1", func() bool { return equalInts(a.ownedNow(), []int{0, 1}) })
	n, _ := rdb.Exists(ctx, "si:0", "si:1").Result()
	if n != 2 {
		t.Fatal("kept shards must not be deleted")
	}
}

// TestIntegrationDrainBlockedByUnknownLagAndForeignGroup: lag=null and a foreign
// consumer group's pending entries each keep a scale-in DRAINING.
func TestIntegrationDrainBlockedByUnknownLagAndForeignGroup(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	ctx := context.Background()
	createGroup(t, tc, "lag", "g", 2)
	rdb := rs.Client(t)
	// lag=null: entries after the group's position with one deleted in between.
	var ids []string
	for i := 0; i < 3; i++ {
		id, _ := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "lag:1", Values: map[string]any{"n": i}}).Result()
		ids = append(ids, id)
	}
	rdb.XDel(ctx, "lag:1", ids[1])
	groups, _ := rdb.XInfoGroups(ctx, "lag:1").Result()
	if len(groups) != 1 || groups[0].Lag != -1 {
		t.Fatalf("precondition: want lag=null on lag:1, got %+v", groups)
	}
	id := scale(t, tc, "lag", "g", 1) // no members: straight to the Redis checks
	waitDrainRefused(t, tc, "lag", "g", id, 100*time.Millisecond)
	// Consume everything: lag becomes known 0 and the drain completes.
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "ops", Streams: []string{"lag:1", ">"}, Count: 10, Block: -1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res[0].Messages {
		rdb.XAck(ctx, "lag:1", "g", m.ID)
	}
	waitState(t, tc, "lag", "g", id, "DEPRECATED", 10*time.Second)

	// A foreign consumer group with a pending entry holds the drain too.
	createGroup(t, tc, "fg", "g", 2)
	rdb.XGroupCreate(ctx, "fg:1", "analytics", "$")
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "fg:1", Values: map[string]any{"n": 1}})
	rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "analytics", Consumer: "x", Streams: []string{"fg:1", ">"}, Count: 10, Block: -1})
	res, _ = rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "ops", Streams: []string{"fg:1", ">"}, Count: 10, Block: -1}).Result()
	rdb.XAck(ctx, "fg:1", "g", res[0].Messages[0].ID)
	id2 := scale(t, tc, "fg", "g", 1)
	waitDrainRefused(t, tc, "fg", "g", id2, 100*time.Millisecond)
	pend, _ := rdb.XPending(ctx, "fg:1", "analytics").Result()
	rdb.XAck(ctx, "fg:1", "analytics", pend.Lower)
	waitState(t, tc, "fg", "g", id2, "DEPRECATED", 10*time.Second)
}

// TestIntegrationScaleInAllMembersExpired: with every member gone, the revoke wait
// is skipped and Redis alone decides; scale to 0 empties routing.
func TestIntegrationScaleInAllMembersExpired(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	createGroup(t, tc, "ex", "g", 3)
	rdb := rs.Client(t)
	a := newSimMember(tc, "ex", "g", "a", rdb, false)
	a.start(100 * time.Millisecond)
	eventually(t, 10*time.Second, "a owns all", func() bool { return len(a.ownedNow()) == 3 })
	a.stop() // crash: no leave
	id := scale(t, tc, "ex", "g", 0)
	if got := routedCount(t, tc, "ex", "g"); got != 0 {
		t.Fatalf("routing after scale to 0: %d shards", got)
	}
	waitState(t, tc, "ex", "g", id, "DEPRECATED", 15*time.Second)
	r := tc.Do("GET", "/coord/v1/streams/ex/groups/g/producer-routing", nil).MustStatus(t, 200)
	if shards := r.JSON["shards"].([]any); len(shards) != 0 {
		t.Fatalf("shards after full drain: %v", shards)
	}
}

// TestIntegrationRollbacks: metadata rollback of an unused scale-out; refusal once
// a new shard has an entry, and the drain policy; scale-in rollback.
func TestIntegrationRollbacks(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	ctx := context.Background()
	rdb := rs.Client(t)
	createGroup(t, tc, "rb", "g", 2)
	// A member that never converges keeps the scale-out ACTIVE.
	stuck := func() {
		tc.Heartbeat("rb", "g", "s", 0, 0, nil)
	}
	stuck()
	rollback := func(id string, body map[string]any) apiResponse {
		return tc.Do("POST", "/coord/v1/streams/rb/groups/g/migrations/"+id+"/rollback", body)
	}
	id := scale(t, tc, "rb", "g", 4)
	r := rollback(id, map[string]any{"requestedBy": "t", "reason": "oops"}).MustStatus(t, 202)
	if r.JSON["state"] != "ROLLED_BACK" || routedCount(t, tc, "rb", "g") != 2 {
		t.Fatalf("metadata rollback: %v", r.JSON)
	}
	rollback(id, map[string]any{"requestedBy": "t", "reason": "again"}).MustStatus(t, 202)

	id = scale(t, tc, "rb", "g", 4)
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "rb:3", Values: map[string]any{"payload": "x"}})
	r = rollback(id, map[string]any{"requestedBy": "t", "reason": "oops"}).MustStatus(t, 422)
	if r.JSON["errorCode"] != "ROLLBACK_NOT_ALLOWED" {
		t.Fatalf("refusal: %s", r.Body)
	}
	r = rollback(id, map[string]any{"requestedBy": "t", "reason": "drain it", "policy": "drain"}).MustStatus(t, 202)
	if r.JSON["state"] != "ROLLING_BACK" || routedCount(t, tc, "rb", "g") != 2 {
		t.Fatalf("drain rollback: %v", r.JSON)
	}
	// Consume the stray entry; the rollback then completes.
	res, _ := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "ops", Streams: []string{"rb:3", ">"}, Count: 10, Block: -1}).Result()
	rdb.XAck(ctx, "rb:3", "g", res[0].Messages[0].ID)
	waitState(t, tc, "rb", "g", id, "ROLLED_BACK", 15*time.Second)

	id = scale(t, tc, "rb", "g", 1)
	r = rollback(id, map[string]any{"requestedBy": "t", "reason": "keep 2"}).MustStatus(t, 202)
	if r.JSON["state"] != "ROLLED_BACK" || routedCount(t, tc, "rb", "g") != 2 {
		t.Fatalf("scale-in rollback: %v", r.JSON)
	}
}

// TestIntegrationStaleWritesAfterTheEndAreRead: a producer with stale routing
// writes to removed shards after the resharding ended (a scale-out rolled back
// by metadata, and a completed scale-in). The coordinator never deletes those
// entries unread: it makes the removed shards assignable again, a member reads
// them, then they are revoked and retired. (The HA soak found the rollback case:
// a producer that fetched the 6-shard routing in the 5 ms before a metadata
// rollback wrote to shards 4 and 5 after it; the retirement then waited forever
// and the entries were never read.)
func TestIntegrationStaleWritesAfterTheEndAreRead(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	ctx := context.Background()
	rdb := rs.Client(t)
	createGroup(t, tc, "st", "g", 2)
	a := newSimMember(tc, "st", "g", "a", rdb, true)
	a.start(100 * time.Millisecond)
	defer a.stop()
	eventually(t, 10*time.Second, "a owns both shards", func() bool { return len(a.ownedNow()) == 2 })

	// The stale producer: its routing still says 6 shards. Its writes land
	// when they reach Redis before the rollback's drain proof retired the
	// empty streams (NOMKSTREAM answers nil after): on a loaded machine the
	// proof can come first, and the scenario is run again.
	var id string
	landed := 0
	for attempt := 1; landed == 0; attempt++ {
		if attempt > 5 {
			t.Fatal("in 5 attempts no stale write reached the removed shards before their retirement")
		}
		id = scale(t, tc, "st", "g", 6)
		tc.Do("POST", "/coord/v1/streams/st/groups/g/migrations/"+id+"/rollback", map[string]any{"requestedBy": "t", "reason": "oops"}).MustStatus(t, 202)
		for i := 0; i < 4; i++ {
			err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: fmt.Sprintf("st:%d", 4+i%2), NoMkStream: true, Values: map[string]any{"payload": i}}).Err()
			switch {
			case err == nil:
				landed++
			case !errors.Is(err, redis.Nil):
				t.Fatalf("stale XADD: %v", err)
			}
		}
		eventually(t, 30*time.Second, "the stale entries read and the new streams retired", func() bool {
			n, _ := rdb.Exists(ctx, "st:2", "st:3", "st:4", "st:5").Result()
			return n == 0 && a.ackedNow() == landed
		})
	}
	eventually(t, 5*time.Second, "member back to shards 0,1", func() bool { return equalInts(a.ownedNow(), []int{0, 1}) })
	if routedCount(t, tc, "st", "g") != 2 {
		t.Fatal("routing must stay at 2 shards")
	}
	mig := tc.migration("st", "g", id)
	if mig["state"] != "ROLLED_BACK" {
		t.Fatalf("rollback state %v", mig["state"])
	}
	history := fmt.Sprint(mig["stateHistory"])
	for _, want := range []string{"reopened", "drained"} {
		if !strings.Contains(history, want) {
			t.Errorf("stateHistory lacks %q: %s", want, history)
		}
	}

	// A completed scale-in, then a late write to a removed (still provisioned) shard
	// is impossible once retired: XADD NOMKSTREAM fails and the producer refreshes.
	id = scale(t, tc, "st", "g", 1)
	waitState(t, tc, "st", "g", id, "DEPRECATED", 15*time.Second)
	eventually(t, 5*time.Second, "st:1 retired", func() bool { n, _ := rdb.Exists(ctx, "st:1").Result(); return n == 0 })
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "st:1", NoMkStream: true, Values: map[string]any{"payload": "late"}}).Err(); err != redis.Nil {
		t.Fatalf("XADD NOMKSTREAM to a retired shard: %v, want nil reply", err)
	}
}
