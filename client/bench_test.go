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

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/internal/benchratio"
	"github.com/rscoord/rsc/routing"
)

// The benchmarks compare the SDK with the same Redis work done by hand, in the
// same run against the same Redis, interleaved so that drift affects every
// side alike, and report msgs/s of each side and the throughput ratios.
//
// Publish: every SDK publish runs producer.PublishScript (the fence check and
// the XADD in one EVALSHA), so the side that does the same Redis work by hand
// is "script" (the same EVALSHA from go-redis); "raw" is a plain XADD, the
// baseline both are compared with. sdk/raw is what a publish costs against
// a bare XADD; script/raw what the fence's script costs Redis alone; their
// quotient what the SDK adds on the client. Consume: the member runtime
// against a hand-written XREADGROUP/XACK loop. Run: make bench, or
//
//	go test -run '^$' -bench 'SDKvs' -benchtime 3s ./client/

const benchShards = 4

func benchPayload() string { return strings.Repeat("x", 64) }

// BenchmarkPublishSDKvsRawXAdd: Producer.Publish against single XADD
// NOMKSTREAM MAXLEN ~ N commands to precomputed keys and against single
// EVALSHAs of producer.PublishScript; Producer.PublishBatch of 64 against a
// go-redis pipeline of 64 XADDs and against a pipeline of the script calls
// PublishBatch sends (one per shard). Sides alternate in slices whose first
// side rotates (package benchratio).
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
	shardOf := make([]int, len(keys))
	for i := range keys {
		keys[i] = "customer-" + strconv.Itoa(i)
		shardOf[i], _ = routing.RouteKey(keys[i], benchShards)
	}
	rt, err := p.Routing(ctx)
	if err != nil {
		b.Fatal(err)
	}
	script := redis.NewScript(producer.PublishScript)
	scriptKeys := func(s int) []string {
		k := routing.StreamKey(prefix, s)
		return []string{k, routing.FenceKey(k)}
	}
	tag := "0"
	if rt.Ordering == client.OrderingKey {
		tag = "1"
	}
	seq := 0
	fields := func() map[string]any {
		seq++
		return map[string]any{"payload": payload, "n": strconv.Itoa(seq)}
	}
	xadd := func(i int, f map[string]any) *redis.XAddArgs {
		return &redis.XAddArgs{Stream: routing.StreamKey(prefix, shardOf[i%len(keys)]), NoMkStream: true, MaxLen: producer.DefaultMaxLen, Approx: true, Values: f}
	}
	// scriptArgs are PublishScript's ARGV for entries of the same fields.
	scriptArgs := func(f map[string]any, n int) []any {
		args := []any{group, rt.MetadataVersion, tag, producer.DefaultMaxLen}
		for j := 0; j < n; j++ {
			args = append(args, 2*len(f))
			for k, v := range f {
				args = append(args, k, v)
			}
		}
		return args
	}

	b.Run("single", func(b *testing.B) {
		raw := benchratio.Side{Name: "raw", Op: func(i int) error { return c.RDB.XAdd(ctx, xadd(i, fields())).Err() }}
		byHand := benchratio.Side{Name: "script", Op: func(i int) error {
			return script.Run(ctx, c.RDB, scriptKeys(shardOf[i%len(keys)]), scriptArgs(fields(), 1)...).Err()
		}}
		byHand.Warm = func() error { return byHand.Op(0) }
		sdk := benchratio.Side{Name: "sdk", Op: func(i int) error {
			_, err := p.Publish(ctx, keys[i%len(keys)], fields())
			return err
		}}
		sdk.Warm = func() error { return sdk.Op(0) }
		benchratio.Run(b, benchratio.Config{Msgs: 1, Slice: 50}, raw, byHand, sdk)
	})
	b.Run("batch=64", func(b *testing.B) {
		const n = 64
		raw := benchratio.Side{Name: "raw", Op: func(i int) error {
			pipe := c.RDB.Pipeline()
			for j := 0; j < n; j++ {
				pipe.XAdd(ctx, xadd(i*n+j, fields()))
			}
			_, err := pipe.Exec(ctx)
			return err
		}}
		byHand := benchratio.Side{Name: "script", Op: func(i int) error {
			perShard := make([]int, benchShards)
			for j := 0; j < n; j++ {
				perShard[shardOf[(i*n+j)%len(keys)]]++
			}
			pipe := c.RDB.Pipeline()
			for s, m := range perShard {
				if m > 0 {
					script.EvalSha(ctx, pipe, scriptKeys(s), scriptArgs(fields(), m)...)
				}
			}
			_, err := pipe.Exec(ctx)
			return err
		}}
		byHand.Warm = func() error { return script.Load(ctx, c.RDB).Err() }
		msgs := make([]producer.Message, n)
		sdk := benchratio.Side{Name: "sdk", Op: func(i int) error {
			for j := range msgs {
				msgs[j] = producer.Message{PartitionKey: keys[(i*n+j)%len(keys)], Fields: fields()}
			}
			_, err := p.PublishBatch(ctx, msgs)
			return err
		}}
		sdk.Warm = func() error { return sdk.Op(0) }
		benchratio.Run(b, benchratio.Config{Msgs: n, Slice: 4}, raw, byHand, sdk)
	})
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
