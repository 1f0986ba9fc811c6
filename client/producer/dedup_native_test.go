package producer_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
)

// serverHasIDMP reports whether Redis has the idempotent XADD (8.6), and
// fails the test when the engine under test is named 8.6 but lacks it.
func serverHasIDMP(t *testing.T, rdb redis.UniversalClient) bool {
	t.Helper()
	v, err := rdb.Do(context.Background(), "COMMAND", "INFO", "XCFGSET").Slice()
	if err != nil {
		t.Fatal(err)
	}
	has := len(v) == 1 && v[0] != nil
	if !has && (redistest.Engine() == "redis86" || strings.HasPrefix(os.Getenv("RSC_REDIS_VERSION"), "8.6")) {
		t.Fatalf("the engine under test is %s (RSC_REDIS_VERSION=%s) but Redis has no XCFGSET", redistest.Engine(), os.Getenv("RSC_REDIS_VERSION"))
	}
	return has
}

// recordOf returns the record of eventID on stream (the entry id, "" if
// none) and its key.
func recordOf(t *testing.T, rdb redis.UniversalClient, stream, eventID string) (id, key string) {
	t.Helper()
	key = producer.DedupKey(stream, eventID)
	id, err := rdb.Get(context.Background(), key).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return id, key
}

// xinfoField is a field of XINFO STREAM key as an integer (false when the
// reply has no such field).
func xinfoField(t *testing.T, rdb redis.UniversalClient, key, field string) (int64, bool) {
	t.Helper()
	v, err := rdb.Do(context.Background(), "XINFO", "STREAM", key).Result()
	if err != nil {
		t.Fatal(err)
	}
	var val any
	found := false
	switch r := v.(type) {
	case map[any]any:
		val, found = r[field]
	case []any:
		for i := 0; i+1 < len(r); i += 2 {
			if r[i] == field {
				val, found = r[i+1], true
			}
		}
	}
	if !found {
		return 0, false
	}
	n, ok := val.(int64)
	if !ok {
		t.Fatalf("XINFO STREAM %s: %s is %T", key, field, val)
	}
	return n, true
}

// iidsAdded sums XINFO STREAM's iids-added over shards 0..n-1 (0 where Redis
// has no IDMP).
func iidsAdded(t *testing.T, rdb redis.UniversalClient, n int) int64 {
	t.Helper()
	var sum int64
	for s := 0; s < n; s++ {
		v, _ := xinfoField(t, rdb, routing.StreamKey(prefix, s), "iids-added")
		sum += v
	}
	return sum
}

// TestDedupNativePathTaken: with a window, single publishes and a batch are
// written with XADD … IDMP where Redis has it (XINFO STREAM counts them in
// iids-added, one per entry), and with plain XADDs where it does not; the
// records are written either way; a second publish of the ids writes
// nothing. It fails when the engine under test is Redis 8.6 and the native
// path was not taken.
func TestDedupNativePathTaken(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	ctx := context.Background()
	idmp := serverHasIDMP(t, fx.rdb)
	p := fx.producer(t, dedup(time.Minute))
	var results []producer.Result
	for i := 0; i < 5; i++ {
		res, err := p.Publish(ctx, "k"+strconv.Itoa(i), map[string]any{eventField: "s" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	msgs := make([]producer.Message, 20)
	for i := range msgs {
		msgs[i] = producer.Message{PartitionKey: "b" + strconv.Itoa(i), Fields: map[string]any{eventField: "b" + strconv.Itoa(i)}}
	}
	res, err := p.PublishBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	results = append(results, res...)
	for _, r := range results {
		if id, _ := recordOf(t, fx.rdb, r.StreamKey, r.EventID); id != r.ID {
			t.Fatalf("record of %s: %q, want %s", r.EventID, id, r.ID)
		}
	}
	added := iidsAdded(t, fx.rdb, 4)
	if st := p.Stats(); st.NativeDedup != idmp {
		t.Fatalf("NativeDedup %v, Redis has IDMP: %v", st.NativeDedup, idmp)
	}
	if idmp && added != int64(len(results)) {
		t.Fatalf("iids-added %d over the shards, want %d (one per entry): the native path was not taken", added, len(results))
	}
	if !idmp && added != 0 {
		t.Fatalf("iids-added %d without IDMP", added)
	}
	// Again: duplicates, nothing written.
	res, err = p.PublishBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !r.Duplicate || r.ID != results[5+i].ID {
			t.Fatalf("again %d: %+v, want the original %s", i, r, results[5+i].ID)
		}
	}
	if got := iidsAdded(t, fx.rdb, 4); got != added {
		t.Fatalf("iids-added %d after duplicates, %d before", got, added)
	}
	t.Logf("engine %s, IDMP %v, iids-added %d", redistest.Engine(), idmp, added)
}

// TestDedupNativeIDMPAnswersWithoutRecord: on the native path, an event id
// whose record is gone (deleted by hand, or evicted under memory pressure)
// is still not written twice on its stream: Redis's IDMP map answers the
// original entry, and the record is written again. Only where Redis has
// IDMP.
func TestDedupNativeIDMPAnswersWithoutRecord(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	ctx := context.Background()
	if !serverHasIDMP(t, fx.rdb) {
		t.Skip("Redis has no IDMP (before 8.6)")
	}
	p := fx.producer(t, dedup(time.Minute))
	first, err := p.Publish(ctx, "k", map[string]any{eventField: "E"})
	if err != nil {
		t.Fatal(err)
	}
	if id, key := recordOf(t, fx.rdb, first.StreamKey, "E"); id != first.ID {
		t.Fatalf("record %s = %q, want %s", key, id, first.ID)
	}
	key := producer.DedupKey(first.StreamKey, "E")
	fx.rdb.Del(ctx, key)
	again, err := p.Publish(ctx, "k", map[string]any{eventField: "E"})
	if err != nil || again.ID != first.ID {
		t.Fatalf("again: %+v, %v; want the original %s", again, err, first.ID)
	}
	if got := entriesOf(t, fx.rdb, 4, "E"); len(got) != 1 {
		t.Fatalf("entries %v", got)
	}
	if id, _ := recordOf(t, fx.rdb, first.StreamKey, "E"); id != first.ID {
		t.Fatalf("the record was not written again: %q", id)
	}
}

// TestDedupNativeAcrossLayoutChange: on the native path (where Redis has
// it) an event id published before a layout change and again after it, by a
// fresh producer, to the shard the new layout routes it to, is found on its
// old shard: one entry.
func TestDedupNativeAcrossLayoutChange(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	ctx := context.Background()
	idmp := serverHasIDMP(t, fx.rdb)
	key, _, _ := keyMoving(t, 4, 8)
	first, err := fx.producer(t, dedup(time.Minute)).Publish(ctx, key, map[string]any{eventField: "E"})
	if err != nil {
		t.Fatal(err)
	}
	fx.reshard(t, 2, 8)
	for _, records := range []bool{false, true} {
		p := fx.producer(t, dedup(time.Minute, func(c *producer.Config) { c.NoNativeDedup = records }))
		again, err := p.Publish(ctx, key, map[string]any{eventField: "E"})
		if err != nil || !again.Duplicate || again.ID != first.ID || again.StreamKey != first.StreamKey {
			t.Fatalf("after the change (records path %v): %+v, %v; want the original %+v", records, again, err, first)
		}
		if st := p.Stats(); st.LayoutChecks == 0 {
			t.Fatalf("no layout check: %+v", st)
		}
	}
	if got := entriesOf(t, fx.rdb, 8, "E"); len(got) != 1 {
		t.Fatalf("entries %v", got)
	}
	if idmp && iidsAdded(t, fx.rdb, 4) != 1 {
		t.Fatalf("iids-added %d, want 1", iidsAdded(t, fx.rdb, 4))
	}
}

// TestDedupProducerIDBound: a ProducerID of MaxProducerIDLength bytes is
// accepted, one byte more refused.
func TestDedupProducerIDBound(t *testing.T) {
	coord := newFakeCoordinator(t, 1, 4)
	for _, n := range []int{producer.MaxProducerIDLength, producer.MaxProducerIDLength + 1} {
		_, err := producer.New(producer.Config{Coordinator: client.New(coord.srv.URL, nil), Redis: redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}),
			StreamPrefix: prefix, ConsumerGroup: group, EventIDField: eventField, DedupWindow: time.Minute, ProducerID: strings.Repeat("p", n)})
		if ok := n <= producer.MaxProducerIDLength; (err == nil) != ok {
			t.Fatalf("ProducerID of %d bytes: %v", n, err)
		}
	}
}

// TestDedupNativeRefusedFallsBackToRecords: a producer that believes Redis
// has IDMP (it probed another node) and meets a Redis without it goes back
// to the records path: the single publish and the batch are written once,
// with their records, and Stats says records. Only where Redis has no IDMP.
func TestDedupNativeRefusedFallsBackToRecords(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	ctx := context.Background()
	if serverHasIDMP(t, fx.rdb) {
		t.Skip("Redis has IDMP")
	}
	for _, batch := range []bool{false, true} {
		p := fx.producer(t, dedup(time.Minute))
		if _, err := p.Routing(ctx); err != nil {
			t.Fatal(err)
		}
		producer.AssumeNativeDedup(p)
		id := "F-" + strconv.FormatBool(batch)
		var res producer.Result
		if batch {
			rs, err := p.PublishBatch(ctx, []producer.Message{{PartitionKey: "k", Fields: map[string]any{eventField: id}}, {PartitionKey: "j", Fields: map[string]any{eventField: id + "2"}}})
			if err != nil {
				t.Fatal(err)
			}
			res = rs[0]
		} else {
			var err error
			if res, err = p.Publish(ctx, "k", map[string]any{eventField: id}); err != nil {
				t.Fatal(err)
			}
		}
		if got := entriesOf(t, fx.rdb, 4, id); len(got) != 1 {
			t.Fatalf("batch %v: entries %v", batch, got)
		}
		if rec, _ := recordOf(t, fx.rdb, res.StreamKey, id); rec != res.ID {
			t.Fatalf("batch %v: record %q, want %s", batch, rec, res.ID)
		}
		if st := p.Stats(); st.NativeDedup || st.Retries != 0 {
			t.Fatalf("batch %v: stats %+v: want the records path and no attempt used", batch, st)
		}
	}
}
