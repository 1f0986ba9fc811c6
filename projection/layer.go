package projection

import (
	"iter"

	"github.com/rscoord/rsc/internal/cow"
)

// layer is what a layered group (an Overlay's copy of one of the State's
// groups) changed: the members and targets its records touched, each copied
// from the base on first write. The base is the State's group, which nobody
// changes while the overlay lives (the writer holds it). Reads fall through
// to the base for everything the layer did not touch, so a layered group
// costs what its records changed.
//
// The fold replaces a member's slices (Current, Revoking, Granted) and a
// target whole and never writes into them, so a member's copy is shallow.
type layer struct {
	base *Group
	// members and targets are layers over the base's: a member the layer
	// wrote is a copy, a new member, or deleted.
	members cow.Map[string, *Member]
	targets cow.Map[string, []int]
	// ownReshardings are the reshardings the layer copied (by id).
	ownReshardings map[string]bool
}

// layered is the copy an Overlay folds into: it shares g's members and
// targets and copies the small parts the fold changes in place (the slices of
// reshardings and barriers; each resharding on first write).
func layered(g *Group) *Group {
	c := *g
	c.members, c.targets, c.ix = nil, nil, nil
	c.lay = &layer{base: g, members: cow.Over(g.members), targets: cow.Over(g.targets), ownReshardings: map[string]bool{}}
	c.Reshardings = append([]*Resharding(nil), g.Reshardings...)
	c.Barriers = append([]*Barrier(nil), g.Barriers...)
	return &c
}

// memberChanged reports whether the layer wrote member id.
func (l *layer) memberChanged(id string) bool { return l.members.Edited(id) }

// dirty reports whether the layer wrote member id or its target: the base's
// index no longer speaks for it.
func (l *layer) dirty(id string) bool { return l.members.Edited(id) || l.targets.Edited(id) }

// changedMembers yields the members the layer wrote: a copy, a new member, or
// nil for one it removed.
func (l *layer) changedMembers() iter.Seq2[string, *Member] {
	return func(yield func(string, *Member) bool) {
		for id, e := range l.members.Edits() {
			if !yield(id, e.Value) {
				return
			}
		}
	}
}

// dirtyIDs is every id the layer wrote a member or target of.
func (l *layer) dirtyIDs() map[string]struct{} {
	out := make(map[string]struct{}, l.members.EditCount()+l.targets.EditCount())
	for id := range l.members.Edits() {
		out[id] = struct{}{}
	}
	for id := range l.targets.Edits() {
		out[id] = struct{}{}
	}
	return out
}

// Member returns the member with that id, or nil.
func (g *Group) Member(id string) *Member {
	if l := g.lay; l != nil {
		m, _ := l.members.Get(id)
		return m
	}
	return g.members[id]
}

// MemberCount is the number of member records.
func (g *Group) MemberCount() int {
	if l := g.lay; l != nil {
		return l.members.Len()
	}
	return len(g.members)
}

// EachMember yields every member by id, in no particular order.
func (g *Group) EachMember() iter.Seq2[string, *Member] {
	return func(yield func(string, *Member) bool) {
		if l := g.lay; l != nil {
			l.members.All()(yield)
			return
		}
		for id, m := range g.members {
			if !yield(id, m) {
				return
			}
		}
	}
}

// TargetOf is the member's target and whether the assignment has an entry
// for it (every live member has one, possibly empty).
func (g *Group) TargetOf(id string) ([]int, bool) {
	if l := g.lay; l != nil {
		return l.targets.Get(id)
	}
	t, ok := g.targets[id]
	return t, ok
}

// EachTarget yields every entry of the target assignment, in no particular
// order.
func (g *Group) EachTarget() iter.Seq2[string, []int] {
	return func(yield func(string, []int) bool) {
		if l := g.lay; l != nil {
			l.targets.All()(yield)
			return
		}
		for id, t := range g.targets {
			if !yield(id, t) {
				return
			}
		}
	}
}

// TargetCount is the number of entries of the target assignment.
func (g *Group) TargetCount() int {
	if l := g.lay; l != nil {
		return l.targets.Len()
	}
	return len(g.targets)
}

// --- writes (the fold's) ---

// memberForWrite is member id to change in place (nil when none): in a
// layered group the base's member is copied into the layer first.
func memberForWrite(g *Group, id string) *Member {
	l := g.lay
	if l == nil {
		return g.members[id]
	}
	if m, ok := l.members.Local(id); ok {
		return m
	}
	m, _ := l.members.Get(id)
	if m == nil {
		return nil
	}
	mc := *m
	l.members.Set(id, &mc)
	return &mc
}

// putMember adds a member.
func putMember(g *Group, m *Member) {
	if l := g.lay; l != nil {
		l.members.Set(m.ID, m)
		return
	}
	g.members[m.ID] = m
}

// deleteMember removes a member record.
func deleteMember(g *Group, id string) {
	if l := g.lay; l != nil {
		l.members.Delete(id)
		return
	}
	delete(g.members, id)
}

// setTarget sets a member's target.
func setTarget(g *Group, id string, t []int) {
	if l := g.lay; l != nil {
		l.targets.Set(id, t)
		return
	}
	g.targets[id] = t
}

// deleteTarget removes a member's entry from the target assignment.
func deleteTarget(g *Group, id string) {
	if l := g.lay; l != nil {
		l.targets.Delete(id)
		return
	}
	delete(g.targets, id)
}

// replaceTargets replaces the whole target assignment (assignment.computed,
// which only old logs hold): a layered group becomes flat first.
func replaceTargets(g *Group, t map[string][]int) {
	flattened := g.lay != nil
	if flattened {
		flatten(g)
	}
	g.targets = t
	if g.ix != nil || flattened {
		buildIndex(g)
	}
}

// flatten turns a layered group into a flat one holding every member and
// target (the members shared with the base are copied).
func flatten(g *Group) {
	l := g.lay
	if l == nil {
		return
	}
	members := make(map[string]*Member, g.MemberCount())
	for _, m := range g.EachMember() {
		mc := *m
		members[mc.ID] = &mc
	}
	targets := make(map[string][]int, g.TargetCount())
	for id, t := range g.EachTarget() {
		targets[id] = t
	}
	for i, r := range g.Reshardings {
		if !l.ownReshardings[r.ReshardingID] {
			g.Reshardings[i] = r.clone()
		}
	}
	g.lay, g.members, g.targets = nil, members, targets
}

// reshardingForWrite is the resharding to change in place (nil when none): in
// a layered group it is copied on first write.
func reshardingForWrite(g *Group, id string) *Resharding {
	l := g.lay
	for i, r := range g.Reshardings {
		if r.ReshardingID != id {
			continue
		}
		if l != nil && !l.ownReshardings[id] {
			r = r.clone()
			g.Reshardings[i] = r
			l.ownReshardings[id] = true
		}
		return r
	}
	return nil
}
