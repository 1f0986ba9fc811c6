package projection

import (
	"fmt"
	"sort"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/events"
)

// snapshotVersion is bumped if the snapshot layout ever changes incompatibly.
// Version 4 holds the groups' and streams' previous layouts; restoring
// version 3 (read, never written) derives a group's from its reshardings'
// histories (a stream's start empty: their stream versions are only in the
// log). Version 3 holds the streams too; version 2 (read, never written) held the
// groups without them, and restoring it derives each prefix's record of shard
// streams from its groups, as the fold of that build's entries does; version
// 1 (read, never written) also carried the per-group history index, which
// now lives beside the log.
const snapshotVersion = 4

type snapshot struct {
	Version  int       `msgpack:"v"`
	LastID   string    `msgpack:"lastId"`
	Groups   []*Group  `msgpack:"groups"`
	Streams  []*Stream `msgpack:"streams,omitempty"`
	Prefixes []string  `msgpack:"prefixes"`
	// Quarantined are the quarantined prefixes (none: left out, so a
	// snapshot without any is byte for byte what earlier builds wrote).
	Quarantined []Quarantine `msgpack:"quarantined,omitempty"`
	// Restored is the last log.restored the state applied (absent: none).
	Restored *RestoreMark `msgpack:"restored,omitempty"`
	// History is what version 1 kept (read only: which prefixes were ever
	// created).
	History []historySnapshotV1 `msgpack:"history,omitempty"`
}

type historySnapshotV1 struct {
	Key   GroupKey `msgpack:"key"`
	Items []struct {
		Type string `msgpack:"type"`
	} `msgpack:"items"`
}

// Capture takes a cheap, consistent copy of the state to encode outside the lock.
type Capture struct{ snap snapshot }

// Capture copies the state under the read lock.
func (s *State) Capture() *Capture {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.captureLocked()
}

// captureLocked is Capture for a caller holding the lock.
func (s *State) captureLocked() *Capture {
	c := &Capture{snap: snapshot{Version: snapshotVersion, LastID: s.lastID}}
	for _, k := range s.order {
		c.snap.Groups = append(c.snap.Groups, deepCopy(s.groups[k]))
	}
	for p := range s.prefixes {
		c.snap.Prefixes = append(c.snap.Prefixes, p)
	}
	sort.Strings(c.snap.Prefixes)
	if s.restored != (RestoreMark{}) {
		r := s.restored
		c.snap.Restored = &r
	}
	for _, p := range sortedKeys(s.streams) {
		c.snap.Streams = append(c.snap.Streams, s.streams[p].Clone())
	}
	if len(s.quarantined) > 0 {
		c.snap.Quarantined = s.quarantined.list()
	}
	return c
}

// LastID is the id of the last entry the capture includes.
func (c *Capture) LastID() string { return c.snap.LastID }

// Encode serialises the capture. Equal states give equal bytes.
func (c *Capture) Encode() ([]byte, error) { return events.Marshal(c.snap) }

// Encode captures and serialises the whole state (snapshot bytes).
func (s *State) Encode() ([]byte, error) { return s.Capture().Encode() }

// Restore builds a fresh state from snapshot bytes (version 4, 3, 2 or 1).
func Restore(data []byte) (*State, error) {
	var snap snapshot
	if err := msgpack.Unmarshal(data, &snap); err != nil {
		return nil, fmt.Errorf("restore snapshot: %w", err)
	}
	if snap.Version < 1 || snap.Version > snapshotVersion {
		return nil, fmt.Errorf("restore snapshot: version %d, this build reads 1 to %d", snap.Version, snapshotVersion)
	}
	if _, err := events.ParseID(snap.LastID); err != nil {
		return nil, fmt.Errorf("restore snapshot: %w", err)
	}
	if err := snap.checkBounds(); err != nil {
		return nil, fmt.Errorf("restore snapshot: %w", err)
	}
	s := New()
	s.lastID = snap.LastID
	for _, q := range snap.Quarantined {
		s.quarantined[q.StreamPrefix] = &q
	}
	if snap.Restored != nil {
		s.restored = *snap.Restored
	}
	for _, g := range snap.Groups {
		if g.members == nil {
			g.members = map[string]*Member{}
		}
		if g.targets == nil {
			g.targets = map[string][]int{}
		}
		if snap.Version < 4 {
			g.PreviousLayouts, g.LayoutSince = derivedLayouts(g)
		}
		buildIndex(g)
		if g.EmptySince.IsZero() && g.LiveCount() == 0 {
			// A snapshot from before EmptySince was kept: empty since its
			// last change at the latest.
			g.EmptySince = g.UpdatedAt
		}
		s.groups[g.Key] = g
		s.order = append(s.order, g.Key)
	}
	for _, p := range snap.Prefixes {
		s.prefixes[p] = true
	}
	for _, st := range snap.Streams {
		s.streams[st.Prefix] = st
	}
	if snap.Version < 3 {
		// What that build provisioned for its groups counts as created, as
		// the fold of its entries counts it.
		for _, g := range snap.Groups {
			st := s.streams[g.Key.StreamPrefix]
			if st == nil {
				st = &Stream{Prefix: g.Key.StreamPrefix, CreatedAt: g.CreatedAt}
				s.streams[g.Key.StreamPrefix] = st
			}
			st.CreatedShards = union(st.CreatedShards, shardRange(0, legacySpan(g))...)
		}
	}
	s.principals = countPrincipals(s.groups)
	for _, h := range snap.History {
		for _, it := range h.Items {
			if it.Type == "group.created" {
				s.prefixes[h.Key.StreamPrefix] = true
			}
		}
	}
	return s, nil
}

// Swap replaces this state's contents with other's (restore builds fresh state
// and swaps it in).
func (s *State) Swap(other *State) {
	other.mu.Lock()
	defer other.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groups, s.order, s.streams, s.prefixes, s.lastID, s.applied = other.groups, other.order, other.streams, other.prefixes, other.lastID, other.applied
	s.quarantined = other.quarantined
	s.restored = other.restored
	s.principals = other.principals
}

// checkBounds refuses a snapshot whose shard counts are outside the
// structural maxima (events.MaxShardCount), as Decode refuses such an entry:
// restoring a version 2 snapshot sizes a slice by them.
func (snap *snapshot) checkBounds() error {
	count := func(what string, n int) error {
		if n < 0 || n > events.MaxShardCount {
			return fmt.Errorf("%w: %s %d is outside 0..%d", events.ErrOutOfBounds, what, n, events.MaxShardCount)
		}
		return nil
	}
	for _, g := range snap.Groups {
		if g == nil {
			return fmt.Errorf("a group is missing")
		}
		if err := count("group shardCount", g.ShardCount); err != nil {
			return err
		}
		if err := count("group assignableCount", g.AssignableCount); err != nil {
			return err
		}
		for _, m := range g.Reshardings {
			if m == nil {
				return fmt.Errorf("a resharding of %s/%s is missing", g.Key.StreamPrefix, g.Key.ConsumerGroup)
			}
			if err := count("resharding from", m.From); err != nil {
				return err
			}
			if err := count("resharding to", m.To); err != nil {
				return err
			}
		}
	}
	for _, st := range snap.Streams {
		if st == nil {
			return fmt.Errorf("a stream is missing")
		}
		if err := count("stream shardCount", st.ShardCount); err != nil {
			return err
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
