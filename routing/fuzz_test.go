package routing_test

import (
	"encoding/binary"
	"math/big"
	"strings"
	"testing"

	"github.com/rscoord/rsc/routing"
)

// The naive implementations below are deliberately written differently
// from the package's: 64-bit arithmetic with explicit masking, blocks
// assembled byte by byte with multiplication, math/big for the rejection
// bound and the modulo, recursion instead of a loop, and a bitwise CRC.

const mask32 = 0xffffffff

func naiveRotl(x uint64, r uint) uint64 {
	x &= mask32
	return (x<<r | x>>(32-r)) & mask32
}

func naiveMurmur(data []byte, seed uint32) uint32 {
	h := uint64(seed)
	mix := func(k uint64) uint64 {
		k = k * 0xcc9e2d51 & mask32
		k = naiveRotl(k, 15)
		return k * 0x1b873593 & mask32
	}
	var block uint64
	var weight uint64 = 1
	filled := 0
	for _, b := range data {
		block += uint64(b) * weight
		weight *= 256
		filled++
		if filled == 4 {
			h ^= mix(block)
			h = naiveRotl(h, 13)
			h = (h*5 + 0xe6546b64) & mask32
			block, weight, filled = 0, 1, 0
		}
	}
	if filled > 0 {
		h ^= mix(block)
	}
	h ^= uint64(len(data)) & mask32
	h ^= h >> 16
	h = h * 0x85ebca6b & mask32
	h ^= h >> 13
	h = h * 0xc2b2ae35 & mask32
	h ^= h >> 16
	return uint32(h)
}

func naiveRoute(key []byte, shardCount int) int {
	space := new(big.Int).Lsh(big.NewInt(1), 32)
	n := big.NewInt(int64(shardCount))
	limit := new(big.Int).Sub(space, new(big.Int).Mod(space, n))
	var try func(attempt uint32) int
	try = func(attempt uint32) int {
		var seed uint32
		if attempt > 0 {
			seed = naiveMurmur(binary.LittleEndian.AppendUint32(nil, attempt), 0)
		}
		h := new(big.Int).SetUint64(uint64(naiveMurmur(key, seed)))
		if h.Cmp(limit) >= 0 {
			return try(attempt + 1)
		}
		return int(new(big.Int).Mod(h, n).Int64())
	}
	return try(0)
}

func naiveCRC16(data []byte) uint16 {
	crc := 0
	for _, b := range data {
		for bit := 7; bit >= 0; bit-- {
			in := int(b>>bit) & 1
			top := crc >> 15 & 1
			crc = crc << 1 & 0xffff
			if in^top == 1 {
				crc ^= 0x1021
			}
		}
	}
	return uint16(crc)
}

func naiveSlot(key string) int {
	input := key
	if _, afterOpen, ok := strings.Cut(key, "{"); ok {
		if tag, _, ok := strings.Cut(afterOpen, "}"); ok && tag != "" {
			input = tag
		}
	}
	return int(naiveCRC16([]byte(input))) % 16384
}

// fuzzShardCount maps any uint32 onto [1, 2^31).
func fuzzShardCount(s uint32) int {
	return int(s%(1<<31-1)) + 1
}

func TestNaiveImplementationsAgreeWithVectors(t *testing.T) {
	vf := loadVectors(t)
	for _, v := range vf.Vectors {
		if got := naiveRoute([]byte(v.Key), v.ShardCount); got != v.Shard {
			t.Errorf("naiveRoute(%q, %d) = %d, want %d", v.Key, v.ShardCount, got, v.Shard)
		}
	}
	for key, want := range vf.Slots {
		if got := naiveSlot(key); got != want {
			t.Errorf("naiveSlot(%q) = %d, want %d", key, got, want)
		}
	}
	if got := naiveCRC16([]byte("123456789")); got != 0x31C3 {
		t.Errorf("naiveCRC16(123456789) = %#04x, want 0x31c3", got)
	}
}

func FuzzRouteV1(f *testing.F) {
	for _, v := range loadVectors(f).Vectors {
		f.Add([]byte(v.Key), uint32(v.ShardCount-1)) // fuzzShardCount maps it back to v.ShardCount
	}
	f.Add([]byte("k16"), uint32(1000000006))
	f.Add([]byte("order-123"), uint32(1<<31-2)) // shardCount 2^31-1
	f.Add([]byte("order-123"), uint32(1<<31))   // shardCount 2
	f.Fuzz(func(t *testing.T, key []byte, s uint32) {
		n := fuzzShardCount(s)
		got, err := routing.RouteV1(key, n)
		if err != nil {
			t.Fatalf("RouteV1(%x, %d) error: %v", key, n, err)
		}
		if got < 0 || got >= n {
			t.Fatalf("RouteV1(%x, %d) = %d, outside [0, %d)", key, n, got, n)
		}
		if want := naiveRoute(key, n); got != want {
			t.Fatalf("RouteV1(%x, %d) = %d, naive = %d", key, n, got, want)
		}
		if gotKey, err := routing.RouteKey(string(key), n); err != nil || gotKey != got {
			t.Fatalf("RouteKey(%q, %d) = %d, %v; RouteV1 = %d", key, n, gotKey, err, got)
		}
		if h, want := routing.Murmur3_32(key, s), naiveMurmur(key, s); h != want {
			t.Fatalf("Murmur3_32(%x, %d) = %d, naive = %d", key, s, h, want)
		}
	})
}

func FuzzSlot(f *testing.F) {
	for key := range loadVectors(f).Slots {
		f.Add(key)
	}
	for _, key := range []string{"", "foo", "123456789", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "}{", "{"} {
		f.Add(key)
	}
	f.Fuzz(func(t *testing.T, key string) {
		got := routing.Slot(key)
		if got < 0 || got >= routing.SlotCount {
			t.Fatalf("Slot(%q) = %d, outside [0, %d)", key, got, routing.SlotCount)
		}
		if want := naiveSlot(key); got != want {
			t.Fatalf("Slot(%q) = %d, naive = %d", key, got, want)
		}
		if crc, want := routing.CRC16([]byte(key)), naiveCRC16([]byte(key)); crc != want {
			t.Fatalf("CRC16(%q) = %#04x, naive = %#04x", key, crc, want)
		}
	})
}
