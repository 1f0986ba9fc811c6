package commands

import (
	"sort"

	"github.com/rscoord/rsc/events"
)

// Assign computes a sticky, balanced target assignment of shards 0..shardCount-1
// over the live members:
//   - a shard keeps its previous owner while that owner is live;
//   - unowned shards (ascending) go to the member with the fewest shards (ties: the
//     smallest id);
//   - then, while the most-loaded member has two or more shards more than the
//     least-loaded one, its highest shard moves to the least-loaded member.
//
// The result is balanced (no member more than one shard above another) and moves
// the fewest previously owned shards that balance allows. Every live member gets
// an entry, possibly empty. Capacity is deliberately not an input.
func Assign(prev map[string][]int, live []string, shardCount int) map[string][]int {
	out := make(map[string][]int, len(live))
	if len(live) == 0 {
		return out
	}
	members := append([]string(nil), live...)
	sort.Strings(members)
	isLive := make(map[string]bool, len(members))
	for _, m := range members {
		isLive[m] = true
		out[m] = []int{}
	}
	owned := make([]bool, shardCount)
	for _, m := range members {
		for _, s := range prev[m] {
			if s >= 0 && s < shardCount && !owned[s] {
				owned[s] = true
				out[m] = append(out[m], s)
			}
		}
	}
	least := func() string {
		best := members[0]
		for _, m := range members[1:] {
			if len(out[m]) < len(out[best]) {
				best = m
			}
		}
		return best
	}
	most := func() string {
		best := members[0]
		for _, m := range members[1:] {
			if len(out[m]) > len(out[best]) {
				best = m
			}
		}
		return best
	}
	for s := 0; s < shardCount; s++ {
		if !owned[s] {
			m := least()
			out[m] = append(out[m], s)
		}
	}
	for _, m := range members {
		sort.Ints(out[m])
	}
	for {
		hi, lo := most(), least()
		if len(out[hi])-len(out[lo]) <= 1 {
			break
		}
		shards := out[hi]
		moved := shards[len(shards)-1]
		out[hi] = shards[:len(shards)-1]
		out[lo] = append(out[lo], moved)
		sort.Ints(out[lo])
	}
	return out
}

// diffAssignment names what turns prev into next: the members whose target
// differs (with their new target, possibly empty) and the members prev has and
// next does not, sorted.
func diffAssignment(prev, next map[string][]int) (changed events.Targets, removed []string) {
	changed = events.Targets{}
	for id, sn := range next {
		sp, ok := prev[id]
		if !ok || !equalInts(sp, sn) {
			changed[id] = sn
		}
	}
	for id := range prev {
		if _, ok := next[id]; !ok {
			removed = append(removed, id)
		}
	}
	sort.Strings(removed)
	return changed, removed
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
