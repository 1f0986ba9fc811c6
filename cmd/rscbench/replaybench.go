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

// replayDistance is how far after its nearest kept snapshot a replayed point
// lies in logReplayPoint.
const replayDistance = 1000

// logSnapshots measures what the state costs as the log grows: the snapshot
// of the state after a tenth of the log against the snapshot after all of it
// (state, not history: flat), and the replay endpoint's fold of a point
// replayDistance entries after a kept snapshot, on the whole log and on a log
// holding only its first tenth (its cost depends on the distance to the
// snapshot, not on the log's length).
func (b *bench) logSnapshots(ctx context.Context, rep *Report, ml *events.MemLog, full *redisstore.Log) error {
	entries := ml.Entries()
	n := len(entries)
	tenth := n / 10
	if tenth <= replayDistance+1 {
		b.logf("log: the log is too short for the snapshot and replay-point sections")
		return nil
	}
	encodeAt := func(id string) ([]byte, error) {
		st := projection.New()
		if _, err := projection.Fold(ctx, ml, st, projection.FoldOptions{Until: id}); err != nil {
			return nil, err
		}
		return st.Encode()
	}
	small, err := encodeAt(entries[tenth-1].ID)
	if err != nil {
		return err
	}
	large, err := encodeAt(entries[n-1].ID)
	if err != nil {
		return err
	}

	// The first tenth of the log as a log of its own.
	rdb := b.st.rdb
	key := b.st.key("events-tenth")
	short := redisstore.NewLog(rdb, key)
	b.st.trackLog(short)
	last := events.ZeroID
	for i := 0; i < tenth; i += 1000 {
		var batch [][]byte
		for _, e := range entries[i:min(i+1000, tenth)] {
			batch = append(batch, e.Data)
		}
		ids, err := short.Append(ctx, last, batch)
		if err != nil {
			return err
		}
		last = ids[len(ids)-1]
	}
	// Each log keeps one snapshot replayDistance+reps entries before its
	// end; the replayed points lie replayDistance after it (one point per
	// repetition, so the answer cache never helps).
	type target struct {
		log    *redisstore.Log
		c      *coordinator.Coordinator
		points []string
	}
	setup := func(l *redisstore.Log, name string) (target, error) {
		ids, err := l.Read(ctx, events.ZeroID, 0)
		if err != nil {
			return target{}, err
		}
		snapAt := len(ids) - replayDistance - b.o.reps - 1
		st := projection.New()
		if _, err := projection.Fold(ctx, l, st, projection.FoldOptions{Until: ids[snapAt].ID}); err != nil {
			return target{}, err
		}
		data, err := st.Encode()
		if err != nil {
			return target{}, err
		}
		snaps := redisstore.NewSnapshotStore(rdb, b.st.key(name+"-snapshots"))
		b.st.track(snaps.Key(), snaps.IDsKey())
		if err := snaps.Save(ctx, ids[snapAt].ID, data, redisstore.DefaultSnapshotKeep); err != nil {
			return target{}, err
		}
		c := coordinator.New(coordinator.Config{Logger: zerolog.Nop(), SnapshotEvery: -1, DisableProvisioning: true}, l, nil, snaps, nil)
		tg := target{log: l, c: c}
		for r := 0; r < b.o.reps; r++ {
			tg.points = append(tg.points, ids[snapAt+replayDistance+r].ID)
		}
		return tg, nil
	}
	long, err := setup(full, "replay-long")
	if err != nil {
		return err
	}
	shortT, err := setup(short, "replay-short")
	if err != nil {
		return err
	}
	b.logf("log: replay of a point %d entries after a snapshot, logs of %s and %s entries, best of %d", replayDistance, formatNumber(float64(n)), formatNumber(float64(tenth)), b.o.reps)
	var longTime, shortTime, zeroTime time.Duration
	for r := 0; r < b.o.reps; r++ {
		steps := []func() error{
			gcStep(&longTime, func() error {
				_, err := long.c.StateAt(ctx, long.points[r])
				return err
			}),
			gcStep(&shortTime, func() error {
				_, err := shortT.c.StateAt(ctx, shortT.points[r])
				return err
			}),
		}
		if err := alternate(r, steps); err != nil {
			return err
		}
	}
	// What a replay cost before it started from a snapshot: a fold from zero.
	runtime.GC()
	t0 := time.Now()
	if _, err := projection.Fold(ctx, full, projection.New(), projection.FoldOptions{Until: long.points[0]}); err != nil {
		return err
	}
	zeroTime = time.Since(t0)

	s := rep.section("log.snapshot", "snapshot size: the state after a tenth of the log vs after all of it (state, not history)")
	s.param("events", n)
	s.baseline(fmt.Sprintf("snapshot after %s events", formatNumber(float64(tenth))), float64(len(small)), "bytes")
	s.measured(fmt.Sprintf("snapshot after %s events", formatNumber(float64(n))), float64(len(large)), "bytes", fmt.Sprintf("snapshot after %s events", formatNumber(float64(tenth))))

	s = rep.section("log.replaypoint", fmt.Sprintf("the replay endpoint's state at a point %d entries after a kept snapshot: log of %s vs log of %s entries", replayDistance, formatNumber(float64(n)), formatNumber(float64(tenth))))
	s.param("reps", fmt.Sprintf("best of %d, alternating, a new point each time", b.o.reps))
	s.baseline(fmt.Sprintf("StateAt, log of %s", formatNumber(float64(tenth))), ms(shortTime), "ms")
	s.measured(fmt.Sprintf("StateAt, log of %s", formatNumber(float64(n))), ms(longTime), "ms", fmt.Sprintf("StateAt, log of %s", formatNumber(float64(tenth))))
	s.info(fmt.Sprintf("fold from zero to the same point, log of %s (earlier builds)", formatNumber(float64(n))), ms(zeroTime), "ms")
	return nil
}
