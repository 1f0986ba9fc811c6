package client_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/routing"
)

// The benchmarks compare the SDK with the same Redis work done by hand, in the
// same run against the same Redis, alternating the two sides batch by batch
// so that drift affects both alike. Each reports msgs/s of both sides and
// their ratio ("sdk/raw", 1.0 = no overhead). Targets: publish >= 0.8 (every
// SDK publish runs producer.PublishScript, the fence check, where the raw side
// runs a plain XADD; the fence alone: rscbench ordering, section ordering.publish),
// consume >= 0.8. Run: make bench, or
//
//	go test -run '^$' -bench . -benchtime 2s ./client/

const benchShards = 4

func benchPayload() string { return strings.Repeat("x", 64) }

// BenchmarkPublishSDKvsRawXAdd: Producer.PublishBatch (routeV1, routing cache,
// fenced script calls, results) against a go-redis pipeline of XADD NOMKSTREAM
// MAXLEN ~ N commands to precomputed keys; and Producer.Publish against single
// XADDs.
func BenchmarkPublishSDKvsRawXAdd(b *testing.B) {
	c := startCluster(b)
	const prefix, group = "bench-pub", "g"
	c.createGroup(prefix, group, benchShards)
	p, err := producer.New(producer.Config{Coordinator: c.Reader(), Redis: c.RDB, StreamPrefix: prefix, ConsumerGroup: group})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	payload := benchPayload()
	keys := make([]string, 1024)
	shardKeys := make([]string, len(keys))
	for i := range keys {
		keys[i] = "customer-" + strconv.Itoa(i)
		s, _ := routing.RouteKey(keys[i], benchShards)
		shardKeys[i] = routing.StreamKey(prefix, s)
	}
	if _, err := p.Routing(ctx); err != nil {
		b.Fatal(err)
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
			var sdk, raw time.Duration
			msgs := make([]producer.Message, batch)
			next := 0
			b.ResetTimer()
			for done := 0; done < b.N; done += batch {
				fields := map[string]any{"payload": payload, "n": strconv.Itoa(done)}
				for i := range msgs {
					msgs[i] = producer.Message{PartitionKey: keys[(next+i)%len(keys)], Fields: fields}
				}
				runSDK := func() {
					t0 := time.Now()
					if batch == 1 {
						if _, err := p.Publish(ctx, msgs[0].PartitionKey, fields); err != nil {
							b.Fatal(err)
						}
					} else if _, err := p.PublishBatch(ctx, msgs); err != nil {
						b.Fatal(err)
					}
					sdk += time.Since(t0)
				}
				runRaw := func() {
					t0 := time.Now()
					if batch == 1 {
						if err := c.RDB.XAdd(ctx, rawArgs(shardKeys[next%len(keys)], fields)).Err(); err != nil {
							b.Fatal(err)
						}
					} else {
						pipe := c.RDB.Pipeline()
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
					runSDK()
					runRaw()
				} else {
					runRaw()
					runSDK()
				}
				next += batch
			}
			reportRatio(b, next, sdk, raw)
		})
	}
}

// BenchmarkConsumeSDKvsRawXReadGroup: the member runtime (one member owning
// every shard, one reader per shard, handler, XACK per batch) against one
// goroutine per shard running XREADGROUP / handler / XACK by hand, each
// draining the same backlog through its own Redis consumer group.
func BenchmarkConsumeSDKvsRawXReadGroup(b *testing.B) {
	c := startCluster(b)
	const prefix, group, rawGroup = "bench-con", "g", "raw"
	c.createGroup(prefix, group, benchShards)
	ctx := context.Background()
	streams := make([]string, benchShards)
	for i := range streams {
		streams[i] = routing.StreamKey(prefix, i)
		if err := c.RDB.XGroupCreate(ctx, streams[i], rawGroup, "$").Err(); err != nil {
			b.Fatal(err)
		}
	}
	payload := benchPayload()
	prefill := func(n int) {
		for start := 0; start < n; start += 1000 {
			pipe := c.RDB.Pipeline()
			for i := start; i < min(start+1000, n); i++ {
				pipe.XAdd(ctx, &redis.XAddArgs{Stream: streams[i%benchShards], Values: map[string]any{"payload": payload}})
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}

	for _, count := range []int64{10, 100} {
		b.Run("count="+strconv.FormatInt(count, 10), func(b *testing.B) {
			var handled atomic.Int64
			handler := func(context.Context, member.Message) error { handled.Add(1); return nil }

			// sdkRound drains n messages with a fresh runtime and returns the
			// time from its first assignment to the last ack.
			sdkRound := func(n int) time.Duration {
				assigned := make(chan time.Time, 1)
				rt, err := member.Start(ctx, member.Config{
					Coordinator: c.Member(), Redis: c.RDB, StreamPrefix: prefix, ConsumerGroup: group,
					MemberIDBase: "bench", BatchSize: count, Block: 100 * time.Millisecond,
					OnEvent: func(e member.Event) {
						if e.Kind == member.EventAssigned && len(e.Shards) == benchShards {
							select {
							case assigned <- e.Time:
							default:
							}
						}
					},
				}, handler)
				if err != nil {
					b.Fatal(err)
				}
				var t0 time.Time
				select {
				case t0 = <-assigned:
				case <-time.After(10 * time.Second):
					b.Fatal("the member got no assignment")
				}
				b.StartTimer()
				for rt.Stats().Acked < int64(n) {
					time.Sleep(200 * time.Microsecond)
				}
				d := time.Since(t0)
				b.StopTimer()
				_ = rt.Close()
				return d
			}
			// rawRound drains n messages with one goroutine per shard.
			rawRound := func(n int) time.Duration {
				var acked atomic.Int64
				var wg sync.WaitGroup
				b.StartTimer()
				t0 := time.Now()
				for i, key := range streams {
					wg.Add(1)
					go func() {
						defer wg.Done()
						args := &redis.XReadGroupArgs{Group: rawGroup, Consumer: "raw-" + strconv.Itoa(i), Streams: []string{key, ">"}, Count: count, Block: 100 * time.Millisecond}
						for acked.Load() < int64(n) {
							res, err := c.RDB.XReadGroup(ctx, args).Result()
							if err == redis.Nil {
								continue
							}
							if err != nil {
								b.Error(err)
								return
							}
							for _, s := range res {
								ids := make([]string, 0, len(s.Messages))
								for _, m := range s.Messages {
									_ = handler(ctx, member.Message{StreamKey: key, ID: m.ID, Values: m.Values})
									ids = append(ids, m.ID)
								}
								if len(ids) > 0 {
									if err := c.RDB.XAck(ctx, key, rawGroup, ids...).Err(); err != nil {
										b.Error(err)
										return
									}
									acked.Add(int64(len(ids)))
								}
							}
						}
					}()
				}
				for acked.Load() < int64(n) {
					time.Sleep(200 * time.Microsecond)
				}
				d := time.Since(t0)
				b.StopTimer()
				wg.Wait()
				return d
			}

			var sdk, raw time.Duration
			b.StopTimer()
			b.ResetTimer()
			done := 0
			for round := 0; done < b.N; round++ {
				n := min(b.N-done, 5000)
				n = max(n-n%benchShards, benchShards)
				prefill(n)
				if round%2 == 0 {
					sdk += sdkRound(n)
					raw += rawRound(n)
				} else {
					raw += rawRound(n)
					sdk += sdkRound(n)
				}
				done += n
			}
			reportRatio(b, done, sdk, raw)
		})
	}
}

// reportRatio reports both sides' throughput over msgs messages each, and
// sdk/raw (of throughputs).
func reportRatio(b *testing.B, msgs int, sdk, raw time.Duration) {
	if sdk <= 0 || raw <= 0 {
		return
	}
	n := float64(msgs)
	b.ReportMetric(n/sdk.Seconds(), "sdk-msgs/s")
	b.ReportMetric(n/raw.Seconds(), "raw-msgs/s")
	b.ReportMetric(raw.Seconds()/sdk.Seconds(), "sdk/raw")
	if testing.Verbose() {
		fmt.Printf("%s: sdk %.0f msgs/s, raw %.0f msgs/s, sdk/raw %.3f\n", b.Name(), n/sdk.Seconds(), n/raw.Seconds(), raw.Seconds()/sdk.Seconds())
	}
}
