package events_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/events"
)

// notShards are the int fields of events that neither count nor index shards:
// nothing is sized or indexed by them, so Decode does not bound them.
var notShards = map[string]bool{
	"member.joined.MaxConcurrency":            true,
	"member.updated.MaxConcurrency":           true,
	"autoscaling.configured.ScaleOutCooldown": true,
	"autoscaling.configured.ScaleInCooldown":  true,
	"autoscaling.configured.EvaluationWindow": true,
}

// rawEntry is a log entry around ev as msgpack writes it, without the checks
// of events.Encode (which refuses what Decode would refuse): what a hostile
// or broken writer can put in the log.
func rawEntry(tb testing.TB, typ string, ev any) []byte {
	tb.Helper()
	payload, err := msgpack.Marshal(ev)
	if err != nil {
		tb.Fatal(err)
	}
	data, err := msgpack.Marshal(map[string]any{"type": typ, "v": 1, "prefix": "orders", "group": "billing", "time": 1, "payload": msgpack.RawMessage(payload)})
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// intSlot is one int a field path of an event leads to, and how to set it.
type intSlot struct {
	path string
	set  func(v int)
}

// intSlots walks v (addressable) and returns every int it holds: int fields,
// elements of []int (one is added to an empty slice), values of a
// map[string][]int (an entry is added), through nested structs and slices of
// structs (the first element, added when the slice is empty). int64 fields
// (epochs, versions, counters of entries) are not shard numbers and are
// skipped.
func intSlots(v reflect.Value, path string) []intSlot {
	var out []intSlot
	switch v.Kind() {
	case reflect.Int:
		out = append(out, intSlot{path, func(n int) { v.SetInt(int64(n)) }})
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			name := path + "." + f.Name
			if f.Anonymous {
				name = path
			}
			out = append(out, intSlots(v.Field(i), name)...)
		}
	case reflect.Slice:
		if v.Len() == 0 {
			v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
		}
		out = append(out, intSlots(v.Index(0), path)...)
	case reflect.Map:
		if v.Type().Key().Kind() != reflect.String || v.Type().Elem().Kind() != reflect.Slice {
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		elem.Set(reflect.MakeSlice(v.Type().Elem(), 1, 1))
		v.SetMapIndex(reflect.ValueOf("m-bounds"), elem)
		out = append(out, intSlot{path + "[]", func(n int) { elem.Index(0).SetInt(int64(n)) }})
	}
	return out
}

// TestEveryShardNumberIsBounded: every int an event carries is either a
// shard count or index that Decode bounds (MaxShardCount-1 decodes; -1 and
// MaxShardCount+1 are ErrOutOfBounds, confined to the entry's prefix), or
// listed in notShards. A new event or field with a shard number fails here
// until it is checked (bounds.go).
func TestEveryShardNumberIsBounded(t *testing.T) {
	samples := sampleEvents()
	checked := 0
	for _, typ := range registeredTypes() {
		sample, ok := samples[typ]
		if !ok {
			t.Errorf("no sample of %s", typ)
			continue
		}
		// Count the slots on a fresh copy; each check mutates its own.
		fresh := func() (events.Event, []intSlot) {
			ev, _ := events.New(typ)
			data, _ := msgpack.Marshal(sample)
			if err := msgpack.Unmarshal(data, ev); err != nil {
				t.Fatal(err)
			}
			return ev, intSlots(reflect.ValueOf(ev).Elem(), typ)
		}
		_, slots := fresh()
		for i, s := range slots {
			field := strings.TrimSuffix(strings.TrimPrefix(s.path, typ+"."), "[]")
			key := typ + "." + field
			t.Run(s.path, func(t *testing.T) {
				for _, n := range []int{events.MaxShardCount - 1, -1, events.MaxShardCount + 1} {
					ev, slots := fresh()
					slots[i].set(n)
					_, err := events.Decode("7-0", rawEntry(t, typ, ev))
					inBounds := n == events.MaxShardCount-1 || notShards[key]
					switch {
					case inBounds && err != nil:
						t.Errorf("%s = %d: %v, want it decoded", s.path, n, err)
					case !inBounds && !errors.Is(err, events.ErrOutOfBounds):
						t.Errorf("%s = %d: err %v, want ErrOutOfBounds (a shard number the fold would size or index something by)", s.path, n, err)
					case !inBounds:
						rec, ok := events.Confine(err)
						if !ok || rec.StreamPrefix != "orders" || rec.ID != "7-0" || rec.Type != typ {
							t.Errorf("%s = %d: Confine(%v) = %+v, %v; want the entry's record under prefix orders", s.path, n, err, rec, ok)
						}
						if _, err := events.Encode(events.Meta{StreamPrefix: "orders"}, ev); !errors.Is(err, events.ErrOutOfBounds) {
							t.Errorf("%s = %d: Encode: %v, want ErrOutOfBounds (never written)", s.path, n, err)
						}
					}
				}
			})
			checked++
		}
	}
	if checked < 30 {
		t.Fatalf("checked %d int fields; the walk is broken", checked)
	}
}

// TestShardCountBoundary: the largest shard count decodes, one more is out of
// bounds (reproduction: a stream.adopted with shardCount 2,147,483,647 made
// the fold ask for a 16 GiB slice).
func TestShardCountBoundary(t *testing.T) {
	for _, tc := range []struct {
		count int
		ok    bool
	}{{events.MaxShardCount, true}, {events.MaxShardCount + 1, false}, {2147483647, false}, {0, true}, {-1, false}} {
		t.Run(fmt.Sprint(tc.count), func(t *testing.T) {
			_, err := events.Decode("7-0", rawEntry(t, "stream.adopted", &events.StreamAdopted{ShardCount: tc.count, RequestedBy: "ops"}))
			if tc.ok != (err == nil) {
				t.Fatalf("shardCount %d: %v, want ok=%v", tc.count, err, tc.ok)
			}
			if !tc.ok && !strings.Contains(err.Error(), fmt.Sprint(tc.count)) {
				t.Errorf("error %q does not name the count", err)
			}
		})
	}
}

// TestConfine: which decode errors stay within their prefix.
func TestConfine(t *testing.T) {
	unknown, _ := msgpack.Marshal(map[string]any{"type": "group.teleported", "v": 1, "prefix": "orders", "group": "g", "time": 5, "payload": []byte{0x80}})
	newer, _ := msgpack.Marshal(map[string]any{"type": "group.created", "v": events.SchemaVersion + 1, "prefix": "orders", "time": 5, "payload": []byte{0x80}})
	badPayload, _ := msgpack.Marshal(map[string]any{"type": "group.created", "v": 1, "prefix": "orders", "time": 5, "payload": "not a map"})
	global, _ := msgpack.Marshal(map[string]any{"type": "log.teleported", "v": 1, "time": 5, "payload": []byte{0x80}})
	noType, _ := msgpack.Marshal(map[string]any{"v": 1, "prefix": "orders", "time": 5})
	for _, tc := range []struct {
		name     string
		data     []byte
		confined bool
	}{
		{"unknown type", unknown, true},
		{"newer schema", newer, true},
		{"payload does not decode", badPayload, true},
		{"out of bounds", rawEntry(t, "stream.adopted", &events.StreamAdopted{ShardCount: 2147483647}), true},
		{"unknown type of no prefix", global, false},
		{"envelope without a type", noType, false},
		{"envelope does not decode", []byte("\xc1\xff not msgpack"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := events.Decode("9-1", tc.data)
			if err == nil {
				t.Fatal("decoded")
			}
			rec, ok := events.Confine(err)
			if ok != tc.confined {
				t.Fatalf("Confine(%v) = %v, want %v", err, ok, tc.confined)
			}
			if !ok {
				return
			}
			q, isQ := rec.Event.(*events.Quarantined)
			if !isQ || rec.ID != "9-1" || rec.StreamPrefix != "orders" || rec.Time.IsZero() || q.Reason != err.(*events.DecodeError).Err.Error() {
				t.Fatalf("record %+v (event %+v), want entry 9-1 of prefix orders with its time and reason", rec, rec.Event)
			}
		})
	}
}
