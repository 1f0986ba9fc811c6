//go:build unix

package main

import (
	"context"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// foldBenchEvents is the size of the log BenchmarkLogFold folds: the one
// `rscbench log --events 300000` generates (seed 1).
const foldBenchEvents = 300_000

var foldBench struct {
	once sync.Once
	ml   *events.MemLog
	recs []events.Record
	err  error
}

// foldBenchLog generates the benchmark's log and decodes it once per process.
func foldBenchLog(b *testing.B) (*events.MemLog, []events.Record) {
	b.Helper()
	foldBench.once.Do(func() {
		ml, _, err := generateLog(context.Background(), foldBenchEvents, 1)
		if err != nil {
			foldBench.err = err
			return
		}
		entries := ml.Entries()
		recs := make([]events.Record, len(entries))
		for i, e := range entries {
			if recs[i], err = events.Decode(e.ID, e.Data); err != nil {
				foldBench.err = err
				return
			}
		}
		foldBench.ml, foldBench.recs = ml, recs
	})
	if foldBench.err != nil {
		b.Fatal(foldBench.err)
	}
	return foldBench.ml, foldBench.recs
}

// BenchmarkLogFold times the three rows of the log.fold section on the same
// generated log, per event: "apply" is State.Apply of records already decoded
// into a fresh State, "decode" events.Decode alone, and "fold" projection.Fold
// over the MemLog (read, decode and Apply). Each iteration folds the whole log
// after a GC outside the timer, as logFold does. ns/event is wall time;
// cpu-ns/event the process's CPU time (every goroutine's, the GC's too) over
// the timed part, which a machine busy with other work changes less.
func BenchmarkLogFold(b *testing.B) {
	ml, recs := foldBenchLog(b)
	entries := ml.Entries()
	n := len(entries)
	// run times each of b.N calls of f after a GC and setup.
	run := func(b *testing.B, setup func(), f func()) {
		b.ReportAllocs()
		var cpu time.Duration
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			runtime.GC()
			setup()
			c0 := cpuTime(b)
			b.StartTimer()
			f()
			b.StopTimer()
			cpu += cpuTime(b) - c0
		}
		events := float64(b.N * n)
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
		b.ReportMetric(float64(cpu.Nanoseconds())/events, "cpu-ns/event")
	}
	b.Run("apply", func(b *testing.B) {
		var st *projection.State
		run(b, func() { st = projection.New() }, func() {
			for _, rec := range recs {
				if err := st.Apply(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("decode", func(b *testing.B) {
		out := make([]events.Record, n)
		run(b, func() { clear(out) }, func() {
			for j, e := range entries {
				rec, err := events.Decode(e.ID, e.Data)
				if err != nil {
					b.Fatal(err)
				}
				out[j] = rec
			}
		})
	})
	b.Run("fold", func(b *testing.B) {
		ctx := context.Background()
		var st *projection.State
		run(b, func() { st = projection.New() }, func() {
			folded, err := projection.Fold(ctx, ml, st, projection.FoldOptions{})
			if err != nil {
				b.Fatal(err)
			}
			if folded != n {
				b.Fatalf("Fold applied %d of %d events", folded, n)
			}
		})
	})
}

// cpuTime is the CPU time the process has used (user and system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
