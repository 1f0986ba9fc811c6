package events_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/events"
)

// The fast path (the envelope decoder and the plans) must read exactly what the reflection decoder
// (msgpack.Unmarshal, kept as events.DecodeReflect) read: these tests and
// FuzzDecodeFast decode the same bytes both ways and compare.

// TestDecodeDoesNotTrustLengths: a corrupt entry that claims a string, an array,
// a map or an ext far longer than itself is refused without allocating for the
// claim. (The reflection decoder allocated up to the claimed length, a megabyte
// more with every such entry: 200 decodes of a 12-byte entry took 14 GB.)
func TestDecodeDoesNotTrustLengths(t *testing.T) {
	huge := []byte{0xff, 0xff, 0xff, 0xf0}
	inputs := map[string][]byte{
		"str32 type":      mp(fixmap(1), "type", []byte{0xdb}, huge, "x"),
		"bin32 key":       mp(fixmap(1), []byte{0xc6}, huge, "x"),
		"ext32 value":     mp(fixmap(1), "z", []byte{0xc9}, huge, byte(1)),
		"array32 payload": entryWith("member.synced", mp(fixmap(1), "granted", []byte{0xdd}, huge, byte(1))),
		"map32 payload":   entryWith("assignment.changed", mp(fixmap(1), "targets", []byte{0xdf}, huge, "m", fixarray(0))),
		"array32 structs": entryWith("resharding.drained", mp(fixmap(1), "evidence", []byte{0xdd}, huge, fixmap(0))),
		"map32 envelope":  mp([]byte{0xdf}, huge, "type", "member.synced"),
	}
	for name, data := range inputs {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := 0; i < 100; i++ {
				if _, err := events.Decode("1-0", data); !errors.Is(err, events.ErrCorrupt) {
					t.Fatalf("Decode error = %v, want ErrCorrupt", err)
				}
			}
			runtime.ReadMemStats(&after)
			if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
				t.Errorf("100 decodes allocated %d bytes", n)
			}
		})
	}
}

// assertSameDecode decodes data with Decode and with DecodeReflectUnpooled: both give
// the same Record, or both fail with the same kind of error naming the same
// entry and type.
func assertSameDecode(tb testing.TB, data []byte) {
	tb.Helper()
	const id = "1714564800123-5"
	fast, fastErr := events.Decode(id, data)
	slow, slowErr := events.DecodeReflectUnpooled(id, data)
	switch {
	case fastErr != nil && slowErr != nil:
		var fe, se *events.DecodeError
		if !errors.As(fastErr, &fe) || !errors.As(slowErr, &se) {
			tb.Fatalf("errors are not *DecodeError: fast %v, reflect %v", fastErr, slowErr)
		}
		if fe.ID != se.ID || fe.Type != se.Type || errorKind(fastErr) != errorKind(slowErr) {
			tb.Fatalf("decoders fail differently on %x:\n   fast: %v\nreflect: %v", data, fastErr, slowErr)
		}
	case fastErr != nil:
		tb.Fatalf("fast decode fails where reflection decodes %x:\n   fast: %v\nreflect: %#v", data, fastErr, slow.Event)
	case slowErr != nil:
		tb.Fatalf("fast decode accepts what reflection refuses, %x:\n   fast: %#v\nreflect: %v", data, fast.Event, slowErr)
	case !reflect.DeepEqual(fast, slow):
		tb.Fatalf("decoders disagree on %x:\n   fast: %#v %+v\nreflect: %#v %+v", data, fast.Event, fast, slow.Event, slow)
	}
}

func errorKind(err error) error {
	for _, kind := range []error{events.ErrCorrupt, events.ErrUnknownType, events.ErrUnsupportedSchema, events.ErrOutOfBounds} {
		if errors.Is(err, kind) {
			return kind
		}
	}
	return nil
}

// decodeCorpus is every entry the repository holds: the golden files and their
// variants, the old log, the committed fuzz seeds, and the samples encoded now
// (populated and zero, with and without meta).
func decodeCorpus(tb testing.TB) map[string][]byte {
	tb.Helper()
	out := map[string][]byte{}
	for _, pattern := range []string{"*.msgpack", "variants/*.msgpack"} {
		files, err := filepath.Glob(filepath.Join(goldenDir, pattern))
		if err != nil {
			tb.Fatal(err)
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				tb.Fatal(err)
			}
			out[f] = data
		}
	}
	for _, path := range oldLogs {
		for _, e := range MustReadLogFile(tb, path) {
			out[filepath.Base(path)+" "+e.ID] = e.Data
		}
	}
	seeds, err := filepath.Glob("testdata/fuzz/FuzzDecode/*")
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range seeds {
		out[f] = MustReadFuzzSeed(tb, f)
	}
	for name, ev := range sampleEvents() {
		out["sample "+name] = MustEncode(tb, sampleMeta, ev)
		zero, _ := events.New(name)
		out["zero "+name] = MustEncode(tb, events.Meta{}, zero)
	}
	for name, ev := range sampleVariants() {
		out["variant "+name] = MustEncode(tb, sampleMeta, ev)
	}
	return out
}

// MustReadFuzzSeed reads a one-value []byte corpus file of go test -fuzz.
func MustReadFuzzSeed(tb testing.TB, path string) []byte {
	tb.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") {
		tb.Fatalf("%s: not a one-value []byte fuzz corpus file", path)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return []byte(s)
}

// TestFastDecodeMatchesReflect: every entry of the corpus and every truncation
// of it decode the same both ways, and so does every one-byte change to the
// golden entries and the fuzz seeds. A byte is changed to values that flip a
// code's family (nil, bool, each int and string width, containers, ext) or a
// length. (The 32-bit length codes are left to FuzzDecodeFast: the reflection
// decoder allocates a megabyte for each length it cannot satisfy.)
func TestFastDecodeMatchesReflect(t *testing.T) {
	replacements := []byte{
		0x00, 0x01, 0x05, 0x7f, 0x80, 0x81, 0x8f, 0x90, 0x91, 0x9f, 0xa0, 0xa1, 0xbf,
		0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc7, 0xc8, 0xca, 0xcb, 0xcc, 0xcd, 0xce, 0xcf,
		0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd6, 0xd8, 0xd9, 0xda, 0xdc, 0xde, 0xe0, 0xff,
	}
	for name, data := range decodeCorpus(t) {
		t.Run(name, func(t *testing.T) {
			assertSameDecode(t, data)
			for n := 0; n < len(data); n++ {
				assertSameDecode(t, data[:n])
			}
			assertSameDecode(t, append(bytes.Clone(data), 0xc0, 0x01)) // trailing bytes
			if !strings.HasPrefix(name, "testdata/") {
				return
			}
			mutated := bytes.Clone(data)
			for i := range mutated {
				orig := mutated[i]
				for j, b := range replacements {
					if raceEnabled && (i+j)%4 != 0 {
						continue // a quarter of the changes, a different quarter at each position
					}
					mutated[i] = b
					assertSameDecode(t, mutated)
				}
				mutated[i] = orig
			}
		})
	}
}

// mp builds msgpack by hand, for what no encoder in this repository writes.
func mp(parts ...any) []byte {
	var out []byte
	for _, p := range parts {
		switch p := p.(type) {
		case []byte:
			out = append(out, p...)
		case byte:
			out = append(out, p)
		case string: // a fixstr or str8
			if len(p) < 32 {
				out = append(out, 0xa0|byte(len(p)))
			} else {
				out = append(out, 0xd9, byte(len(p)))
			}
			out = append(out, p...)
		default:
			panic("mp: unsupported part")
		}
	}
	return out
}

func bin(s string) []byte { return append([]byte{0xc4, byte(len(s))}, s...) }
func str16(s string) []byte {
	return append(binary.BigEndian.AppendUint16([]byte{0xda}, uint16(len(s))), s...)
}
func str32(s string) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0xdb}, uint32(len(s))), s...)
}
func fixmap(n int) byte   { return 0x80 | byte(n) }
func fixarray(n int) byte { return 0x90 | byte(n) }

// entryWith is an envelope of type typ around a hand-built payload.
func entryWith(typ string, payload []byte) []byte {
	return mp(fixmap(4), "type", typ, "v", byte(1), "time", byte(0x2a), "payload", payload)
}

// TestFastDecodeLeniency: what the reflection decoder accepted beyond what the
// encoder writes, and what it refused, case by case. Each case must decode the
// same both ways; want, when set, is what it decodes to.
func TestFastDecodeLeniency(t *testing.T) {
	for _, tc := range leniencyCases() {
		t.Run(tc.name, func(t *testing.T) {
			assertSameDecode(t, tc.data)
			rec, err := events.Decode("1-0", tc.data)
			if tc.fail {
				if err == nil {
					t.Fatalf("decoded %#v, want an error", rec.Event)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if tc.want != nil && !reflect.DeepEqual(rec.Event, tc.want) {
				t.Errorf("event = %#v, want %#v", rec.Event, tc.want)
			}
		})
	}
}

type leniencyCase struct {
	name string
	data []byte
	want events.Event // if set, what data decodes to
	fail bool         // data does not decode
}

func leniencyCases() []leniencyCase {
	var (
		nilv   = byte(0xc0)
		synced = func(fields ...any) []byte { return entryWith("member.synced", mp(fields...)) }
	)
	return []leniencyCase{
		// Integers: every width decodes into int and int64 fields; nil is 0.
		{"int as negative fixint", synced(fixmap(1), "memberEpoch", byte(0xff)), &events.MemberSynced{MemberEpoch: -1}, false},
		{"int as uint8", synced(fixmap(1), "memberEpoch", []byte{0xcc, 0xff}), &events.MemberSynced{MemberEpoch: 255}, false},
		{"int as uint16", synced(fixmap(1), "memberEpoch", []byte{0xcd, 0x01, 0x00}), &events.MemberSynced{MemberEpoch: 256}, false},
		{"int as uint32", synced(fixmap(1), "memberEpoch", []byte{0xce, 0, 1, 0, 0}), &events.MemberSynced{MemberEpoch: 65536}, false},
		{"int as uint64 above MaxInt64 wraps", synced(fixmap(1), "memberEpoch", []byte{0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe}), &events.MemberSynced{MemberEpoch: -2}, false},
		{"int as int8", synced(fixmap(1), "memberEpoch", []byte{0xd0, 0x80}), &events.MemberSynced{MemberEpoch: -128}, false},
		{"int as int16", synced(fixmap(1), "memberEpoch", []byte{0xd1, 0xff, 0x00}), &events.MemberSynced{MemberEpoch: -256}, false},
		{"int as int32", synced(fixmap(1), "memberEpoch", []byte{0xd2, 0xff, 0xff, 0xff, 0x00}), &events.MemberSynced{MemberEpoch: -256}, false},
		{"int as int64", synced(fixmap(1), "memberEpoch", []byte{0xd3, 0, 0, 0, 1, 0, 0, 0, 0}), &events.MemberSynced{MemberEpoch: 1 << 32}, false},
		{"int as nil", synced(fixmap(1), "memberEpoch", nilv), &events.MemberSynced{}, false},
		{"int slice element widths and nil", synced(fixmap(1), "granted", fixarray(4), byte(3), []byte{0xcd, 0x01, 0x00}, []byte{0xd0, 0x07}, nilv), &events.MemberSynced{Granted: []int{3, 256, 7, 0}}, false},
		// A shard index outside 0..MaxShardCount-1 is out of bounds, not a value.
		{"shard index negative", synced(fixmap(1), "granted", fixarray(1), byte(0xff)), nil, true},
		{"shard index at the maximum", synced(fixmap(1), "granted", fixarray(1), []byte{0xce, 0x00, 0x01, 0x00, 0x00}), nil, true},
		{"shard index below the maximum", synced(fixmap(1), "granted", fixarray(1), []byte{0xcd, 0xff, 0xff}), &events.MemberSynced{Granted: []int{65535}}, false},
		{"int as float32", synced(fixmap(1), "memberEpoch", []byte{0xca, 0x3f, 0x80, 0, 0}), nil, true},
		{"int as float64", synced(fixmap(1), "memberEpoch", []byte{0xcb, 0x3f, 0xf0, 0, 0, 0, 0, 0, 0}), nil, true},
		{"int as string", synced(fixmap(1), "memberEpoch", "7"), nil, true},
		{"int as bool", synced(fixmap(1), "memberEpoch", byte(0xc3)), nil, true},
		// Strings: bin decodes as a string, nil as "".
		{"string as bin", synced(fixmap(1), "memberId", bin("m-1")), &events.MemberSynced{MemberID: "m-1"}, false},
		{"string as str16", synced(fixmap(1), "memberId", str16("m-1")), &events.MemberSynced{MemberID: "m-1"}, false},
		{"string as str32", synced(fixmap(1), "memberId", str32("m-1")), &events.MemberSynced{MemberID: "m-1"}, false},
		{"string as nil", synced(fixmap(1), "memberId", nilv), &events.MemberSynced{}, false},
		{"string as int", synced(fixmap(1), "memberId", byte(1)), nil, true},
		{"string as array", synced(fixmap(1), "memberId", fixarray(0)), nil, true},
		// Booleans: nil is false.
		{"bool as nil", entryWith("resharding.retired", mp(fixmap(1), "kept", nilv)), &events.ShardsRetired{}, false},
		{"bool as int", entryWith("resharding.retired", mp(fixmap(1), "kept", byte(1))), nil, true},
		// Slices: nil is a nil slice, an empty array an empty one.
		{"int slice as nil", synced(fixmap(1), "granted", nilv), &events.MemberSynced{}, false},
		{"int slice empty", synced(fixmap(1), "granted", fixarray(0)), &events.MemberSynced{Granted: []int{}}, false},
		{"int slice as map", synced(fixmap(1), "granted", fixmap(0)), nil, true},
		{"int slice as bin", synced(fixmap(1), "granted", bin("ab")), nil, true},
		{"string slice as nil", entryWith("member.pruned", mp(fixmap(1), "memberIds", nilv)), &events.MembersPruned{}, false},
		{"string slice empty", entryWith("member.pruned", mp(fixmap(1), "memberIds", fixarray(0))), &events.MembersPruned{MemberIDs: []string{}}, false},
		{"string slice with nil and bin", entryWith("member.pruned", mp(fixmap(1), "memberIds", fixarray(2), nilv, bin("m"))), &events.MembersPruned{MemberIDs: []string{"", "m"}}, false},
		{"string slice as array16", entryWith("member.pruned", mp(fixmap(1), "memberIds", []byte{0xdc, 0, 1}, "m")), &events.MembersPruned{MemberIDs: []string{"m"}}, false},
		// A repeated key: the last value wins, but msgpack decodes into what is
		// there: a nil []string leaves the earlier one, maps merge, structs in a
		// slice keep the fields the later value does not name.
		{"repeated int slice key", synced(fixmap(2), "granted", fixarray(2), byte(1), byte(2), "granted", fixarray(1), byte(3)), &events.MemberSynced{Granted: []int{3}}, false},
		{"repeated int slice key, then nil", synced(fixmap(2), "granted", fixarray(1), byte(1), "granted", nilv), &events.MemberSynced{}, false},
		{"repeated string slice key, then nil", entryWith("member.pruned", mp(fixmap(2), "memberIds", fixarray(1), "a", "memberIds", nilv)), &events.MembersPruned{MemberIDs: []string{"a"}}, false},
		{"repeated map key merges", entryWith("assignment.changed", mp(fixmap(2), "targets", fixmap(1), "a", fixarray(1), byte(1), "targets", fixmap(1), "b", fixarray(0))), &events.AssignmentChanged{Targets: events.Targets{"a": {1}, "b": {}}}, false},
		{"repeated struct slice key merges", entryWith("resharding.completed", mp(fixmap(2),
			"evidence", fixarray(1), fixmap(2), "shardIndex", byte(4), "streamKey", "o:4",
			"evidence", fixarray(1), fixmap(1), "exists", byte(0xc3))),
			&events.ReshardingCompleted{Evidence: []events.ShardDrain{{ShardIndex: 4, StreamKey: "o:4", Exists: true}}}, false},
		{"repeated struct slice key, shorter then longer", entryWith("resharding.completed", mp(fixmap(3),
			"evidence", fixarray(3), fixmap(1), "shardIndex", byte(1), fixmap(1), "shardIndex", byte(2), fixmap(1), "shardIndex", byte(3),
			"evidence", fixarray(1), fixmap(0),
			"evidence", fixarray(3), fixmap(0), fixmap(0), fixmap(1), "exists", byte(0xc3))), nil, false},
		{"repeated scalar key", synced(fixmap(2), "memberId", "a", "memberId", "b"), &events.MemberSynced{MemberID: "b"}, false},
		// Maps: nil is a nil map; an ext header in front of the map is skipped.
		{"map as nil", entryWith("assignment.changed", mp(fixmap(1), "targets", nilv)), &events.AssignmentChanged{}, false},
		{"map empty", entryWith("assignment.changed", mp(fixmap(1), "targets", fixmap(0))), &events.AssignmentChanged{Targets: events.Targets{}}, false},
		{"map key bin, value nil", entryWith("assignment.changed", mp(fixmap(1), "targets", fixmap(1), bin("m-1"), nilv)), &events.AssignmentChanged{Targets: events.Targets{"m-1": nil}}, false},
		{"map key nil", entryWith("assignment.changed", mp(fixmap(1), "targets", fixmap(1), nilv, fixarray(0))), &events.AssignmentChanged{Targets: events.Targets{"": {}}}, false},
		{"map key int", entryWith("assignment.changed", mp(fixmap(1), "targets", fixmap(1), byte(1), fixarray(0))), nil, true},
		// (DecodeMapLen reads past the ext's type and length bytes and takes the
		// ext's data for the map.)
		{"map inside a fixext", entryWith("assignment.changed", mp(fixmap(1), "targets", []byte{0xd4, 0x05}, fixmap(0))), &events.AssignmentChanged{Targets: events.Targets{}}, false},
		{"map inside an ext8", entryWith("assignment.changed", mp(fixmap(1), "targets", []byte{0xc7, 0x04, 0x09}, fixmap(1), "a", fixarray(0))), &events.AssignmentChanged{Targets: events.Targets{"a": {}}}, false},
		{"map inside an empty ext8 (the map is past the ext's end)", entryWith("assignment.changed", mp(fixmap(1), "targets", []byte{0xc7, 0x00, 0x09}, fixmap(0))), nil, true},
		{"map as map16", entryWith("assignment.changed", mp(fixmap(1), "targets", []byte{0xde, 0, 1}, "a", fixarray(0))), &events.AssignmentChanged{Targets: events.Targets{"a": {}}}, false},
		{"map as array", entryWith("assignment.changed", mp(fixmap(1), "targets", fixarray(0))), nil, true},
		// Structs: nil or an empty array is the zero value; an array of exactly
		// the struct's fields sets them in declaration order (embedded Epochs
		// flattened); any other length is an error.
		{"payload as empty array", entryWith("member.synced", mp(fixarray(0))), &events.MemberSynced{}, false},
		{"payload as array of its fields", entryWith("member.synced", mp(fixarray(3), "m-1", byte(4), fixarray(1), byte(2))), &events.MemberSynced{MemberID: "m-1", MemberEpoch: 4, Granted: []int{2}}, false},
		{"payload as array with Epochs flattened", entryWith("member.left", mp(fixarray(3), "m-1", byte(4), byte(5))), &events.MemberLeft{MemberID: "m-1", Epochs: events.Epochs{GroupEpoch: 4, MetadataVersion: 5}}, false},
		{"payload as array too short", entryWith("member.synced", mp(fixarray(2), "m-1", byte(4))), nil, true},
		{"payload as map16", entryWith("member.synced", mp([]byte{0xde, 0, 1}, "memberId", "m")), &events.MemberSynced{MemberID: "m"}, false},
		{"payload as map32", entryWith("member.synced", mp([]byte{0xdf, 0, 0, 0, 1}, "memberId", "m")), &events.MemberSynced{MemberID: "m"}, false},
		{"payload as ext", entryWith("member.synced", mp([]byte{0xd4, 0x01, 0x00})), nil, true},
		{"payload as int", entryWith("member.synced", mp(byte(1))), nil, true},
		{"nested struct as nil", entryWith("resharding.completed", mp(fixmap(1), "evidence", fixarray(1), nilv)), &events.ReshardingCompleted{Evidence: []events.ShardDrain{{}}}, false},
		{"nested struct as array", entryWith("group.shards_repaired", mp(fixmap(1), "shards", fixarray(1), fixarray(4), byte(1), "o:1", byte(0xc3), byte(0xc2))), &events.ShardsRepaired{Shards: []events.ShardRepair{{ShardIndex: 1, StreamKey: "o:1", StreamMissing: true}}}, false},
		{"nested struct as string", entryWith("group.shards_repaired", mp(fixmap(1), "shards", fixarray(1), "x")), nil, true},
		{"struct key bin", synced(fixmap(1), bin("memberId"), "m"), &events.MemberSynced{MemberID: "m"}, false},
		{"struct key nil", synced(fixmap(1), nilv, "m"), &events.MemberSynced{}, false},
		{"struct key int", synced(fixmap(1), byte(1), "m"), nil, true},
		// The embedded Epochs also decodes whole under its Go name.
		{"Epochs key", entryWith("member.left", mp(fixmap(2), "groupEpoch", byte(3), "Epochs", fixmap(1), "metadataVersion", byte(9))), &events.MemberLeft{Epochs: events.Epochs{GroupEpoch: 3, MetadataVersion: 9}}, false},
		{"Epochs key nil", entryWith("member.left", mp(fixmap(2), "groupEpoch", byte(3), "Epochs", nilv)), &events.MemberLeft{}, false},
		{"Epochs key as array", entryWith("member.left", mp(fixmap(1), "Epochs", fixarray(2), byte(3), byte(4))), &events.MemberLeft{Epochs: events.Epochs{GroupEpoch: 3, MetadataVersion: 4}}, false},
		{"Epochs key on a type without Epochs", synced(fixmap(1), "Epochs", fixmap(1), "groupEpoch", byte(3)), &events.MemberSynced{}, false},
		// Unknown fields of every kind are skipped.
		{"unknown fields skipped", synced(fixmap(7),
			"a", []byte{0xd7, 0xff, 0, 0, 0, 0, 0, 0, 0, 1}, // timestamp ext
			"b", fixmap(1), "x", fixarray(2), []byte{0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, bin("y"),
			"c", []byte{0xc7, 0x02, 0x07, 0xaa, 0xbb},
			"d", []byte{0xdc, 0, 2}, nilv, byte(0xc3),
			"e", []byte{0xdf, 0, 0, 0, 0},
			"f", str16("long"),
			"memberId", "m"), &events.MemberSynced{MemberID: "m"}, false},
		{"unknown field holds 0xc1", synced(fixmap(1), "z", byte(0xc1)), nil, true},
		// The envelope follows the same rules.
		// (Arrays of the 8 fields before "cont" are refused by both: no
		// build ever wrote an envelope as an array.)
		{"envelope as array", mp(fixarray(9), "member.synced", byte(1), "p", "g", byte(7), "a", "r", byte(0xc3), fixmap(1), "memberId", "m"), nil, false},
		{"envelope as short array", mp(fixarray(4), "member.synced", byte(1), "p", "g"), nil, true},
		{"envelope with fields in reverse order", mp(fixmap(4), "payload", fixmap(1), "memberId", "m", "time", byte(1), "v", byte(1), "type", "member.synced"), &events.MemberSynced{MemberID: "m"}, false},
		{"envelope type as bin", mp(fixmap(3), "type", bin("member.synced"), "v", byte(1), "payload", fixmap(0)), &events.MemberSynced{}, false},
		{"envelope schema as uint16", mp(fixmap(3), "type", "member.synced", "v", []byte{0xcd, 0, 1}, "payload", fixmap(0)), &events.MemberSynced{}, false},
		{"envelope repeated type", mp(fixmap(4), "type", "nope", "v", byte(1), "payload", fixmap(0), "type", "member.synced"), &events.MemberSynced{}, false},
		{"envelope type repeated after the payload", mp(fixmap(4), "type", "member.synced", "v", byte(1), "payload", fixmap(1), "memberId", "m", "type", "member.left"), &events.MemberLeft{MemberID: "m"}, false},
		{"envelope actor after the payload", mp(fixmap(4), "type", "member.synced", "v", byte(1), "payload", fixmap(1), "memberId", "m", "actor", "m"), &events.MemberSynced{MemberID: "m"}, false},
		{"envelope payload fails, then an envelope field fails", mp(fixmap(4), "type", "member.synced", "v", byte(1), "payload", fixmap(1), "memberId", byte(1), "time", "x"), nil, true},
		{"envelope nil", mp(nilv), nil, true},
		{"envelope payload nil", mp(fixmap(3), "type", "member.synced", "v", byte(1), "payload", nilv), nil, true},
		{"envelope payload repeated, then nil", mp(fixmap(4), "type", "member.synced", "v", byte(1), "payload", fixmap(0), "payload", nilv), nil, true},
		{"envelope time as uint64", mp(fixmap(4), "type", "member.synced", "v", byte(1), "time", []byte{0xcf, 0x17, 0xcb, 0x5b, 0x99, 0xf8, 0x63, 0x80, 0x00}, "payload", fixmap(0)), &events.MemberSynced{}, false},
		{"envelope time as timestamp ext", mp(fixmap(4), "type", "member.synced", "v", byte(1), "time", []byte{0xd6, 0xff, 0, 0, 0, 1}, "payload", fixmap(0)), nil, true},
		{"envelope with trailing bytes", append(entryWith("member.synced", mp(fixmap(0))), 0xc1, 0xc1), &events.MemberSynced{}, false},
		{"envelope meta strings long and bin", mp(fixmap(7), "type", "member.synced", "v", byte(1), "prefix", str16(strings.Repeat("p", 200)), "group", bin("g"), "actor", str32("a"), "req", nilv, "payload", fixmap(0)), &events.MemberSynced{}, false},
	}
}

// TestEveryTypeDecodesFast: every event type of this package has a plan
// (plan.go), and the fields it knows are the ones msgpack writes, in the same order
// (the order matters for a struct encoded as an array).
func TestEveryTypeDecodesFast(t *testing.T) {
	samples := sampleEvents()
	for name, v := range sampleVariants() {
		samples[name] = v // a variant sets the omitempty fields its type's sample leaves out
	}
	evidence := samples["resharding.drained"].(*events.ReshardingDrained).Evidence
	nested := map[string]any{
		"ShardDrain":     &evidence[0],
		"GroupDrain":     &evidence[0].Groups[1],
		"ShardRepair":    &samples["group.shards_repaired"].(*events.ShardsRepaired).Shards[0],
		"ShardCutover":   &samples["resharding.cutover"].(*events.ReshardingCutover).Shards[0],
		"CutoverBarrier": &samples["resharding.cutover"].(*events.ReshardingCutover).Barriers[0],
		"BarrierProof":   &samples["resharding.barrier_released.lastgenerated"].(*events.BarrierReleased).Evidence[0],
		"ShardWrites":    &samples["resharding.unfenced_writes"].(*events.UnfencedWrites).Shards[0],
		"ShardLoad":      &samples["autoscaling.decided"].(*events.AutoscalingDecided).Shards[0],
	}
	for _, name := range registeredTypes() {
		if !events.HasFastDecoder(name) {
			t.Errorf("event type %q has no plan (a field of a kind plan.go does not read): it decodes through reflection, several times slower", name)
		}
	}
	check := func(t *testing.T, v any, keys []string) {
		if got := events.WireFields(v); !reflect.DeepEqual(got, keys) {
			t.Errorf("plan of %T knows fields %q; msgpack writes %q", v, got, keys)
		}
	}
	for name, v := range samples {
		switch name {
		case "member.joined", "group.created", "group.created.ordering", "group.created.registered", "group.deleted", "stream.created", "stream.adopted", "resharding.completed", "resharding.preparing",
			"resharding.activated", "resharding.rolled_back", "resharding.retired", "resharding.cutover", "command.rejected", "member.expired":
			continue // omitempty fields left out of the sample; see the variant (every field set), and evidence below
		}
		t.Run(name, func(t *testing.T) { check(t, v, mapKeys(t, MustMarshal(t, v))) })
	}
	t.Run("resharding.completed", func(t *testing.T) {
		v := samples["resharding.completed"]
		keys := mapKeys(t, MustMarshal(t, v))
		if !reflect.DeepEqual(keys, []string{"reshardingId", "state", "evidence", "metadataVersion"}) {
			t.Fatalf("sample of resharding.completed encodes fields %q", keys)
		}
		check(t, v, keys)
	})
	for name, v := range nested {
		t.Run(name, func(t *testing.T) { check(t, v, mapKeys(t, MustMarshal(t, v))) })
	}
	t.Run("envelope", func(t *testing.T) {
		m := sampleMeta
		m.Continues = true // every optional field set
		keys := mapKeys(t, MustEncode(t, m, samples["member.synced"]))
		if got := events.EnvelopeWireFields(); !reflect.DeepEqual(got, keys) {
			t.Errorf("hand-written envelope decoder knows fields %q; Encode writes %q", got, keys)
		}
	})
}

// mapKeys lists the keys of the msgpack map data holds, in order.
func mapKeys(tb testing.TB, data []byte) []string {
	tb.Helper()
	dec := msgpack.NewDecoder(bytes.NewReader(data))
	n, err := dec.DecodeMapLen()
	if err != nil {
		tb.Fatal(err)
	}
	keys := make([]string, 0, n)
	for i := 0; i < n; i++ {
		k, err := dec.DecodeString()
		if err != nil {
			tb.Fatal(err)
		}
		keys = append(keys, k)
		if err := dec.Skip(); err != nil {
			tb.Fatal(err)
		}
	}
	return keys
}

// TestEverySampleFieldIsSet: the samples (with the variants) set every field of
// every event type to a non-zero value, so the round trips through the fast path
// (TestEncodeDecodeRoundTrip, TestGolden) check that every field decodes.
func TestEverySampleFieldIsSet(t *testing.T) {
	set := map[string]bool{} // "Type.Field" paths seen non-zero
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			walk(prefix, v.Elem())
		case reflect.Struct:
			for i := 0; i < v.NumField(); i++ {
				f := v.Type().Field(i)
				path := prefix + "." + f.Name
				if !v.Field(i).IsZero() {
					set[path] = true
				}
				walk(path, v.Field(i))
			}
		case reflect.Slice:
			for i := 0; i < v.Len(); i++ {
				walk(prefix+"[]", v.Index(i))
			}
		}
	}
	var all []string
	var fieldsOf func(prefix string, t reflect.Type)
	fieldsOf = func(prefix string, t reflect.Type) {
		switch t.Kind() {
		case reflect.Pointer:
			fieldsOf(prefix, t.Elem())
		case reflect.Struct:
			for i := 0; i < t.NumField(); i++ {
				f := t.Field(i)
				all = append(all, prefix+"."+f.Name)
				fieldsOf(prefix+"."+f.Name, f.Type)
			}
		case reflect.Slice:
			fieldsOf(prefix+"[]", t.Elem())
		}
	}
	samples := sampleEvents()
	for _, name := range registeredTypes() {
		walk(name, reflect.ValueOf(samples[name]))
		fieldsOf(name, reflect.TypeOf(samples[name]))
	}
	for _, v := range sampleVariants() {
		walk(v.EventType(), reflect.ValueOf(v))
	}
	for _, path := range all {
		if !set[path] {
			t.Errorf("no sample sets %s: a decoder that drops it would pass the round trips", path)
		}
	}
}

// laterEvent is registered as a type added later would be: its struct, its
// EventType and Register, no decoder written. It decodes on the fast path.
type laterEvent struct {
	Name    string              `msgpack:"name"`
	Count   int64               `msgpack:"count"`
	Shards  []int               `msgpack:"shards"`
	Targets events.Targets      `msgpack:"targets"`
	Drains  []events.GroupDrain `msgpack:"drains"`
	events.Epochs
}

func (laterEvent) EventType() string { return testTypePrefix + "later" }

// fallbackEvent has fields of kinds no plan reads: it decodes through
// reflection.
type fallbackEvent struct {
	Name string            `msgpack:"name"`
	Size uint32            `msgpack:"size"`
	At   time.Time         `msgpack:"at"`
	Tags map[string]string `msgpack:"tags"`
}

func (fallbackEvent) EventType() string { return testTypePrefix + "fallback" }

func TestTypeAddedLaterDecodesFast(t *testing.T) {
	name := testTypePrefix + "later"
	if _, ok := events.New(name); !ok {
		events.Register(name, func() events.Event { return &laterEvent{} })
	}
	if !events.HasFastDecoder(name) {
		t.Fatalf("%s has no plan", name)
	}
	if got, want := events.WireFields(&laterEvent{}), []string{"name", "count", "shards", "targets", "drains", "groupEpoch", "metadataVersion"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("plan of %s knows fields %q, want %q", name, got, want)
	}
	want := &laterEvent{
		Name: "x", Count: -3, Shards: []int{1, 2}, Targets: events.Targets{"m": {0}},
		Drains: []events.GroupDrain{{Name: "g", Pending: 1, Lag: -1}}, Epochs: events.Epochs{GroupEpoch: 2, MetadataVersion: 3},
	}
	for _, ev := range []events.Event{want, &laterEvent{}} {
		data := MustEncode(t, sampleMeta, ev)
		rec, err := events.Decode("1-0", data)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if rec.Type != name || !reflect.DeepEqual(rec.Event, ev) {
			t.Errorf("decoded %q %#v, want %#v", rec.Type, rec.Event, ev)
		}
		assertMetaEqual(t, rec.Meta, sampleMeta)
		assertSameDecode(t, data)
	}
	for _, data := range [][]byte{
		entryWith(name, mp(fixmap(1), "count", "three")),
		entryWith(name, mp(fixmap(1), "Epochs", fixmap(1), "groupEpoch", byte(4))),
		entryWith(name, mp(fixarray(7), "n", byte(1), fixarray(0), fixmap(0), fixarray(1), fixmap(1), "name", "g", byte(2), byte(3))),
	} {
		assertSameDecode(t, data)
	}
}

func TestDecodeFallsBackToReflection(t *testing.T) {
	name := testTypePrefix + "fallback"
	if _, ok := events.New(name); !ok {
		events.Register(name, func() events.Event { return &fallbackEvent{} })
	}
	if events.HasFastDecoder(name) {
		t.Fatalf("%s has a plan", name)
	}
	want := &fallbackEvent{Name: "x", Size: 7, At: time.Date(2025, 1, 2, 3, 4, 5, 6, time.Local), Tags: map[string]string{"a": "b"}}
	for _, ev := range []events.Event{want, &fallbackEvent{}} {
		data := MustEncode(t, sampleMeta, ev)
		rec, err := events.Decode("1-0", data)
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if rec.Type != name || !reflect.DeepEqual(rec.Event, ev) {
			t.Errorf("decoded %q %#v, want %#v", rec.Type, rec.Event, ev)
		}
		assertSameDecode(t, data)
	}
	bad := entryWith(name, mp(fixmap(1), "size", "three"))
	assertDecodeError(t, "1-0", bad, events.ErrCorrupt, name)
	assertSameDecode(t, bad)
}

// FuzzDecodeFast: for any bytes, the fast path and the reflection
// decoder give the same Record or fail the same way.
func FuzzDecodeFast(f *testing.F) {
	for _, data := range decodeCorpus(f) {
		f.Add(data)
	}
	for _, tc := range leniencyCases() {
		f.Add(tc.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		assertSameDecode(t, data)
	})
}
