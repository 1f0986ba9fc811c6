package routing

// hashSpace is 2^32, the size of the Murmur3_32 output space.
const hashSpace = uint64(1) << 32

// RouteKey returns the routeV1 shard index, in [0, shardCount), of a string
// partition key, hashed as its UTF-8 bytes. It is RouteV1([]byte(partitionKey),
// shardCount) without the copy.
func RouteKey(partitionKey string, shardCount int) (int, error) {
	return route(partitionKey, shardCount)
}

// RouteV1 returns the routeV1 shard index, in [0, shardCount), of a
// partition key given as raw bytes.
//
// The hash h = Murmur3_32(partitionKey, seed) is accepted when it is below
// limit = 2^32 - 2^32 mod shardCount, and the result is h mod shardCount;
// otherwise the key is re-hashed with the next seed, so that every shard is
// equally likely. The seed of attempt 0 is 0, that of attempt i > 0 is
// Murmur3_32 of the 4 little-endian bytes of i, with seed 0.
//
// It returns ErrNoShards if shardCount <= 0 and ErrTooManyShards if
// shardCount > 2^32.
func RouteV1(partitionKey []byte, shardCount int) (int, error) {
	return route(partitionKey, shardCount)
}

func route[T string | []byte](key T, shardCount int) (int, error) {
	if shardCount <= 0 {
		return 0, ErrNoShards
	}
	n := uint64(shardCount)
	if n > hashSpace {
		return 0, ErrTooManyShards
	}
	limit := hashSpace - hashSpace%n
	for attempt := uint32(0); ; attempt++ {
		h := uint64(murmur3(key, attemptSeed(attempt)))
		if h < limit {
			return int(h % n), nil
		}
	}
}

// attemptSeed returns the Murmur3_32 seed of re-hash attempt number attempt.
func attemptSeed(attempt uint32) uint32 {
	if attempt == 0 {
		return 0
	}
	b := [4]byte{byte(attempt), byte(attempt >> 8), byte(attempt >> 16), byte(attempt >> 24)}
	return murmur3(b[:], 0)
}
