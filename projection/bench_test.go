package projection_test

import (
	"testing"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

const benchEvents = 100_000

// BenchmarkFold folds a 100k-event log held in memory into a fresh state:
// "decode+apply" is a replay from a MemLog (what a restart without a snapshot
// does), "apply" the fold alone on records already decoded.
func BenchmarkFold(b *testing.B) {
	l, _ := MustGeneratedLog(b, 99, benchEvents)
	entries := l.Entries()
	recs := MustDecodeAll(b, entries)

	b.Run("decode+apply", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s := projection.New()
			for _, e := range entries {
				rec, err := events.Decode(e.ID, e.Data)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Apply(rec); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N*len(entries))/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("apply", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s := projection.New()
			for _, rec := range recs {
				if err := s.Apply(rec); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.N*len(recs))/b.Elapsed().Seconds(), "events/s")
	})
}
