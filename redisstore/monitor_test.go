package redisstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
)

// TestIntegrationMessagesBoundedInBytes: a page of a stream stops at its byte
// budget (always holding its first entry), cuts every entry to the record
// bound and says so, pages on from its last id in both directions, and reads
// ids only with a record bound of 0.
func TestIntegrationMessagesBoundedInBytes(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartProcess(t).Client(t)
	sh := redisstore.NewShards(rdb)
	key := uniqueKey("msgs") + ":0"
	big := strings.Repeat("x", 100_000)
	for i := 0; i < 10; i++ {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: "", Values: []string{"payload", big, "n", "v"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const recordBound = 40_000
	q := redisstore.MessagesQuery{Forward: true, Limit: 100, Peek: true, MaxBytes: 3 * recordBound, MaxRecordBytes: recordBound}
	page, more, cut, err := sh.Messages(ctx, key, q)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != 3 || !more || !cut {
		t.Fatalf("budget of 3 records: %d records, more %v, cut %v", len(page), more, cut)
	}
	for _, m := range page {
		size := len(m.ID)
		for k, v := range m.Fields {
			size += len(k) + len(v)
		}
		if !m.Truncated || size != recordBound || len(m.Fields["payload"]) != recordBound-len(m.ID)-len("payload") {
			t.Fatalf("record %s: %d bytes, truncated %v, fields %d", m.ID, size, m.Truncated, len(m.Fields))
		}
		if _, kept := m.Fields["n"]; kept {
			t.Fatalf("record %s kept a field past its bound", m.ID)
		}
	}
	// The first record is read whatever the budget; paging goes on from the cursor.
	q.MaxBytes, q.Cursor = 1, page[2].ID
	next, more, cut, err := sh.Messages(ctx, key, q)
	if err != nil || len(next) != 1 || !more || !cut || next[0].ID <= page[2].ID {
		t.Fatalf("after %s with a 1-byte budget: %v, more %v, cut %v, %v", page[2].ID, next, more, cut, err)
	}
	// Backward, a wide bound: whole entries, not truncated.
	back, more, cut, err := sh.Messages(ctx, key, redisstore.MessagesQuery{Limit: 2, Peek: true, MaxBytes: 1 << 30, MaxRecordBytes: 1 << 20})
	if err != nil || len(back) != 2 || !more || cut || back[0].Truncated || back[0].Fields["payload"] != big || back[0].Fields["n"] != "v" || back[0].ID <= back[1].ID {
		t.Fatalf("backward page of 2: %d records, more %v, cut %v, %v", len(back), more, cut, err)
	}
	// Without Peek the limit ends the page silently; ids only with a bound of 0.
	ids, more, _, err := sh.Messages(ctx, key, redisstore.MessagesQuery{Forward: true, Limit: 10, MaxBytes: 1 << 30})
	if err != nil || len(ids) != 10 || more || len(ids[0].Fields) != 0 || !ids[0].Truncated {
		t.Fatalf("ids only: %d records, more %v, fields %v, %v", len(ids), more, ids[0].Fields, err)
	}
	// A missing stream is an empty page.
	none, more, cut, err := sh.Messages(ctx, key+"-none", q)
	if err != nil || len(none) != 0 || more || cut {
		t.Fatalf("missing stream: %v %v %v %v", none, more, cut, err)
	}
}
