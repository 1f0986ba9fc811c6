package producer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/internal/faultproxy"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
)

const eventField = "eventId"

// dedup configures a producer for idempotent publishing.
func dedup(window time.Duration, more ...func(*producer.Config)) func(*producer.Config) {
	return func(c *producer.Config) {
		c.EventIDField, c.DedupWindow = eventField, window
		for _, m := range more {
			m(c)
		}
	}
}

// through returns a proxy in front of fx's Redis and a client that goes
// through it (retries: go-redis MaxRetries, -1 for none).
func (fx fixture) through(t *testing.T, retries int) (*faultproxy.Proxy, *redis.Client) {
	t.Helper()
	// The scripts are loaded first, so that the replies dropped are those of
	// scripts that ran, not NOSCRIPT answers.
	for _, src := range []string{producer.PublishScript, producer.DedupPublishScript} {
		if err := fx.rdb.ScriptLoad(context.Background(), src).Err(); err != nil {
			t.Fatal(err)
		}
	}
	px := faultproxy.Start(t, fx.rdb.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: retries})
	t.Cleanup(func() { _ = c.Close() })
	return px, c
}

// reshard changes the layout as the coordinator does: it raises, on every
// shard of the old layout that loses keys, the fence to the new version,
// provisions the new shards, then serves the new routing, which lists the
// old layout first among its previous layouts.
func (fx fixture) reshard(t *testing.T, version int64, shards int) {
	t.Helper()
	reshardOn(t, fx.coord, fx.rdb, version, shards)
}

func reshardOn(t *testing.T, coord *fakeCoordinator, rdb redis.UniversalClient, version int64, shards int) {
	t.Helper()
	coord.mu.Lock()
	old, since := coord.routing, coord.since
	coord.mu.Unlock()
	for s := 0; s < old.ShardCount; s++ {
		if routing.LosesKeys(old.ShardCount, shards, s) {
			if err := rdb.HSet(context.Background(), routing.FenceKey(routing.StreamKey(prefix, s)), group, version).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	mustStreams(t, rdb, shards)
	coord.mu.Lock()
	coord.previous = append([]client.RoutingLayout{{MetadataVersion: max(since, 1), ShardCount: old.ShardCount, Fence: version, EndedAt: time.Now()}}, coord.previous...)
	coord.since = version
	coord.mu.Unlock()
	coord.set(version, shards)
}

// entriesOf returns every entry carrying the event id, over shards 0..n-1,
// as "streamKey/id".
func entriesOf(t *testing.T, rdb redis.UniversalClient, n int, eventID string) []string {
	t.Helper()
	var out []string
	for s := 0; s < n; s++ {
		key := routing.StreamKey(prefix, s)
		for _, e := range rdb.XRange(context.Background(), key, "-", "+").Val() {
			if e.Values[eventField] == eventID {
				out = append(out, key+"/"+e.ID)
			}
		}
	}
	return out
}

// TestDedupPublishScript runs DedupPublishScript itself: a record answers
// the original id and writes nothing; records expire after the window; the
// fence still refuses first; a missing stream writes nothing.
func TestDedupPublishScript(t *testing.T) {
	rdb := redistest.StartProcess(t).Client(t)
	ctx := context.Background()
	script := redis.NewScript(producer.DedupPublishScript)
	const stream = "orders:0"
	fence := routing.FenceKey(stream)
	if err := rdb.XGroupCreateMkStream(ctx, stream, group, "$").Err(); err != nil {
		t.Fatal(err)
	}
	run := func(window int, ids ...string) ([]any, error) {
		keys := []string{stream, fence}
		args := []any{group, 3, "0", 0, window, ""}
		for _, id := range ids {
			keys = append(keys, producer.DedupKey(stream, id))
			args = append(args, 4, eventField, id, "p", "x")
		}
		v, err := script.Run(ctx, rdb, keys, args...).Slice()
		return v, err
	}
	// a, b, a in one call: a is written once, its second copy is a duplicate.
	v, err := run(60_000, "a", "b", "a")
	if err != nil {
		t.Fatal(err)
	}
	ids, dups := v[0].([]any), v[1].([]any)
	if len(ids) != 3 || ids[2] != ids[0] || ids[1] == ids[0] || len(dups) != 1 || dups[0] != int64(3) {
		t.Fatalf("answer %v", v)
	}
	if n := rdb.XLen(ctx, stream).Val(); n != 2 {
		t.Fatalf("%d entries, want 2", n)
	}
	if got := rdb.Get(ctx, producer.DedupKey(stream, "a")).Val(); got != ids[0] {
		t.Fatalf("record of a = %q, want %v", got, ids[0])
	}
	if ttl := rdb.PTTL(ctx, producer.DedupKey(stream, "a")).Val(); ttl <= 59*time.Second || ttl > 60*time.Second {
		t.Fatalf("record TTL %s, want the window (60 s)", ttl)
	}
	// Again, with another window: both duplicates, nothing written, the
	// records keep their own expiry.
	v, err = run(1, "b", "a")
	if err != nil || v[0].([]any)[0] != ids[1] || v[0].([]any)[1] != ids[0] || len(v[1].([]any)) != 2 {
		t.Fatalf("answer %v, %v", v, err)
	}
	if n := rdb.XLen(ctx, stream).Val(); n != 2 {
		t.Fatalf("%d entries after duplicates, want 2", n)
	}
	if ttl := rdb.PTTL(ctx, producer.DedupKey(stream, "b")).Val(); ttl <= 59*time.Second {
		t.Fatalf("a duplicate shortened the record's TTL to %s", ttl)
	}
	// A fence above the version refuses before anything else.
	rdb.HSet(ctx, fence, group, 4)
	if _, err := run(60_000, "c"); err == nil || !strings.HasPrefix(err.Error(), "RSCSTALE 4") {
		t.Fatalf("fenced: %v", err)
	}
	if rdb.Exists(ctx, producer.DedupKey(stream, "c")).Val() != 0 || rdb.XLen(ctx, stream).Val() != 2 {
		t.Fatal("a refused call wrote")
	}
	rdb.Del(ctx, fence)
	// A stream that does not exist: no entry, no record, no stream; a record
	// still answers (the stream was retired after the entry landed).
	rdb.Set(ctx, producer.DedupKey("orders:9", "old"), "1-1", time.Minute)
	keys := []string{"orders:9", routing.FenceKey("orders:9"), producer.DedupKey("orders:9", "new"), producer.DedupKey("orders:9", "old")}
	v, err = script.Run(ctx, rdb, keys, group, 1, "0", 0, 60_000, "", 2, "p", "1", 2, "p", "2").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if got := v[0].([]any); got[0] != nil || got[1] != "1-1" || len(v[1].([]any)) != 1 {
		t.Fatalf("answer on a missing stream: %v", v)
	}
	if rdb.Exists(ctx, "orders:9", producer.DedupKey("orders:9", "new")).Val() != 0 {
		t.Fatal("a missing stream got an entry or a record")
	}
	// Several entries without records on a missing stream: one answer each
	// (the answer used to stop at the first, which the SDK could not read as
	// a missing stream).
	keys = []string{"orders:9", routing.FenceKey("orders:9"), producer.DedupKey("orders:9", "n1"), producer.DedupKey("orders:9", "n2"), producer.DedupKey("orders:9", "n3")}
	v, err = script.Run(ctx, rdb, keys, group, 1, "0", 0, 60_000, "", 2, "p", "1", 2, "p", "2", 2, "p", "3").Slice()
	if err != nil {
		t.Fatal(err)
	}
	if got := v[0].([]any); len(got) != 3 || got[0] != nil || got[1] != nil || got[2] != nil || len(v[1].([]any)) != 0 {
		t.Fatalf("answer on a missing stream for three new entries: %v", v)
	}
}

// A reply lost after Redis ran the script: go-redis retries the command
// itself (MaxRetries 3). Without a window that retry writes the message a
// second time; with one, the retry finds the record and Publish answers the
// original entry.
func TestLostReplySinglePublishWritesOnce(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	px, rdb := fx.through(t, 3)
	ctx := context.Background()
	for _, window := range []time.Duration{0, time.Minute} {
		p := fx.producer(t, func(c *producer.Config) { c.Redis, c.EventIDField, c.DedupWindow = rdb, eventField, window })
		id := "e-" + window.String()
		px.DropNext(1, "EVALSHA", "EVAL")
		res, err := p.Publish(ctx, "k", map[string]any{eventField: id, "n": "1"})
		if err != nil {
			t.Fatal(err)
		}
		got := entriesOf(t, fx.rdb, 4, id)
		if window == 0 {
			if len(got) != 2 {
				t.Fatalf("without a window: %d entries %v; the lost reply should have written twice", len(got), got)
			}
			continue
		}
		if len(got) != 1 || got[0] != res.StreamKey+"/"+res.ID || !res.Duplicate {
			t.Fatalf("entries %v, result %+v: want one entry, answered as the original", got, res)
		}
		if st := p.Stats(); st.Duplicates != 1 || st.Retries != 0 {
			t.Fatalf("stats %+v", st)
		}
	}
	if px.Stats().Dropped != 2 {
		t.Fatalf("proxy %+v", px.Stats())
	}
}

// The SDK's own retry (go-redis retries off): the attempt after the lost
// reply finds the record too.
func TestLostReplySDKRetryWritesOnce(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	px, rdb := fx.through(t, -1)
	p := fx.producer(t, dedup(time.Minute, func(c *producer.Config) { c.Redis = rdb }))
	px.DropNext(1, "EVALSHA", "EVAL")
	res, err := p.Publish(context.Background(), "k", fields(1)) // an id the SDK generates
	if err != nil {
		t.Fatal(err)
	}
	if got := entriesOf(t, fx.rdb, 4, res.EventID); len(got) != 1 || !res.Duplicate || res.Attempts != 2 {
		t.Fatalf("entries %v, result %+v", got, res)
	}
	if st := p.Stats(); st.Retries != 1 || st.Duplicates != 1 || st.LayoutChecks != 0 {
		t.Fatalf("stats %+v: the retry went to the same shard, no other shard to check", st)
	}
}

// Batches: a dropped reply makes go-redis send the whole pipeline again;
// random drops over many batches, with the SDK's retries too: every event id
// has exactly one entry, and every result names it.
func TestLostRepliesBatchWritesOnce(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	px, rdb := fx.through(t, 3)
	ctx := context.Background()
	msgs := func(round, n int) []producer.Message {
		out := make([]producer.Message, n)
		for i := range out {
			out[i] = producer.Message{PartitionKey: "k" + strconv.Itoa(i%13), Fields: map[string]any{eventField: fmt.Sprintf("b%d-%d", round, i), "n": strconv.Itoa(i)}}
		}
		return out
	}
	control := fx.producer(t, func(c *producer.Config) { c.Redis, c.EventIDField = rdb, eventField })
	px.DropNext(1, "EVALSHA")
	if _, err := control.PublishBatch(ctx, msgs(0, 40)); err != nil {
		t.Fatal(err)
	}
	if n := totalEntries(t, fx.rdb, 4); n <= 40 {
		t.Fatalf("without a window: %d entries for 40 messages; the resent pipeline should have written some twice", n)
	}
	base := totalEntries(t, fx.rdb, 4)

	p := fx.producer(t, dedup(time.Minute, func(c *producer.Config) { c.Redis = rdb; c.MaxAttempts = 5 }))
	px.DropRandom(0.2, 7, "EVALSHA", "EVAL", "MGET")
	results := map[string]string{}
	const rounds, size = 30, 40
	for round := 1; round <= rounds; round++ {
		batch := msgs(round, size)
		batch = append(batch, batch[3]) // the same event id twice in one batch
		res, err := p.PublishBatch(ctx, batch)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i, r := range res {
			at := r.StreamKey + "/" + r.ID
			if prev, ok := results[r.EventID]; ok && prev != at {
				t.Fatalf("event %s answered %s and %s", r.EventID, prev, at)
			}
			results[r.EventID] = at
			if i == size && (!r.Duplicate || r.ID != res[3].ID) {
				t.Fatalf("the repeated message: %+v, first %+v", r, res[3])
			}
		}
	}
	px.DropRandom(0, 0)
	seen := map[string]string{}
	for s := 0; s < 4; s++ {
		key := routing.StreamKey(prefix, s)
		for _, e := range fx.rdb.XRange(ctx, key, "-", "+").Val() {
			id, _ := e.Values[eventField].(string)
			if !strings.HasPrefix(id, "b") || strings.HasPrefix(id, "b0-") {
				continue
			}
			if prev, ok := seen[id]; ok {
				t.Fatalf("event %s written twice: %s and %s/%s", id, prev, key, e.ID)
			}
			seen[id] = key + "/" + e.ID
			if results[id] != seen[id] {
				t.Fatalf("event %s: result %s, entry %s", id, results[id], seen[id])
			}
		}
	}
	if len(seen) != rounds*size || totalEntries(t, fx.rdb, 4)-base != rounds*size {
		t.Fatalf("%d event ids in the streams, want %d", len(seen), rounds*size)
	}
	st := p.Stats()
	if px.Stats().Dropped == 0 || st.Duplicates < rounds {
		t.Fatalf("proxy %+v, producer %+v: want drops and duplicates answered", px.Stats(), st)
	}
	t.Logf("proxy %+v; producer %+v", px.Stats(), st)
}

// A new Producer (a restarted process) publishing an event id again within
// the window gets the original Result; a dedup hit is one command (one round
// trip).
func TestFreshProducerGetsTheOriginal(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	px, rdb := fx.through(t, 3)
	ctx := context.Background()
	first := fx.producer(t, dedup(time.Minute, func(c *producer.Config) { c.Redis = rdb }))
	orig, err := first.Publish(ctx, "k", map[string]any{eventField: "E", "v": "1"})
	if err != nil || orig.Duplicate {
		t.Fatalf("%+v, %v", orig, err)
	}
	second := fx.producer(t, dedup(time.Minute, func(c *producer.Config) { c.Redis = rdb }))
	if _, err := second.Routing(ctx); err != nil {
		t.Fatal(err)
	}
	before := px.Stats().Commands
	again, err := second.Publish(ctx, "k", map[string]any{eventField: "E", "v": "2"})
	if err != nil {
		t.Fatal(err)
	}
	if cmds := px.Stats().Commands - before; cmds != 1 {
		t.Fatalf("a dedup hit sent %d commands, want 1", cmds)
	}
	if !again.Duplicate || again.StreamKey != orig.StreamKey || again.ID != orig.ID || again.ShardIndex != orig.ShardIndex {
		t.Fatalf("again %+v, original %+v", again, orig)
	}
	if got := entriesOf(t, fx.rdb, 4, "E"); len(got) != 1 {
		t.Fatalf("entries %v", got)
	}
	if st := second.Stats(); st.Duplicates != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The batch path answers the same.
	res, err := second.PublishBatch(ctx, []producer.Message{{PartitionKey: "k", Fields: map[string]any{eventField: "E"}}})
	if err != nil || !res[0].Duplicate || res[0].ID != orig.ID {
		t.Fatalf("batch: %+v, %v", res, err)
	}
}

// After the window a new entry is allowed; records are removed by Redis's
// expiry without any later publish (memory bounded), each at its own time
// whatever other producers' windows are.
func TestRecordsExpireWithTheirOwnWindow(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	ctx := context.Background()
	short := fx.producer(t, dedup(300*time.Millisecond))
	long := fx.producer(t, dedup(time.Hour))
	first, err := short.Publish(ctx, "k", map[string]any{eventField: "S"})
	if err != nil {
		t.Fatal(err)
	}
	kept, err := long.Publish(ctx, "k", map[string]any{eventField: "L"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	msgs := make([]producer.Message, n)
	for i := range msgs {
		msgs[i] = producer.Message{PartitionKey: strconv.Itoa(i), Fields: map[string]any{eventField: "m" + strconv.Itoa(i)}}
	}
	if _, err := short.PublishBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	keysBefore := fx.rdb.DBSize(ctx).Val()
	if keysBefore < n+2+4 {
		t.Fatalf("%d keys after %d records", keysBefore, n+2)
	}
	// DBSIZE counts keys not yet expired by Redis's active expiry: no reads
	// of the records in between.
	deadline := time.Now().Add(20 * time.Second)
	for fx.rdb.DBSize(ctx).Val() > 4+1 { // 4 streams and the long record
		if time.Now().After(deadline) {
			t.Fatalf("%d keys left, %d before: the short records were not removed", fx.rdb.DBSize(ctx).Val(), keysBefore)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ttl := fx.rdb.PTTL(ctx, producer.DedupKey(kept.StreamKey, "L")).Val(); ttl < 59*time.Minute {
		t.Fatalf("the long window's record has %s left", ttl)
	}
	again, err := short.Publish(ctx, "k", map[string]any{eventField: "S"})
	if err != nil || again.Duplicate || again.ID == first.ID {
		t.Fatalf("after the window: %+v, %v; want a new entry", again, err)
	}
	if got := entriesOf(t, fx.rdb, 4, "S"); len(got) != 2 {
		t.Fatalf("entries %v", got)
	}
	if dup, err := long.Publish(ctx, "k", map[string]any{eventField: "L"}); err != nil || !dup.Duplicate {
		t.Fatalf("within the long window: %+v, %v", dup, err)
	}
}

// The design text's scenario: E routed to shard a under 4 shards, the reply
// lost after Redis wrote it, then 4 → 8 (E now routes to b), then the retry
// (the application publishing E again, the same Producer or a fresh one):
// E exists once, in shard a. The same for a scale-in and a rollback.
func TestRetryAfterLayoutChangeFindsTheOldShard(t *testing.T) {
	type change struct {
		version int64
		shards  int
	}
	for _, tc := range []struct {
		name    string
		initial int
		before  []change // layout changes before E is published
		after   []change // layout changes after its reply was lost
	}{
		{name: "scale-out 4 to 8", initial: 4, after: []change{{2, 8}}},
		{name: "scale-in 8 to 4", initial: 8, after: []change{{2, 4}}},
		{name: "scale-out then rollback", initial: 4, before: []change{{2, 8}}, after: []change{{3, 4}}},
		{name: "two changes", initial: 4, after: []change{{2, 8}, {3, 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := setup(t, 1, tc.initial, 8)
			px, rdb := fx.through(t, -1)
			ctx := context.Background()
			for _, c := range tc.before {
				fx.reshard(t, c.version, c.shards)
			}
			cur := tc.initial
			if len(tc.before) > 0 {
				cur = tc.before[len(tc.before)-1].shards
			}
			final := tc.after[len(tc.after)-1].shards
			key, from, to := keyMoving(t, cur, final)
			p := fx.producer(t, dedup(time.Minute, func(c *producer.Config) { c.Redis, c.MaxAttempts = rdb, 1 }))
			px.DropNext(1, "EVALSHA", "EVAL")
			if _, err := p.Publish(ctx, key, map[string]any{eventField: "E"}); err == nil {
				t.Fatal("the lost reply reached the producer")
			}
			if got := entriesOf(t, fx.rdb, 8, "E"); len(got) != 1 || !strings.HasPrefix(got[0], routing.StreamKey(prefix, from)+"/") {
				t.Fatalf("after the lost reply: %v, want one entry on shard %d", got, from)
			}
			for _, c := range tc.after {
				fx.reshard(t, c.version, c.shards)
			}
			fresh := fx.producer(t, dedup(time.Minute))
			for name, pr := range map[string]*producer.Producer{"same producer": p, "fresh producer": fresh} {
				if err := pr.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
				res, err := pr.Publish(ctx, key, map[string]any{eventField: "E"})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if !res.Duplicate || res.ShardIndex != from || res.StreamKey != routing.StreamKey(prefix, from) {
					t.Fatalf("%s: %+v, want the original on shard %d (the key now routes to %d)", name, res, from, to)
				}
				if st := pr.Stats(); st.LayoutChecks < 1 || st.UnfencedChecks != 0 || st.Duplicates != 1 {
					t.Fatalf("%s: stats %+v", name, st)
				}
			}
			if got := entriesOf(t, fx.rdb, 8, "E"); len(got) != 1 {
				t.Fatalf("E has %d entries: %v", len(got), got)
			}
			// A new event id on that key goes to its new shard: one check
			// (not found, fenced), then the write.
			res, err := fresh.Publish(ctx, key, map[string]any{eventField: "F"})
			if err != nil || res.Duplicate || res.ShardIndex != to {
				t.Fatalf("a new event: %+v, %v; want shard %d", res, err, to)
			}
		})
	}
}

// Within one Publish: the first attempt's reply is lost, the routing changes
// before the SDK's retry; the retry reads the shard it tried first (no
// previous layouts needed: it knows where it tried), even for an id the SDK
// generated.
func TestSDKRetryAfterLayoutChangeChecksWhereItTried(t *testing.T) {
	fx := setup(t, 1, 4, 8)
	px, rdb := fx.through(t, -1)
	ctx := context.Background()
	key, from, to := keyMoving(t, 4, 8)
	var once sync.Once
	rdb.AddHook(onError(func() { once.Do(func() { fx.reshard(t, 2, 8) }) }))
	p := fx.producer(t, dedup(time.Minute, func(c *producer.Config) { c.Redis = rdb }))
	px.DropNext(1, "EVALSHA", "EVAL")
	res, err := p.Publish(ctx, key, fields(1))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Duplicate || res.ShardIndex != from || res.MetadataVersion != 2 {
		t.Fatalf("result %+v, want the original on shard %d (the key routes to %d now); stats %+v, entries %v", res, from, to, p.Stats(), entriesOf(t, fx.rdb, 8, res.EventID))
	}
	if got := entriesOf(t, fx.rdb, 8, res.EventID); len(got) != 1 {
		t.Fatalf("entries %v", got)
	}
	if st := p.Stats(); st.LayoutChecks != 1 || st.Retries != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// onError is a go-redis hook that calls f after a script call (EVALSHA or
// EVAL, alone or in a pipeline) failed other than with redis.Nil or NOSCRIPT.
func onError(f func()) redis.Hook { return errHook{f} }

type errHook struct{ f func() }

func (h errHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// failed looks at the error the call returned (go-redis sets the command's
// own error after the hooks).
func (h errHook) failed(cmd redis.Cmder, err error) bool {
	return (cmd.Name() == "evalsha" || cmd.Name() == "eval") && err != nil && !errors.Is(err, redis.Nil) && !redis.HasErrorPrefix(err, "NOSCRIPT")
}

func (h errHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.failed(cmd, err) {
			h.f()
		}
		return err
	}
}

func (h errHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if h.failed(cmd, err) {
				h.f()
				break
			}
		}
		return err
	}
}

// Checks happen only where needed: a generated id on its first attempt, or a
// key that did not move, costs no read of another shard; a layout that ended
// before the window is not read; a shard without the fence is read, counted
// and published past.
func TestLayoutChecksOnlyWhereNeeded(t *testing.T) {
	fx := setup(t, 1, 4, 8)
	fx.reshard(t, 2, 8)
	ctx := context.Background()
	p := fx.producer(t, dedup(time.Minute))
	moving, _, _ := keyMoving(t, 4, 8)
	staying := ""
	for i := 0; staying == ""; i++ {
		k := "s" + strconv.Itoa(i)
		a, _ := routing.RouteKey(k, 4)
		b, _ := routing.RouteKey(k, 8)
		if a == b {
			staying = k
		}
	}
	if _, err := p.Publish(ctx, moving, fields(1)); err != nil { // generated id
		t.Fatal(err)
	}
	if _, err := p.Publish(ctx, staying, map[string]any{eventField: "stay"}); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.LayoutChecks != 0 {
		t.Fatalf("stats %+v: nothing to check", st)
	}
	if _, err := p.Publish(ctx, moving, map[string]any{eventField: "move"}); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.LayoutChecks != 1 || st.UnfencedChecks != 0 {
		t.Fatalf("stats %+v: one check of the old shard, fenced", st)
	}
	// The old shard's fence lost (or never raised): read, counted, published.
	from, _ := routing.RouteKey(moving, 4)
	fx.rdb.Del(ctx, routing.FenceKey(routing.StreamKey(prefix, from)))
	if res, err := p.Publish(ctx, moving, map[string]any{eventField: "unfenced"}); err != nil || res.Duplicate {
		t.Fatalf("%+v, %v", res, err)
	}
	if st := p.Stats(); st.LayoutChecks != 2 || st.UnfencedChecks != 1 {
		t.Fatalf("stats %+v", st)
	}
	// A layout that ended longer ago than the window (and the slack) is not read.
	fx.coord.mu.Lock()
	fx.coord.previous[0].EndedAt = time.Now().Add(-time.Minute - time.Hour)
	fx.coord.mu.Unlock()
	fx.coord.set(2, 8)
	old := fx.producer(t, dedup(time.Minute))
	if _, err := old.Publish(ctx, moving, map[string]any{eventField: "late"}); err != nil {
		t.Fatal(err)
	}
	if st := old.Stats(); st.LayoutChecks != 0 {
		t.Fatalf("stats %+v: the layout ended before the window", st)
	}
}

func TestEventIDBounds(t *testing.T) {
	fx := setup(t, 1, 1, 1)
	p := fx.producer(t, dedup(time.Minute))
	ctx := context.Background()
	for _, tc := range []struct {
		id any
		ok bool
	}{
		{strings.Repeat("x", producer.MaxEventIDLength), true},
		{strings.Repeat("x", producer.MaxEventIDLength+1), false},
		{"", false},
		{true, false},
		{1.5, false},
		{int64(42), true},
		{[]byte("bytes"), true},
	} {
		_, err := p.Publish(ctx, "k", map[string]any{eventField: tc.id})
		if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, producer.ErrInvalidEventID) {
			t.Errorf("event id %T of %d: %v", tc.id, len(fmt.Sprint(tc.id)), err)
		}
		res, err := p.PublishBatch(ctx, []producer.Message{{PartitionKey: "k", Fields: map[string]any{eventField: tc.id}}})
		if tc.ok != (err == nil) || !tc.ok && !errors.Is(res[0].Err, producer.ErrInvalidEventID) {
			t.Errorf("batch, event id %T: %v", tc.id, err)
		}
	}
	// []byte and string of the same bytes are one event id.
	res, err := p.Publish(ctx, "k", map[string]any{eventField: "bytes"})
	if err != nil || !res.Duplicate {
		t.Fatalf("%+v, %v", res, err)
	}
}

func TestDedupConfigValidated(t *testing.T) {
	fx := setup(t, 1, 1, 1)
	base := producer.Config{Coordinator: client.New(fx.coord.srv.URL, nil), Redis: fx.rdb, StreamPrefix: prefix, ConsumerGroup: group}
	for _, tc := range []struct {
		field  string
		window time.Duration
		ok     bool
	}{
		{eventField, producer.MaxDedupWindow, true},
		{eventField, producer.MaxDedupWindow + time.Millisecond, false},
		{eventField, -time.Second, false},
		{"", time.Minute, false},
		{"", 0, true},
	} {
		cfg := base
		cfg.EventIDField, cfg.DedupWindow = tc.field, tc.window
		if _, err := producer.New(cfg); (err == nil) != tc.ok {
			t.Errorf("EventIDField %q, DedupWindow %s: %v", tc.field, tc.window, err)
		}
	}
}

func TestPreviousLayoutsValidated(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	layouts := func(n int) []client.RoutingLayout {
		out := make([]client.RoutingLayout, n)
		for i := range out { // versions 100, 99, ...: each fenced at the next one's start
			out[i] = client.RoutingLayout{MetadataVersion: int64(99 - i), ShardCount: 2, Fence: int64(100 - i), EndedAt: time.Now()}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		prev []client.RoutingLayout
		ok   bool
	}{
		{"64 layouts", layouts(64), true},
		{"65 layouts", layouts(65), false},
		{"fence above the current version", []client.RoutingLayout{{MetadataVersion: 1, ShardCount: 2, Fence: 101}}, false},
		{"fence not after its start", []client.RoutingLayout{{MetadataVersion: 5, ShardCount: 2, Fence: 5}}, false},
		{"older layout ends after the newer began", []client.RoutingLayout{{MetadataVersion: 50, ShardCount: 2, Fence: 100}, {MetadataVersion: 10, ShardCount: 2, Fence: 60}}, false},
		{"negative shard count", []client.RoutingLayout{{MetadataVersion: 1, ShardCount: -1, Fence: 2}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx.coord.mu.Lock()
			fx.coord.previous = tc.prev
			fx.coord.mu.Unlock()
			fx.coord.set(100, 4)
			p := fx.producer(t, dedup(time.Minute))
			_, err := p.Routing(context.Background())
			if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, producer.ErrInvalidRouting) {
				t.Fatalf("err %v", err)
			}
		})
	}
}

// A coordinator whose previous layouts reach less far back than the window
// (or lists none) is said once in the log.
func TestShortLayoutWindowIsLoggedOnce(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	var buf syncBuffer
	p := fx.producer(t, dedup(time.Minute, func(c *producer.Config) { c.Logger = slog.New(slog.NewTextHandler(&buf, nil)) }))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := p.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(buf.String(), "lists previous layouts for less than the dedup window"); n != 1 {
		t.Fatalf("logged %d times:\n%s", n, buf.String())
	}
	// One that covers the window (an hour, with previous layouts) is not.
	fx.reshard(t, 2, 8)
	var quiet syncBuffer
	q := fx.producer(t, dedup(time.Minute, func(c *producer.Config) { c.Logger = slog.New(slog.NewTextHandler(&quiet, nil)) }))
	if err := q.Refresh(ctx); err != nil || strings.Contains(quiet.String(), "previous layouts") {
		t.Fatalf("%v, log:\n%s", err, quiet.String())
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A batch with a window whose entries route to a retired shard (several to
// one shard stream that is gone) refreshes the routing and writes each once
// on its new shard: the script answers every entry of a missing stream, so
// the SDK reads it as a missing stream, not as a reply it cannot read.
func TestDedupBatchOnARetiredShardRefreshes(t *testing.T) {
	fx := setup(t, 1, 8, 4)
	p := fx.producer(t, func(c *producer.Config) { c.EventIDField, c.DedupWindow = eventField, time.Minute })
	ctx := context.Background()
	if _, err := p.Routing(ctx); err != nil {
		t.Fatal(err)
	}
	fx.coord.set(2, 4)
	var msgs []producer.Message
	var keys []string
	for i := 0; len(msgs) < 3 && i < 10000; i++ {
		k := "key-" + strconv.Itoa(i)
		if s, _ := routing.RouteKey(k, 8); s == 5 {
			keys = append(keys, k)
			msgs = append(msgs, producer.Message{PartitionKey: k, Fields: map[string]any{eventField: "retired-" + k, "n": "1"}})
		}
	}
	res, err := p.PublishBatch(ctx, msgs)
	if err != nil {
		t.Fatalf("batch onto a retired shard: %v (results %+v)", err, res)
	}
	for i, r := range res {
		want, _ := routing.RouteKey(keys[i], 4)
		if r.MetadataVersion != 2 || r.ShardIndex != want || r.Duplicate {
			t.Fatalf("result %d %+v, want version 2, shard %d, written", i, r, want)
		}
		if got := entriesOf(t, fx.rdb, 4, "retired-"+keys[i]); len(got) != 1 {
			t.Fatalf("event %s has entries %v, want one", keys[i], got)
		}
	}
	// A nil answer proves nothing landed: the retry needs no look at the
	// retired shard (an answer it could not read would have made it check).
	if st := p.Stats(); st.LayoutChecks != 0 || st.Retries != 3 {
		t.Fatalf("stats %+v, want 3 retries and no layout check", st)
	}
}
