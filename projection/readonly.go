package projection

import (
	"time"

	"github.com/rscoord/rsc/events"
)

// The read-only views below are what Reader hands out of the live state: a
// value wrapping the pointer, so reading through one costs what reading the
// group costs (a heartbeat under the read lock allocates nothing for it),
// while nothing it returns lets its holder change the state. What they return
// is a value, a view, or a copy: never a pointer or a slice into the state.
// A view is valid only while the function Read runs it in runs.
//
// Code that holds a group of its own (a copy, an overlay's group in a
// decision) gets the same view with Group.ReadOnly, so one function serves
// both.

// ReadOnlyGroup is a group as Reader.Group returns it; the zero value is a
// group that does not exist (Exists is false; other methods must not be
// called on it).
type ReadOnlyGroup struct{ g *Group }

// ReadOnly is g's read-only view (g nil: the zero view).
func (g *Group) ReadOnly() ReadOnlyGroup { return ReadOnlyGroup{g} }

// Exists reports whether the group exists.
func (v ReadOnlyGroup) Exists() bool { return v.g != nil }

// Key is the group's key.
func (v ReadOnlyGroup) Key() GroupKey { return v.g.Key }

// ShardCount is the routed shard count.
func (v ReadOnlyGroup) ShardCount() int { return v.g.ShardCount }

// AssignableCount is the assignable shard count.
func (v ReadOnlyGroup) AssignableCount() int { return v.g.AssignableCount }

// GroupEpoch is the group epoch.
func (v ReadOnlyGroup) GroupEpoch() int64 { return v.g.GroupEpoch }

// AssignmentEpoch is the assignment epoch.
func (v ReadOnlyGroup) AssignmentEpoch() int64 { return v.g.AssignmentEpoch }

// MetadataVersion is the metadata version.
func (v ReadOnlyGroup) MetadataVersion() int64 { return v.g.MetadataVersion }

// ActiveReshardingID is the id of the active resharding ("" when none).
func (v ReadOnlyGroup) ActiveReshardingID() string { return v.g.ActiveResharding }

// Registered reports whether a member's first heartbeat created the group.
func (v ReadOnlyGroup) Registered() bool { return v.g.Registered }

// EmptySince is Group.EmptySince.
func (v ReadOnlyGroup) EmptySince() time.Time { return v.g.EmptySince }

// Ordered is Group.Ordered.
func (v ReadOnlyGroup) Ordered() bool { return v.g.Ordered() }

// LiveCount is Group.LiveCount.
func (v ReadOnlyGroup) LiveCount() int { return v.g.LiveCount() }

// RevokingShardCount is Group.RevokingShardCount.
func (v ReadOnlyGroup) RevokingShardCount() int { return v.g.RevokingShardCount() }

// HasBarriers reports whether a barrier waits.
func (v ReadOnlyGroup) HasBarriers() bool { return len(v.g.Barriers) > 0 }

// BarriersByShard is Barriers.ByShard: a map of its own (nil when no barrier
// waits).
func (v ReadOnlyGroup) BarriersByShard() map[int]string { return v.g.Barriers.ByShard() }

// OldestBarrier is when the oldest unreleased barrier was set (zero when
// none).
func (v ReadOnlyGroup) OldestBarrier() time.Time {
	var oldest time.Time
	for _, b := range v.g.Barriers {
		if oldest.IsZero() || b.Since.Before(oldest) {
			oldest = b.Since
		}
	}
	return oldest
}

// AutoscalingEnabled reports whether the autoscaler manages the group.
func (v ReadOnlyGroup) AutoscalingEnabled() bool { return v.g.Autoscaling.Enabled() }

// AutoscalingPolicy is the autoscaling policy as last configured (a copy;
// false when never configured).
func (v ReadOnlyGroup) AutoscalingPolicy() (events.AutoscalingConfigured, bool) {
	if v.g.Autoscaling == nil {
		return events.AutoscalingConfigured{}, false
	}
	return v.g.Autoscaling.Policy, true
}

// Member is the member id (the zero view when there is none).
func (v ReadOnlyGroup) Member(id string) ReadOnlyMember { return ReadOnlyMember{v.g.Member(id)} }

// MemberIDs is Group.MemberIDs (a new slice).
func (v ReadOnlyGroup) MemberIDs() []string { return v.g.MemberIDs() }

// LiveMemberIDs is Group.LiveMemberIDs (a new slice).
func (v ReadOnlyGroup) LiveMemberIDs() []string { return v.g.LiveMemberIDs() }

// OutsideTargetIDs is Group.OutsideTargetIDs (a new slice).
func (v ReadOnlyGroup) OutsideTargetIDs() []string { return v.g.OutsideTargetIDs() }

// Grantable is Group.Grantable (new slices).
func (v ReadOnlyGroup) Grantable(id string) (assigned, pending []int) { return v.g.Grantable(id) }

// Target is a copy of the member's target shards (nil when it has none).
func (v ReadOnlyGroup) Target(id string) []int { return cloneInts(v.g.Target(id)) }

// TargetOf is a copy of the member's target, and whether it has an entry.
func (v ReadOnlyGroup) TargetOf(id string) ([]int, bool) {
	t, ok := v.g.TargetOf(id)
	return cloneInts(t), ok
}

// Targets is a copy of the whole target assignment.
func (v ReadOnlyGroup) Targets() map[string][]int {
	out := make(map[string][]int, v.g.TargetCount())
	for id, t := range v.g.EachTarget() {
		out[id] = cloneInts(t)
	}
	return out
}

// EachTargetOwner calls fn, shard by shard, with each settled member whose
// target holds one of shards (TargetIndex.Owners) until fn returns false. It
// returns false, calling nothing, when the group has no target index to
// trust: the caller then looks at every member.
func (v ReadOnlyGroup) EachTargetOwner(shards []int, fn func(id string) bool) bool {
	ix, ok := v.g.TargetIndex()
	if !ok {
		return false
	}
	for _, s := range shards {
		for _, id := range ix.Owners(s) {
			if !fn(id) {
				return true
			}
		}
	}
	return true
}

// OldestTerminal is the oldest terminal member record (Group.OldestTerminal;
// the zero view when there is none).
func (v ReadOnlyGroup) OldestTerminal() ReadOnlyMember {
	if oldest := v.g.OldestTerminal(1, nil); len(oldest) > 0 {
		return ReadOnlyMember{oldest[0]}
	}
	return ReadOnlyMember{}
}

// Resharding is the resharding with that id (the zero view when none).
func (v ReadOnlyGroup) Resharding(id string) ReadOnlyResharding {
	return ReadOnlyResharding{v.g.Resharding(id)}
}

// Active is the active resharding (the zero view when none).
func (v ReadOnlyGroup) Active() ReadOnlyResharding { return ReadOnlyResharding{v.g.Active()} }

// LastResharding is the last resharding requested (the zero view when none).
func (v ReadOnlyGroup) LastResharding() ReadOnlyResharding {
	if n := len(v.g.Reshardings); n > 0 {
		return ReadOnlyResharding{v.g.Reshardings[n-1]}
	}
	return ReadOnlyResharding{}
}

// ReadOnlyMember is a member of a ReadOnlyGroup; the zero value is a member
// that does not exist.
type ReadOnlyMember struct{ m *Member }

// ReadOnly is m's read-only view (m nil: the zero view).
func (m *Member) ReadOnly() ReadOnlyMember { return ReadOnlyMember{m} }

// Exists reports whether the member exists.
func (v ReadOnlyMember) Exists() bool { return v.m != nil }

// ID is the member's id.
func (v ReadOnlyMember) ID() string { return v.m.ID }

// Name is the member's name.
func (v ReadOnlyMember) Name() string { return v.m.Name }

// State is the member's state.
func (v ReadOnlyMember) State() string { return v.m.State }

// Epoch is the member's recorded epoch.
func (v ReadOnlyMember) Epoch() int64 { return v.m.Epoch }

// MaxConcurrency is the member's reported maximum concurrency.
func (v ReadOnlyMember) MaxConcurrency() int { return v.m.MaxConcurrency }

// Principal is the principal that joined the member.
func (v ReadOnlyMember) Principal() string { return v.m.Principal }

// UpdatedAt is when the member's record last changed.
func (v ReadOnlyMember) UpdatedAt() time.Time { return v.m.UpdatedAt }

// Live is Member.Live.
func (v ReadOnlyMember) Live() bool { return v.m.Live() }

// Current is the shards the member owns.
func (v ReadOnlyMember) Current() ReadOnlyInts { return ReadOnlyInts{v.m.Current} }

// Revoking is the shards the member is releasing.
func (v ReadOnlyMember) Revoking() ReadOnlyInts { return ReadOnlyInts{v.m.Revoking} }

// Granted is the shards the member was granted.
func (v ReadOnlyMember) Granted() ReadOnlyInts { return ReadOnlyInts{v.m.Granted} }

// ReadOnlyInts is a read-only view of a sorted set of shard indexes.
type ReadOnlyInts struct{ s []int }

// Len is the number of shards.
func (v ReadOnlyInts) Len() int { return len(v.s) }

// At is the i-th shard.
func (v ReadOnlyInts) At(i int) int { return v.s[i] }

// Contains reports whether shard s is in the set.
func (v ReadOnlyInts) Contains(s int) bool { return containsInt(v.s, s) }

// Equal reports whether the shards are those of set (EqualSets).
func (v ReadOnlyInts) Equal(set []int) bool { return EqualSets(v.s, set) }

// Copy is a copy of the shards.
func (v ReadOnlyInts) Copy() []int { return cloneInts(v.s) }

// ReadOnlyResharding is a resharding of a ReadOnlyGroup; the zero value is
// one that does not exist.
type ReadOnlyResharding struct{ m *Resharding }

// Exists reports whether the resharding exists.
func (v ReadOnlyResharding) Exists() bool { return v.m != nil }

// CreatedAt is when the resharding was requested.
func (v ReadOnlyResharding) CreatedAt() time.Time { return v.m.CreatedAt }

// Retired reports whether the removed shard streams were retired.
func (v ReadOnlyResharding) Retired() bool { return v.m.Retired }

// Terminal is Resharding.Terminal.
func (v ReadOnlyResharding) Terminal() bool { return v.m.Terminal() }

// RemovedRange is Resharding.RemovedRange.
func (v ReadOnlyResharding) RemovedRange() (lo, hi int) { return v.m.RemovedRange() }

// History is a copy of the resharding's state changes.
func (v ReadOnlyResharding) History() []StateChange {
	return append([]StateChange(nil), v.m.History...)
}

// ReadOnlyStream is a stream as Reader.Stream returns it; the zero value is
// a prefix without a stream.
type ReadOnlyStream struct{ st *Stream }

// Exists reports whether the prefix has a stream.
func (v ReadOnlyStream) Exists() bool { return v.st != nil }

// Metadata reports whether the stream has metadata.
func (v ReadOnlyStream) Metadata() bool { return v.st.Metadata }
