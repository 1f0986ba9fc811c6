package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// runPublish measures the Go SDK's publish paths against plain go-redis
// XADD NOMKSTREAM MAXLEN ~ N to the same shard streams of the same Redis, in
// alternating slices (the order swapped every round), as the other sections
// do:
//
//   - publish.single: one message per round trip: Publish (the fenced
//     script), Publish with a DedupWindow and a new event id each, and a
//     dedup hit (an event id published again, answered from its record),
//     against single XADDs.
//   - publish.batch: PublishBatch of 64, plain and with a DedupWindow,
//     against pipelines of 64 XADDs.
//   - publish.async: Async.Publish from one goroutine (every result awaited
//     at the end of each slice), plain and with a DedupWindow, against XADDs
//     one after the other.
//   - publish.record: what a dedup record costs Redis: MEMORY USAGE of one,
//     and used_memory per message of batches published with a DedupWindow
//     against the same batches without one.
//
// The producer reads its routing from a loopback HTTP server that answers a
// fixed producer routing of 4 shards (no coordinator: the routing is cached
// and refreshed every 5 s, off the measured path).
func (b *bench) runPublish(ctx context.Context, rep *Report) error {
	pb, err := b.newPublishBench(ctx)
	if err != nil {
		return err
	}
	defer pb.close(ctx)
	steps := []func(context.Context, *Report) error{pb.single, pb.batch, pb.async, pb.record}
	for _, step := range steps {
		if err := step(ctx, rep); err != nil {
			return err
		}
	}
	return nil
}

const (
	publishShards  = 4
	publishGroup   = "publishers"
	publishEventID = "eventId"
	publishWindow  = 10 * time.Minute
	publishBatch   = 64
)

type publishBench struct {
	b       *bench
	prefix  string
	rdb     *redis.Client
	srv     *http.Server
	url     string
	keys    []string // partition keys
	streams []string // streams[i]: the stream keys[i] routes to
	payload string
	seq     int
	run     string // distinguishes the event ids of this run
}

func (b *bench) newPublishBench(ctx context.Context) (*publishBench, error) {
	pb := &publishBench{b: b, prefix: b.st.prefix + "-pub", rdb: b.st.rdb, payload: strings.Repeat("x", 64), run: strconv.FormatInt(time.Now().UnixNano(), 36)}
	rt := wire.ProducerRoutingResponse{StreamPrefix: pb.prefix, ConsumerGroup: publishGroup, MetadataVersion: 1, ShardCount: publishShards,
		StreamKeyPattern: routing.KeyPattern(pb.prefix), Ordering: client.OrderingNone}
	for i := 0; i < publishShards; i++ {
		key := routing.StreamKey(pb.prefix, i)
		b.st.track(key, routing.FenceKey(key))
		if err := pb.rdb.XGroupCreateMkStream(ctx, key, publishGroup, "$").Err(); err != nil {
			return nil, fmt.Errorf("create %s: %w", key, err)
		}
		rt.Shards = append(rt.Shards, wire.RoutingShard{ShardIndex: i, StreamKey: key, RedisSlot: routing.Slot(key), FenceKey: routing.FenceKey(key)})
	}
	body, err := json.Marshal(rt)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+client.GroupPath(pb.prefix, publishGroup)+"/producer-routing", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	pb.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = pb.srv.Serve(ln) }()
	pb.url = "http://" + ln.Addr().String()
	pb.keys = make([]string, 1024)
	pb.streams = make([]string, len(pb.keys))
	for i := range pb.keys {
		pb.keys[i] = "customer-" + strconv.Itoa(i)
		s, _ := routing.RouteKey(pb.keys[i], publishShards)
		pb.streams[i] = routing.StreamKey(pb.prefix, s)
	}
	return pb, nil
}

// close stops the routing server and removes the dedup records (the streams
// are tracked by the store).
func (pb *publishBench) close(ctx context.Context) {
	_ = pb.srv.Close()
	if pb.b.st.proc != nil {
		return // a throwaway server goes with its data
	}
	var records []string
	for i := 0; i < publishShards; i++ {
		iter := pb.rdb.Scan(ctx, 0, producer.DedupKey(routing.StreamKey(pb.prefix, i), "*"), 1000).Iterator()
		for iter.Next(ctx) {
			records = append(records, iter.Val())
		}
	}
	_ = pb.b.st.drop(context.WithoutCancel(ctx), records...)
}

func (pb *publishBench) producer(window time.Duration) (*producer.Producer, error) {
	return pb.producerWith(window, false)
}

// producerWith is producer, on the records path when records is set.
func (pb *publishBench) producerWith(window time.Duration, records bool) (*producer.Producer, error) {
	cfg := producer.Config{Coordinator: client.New(pb.url, nil), Redis: pb.rdb, StreamPrefix: pb.prefix, ConsumerGroup: publishGroup}
	if window > 0 {
		cfg.EventIDField, cfg.DedupWindow, cfg.NoNativeDedup = publishEventID, window, records
	}
	return producer.New(cfg)
}

// dedupPath is a producer with a DedupWindow and the name of its path.
type dedupPath struct {
	name string // "native path" or "records path"
	p    *producer.Producer
}

// dedupPaths are the producers with a DedupWindow to measure: the path the
// SDK takes on this server (native where Redis has IDMP: Redis 8.6), and the
// records path next to it where that is native. The routing is fetched
// (which probes IDMP).
func (pb *publishBench) dedupPaths(ctx context.Context) ([]dedupPath, error) {
	p, err := pb.producer(publishWindow)
	if err != nil {
		return nil, err
	}
	if _, err := p.Routing(ctx); err != nil {
		return nil, err
	}
	if !p.Stats().NativeDedup {
		return []dedupPath{{"records path", p}}, nil
	}
	r, err := pb.producerWith(publishWindow, true)
	if err != nil {
		return nil, err
	}
	return []dedupPath{{"native path", p}, {"records path", r}}, nil
}

// engine names the server: its version (INFO server) and whether it has
// the idempotent XADD.
func (pb *publishBench) engine(ctx context.Context) string {
	info, err := pb.rdb.Info(ctx, "server").Result()
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	name, version := "redis", "?"
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			version = v
		}
		if v, ok := strings.CutPrefix(line, "valkey_version:"); ok {
			name, version = "valkey", v
		}
	}
	return name + " " + version
}

// fields are the next message's fields; with an event id, a new one.
func (pb *publishBench) fields(eventID bool) map[string]any {
	pb.seq++
	n := strconv.Itoa(pb.seq)
	if eventID {
		return map[string]any{"payload": pb.payload, "n": n, publishEventID: pb.run + "-" + n}
	}
	return map[string]any{"payload": pb.payload, "n": n}
}

func (pb *publishBench) xadd(i int, fields map[string]any) *redis.XAddArgs {
	return &redis.XAddArgs{Stream: pb.streams[i%len(pb.keys)], NoMkStream: true, MaxLen: producer.DefaultMaxLen, Approx: true, Values: fields}
}

// variant is one side of a section: its result name and one call (of
// msgs messages); wait, when set, ends a slice and is timed with it.
type variant struct {
	name string
	msgs int
	call func() error
	wait func() error
}

// compare measures the variants in alternating slices (the first one is the
// baseline; the order rotates every round) after a warm-up, and records
// them: their throughput, and the CPU time Redis spent per message during
// their slices (INFO cpu), which the load of a shared machine moves less.
func (pb *publishBench) compare(ctx context.Context, s *Section, vs []variant) error {
	o := pb.b.o
	for _, v := range vs {
		for i := 0; i < 5; i++ {
			if err := v.call(); err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
		}
		if v.wait != nil {
			if err := v.wait(); err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
		}
	}
	count := make([]int, len(vs))
	took := make([]time.Duration, len(vs))
	cpu := make([]float64, len(vs)) // Redis's CPU seconds during the slices
	for round := 0; round < o.publishRounds; round++ {
		for k := range vs {
			j := (k + round) % len(vs)
			v := vs[j]
			c0, err := pb.redisCPU(ctx)
			if err != nil {
				return err
			}
			start := time.Now()
			calls, _, err := slice(ctx, o.publishSlice, v.call)
			if err == nil && v.wait != nil {
				err = v.wait()
			}
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			count[j] += calls * v.msgs
			took[j] += time.Since(start)
			c1, err := pb.redisCPU(ctx)
			if err != nil {
				return err
			}
			cpu[j] += c1 - c0
		}
	}
	s.baseline(vs[0].name, rate(count[0], took[0]), "msgs/s")
	for j := 1; j < len(vs); j++ {
		s.measured(vs[j].name, rate(count[j], took[j]), "msgs/s", vs[0].name)
	}
	cpuName := func(j int) string { return vs[j].name + ": Redis CPU per message" }
	perMessage := func(j int) float64 { return cpu[j] / float64(max(count[j], 1)) * 1e6 }
	s.baseline(cpuName(0), perMessage(0), "µs")
	for j := 1; j < len(vs); j++ {
		s.measured(cpuName(j), perMessage(j), "µs", cpuName(0))
	}
	s.note("Redis CPU per message: used_cpu_user + used_cpu_sys (INFO cpu) over a variant's slices, per message; it counts all the server did meanwhile, other clients of a shared Redis too")
	return nil
}

// redisCPU is the CPU time Redis has used, in seconds (INFO cpu).
func (pb *publishBench) redisCPU(ctx context.Context) (float64, error) {
	info, err := pb.rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	var sum float64
	found := 0
	for _, line := range strings.Split(info, "\n") {
		for _, field := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), field); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return 0, fmt.Errorf("INFO cpu: %s%s: %w", field, v, err)
				}
				sum += f
				found++
			}
		}
	}
	if found != 2 {
		return 0, errors.New("INFO cpu has no used_cpu_user and used_cpu_sys")
	}
	return sum, nil
}

func (pb *publishBench) section(ctx context.Context, rep *Report, name, title string) *Section {
	o := pb.b.o
	s := rep.section(name, title)
	s.param("engine", pb.engine(ctx))
	s.param("shards", publishShards)
	s.param("payload", "64 B + a sequence field (+ a 20 B event id with a window)")
	s.param("slices", fmt.Sprintf("%d x %s per variant, alternating", o.publishRounds, o.publishSlice))
	return s
}

// producers is a producer without a dedup window and the dedup paths to
// compare with it.
func (pb *publishBench) producers(ctx context.Context) (*producer.Producer, []dedupPath, error) {
	plain, err := pb.producer(0)
	if err != nil {
		return nil, nil, err
	}
	paths, err := pb.dedupPaths(ctx)
	if err != nil {
		return nil, nil, err
	}
	return plain, paths, nil
}

// xaddOne is the variant that writes one XADD per call, counting in *i.
func (pb *publishBench) xaddOne(ctx context.Context, name string, i *int) variant {
	return variant{name: name, msgs: 1, call: func() error {
		*i++
		return pb.rdb.XAdd(ctx, pb.xadd(*i, pb.fields(false))).Err()
	}}
}

func (pb *publishBench) single(ctx context.Context, rep *Report) error {
	plain, paths, err := pb.producers(ctx)
	if err != nil {
		return err
	}
	dd := paths[0].p
	// Event ids to publish again: a dedup hit each.
	hits := make([]string, len(pb.keys))
	for i := range hits {
		hits[i] = pb.run + "-hit-" + strconv.Itoa(i)
		if _, err := dd.Publish(ctx, pb.keys[i], map[string]any{publishEventID: hits[i]}); err != nil {
			return err
		}
	}
	pb.b.logf("publish: single publishes vs XADD, %d rounds of %s slices", pb.b.o.publishRounds, pb.b.o.publishSlice)
	i, h := 0, 0
	s := pb.section(ctx, rep, "publish.single", "one message per round trip: the SDK's publish (fenced script; with a dedup window; a dedup hit) against XADD NOMKSTREAM MAXLEN ~")
	vs := []variant{
		pb.xaddOne(ctx, "XADD, one per round trip", &i),
		{name: "Publish", msgs: 1, call: func() error {
			i++
			_, err := plain.Publish(ctx, pb.keys[i%len(pb.keys)], pb.fields(false))
			return err
		}},
	}
	for _, dp := range paths {
		vs = append(vs, variant{name: "Publish with DedupWindow (new event ids), " + dp.name, msgs: 1, call: func() error {
			i++
			_, err := dp.p.Publish(ctx, pb.keys[i%len(pb.keys)], pb.fields(true))
			return err
		}})
	}
	vs = append(vs, variant{name: "Publish of an event id already written (dedup hit), " + paths[0].name, msgs: 1, call: func() error {
		h = (h + 1) % len(hits)
		res, err := dd.Publish(ctx, pb.keys[h], map[string]any{publishEventID: hits[h]})
		if err == nil && !res.Duplicate {
			err = errors.New("not a dedup hit")
		}
		return err
	}})
	err = pb.compare(ctx, s, vs)
	s.note("goals (issue #31): Publish with DedupWindow >= 0.85x of XADD on Redis 8.6 (native path); not slower than before elsewhere; a dedup hit is one round trip, like the XADD")
	return err
}

func (pb *publishBench) batch(ctx context.Context, rep *Report) error {
	plain, paths, err := pb.producers(ctx)
	if err != nil {
		return err
	}
	pb.b.logf("publish: batches of %d vs pipelined XADD", publishBatch)
	i := 0
	msgs := make([]producer.Message, publishBatch)
	batchOf := func(p *producer.Producer, eventID bool) func() error {
		return func() error {
			for j := range msgs {
				i++
				msgs[j] = producer.Message{PartitionKey: pb.keys[i%len(pb.keys)], Fields: pb.fields(eventID)}
			}
			_, err := p.PublishBatch(ctx, msgs)
			return err
		}
	}
	s := pb.section(ctx, rep, "publish.batch", fmt.Sprintf("batches of %d: PublishBatch (plain; with a dedup window) against a pipeline of %d XADD NOMKSTREAM MAXLEN ~", publishBatch, publishBatch))
	vs := []variant{
		{name: fmt.Sprintf("%d XADDs per pipeline", publishBatch), msgs: publishBatch, call: func() error {
			pipe := pb.rdb.Pipeline()
			for j := 0; j < publishBatch; j++ {
				i++
				pipe.XAdd(ctx, pb.xadd(i, pb.fields(false)))
			}
			_, err := pipe.Exec(ctx)
			return err
		}},
		{name: fmt.Sprintf("PublishBatch of %d", publishBatch), msgs: publishBatch, call: batchOf(plain, false)},
	}
	for _, dp := range paths {
		vs = append(vs, variant{name: fmt.Sprintf("PublishBatch of %d with DedupWindow, %s", publishBatch, dp.name), msgs: publishBatch, call: batchOf(dp.p, true)})
	}
	err = pb.compare(ctx, s, vs)
	s.note("goals (issue #31): PublishBatch with DedupWindow >= 0.8x of the pipelined XADDs on Redis 8.6 (native path), >= 0.6x on the records path (Redis 7.x/8.0, Valkey)")
	return err
}

func (pb *publishBench) async(ctx context.Context, rep *Report) error {
	plain, paths, err := pb.producers(ctx)
	if err != nil {
		return err
	}
	dd := paths[0].p
	pb.b.logf("publish: Async from one goroutine vs sequential XADD")
	i := 0
	asyncOf := func(p *producer.Producer, eventID bool) (variant, *producer.Async) {
		a := p.Async(producer.AsyncConfig{})
		var futures []*producer.Future
		return variant{msgs: 1, call: func() error {
			i++
			f, err := a.Publish(ctx, pb.keys[i%len(pb.keys)], pb.fields(eventID))
			if err == nil {
				futures = append(futures, f)
			}
			return err
		}, wait: func() error {
			fs := futures
			futures = nil
			for _, f := range fs {
				if _, err := f.Wait(ctx); err != nil {
					return err
				}
			}
			return nil
		}}, a
	}
	av, a1 := asyncOf(plain, false)
	av.name = "Async.Publish from one goroutine"
	dv, a2 := asyncOf(dd, true)
	dv.name = "Async.Publish with DedupWindow from one goroutine, " + paths[0].name
	defer func() { _ = a1.Close(ctx); _ = a2.Close(ctx) }()
	s := pb.section(ctx, rep, "publish.async", "the asynchronous batching path from one goroutine (defaults: linger 1 ms, batches of up to 1,024, 8,192 in flight; every result awaited at the end of each slice) against XADDs one after the other")
	err = pb.compare(ctx, s, []variant{
		pb.xaddOne(ctx, "XADD, one after the other", &i),
		av, dv,
	})
	s.note("goal: Async.Publish (plain, and with DedupWindow) >= 5x of sequential XADD")
	return err
}

// record measures what a dedup record costs Redis.
func (pb *publishBench) record(ctx context.Context, rep *Report) error {
	const n = 20_000
	plain, err := pb.producer(0)
	if err != nil {
		return err
	}
	dd, err := pb.producer(publishWindow)
	if err != nil {
		return err
	}
	pb.b.logf("publish: memory of %d messages with and without a dedup record", n)
	usedMemory := func() (int64, error) {
		info, err := pb.rdb.Info(ctx, "memory").Result()
		if err != nil {
			return 0, err
		}
		v := redisstore.InfoField(info, "used_memory")
		if v == "" {
			return 0, errors.New("INFO memory has no used_memory")
		}
		return strconv.ParseInt(v, 10, 64)
	}
	var lastRecord string // the record of the last message published with a window
	perMessage := func(p *producer.Producer) (float64, error) {
		before, err := usedMemory()
		if err != nil {
			return 0, err
		}
		msgs := make([]producer.Message, 500)
		for done := 0; done < n; done += len(msgs) {
			for j := range msgs {
				// The same fields either way: an event id the caller gives.
				pb.seq++
				k, id := pb.seq%len(pb.keys), pb.run+"-m-"+strconv.Itoa(pb.seq)
				msgs[j] = producer.Message{PartitionKey: pb.keys[k], Fields: map[string]any{"payload": pb.payload, publishEventID: id}}
				lastRecord = producer.DedupKey(pb.streams[k], id)
			}
			if _, err := p.PublishBatch(ctx, msgs); err != nil {
				return 0, err
			}
		}
		after, err := usedMemory()
		if err != nil {
			return 0, err
		}
		return float64(after-before) / n, nil
	}
	plainBytes, err := perMessage(plain)
	if err != nil {
		return err
	}
	ddBytes, err := perMessage(dd)
	if err != nil {
		return err
	}
	sample := lastRecord
	one, err := pb.rdb.MemoryUsage(ctx, sample, 0).Result()
	if err != nil {
		return fmt.Errorf("MEMORY USAGE %s: %w", sample, err)
	}
	s := rep.section("publish.record", "what a dedup record costs Redis: used_memory per message published with a dedup window against the same messages without one")
	s.param("messages", n)
	s.param("event id", fmt.Sprintf("%d B", len(sample)-len(producer.DedupKey(pb.streams[0], ""))))
	s.param("record key", fmt.Sprintf("%d B (%s)", len(sample), sample))
	s.baseline("used_memory per message, no window", plainBytes, "B")
	s.measured("used_memory per message, with a window", ddBytes, "B", "used_memory per message, no window")
	s.info("record: used_memory per message, difference", ddBytes-plainBytes, "B")
	s.info("record: MEMORY USAGE of one", float64(one), "B")
	s.note("a record is a string key {stream}:dedup:<event id> holding the entry id, with a TTL of the window: its key name, the id, and Redis's per-key and expiry overhead")
	return nil
}
