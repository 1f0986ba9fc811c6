package producer_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/internal/benchratio"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
)

// The benchmarks measure the producer against plain go-redis XADD
// NOMKSTREAM MAXLEN ~ N to the same shard streams, in the same run against a
// local redis-server, interleaved (package benchratio), and report the
// throughput ratios. Goals (issue #23): a single idempotent publish >= 0.6 of
// a single XADD, a batch of 64 >= 0.8 of 64 pipelined XADDs, a dedup hit one
// round trip, the async path from one goroutine >= 5 of sequential XADDs.
// Issue #31: the names say the engine (redistest.Engine and the server's
// version) and the dedup path: on a server with IDMP (Redis 8.6) the dedup
// side is "dedup-native" and "dedup-records" runs next to it (NoNativeDedup);
// elsewhere it is "dedup-records". Run, per engine:
//
//	go test -run '^$' -bench . -benchtime 3s ./client/producer/
//	eval "$(bash .ci/engines.sh env redis86)"; go test -run '^$' -bench . -benchtime 3s ./client/producer/

const benchShards = 4

type benchFixture struct {
	fx       fixture
	keys     []string // partition keys
	streams  []string // streams[i]: the stream keys[i] routes to
	payload  string
	seq      int
	plain    *producer.Producer
	dedupped *producer.Producer // native where Redis has IDMP
	records  *producer.Producer // on the records path; nil without IDMP
	path     string             // dedupped's path: "native" or "records"
}

// engine names the server under test: redistest.Engine and its version.
func engine(b *testing.B) string {
	b.Helper()
	rs := redistest.StartProcess(b)
	info := rs.Client(b).Info(context.Background(), "server").Val()
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return redistest.Engine() + "-" + v
		}
	}
	return redistest.Engine()
}

// dedupSides are the dedup sides of a fixture: its producer's path, and the
// records path next to it where that is native.
func (bf *benchFixture) dedupSides(side func(name string, p *producer.Producer) benchratio.Side) []benchratio.Side {
	out := []benchratio.Side{side("dedup-"+bf.path, bf.dedupped)}
	if bf.records != nil {
		out = append(out, side("dedup-records", bf.records))
	}
	return out
}

func newBenchFixture(b *testing.B) *benchFixture {
	b.Helper()
	rs := redistest.StartProcess(b)
	rdb := rs.Client(b)
	ctx := context.Background()
	for i := 0; i < benchShards; i++ {
		if err := rdb.XGroupCreateMkStream(ctx, routing.StreamKey(prefix, i), group, "$").Err(); err != nil {
			b.Fatal(err)
		}
	}
	bf := &benchFixture{fx: fixture{coord: newFakeCoordinator(b, 1, benchShards), rdb: rdb}, payload: strings.Repeat("x", 64)}
	bf.keys = make([]string, 1024)
	bf.streams = make([]string, len(bf.keys))
	for i := range bf.keys {
		bf.keys[i] = "customer-" + strconv.Itoa(i)
		s, _ := routing.RouteKey(bf.keys[i], benchShards)
		bf.streams[i] = routing.StreamKey(prefix, s)
	}
	bf.plain = bf.newProducer(b, nil)
	bf.dedupped = bf.newProducer(b, dedup(time.Minute))
	bf.path = "records"
	if bf.dedupped.Stats().NativeDedup {
		bf.path = "native"
		bf.records = bf.newProducer(b, dedup(time.Minute, func(c *producer.Config) { c.NoNativeDedup = true }))
	}
	return bf
}

func (bf *benchFixture) newProducer(b *testing.B, mutate func(*producer.Config)) *producer.Producer {
	b.Helper()
	cfg := producer.Config{Coordinator: client.New(bf.fx.coord.srv.URL, nil), Redis: bf.fx.rdb, StreamPrefix: prefix, ConsumerGroup: group}
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := producer.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := p.Routing(context.Background()); err != nil {
		b.Fatal(err)
	}
	return p
}

// fields are a message's fields: the payload, a sequence number and, for the
// idempotent side, a fresh event id (a caller's id: no id generated).
func (bf *benchFixture) fields(eventID bool) map[string]any {
	bf.seq++
	n := strconv.Itoa(bf.seq)
	if eventID {
		return map[string]any{"payload": bf.payload, "n": n, eventField: "ev-" + n}
	}
	return map[string]any{"payload": bf.payload, "n": n}
}

func (bf *benchFixture) xadd(i int, fields map[string]any) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: bf.streams[i%len(bf.keys)], NoMkStream: true, MaxLen: producer.DefaultMaxLen, Approx: true, Values: fields}
}

func (bf *benchFixture) rawSingle(ctx context.Context) benchratio.Side {
	return benchratio.Side{Name: "raw", Op: func(i int) error {
		return bf.fx.rdb.XAdd(ctx, bf.xadd(i, bf.fields(false))).Err()
	}}
}

func (bf *benchFixture) publishSide(ctx context.Context, name string, p *producer.Producer, eventID bool) benchratio.Side {
	op := func(i int) error {
		_, err := p.Publish(ctx, bf.keys[i%len(bf.keys)], bf.fields(eventID))
		return err
	}
	return benchratio.Side{Name: name, Op: op, Warm: func() error { return op(0) }}
}

// BenchmarkIdempotentPublish: single publishes (fenced, and with a
// DedupWindow and a fresh event id each), a dedup hit (an event id published
// again), and batches of 64, against single and pipelined XADDs.
func BenchmarkIdempotentPublish(b *testing.B) {
	b.Run("engine="+engine(b), benchIdempotentPublish)
}

func benchIdempotentPublish(b *testing.B) {
	ctx := context.Background()
	b.Run("single", func(b *testing.B) {
		bf := newBenchFixture(b)
		sides := append([]benchratio.Side{bf.publishSide(ctx, "fenced", bf.plain, false)},
			bf.dedupSides(func(name string, p *producer.Producer) benchratio.Side { return bf.publishSide(ctx, name, p, true) })...)
		benchratio.Run(b, benchratio.Config{Msgs: 1, Slice: 50}, bf.rawSingle(ctx), sides...)
	})
	b.Run("hit", func(b *testing.B) {
		bf := newBenchFixture(b)
		// 1024 event ids written once; the side publishes them again.
		for i := range bf.keys {
			if _, err := bf.dedupped.Publish(ctx, bf.keys[i], map[string]any{eventField: "hit-" + strconv.Itoa(i)}); err != nil {
				b.Fatal(err)
			}
		}
		hit := benchratio.Side{Name: "hit-" + bf.path, Op: func(i int) error {
			k := i % len(bf.keys)
			res, err := bf.dedupped.Publish(ctx, bf.keys[k], map[string]any{eventField: "hit-" + strconv.Itoa(k)})
			if err == nil && !res.Duplicate {
				b.Fatalf("publish %d was not a dedup hit", i)
			}
			return err
		}}
		benchratio.Run(b, benchratio.Config{Msgs: 1, Slice: 50}, bf.rawSingle(ctx), hit)
	})
	b.Run("batch=64", func(b *testing.B) {
		bf := newBenchFixture(b)
		const n = 64
		raw := benchratio.Side{Name: "raw", Op: func(i int) error {
			pipe := bf.fx.rdb.Pipeline()
			for j := 0; j < n; j++ {
				pipe.XAdd(ctx, bf.xadd(i*n+j, bf.fields(false)))
			}
			_, err := pipe.Exec(ctx)
			return err
		}}
		batch := func(name string, p *producer.Producer, eventID bool) benchratio.Side {
			msgs := make([]producer.Message, n)
			op := func(i int) error {
				for j := range msgs {
					msgs[j] = producer.Message{PartitionKey: bf.keys[(i*n+j)%len(bf.keys)], Fields: bf.fields(eventID)}
				}
				_, err := p.PublishBatch(ctx, msgs)
				return err
			}
			return benchratio.Side{Name: name, Op: op, Warm: func() error { return op(0) }}
		}
		sides := append([]benchratio.Side{batch("fenced", bf.plain, false)},
			bf.dedupSides(func(name string, p *producer.Producer) benchratio.Side { return batch(name, p, true) })...)
		benchratio.Run(b, benchratio.Config{Msgs: n, Slice: 4}, raw, sides...)
	})
}

// BenchmarkAsyncVsSequentialXAdd: Async.Publish from one goroutine (waiting
// for every result at the end of each slice of 512) against the same number
// of XADDs one after the other.
func BenchmarkAsyncVsSequentialXAdd(b *testing.B) {
	b.Run("engine="+engine(b), benchAsyncVsSequentialXAdd)
}

func benchAsyncVsSequentialXAdd(b *testing.B) {
	ctx := context.Background()
	bf := newBenchFixture(b)
	const slice = 512
	async := func(name string, p *producer.Producer, eventID bool) benchratio.Side {
		a := p.Async(producer.AsyncConfig{})
		b.Cleanup(func() { _ = a.Close(ctx) })
		var mu sync.Mutex
		var futures []*producer.Future
		op := func(i int) error {
			f, err := a.Publish(ctx, bf.keys[i%len(bf.keys)], bf.fields(eventID))
			if err == nil {
				mu.Lock()
				futures = append(futures, f)
				mu.Unlock()
			}
			return err
		}
		wait := func() error {
			mu.Lock()
			fs := futures
			futures = nil
			mu.Unlock()
			for _, f := range fs {
				if _, err := f.Wait(ctx); err != nil {
					return err
				}
			}
			return nil
		}
		return benchratio.Side{Name: name, Op: op, Sync: wait, Warm: func() error {
			if err := op(0); err != nil {
				return err
			}
			return wait()
		}}
	}
	benchratio.Run(b, benchratio.Config{Msgs: 1, Slice: slice}, bf.rawSingle(ctx),
		async("async", bf.plain, false), async("async-dedup-"+bf.path, bf.dedupped, true))
}
