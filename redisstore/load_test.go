package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/redisstore"
)

// TestIntegrationLoad: the autoscaler's evidence of a shard, read in one
// script: entries-added, the group's lag and the time of its oldest unread
// entry, with Redis's clock; a missing stream is reported as such.
func TestIntegrationLoad(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)
	sh := redisstore.NewShards(rdb)
	prefix := uniqueKey("load")
	MustProvision(t, sh, prefix, "g", 0, 2)
	key := prefix + ":0"
	old := time.Now().Add(-5 * time.Second).UnixMilli()
	// Three entries, the first two with ids 5 s in the past; the group reads one.
	for i, id := range []string{fmt.Sprintf("%d-0", old), fmt.Sprintf("%d-1", old), "*"} {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: id, Values: []any{"i", i}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{key, ">"}, Count: 1}).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := sh.Load(ctx, prefix, "g", []int{0, 1, 7})
	if err != nil {
		t.Fatal(err)
	}
	s0, s1, s7 := got[0], got[1], got[2]
	if !s0.Exists || s0.EntriesAdded != 3 || s0.Lag != 2 || s0.OldestUnreadMs != old {
		t.Fatalf("shard 0: %+v, want 3 added, lag 2, oldest unread at %d", s0, old)
	}
	if age := s0.NowMs - s0.OldestUnreadMs; age < 4900 || age > 60000 {
		t.Fatalf("oldest unread entry %d ms old by Redis's clock, want about 5000", age)
	}
	if !s1.Exists || s1.EntriesAdded != 0 || s1.Lag != 0 || s1.OldestUnreadMs != 0 {
		t.Fatalf("empty shard 1: %+v", s1)
	}
	if s7.Exists || s7.NowMs == 0 {
		t.Fatalf("missing shard 7: %+v", s7)
	}
}
