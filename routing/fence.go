package routing

// Ordered resharding (ordering KEY): where a shard's fence lives and which
// shards a layout change moves keys between.

// FenceField is the name of the entry field a fenced publish adds: the
// routing metadata version the producer published with.
const FenceField = "_rsc_rv"

// FenceKey is the Redis hash holding a shard stream's fences, one field per
// consumer group: "{" + streamKey + "}:fence", in the stream's cluster slot
// (stream keys carry no braces; see ValidatePrefix).
func FenceKey(streamKey string) string {
	return "{" + streamKey + "}:fence"
}

// StreamFenceField is the field of a fence hash (FenceKey) that holds the
// shard's stream fence: a stream metadata version, for producers that route by
// stream rather than by consumer group. Every cutover of an ordered group of a
// stream with metadata raises it with the group's own field. No consumer group
// can be named "*" (ValidateName refuses it), so it never collides with one.
const StreamFenceField = "*"

// powerOfTwo reports whether n is a positive power of two.
func powerOfTwo(n int) bool { return n > 0 && n&(n-1) == 0 }

// Sources lists the shards of a from-shard layout whose keys can move to
// shard target of a to-shard layout (target itself excluded), in increasing
// order. With both counts powers of two, routeV1 never re-hashes, so a key on
// shard s moves to t only if s ≡ t (mod min(from, to)); otherwise any shard
// can send keys to any other (the re-hash of rejected hashes is uniform).
func Sources(from, to, target int) []int {
	if from <= 0 || target < 0 || target >= to {
		return nil
	}
	var out []int
	if powerOfTwo(from) && powerOfTwo(to) {
		m := min(from, to)
		for s := target % m; s < from; s += m {
			if s != target {
				out = append(out, s)
			}
		}
		return out
	}
	for s := 0; s < from; s++ {
		if s != target {
			out = append(out, s)
		}
	}
	return out
}

// LosesKeys reports whether shard s of a from-shard layout has keys that
// route elsewhere in a to-shard layout: the shards a layout change fences.
func LosesKeys(from, to, s int) bool {
	if s < 0 || s >= from {
		return false
	}
	if s >= to {
		return true
	}
	if powerOfTwo(from) && powerOfTwo(to) {
		return to > from // doubling splits every shard; halving keeps s < to whole
	}
	return from != to
}
