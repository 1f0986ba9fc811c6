package events_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/rscoord/rsc/events"
)

var update = flag.Bool("update", false, "rewrite events/testdata/golden from sampleEvents")

const goldenDir = "testdata/golden"

// stableEncodings is how often a sample is encoded to check that its bytes do
// not depend on map iteration order.
const stableEncodings = 20

func goldenPath(typ string) string { return filepath.Join(goldenDir, typ+".msgpack") }

// TestGolden pins the wire format: every event type has a golden entry, written
// with sampleMeta and its sample, that must keep decoding to that sample and
// that encoding the sample must reproduce byte for byte. A failing decode means
// a field was renamed or re-typed and old logs would no longer fold; a failing
// encode alone means new entries would be written differently.
//
// go test ./events -run TestGolden -update rewrites the files; review the diff:
// an existing file should never need to change.
func TestGolden(t *testing.T) {
	samples := sampleEvents()
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, typ := range registeredTypes() {
		t.Run(typ, func(t *testing.T) {
			sample := samples[typ]
			if sample == nil {
				t.Fatalf("no sample for %q in sampleEvents", typ)
			}
			encoded := MustEncode(t, sampleMeta, sample)
			if *update {
				for i := 1; i < stableEncodings; i++ {
					if again := MustEncode(t, sampleMeta, sample); !bytes.Equal(again, encoded) {
						t.Fatalf("not updating %s: encoding the sample is not deterministic (attempt %d differs)", goldenPath(typ), i)
					}
				}
				if err := os.WriteFile(goldenPath(typ), encoded, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			golden, err := os.ReadFile(goldenPath(typ))
			if err != nil {
				t.Fatalf("read golden entry (new event type? run with -update): %v", err)
			}

			rec, err := events.Decode("1714564800123-0", golden)
			if err != nil {
				t.Fatalf("golden entry no longer decodes: %v", err)
			}
			if rec.Type != typ || rec.Schema != events.SchemaVersion {
				t.Errorf("golden entry decodes as type %q schema %d, want %q schema %d", rec.Type, rec.Schema, typ, events.SchemaVersion)
			}
			assertMetaEqual(t, rec.Meta, sampleMeta)
			if !reflect.DeepEqual(rec.Event, sample) {
				t.Errorf("golden entry decodes to\n %#v\nwant\n %#v", rec.Event, sample)
			}

			for i := 0; i < stableEncodings; i++ {
				if got := MustEncode(t, sampleMeta, sample); !bytes.Equal(got, golden) {
					t.Fatalf("encoding the sample (attempt %d) differs from %s:\n got %x\nwant %x", i, goldenPath(typ), got, golden)
				}
			}
		})
	}
}

// TestGoldenVariants is TestGolden for sampleVariants: fields added to a type
// after its golden file was written.
func TestGoldenVariants(t *testing.T) {
	dir := filepath.Join(goldenDir, "variants")
	if *update {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, sample := range sampleVariants() {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".msgpack")
			encoded := MustEncode(t, sampleMeta, sample)
			if *update {
				if err := os.WriteFile(path, encoded, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			golden, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("read golden variant (new variant? run with -update): %v", err)
			}
			rec, err := events.Decode("1714564800123-0", golden)
			if err != nil {
				t.Fatalf("golden variant no longer decodes: %v", err)
			}
			if !reflect.DeepEqual(rec.Event, sample) {
				t.Errorf("golden variant decodes to\n %#v\nwant\n %#v", rec.Event, sample)
			}
			if !bytes.Equal(encoded, golden) {
				t.Errorf("encoding the sample differs from %s", path)
			}
		})
	}
}

// TestGoldenFilesAreRegisteredTypes: an event type is never removed, or the
// logs holding it stop folding.
func TestGoldenFilesAreRegisteredTypes(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no golden files in %s", goldenDir)
	}
	for _, f := range files {
		typ := strings.TrimSuffix(filepath.Base(f), ".msgpack")
		if _, ok := events.New(typ); !ok {
			t.Errorf("golden file %s names type %q, which is no longer registered", f, typ)
		}
	}
}

// logLine is one entry of a log exported as JSON lines.
type logLine struct {
	ID   string `json:"id"`
	Data string `json:"data"` // base64 of the encoded envelope
}

// MustReadLogFile reads a JSON-lines log export.
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
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			tb.Fatalf("%s:%d: %v", path, n, err)
		}
		data, err := base64.StdEncoding.DecodeString(l.Data)
		if err != nil {
			tb.Fatalf("%s:%d: data: %v", path, n, err)
		}
		out = append(out, events.Entry{ID: l.ID, Data: data})
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// oldLogs are the logs earlier builds wrote (see testdata/README.md), never
// regenerated.
var oldLogs = []string{"testdata/old-log.jsonl", "testdata/old-log-v2.jsonl"}

// TestOldLogDecodes: every old log must keep decoding, entry by entry;
// projection's tests fold them.
func TestOldLogDecodes(t *testing.T) {
	for _, path := range oldLogs {
		t.Run(filepath.Base(path), func(t *testing.T) { oldLogDecodes(t, path) })
	}
}

func oldLogDecodes(t *testing.T, path string) {
	entries := MustReadLogFile(t, path)
	if len(entries) == 0 {
		t.Fatal("old log is empty")
	}
	if _, err := events.LoadEntries(entries); err != nil {
		t.Fatalf("old log ids are not strictly increasing: %v", err)
	}
	seen := map[string]int{}
	for _, e := range entries {
		rec, err := events.Decode(e.ID, e.Data)
		if err != nil {
			t.Errorf("entry %s: %v", e.ID, err)
			continue
		}
		if rec.ID != e.ID || rec.Event == nil || rec.Event.EventType() != rec.Type {
			t.Errorf("entry %s decoded as %+v", e.ID, rec)
		}
		if rec.Time.IsZero() {
			t.Errorf("entry %s (%s) has no decision time", e.ID, rec.Type)
		}
		seen[rec.Type]++
	}
	for _, typ := range registeredTypes() {
		if seen[typ] == 0 {
			// Types added after the old log was written are expected here;
			// they get their own old log when their schema first ships.
			t.Logf("old log holds no %q entry", typ)
		}
	}
}
