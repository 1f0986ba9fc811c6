package producer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/routing"
)

// TestSpreadUnkeyed: messages without a partition key all go to the shard
// the empty key routes to by default; with SpreadUnkeyed they go round-robin
// over the shards (single and batched publishes), and, with an event id,
// to the shard the id routes to, the same on every publish of that id, so a
// re-publish is still a duplicate of the first.
func TestSpreadUnkeyed(t *testing.T) {
	const shards = 4
	fx := setup(t, 3, shards, shards)
	ctx := context.Background()
	empty, _ := routing.RouteKey("", shards)

	plain := fx.producer(t, nil)
	for i := 0; i < 8; i++ {
		if res, err := plain.Publish(ctx, "", fields(i)); err != nil || res.ShardIndex != empty {
			t.Fatalf("unkeyed publish without SpreadUnkeyed: %+v %v, want shard %d", res, err, empty)
		}
	}

	spread := fx.producer(t, func(c *producer.Config) { c.SpreadUnkeyed = true })
	per := map[int]int{}
	for i := 0; i < 2*shards; i++ {
		res, err := spread.Publish(ctx, "", fields(i))
		if err != nil {
			t.Fatal(err)
		}
		per[res.ShardIndex]++
	}
	msgs := make([]producer.Message, 4*shards)
	for i := range msgs {
		msgs[i] = producer.Message{Fields: fields(i)}
	}
	results, err := spread.PublishBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		per[r.ShardIndex]++
	}
	for s := 0; s < shards; s++ {
		if per[s] != 6 {
			t.Fatalf("round-robin over %d shards put %v messages per shard, want 6 each", shards, per)
		}
	}
	if res, err := spread.Publish(ctx, "k", fields(0)); err != nil || res.ShardIndex != mustRoute(t, "k", shards) {
		t.Fatalf("a keyed message with SpreadUnkeyed: %+v %v, want its key's shard", res, err)
	}

	dedup := fx.producer(t, func(c *producer.Config) {
		c.SpreadUnkeyed, c.EventIDField, c.DedupWindow = true, "eventId", time.Minute
	})
	seen := map[int]bool{}
	for i := 0; i < 16; i++ {
		id := fmt.Sprintf("evt-%d", i)
		res, err := dedup.Publish(ctx, "", map[string]any{"eventId": id, "n": i})
		if err != nil || res.ShardIndex != mustRoute(t, id, shards) {
			t.Fatalf("unkeyed %s with an event id: %+v %v, want the id's shard %d", id, res, err, mustRoute(t, id, shards))
		}
		seen[res.ShardIndex] = true
		again, err := dedup.PublishBatch(ctx, []producer.Message{{Fields: map[string]any{"eventId": id, "n": i}}})
		if err != nil || !again[0].Duplicate || again[0].ID != res.ID || again[0].StreamKey != res.StreamKey {
			t.Fatalf("re-publish of %s: %+v %v, want a duplicate of %s/%s", id, again, err, res.StreamKey, res.ID)
		}
	}
	if len(seen) < 2 {
		t.Fatalf("16 event ids went to shards %v only", seen)
	}
}

func mustRoute(t *testing.T, key string, shards int) int {
	t.Helper()
	s, err := routing.RouteKey(key, shards)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
