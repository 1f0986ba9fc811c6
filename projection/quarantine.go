package projection

import (
	"sort"

	"github.com/rscoord/rsc/events"
)

// Quarantine. An entry whose event cannot be read but whose envelope names a
// stream prefix (events.Confine) quarantines that prefix: the fold drops the
// prefix's groups and stream from the state and applies none of its later
// entries, and the coordinator answers every request about the prefix with
// COORDINATOR_METADATA_CORRUPT naming the entry. Every other prefix is
// folded and served as before. The quarantine is part of the state, so a
// snapshot, a follower and a replay of the same log agree on it; what lifts
// it is a log without the entry (replay repair), folded again from a point
// before it: the coordinator's start-up passes over a snapshot that holds a
// quarantine whose entry the log no longer has.

// Quarantine is one quarantined stream prefix.
type Quarantine struct {
	StreamPrefix string `msgpack:"prefix"`
	// EntryID, Type and Reason are the first entry of the prefix that could
	// not be read, the event type it names and why.
	EntryID string `msgpack:"entryId"`
	Type    string `msgpack:"type"`
	Reason  string `msgpack:"reason"`
	// Skipped counts the prefix's entries after it that were not applied
	// (the prefix's state is what it was before EntryID, and is not served).
	Skipped int64 `msgpack:"skipped"`
}

// quarantine folds a record that could not be read (events.Quarantined).
func (s *State) quarantine(rec events.Record, q *events.Quarantined) {
	p := rec.StreamPrefix
	if cur := s.quarantined[p]; cur != nil {
		cur.Skipped++
		return
	}
	s.quarantined[p] = &Quarantine{StreamPrefix: p, EntryID: rec.ID, Type: rec.Type, Reason: q.Reason}
	kept := s.order[:0:0]
	for _, k := range s.order {
		if k.StreamPrefix == p {
			countMembers(s.principals, s.groups[k], -1)
			delete(s.groups, k)
			continue
		}
		kept = append(kept, k)
	}
	s.order = kept
	delete(s.streams, p)
}

// quarantines are the quarantined prefixes' quarantines, by prefix.
type quarantines map[string]*Quarantine

// skip reports whether rec belongs to a quarantined prefix (and counts it as
// skipped).
func (qs quarantines) skip(rec events.Record) bool {
	if rec.StreamPrefix == "" || len(qs) == 0 {
		return false
	}
	q := qs[rec.StreamPrefix]
	if q == nil {
		return false
	}
	q.Skipped++
	return true
}

// Quarantined returns the quarantine of a prefix, if it is quarantined.
func (s *State) Quarantined(prefix string) (Quarantine, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.QuarantinedLocked(prefix)
}

// QuarantinedLocked is Quarantined for a caller holding the lock (or the writer).
func (s *State) QuarantinedLocked(prefix string) (Quarantine, bool) {
	q := s.quarantined[prefix]
	if q == nil {
		return Quarantine{}, false
	}
	return *q, true
}

// NumQuarantined is how many prefixes are quarantined.
func (s *State) NumQuarantined() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.quarantined)
}

// Quarantines lists every quarantined prefix, sorted by prefix.
func (s *State) Quarantines() []Quarantine {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.quarantined.list()
}

// list is every quarantine, sorted by prefix.
func (qs quarantines) list() []Quarantine {
	out := make([]Quarantine, 0, len(qs))
	for _, q := range qs {
		out = append(out, *q)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StreamPrefix < out[j].StreamPrefix })
	return out
}
