package projection

import "github.com/rscoord/rsc/events"

// Indexed reports whether a group holds a member index (tests only: a group
// without one answers by scanning, so its answers alone cannot tell).
func Indexed(g *Group) bool { return g.ix != nil }

// The lock and the live groups, for the tests that check the projection's
// insides; outside the package only Read hands them out.
func (s *State) Lock()                               { s.mu.Lock() }
func (s *State) Unlock()                             { s.mu.Unlock() }
func (s *State) RLock()                              { s.mu.RLock() }
func (s *State) RUnlock()                            { s.mu.RUnlock() }
func (s *State) GroupLocked(k GroupKey) *Group       { return s.groups[k] }
func (s *State) GroupKeysLocked() []GroupKey         { return append([]GroupKey(nil), s.order...) }
func (s *State) ApplyLocked(rec events.Record) error { return s.applyLocked(rec) }

// HoldsOwnMaps reports whether a group holds member and target maps of its
// own (a layered group holds none: it reads through its layer).
func HoldsOwnMaps(g *Group) bool { return g.members != nil || g.targets != nil }
