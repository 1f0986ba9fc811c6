package projection

import (
	"slices"
	"sort"
	"strings"
	"time"
)

// memberIndex is what the fold keeps beside a group's members so that the
// questions a decision asks about one member or one shard cost what the answer
// costs, not the size of the group: who holds a shard, which members are
// live, which are still active (not a terminal record), which hold shards
// outside their target. It is derived from the members and targets alone, is never
// encoded (snapshots and State.Encode do not change) and is rebuilt whenever a
// group is restored or cloned, so the same log always gives the same index.
//
// The fold keeps it current: before an event changes a member or its target
// the member's entries are taken out (touch), and once the event is folded
// they are put back from its new state (settle).
type memberIndex struct {
	live    map[string]struct{}
	active  map[string]struct{}
	outside map[string]struct{}
	holders map[int]map[string]struct{}
	// activeBy is the active members by the principal that joined them
	// (ActiveCountOf), principalOf the principal each was added under.
	activeBy    map[string]map[string]struct{}
	principalOf map[string]string
	targets     targetIndex
	// terminal is the terminal records (not Active), oldest first: by
	// UpdatedAt, then id (pruning and making room take them in this order).
	terminal []terminalRecord
	// touched are the ids taken out by the event being folded.
	touched []string
	// bulk: buildIndex fills the sorted lists unsorted.
	bulk bool
}

func newMemberIndex() *memberIndex {
	return &memberIndex{live: map[string]struct{}{}, active: map[string]struct{}{}, outside: map[string]struct{}{}, holders: map[int]map[string]struct{}{},
		activeBy: map[string]map[string]struct{}{}, principalOf: map[string]string{}, targets: newTargetIndex()}
}

// buildIndex indexes every member and target entry of a flat group.
// Its sorted lists are filled unsorted and sorted once at the end, so a
// group of n members is indexed in O(n log n).
func buildIndex(g *Group) {
	g.ix = newMemberIndex()
	g.ix.bulk, g.ix.targets.bulk = true, true
	for id, m := range g.members {
		t, has := g.targets[id]
		g.ix.add(id, m, t, has)
	}
	for id, t := range g.targets {
		if _, ok := g.members[id]; !ok {
			g.ix.add(id, nil, t, true)
		}
	}
	g.ix.bulk, g.ix.targets.bulk = false, false
	slices.SortFunc(g.ix.terminal, compareTerminal)
	g.ix.targets.sortBulk()
}

// terminalRecord is a terminal member record's place in the order.
type terminalRecord struct {
	at time.Time
	id string
}

func compareTerminal(a, b terminalRecord) int {
	if c := a.at.Compare(b.at); c != 0 {
		return c
	}
	return strings.Compare(a.id, b.id)
}

// Active reports whether the member is not a terminal record: it is live, or
// it left and still holds shards it owned or is revoking.
func (m *Member) Active() bool {
	return m.Live() || (m.State == MemberLeaving && (len(m.Current) > 0 || len(m.Revoking) > 0))
}

// holdsOutside reports whether a member that can hold shards lists one
// (owned or revoking) that its target does not give it.
func holdsOutside(m *Member, target []int) bool {
	if !m.CanHold() {
		return false
	}
	for _, set := range [][]int{m.Current, m.Revoking} {
		for _, s := range set {
			if !containsInt(target, s) {
				return true
			}
		}
	}
	return false
}

// HoldsOutsideTarget reports whether the member (which can hold shards)
// lists a shard, owned or revoking, outside its target: it has a shard to
// release.
func (g *Group) HoldsOutsideTarget(m *Member) bool { return holdsOutside(m, g.Target(m.ID)) }

// add indexes member id (m nil: no record) and its target entry (has: the
// assignment has one).
func (ix *memberIndex) add(id string, m *Member, target []int, has bool) {
	ix.targets.add(id, m != nil && m.Live(), target, has)
	if m == nil {
		return
	}
	if m.Live() {
		ix.live[id] = struct{}{}
	}
	if m.Active() {
		ix.active[id] = struct{}{}
		set := ix.activeBy[m.Principal]
		if set == nil {
			set = map[string]struct{}{}
			ix.activeBy[m.Principal] = set
		}
		set[id] = struct{}{}
		ix.principalOf[id] = m.Principal
	} else {
		r := terminalRecord{m.UpdatedAt, id}
		if ix.bulk {
			ix.terminal = append(ix.terminal, r)
		} else if i, found := slices.BinarySearchFunc(ix.terminal, r, compareTerminal); !found {
			ix.terminal = slices.Insert(ix.terminal, i, r)
		}
	}
	if holdsOutside(m, target) {
		ix.outside[id] = struct{}{}
	}
	if !m.CanHold() {
		return
	}
	for _, set := range [][]int{m.Current, m.Revoking, m.Granted} {
		for _, s := range set {
			h := ix.holders[s]
			if h == nil {
				h = map[string]struct{}{}
				ix.holders[s] = h
			}
			h[id] = struct{}{}
		}
	}
}

// remove takes out what add(id, m, target, has) put in; what is not there
// is skipped.
func (ix *memberIndex) remove(id string, m *Member, target []int, has bool) {
	ix.targets.remove(id, m != nil && m.Live(), target, has)
	delete(ix.live, id)
	delete(ix.active, id)
	delete(ix.outside, id)
	if p, ok := ix.principalOf[id]; ok {
		delete(ix.principalOf, id)
		if set := ix.activeBy[p]; set != nil {
			delete(set, id)
			if len(set) == 0 {
				delete(ix.activeBy, p)
			}
		}
	}
	if m == nil {
		return
	}
	if !m.Active() {
		if i, found := slices.BinarySearchFunc(ix.terminal, terminalRecord{m.UpdatedAt, id}, compareTerminal); found {
			ix.terminal = slices.Delete(ix.terminal, i, i+1)
		}
	}
	for _, set := range [][]int{m.Current, m.Revoking, m.Granted} {
		for _, s := range set {
			if h := ix.holders[s]; h != nil {
				delete(h, id)
				if len(h) == 0 {
					delete(ix.holders, s)
				}
			}
		}
	}
}

// touch takes member id's entries out of a flat group's index before the
// event being folded changes the member or its target; settle puts them
// back. A layered group (an overlay's) keeps no index.
func touch(g *Group, id string) {
	if g.ix == nil {
		return
	}
	t, has := g.targets[id]
	g.ix.remove(id, g.members[id], t, has)
	g.ix.touched = append(g.ix.touched, id)
}

// settle indexes the members the folded event touched, as they are now.
func settle(g *Group) {
	if g.ix == nil {
		return
	}
	for _, id := range g.ix.touched {
		t, has := g.targets[id]
		m := g.members[id]
		g.ix.remove(id, m, t, has) // touched twice: added once
		g.ix.add(id, m, t, has)
	}
	g.ix.touched = g.ix.touched[:0]
}

// idsWhere lists, sorted, the ids of a group's members that keep accepts: from
// the flat group's index set when it has one, else by scanning its members;
// for a layered group, the base's answer without the members the layer
// changed, plus those of the layer's members that keep accepts.
func idsWhere(g *Group, set func(*memberIndex) map[string]struct{}, keep func(*Group, *Member) bool) []string {
	if l := g.lay; l != nil {
		base := idsWhere(l.base, set, keep)
		out := make([]string, 0, len(base)+l.members.EditCount())
		for _, id := range base {
			if !l.dirty(id) {
				out = append(out, id)
			}
		}
		added := false
		for id := range l.dirtyIDs() {
			if m := g.Member(id); m != nil && keep(g, m) {
				out = append(out, id)
				added = true
			}
		}
		if added {
			sort.Strings(out)
		}
		return out
	}
	if g.ix != nil {
		return sortedKeys(set(g.ix))
	}
	var out []string
	for id, m := range g.members {
		if keep(g, m) {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// LiveMemberIDs returns the ids of ACTIVE/STARTING members, sorted.
func (g *Group) LiveMemberIDs() []string {
	return idsWhere(g, func(ix *memberIndex) map[string]struct{} { return ix.live }, func(_ *Group, m *Member) bool { return m.Live() })
}

// ActiveMemberIDs returns the ids of the members that are not terminal
// records (Member.Active), sorted: the members expiry, rebalance deadlines and
// correction rounds are about.
func (g *Group) ActiveMemberIDs() []string {
	return idsWhere(g, func(ix *memberIndex) map[string]struct{} { return ix.active }, func(_ *Group, m *Member) bool { return m.Active() })
}

// OutsideTargetIDs returns, sorted, the members that can hold shards and hold
// one outside their target (HoldsOutsideTarget).
func (g *Group) OutsideTargetIDs() []string {
	return idsWhere(g, func(ix *memberIndex) map[string]struct{} { return ix.outside }, func(g *Group, m *Member) bool { return g.HoldsOutsideTarget(m) })
}

// HoldersOf returns, sorted, the members that hold shard s (Member.Holds).
func (g *Group) HoldersOf(s int) []string {
	return idsWhere(g, func(ix *memberIndex) map[string]struct{} { return ix.holders[s] }, func(_ *Group, m *Member) bool { return m.Holds(s) })
}

// HeldByOthers reports whether any member other than memberID holds shard s.
func (g *Group) HeldByOthers(memberID string, s int) bool {
	if l := g.lay; l != nil {
		for id := range holderSet(l.base, s) {
			if id != memberID && !l.memberChanged(id) {
				return true
			}
		}
		for id, m := range l.changedMembers() {
			if id != memberID && m != nil && m.Holds(s) {
				return true
			}
		}
		return false
	}
	for id := range holderSet(g, s) {
		if id != memberID {
			return true
		}
	}
	return false
}

// holderSet is the set of members of a flat group that hold s.
func holderSet(g *Group, s int) map[string]struct{} {
	if g.ix != nil {
		return g.ix.holders[s]
	}
	out := map[string]struct{}{}
	for id, m := range g.members {
		if m.Holds(s) {
			out[id] = struct{}{}
		}
	}
	return out
}

// OldestTerminal returns up to n terminal member records (not Active), oldest
// first (by UpdatedAt, then id), that keep accepts; keep sees them in that
// order and the first it refuses ends the list (nil keep: all).
func (g *Group) OldestTerminal(n int, keep func(*Member) bool) []*Member {
	var out []*Member
	accept := func(m *Member) bool { return keep == nil || keep(m) }
	if l := g.lay; l != nil {
		// The base's order without the members the layer changed, merged
		// with the layer's terminal members.
		var mine []*Member
		for _, m := range l.changedMembers() {
			if m != nil && !m.Active() {
				mine = append(mine, m)
			}
		}
		slices.SortFunc(mine, func(a, b *Member) int {
			return compareTerminal(terminalRecord{a.UpdatedAt, a.ID}, terminalRecord{b.UpdatedAt, b.ID})
		})
		// At most l.members.EditCount() of the base's records are skipped below (the
		// layer changed them): n more than that is all the merge can take,
		// and a join into a full group costs what it prunes, not the group.
		want := -1
		if n >= 0 {
			want = n + l.members.EditCount()
		}
		base := l.base.OldestTerminal(want, nil)
		i, j := 0, 0
		for n < 0 || len(out) < n {
			for i < len(base) && l.memberChanged(base[i].ID) {
				i++
			}
			var next *Member
			switch {
			case i < len(base) && (j == len(mine) || compareTerminal(terminalRecord{base[i].UpdatedAt, base[i].ID}, terminalRecord{mine[j].UpdatedAt, mine[j].ID}) < 0):
				next = base[i]
				i++
			case j < len(mine):
				next = mine[j]
				j++
			default:
				return out
			}
			if !accept(next) {
				return out
			}
			out = append(out, next)
		}
		return out
	}
	if g.ix == nil {
		var all []*Member
		for _, m := range g.members {
			if !m.Active() {
				all = append(all, m)
			}
		}
		slices.SortFunc(all, func(a, b *Member) int {
			return compareTerminal(terminalRecord{a.UpdatedAt, a.ID}, terminalRecord{b.UpdatedAt, b.ID})
		})
		for _, m := range all {
			if (n >= 0 && len(out) >= n) || !accept(m) {
				break
			}
			out = append(out, m)
		}
		return out
	}
	for _, r := range g.ix.terminal {
		if n >= 0 && len(out) >= n {
			break
		}
		m := g.members[r.id]
		if !accept(m) {
			break
		}
		out = append(out, m)
	}
	return out
}

// RevokingShardCount is how many distinct shards members that can still hold
// them list as revoking, from the members that take part (a terminal record
// holds nothing): without copying or listing the group's members.
func (g *Group) RevokingShardCount() int {
	seen := map[int]struct{}{}
	count := func(m *Member) {
		if m != nil && m.CanHold() {
			for _, s := range m.Revoking {
				seen[s] = struct{}{}
			}
		}
	}
	if g.lay == nil && g.ix != nil {
		for id := range g.ix.active {
			count(g.members[id])
		}
		return len(seen)
	}
	for _, m := range g.EachMember() {
		count(m)
	}
	return len(seen)
}
