package projection

import (
	"math/bits"
	"slices"
	"sort"
)

// targetIndex is the part of the member index about the target assignment
// of live members: their ids by target size (sorted), the live owners of each
// shard, and the entries that are not settled (a live member without an
// entry, an entry of a member that is not live). With it an assignor finds
// the least and the most loaded member, and what a join or a leave moves,
// without looking at every member (TargetIndex).
type targetIndex struct {
	loads  map[int][]string // target size -> sorted ids of live members with an entry
	owners map[int][]string // shard -> sorted ids of live members whose target holds it
	owned  []uint64         // bit s: some live member's target holds shard s
	// dups counts the shards in more than one live target, odd the negative
	// shards in live targets: an assignor cannot trust the index then.
	dups, odd int
	unsettled map[string]struct{}
	// bulk: the index is being built; the sorted lists are appended to and
	// sorted once (sortBulk).
	bulk bool
}

func newTargetIndex() targetIndex {
	return targetIndex{loads: map[int][]string{}, owners: map[int][]string{}, unsettled: map[string]struct{}{}}
}

// sortBulk sorts the lists a bulk build appended to and counts the shards
// in two live targets.
func (x *targetIndex) sortBulk() {
	for _, l := range x.loads {
		slices.Sort(l)
	}
	x.dups = 0
	for _, o := range x.owners {
		slices.Sort(o)
		if len(o) > 1 {
			x.dups++
		}
	}
}

func insertSorted(l []string, id string) ([]string, bool) {
	i, found := slices.BinarySearch(l, id)
	if found {
		return l, false
	}
	return slices.Insert(l, i, id), true
}

func deleteSorted(l []string, id string) ([]string, bool) {
	i, found := slices.BinarySearch(l, id)
	if !found {
		return l, false
	}
	return slices.Delete(l, i, i+1), true
}

func (x *targetIndex) add(id string, live bool, target []int, has bool) {
	if live != has {
		x.unsettled[id] = struct{}{}
	}
	if !live || !has {
		return
	}
	if x.bulk {
		x.loads[len(target)] = append(x.loads[len(target)], id)
	} else {
		l, added := insertSorted(x.loads[len(target)], id)
		if !added {
			return
		}
		x.loads[len(target)] = l
	}
	for _, s := range target {
		if s < 0 {
			x.odd++
			continue
		}
		if x.bulk {
			x.owners[s] = append(x.owners[s], id)
		} else {
			o, added := insertSorted(x.owners[s], id)
			if !added {
				continue
			}
			x.owners[s] = o
			if len(o) == 2 {
				x.dups++
			}
		}
		for len(x.owned) <= s/64 {
			x.owned = append(x.owned, 0)
		}
		x.owned[s/64] |= 1 << (s % 64)
	}
}

// remove takes out what add put in (nothing when it is not there: a member
// touched twice by one event).
func (x *targetIndex) remove(id string, live bool, target []int, has bool) {
	delete(x.unsettled, id)
	if !live || !has {
		return
	}
	l, removed := deleteSorted(x.loads[len(target)], id)
	if !removed {
		return
	}
	if len(l) == 0 {
		delete(x.loads, len(target))
	} else {
		x.loads[len(target)] = l
	}
	for _, s := range target {
		if s < 0 {
			x.odd--
			continue
		}
		o, gone := deleteSorted(x.owners[s], id)
		if !gone {
			continue
		}
		if len(o) == 1 {
			x.dups--
		}
		if len(o) == 0 {
			delete(x.owners, s)
			x.owned[s/64] &^= 1 << (s % 64)
		} else {
			x.owners[s] = o
		}
	}
}

// LiveCount is the number of live members.
func (g *Group) LiveCount() int {
	if l := g.lay; l != nil {
		n := l.base.LiveCount()
		for id, m := range l.changedMembers() {
			if b := l.base.members[id]; b != nil && b.Live() {
				n--
			}
			if m != nil && m.Live() {
				n++
			}
		}
		return n
	}
	if g.ix != nil {
		return len(g.ix.live)
	}
	n := 0
	for _, m := range g.members {
		if m.Live() {
			n++
		}
	}
	return n
}

// TargetIndex is what an assignor that touches only what moves asks of a
// group's target assignment (commands' reconcile). It speaks for the settled
// members: live, with an entry, neither changed by an overlay's records nor
// listed by Unsettled; their target is Target(id) and their load its length.
type TargetIndex struct {
	g    *Group
	base *memberIndex
	lay  *layer
	// dirty is what the layer wrote (members or targets), computed once;
	// loads the target sizes the base index has, ascending.
	dirty map[string]struct{}
	loads []int
}

// TargetIndex returns the group's target index, or false when it has none
// to trust (a group built outside this package, or a target assignment that
// gives a shard to two live members or lists a negative one): the caller then
// computes the assignment from the whole target.
func (g *Group) TargetIndex() (TargetIndex, bool) {
	base, lay := g, g.lay
	if lay != nil {
		base = lay.base
	}
	if base.ix == nil || base.ix.targets.dups > 0 || base.ix.targets.odd > 0 {
		return TargetIndex{}, false
	}
	x := TargetIndex{g: g, base: base.ix, lay: lay, loads: make([]int, 0, len(base.ix.targets.loads))}
	if lay != nil {
		x.dirty = lay.dirtyIDs()
	}
	for l := range base.ix.targets.loads {
		x.loads = append(x.loads, l)
	}
	sort.Ints(x.loads)
	return x, true
}

func (x TargetIndex) settled(id string) bool {
	if _, d := x.dirty[id]; d {
		return false
	}
	_, unsettled := x.base.targets.unsettled[id]
	return !unsettled
}

// Unsettled lists, sorted, the ids whose entry the index does not speak for:
// live members without an entry, entries of members that are not live, and
// every member or entry the overlay changed.
func (x TargetIndex) Unsettled() []string {
	set := make(map[string]struct{}, len(x.base.targets.unsettled)+len(x.dirty))
	for id := range x.base.targets.unsettled {
		set[id] = struct{}{}
	}
	for id := range x.dirty {
		set[id] = struct{}{}
	}
	return sortedKeys(set)
}

// Owners lists, sorted, the settled members whose target holds shard s.
func (x TargetIndex) Owners(s int) []string {
	owners := x.base.targets.owners[s]
	for i, id := range owners {
		if !x.settled(id) {
			// Copy only when one must be left out (rare: a changed member).
			out := append([]string(nil), owners[:i]...)
			for _, o := range owners[i+1:] {
				if x.settled(o) {
					out = append(out, o)
				}
			}
			return out
		}
	}
	return owners
}

// OwnedFrom lists, ascending, the shards at or above from that a settled
// member's target holds.
func (x TargetIndex) OwnedFrom(from int) []int {
	var out []int
	x.eachOwned(from, func(s int) {
		if len(x.Owners(s)) > 0 {
			out = append(out, s)
		}
	})
	return out
}

// FreeBelow lists, ascending, the shards below n that no settled member's
// target holds.
func (x TargetIndex) FreeBelow(n int) []int {
	owned := x.base.targets.owned
	var out []int
	for w := 0; w*64 < n; w++ {
		free := ^uint64(0)
		if w < len(owned) {
			free = ^owned[w]
		}
		if end := n - w*64; end < 64 {
			free &= (1 << end) - 1
		}
		for free != 0 {
			b := bits.TrailingZeros64(free)
			out = append(out, w*64+b)
			free &^= 1 << b
		}
	}
	if x.lay == nil {
		return out
	}
	// Shards whose owners in the base are all members the overlay changed.
	added := false
	for id := range x.dirty {
		bm := x.lay.base.members[id]
		if bm == nil || !bm.Live() {
			continue
		}
		for _, s := range x.lay.base.targets[id] {
			if s >= 0 && s < n && len(x.Owners(s)) == 0 {
				out = append(out, s)
				added = true
			}
		}
	}
	if added {
		out = SortedInts(out)
	}
	return out
}

// eachOwned calls fn with every shard at or above from that some live
// target holds in the base index, ascending.
func (x TargetIndex) eachOwned(from int, fn func(int)) {
	owned := x.base.targets.owned
	from = max(from, 0)
	for w := from / 64; w < len(owned); w++ {
		word := owned[w]
		if w == from/64 {
			word &^= (1 << (from % 64)) - 1
		}
		for word != 0 {
			b := bits.TrailingZeros64(word)
			fn(w*64 + b)
			word &^= 1 << b
		}
	}
}

// First is the settled member first in load order that skip does not
// reject: the least loaded (smallest id among equals), or with most the most
// loaded (smallest id among equals); false when there is none.
func (x TargetIndex) First(most bool, skip func(id string) bool) (id string, load int, ok bool) {
	for i := range x.loads {
		l := x.loads[i]
		if most {
			l = x.loads[len(x.loads)-1-i]
		}
		for _, id := range x.base.targets.loads[l] {
			if x.settled(id) && !skip(id) {
				return id, l, true
			}
		}
	}
	return "", 0, false
}
