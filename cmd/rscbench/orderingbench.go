package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/client"
	sdkmember "github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// runOrdering measures what ordered groups (ordering KEY) cost, with the Go
// SDK on both sides against a coordinator (commands + httpapi, in this
// process) on Redis:
//
//   - ordering.pause: the pause a resharding causes on the shards that gain
//     keys, from the cutover (resharding.cutover, recorded with the
//     activation) to the last resharding.barrier_released of the resharding,
//     both read from the event log, against the backlog the shards that lose
//     keys hold at the cutover. A group of 4 shards with 2 logical members
//     (member runtime, BatchSize 100) and a steady load of --ordering-load
//     msgs/s; the handlers stop, --backlogs entries are published, the group
//     is scaled 4 -> 8 (powers of two: each new shard waits on one old one)
//     or 4 -> 6 (every shard waits on every old one), and the handlers go on
//     at once. The baseline is the time the same members take to handle the
//     same backlog without a resharding: a pause close to it costs nothing
//     beyond reading the backlog.
//   - ordering.publish: the SDK's fenced publish to an ordered group whose
//     shards have a fence, against plain XADD NOMKSTREAM MAXLEN ~ to the same
//     streams, alternating slices; single publishes against single XADDs and
//     PublishBatch of 64 against a pipeline of 64 XADDs.
func (b *bench) runOrdering(ctx context.Context, rep *Report) error {
	rdb := b.st.rdb
	coord, rlog, srv, done, err := b.serveRedisCoordinator(ctx, "ordering-events", coordinator.Config{
		HeartbeatInterval: 500 * time.Millisecond, TickInterval: 100 * time.Millisecond,
		MemberLease: 10 * time.Second, RebalanceTimeout: 30 * time.Second, Logger: zerolog.Nop(),
	})
	if err != nil {
		return err
	}
	defer done()
	// The SDK's own pool: every owned shard keeps a connection in a blocking read.
	opts := *rdb.Options()
	opts.PoolSize = 64
	sdk := redis.NewClient(&opts)
	defer sdk.Close()
	ob := &orderingBench{b: b, coord: coord, rlog: rlog, rdb: sdk,
		admin: client.New(srv.URL(), client.BasicAuth{Username: "admin", Password: "password"})}
	if err := ob.pause(ctx, rep); err != nil {
		return err
	}
	return ob.publish(ctx, rep)
}

type orderingBench struct {
	b     *bench
	coord *coordinator.Coordinator
	rlog  *redisstore.Log
	rdb   *redis.Client
	admin *client.Client
	n     int // groups created
}

// orderedGroup is one group of the pause measurement, with its members and
// its steady load.
type orderedGroup struct {
	prefix string
	rt     *sdkmember.Runtime
	p      *producer.Producer

	paused  atomic.Bool
	backlog atomic.Int64 // backlog entries handled
	stop    chan struct{}
	done    chan struct{}
	loadErr atomic.Value
}

const orderingGroupName = "workers"

// newGroup creates an ordered group of 4 shards and starts 2 logical members
// and the steady load on it.
func (ob *orderingBench) newGroup(ctx context.Context) (*orderedGroup, error) {
	ob.n++
	g := &orderedGroup{prefix: fmt.Sprintf("%s-ord%d", ob.b.st.prefix, ob.n), stop: make(chan struct{}), done: make(chan struct{})}
	for i := 0; i < 8; i++ {
		key := routing.StreamKey(g.prefix, i)
		ob.b.st.track(key, routing.FenceKey(key))
	}
	shards, ordering := 4, client.OrderingKey
	if err := ob.admin.Do(ctx, http.MethodPost, client.GroupPath(g.prefix, orderingGroupName),
		wire.CreateRequest{RequestedBy: "rscbench", Reason: "benchmark", InitialShardCount: &shards, Ordering: &ordering}, nil); err != nil {
		return nil, err
	}
	var err error
	g.rt, err = sdkmember.Start(ctx, sdkmember.Config{
		Coordinator: ob.admin, Redis: ob.rdb, StreamPrefix: g.prefix, ConsumerGroup: orderingGroupName,
		MemberIDBase: "bench", Concurrency: 2, BatchSize: 100, Block: 50 * time.Millisecond,
	}, func(ctx context.Context, m sdkmember.Message) error {
		for g.paused.Load() {
			time.Sleep(time.Millisecond)
		}
		if m.Field("b") != "" {
			g.backlog.Add(1)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if g.p, err = producer.New(producer.Config{Coordinator: ob.admin, Redis: ob.rdb, StreamPrefix: g.prefix, ConsumerGroup: orderingGroupName}); err != nil {
		g.rt.Close()
		return nil, err
	}
	if err := ob.waitFor(ctx, 30*time.Second, "members reading the 4 shards of "+g.prefix, func() (bool, error) {
		gr, err := ob.admin.Group(ctx, g.prefix, orderingGroupName)
		if err != nil {
			return false, err
		}
		owned := 0
		for _, m := range g.rt.Members() {
			owned += len(m.Owned)
		}
		return gr.State == "STABLE" && owned == 4, nil
	}); err != nil {
		g.close()
		return nil, err
	}
	go g.steadyLoad(ob.b.o.orderingLoad)
	return g, nil
}

// steadyLoad publishes about rate msgs/s, in batches every 10 ms, on random keys.
func (g *orderedGroup) steadyLoad(rate int) {
	defer close(g.done)
	if rate <= 0 {
		return
	}
	const every = 10 * time.Millisecond
	per := max(1, rate/int(time.Second/every))
	t := time.NewTicker(every)
	defer t.Stop()
	msgs := make([]producer.Message, per)
	for n := 0; ; n++ {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		for i := range msgs {
			msgs[i] = producer.Message{PartitionKey: "load-" + strconv.Itoa(rand.IntN(1000)), Fields: map[string]any{"n": strconv.Itoa(n)}}
		}
		if _, err := g.p.PublishBatch(context.Background(), msgs); err != nil {
			g.loadErr.Store(err)
		}
	}
}

// fill publishes n backlog entries on random keys (spread over every shard).
func (g *orderedGroup) fill(ctx context.Context, n int) error {
	const chunk = 1000
	for done := 0; done < n; done += chunk {
		msgs := make([]producer.Message, min(chunk, n-done))
		for i := range msgs {
			msgs[i] = producer.Message{PartitionKey: "key-" + strconv.Itoa(rand.IntN(100_000)), Fields: map[string]any{"b": "1", "payload": "backlog entry"}}
		}
		if _, err := g.p.PublishBatch(ctx, msgs); err != nil {
			return fmt.Errorf("publish the backlog: %w", err)
		}
	}
	return nil
}

func (g *orderedGroup) close() {
	select {
	case <-g.stop:
	default:
		close(g.stop)
		<-g.done
	}
	g.rt.Close()
}

func (ob *orderingBench) waitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// pauseCase is one resharding measured: what the log recorded.
type pauseCase struct {
	pause     time.Duration // cutover -> last barrier released (0: no barrier)
	barriers  int           // shards that waited
	scaleCall time.Duration // the scale request (fencing, cutover, activation)
}

func (ob *orderingBench) pause(ctx context.Context, rep *Report) error {
	o := ob.b.o
	s := rep.section("ordering.pause", "the pause a resharding of an ordered group causes (cutover -> barriers released, from the event log) against the backlog the shards losing keys hold at the cutover; baseline: the same members handling the same backlog without a resharding")
	s.param("shards", "4 -> 8 (powers of two) and 4 -> 6")
	s.param("members", "2 logical members (member runtime, BatchSize 100)")
	s.param("steady load", fmt.Sprintf("%d msgs/s on 1,000 keys", o.orderingLoad))
	s.param("backlogs", joinInts(o.backlogs))
	s.param("repetitions", fmt.Sprintf("%d, a fresh group each (medians)", o.orderingReps))
	var calls []time.Duration
	for _, n := range o.backlogs {
		var drains []time.Duration
		pauses := map[int][]time.Duration{}
		waited := map[int]int{}
		for r := 0; r < o.orderingReps; r++ {
			// One group measures the drain without a resharding, then
			// 4 -> 8; another 4 -> 6.
			for _, to := range []int{8, 6} {
				ob.b.logf("ordering: backlog %d, 4 -> %d (%d of %d)", n, to, r+1, o.orderingReps)
				g, err := ob.newGroup(ctx)
				if err != nil {
					return err
				}
				if to == 8 && n > 0 {
					d, err := ob.drain(ctx, g, n)
					if err != nil {
						g.close()
						return err
					}
					drains = append(drains, d)
				}
				c, err := ob.reshard(ctx, g, n, to)
				g.close()
				if err != nil {
					return err
				}
				if e, _ := g.loadErr.Load().(error); e != nil {
					return fmt.Errorf("steady load on %s: %w", g.prefix, e)
				}
				pauses[to] = append(pauses[to], c.pause)
				waited[to] = max(waited[to], c.barriers)
				calls = append(calls, c.scaleCall)
			}
		}
		base := fmt.Sprintf("backlog %s: handled without a resharding", formatNumber(float64(n)))
		if n > 0 {
			s.baseline(base, ms(median(drains)), "ms")
		}
		for _, to := range []int{8, 6} {
			name := fmt.Sprintf("backlog %s, 4 -> %d: pause (%s)", formatNumber(float64(n)), to, shardsWaited(waited[to]))
			if p := median(pauses[to]); n > 0 && p > 0 {
				s.measured(name, ms(p), "ms", base)
			} else {
				s.info(name, ms(p), "ms")
			}
		}
	}
	s.info("scale request (fences raised, cutover read, layout changed)", ms(median(calls)), "ms")
	s.note("pause = time of the resharding's last resharding.barrier_released - time of its resharding.cutover (decision times in the log); 0 when no shard had to wait (everything before the cutover was already acked); only the shards that gain keys wait, the others go on")
	s.note("the handlers stop while the backlog is published and the scale is asked for, and go on as soon as it answers; the steady load runs all along")
	s.note("the barrier check reads Redis every 100 ms (--barrier-check-interval): a backlog the members handle faster than that still pauses up to one interval (half on average), so small backlogs show large ratios; large ones approach the time to handle them")
	return nil
}

func shardsWaited(n int) string {
	switch n {
	case 0:
		return "no shard waited"
	case 1:
		return "1 shard waited"
	}
	return fmt.Sprintf("up to %d shards waited", n)
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// drain measures how long the members take to handle a backlog of n entries
// (the baseline of a pause).
func (ob *orderingBench) drain(ctx context.Context, g *orderedGroup, n int) (time.Duration, error) {
	g.paused.Store(true)
	before := g.backlog.Load()
	if err := g.fill(ctx, n); err != nil {
		g.paused.Store(false)
		return 0, err
	}
	start := time.Now()
	g.paused.Store(false)
	err := ob.waitFor(ctx, 5*time.Minute, "the backlog handled", func() (bool, error) {
		return g.backlog.Load()-before >= int64(n), nil
	})
	return time.Since(start), err
}

// reshard publishes a backlog of n entries while the handlers stop, scales
// the group to `to`, lets the handlers go on, waits for the resharding to
// complete (an ordered scale-out completes once its barriers are released)
// and reads its cutover and barrier releases from the log.
func (ob *orderingBench) reshard(ctx context.Context, g *orderedGroup, n, to int) (pauseCase, error) {
	var c pauseCase
	g.paused.Store(true)
	if err := g.fill(ctx, n); err != nil {
		g.paused.Store(false)
		return c, err
	}
	after := ob.coord.State().LastID()
	t0 := time.Now()
	m, err := ob.admin.Scale(ctx, g.prefix, orderingGroupName, to, "rscbench", "benchmark")
	c.scaleCall = time.Since(t0)
	g.paused.Store(false)
	if err != nil {
		return c, err
	}
	if err := ob.waitFor(ctx, 5*time.Minute, "resharding "+m.ReshardingID+" DEPRECATED", func() (bool, error) {
		got, err := ob.admin.Migration(ctx, g.prefix, orderingGroupName, m.ReshardingID)
		return err == nil && got.State == "DEPRECATED", err
	}); err != nil {
		return c, err
	}
	var cutAt, releasedAt time.Time
	for {
		entries, err := ob.rlog.Read(ctx, after, 500)
		if err != nil {
			return c, err
		}
		if len(entries) == 0 {
			break
		}
		for _, e := range entries {
			rec, err := events.Decode(e.ID, e.Data)
			if err != nil {
				return c, err
			}
			switch ev := rec.Event.(type) {
			case *events.ReshardingCutover:
				if ev.ReshardingID == m.ReshardingID {
					cutAt, c.barriers = rec.Time, len(ev.Barriers)
				}
			case *events.BarrierReleased:
				if ev.ReshardingID == m.ReshardingID && rec.Time.After(releasedAt) {
					releasedAt = rec.Time
				}
			}
		}
		after = entries[len(entries)-1].ID
	}
	if cutAt.IsZero() {
		return c, errors.New("no resharding.cutover in the log for " + m.ReshardingID)
	}
	if c.barriers > 0 {
		if releasedAt.IsZero() {
			return c, errors.New("no resharding.barrier_released in the log for " + m.ReshardingID)
		}
		c.pause = releasedAt.Sub(cutAt)
	}
	return c, nil
}

// publish measures the fenced publish against plain XADD.
func (ob *orderingBench) publish(ctx context.Context, rep *Report) error {
	o := ob.b.o
	ob.n++
	prefix := fmt.Sprintf("%s-ord%d", ob.b.st.prefix, ob.n)
	const shards = 4
	shardCount, ordering := shards, client.OrderingKey
	if err := ob.admin.Do(ctx, http.MethodPost, client.GroupPath(prefix, orderingGroupName),
		wire.CreateRequest{RequestedBy: "rscbench", Reason: "benchmark", InitialShardCount: &shardCount, Ordering: &ordering}, nil); err != nil {
		return err
	}
	p, err := producer.New(producer.Config{Coordinator: ob.admin, Redis: ob.rdb, StreamPrefix: prefix, ConsumerGroup: orderingGroupName})
	if err != nil {
		return err
	}
	rt, err := p.Routing(ctx)
	if err != nil {
		return err
	}
	// Every shard fenced at the routing's version, as a cutover leaves them:
	// the script reads the fence and passes.
	for i := 0; i < shards; i++ {
		key := routing.StreamKey(prefix, i)
		ob.b.st.track(key, routing.FenceKey(key))
		if err := ob.rdb.HSet(ctx, routing.FenceKey(key), orderingGroupName, rt.MetadataVersion).Err(); err != nil {
			return err
		}
	}
	ob.b.logf("ordering: fenced publish vs XADD, %d rounds of %s slices", o.publishRounds, o.publishSlice)
	keys := make([]string, 1024)
	streamOf := make([]string, len(keys))
	for i := range keys {
		keys[i] = "customer-" + strconv.Itoa(i)
		s, _ := routing.RouteKey(keys[i], shards)
		streamOf[i] = routing.StreamKey(prefix, s)
	}
	payload := strings.Repeat("x", 64)
	s := rep.section("ordering.publish", "the SDK's fenced publish to an ordered group (fence check, XADD, _rsc_rv) against plain XADD NOMKSTREAM MAXLEN ~ to the same streams")
	s.param("shards", shards)
	s.param("payload", "64 B + a sequence field")
	s.param("slices", fmt.Sprintf("%d x %s per variant, alternating", o.publishRounds, o.publishSlice))
	for _, batch := range []int{1, 64} {
		var mu sync.Mutex
		next := 0
		msgs := make([]producer.Message, batch)
		fenced := func() error {
			mu.Lock()
			defer mu.Unlock()
			fields := map[string]any{"payload": payload, "n": strconv.Itoa(next)}
			if batch == 1 {
				_, err := p.Publish(ctx, keys[next%len(keys)], fields)
				next++
				return err
			}
			for i := range msgs {
				msgs[i] = producer.Message{PartitionKey: keys[(next+i)%len(keys)], Fields: fields}
			}
			next += batch
			_, err := p.PublishBatch(ctx, msgs)
			return err
		}
		raw := func() error {
			mu.Lock()
			defer mu.Unlock()
			fields := map[string]any{"payload": payload, "n": strconv.Itoa(next)}
			args := func(i int) *redis.XAddArgs {
				return &redis.XAddArgs{Stream: streamOf[i%len(keys)], NoMkStream: true, MaxLen: producer.DefaultMaxLen, Approx: true, Values: fields}
			}
			if batch == 1 {
				err := ob.rdb.XAdd(ctx, args(next)).Err()
				next++
				return err
			}
			pipe := ob.rdb.Pipeline()
			for i := 0; i < batch; i++ {
				pipe.XAdd(ctx, args(next+i))
			}
			next += batch
			_, err := pipe.Exec(ctx)
			return err
		}
		// Warm-up: the script loaded, the routing cached, connections open.
		for i := 0; i < 10; i++ {
			if err := fenced(); err != nil {
				return err
			}
			if err := raw(); err != nil {
				return err
			}
		}
		var fencedN, rawN int
		var fencedT, rawT time.Duration
		for round := 0; round < o.publishRounds; round++ {
			order := []bool{true, false}
			if round%2 == 1 {
				order = []bool{false, true}
			}
			for _, isFenced := range order {
				call := raw
				if isFenced {
					call = fenced
				}
				calls, took, err := slice(ctx, o.publishSlice, call)
				if err != nil {
					return err
				}
				if isFenced {
					fencedN, fencedT = fencedN+calls*batch, fencedT+took
				} else {
					rawN, rawT = rawN+calls*batch, rawT+took
				}
			}
		}
		name := "single publish"
		rawName := "XADD, one per round trip"
		if batch > 1 {
			name = fmt.Sprintf("PublishBatch of %d", batch)
			rawName = fmt.Sprintf("%d XADDs per pipeline", batch)
		}
		s.baseline(rawName, rate(rawN, rawT), "msgs/s")
		s.measured("fenced "+name, rate(fencedN, fencedT), "msgs/s", rawName)
	}
	s.note("the goal is fenced/raw >= 0.8; the fence costs Redis one script call (EVALSHA) per shard and call instead of XADD")
	return nil
}

// slice calls call repeatedly for d and returns how many calls it made.
func slice(ctx context.Context, d time.Duration, call func() error) (int, time.Duration, error) {
	start := time.Now()
	n := 0
	for time.Since(start) < d {
		if err := call(); err != nil {
			return n, time.Since(start), err
		}
		n++
		if ctx.Err() != nil {
			return n, time.Since(start), ctx.Err()
		}
	}
	return n, time.Since(start), nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = formatNumber(float64(n))
	}
	return strings.Join(s, ", ")
}
