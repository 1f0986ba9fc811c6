package producer_test

import (
	"context"
	"fmt"
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

// BenchmarkPublishFencedVsRawXAdd: the producer's fenced publish
// (PublishScript: fence read, XADD, _rsc_rv tag, for a group with ordering KEY
// whose shards all have a fence) against the plain XADD NOMKSTREAM MAXLEN ~ N
// it replaces, to precomputed keys, in the same run against the same
// redis-server, alternating batch by batch. Single publishes against single
// XADDs, and PublishBatch of 64 against a pipeline of 64 XADDs. Reports both
// throughputs and fenced/raw (target >= 0.8). Run:
//
//	go test -run '^$' -bench PublishFenced -benchtime 3s ./client/producer/
func BenchmarkPublishFencedVsRawXAdd(b *testing.B) {
	rdb := redistest.StartProcess(b).Client(b)
	ctx := context.Background()
	const shards = 4
	f := newFakeCoordinator(b, 7, shards)
	f.setOrdered(7, shards, client.OrderingKey)
	for i := 0; i < shards; i++ {
		key := routing.StreamKey(prefix, i)
		if err := rdb.XGroupCreateMkStream(ctx, key, group, "$").Err(); err != nil {
			b.Fatal(err)
		}
		// A fence below the routing version: the script reads it and passes.
		if err := rdb.HSet(ctx, routing.FenceKey(key), group, 6).Err(); err != nil {
			b.Fatal(err)
		}
	}
	p, err := producer.New(producer.Config{Coordinator: client.NewCoordinator(f.srv.URL, nil), Redis: rdb, StreamPrefix: prefix, ConsumerGroup: group})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.Routing(ctx); err != nil {
		b.Fatal(err)
	}
	payload := strings.Repeat("x", 64)
	keys := make([]string, 1024)
	shardKeys := make([]string, len(keys))
	for i := range keys {
		keys[i] = "customer-" + strconv.Itoa(i)
		s, _ := routing.RouteKey(keys[i], shards)
		shardKeys[i] = routing.StreamKey(prefix, s)
	}
	rawArgs := func(key string, fields map[string]any) *redis.XAddArgs {
		return &redis.XAddArgs{Stream: key, NoMkStream: true, MaxLen: producer.DefaultMaxLen, Approx: true, Values: fields}
	}
	for _, batch := range []int{1, 64} {
		name := "single"
		if batch > 1 {
			name = "batch=" + strconv.Itoa(batch)
		}
		b.Run(name, func(b *testing.B) {
			var fenced, raw time.Duration
			msgs := make([]producer.Message, batch)
			next := 0
			b.ResetTimer()
			for done := 0; done < b.N; done += batch {
				fields := map[string]any{"payload": payload, "n": strconv.Itoa(done)}
				for i := range msgs {
					msgs[i] = producer.Message{PartitionKey: keys[(next+i)%len(keys)], Fields: fields}
				}
				runFenced := func() {
					t0 := time.Now()
					if batch == 1 {
						if _, err := p.Publish(ctx, msgs[0].PartitionKey, fields); err != nil {
							b.Fatal(err)
						}
					} else if _, err := p.PublishBatch(ctx, msgs); err != nil {
						b.Fatal(err)
					}
					fenced += time.Since(t0)
				}
				runRaw := func() {
					t0 := time.Now()
					if batch == 1 {
						if err := rdb.XAdd(ctx, rawArgs(shardKeys[next%len(keys)], fields)).Err(); err != nil {
							b.Fatal(err)
						}
					} else {
						pipe := rdb.Pipeline()
						for i := 0; i < batch; i++ {
							pipe.XAdd(ctx, rawArgs(shardKeys[(next+i)%len(keys)], fields))
						}
						if _, err := pipe.Exec(ctx); err != nil {
							b.Fatal(err)
						}
					}
					raw += time.Since(t0)
				}
				if (done/batch)%2 == 0 {
					runFenced()
					runRaw()
				} else {
					runRaw()
					runFenced()
				}
				next += batch
			}
			if fenced <= 0 || raw <= 0 {
				return
			}
			n := float64(next)
			b.ReportMetric(n/fenced.Seconds(), "fenced-msgs/s")
			b.ReportMetric(n/raw.Seconds(), "raw-msgs/s")
			b.ReportMetric(raw.Seconds()/fenced.Seconds(), "fenced/raw")
			if testing.Verbose() {
				fmt.Printf("%s: fenced %.0f msgs/s, raw %.0f msgs/s, fenced/raw %.3f\n", b.Name(), n/fenced.Seconds(), n/raw.Seconds(), raw.Seconds()/fenced.Seconds())
			}
		})
	}
}
