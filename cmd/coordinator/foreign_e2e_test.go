package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
)

// #19 finding 4, as the attacks that worked: the coordinator provisioned
// and deleted shard streams it did not create.

// TestIntegrationScaleOutDoesNotTouchAStrangersStream: a stranger owns fx:3
// (two entries). fx/g is created with one shard and scaled to 4: the scale
// used to run XGROUP CREATE ... $ on the stranger's stream (its entries
// skipped, lag 0) and the scale back to 1 deleted it. The scale-out is now
// refused up front, naming fx:3, and nothing changes: no resharding, no
// consumer group on fx:3, its entries kept, the new shards not created.
func TestIntegrationScaleOutDoesNotTouchAStrangersStream(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	rdb := rs.Client(t)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "fx:3", Values: map[string]any{"owner": "stranger", "n": i}})
	}
	createGroup(t, tc, "fx", "g", 1)
	r := tc.Do("POST", "/coord/v1/streams/fx/groups/g/scale", map[string]any{"targetShardCount": 4, "requestedBy": "ops", "reason": "more"})
	if r.Status != 409 || r.JSON["errorCode"] != "STREAM_PREFIX_ALREADY_EXISTS" || !strings.Contains(fmt.Sprint(r.JSON["message"]), "fx:3") {
		t.Fatalf("scale-out over a stranger's fx:3: HTTP %d %s, want 409 STREAM_PREFIX_ALREADY_EXISTS naming fx:3", r.Status, r.Body)
	}
	if groups, err := rdb.XInfoGroups(ctx, "fx:3").Result(); err != nil || len(groups) != 0 {
		t.Fatalf("the stranger's fx:3 got consumer groups %v (%v)", groups, err)
	}
	if n := rdb.XLen(ctx, "fx:3").Val(); n != 2 {
		t.Fatalf("the stranger's fx:3 holds %d entries, want its 2", n)
	}
	if n := rdb.Exists(ctx, "fx:1", "fx:2").Val(); n != 0 {
		t.Fatalf("the refused scale-out created %d new shard streams", n)
	}
	g := tc.Do("GET", "/coord/v1/streams/fx/groups/g", nil).MustStatus(t, 200)
	if g.JSON["shardCount"] != 1.0 || g.JSON["activeMigration"] != nil {
		t.Fatalf("the group after the refused scale-out: %s", g.Body)
	}
	// A scale-in never reaches the stranger's stream: there is nothing to
	// retire, and fx:3 stays.
	if r := tc.Do("POST", "/coord/v1/streams/fx/groups/g/scale", map[string]any{"targetShardCount": 1, "requestedBy": "ops", "reason": "fewer"}); r.Status == 202 {
		t.Fatalf("a scale to the current count was accepted: %s", r.Body)
	}
	if n := rdb.Exists(ctx, "fx:3").Val(); n != 1 {
		t.Fatal("the stranger's fx:3 was deleted")
	}
}

// TestIntegrationScaleOutRefusesAKeyOfAnotherType: a key of another type at
// a new shard's index used to leave the resharding PREPARING for ever (its
// provisioning failing on every pass) and its retirement failing; the
// scale-out is now refused up front, naming the key, and nothing is left
// PREPARING.
func TestIntegrationScaleOutRefusesAKeyOfAnotherType(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	rdb := rs.Client(t)
	ctx := context.Background()
	createGroup(t, tc, "typed", "g", 1)
	rdb.Set(ctx, "typed:2", "not a stream", 0)
	r := tc.Do("POST", "/coord/v1/streams/typed/groups/g/scale", map[string]any{"targetShardCount": 4, "requestedBy": "ops", "reason": "more"})
	if r.Status != 409 || r.JSON["errorCode"] != "STREAM_PREFIX_ALREADY_EXISTS" || !strings.Contains(fmt.Sprint(r.JSON["message"]), "typed:2") {
		t.Fatalf("scale-out over a string at typed:2: HTTP %d %s, want 409 STREAM_PREFIX_ALREADY_EXISTS naming typed:2", r.Status, r.Body)
	}
	consistently(t, time.Second, "the group stays at 1 shard with no resharding", func() bool {
		g := tc.Do("GET", "/coord/v1/streams/typed/groups/g", nil).MustStatus(t, 200)
		return g.JSON["shardCount"] == 1.0 && g.JSON["activeMigration"] == nil
	})
	if v := rdb.Get(ctx, "typed:2").Val(); v != "not a stream" {
		t.Fatalf("typed:2 = %q", v)
	}
}

// TestIntegrationAdoptedStreamsAreNeverDeleted: streams another system
// created are adopted, a group registers on them and reads them, and a
// scale-in takes two of them out of the layout: once drained they are
// retired by keeping them (recorded as kept), never deleted.
func TestIntegrationAdoptedStreamsAreNeverDeleted(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	rdb := rs.Client(t)
	ctx := context.Background()
	for i := 0; i < 4; i++ {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: fmt.Sprintf("ad:%d", i), Values: map[string]any{"before": i}})
	}
	// A missing shard is named, and nothing is written.
	r := tc.Do("POST", "/coord/v1/streams/ad/adopt", map[string]any{"shardCount": 5, "requestedBy": "ops"})
	if r.Status != 400 || !strings.Contains(fmt.Sprint(r.JSON["message"]), "ad:4") {
		t.Fatalf("adopt of 5 with ad:4 missing: HTTP %d %s", r.Status, r.Body)
	}
	r = tc.Do("POST", "/coord/v1/streams/ad/adopt", map[string]any{"shardCount": 4, "requestedBy": "ops", "reason": "take over"}).MustStatus(t, 201)
	if r.JSON["metadataVersion"] != 1.0 || r.JSON["shardCount"] != 4.0 {
		t.Fatalf("adopt: %s", r.Body)
	}
	tc.Do("POST", "/coord/v1/streams/ad/adopt", map[string]any{"shardCount": 4, "requestedBy": "ops"}).MustStatus(t, 409)

	m := newSimMember(tc, "ad", "g", "m1", rdb, true)
	m.start(50 * time.Millisecond)
	defer m.stop()
	eventually(t, 10*time.Second, "the first heartbeat registers ad/g and m1 owns its 4 shards", func() bool { return len(m.ownedNow()) == 4 })
	id := scale(t, tc, "ad", "g", 2)
	waitState(t, tc, "ad", "g", id, "DEPRECATED", 20*time.Second)
	mig := map[string]any{}
	eventually(t, 10*time.Second, "the scale-in retired", func() bool {
		mig = tc.migration("ad", "g", id)
		ret, _ := mig["retirement"].(map[string]any)
		return ret != nil && ret["retired"] == true
	})
	if n := rdb.Exists(ctx, "ad:2", "ad:3").Val(); n != 2 {
		t.Fatalf("adopted streams deleted: %d of ad:2, ad:3 exist", n)
	}
	var retired *apiEvent
	for _, e := range apiAllEvents(t, tc, "/coord/v1/monitoring/streams/ad/groups/g/events") {
		if e.Type == "resharding.retired" {
			e := e
			retired = &e
		}
	}
	if retired == nil || fmt.Sprint(retired.Payload["keptKeys"]) != "[ad:2 ad:3]" || fmt.Sprint(retired.Payload["streamKeys"]) != "[]" {
		t.Fatalf("resharding.retired %+v, want ad:2 and ad:3 kept, nothing deleted", retired)
	}
}
