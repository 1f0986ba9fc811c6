package projection

import (
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rscoord/rsc/events"
)

// Stream is what the projection knows of a stream prefix as a whole: its
// metadata (the layout every consumer group of the prefix shares), when it
// has any, and which of its shard streams the coordinator created or
// adopted. A prefix whose groups were created before stream metadata existed
// has a Stream without metadata: only the record of its shard streams.
// Callers outside this package get it from State methods and must treat it
// as read-only.
type Stream struct {
	Prefix string `msgpack:"prefix"`
	// Metadata: the stream has metadata (created, adopted, or written by
	// its first group's create). Without it the layout is its groups'.
	Metadata        bool      `msgpack:"metadata"`
	ShardCount      int       `msgpack:"shardCount"`
	MetadataVersion int64     `msgpack:"metadataVersion"`
	Origin          string    `msgpack:"origin,omitempty"`
	CreatedAt       time.Time `msgpack:"createdAt"`
	UpdatedAt       time.Time `msgpack:"updatedAt"`
	CreatedBy       string    `msgpack:"createdBy,omitempty"`
	// CreatedShards are the shard indexes whose streams the coordinator
	// created (sorted): the only ones a retirement may delete.
	// AdoptedShards are the ones it took over without creating them.
	CreatedShards []int `msgpack:"createdShards,omitempty"`
	AdoptedShards []int `msgpack:"adoptedShards,omitempty"`
	// LayoutSince and PreviousLayouts are the stream's, as a group's (in
	// stream metadata versions; only with metadata).
	LayoutSince     int64    `msgpack:"layoutSince,omitempty"`
	PreviousLayouts []Layout `msgpack:"previousLayouts,omitempty"`
	// Removing are the consumer groups of deleted (or expired) groups the
	// coordinator still has to destroy, by group name, oldest first
	// (group.deleted adds one, group.consumer_groups_destroyed ends it).
	Removing []Removal `msgpack:"removing,omitempty"`
	// Owner and OwnerAnonymous are who created or adopted the stream (as a
	// group's: commands/quota.go).
	Owner          string `msgpack:"owner,omitempty"`
	OwnerAnonymous bool   `msgpack:"ownerAnonymous,omitempty"`
}

// Removal is a deleted group's Redis consumer groups still to destroy: the
// consumer group named Group on the shard streams Shards.
type Removal struct {
	Group  string `msgpack:"group"`
	Shards []int  `msgpack:"shards"`
}

// RemovalOf is the pending removal of group's consumer groups (nil: none).
func (st *Stream) RemovalOf(group string) *Removal {
	if st == nil {
		return nil
	}
	for i := range st.Removing {
		if st.Removing[i].Group == group {
			return &st.Removing[i]
		}
	}
	return nil
}

// Owns reports whether the coordinator created or adopted shard i's stream.
func (st *Stream) Owns(i int) bool {
	return st != nil && (containsSorted(st.CreatedShards, i) || containsSorted(st.AdoptedShards, i))
}

// Created reports whether the coordinator created shard i's stream (so a
// retirement may delete it).
func (st *Stream) Created(i int) bool { return st != nil && containsSorted(st.CreatedShards, i) }

// Clone returns a deep copy.
func (st *Stream) Clone() *Stream {
	c := *st
	c.CreatedShards = cloneInts(st.CreatedShards)
	c.AdoptedShards = cloneInts(st.AdoptedShards)
	if st.Removing != nil {
		c.Removing = make([]Removal, len(st.Removing))
		for i, r := range st.Removing {
			c.Removing[i] = Removal{Group: r.Group, Shards: cloneInts(r.Shards)}
		}
	}
	return &c
}

func containsSorted(s []int, v int) bool {
	i := sort.SearchInts(s, v)
	return i < len(s) && s[i] == v
}

// union is the sorted union of a sorted set and more values: merged when
// both are sorted (more is a shard range, as it mostly is), else sorted whole.
func union(set []int, more ...int) []int {
	if len(more) == 0 {
		return set
	}
	if !slices.IsSorted(set) || !slices.IsSorted(more) {
		return SortedInts(append(cloneInts(set), more...))
	}
	out := make([]int, 0, len(set)+len(more))
	put := func(v int) {
		if len(out) == 0 || out[len(out)-1] != v {
			out = append(out, v)
		}
	}
	i, j := 0, 0
	for i < len(set) && j < len(more) {
		if set[i] <= more[j] {
			put(set[i])
			i++
		} else {
			put(more[j])
			j++
		}
	}
	for _, v := range set[i:] {
		put(v)
	}
	for _, v := range more[j:] {
		put(v)
	}
	return out
}

// without is the sorted set minus the values (looked up by binary search
// when they are many: a retirement drops every shard of a range).
func without(set []int, drop ...int) []int {
	if len(drop) == 0 || len(set) == 0 {
		return set
	}
	dropped := func(v int) bool { return containsInt(drop, v) }
	if len(drop) > 8 {
		if !slices.IsSorted(drop) {
			drop = slices.Sorted(slices.Values(drop))
		}
		dropped = func(v int) bool {
			_, found := slices.BinarySearch(drop, v)
			return found
		}
	}
	out := make([]int, 0, len(set))
	for _, v := range set {
		if !dropped(v) {
			out = append(out, v)
		}
	}
	return out
}

func shardRange(lo, hi int) []int {
	if hi <= lo {
		return nil
	}
	out := make([]int, 0, hi-lo)
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

// shardIndexOf is the shard index of a stream key of prefix (-1 when it is
// not one).
func shardIndexOf(prefix, key string) int {
	rest, ok := strings.CutPrefix(key, prefix+":")
	if !ok {
		return -1
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 || strconv.Itoa(i) != rest {
		return -1
	}
	return i
}

// withoutRemoval is the removals without group's (a new slice: a clone
// shares the old one's elements).
func withoutRemoval(rs []Removal, group string) []Removal {
	var out []Removal
	for _, r := range rs {
		if r.Group != group {
			out = append(out, r)
		}
	}
	return out
}

// streamLayout records a change of a stream's shard count to count at
// stream version mv (nothing when the count stays: the second group of a
// stream activating the layout its first group's activation set).
func streamLayout(st *Stream, count int, mv int64, rec events.Record) {
	if !st.Metadata || count == st.ShardCount {
		return
	}
	st.PreviousLayouts = layoutChanged(st.PreviousLayouts, st.LayoutSince, st.ShardCount, mv, rec.Time)
	st.LayoutSince = mv
}

// legacySpan is how many shards an earlier build provisioned for a group it
// restored from a snapshot without stream records: every shard it routes,
// assigns, or still has to retire, and an active resharding's target.
func legacySpan(g *Group) int {
	span := max(g.ShardCount, g.AssignableCount)
	if m := g.Active(); m != nil {
		span = max(span, m.From, m.To)
	}
	if n := len(g.Reshardings); n > 0 && !g.Reshardings[n-1].Retired {
		_, hi := g.Reshardings[n-1].RemovedRange()
		span = max(span, hi)
	}
	return span
}

// StreamLayout is the layout stream-scoped routing answers for a prefix: the
// stream's metadata when it has some; else its groups' shard count when they
// agree, at the highest of their metadata versions. ok is false when there
// is neither; conflict true when the groups disagree.
func StreamLayout(st *Stream, groups []*Group) (count int, mv int64, ok, conflict bool) {
	if st != nil && st.Metadata {
		return st.ShardCount, st.MetadataVersion, true, false
	}
	if len(groups) == 0 {
		return 0, 0, false, false
	}
	count = groups[0].ShardCount
	for _, g := range groups {
		if g.ShardCount != count {
			return 0, 0, false, true
		}
		mv = max(mv, g.MetadataVersion)
	}
	return count, mv, true, false
}

// StreamView is a stream as the monitoring API shows it.
type StreamView struct {
	StreamPrefix    string
	Metadata        bool
	ShardCount      int
	MetadataVersion int64
	// Conflict: no metadata, and the groups' shard counts disagree
	// (ShardCount and MetadataVersion are then 0).
	Conflict       bool
	Origin         string
	CreatedBy      string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	ConsumerGroups []string
	CreatedShards  []int
	AdoptedShards  []int
}

// ViewStream is the view of a prefix's stream (st may be nil for a prefix
// known only by its groups) with its groups.
func ViewStream(prefix string, st *Stream, groups []*Group) StreamView {
	v := StreamView{StreamPrefix: prefix, ConsumerGroups: []string{}, CreatedShards: []int{}, AdoptedShards: []int{}}
	count, mv, _, conflict := StreamLayout(st, groups)
	v.ShardCount, v.MetadataVersion, v.Conflict = count, mv, conflict
	if st != nil {
		v.Metadata, v.Origin, v.CreatedBy, v.CreatedAt, v.UpdatedAt = st.Metadata, st.Origin, st.CreatedBy, st.CreatedAt, st.UpdatedAt
		v.CreatedShards, v.AdoptedShards = cloneNonNil(st.CreatedShards), cloneNonNil(st.AdoptedShards)
	}
	for _, g := range groups {
		v.ConsumerGroups = append(v.ConsumerGroups, g.Key.ConsumerGroup)
		if st == nil || !st.Metadata {
			if v.CreatedAt.IsZero() || g.CreatedAt.Before(v.CreatedAt) {
				v.CreatedAt = g.CreatedAt
			}
			if g.UpdatedAt.After(v.UpdatedAt) {
				v.UpdatedAt = g.UpdatedAt
			}
		}
	}
	sort.Strings(v.ConsumerGroups)
	return v
}

func cloneNonNil(s []int) []int {
	if s == nil {
		return []int{}
	}
	return append([]int(nil), s...)
}

// PendingRemoval is a deleted group's consumer groups still to destroy.
type PendingRemoval struct {
	Key    GroupKey
	Shards []int
}

// Removals lists every pending removal of consumer groups (copies), by
// prefix, oldest first within one.
func (s *State) Removals() []PendingRemoval {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []PendingRemoval
	for _, p := range sortedKeys(s.streams) {
		for _, r := range s.streams[p].Removing {
			out = append(out, PendingRemoval{Key: GroupKey{StreamPrefix: p, ConsumerGroup: r.Group}, Shards: cloneInts(r.Shards)})
		}
	}
	return out
}

// Removal is the pending removal of k's consumer groups (false: none).
func (s *State) Removal(k GroupKey) (PendingRemoval, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if r := s.streams[k.StreamPrefix].RemovalOf(k.ConsumerGroup); r != nil {
		return PendingRemoval{Key: k, Shards: cloneInts(r.Shards)}, true
	}
	return PendingRemoval{}, false
}
