package projection

// What each principal holds across every group, for the quotas per
// principal (commands/quota.go): the member records that take part
// (Member.Active) by the principal that joined them. The State keeps the
// totals current as it applies each record, so a join asks one map, not
// every group; an Overlay answers from the State's totals and the groups its
// own records changed.

// activeOf is the principal a member record counts for, and whether it
// counts (nil and terminal records do not).
func activeOf(m *Member) (string, bool) {
	if m == nil || !m.Active() {
		return "", false
	}
	return m.Principal, true
}

// countMembers adds sign times every active member record of g to counts.
func countMembers(counts map[string]int, g *Group, sign int) {
	if g == nil {
		return
	}
	for _, m := range g.EachMember() {
		if p, ok := activeOf(m); ok {
			counts[p] += sign
			if counts[p] == 0 {
				delete(counts, p)
			}
		}
	}
}

// principalDelta is what applying one record to a group does to the
// totals: taken before the fold (the fold changes the group in place), then
// settled with the group after it.
type principalDelta struct {
	ids []string // distinct
	// before is, for each of ids, what its record counted for before the
	// fold (nil for a group the state did not have).
	before []counted
}

// counted is what a member record counts for: its principal, when it counts
// (activeOf).
type counted struct {
	principal string
	ok        bool
}

// beforeFold takes the delta of a record that changes the members ids of g
// (memberIDsOf) before it is folded; the counts are appended to buf.
func beforeFold(g *Group, ids []string, buf []counted) principalDelta {
	d := principalDelta{ids: ids}
	if len(ids) > 1 {
		d.ids = make([]string, 0, len(ids))
		seen := make(map[string]bool, len(ids))
		for _, id := range ids {
			if !seen[id] {
				seen[id] = true
				d.ids = append(d.ids, id)
			}
		}
	}
	if g == nil {
		return d
	}
	d.before = buf
	for _, id := range d.ids {
		p, ok := activeOf(g.Member(id))
		d.before = append(d.before, counted{p, ok})
	}
	return d
}

// principalCounts is, by principal, the member records that take part across
// every group.
type principalCounts map[string]int

// settle brings the totals from old (before the record) to g (after it): a
// group replaced or removed counts whole, else its changed members.
func (c principalCounts) settle(old, g *Group, d principalDelta) {
	if old != g {
		countMembers(c, old, -1)
		countMembers(c, g, +1)
		return
	}
	if g == nil {
		return
	}
	for _, was := range d.before {
		if p := was.principal; was.ok {
			c[p]--
			if c[p] == 0 {
				delete(c, p)
			}
		}
	}
	for _, id := range d.ids {
		if p, ok := activeOf(g.Member(id)); ok {
			c[p]++
		}
	}
}

// countPrincipals computes the totals from every group (a restored state).
func countPrincipals(groups map[GroupKey]*Group) principalCounts {
	c := principalCounts{}
	for _, g := range groups {
		countMembers(c, g, +1)
	}
	return c
}

// ActiveMembersOfLocked is how many member records that take part the
// principal has across every group; the caller holds the lock.
func (s *State) ActiveMembersOfLocked(principal string) int { return s.principals[principal] }

// ActiveMembersOf is how many member records that take part principal has
// across every group, as the overlay sees them.
func (o *Overlay) ActiveMembersOf(principal string) int {
	n := o.base.principals[principal]
	for k, e := range o.groups.Edits() {
		if e.Value != nil {
			n += e.Value.ActiveCountOf(principal)
		}
		if b := o.base.groups[k]; b != nil {
			n -= b.ActiveCountOf(principal)
		}
	}
	return n
}

// ActiveCountOf is how many of the group's member records that take part
// the principal joined: from the index of a flat group that has one, for a
// layered group the base's count corrected by the members the layer wrote,
// else by scanning.
func (g *Group) ActiveCountOf(principal string) int {
	if l := g.lay; l != nil {
		n := l.base.ActiveCountOf(principal)
		for id, m := range l.changedMembers() {
			if p, ok := activeOf(l.base.members[id]); ok && p == principal {
				n--
			}
			if p, ok := activeOf(m); ok && p == principal {
				n++
			}
		}
		return n
	}
	if g.ix != nil {
		return len(g.ix.activeBy[principal])
	}
	n := 0
	for _, m := range g.members {
		if p, ok := activeOf(m); ok && p == principal {
			n++
		}
	}
	return n
}
