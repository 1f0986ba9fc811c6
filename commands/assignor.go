package commands

import (
	"slices"
	"sort"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
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
		if !ok || !slices.Equal(sp, sn) {
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

// assignmentDelta is what Assign changes in the group's target assignment
// over its live members and n shards: the members whose target differs (with
// their new target, possibly empty) and the entries of members that are not
// live, sorted. It gives what diffAssignment(prev, Assign(prev, live, n))
// gives, touching only what moves (see moves); without a target index it
// computes exactly that.
func assignmentDelta(g *projection.Group, n int) (changed events.Targets, removed []string) {
	x, ok := g.TargetIndex()
	if ok {
		if changed, removed, ok = moves(g, x, n); ok {
			return changed, removed
		}
	}
	prev := make(map[string][]int, g.TargetCount())
	for id, t := range g.EachTarget() {
		prev[id] = t
	}
	return diffAssignment(prev, Assign(prev, g.LiveMemberIDs(), n))
}

// moves is Assign for a group whose target index speaks for every live
// member but a few: Assign keeps the target of a live member that holds no
// shard twice and none outside [0, n) (the index's settled members), so only
// the unsettled ids (a new or departed member, a changed entry), the owners
// of shards at or above n, and the members Assign hands a free shard to or
// moves a shard between can change. It runs Assign's steps on those alone:
// keep (their targets cut to [0, n)), fill (each free shard, ascending, to
// the least loaded member, smallest id among equals) and balance (while the
// most loaded member, smallest id among equals, has two or more shards more
// than the least loaded, its highest shard moves), asking the index for the
// least and the most loaded of the members it does not hold. false: two
// members' targets share a shard, and the caller computes from scratch.
func moves(g *projection.Group, x projection.TargetIndex, n int) (events.Targets, []string, bool) {
	work := map[string][]int{} // the live members that may change: their target so far, sorted
	var removed []string
	for _, id := range x.Unsettled() {
		m := g.Member(id)
		t, has := g.TargetOf(id)
		if m == nil || !m.Live() {
			if has {
				removed = append(removed, id)
			}
			continue
		}
		work[id] = below(t, n)
	}
	for _, s := range x.OwnedFrom(n) {
		for _, id := range x.Owners(s) {
			if _, ok := work[id]; !ok {
				work[id] = below(g.Target(id), n)
			}
		}
	}
	// Keep: a shard kept twice (the unsettled among themselves or with a
	// settled member) is Assign's first-come rule, not handled here.
	kept := make([]bool, n)
	for id, t := range work {
		for _, s := range t {
			if kept[s] {
				return nil, nil, false
			}
			kept[s] = true
			for _, o := range x.Owners(s) {
				if _, held := work[o]; !held && o != id {
					return nil, nil, false
				}
			}
		}
	}
	var free []int
	for _, s := range x.FreeBelow(n) {
		if !kept[s] {
			free = append(free, s)
		}
	}
	inWork := func(id string) bool { _, ok := work[id]; return ok }
	take := func(id string) []int {
		if t, ok := work[id]; ok {
			return t
		}
		t := append([]int{}, g.Target(id)...)
		work[id] = t
		return t
	}
	// pick is the least (or most) loaded live member, smallest id among equals.
	pick := func(most bool) (string, int, bool) {
		best, load, ok := x.First(most, inWork)
		for id, t := range work {
			l := len(t)
			if !ok || (most && l > load) || (!most && l < load) || (l == load && id < best) {
				best, load, ok = id, l, true
			}
		}
		return best, load, ok
	}
	if g.LiveCount() > 0 {
		for _, s := range free {
			lo, _, _ := pick(false)
			work[lo] = insertInt(take(lo), s)
		}
		for {
			hi, hiLoad, _ := pick(true)
			lo, loLoad, _ := pick(false)
			if hiLoad-loLoad <= 1 {
				break
			}
			shards := take(hi)
			moved := shards[len(shards)-1]
			work[hi] = shards[:len(shards)-1]
			work[lo] = insertInt(take(lo), moved)
		}
	}
	changed := events.Targets{}
	for id, t := range work {
		if p, has := g.TargetOf(id); !has || !slices.Equal(p, t) {
			changed[id] = t
		}
	}
	sort.Strings(removed)
	return changed, removed, true
}

// below is the sorted shards of t under n (a new slice).
func below(t []int, n int) []int {
	out := []int{}
	for _, s := range t {
		if s >= 0 && s < n {
			out = append(out, s)
		}
	}
	sort.Ints(out)
	return out
}

// insertInt adds s to a sorted slice of moves' own.
func insertInt(t []int, s int) []int {
	i := sort.SearchInts(t, s)
	t = append(t, 0)
	copy(t[i+1:], t[i:])
	t[i] = s
	return t
}
