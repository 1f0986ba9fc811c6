package benchratio

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// Side is one way of doing the work.
type Side struct {
	// Name names the side in the metrics ("raw", "sdk", ...).
	Name string
	// Op does operation i (0 ≤ i < b.N) of the side.
	Op func(i int) error
	// Sync, when set, ends a slice: it waits for what the slice's operations
	// started (an asynchronous publisher's results); its time counts.
	Sync func() error
	// Warm, when set, runs once before timing (scripts loaded, routing
	// cached, connections open).
	Warm func() error
}

// Config sizes a run.
type Config struct {
	// Msgs is the number of messages one operation handles (throughputs are
	// in msgs/s).
	Msgs int
	// Slice is the number of operations of one side in a row.
	Slice int
}

// Run runs b.N operations of the baseline and of every candidate, in
// alternating slices, and reports "<side>-msgs/s" for every side and
// "<candidate>/<baseline>" (throughput ratio from the totals) and
// "<candidate>/<baseline>-median" (the median of the slices' ratios) for
// every candidate.
func Run(b *testing.B, cfg Config, baseline Side, candidates ...Side) {
	b.Helper()
	sides := append([]Side{baseline}, candidates...)
	for _, s := range sides {
		if s.Warm != nil {
			if err := s.Warm(); err != nil {
				b.Fatalf("%s: warm-up: %v", s.Name, err)
			}
		}
	}
	slice := max(cfg.Slice, 1)
	totals := make([]time.Duration, len(sides))
	ratios := make([][]float64, len(candidates))
	b.ResetTimer()
	for from, round := 0, 0; from < b.N; from, round = from+slice, round+1 {
		to := min(from+slice, b.N)
		took := make([]time.Duration, len(sides))
		for k := range sides {
			j := (k + round) % len(sides) // rotate which side goes first
			s := sides[j]
			t0 := time.Now()
			for i := from; i < to; i++ {
				if err := s.Op(i); err != nil {
					b.Fatalf("%s: operation %d: %v", s.Name, i, err)
				}
			}
			if s.Sync != nil {
				if err := s.Sync(); err != nil {
					b.Fatalf("%s: %v", s.Name, err)
				}
			}
			took[j] = time.Since(t0)
			totals[j] += took[j]
		}
		for c := range candidates {
			if took[c+1] > 0 {
				ratios[c] = append(ratios[c], took[0].Seconds()/took[c+1].Seconds())
			}
		}
	}
	b.StopTimer()
	msgs := float64(b.N * max(cfg.Msgs, 1))
	for j, s := range sides {
		if totals[j] > 0 {
			b.ReportMetric(msgs/totals[j].Seconds(), s.Name+"-msgs/s")
		}
	}
	for c, s := range candidates {
		if totals[c+1] <= 0 || totals[0] <= 0 {
			continue
		}
		ratio := totals[0].Seconds() / totals[c+1].Seconds()
		med := Median(ratios[c])
		b.ReportMetric(ratio, s.Name+"/"+baseline.Name)
		b.ReportMetric(med, s.Name+"/"+baseline.Name+"-median")
		if testing.Verbose() {
			fmt.Printf("%s: %s %.0f msgs/s, %s %.0f msgs/s, %s/%s %.3f (median of %d slices %.3f)\n", b.Name(),
				s.Name, msgs/totals[c+1].Seconds(), baseline.Name, msgs/totals[0].Seconds(), s.Name, baseline.Name, ratio, len(ratios[c]), med)
		}
	}
}

// Median returns the median of v (0 for none); v is not changed.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
