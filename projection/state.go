package projection

import (
	"fmt"
	"sort"
	"sync"

	"github.com/rscoord/rsc/events"
)

// State is the whole projection: every group, per-group history and the id of the
// last applied entry. Its methods are safe for concurrent use; the commands
// package additionally serialises decisions with Lock/Unlock so that a decision
// and the Apply of its events see one consistent state.
type State struct {
	mu      sync.RWMutex
	groups  map[GroupKey]*Group
	order   []GroupKey // creation order, for listing
	history map[GroupKey][]HistoryItem
	lastID  string
	applied int64
}

// New returns an empty projection.
func New() *State {
	return &State{groups: map[GroupKey]*Group{}, history: map[GroupKey][]HistoryItem{}, lastID: events.ZeroID}
}

// Lock and Unlock give a writer exclusive access; RLock and RUnlock shared access.
// Methods with the Locked suffix expect the caller to hold one of them.
func (s *State) Lock()    { s.mu.Lock() }
func (s *State) Unlock()  { s.mu.Unlock() }
func (s *State) RLock()   { s.mu.RLock() }
func (s *State) RUnlock() { s.mu.RUnlock() }

// LastID is the id of the last applied entry.
func (s *State) LastID() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastID
}

// LastIDLocked is LastID for a caller holding the lock.
func (s *State) LastIDLocked() string { return s.lastID }

// Applied is the number of entries applied since the projection was built or restored.
func (s *State) Applied() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.applied
}

// GroupLocked returns the live group (read-only) for a caller holding the lock.
func (s *State) GroupLocked(k GroupKey) *Group { return s.groups[k] }

// GroupKeysLocked lists groups in creation order.
func (s *State) GroupKeysLocked() []GroupKey { return append([]GroupKey(nil), s.order...) }

// Group returns a deep copy of the group.
func (s *State) Group(k GroupKey) (*Group, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	g, ok := s.groups[k]
	if !ok {
		return nil, false
	}
	return g.Clone(), true
}

// Groups returns deep copies of every group in creation order.
func (s *State) Groups() []*Group {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*Group, 0, len(s.order))
	for _, k := range s.order {
		out = append(out, s.groups[k].Clone())
	}
	return out
}

// History returns up to limit history items of a group with ids after the given
// id (events.ZeroID or "" for the start). A deleted group keeps its history.
func (s *State) History(k GroupKey, after string, limit int) []HistoryItem {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h := s.history[k]
	i := 0
	if after != "" && after != events.ZeroID {
		if aid, err := events.ParseID(after); err == nil {
			i = sort.Search(len(h), func(i int) bool {
				id, _ := events.ParseID(h[i].ID)
				return aid.Less(id)
			})
		}
	}
	end := len(h)
	if limit > 0 && i+limit < end {
		end = i + limit
	}
	return append([]HistoryItem(nil), h[i:end]...)
}

// ReplaceGroupLocked puts back a group pre-image (nil removes the group). The
// commands package uses it to undo tentatively applied events whose append failed.
func (s *State) ReplaceGroupLocked(k GroupKey, g *Group, lastID string, historyLen int) {
	if g == nil {
		if _, ok := s.groups[k]; ok {
			delete(s.groups, k)
			s.removeOrder(k)
		}
	} else {
		if _, ok := s.groups[k]; !ok {
			s.order = append(s.order, k)
		}
		s.groups[k] = g
	}
	if h := s.history[k]; len(h) > historyLen {
		s.history[k] = h[:historyLen]
		if historyLen == 0 {
			delete(s.history, k)
		}
	}
	s.lastID = lastID
}

// HistoryLenLocked is the number of history items of a group.
func (s *State) HistoryLenLocked(k GroupKey) int { return len(s.history[k]) }

// SetLastIDLocked moves the applied position without applying (used with
// ReplaceGroupLocked to restore a pre-image).
func (s *State) SetLastIDLocked(id string) { s.lastID = id }

func (s *State) removeOrder(k GroupKey) {
	for i, o := range s.order {
		if o == k {
			s.order = append(s.order[:i], s.order[i+1:]...)
			return
		}
	}
}

// Apply folds one record. Records must come in stream order: an id at or before
// the last applied id is an error and changes nothing.
func (s *State) Apply(rec events.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ApplyLocked(rec)
}

// ApplyLocked is Apply for a caller holding the lock.
func (s *State) ApplyLocked(rec events.Record) error {
	id, err := events.ParseID(rec.ID)
	if err != nil {
		return fmt.Errorf("apply %s: %w", rec.ID, err)
	}
	last, _ := events.ParseID(s.lastID)
	if !last.Less(id) {
		return fmt.Errorf("apply %s: out of order, last applied is %s", rec.ID, s.lastID)
	}
	s.apply(rec)
	s.lastID = id.String()
	s.applied++
	return nil
}

// PrefixSeenLocked reports whether any group with this stream prefix was ever
// created (its leftover streams are the coordinator's own).
func (s *State) PrefixSeenLocked(prefix string) bool {
	for k, items := range s.history {
		if k.StreamPrefix != prefix {
			continue
		}
		for _, it := range items {
			if it.Type == "group.created" {
				return true
			}
		}
	}
	return false
}
