package projection

import (
	"fmt"
	"sort"
	"sync"

	"github.com/rscoord/rsc/events"
)

// State is the whole projection: every group, every stream (a prefix's
// metadata and the record of its shard streams), the stream prefixes groups
// were ever created with, and the id of the last applied entry. It holds state, not
// history: a group's audit history is indexed beside the log (events.Indexed),
// so the projection and its snapshots do not grow with the log. Its methods
// are safe for concurrent use; the coordinator's writer is its only mutator and
// may read it without the lock (the *Locked methods).
type State struct {
	mu       sync.RWMutex
	groups   map[GroupKey]*Group
	order    []GroupKey // creation order, for listing
	streams  map[string]*Stream
	prefixes map[string]bool // every prefix a group was created with
	// quarantined are the prefixes an entry that could not be read
	// quarantined (quarantine.go).
	quarantined quarantines
	// principals is, by principal, the member records that take part across
	// every group (principals.go).
	principals principalCounts
	lastID     string
	applied    int64
	// restored is the last log.restored applied (zero: none).
	restored RestoreMark
	// pos is lastID parsed, when posOf is lastID (applyLocked parses each
	// id once).
	pos   events.ID
	posOf string
}

// New returns an empty projection.
func New() *State {
	return &State{groups: map[GroupKey]*Group{}, streams: map[string]*Stream{}, prefixes: map[string]bool{}, quarantined: map[string]*Quarantine{}, principals: map[string]int{}, lastID: events.ZeroID}
}

// Lock and Unlock give a writer exclusive access; RLock and RUnlock shared access.
// Methods with the Locked suffix expect the caller to hold one of them.

// LastID is the id of the last applied entry.
func (s *State) LastID() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastID
}

// LastIDLocked is LastID for a caller holding the lock.
func (s *State) LastIDLocked() string { return s.lastID }

// RestoreMark is a log.restored entry as the projection records it: its id and
// the position of the state it restored.
type RestoreMark struct {
	ID   string `msgpack:"id"`
	From string `msgpack:"from"`
}

// LastRestore is the last log.restored entry applied (zero when none).
func (s *State) LastRestore() RestoreMark {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.restored
}

// Applied is the number of entries applied since the projection was built or restored.
func (s *State) Applied() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.applied
}

// Reader is the state under its read lock, as Read hands it to a
// function: the groups and streams it returns are read-only views of the
// live state (readonly.go), valid only while that function runs.
type Reader struct{ s *State }

// Group is the group k (the zero view, Exists false, when there is none).
func (r Reader) Group(k GroupKey) ReadOnlyGroup { return ReadOnlyGroup{r.s.groups[k]} }

// Stream is the stream of a prefix (the zero view when there is none).
func (r Reader) Stream(prefix string) ReadOnlyStream { return ReadOnlyStream{r.s.streams[prefix]} }

// GroupKeys lists the groups in creation order.
func (r Reader) GroupKeys() []GroupKey { return append([]GroupKey(nil), r.s.order...) }

// Read runs fn under the read lock: the way to look at many groups, or at
// one on a hot path (a steady heartbeat), without copying them. The lock
// itself never leaves the projection.
func (s *State) Read(fn func(r Reader)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	fn(Reader{s})
}

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

// GroupsWhere returns deep copies of the groups keep accepts, in creation
// order. keep runs under the read lock on a read-only view of the live group
// (as Read's): it must be quick, and must not keep it. A loop that runs often
// and concerns a few groups (barriers, autoscaling, reshardings) copies only
// those: copying every group costs as much as the group's members.
func (s *State) GroupsWhere(keep func(ReadOnlyGroup) bool) []*Group {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []*Group
	for _, k := range s.order {
		if g := s.groups[k]; keep(ReadOnlyGroup{g}) {
			out = append(out, g.Clone())
		}
	}
	return out
}

// removeKey removes k from a creation order.
func removeKey(order []GroupKey, k GroupKey) []GroupKey {
	for i, o := range order {
		if o == k {
			return append(order[:i], order[i+1:]...)
		}
	}
	return order
}

// Apply folds one record. Records must come in stream order: an id at or before
// the last applied id is an error and changes nothing.
func (s *State) Apply(rec events.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(rec)
}

// ApplyAll folds records under one lock (the writer applying a batch that
// landed). It stops at the first error, with the records before it applied.
func (s *State) ApplyAll(recs []events.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rec := range recs {
		if err := s.applyLocked(rec); err != nil {
			return err
		}
	}
	return nil
}

// applyLocked is Apply for a caller holding the lock.
func (s *State) applyLocked(rec events.Record) error {
	id, err := events.ParseID(rec.ID)
	if err != nil {
		return fmt.Errorf("apply %s: %w", rec.ID, err)
	}
	if s.posOf != s.lastID || s.posOf == "" {
		s.pos, _ = events.ParseID(s.lastID)
		s.posOf = s.lastID
	}
	if !s.pos.Less(id) {
		return fmt.Errorf("apply %s: out of order, last applied is %s", rec.ID, s.lastID)
	}
	s.apply(rec)
	// rec.ID itself when it is already id's text (as Redis writes ids): no
	// copy per record.
	if events.IsIDText(rec.ID) {
		s.lastID = rec.ID
	} else {
		s.lastID = id.String()
	}
	s.pos, s.posOf = id, s.lastID
	s.applied++
	return nil
}

// Stream returns a copy of a prefix's stream.
func (s *State) Stream(prefix string) (*Stream, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.streams[prefix]
	if !ok {
		return nil, false
	}
	return st.Clone(), true
}

// StreamPrefixes lists every prefix with a stream or a group, sorted.
func (s *State) StreamPrefixes() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	seen := make(map[string]bool, len(s.streams))
	out := make([]string, 0, len(s.streams))
	for p := range s.streams {
		seen[p] = true
		out = append(out, p)
	}
	for _, k := range s.order {
		if !seen[k.StreamPrefix] {
			seen[k.StreamPrefix] = true
			out = append(out, k.StreamPrefix)
		}
	}
	sort.Strings(out)
	return out
}

// StreamWithGroups returns copies of a prefix's stream (nil when none) and
// of its groups, in creation order, under one read lock.
func (s *State) StreamWithGroups(prefix string) (*Stream, []*Group) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var st *Stream
	if live := s.streams[prefix]; live != nil {
		st = live.Clone()
	}
	var groups []*Group
	for _, k := range s.order {
		if k.StreamPrefix == prefix {
			groups = append(groups, s.groups[k].Clone())
		}
	}
	return st, groups
}

// PrefixSeenLocked reports whether any group with this stream prefix was ever
// created (its leftover streams are the coordinator's own).
func (s *State) PrefixSeenLocked(prefix string) bool { return s.prefixes[prefix] }
