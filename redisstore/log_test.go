package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/events/eventstest"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
)

// keySeq makes stream keys unique within the test binary.
var keySeq atomic.Int64

func uniqueKey(prefix string) string { return fmt.Sprintf("%s:%d", prefix, keySeq.Add(1)) }

// MustStartRedis starts a Redis container and returns it with a client.
func MustStartRedis(tb testing.TB, opts ...redistest.Option) (*redistest.Server, *redis.Client) {
	tb.Helper()
	srv := redistest.Start(tb, opts...)
	return srv, srv.Client(tb)
}

// MustAppend appends a batch or fails the test.
func MustAppend(tb testing.TB, l events.Log, after string, batch ...[]byte) []string {
	tb.Helper()
	ids, err := l.Append(context.Background(), after, batch)
	if err != nil {
		tb.Fatalf("Append after %s: %v", after, err)
	}
	if len(ids) != len(batch) {
		tb.Fatalf("Append returned %d ids for %d entries", len(ids), len(batch))
	}
	return ids
}

// MustRead reads every entry after the given id or fails the test.
func MustRead(tb testing.TB, l events.Log, after string) []events.Entry {
	tb.Helper()
	entries, err := l.Read(context.Background(), after, 0)
	if err != nil {
		tb.Fatalf("Read after %s: %v", after, err)
	}
	return entries
}

func TestIntegrationRedisLogAcceptance(t *testing.T) {
	_, rdb := MustStartRedis(t)
	eventstest.RunLogSuite(t, func(t *testing.T) events.Log {
		return redisstore.NewLog(rdb, uniqueKey("test:events"))
	})
}

func TestIntegrationRedisLogKeepsEncodedEntries(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)
	l := redisstore.NewLog(rdb, uniqueKey("test:events"))
	meta := events.Meta{StreamPrefix: "orders", ConsumerGroup: "billing", Actor: "alice"}
	var batch [][]byte
	for _, ev := range []events.Event{
		&events.GroupCreated{ShardCount: 4, RequestedBy: "alice"},
		&events.AssignmentComputed{AssignmentEpoch: 2, Targets: events.Targets{"m-1": {0, 1}, "m-2": {2, 3}}},
	} {
		data, err := events.Encode(meta, ev)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, data)
	}
	// Binary payloads (every byte value) survive the round trip unchanged.
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	ids := MustAppend(t, l, events.ZeroID, append(batch, binary)...)
	entries := MustRead(t, l, events.ZeroID)
	if len(entries) != 3 || string(entries[2].Data) != string(binary) {
		t.Fatalf("read %d entries; binary entry intact: %v", len(entries), len(entries) == 3 && string(entries[2].Data) == string(binary))
	}
	for i, e := range entries[:2] {
		rec, err := events.Decode(e.ID, e.Data)
		if err != nil || rec.ID != ids[i] {
			t.Fatalf("entry %d: %+v, %v", i, rec, err)
		}
	}
	if l.Key() == "" || l.Key() == redisstore.DefaultLogStream {
		t.Errorf("Key() = %q", l.Key())
	}
	if n, err := rdb.XLen(ctx, l.Key()).Result(); err != nil || n != 3 {
		t.Errorf("XLEN %s = %d, %v; want 3", l.Key(), n, err)
	}
}

func TestIntegrationRedisLogDefaultKey(t *testing.T) {
	_, rdb := MustStartRedis(t)
	if got := redisstore.NewLog(rdb, "").Key(); got != redisstore.DefaultLogStream {
		t.Errorf("NewLog with empty key uses %q, want %q", got, redisstore.DefaultLogStream)
	}
}

// TestIntegrationRedisLogReconnect: the log survives a Redis restart (with
// persistence) and the same client keeps working: go-redis redials, and the
// compare-and-append script is loaded again into the fresh script cache.
func TestIntegrationRedisLogReconnect(t *testing.T) {
	ctx := context.Background()
	srv, rdb := MustStartRedis(t, redistest.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
	l := redisstore.NewLog(rdb, uniqueKey("test:events"))

	ids := MustAppend(t, l, events.ZeroID, []byte("before-1"), []byte("before-2"))
	last := ids[len(ids)-1]

	srv.Restart(t)

	if got := eventstest.MustLastID(t, l); got != last {
		t.Fatalf("LastID after restart = %s, want %s (data lost?)", got, last)
	}
	more := MustAppend(t, l, last, []byte("after-1"))
	if c, err := events.CompareIDs(more[0], last); err != nil || c <= 0 {
		t.Fatalf("id after restart %s is not after %s", more[0], last)
	}
	_, err := l.Append(ctx, last, [][]byte{[]byte("stale")})
	if !errors.Is(err, events.ErrConflict) {
		t.Fatalf("append at the pre-restart position after a newer append: %v, want ErrConflict", err)
	}
	entries := MustRead(t, l, events.ZeroID)
	var got []string
	for _, e := range entries {
		got = append(got, string(e.Data))
	}
	if fmt.Sprint(got) != "[before-1 before-2 after-1]" {
		t.Fatalf("log after restart = %v", got)
	}
	if n, err := l.Len(ctx); err != nil || n != 3 {
		t.Errorf("Len = %d, %v; want 3", n, err)
	}
}

// TestIntegrationRedisLogLastIDAfterTrim: LastID is the last id ever appended,
// so an append after a trim still needs the true position.
func TestIntegrationRedisLogLastIDAfterTrim(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)
	l := redisstore.NewLog(rdb, uniqueKey("test:events"))
	ids := MustAppend(t, l, events.ZeroID, []byte("a"), []byte("b"))
	if err := rdb.XDel(ctx, l.Key(), ids...).Err(); err != nil {
		t.Fatal(err)
	}
	if got := eventstest.MustLastID(t, l); got != ids[1] {
		t.Fatalf("LastID after deleting every entry = %s, want %s", got, ids[1])
	}
	if _, err := l.Append(ctx, events.ZeroID, [][]byte{[]byte("c")}); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("append at 0-0 on an emptied log: %v, want ErrConflict", err)
	}
	MustAppend(t, l, ids[1], []byte("c"))
}

// TestIntegrationRedisLogRefusedAppend: an append Redis refuses with an
// answer before writing (maxmemory reached with noeviction: OOM) is
// events.ErrRefused, so the writer can say the decision was not recorded
// instead of "it may have landed"; nothing of it is in the log.
func TestIntegrationRedisLogRefusedAppend(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartProcess(t).Client(t) // CONFIG SET on a server of its own
	l := redisstore.NewLog(rdb, uniqueKey("test:events"))
	ids := MustAppend(t, l, events.ZeroID, []byte("before"))
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := l.Append(ctx, ids[0], [][]byte{[]byte("refused")})
	if err := rdb.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(err, events.ErrRefused) {
		t.Fatalf("append with Redis out of memory: %v, want ErrRefused", err)
	}
	if got := MustRead(t, l, events.ZeroID); len(got) != 1 {
		t.Fatalf("the log holds %d entries after the refused append, want 1", len(got))
	}
	// A failure without an answer is not a refusal.
	cut := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = cut.Close() })
	if _, err := redisstore.NewLog(cut, "x").Append(ctx, events.ZeroID, [][]byte{[]byte("x")}); err == nil || errors.Is(err, events.ErrRefused) {
		t.Fatalf("append to an unreachable Redis: %v, want an error that is not ErrRefused", err)
	}
}
