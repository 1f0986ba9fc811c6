package events_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/rscoord/rsc/events"
)

// FuzzDecode: any bytes either decode to a well-formed Record or give a
// *DecodeError that names the entry and wraps one of the codec's error kinds.
// Decode must never panic. A Record that decodes re-encodes to an entry that
// decodes to the same Record, or to one that encodes the same (an empty
// omitempty slice comes back nil).
func FuzzDecode(f *testing.F) {
	golden, err := filepath.Glob(filepath.Join(goldenDir, "*.msgpack"))
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range golden {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, path := range oldLogs {
		for _, e := range MustReadLogFile(f, path) {
			f.Add(e.Data)
		}
	}
	for _, name := range registeredTypes() {
		zero, _ := events.New(name)
		f.Add(MustEncode(f, events.Meta{}, zero))
	}
	f.Add([]byte{})
	f.Add([]byte{0xc0})
	f.Add([]byte("not msgpack"))

	const id = "1714564800123-9"
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, err := events.Decode(id, data)
		if err != nil {
			var de *events.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v (%T) is not a *events.DecodeError", err, err)
			}
			if de.ID != id {
				t.Fatalf("DecodeError.ID = %q, want %q", de.ID, id)
			}
			if !errors.Is(err, events.ErrCorrupt) && !errors.Is(err, events.ErrUnknownType) && !errors.Is(err, events.ErrUnsupportedSchema) && !errors.Is(err, events.ErrOutOfBounds) {
				t.Fatalf("error %v wraps none of ErrCorrupt, ErrUnknownType, ErrUnsupportedSchema, ErrOutOfBounds", err)
			}
			return
		}
		if rec.ID != id {
			t.Fatalf("Record.ID = %q, want %q", rec.ID, id)
		}
		if rec.Event == nil {
			t.Fatalf("Record of type %q has no event", rec.Type)
		}
		if rec.Event.EventType() != rec.Type {
			t.Fatalf("Record.Type %q holds a %q event", rec.Type, rec.Event.EventType())
		}
		if rec.Schema < 1 || rec.Schema > events.SchemaVersion {
			t.Fatalf("Record.Schema = %d, outside [1, %d]", rec.Schema, events.SchemaVersion)
		}

		again, err := events.Encode(rec.Meta, rec.Event)
		if err != nil {
			t.Fatalf("re-encode %s: %v", rec.Type, err)
		}
		rec2, err := events.Decode(id, again)
		if err != nil {
			t.Fatalf("re-encoded %s does not decode: %v", rec.Type, err)
		}
		if !reflect.DeepEqual(rec2.Event, rec.Event) {
			// An empty omitempty slice is left out and comes back nil: the
			// event may change that way, but not its encoding.
			if again2 := MustEncode(t, rec2.Meta, rec2.Event); !bytes.Equal(again2, again) {
				t.Fatalf("re-encode changed the event:\n %#v\n %#v", rec.Event, rec2.Event)
			}
		}
		if !rec2.Time.Equal(rec.Time) || rec2.StreamPrefix != rec.StreamPrefix || rec2.ConsumerGroup != rec.ConsumerGroup ||
			rec2.Actor != rec.Actor || rec2.RequestID != rec.RequestID {
			t.Fatalf("re-encode changed the meta:\n %+v\n %+v", rec.Meta, rec2.Meta)
		}
	})
}
