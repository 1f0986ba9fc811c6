package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
)

// benchPayload is a typical log entry: a heartbeat's member.synced.
func benchPayload(tb testing.TB) []byte {
	tb.Helper()
	data, err := events.Encode(
		events.Meta{StreamPrefix: "orders", ConsumerGroup: "billing", Time: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC), Actor: "member-017", RequestID: "hb-0001"},
		&events.MemberSynced{MemberID: "member-017", MemberEpoch: 42, Granted: []int{3, 17, 64, 129}},
	)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// benchmarkAppend appends batches of batchSize entries with compare-and-append
// and reports events/s. Compare with BenchmarkXAddBaseline from the same run.
func benchmarkAppend(b *testing.B, batchSize int) {
	rdb := redistest.StartProcess(b).Client(b)
	l := redisstore.NewLog(rdb, "bench:events")
	ctx := context.Background()
	payload := benchPayload(b)
	batch := make([][]byte, batchSize)
	for i := range batch {
		batch[i] = payload
	}
	last := events.ZeroID
	b.SetBytes(int64(len(payload) * batchSize))
	for b.Loop() {
		ids, err := l.Append(ctx, last, batch)
		if err != nil {
			b.Fatal(err)
		}
		last = ids[len(ids)-1]
	}
	b.ReportMetric(float64(b.N*batchSize)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkAppendBatch1(b *testing.B)  { benchmarkAppend(b, 1) }
func BenchmarkAppendBatch64(b *testing.B) { benchmarkAppend(b, 64) }

// BenchmarkXAddBaseline is the floor for one entry per round trip: a plain
// XADD of the same payload, without the compare-and-append script.
func BenchmarkXAddBaseline(b *testing.B) {
	rdb := redistest.StartProcess(b).Client(b)
	ctx := context.Background()
	payload := benchPayload(b)
	args := &redis.XAddArgs{Stream: "bench:baseline", Values: []any{"e", payload}}
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if err := rdb.XAdd(ctx, args).Err(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
