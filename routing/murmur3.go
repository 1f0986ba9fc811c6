package routing

import "math/bits"

// Murmur3_32 returns the standard MurmurHash3_x86_32 hash of data with the
// given seed: little-endian 4-byte blocks, tail bytes little-endian,
// finalised with h ^= len(data) and fmix32. (The underscore in the name
// follows the wire contract.)
func Murmur3_32(data []byte, seed uint32) uint32 {
	return murmur3(data, seed)
}

// murmur3 is Murmur3_32 for both strings and byte slices, so that routing a
// string key does not copy it.
func murmur3[T string | []byte](data T, seed uint32) uint32 {
	const (
		c1 = 0xcc9e2d51
		c2 = 0x1b873593
	)
	h := seed
	n := len(data)
	end := n &^ 3
	for i := 0; i < end; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	var k uint32
	switch n & 3 {
	case 3:
		k ^= uint32(data[end+2]) << 16
		fallthrough
	case 2:
		k ^= uint32(data[end+1]) << 8
		fallthrough
	case 1:
		k ^= uint32(data[end])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(n)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}
