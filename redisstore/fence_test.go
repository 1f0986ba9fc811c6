package redisstore_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
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
