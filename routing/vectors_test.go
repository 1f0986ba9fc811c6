package routing_test

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"testing"
	"unicode/utf8"

	"github.com/rscoord/rsc/routing"
)

// vectorFile is the machine-readable form of the wire contract's §4.3
// routeV1 vectors and §4.4 cluster slots, computed with the reference
// project's own hashing code.
type vectorFile struct {
	Vectors []routeVector  `json:"vectors"`
	Slots   map[string]int `json:"slots"`
}

type routeVector struct {
	Key        string `json:"key"`
	UTF8Hex    string `json:"utf8Hex"`
	ShardCount int    `json:"shardCount"`
	Shard      int    `json:"shard"`
}

func loadVectors(tb testing.TB) vectorFile {
	tb.Helper()
	data, err := os.ReadFile("testdata/routev1-vectors.json")
	if err != nil {
		tb.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(data, &vf); err != nil {
		tb.Fatalf("parse vectors: %v", err)
	}
	if len(vf.Vectors) == 0 || len(vf.Slots) == 0 {
		tb.Fatalf("vector file has %d vectors and %d slots; want both non-empty", len(vf.Vectors), len(vf.Slots))
	}
	return vf
}

func TestRouteVectors(t *testing.T) {
	vf := loadVectors(t)
	if got, want := len(vf.Vectors), 194; got != want {
		t.Errorf("vector count = %d, want %d", got, want)
	}
	for _, v := range vf.Vectors {
		t.Run(fmt.Sprintf("%q/n=%d", v.Key, v.ShardCount), func(t *testing.T) {
			if !utf8.ValidString(v.Key) {
				t.Fatalf("key %q is not valid UTF-8", v.Key)
			}
			if got := hex.EncodeToString([]byte(v.Key)); got != v.UTF8Hex {
				t.Fatalf("utf8Hex = %s, but the key's UTF-8 is %s", v.UTF8Hex, got)
			}
			raw, err := hex.DecodeString(v.UTF8Hex)
			if err != nil {
				t.Fatal(err)
			}
			got, err := routing.RouteV1(raw, v.ShardCount)
			if err != nil || got != v.Shard {
				t.Errorf("RouteV1(%x, %d) = %d, %v; want %d", raw, v.ShardCount, got, err, v.Shard)
			}
			got, err = routing.RouteKey(v.Key, v.ShardCount)
			if err != nil || got != v.Shard {
				t.Errorf("RouteKey(%q, %d) = %d, %v; want %d", v.Key, v.ShardCount, got, err, v.Shard)
			}
		})
	}
}

func TestRouteRehashVectors(t *testing.T) {
	// Contract §4.3: unrealistic shard counts for which attempt 0 is
	// rejected, so the re-hash with the attempt-1 seed decides.
	tests := []struct {
		name       string
		key        string
		shardCount int
		want       int
	}{
		{"k1/n=1431655766", "k1", 1431655766, 599588056},
		{"k2/n=1431655766", "k2", 1431655766, 246537056},
		{"k1/n=1000000007", "k1", 1000000007, 599588056},
		{"k16/n=1000000007", "k16", 1000000007, 766977635},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			limit := uint64(1)<<32 - (uint64(1)<<32)%uint64(tt.shardCount)
			if h0 := routing.Murmur3_32([]byte(tt.key), 0); uint64(h0) < limit {
				t.Fatalf("attempt-0 hash %d < limit %d: the vector does not exercise the re-hash", h0, limit)
			}
			got, err := routing.RouteKey(tt.key, tt.shardCount)
			if err != nil || got != tt.want {
				t.Errorf("RouteKey(%q, %d) = %d, %v; want %d", tt.key, tt.shardCount, got, err, tt.want)
			}
			got, err = routing.RouteV1([]byte(tt.key), tt.shardCount)
			if err != nil || got != tt.want {
				t.Errorf("RouteV1(%q, %d) = %d, %v; want %d", tt.key, tt.shardCount, got, err, tt.want)
			}
		})
	}
}

func TestAttemptSeeds(t *testing.T) {
	// Contract §4.2 note (e): seeds of attempts 1..5 as signed int32.
	want := []int32{-68075478, 1085422463, 847579505, 1889779975, 236698494}
	if got := routing.AttemptSeed(0); got != 0 {
		t.Errorf("seed of attempt 0 = %d, want 0", got)
	}
	for i, w := range want {
		attempt := uint32(i + 1)
		t.Run(fmt.Sprintf("attempt=%d", attempt), func(t *testing.T) {
			if got := int32(routing.AttemptSeed(attempt)); got != w {
				t.Errorf("AttemptSeed(%d) = %d, want %d", attempt, got, w)
			}
			le := binary.LittleEndian.AppendUint32(nil, attempt)
			if got := int32(routing.Murmur3_32(le, 0)); got != w {
				t.Errorf("Murmur3_32(le32(%d), 0) = %d, want %d", attempt, got, w)
			}
		})
	}
}

// seedAttempt1 is the attempt-1 seed, int32 -68075478, as a uint32.
var seedAttempt1 = func() uint32 { s := int32(-68075478); return uint32(s) }()

func TestMurmur3Sanity(t *testing.T) {
	tests := []struct {
		name string
		data string
		seed uint32
		want uint32
	}{
		{"empty", "", 0, 0},
		{"hello", "hello", 0, 613153351},
		// H0 column of the contract's §4.3 table: every tail length.
		{"a", "a", 0, 1009084850},
		{"ab", "ab", 0, 2613040991},
		{"abc", "abc", 0, 3017643002},
		{"abcd", "abcd", 0, 1139631978},
		{"order-123", "order-123", 0, 2913866941},
		{"20 bytes", "0123456789abcdef0123", 0, 673364213},
		{"NUL", "\x00", 0, 1364076727},
		{"emoji", "😀", 0, 3199479546},
		// Contract §4.3 re-hash table: attempt-0 and attempt-1 hashes.
		{"k1/seed0", "k1", 0, 4257636394},
		{"k1/seed1", "k1", seedAttempt1, 599588056},
		{"k2/seed1", "k2", seedAttempt1, 1678192822},
		{"k16/seed1", "k16", seedAttempt1, 2766977649},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := routing.Murmur3_32([]byte(tt.data), tt.seed); got != tt.want {
				t.Errorf("Murmur3_32(%q, %d) = %d, want %d", tt.data, tt.seed, got, tt.want)
			}
		})
	}
}

func TestRouteKeySanity(t *testing.T) {
	if got, err := routing.RouteKey("order-123", 10); err != nil || got != 1 {
		t.Errorf("RouteKey(order-123, 10) = %d, %v; want 1", got, err)
	}
}

// hashSpace64 is 2^32 as a variable, so that converting it to int compiles
// on 32-bit platforms (where the tests using it are skipped).
var hashSpace64 = uint64(1) << 32

func TestRouteShardCountErrors(t *testing.T) {
	tests := []struct {
		name       string
		shardCount int
		wantErr    error
	}{
		{"zero", 0, routing.ErrNoShards},
		{"negative", -1, routing.ErrNoShards},
		{"min int", math.MinInt, routing.ErrNoShards},
	}
	if math.MaxInt > 1<<32 {
		big := int(hashSpace64) + 1 // only reached on 64-bit platforms
		tests = append(tests, struct {
			name       string
			shardCount int
			wantErr    error
		}{"2^32+1", big, routing.ErrTooManyShards})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := routing.RouteKey("order-123", tt.shardCount); !errors.Is(err, tt.wantErr) || got != 0 {
				t.Errorf("RouteKey(order-123, %d) = %d, %v; want 0, %v", tt.shardCount, got, err, tt.wantErr)
			}
			if got, err := routing.RouteV1([]byte("order-123"), tt.shardCount); !errors.Is(err, tt.wantErr) || got != 0 {
				t.Errorf("RouteV1(order-123, %d) = %d, %v; want 0, %v", tt.shardCount, got, err, tt.wantErr)
			}
		})
	}
}

func TestRouteFullHashSpace(t *testing.T) {
	if math.MaxInt <= 1<<32 {
		t.Skip("shardCount 2^32 needs a 64-bit int")
	}
	// With shardCount = 2^32 nothing is rejected and the shard is the hash.
	n := int(hashSpace64)
	if got, err := routing.RouteKey("hello", n); err != nil || got != 613153351 {
		t.Errorf("RouteKey(hello, 2^32) = %d, %v; want 613153351", got, err)
	}
}

func TestCRC16(t *testing.T) {
	tests := []struct {
		name string
		data string
		want uint16
	}{
		{"empty", "", 0},
		{"check value", "123456789", 0x31C3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := routing.CRC16([]byte(tt.data)); got != tt.want {
				t.Errorf("CRC16(%q) = %#04x, want %#04x", tt.data, got, tt.want)
			}
		})
	}
}

func TestSlotVectors(t *testing.T) {
	vf := loadVectors(t)
	for key, want := range vf.Slots {
		t.Run(key, func(t *testing.T) {
			if got := routing.Slot(key); got != want {
				t.Errorf("Slot(%q) = %d, want %d", key, got, want)
			}
		})
	}
}

func TestSlot(t *testing.T) {
	tests := []struct {
		name string
		key  string
		want int
	}{
		{"foo", "foo", 12182},
		{"stream key orders:0", routing.StreamKey("orders", 0), 8578},
		{"stream key create-order:7", routing.StreamKey("create-order", 7), 4879},
		// Hash tags, with the examples of the Redis Cluster specification.
		{"tag", "{user1000}.following", routing.Slot("user1000")},
		{"same tag", "{user1000}.followers", routing.Slot("user1000")},
		{"empty tag hashes whole key", "foo{}{bar}", int(routing.CRC16([]byte("foo{}{bar}")) & 16383)},
		{"tag up to first close", "foo{{bar}}zap", routing.Slot("{bar")},
		{"first tag only", "foo{bar}{zap}", routing.Slot("bar")},
		{"tag foo", "x{foo}y", 12182},
		{"unclosed brace", "foo{bar", int(routing.CRC16([]byte("foo{bar")) & 16383)},
		{"close before open", "}foo{", int(routing.CRC16([]byte("}foo{")) & 16383)},
		{"empty key", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := routing.Slot(tt.key)
			if got != tt.want {
				t.Errorf("Slot(%q) = %d, want %d", tt.key, got, tt.want)
			}
			if got < 0 || got >= routing.SlotCount {
				t.Errorf("Slot(%q) = %d, outside [0, %d)", tt.key, got, routing.SlotCount)
			}
		})
	}
}
