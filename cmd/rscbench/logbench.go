package main

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
)

// runLog runs the log benchmarks: append, fold from memory, replay from
// Redis, start-up, and start-up on a trimmed log.
func (b *bench) runLog(ctx context.Context, rep *Report) error {
	if err := b.logAppend(ctx, rep); err != nil {
		return fmt.Errorf("log append: %w", err)
	}
	b.logf("log: generating %s events", formatNumber(float64(b.o.events)))
	start := time.Now()
	ml, counts, err := generateLog(ctx, b.o.events, b.o.seed)
	if err != nil {
		return fmt.Errorf("generate log: %w", err)
	}
	genTime := time.Since(start)
	if err := b.logFold(ctx, rep, ml, counts, genTime); err != nil {
		return fmt.Errorf("log fold: %w", err)
	}
	rlog, st, err := b.logReplay(ctx, rep, ml)
	if err != nil {
		return fmt.Errorf("log replay: %w", err)
	}
	if err := b.logStartup(ctx, rep, rlog, st); err != nil {
		return fmt.Errorf("log start-up: %w", err)
	}
	if err := b.logSnapshots(ctx, rep, ml, rlog); err != nil {
		return fmt.Errorf("log snapshots: %w", err)
	}
	if err := b.logTrim(ctx, rep, rlog, st); err != nil {
		return fmt.Errorf("log trim: %w", err)
	}
	snapKeys, err := redisstore.NewSnapshotStore(b.st.rdb, rlog.Key()).Keys(ctx)
	if err != nil {
		return err
	}
	return b.st.drop(ctx, append(snapKeys, rlog.Key())...)
}

// appendPayloads are realistic log entries for a 100-member, 128-shard group (the
// heartbeat benchmark's group): three member.synced for every assignment.computed.
func appendPayloads() ([][]byte, error) {
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprintf("member-%04d", i)
	}
	targets := commands.Assign(nil, ids, 128)
	at := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	meta := events.Meta{StreamPrefix: "orders", ConsumerGroup: "billing", Time: at, Actor: commands.Actor}
	computed, err := events.Encode(meta, &events.AssignmentComputed{AssignmentEpoch: 101, Targets: targets})
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for i := 0; i < 3; i++ {
		id := ids[i*37%len(ids)]
		m := meta
		m.Actor, m.RequestID = id, fmt.Sprintf("req-%016x", 0x5eed+i)
		synced, err := events.Encode(m, &events.MemberSynced{MemberID: id, MemberEpoch: 101, Granted: targets[id]})
		if err != nil {
			return nil, err
		}
		out = append(out, synced)
	}
	return append(out, computed), nil
}

// appendVariant writes one round trip's worth of events to a fresh stream.
type appendVariant struct {
	name  string
	batch int
	// start returns the step function for a new stream at key.
	start func(key string) func(ctx context.Context, batch [][]byte) error
}

func (b *bench) logAppend(ctx context.Context, rep *Report) error {
	payloads, err := appendPayloads()
	if err != nil {
		return err
	}
	total := 0
	for _, p := range payloads {
		total += len(p)
	}
	rdb := b.st.rdb
	xadd := func(batch int) appendVariant {
		name := "XADD, 1 per round trip"
		if batch > 1 {
			name = fmt.Sprintf("XADD, %d per pipeline", batch)
		}
		return appendVariant{name: name, batch: batch, start: func(key string) func(context.Context, [][]byte) error {
			return func(ctx context.Context, data [][]byte) error {
				if len(data) == 1 {
					return rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"e", data[0]}}).Err()
				}
				pipe := rdb.Pipeline()
				for _, d := range data {
					pipe.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{"e", d}})
				}
				_, err := pipe.Exec(ctx)
				return err
			}
		}}
	}
	casAppend := func(batch int) appendVariant {
		return appendVariant{name: fmt.Sprintf("Log.Append batch=%d", batch), batch: batch, start: func(key string) func(context.Context, [][]byte) error {
			l := redisstore.NewLog(rdb, key)
			b.st.trackLog(l)
			last := events.ZeroID
			return func(ctx context.Context, data [][]byte) error {
				ids, err := l.Append(ctx, last, data)
				if err != nil {
					return err
				}
				last = ids[len(ids)-1]
				return nil
			}
		}}
	}
	pairs := [][2]appendVariant{{xadd(1), casAppend(1)}, {xadd(64), casAppend(64)}}
	key := b.st.key("append")
	type tally struct {
		n int
		d time.Duration
	}
	got := map[string]*tally{}
	b.logf("log: append, %d rounds of %v per variant", b.o.appendRounds, b.o.appendSlice)
	for round := 0; round < b.o.appendRounds; round++ {
		for _, pair := range pairs {
			order := []appendVariant{pair[0], pair[1]}
			if round%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			for _, v := range order {
				n, d, err := b.appendSlice(ctx, key, v, payloads)
				if err != nil {
					return fmt.Errorf("%s: %w", v.name, err)
				}
				t := got[v.name]
				if t == nil {
					t = &tally{}
					got[v.name] = t
				}
				t.n += n
				t.d += d
			}
		}
	}
	s := rep.section("log.append", "append throughput: Log.Append (compare-and-append Lua) vs plain XADD of the same bytes, pipelined the same way")
	s.param("payload", fmt.Sprintf("3 member.synced : 1 assignment.computed (100 members, 128 shards), avg %d B", total/len(payloads)))
	s.param("slices", fmt.Sprintf("%d x %v per variant, order alternating", b.o.appendRounds, b.o.appendSlice))
	for _, pair := range pairs {
		base, v := got[pair[0].name], got[pair[1].name]
		s.baseline(pair[0].name, rate(base.n, base.d), "events/s")
		s.measured(pair[1].name, rate(v.n, v.d), "events/s", pair[0].name)
	}
	return nil
}

// appendSlice appends to a fresh stream for one slice and removes it afterwards.
func (b *bench) appendSlice(ctx context.Context, key string, v appendVariant, payloads [][]byte) (int, time.Duration, error) {
	if err := b.st.drop(ctx, key); err != nil {
		return 0, 0, err
	}
	defer b.st.drop(context.WithoutCancel(ctx), key)
	batches := make([][][]byte, len(payloads))
	for i := range batches {
		for j := 0; j < v.batch; j++ {
			batches[i] = append(batches[i], payloads[(i+j)%len(payloads)])
		}
	}
	step := v.start(key)
	n := 0
	start := time.Now()
	deadline := start.Add(b.o.appendSlice)
	for i := 0; time.Now().Before(deadline); i++ {
		if err := step(ctx, batches[i%len(batches)]); err != nil {
			return 0, 0, err
		}
		n += v.batch
	}
	return n, time.Since(start), nil
}

// logFold times the fold from memory: Apply of decoded records alone, decode
// alone, and projection.Fold over a MemLog (read, decode and Apply).
func (b *bench) logFold(ctx context.Context, rep *Report, ml *events.MemLog, counts map[string]int, genTime time.Duration) error {
	entries := ml.Entries()
	n := len(entries)
	var bytesTotal int
	for _, e := range entries {
		bytesTotal += len(e.Data)
	}
	b.logf("log: fold from memory, best of %d", b.o.reps)
	var applyTime, decodeTime, foldTime time.Duration
	for r := 0; r < b.o.reps; r++ {
		steps := []func() error{
			func() error {
				a, d, err := applyDecoded(entries)
				applyTime, decodeTime = best(applyTime, a), best(decodeTime, d)
				return err
			},
			func() error {
				runtime.GC()
				t0 := time.Now()
				folded, err := projection.Fold(ctx, ml, projection.New(), projection.FoldOptions{})
				foldTime = best(foldTime, time.Since(t0))
				if err == nil && folded != n {
					err = fmt.Errorf("Fold applied %d of %d events", folded, n)
				}
				return err
			},
		}
		if err := alternate(r, steps); err != nil {
			return err
		}
	}

	s := rep.section("log.fold", "fold from memory: Apply of decoded records vs decode, and projection.Fold over an events.MemLog")
	s.param("events", n)
	s.param("avgEventBytes", bytesTotal/n)
	s.param("groups", genGroups)
	s.param("mix", mixString(counts, n))
	s.param("reps", fmt.Sprintf("best of %d, alternating", b.o.reps))
	s.baseline("Apply, decoded records", rate(n, applyTime), "events/s")
	s.measured("events.Decode alone", rate(n, decodeTime), "events/s", "Apply, decoded records")
	s.measured("Fold(MemLog): read+decode+Apply", rate(n, foldTime), "events/s", "Apply, decoded records")
	s.info("log generation (encode + shadow fold)", rate(n, genTime), "events/s")
	return nil
}

// applyDecoded folds entries into a fresh State, decoding them 10,000 at a time
// outside the Apply timer; it returns the Apply and the decode time.
func applyDecoded(entries []events.Entry) (applyTime, decodeTime time.Duration, err error) {
	runtime.GC()
	st := projection.New()
	const chunk = 10000
	recs := make([]events.Record, 0, chunk)
	for i := 0; i < len(entries); i += chunk {
		recs = recs[:0]
		t0 := time.Now()
		for _, e := range entries[i:min(i+chunk, len(entries))] {
			rec, err := events.Decode(e.ID, e.Data)
			if err != nil {
				return 0, 0, err
			}
			recs = append(recs, rec)
		}
		t1 := time.Now()
		for _, rec := range recs {
			if err := st.Apply(rec); err != nil {
				return 0, 0, err
			}
		}
		applyTime += time.Since(t1)
		decodeTime += t1.Sub(t0)
	}
	return applyTime, decodeTime, nil
}

// best is the shorter of two durations, zero meaning "none yet".
func best(cur, d time.Duration) time.Duration {
	if cur == 0 || d < cur {
		return d
	}
	return cur
}

// statesEncodeTo says whether the state of every one of cs encodes to data.
func statesEncodeTo(data []byte, cs ...*coordinator.Coordinator) (bool, error) {
	encoded := make([][]byte, len(cs))
	for i, c := range cs {
		b, err := c.State().Encode()
		if err != nil {
			return false, err
		}
		encoded[i] = b
	}
	for _, b := range encoded {
		if !bytes.Equal(b, data) {
			return false, nil
		}
	}
	return true, nil
}

// bestStep is a step for alternate: it runs load, keeps what it loaded in
// *out and the best time so far in *t.
func bestStep[T any](out *T, t *time.Duration, load func() (T, time.Duration, error)) func() error {
	return func() error {
		v, d, err := load()
		*out, *t = v, best(*t, d)
		return err
	}
}

// gcStep is a step for alternate: a GC, then f timed, its best time so far
// kept in *t.
func gcStep(t *time.Duration, f func() error) func() error {
	return func() error {
		runtime.GC()
		t0 := time.Now()
		err := f()
		*t = best(*t, time.Since(t0))
		return err
	}
}

// alternate runs the steps in order on even repetitions and reversed on odd
// ones, so neither a measurement nor its baseline always runs first.
func alternate(rep int, steps []func() error) error {
	for i := range steps {
		j := i
		if rep%2 == 1 {
			j = len(steps) - 1 - i
		}
		if err := steps[j](); err != nil {
			return err
		}
	}
	return nil
}

func mixString(counts map[string]int, n int) string {
	types := make([]string, 0, len(counts))
	for t := range counts {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool { return counts[types[i]] > counts[types[j]] })
	var parts []string
	for _, t := range types {
		parts = append(parts, fmt.Sprintf("%s %.1f%%", t, 100*float64(counts[t])/float64(n)))
	}
	return strings.Join(parts, ", ")
}

// logReplay copies the generated log into a Redis stream with Log.Append in
// batches of 1000, then times projection.Fold over redisstore.Log against a raw XRANGE
// read of the same stream in pages of 2000 (the fold's page size).
func (b *bench) logReplay(ctx context.Context, rep *Report, ml *events.MemLog) (*redisstore.Log, *projection.State, error) {
	rdb := b.st.rdb
	key := b.st.key("events")
	snaps := redisstore.NewSnapshotStore(rdb, key)
	b.st.track(snaps.Key(), snaps.IDsKey())
	if err := b.st.drop(ctx, key); err != nil {
		return nil, nil, err
	}
	rlog := redisstore.NewLog(rdb, key)
	b.st.trackLog(rlog)
	entries := ml.Entries()
	n := len(entries)
	b.logf("log: writing %s events to Redis", formatNumber(float64(n)))
	last := events.ZeroID
	batch := make([][]byte, 0, 1000)
	t0 := time.Now()
	for i := 0; i < n; i += 1000 {
		batch = batch[:0]
		for _, e := range entries[i:min(i+1000, n)] {
			batch = append(batch, e.Data)
		}
		ids, err := rlog.Append(ctx, last, batch)
		if err != nil {
			return nil, nil, err
		}
		last = ids[len(ids)-1]
	}
	buildTime := time.Since(t0)

	b.logf("log: replay from Redis, best of %d", b.o.reps)
	var rawTime, foldTime time.Duration
	var st *projection.State
	bytesRead := 0
	for r := 0; r < b.o.reps; r++ {
		steps := []func() error{
			func() error {
				runtime.GC()
				t0 := time.Now()
				read, nbytes, err := rawRead(ctx, rdb, key)
				rawTime, bytesRead = best(rawTime, time.Since(t0)), nbytes
				if err == nil && read != n {
					err = fmt.Errorf("XRANGE read %d of %d entries", read, n)
				}
				return err
			},
			func() error {
				st = projection.New() // drops the previous repetition's state before the GC
				runtime.GC()
				t0 := time.Now()
				folded, err := projection.Fold(ctx, rlog, st, projection.FoldOptions{})
				foldTime = best(foldTime, time.Since(t0))
				if err == nil && folded != n {
					err = fmt.Errorf("Fold applied %d of %d events", folded, n)
				}
				return err
			},
		}
		if err := alternate(r, steps); err != nil {
			return nil, nil, err
		}
	}

	s := rep.section("log.replay", "replay from Redis: projection.Fold over redisstore.Log vs raw XRANGE of the same stream, pages of 2000")
	s.param("events", n)
	s.param("streamBytes", bytesRead)
	s.param("reps", fmt.Sprintf("best of %d, alternating", b.o.reps))
	s.baseline("raw XRANGE pages of 2000", rate(n, rawTime), "events/s")
	s.measured("Fold(redisstore.Log)", rate(n, foldTime), "events/s", "raw XRANGE pages of 2000")
	s.info("build: Log.Append batch=1000", rate(n, buildTime), "events/s")
	return rlog, st, nil
}

// rawRead reads the whole stream the way Log.Read does (XRANGE from an
// exclusive start, 2000 at a time) and touches every entry's bytes.
func rawRead(ctx context.Context, rdb *redis.Client, key string) (entries, nbytes int, err error) {
	after := "0-0"
	for {
		msgs, err := rdb.XRangeN(ctx, key, "("+after, "+", 2000).Result()
		if err != nil {
			return entries, nbytes, err
		}
		if len(msgs) == 0 {
			return entries, nbytes, nil
		}
		for _, m := range msgs {
			if v, ok := m.Values["e"].(string); ok {
				nbytes += len(v)
			}
		}
		entries += len(msgs)
		after = msgs[len(msgs)-1].ID
	}
}

// logStartup saves a snapshot of the folded state and times a coordinator's Load
// from the snapshot (empty tail) against Load of the whole log.
func (b *bench) logStartup(ctx context.Context, rep *Report, rlog *redisstore.Log, st *projection.State) error {
	rdb := b.st.rdb
	snaps := redisstore.NewSnapshotStore(rdb, rlog.Key())
	t0 := time.Now()
	data, err := st.Encode()
	if err != nil {
		return err
	}
	encodeTime := time.Since(t0)
	t0 = time.Now()
	if err := snaps.Save(ctx, st.LastID(), data, redisstore.DefaultSnapshotKeep); err != nil {
		return err
	}
	saveTime := time.Since(t0)
	lastID := st.LastID()

	b.logf("log: start-up, best of %d", b.o.reps)
	load := func(fromSnapshot bool) (*coordinator.Coordinator, time.Duration, error) {
		runtime.GC()
		c := coordinator.New(coordinator.Config{Logger: zerolog.Nop(), SnapshotEvery: -1, DisableProvisioning: true}, rlog, nil, snaps, nil)
		t0 := time.Now()
		err := c.Load(ctx, fromSnapshot)
		return c, time.Since(t0), err
	}
	var fullTime, snapTime time.Duration
	var applied int64
	for r := 0; r < b.o.reps; r++ {
		var full, fromSnap *coordinator.Coordinator
		steps := []func() error{
			bestStep(&full, &fullTime, func() (*coordinator.Coordinator, time.Duration, error) { return load(false) }),
			bestStep(&fromSnap, &snapTime, func() (*coordinator.Coordinator, time.Duration, error) { return load(true) }),
		}
		if err := alternate(r, steps); err != nil {
			return err
		}
		if r > 0 {
			continue
		}
		applied = full.State().Applied()
		if got := fromSnap.State().Applied(); got != 0 {
			return fmt.Errorf("Load from the snapshot folded %d events; the tail should be empty", got)
		}
		same, err := statesEncodeTo(data, full, fromSnap)
		if err != nil {
			return err
		}
		if full.State().LastID() != lastID || !same {
			return fmt.Errorf("Load of the whole log, Load from the snapshot and the folded state disagree (last ids %s, %s, %s)", full.State().LastID(), fromSnap.State().LastID(), lastID)
		}
	}

	s := rep.section("log.startup", "start-up: Coordinator.Load from the snapshot with an empty tail vs Load of the whole log")
	s.param("events", applied)
	s.param("snapshotBytes", len(data))
	s.param("statesEqual", "whole-log Load, snapshot Load and the replayed state encode to the same bytes")
	s.param("reps", fmt.Sprintf("best of %d, alternating", b.o.reps))
	s.baseline("Load(ctx, false): whole log", ms(fullTime), "ms")
	s.measured("Load(ctx, true): snapshot + empty tail", ms(snapTime), "ms", "Load(ctx, false): whole log")
	s.info("snapshot size", float64(len(data)), "bytes")
	s.info("state.Encode", ms(encodeTime), "ms")
	s.info("SnapshotStore.Save", ms(saveTime), "ms")
	return nil
}
