package coordinator

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// shardsAt is a read of n shards at elapsed seconds, each shard having had
// perSecond entries added per second since 0.
func shardsAt(n int, elapsed float64, perSecond float64) []events.ShardSample {
	out := make([]events.ShardSample, n)
	for i := range out {
		out[i] = events.ShardSample{ShardIndex: i, Exists: true, EntriesAdded: int64(math.Round(elapsed * perSecond)), Lag: 1}
	}
	return out
}

// TestLoadSamplesStayBounded: however long the window and however often the
// autoscaler samples, a group keeps at most maxLoadSamples samples (64 per
// window and two more), and the load over the window is still the rate the
// shards grew at, complete once a whole window was seen.
func TestLoadSamplesStayBounded(t *testing.T) {
	for _, c := range []struct {
		window, every time.Duration
		samples       int
	}{
		{7 * 24 * time.Hour, time.Minute, 3 * 7 * 24 * 60}, // three weeks of a week's window
		{time.Hour, time.Second, 3 * 3600},
		{60 * time.Second, time.Second, 600},
		{10 * time.Second, 3 * time.Second, 100}, // sampled less often than a bucket
	} {
		t.Run(fmt.Sprintf("window=%s/every=%s", c.window, c.every), func(t *testing.T) {
			e := newEvidenceTable(true)
			k := projection.GroupKey{StreamPrefix: "p", ConsumerGroup: "g"}
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			const shards, perSecond = 16, 5.0
			most := 0
			for i := 0; i < c.samples; i++ {
				elapsed := time.Duration(i) * c.every
				l := e.addLoadSample(k, t0.Add(elapsed), shardsAt(shards, elapsed.Seconds(), perSecond), nil, c.window)
				most = max(most, e.LoadSamples(k))
				if complete := elapsed >= c.window; l.Complete != complete {
					t.Fatalf("after %s: complete %v, want %v", elapsed, l.Complete, complete)
				}
				if l.Complete {
					if want := shards * perSecond; math.Abs(l.Rate-want) > 0.01*want {
						t.Fatalf("after %s: rate %.3f over %s, want %.1f", elapsed, l.Rate, l.Window, want)
					}
					if l.Window < c.window || l.Window > c.window+c.window/loadBuckets+c.every {
						t.Fatalf("after %s: measured over %s, want between the window and a bucket more", elapsed, l.Window)
					}
				}
			}
			if most > maxLoadSamples {
				t.Fatalf("kept up to %d samples, want at most %d", most, maxLoadSamples)
			}
		})
	}
}

// TestLoadSamplesBoundedWhenTheWindowGrows: samples kept for a short window
// and then a long one stay within the bound.
func TestLoadSamplesBoundedWhenTheWindowGrows(t *testing.T) {
	e := newEvidenceTable(true)
	k := projection.GroupKey{StreamPrefix: "p", ConsumerGroup: "g"}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := time.Duration(0)
	for _, window := range []time.Duration{time.Minute, time.Hour, time.Minute, 24 * time.Hour} {
		for i := 0; i < 2000; i++ {
			at += time.Second
			e.addLoadSample(k, t0.Add(at), shardsAt(4, at.Seconds(), 1), nil, window)
			if n := e.LoadSamples(k); n > maxLoadSamples {
				t.Fatalf("window %s, after %s: %d samples kept, want at most %d", window, at, n, maxLoadSamples)
			}
		}
	}
}
