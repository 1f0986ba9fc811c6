package producer_test

import (
	"context"
	"errors"
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

// TestPublishScript runs PublishScript itself against Redis: a fence above
// the routing version refuses and writes nothing; otherwise the entry is
// written, tagged with the version when asked; NOMKSTREAM holds.
func TestPublishScript(t *testing.T) {
	rdb := redistest.StartProcess(t).Client(t)
	ctx := context.Background()
	script := redis.NewScript(producer.PublishScript)
	const stream = "orders:0"
	fence := routing.FenceKey(stream)
	if err := rdb.XGroupCreateMkStream(ctx, stream, group, "$").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		fences  map[string]any // the fence hash's fields; nil: no hash
		mv      int64
		tag     string
		stale   string // the expected error, "" for none
		wantTag bool   // the entry carries _rsc_rv = mv
	}{
		{name: "no fence hash: written, untagged", mv: 3, tag: "0"},
		{name: "no fence hash: written, tagged", mv: 3, tag: "1", wantTag: true},
		{name: "fence above the version: refused", fences: map[string]any{group: "5"}, mv: 4, tag: "1", stale: "RSCSTALE 5"},
		{name: "untagged publish refused alike", fences: map[string]any{group: "5"}, mv: 4, tag: "0", stale: "RSCSTALE 5"},
		{name: "fence equal to the version: written", fences: map[string]any{group: "5"}, mv: 5, tag: "1", wantTag: true},
		{name: "fence below the version: written", fences: map[string]any{group: "5"}, mv: 9, tag: "1", wantTag: true},
		{name: "another group's fence does not apply", fences: map[string]any{"other": "50"}, mv: 9, tag: "0"},
		{name: "a fence that is not a number refuses", fences: map[string]any{group: "x"}, mv: 9, tag: "0", stale: "ERR rsc: fence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb.Del(ctx, fence)
			if tc.fences != nil {
				if err := rdb.HSet(ctx, fence, tc.fences).Err(); err != nil {
					t.Fatal(err)
				}
			}
			// Three entries in one call: all written, in order, or none.
			before := rdb.XLen(ctx, stream).Val()
			args := []any{group, tc.mv, tc.tag, 1000}
			for i := 0; i < 3; i++ {
				args = append(args, 4, "p", tc.name, "i", i)
			}
			ids, err := script.Run(ctx, rdb, []string{stream, fence}, args...).StringSlice()
			after := rdb.XLen(ctx, stream).Val()
			if tc.stale != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.stale) {
					t.Fatalf("answer %q, %v; want the error %q", ids, err, tc.stale)
				}
				if after != before {
					t.Fatalf("a refused publish wrote: %d entries, was %d", after, before)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			entries, err := rdb.XRange(ctx, stream, ids[0], "+").Result()
			if err != nil || len(ids) != 3 || len(entries) != 3 {
				t.Fatalf("ids %v, entries %v: %v", ids, entries, err)
			}
			for i, e := range entries {
				if e.ID != ids[i] || e.Values["p"] != tc.name || e.Values["i"] != strconv.Itoa(i) {
					t.Fatalf("entry %d: %v, id %s", i, e, ids[i])
				}
				rv, tagged := e.Values[routing.FenceField]
				if tagged != tc.wantTag || tagged && rv != strconv.FormatInt(tc.mv, 10) || len(e.Values) != 2+btoi(tagged) {
					t.Fatalf("entry %v: %s = %v, want tagged %v with %d", e.Values, routing.FenceField, rv, tc.wantTag, tc.mv)
				}
			}
		})
	}
	t.Run("missing stream: nil, not created", func(t *testing.T) {
		err := script.Run(ctx, rdb, []string{"orders:9", routing.FenceKey("orders:9")}, group, 1, "1", 0, 2, "p", "x").Err()
		if !errors.Is(err, redis.Nil) {
			t.Fatalf("err %v, want redis.Nil", err)
		}
		if n := rdb.Exists(ctx, "orders:9").Val(); n != 0 {
			t.Fatal("NOMKSTREAM must not create the stream")
		}
	})
	t.Run("MAXLEN ~ N trims, 0 does not", func(t *testing.T) {
		const s = "orders:5"
		if err := rdb.XGroupCreateMkStream(ctx, s, group, "$").Err(); err != nil {
			t.Fatal(err)
		}
		for _, maxLen := range []int{0, 10} {
			args := []any{group, 1, "0", maxLen}
			for i := 0; i < 500; i++ {
				args = append(args, 2, "i", i)
			}
			if err := script.Run(ctx, rdb, []string{s, routing.FenceKey(s)}, args...).Err(); err != nil {
				t.Fatal(err)
			}
			n := rdb.XLen(ctx, s).Val()
			if maxLen == 0 && n != 500 || maxLen > 0 && n >= 500 {
				t.Fatalf("MAXLEN ~ %d: %d entries after 500", maxLen, n)
			}
		}
	})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// keyMoving returns a partition key whose shard changes when n shards become
// m, with its shard before and after.
func keyMoving(t *testing.T, n, m int) (string, int, int) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		k := "key-" + strconv.Itoa(i)
		a, _ := routing.RouteKey(k, n)
		b, _ := routing.RouteKey(k, m)
		if a != b {
			return k, a, b
		}
	}
	t.Fatal("no key found")
	return "", 0, 0
}

func raiseFence(t *testing.T, rdb *redis.Client, shard int, version int64) {
	t.Helper()
	if err := rdb.HSet(context.Background(), routing.FenceKey(routing.StreamKey(prefix, shard)), group, version).Err(); err != nil {
		t.Fatal(err)
	}
}

func totalEntries(t *testing.T, rdb *redis.Client, shards int) int64 {
	t.Helper()
	var n int64
	for i := 0; i < shards; i++ {
		n += rdb.XLen(context.Background(), routing.StreamKey(prefix, i)).Val()
	}
	return n
}

// A publish refused by a fence refreshes the routing until the coordinator
// shows the layout the fence announced, then lands there, exactly once.
func TestPublishRetriesWhenFenced(t *testing.T) {
	for _, ordering := range []string{client.OrderingKey, client.OrderingNone} {
		t.Run(ordering, func(t *testing.T) {
			fx := setup(t, 3, 4, 8)
			fx.coord.setOrdered(3, 4, ordering)
			p := fx.producer(t, nil)
			ctx := context.Background()
			if _, err := p.Routing(ctx); err != nil {
				t.Fatal(err)
			}
			key, from, to := keyMoving(t, 4, 8)
			// The coordinator raised the fences of 4 → 8 (version 4); its
			// routing still answers version 3 for a moment.
			raiseFence(t, fx.rdb, from, 4)
			go func() {
				time.Sleep(150 * time.Millisecond)
				fx.coord.setOrdered(4, 8, ordering)
			}()
			res, err := p.Publish(ctx, key, fields(1))
			if err != nil {
				t.Fatal(err)
			}
			if res.MetadataVersion != 4 || res.ShardIndex != to || res.StreamKey != routing.StreamKey(prefix, to) {
				t.Fatalf("result %+v, want version 4 on shard %d (was %d)", res, to, from)
			}
			if n := totalEntries(t, fx.rdb, 8); n != 1 {
				t.Fatalf("%d entries written, want exactly 1", n)
			}
			entries := fx.rdb.XRange(ctx, res.StreamKey, res.ID, res.ID).Val()
			rv, tagged := entries[0].Values[routing.FenceField]
			if want := ordering == client.OrderingKey; tagged != want || want && rv != "4" {
				t.Fatalf("entry %v: want %s = 4 only with ordering KEY", entries[0].Values, routing.FenceField)
			}
			st := p.Stats()
			if st.StaleRetries < 1 || st.Retries != 0 || st.RoutingFetches < 3 {
				t.Fatalf("stats %+v: want stale retries, no other retry, several routing fetches", st)
			}
			t.Logf("stats after the fenced publish: %+v", st)
		})
	}
}

// A fence that no routing catches up with fails the publish after
// StaleTimeout with a *StaleError, and nothing is written.
func TestPublishFencedPastStaleTimeout(t *testing.T) {
	fx := setup(t, 3, 4, 4)
	fx.coord.setOrdered(3, 4, client.OrderingKey)
	p := fx.producer(t, func(c *producer.Config) { c.StaleTimeout = 200 * time.Millisecond })
	key := "k"
	shard, _ := routing.RouteKey(key, 4)
	raiseFence(t, fx.rdb, shard, 9)
	_, err := p.Publish(context.Background(), key, fields(1))
	var se *producer.StaleError
	if !errors.Is(err, producer.ErrStaleRouting) || !errors.As(err, &se) || se.Fence != 9 || se.MetadataVersion != 3 {
		t.Fatalf("err %v, want a *StaleError of fence 9 over version 3", err)
	}
	if n := totalEntries(t, fx.rdb, 4); n != 0 {
		t.Fatalf("%d entries written by a refused publish", n)
	}
	// The batch fails the same way, for the fenced shard's messages only.
	other := keyOnOtherShard(t, shard, 4)
	res, err := p.PublishBatch(context.Background(), []producer.Message{{PartitionKey: key, Fields: fields(2)}, {PartitionKey: other, Fields: fields(3)}})
	var be *producer.BatchError
	if !errors.As(err, &be) || be.Failed != 1 || !errors.Is(res[0].Err, producer.ErrStaleRouting) || res[1].Err != nil {
		t.Fatalf("batch: %v, results %+v", err, res)
	}
	if n := totalEntries(t, fx.rdb, 4); n != 1 {
		t.Fatalf("%d entries, want only the unfenced message", n)
	}
	t.Logf("error: %v", err)
}

func keyOnOtherShard(t *testing.T, shard, n int) string {
	t.Helper()
	for i := 0; i < 1000; i++ {
		k := "o-" + strconv.Itoa(i)
		if s, _ := routing.RouteKey(k, n); s != shard {
			return k
		}
	}
	t.Fatal("no key found")
	return ""
}

// A batch's refused messages are retried on the new layout; the others are
// not written twice, and a key's messages keep their order.
func TestPublishBatchRetriesWhenFenced(t *testing.T) {
	fx := setup(t, 3, 4, 8)
	fx.coord.setOrdered(3, 4, client.OrderingKey)
	p := fx.producer(t, nil)
	ctx := context.Background()
	if _, err := p.Routing(ctx); err != nil {
		t.Fatal(err)
	}
	// 4 → 8 doubles: every shard loses keys, every shard is fenced.
	for s := 0; s < 4; s++ {
		if s%2 == 0 {
			raiseFence(t, fx.rdb, s, 4)
		}
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		fx.coord.setOrdered(4, 8, client.OrderingKey)
	}()
	msgs := make([]producer.Message, 60)
	for i := range msgs {
		msgs[i] = producer.Message{PartitionKey: "b" + strconv.Itoa(i%12), Fields: fields(i)}
	}
	res, err := p.PublishBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for i, r := range res {
		before, _ := routing.RouteKey(msgs[i].PartitionKey, 4)
		if before%2 == 0 {
			moved++
			want, _ := routing.RouteKey(msgs[i].PartitionKey, 8)
			if r.MetadataVersion != 4 || r.ShardIndex != want || r.Attempts < 2 {
				t.Fatalf("fenced message %d: %+v, want version 4 on shard %d", i, r, want)
			}
		} else if r.MetadataVersion != 3 || r.Attempts != 1 {
			t.Fatalf("unfenced message %d: %+v, want version 3 at the first attempt", i, r)
		}
	}
	if n := totalEntries(t, fx.rdb, 8); n != int64(len(msgs)) || moved == 0 {
		t.Fatalf("%d entries (%d moved), want exactly %d", n, moved, len(msgs))
	}
	// Per key, the entries' n fields increase along the stream.
	last := map[string]int{}
	for s := 0; s < 8; s++ {
		for _, e := range fx.rdb.XRange(ctx, routing.StreamKey(prefix, s), "-", "+").Val() {
			n, _ := strconv.Atoi(e.Values["n"].(string))
			k := msgs[n].PartitionKey
			if prev, ok := last[k]; ok && prev > n {
				t.Fatalf("key %s: message %d written after %d", k, prev, n)
			}
			last[k] = n
		}
	}
	if st := p.Stats(); st.StaleRetries == 0 || st.Retries != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// After SCRIPT FLUSH (or a Redis restart), EVALSHA finds no script: single
// publishes and batches fall back to EVAL and write each message once.
func TestPublishAfterScriptFlush(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	p := fx.producer(t, nil)
	ctx := context.Background()
	msgs := make([]producer.Message, 20)
	for i := range msgs {
		msgs[i] = producer.Message{PartitionKey: strconv.Itoa(i), Fields: fields(i)}
	}
	for round := 0; round < 2; round++ {
		if err := fx.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.PublishBatch(ctx, msgs); err != nil {
			t.Fatal(err)
		}
		if err := fx.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Publish(ctx, "x", fields(99)); err != nil {
			t.Fatal(err)
		}
	}
	if n := totalEntries(t, fx.rdb, 4); n != 2*int64(len(msgs)+1) {
		t.Fatalf("%d entries, want %d", n, 2*(len(msgs)+1))
	}
	if st := p.Stats(); st.Retries != 0 {
		t.Fatalf("stats %+v: a missing script is not a failed attempt", st)
	}
}

func TestReservedFieldRefused(t *testing.T) {
	fx := setup(t, 1, 1, 1)
	p := fx.producer(t, nil)
	bad := map[string]any{routing.FenceField: "7", "x": "1"}
	if _, err := p.Publish(context.Background(), "k", bad); !errors.Is(err, producer.ErrReservedField) {
		t.Fatalf("err %v, want ErrReservedField", err)
	}
	res, err := p.PublishBatch(context.Background(), []producer.Message{{PartitionKey: "k", Fields: bad}, {PartitionKey: "k", Fields: fields(1)}})
	if err == nil || !errors.Is(res[0].Err, producer.ErrReservedField) || res[1].Err != nil {
		t.Fatalf("batch: %v %+v", err, res)
	}
}

// The routing's fence keys are used as given, and must share their stream's
// cluster slot (one script touches both).
func TestFenceKeyOutsideTheStreamSlotIsInvalid(t *testing.T) {
	fx := setup(t, 1, 2, 2)
	fx.coord.setOrdered(1, 2, client.OrderingKey)
	fx.coord.mu.Lock()
	fx.coord.routing.Shards[1].FenceKey = "fences:orders:1"
	fx.coord.mu.Unlock()
	p := fx.producer(t, nil)
	if _, err := p.Publish(context.Background(), "k", fields(0)); !errors.Is(err, producer.ErrInvalidRouting) {
		t.Fatalf("err %v, want ErrInvalidRouting", err)
	}
}

// A batch sends a shard's messages in script calls of a bounded size; the
// shard's entries keep the input order across calls.
func TestPublishBatchSplitsLargeShards(t *testing.T) {
	fx := setup(t, 1, 1, 1)
	fx.coord.setOrdered(1, 1, client.OrderingKey)
	p := fx.producer(t, nil)
	msgs := make([]producer.Message, 300)
	for i := range msgs {
		msgs[i] = producer.Message{PartitionKey: strconv.Itoa(i), Fields: fields(i)}
	}
	res, err := p.PublishBatch(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	entries := fx.rdb.XRange(context.Background(), routing.StreamKey(prefix, 0), "-", "+").Val()
	if len(entries) != len(msgs) {
		t.Fatalf("%d entries, want %d", len(entries), len(msgs))
	}
	for i, e := range entries {
		if e.ID != res[i].ID || e.Values["n"] != strconv.Itoa(i) || e.Values[routing.FenceField] != "1" {
			t.Fatalf("entry %d: %v, result %+v", i, e, res[i])
		}
	}
}

// On a Redis Cluster, a shard's stream and fence hash share a slot, so the
// script runs on the stream's master; a batch spans masters, each with its own
// script cache (flushed here, so every master answers NOSCRIPT first).
func TestFencedPublishOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	rdb := cl.Client(t)
	ctx := context.Background()
	const shards = 8
	coord := newFakeCoordinator(t, 5, shards)
	coord.setOrdered(5, shards, client.OrderingKey)
	masters := map[string]bool{}
	for i := 0; i < shards; i++ {
		key := routing.StreamKey(prefix, i)
		if err := rdb.XGroupCreateMkStream(ctx, key, group, "$").Err(); err != nil {
			t.Fatal(err)
		}
		masters[cl.MasterFor(t, key)] = true
	}
	if len(masters) < 2 {
		t.Fatalf("the shards live on %d master(s); the test wants several", len(masters))
	}
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	p, err := producer.New(producer.Config{Coordinator: client.New(coord.srv.URL, nil), Redis: rdb,
		StreamPrefix: prefix, ConsumerGroup: group, StaleTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]producer.Message, 100)
	for i := range msgs {
		msgs[i] = producer.Message{PartitionKey: "m" + strconv.Itoa(i), Fields: fields(i)}
	}
	if _, err := p.PublishBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	fenced, _ := routing.RouteKey("k", shards)
	if err := rdb.HSet(ctx, routing.FenceKey(routing.StreamKey(prefix, fenced)), group, 6).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctx, "k", fields(1)); !errors.Is(err, producer.ErrStaleRouting) {
		t.Fatalf("publish on the fenced shard: %v, want ErrStaleRouting", err)
	}
	var n int64
	for i := 0; i < shards; i++ {
		for _, e := range rdb.XRange(ctx, routing.StreamKey(prefix, i), "-", "+").Val() {
			if e.Values[routing.FenceField] != "5" {
				t.Fatalf("entry %v without the routing version", e)
			}
			n++
		}
	}
	if n != int64(len(msgs)) {
		t.Fatalf("%d entries, want %d", n, len(msgs))
	}
}
