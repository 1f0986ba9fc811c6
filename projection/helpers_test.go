package projection_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

var (
	orders   = projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "billing"}
	payments = projection.GroupKey{StreamPrefix: "payments", ConsumerGroup: "ledger"}
)

// t0 is the decision time of the first record a recorder writes.
var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// recorder hands out records with increasing ids "<n>-0" and decision times
// t0 + n seconds, as the coordinator would have appended them.
type recorder struct{ n int }

// rec returns the next record for group k.
func (r *recorder) rec(k projection.GroupKey, ev events.Event) events.Record {
	r.n++
	return events.Record{
		ID: fmt.Sprintf("%d-0", r.n), Type: ev.EventType(), Schema: events.SchemaVersion, Event: ev,
		Meta: events.Meta{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, Time: at(r.n), Actor: "tester", RequestID: fmt.Sprintf("req-%d", r.n)},
	}
}

// at is the decision time of the n-th record.
func at(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

// MustApply applies records in order or fails the test.
func MustApply(tb testing.TB, s *projection.State, recs ...events.Record) {
	tb.Helper()
	for _, rec := range recs {
		if err := s.Apply(rec); err != nil {
			tb.Fatalf("Apply(%s %s): %v", rec.ID, rec.Type, err)
		}
	}
}

// MustGroup returns a copy of the group or fails the test.
func MustGroup(tb testing.TB, s *projection.State, k projection.GroupKey) *projection.Group {
	tb.Helper()
	g, ok := s.Group(k)
	if !ok {
		tb.Fatalf("group %v does not exist", k)
	}
	return g
}

// MustEncodeState returns the snapshot bytes of a state or fails the test.
func MustEncodeState(tb testing.TB, s *projection.State) []byte {
	tb.Helper()
	data, err := s.Encode()
	if err != nil {
		tb.Fatalf("State.Encode: %v", err)
	}
	return data
}

// canonical decodes msgpack bytes into plain maps, slices and scalars, so two
// encodings of equal values compare equal with reflect.DeepEqual whatever order
// their map keys were written in.
func canonical(tb testing.TB, data []byte) any {
	tb.Helper()
	var v any
	if err := msgpack.Unmarshal(data, &v); err != nil {
		tb.Fatalf("decode msgpack for comparison: %v", err)
	}
	return v
}

// MustCanonicalState is the state's snapshot in comparable form.
func MustCanonicalState(tb testing.TB, s *projection.State) any {
	tb.Helper()
	return canonical(tb, MustEncodeState(tb, s))
}

// MustCanonicalGroup is a group's clone, encoded with events.Marshal, in
// comparable form (nil for a missing group).
func MustCanonicalGroup(tb testing.TB, g *projection.Group) any {
	tb.Helper()
	if g == nil {
		return nil
	}
	data, err := events.Marshal(g.Clone())
	if err != nil {
		tb.Fatalf("Marshal group %v: %v", g.Key, err)
	}
	return canonical(tb, data)
}

// assertSameState fails unless two states have equal content; it reports
// separately when only the bytes of State.Encode differ, which breaks the
// promise that equal states encode to equal bytes.
func assertSameState(tb testing.TB, what string, got, want *projection.State) {
	tb.Helper()
	gotBytes, wantBytes := MustEncodeState(tb, got), MustEncodeState(tb, want)
	if !reflect.DeepEqual(canonical(tb, gotBytes), canonical(tb, wantBytes)) {
		tb.Fatalf("%s: states differ\n got %v\nwant %v", what, canonical(tb, gotBytes), canonical(tb, wantBytes))
	}
	if !bytes.Equal(gotBytes, wantBytes) {
		tb.Errorf("%s: states are equal but State.Encode bytes differ (%d vs %d bytes): map keys are not written in a fixed order", what, len(gotBytes), len(wantBytes))
	}
}

// MustDecodeAll decodes log entries or fails the test.
func MustDecodeAll(tb testing.TB, entries []events.Entry) []events.Record {
	tb.Helper()
	out := make([]events.Record, 0, len(entries))
	for _, e := range entries {
		rec, err := events.Decode(e.ID, e.Data)
		if err != nil {
			tb.Fatalf("decode %s: %v", e.ID, err)
		}
		out = append(out, rec)
	}
	return out
}

// MustFold folds records into a fresh state.
func MustFold(tb testing.TB, recs []events.Record) *projection.State {
	tb.Helper()
	s := projection.New()
	MustApply(tb, s, recs...)
	return s
}

// MustReadEntries reads every entry of a log.
func MustReadEntries(tb testing.TB, l events.Log) []events.Entry {
	tb.Helper()
	entries, err := l.Read(context.Background(), events.ZeroID, 0)
	if err != nil {
		tb.Fatalf("read log: %v", err)
	}
	return entries
}

// MustReadLogFile reads a log exported as JSON lines ({"id", "data": base64}).
func MustReadLogFile(tb testing.TB, path string) []events.Entry {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var out []events.Entry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var line struct {
			ID   string `json:"id"`
			Data string `json:"data"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			tb.Fatalf("%s:%d: %v", path, n, err)
		}
		data, err := base64.StdEncoding.DecodeString(line.Data)
		if err != nil {
			tb.Fatalf("%s:%d: %v", path, n, err)
		}
		out = append(out, events.Entry{ID: line.ID, Data: data})
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}
