package projection

import (
	"fmt"
	"time"

	"github.com/rscoord/rsc/events"
)

// apply folds one record into the state.
func (s *State) apply(rec events.Record) {
	if q, ok := rec.Event.(*events.Quarantined); ok {
		s.quarantine(rec, q)
		return
	}
	if s.quarantined.skip(rec) {
		return
	}
	if ev, ok := rec.Event.(*events.LogRestored); ok {
		// The state goes on as it is: the restore wrote it back as the
		// snapshot at this entry.
		s.restored = RestoreMark{ID: rec.ID, From: ev.RestoredFrom}
		return
	}
	k := KeyOf(rec)
	if _, ok := rec.Event.(*events.GroupCreated); ok {
		s.prefixes[k.StreamPrefix] = true
	}
	old := s.groups[k]
	if touchesStream(rec) {
		s.streams[rec.StreamPrefix] = foldStream(s.streams[rec.StreamPrefix], rec, old)
	}
	f := groupFolds[rec.Event.EventType()]
	var one [1]string
	ids := f.memberIDs(rec.Event, &one)
	var was [1]counted
	d := beforeFold(old, ids, was[:0])
	g := f.group(old, k, rec, ids)
	s.principals.settle(old, g, d)
	switch {
	case g == nil && old != nil:
		delete(s.groups, k)
		s.order = removeKey(s.order, k)
	case g != nil && old == nil:
		s.groups[k] = g
		s.order = append(s.order, k)
	case g != old: // most folds change the group in place
		s.groups[k] = g
	}
}

// KeyOf is the group a record belongs to.
func KeyOf(rec events.Record) GroupKey {
	return GroupKey{StreamPrefix: rec.StreamPrefix, ConsumerGroup: rec.ConsumerGroup}
}

// foldGroup is the fold of one group: the fold its event type registered
// (register, in the apply file of its subject), mutation only. It returns the
// group after the event (a new group for group.created, nil after
// group.deleted or for events of an unknown group).
func foldGroup(g *Group, k GroupKey, rec events.Record) *Group {
	f := groupFolds[rec.Event.EventType()]
	var one [1]string
	return f.group(g, k, rec, f.memberIDs(rec.Event, &one))
}

// group is foldGroup with the record's fold and member ids (memberIDs)
// looked up.
func (f groupFold) group(g *Group, k GroupKey, rec events.Record, ids []string) *Group {
	if f.whole {
		return f.fold(g, k, rec)
	}
	if g == nil {
		// Events of an unknown group only enter the history.
		return nil
	}
	g.UpdatedAt = rec.Time
	var buf [1]bool
	was := liveness(g, ids, buf[:0])
	defer func() {
		settle(g)
		noteEmpty(g, rec.Time, ids, was)
	}()
	if f.fold == nil {
		return g // an audit record, or a record of no group
	}
	return f.fold(g, k, rec)
}

// memberIDsOf lists the members a record may change the record of: the
// member events name them (registerMember, registerMembers). Every other
// event leaves member records alone (assignment events change targets,
// resharding events shard counts), except group.created and group.deleted,
// which start and end every record of the group (apply handles those
// whole). An event of one member is listed in one, which the list shares.
func memberIDsOf(ev events.Event, one *[1]string) []string {
	return groupFolds[ev.EventType()].memberIDs(ev, one)
}

// memberIDs is memberIDsOf for an event of this fold's type.
func (f groupFold) memberIDs(ev events.Event, one *[1]string) []string {
	switch {
	case f.member != nil:
		one[0] = f.member(ev)
		return one[:]
	case f.members != nil:
		return f.members(ev)
	}
	return nil
}

// groupFold is how records of one event type change their group.
type groupFold struct {
	fold func(g *Group, k GroupKey, rec events.Record) *Group
	// member is the one member whose record the event changes, members
	// lists them for an event of several (both nil: none). The fold of
	// every record asks, so an event of one member names it without
	// allocating a list.
	member  func(events.Event) string
	members func(events.Event) []string
	// whole: fold is called for a group the state does not have too (g nil),
	// and the group's bookkeeping (its update time, its liveness, settle)
	// is fold's own.
	whole bool
}

// groupFolds holds the fold of every event type, by type name, filled at
// init by the apply files (TestEveryEventTypeHasAFold).
var groupFolds = map[string]groupFold{}

// register adds the fold of events of type *T: apply changes the group the
// record belongs to (it exists; the fold sets its update time and settles it
// around apply). Registering a type twice panics.
func register[T any, E interface {
	*T
	events.Event
}](apply func(g *Group, rec events.Record, ev E)) {
	registerFold(E(new(T)).EventType(), groupFold{fold: func(g *Group, _ GroupKey, rec events.Record) *Group {
		apply(g, rec, rec.Event.(E))
		return g
	}})
}

// registerGroup is register for a fold that needs the group's key, or
// replaces the group (nil: it is gone).
func registerGroup[T any, E interface {
	*T
	events.Event
}](fold func(g *Group, k GroupKey, rec events.Record, ev E) *Group) {
	registerFold(E(new(T)).EventType(), groupFold{fold: func(g *Group, k GroupKey, rec events.Record) *Group {
		return fold(g, k, rec, rec.Event.(E))
	}})
}

// registerWhole is registerGroup for a fold that keeps the group's
// bookkeeping itself and sees unknown groups too (groupFold.whole).
func registerWhole[T any, E interface {
	*T
	events.Event
}](fold func(g *Group, k GroupKey, rec events.Record, ev E) *Group) {
	registerFold(E(new(T)).EventType(), groupFold{whole: true, fold: func(g *Group, k GroupKey, rec events.Record) *Group {
		return fold(g, k, rec, rec.Event.(E))
	}})
}

// registerNoFold registers event types that change no group beyond its
// update time: audit records, and records of no group (a global record, a
// stream's record that the stream fold folds).
func registerNoFold(types ...events.Event) {
	for _, ev := range types {
		registerFold(ev.EventType(), groupFold{})
	}
}

// registerMembers adds, to the fold registered for events of type *T, the
// members whose records such an event changes.
func registerMembers[T any, E interface {
	*T
	events.Event
}](ids func(ev E) []string) {
	addMembers[T, E](func(f *groupFold) { f.members = func(ev events.Event) []string { return ids(ev.(E)) } })
}

// registerMember is registerMembers for an event of one member.
func registerMember[T any, E interface {
	*T
	events.Event
}](id func(ev E) string) {
	addMembers[T, E](func(f *groupFold) { f.member = func(ev events.Event) string { return id(ev.(E)) } })
}

// addMembers sets, with set, the members of the fold registered for events
// of type *T.
func addMembers[T any, E interface {
	*T
	events.Event
}](set func(f *groupFold)) {
	name := E(new(T)).EventType()
	f, ok := groupFolds[name]
	if !ok || f.members != nil || f.member != nil {
		panic(fmt.Sprintf("projection: members of event type %q registered without its fold, or twice", name))
	}
	set(&f)
	groupFolds[name] = f
}

func registerFold(name string, f groupFold) {
	if _, dup := groupFolds[name]; dup {
		panic(fmt.Sprintf("projection: two folds of event type %q", name))
	}
	groupFolds[name] = f
}

// liveness appends to out, for each member id, whether it is live.
func liveness(g *Group, ids []string, out []bool) []bool {
	if len(ids) == 0 {
		return nil
	}
	for _, id := range ids {
		m := g.Member(id)
		out = append(out, m != nil && m.Live())
	}
	return out
}

// noteEmpty keeps EmptySince after a record that changed members ids (was:
// whether each was live before it): cleared when one of them is live, set
// at the record when one stopped being live and no member is live any more.
// Only a member event can change it, and the group is looked at whole only
// when a live member stopped being live (anyLive stops at the first live
// member it finds), so a fold does not scan the group per event.
func noteEmpty(g *Group, at time.Time, ids []string, was []bool) {
	stopped := false
	for i, id := range ids {
		m := g.Member(id)
		if m != nil && m.Live() {
			g.EmptySince = time.Time{}
			return
		}
		stopped = stopped || was[i]
	}
	if stopped && g.EmptySince.IsZero() && !anyLive(g) {
		g.EmptySince = at
	}
}

// anyLive reports whether a member is live, from the index when the group
// has one, else stopping at the first live member.
func anyLive(g *Group) bool {
	if g.lay != nil || g.ix != nil {
		return g.LiveCount() > 0
	}
	for _, m := range g.members {
		if m.Live() {
			return true
		}
	}
	return false
}

func setEpochs(g *Group, e events.Epochs) {
	g.GroupEpoch = e.GroupEpoch
	g.MetadataVersion = e.MetadataVersion
}

// stateOf is a resharding's state ("" when unknown).
func stateOf(g *Group, id string) string {
	if m := g.Resharding(id); m != nil {
		return m.State
	}
	return ""
}

func stateChange(g *Group, id, state, phase string, rec events.Record) {
	m := reshardingForWrite(g, id)
	if m == nil {
		return
	}
	m.State = state
	m.UpdatedAt = rec.Time
	m.History = append(m.History, StateChange{
		State: state, Phase: phase, At: rec.Time, Actor: rec.Actor, EventID: rec.ID,
		GroupEpoch: g.GroupEpoch, MetadataVersion: g.MetadataVersion,
	})
}
