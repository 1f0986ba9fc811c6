package events_test

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/events"
)

// TestEncodeMatchesReflect: the hand-written envelope around the pooled
// encoder's payload is byte for byte what two msgpack.Marshal calls wrote
// (events.EncodeReflect), for every event type and metas that cross every
// string length boundary.
func TestEncodeMatchesReflect(t *testing.T) {
	metas := map[string]events.Meta{
		"sample":      sampleMeta,
		"empty":       {},
		"global":      {Time: sampleMeta.Time, Actor: "coordinator"},
		"before 1970": {Time: time.Date(1960, 1, 1, 0, 0, 0, 1, time.UTC), Actor: "a"},
		"far future":  {Time: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)},
		"continues":   {StreamPrefix: "p", ConsumerGroup: "g", Time: sampleMeta.Time, Actor: "a", RequestID: "r", Continues: true},
	}
	for _, n := range []int{31, 32, 255, 256, 65535, 65536} {
		s := strings.Repeat("x", n)
		metas[fmt.Sprintf("strings of %d", n)] = events.Meta{StreamPrefix: s, ConsumerGroup: s[1:], Time: sampleMeta.Time, Actor: s, RequestID: s[:n-1]}
	}
	evs := sampleEvents()
	for name, ev := range sampleVariants() {
		evs[name] = ev
	}
	for _, name := range registeredTypes() {
		zero, _ := events.New(name)
		evs["zero "+name] = zero
	}
	for mname, m := range metas {
		for ename, ev := range evs {
			got, err := events.Encode(m, ev)
			if err != nil {
				t.Fatalf("%s, %s: Encode: %v", mname, ename, err)
			}
			want, err := events.EncodeReflect(m, ev)
			if err != nil {
				t.Fatalf("%s, %s: EncodeReflect: %v", mname, ename, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s, %s: Encode differs from the reflection encoding:\n got %x\nwant %x", mname, ename, got, want)
			}
			if rec, err := events.Decode("1-0", got); err != nil || rec.Continues != m.Continues {
				t.Errorf("%s, %s: decoded Continues %v (%v), want %v", mname, ename, rec.Continues, err, m.Continues)
			}
		}
	}
}

func TestAppendIntMatchesEncodeInt(t *testing.T) {
	var values []int64
	for _, edge := range []int64{0, 1 << 7, 1 << 8, 1 << 15, 1 << 16, 1 << 31, 1 << 32, 32, 33} {
		values = append(values, edge-1, edge, edge+1, -edge-1, -edge, -edge+1)
	}
	values = append(values, math.MaxInt64, math.MinInt64, math.MinInt64+1)
	for _, n := range values {
		var buf bytes.Buffer
		if err := msgpack.NewEncoder(&buf).EncodeInt(n); err != nil {
			t.Fatal(err)
		}
		if got := events.AppendInt(nil, n); !bytes.Equal(got, buf.Bytes()) {
			t.Errorf("AppendInt(%d) = %x, EncodeInt writes %x", n, got, buf.Bytes())
		}
	}
}

// TestEncodeConcurrently: pooled encoders are never shared: goroutines encoding
// at once each get their own bytes, which later encodes do not overwrite.
func TestEncodeConcurrently(t *testing.T) {
	samples := sampleEvents()
	names := registeredTypes()
	want := map[string][]byte{}
	for _, name := range names {
		want[name] = MustEncode(t, sampleMeta, samples[name])
	}
	var wg sync.WaitGroup
	errs := make(chan string, len(names)*8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var kept [][]byte
			for i := 0; i < 50; i++ {
				for _, name := range names {
					got, err := events.Encode(sampleMeta, samples[name])
					if err != nil {
						errs <- err.Error()
						return
					}
					kept = append(kept, got)
				}
			}
			for i, got := range kept {
				if name := names[i%len(names)]; !bytes.Equal(got, want[name]) {
					errs <- fmt.Sprintf("%s encoded as %x, want %x", name, got, want[name])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// BenchmarkEncode encodes a realistic log with the pooled encoder and the
// hand-written envelope (pooled) and as before, with two msgpack.Marshal
// calls (reflect), in the same run.
func BenchmarkEncode(b *testing.B) {
	var recs []events.Record
	for _, data := range benchLog(b, 4096) {
		rec, err := events.Decode("1-0", data)
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, rec)
	}
	for _, bc := range []struct {
		name   string
		encode func(events.Meta, events.Event) ([]byte, error)
	}{
		{"reflect", events.EncodeReflect},
		{"pooled", events.Encode},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				rec := recs[i%len(recs)]
				if _, err := bc.encode(rec.Meta, rec.Event); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ev/s")
		})
	}
}
