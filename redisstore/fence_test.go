package redisstore_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/routing"
)

// TestIntegrationBarrierEvidence: the proof of a barrier's source shard, from
// a real Redis. Not proven while an entry up to the cutover is unread or
// pending; proven once everything up to it was read and acked. A stream Redis
// lost and that was recreated empty after the cutover reports its last
// generated id ("0-0", below the cutover) and is proven: what it held up to
// the cutover is gone, and an empty stream's group never gets past the
// cutover (the barrier used to wait on it forever).
func TestIntegrationBarrierEvidence(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)
	sh := redisstore.NewShards(rdb)
	prefix := uniqueKey("barrier")
	MustProvision(t, sh, prefix, "g", 0, 1)
	key := prefix + ":0"
	var cutover string
	for i := 0; i < 3; i++ {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"i", i}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		cutover = id
	}
	src := []events.BarrierSource{{ShardIndex: 0, StreamKey: key, CutoverID: cutover}}
	proof := func() events.BarrierProof {
		t.Helper()
		reads, err := sh.BarrierEvidence(ctx, "g", src)
		if err != nil || len(reads) != 1 {
			t.Fatalf("barrier evidence: %v %v", reads, err)
		}
		return reads[0].BarrierProof
	}
	if p := proof(); projection.SourceProven(p) || p.LastGenerated != cutover {
		t.Fatalf("nothing read: %+v proven=%v, want not proven, last generated %s", p, projection.SourceProven(p), cutover)
	}
	msgs, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{key, ">"}, Count: 10}).Result()
	if err != nil {
		t.Fatal(err)
	}
	if p := proof(); projection.SourceProven(p) || p.Pending != 3 {
		t.Fatalf("read, not acked: %+v, want 3 pending, not proven", p)
	}
	for _, m := range msgs[0].Messages {
		rdb.XAck(ctx, key, "g", m.ID)
	}
	if p := proof(); !projection.SourceProven(p) {
		t.Fatalf("read and acked up to the cutover: %+v, want proven", p)
	}
	// Redis loses the stream; the shard check recreates it empty.
	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if err := sh.Repair(ctx, prefix, "g", []int{0}); err != nil {
		t.Fatal(err)
	}
	if p := proof(); !p.Exists || p.LastGenerated != "0-0" || !projection.SourceProven(p) {
		t.Fatalf("recreated empty after the cutover: %+v proven=%v, want exists, last generated 0-0, proven", p, projection.SourceProven(p))
	}
}

// TestIntegrationCutoverRaisesTheStreamFence: a cutover raises the group's
// fence and, when given one, the stream's (routing.StreamFenceField), never
// lowering either; LowerFences lowers the stream's field like a group's.
func TestIntegrationCutoverRaisesTheStreamFence(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)
	sh := redisstore.NewShards(rdb)
	prefix := uniqueKey("fenced")
	MustProvision(t, sh, prefix, "g", 0, 2)
	shards := []events.CutoverShard{{Index: 0, Raise: true}, {Index: 1}}
	if _, err := sh.Cutover(ctx, prefix, "g", 5, 3, shards); err != nil {
		t.Fatal(err)
	}
	fence := func(shard int, field string) string {
		t.Helper()
		return rdb.HGet(ctx, routing.FenceKey(routing.StreamKey(prefix, shard)), field).Val()
	}
	if fence(0, "g") != "5" || fence(0, routing.StreamFenceField) != "3" || fence(1, routing.StreamFenceField) != "" {
		t.Fatalf("after the cutover: shard 0 g=%q *=%q, shard 1 *=%q; want 5, 3 and none (shard 1 is not raised)", fence(0, "g"), fence(0, routing.StreamFenceField), fence(1, routing.StreamFenceField))
	}
	// A cutover without stream metadata (0) and a lower one leave it.
	if _, err := sh.Cutover(ctx, prefix, "g", 4, 0, shards); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.Cutover(ctx, prefix, "g", 4, 2, shards); err != nil {
		t.Fatal(err)
	}
	if fence(0, "g") != "5" || fence(0, routing.StreamFenceField) != "3" {
		t.Fatalf("lower cutovers changed the fences: g=%q *=%q", fence(0, "g"), fence(0, routing.StreamFenceField))
	}
	n, err := sh.LowerFences(ctx, prefix, routing.StreamFenceField, 2, 2)
	if err != nil || n != 1 || fence(0, routing.StreamFenceField) != "2" || fence(0, "g") != "5" {
		t.Fatalf("LowerFences of the stream's field: %d, %v; *=%q g=%q", n, err, fence(0, routing.StreamFenceField), fence(0, "g"))
	}
}
