package projection

import (
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/events"
)

// snapshotVersion is bumped if the snapshot layout ever changes incompatibly; a
// snapshot of another version is ignored and the log is folded from the start.
const snapshotVersion = 1

type snapshot struct {
	Version int               `msgpack:"v"`
	LastID  string            `msgpack:"lastId"`
	Groups  []*Group          `msgpack:"groups"`
	History []historySnapshot `msgpack:"history"`
}

type historySnapshot struct {
	Key   GroupKey      `msgpack:"key"`
	Items []HistoryItem `msgpack:"items"`
}

// Capture takes a cheap, consistent copy of the state to encode outside the lock.
type Capture struct{ snap snapshot }

// Capture copies the state under the read lock.
func (s *State) Capture() *Capture {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.CaptureLocked()
}

// CaptureLocked is Capture for a caller holding the lock.
func (s *State) CaptureLocked() *Capture {
	c := &Capture{snap: snapshot{Version: snapshotVersion, LastID: s.lastID}}
	for _, k := range s.order {
		c.snap.Groups = append(c.snap.Groups, s.groups[k].Clone())
	}
	keys := make([]GroupKey, 0, len(s.history))
	for k := range s.history {
		keys = append(keys, k)
	}
	sortKeys(keys)
	for _, k := range keys {
		c.snap.History = append(c.snap.History, historySnapshot{Key: k, Items: append([]HistoryItem(nil), s.history[k]...)})
	}
	return c
}

// LastID is the id of the last entry the capture includes.
func (c *Capture) LastID() string { return c.snap.LastID }

// Encode serialises the capture. Equal states give equal bytes.
func (c *Capture) Encode() ([]byte, error) { return events.Marshal(c.snap) }

// Encode captures and serialises the whole state (snapshot bytes).
func (s *State) Encode() ([]byte, error) { return s.Capture().Encode() }

// Restore builds a fresh state from snapshot bytes.
func Restore(data []byte) (*State, error) {
	var snap snapshot
	if err := msgpack.Unmarshal(data, &snap); err != nil {
		return nil, fmt.Errorf("restore snapshot: %w", err)
	}
	if snap.Version != snapshotVersion {
		return nil, fmt.Errorf("restore snapshot: version %d, this build reads %d", snap.Version, snapshotVersion)
	}
	if _, err := events.ParseID(snap.LastID); err != nil {
		return nil, fmt.Errorf("restore snapshot: %w", err)
	}
	s := New()
	s.lastID = snap.LastID
	for _, g := range snap.Groups {
		if g.Members == nil {
			g.Members = map[string]*Member{}
		}
		if g.Targets == nil {
			g.Targets = map[string][]int{}
		}
		s.groups[g.Key] = g
		s.order = append(s.order, g.Key)
	}
	for _, h := range snap.History {
		s.history[h.Key] = h.Items
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
	s.groups, s.order, s.history, s.lastID, s.applied = other.groups, other.order, other.history, other.lastID, other.applied
}

func sortKeys(keys []GroupKey) {
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && less(keys[j], keys[j-1]); j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
}

func less(a, b GroupKey) bool {
	if a.StreamPrefix != b.StreamPrefix {
		return a.StreamPrefix < b.StreamPrefix
	}
	return a.ConsumerGroup < b.ConsumerGroup
}
