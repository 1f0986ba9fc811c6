package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
)

// trimTail is how many entries the trimmed log keeps: those after the older of
// two kept snapshots with --snapshot-every 10000 (a tenth of a smaller log).
func trimTail(n int) int { return min(10000, max(1, n/10)) }

// logTrim copies the replayed log (COPY) and trims the copy as --trim-log does
// behind a snapshot trimTail entries before the end, then times a
// coordinator's start-up from the same snapshot (at the end, empty tail) on the
// trimmed log against the untrimmed one, alternating.
func (b *bench) logTrim(ctx context.Context, rep *Report, rlog *redisstore.Log, st *projection.State) error {
	rdb := b.st.rdb
	data, err := st.Encode()
	if err != nil {
		return err
	}
	key := b.st.key("events-trimmed")
	tlog := redisstore.NewLog(rdb, key)
	b.st.trackLog(tlog)
	tsnaps := redisstore.NewSnapshotStore(rdb, key)
	b.st.track(tlog.ArchiveKey(), tsnaps.Key(), tsnaps.IDsKey())
	defer func() {
		if keys, err := tsnaps.Keys(context.WithoutCancel(ctx)); err == nil {
			_ = b.st.drop(context.WithoutCancel(ctx), append(keys, key, tlog.ArchiveKey())...)
		}
	}()
	if err := b.st.drop(ctx, key, tlog.ArchiveKey()); err != nil {
		return err
	}
	if err := rdb.Copy(ctx, rlog.Key(), key, rdb.Options().DB, true).Err(); err != nil {
		return fmt.Errorf("COPY the log: %w", err)
	}
	n, err := rlog.Len(ctx)
	if err != nil {
		return err
	}
	tail := trimTail(int(n))
	msgs, err := rdb.XRevRangeN(ctx, key, "+", "-", int64(tail)).Result()
	if err != nil || len(msgs) == 0 {
		return fmt.Errorf("find the trim point: %d entries, %v", len(msgs), err)
	}
	trimAt := msgs[len(msgs)-1].ID
	b.logf("log: trimming a copy of %s events behind entry %s (%d kept)", formatNumber(float64(n)), trimAt, tail)
	t0 := time.Now()
	archived, removed, err := tlog.TrimBefore(ctx, trimAt, func(e events.Entry) bool {
		rec, err := events.Decode(e.ID, e.Data)
		return err != nil || coordinator.ArchivedType(rec.Type)
	})
	if err != nil {
		return err
	}
	trimTime := time.Since(t0)
	if err := tsnaps.Save(ctx, st.LastID(), data, redisstore.DefaultSnapshotKeep); err != nil {
		return err
	}
	untrimmedBytes, err := rdb.MemoryUsage(ctx, rlog.Key(), 0).Result()
	if err != nil {
		return err
	}
	trimmedBytes, err := rdb.MemoryUsage(ctx, key, 0).Result()
	if err != nil {
		return err
	}
	archiveBytes, err := rdb.MemoryUsage(ctx, tlog.ArchiveKey(), 0).Result()
	if err != nil {
		return err
	}

	snaps := redisstore.NewSnapshotStore(rdb, rlog.Key())
	load := func(l *redisstore.Log, s *redisstore.SnapshotStore) (*coordinator.Coordinator, time.Duration, error) {
		runtime.GC()
		c := coordinator.New(coordinator.Config{Logger: zerolog.Nop(), SnapshotEvery: -1, DisableProvisioning: true, Trimmer: l}, l, nil, s, nil)
		t0 := time.Now()
		err := c.Load(ctx, true)
		return c, time.Since(t0), err
	}
	b.logf("log: start-up from the snapshot, trimmed vs untrimmed log, best of %d", b.o.reps)
	var fullTime, trimmedTime time.Duration
	for r := 0; r < b.o.reps; r++ {
		var full, trimmed *coordinator.Coordinator
		steps := []func() error{
			bestStep(&full, &fullTime, func() (*coordinator.Coordinator, time.Duration, error) { return load(rlog, snaps) }),
			bestStep(&trimmed, &trimmedTime, func() (*coordinator.Coordinator, time.Duration, error) { return load(tlog, tsnaps) }),
		}
		if err := alternate(r, steps); err != nil {
			return err
		}
		if r > 0 {
			continue
		}
		same, err := statesEncodeTo(data, full, trimmed)
		if err != nil {
			return err
		}
		if !same {
			return fmt.Errorf("start-up on the trimmed log, on the untrimmed log and the replayed state disagree")
		}
	}

	s := rep.section("log.trim", "start-up from the snapshot with the log trimmed (--trim-log) vs untrimmed, and what the trim keeps")
	s.param("events", n)
	s.param("keptAfterTrim", fmt.Sprintf("%d entries (behind the older of two snapshots %d apart)", n-removed, tail))
	s.param("reps", fmt.Sprintf("best of %d, alternating", b.o.reps))
	s.baseline("Load(ctx, true): snapshot + empty tail, untrimmed log", ms(fullTime), "ms")
	s.measured("Load(ctx, true): snapshot + empty tail, trimmed log", ms(trimmedTime), "ms", "Load(ctx, true): snapshot + empty tail, untrimmed log")
	s.info("log memory, untrimmed", float64(untrimmedBytes), "bytes")
	s.info("log memory, trimmed", float64(trimmedBytes), "bytes")
	s.info("archive memory", float64(archiveBytes), "bytes")
	s.info("entries archived (resharding and admin)", float64(archived), "entries")
	s.info("entries removed", float64(removed), "entries")
	s.info("TrimBefore (copy to the archive + XTRIM)", ms(trimTime), "ms")
	return nil
}
