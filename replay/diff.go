package replay

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// Change is a value that differs between two points.
type Change[T comparable] struct {
	From T `json:"from"`
	To   T `json:"to"`
}

// change returns nil when a and b are equal.
func change[T comparable](a, b T) *Change[T] {
	if a == b {
		return nil
	}
	return &Change[T]{From: a, To: b}
}

// ShardsChange is a set of shard indexes that differs between two points.
type ShardsChange struct {
	From    []int `json:"from"`
	To      []int `json:"to"`
	Added   []int `json:"added"`
	Removed []int `json:"removed"`
}

// shardsChange returns nil when a and b hold the same shards.
func shardsChange(a, b []int) *ShardsChange {
	a, b = projection.SortedInts(a), projection.SortedInts(b)
	if projection.EqualSets(a, b) {
		return nil
	}
	c := &ShardsChange{From: a, To: b, Added: []int{}, Removed: []int{}}
	for _, s := range b {
		if !slices.Contains(a, s) {
			c.Added = append(c.Added, s)
		}
	}
	for _, s := range a {
		if !slices.Contains(b, s) {
			c.Removed = append(c.Removed, s)
		}
	}
	return c
}

// GroupDiff is what changed for one group between two points of the log. Nil
// and empty fields did not change.
type GroupDiff struct {
	StreamPrefix  string `json:"streamPrefix"`
	ConsumerGroup string `json:"consumerGroup"`
	// FromID and ToID are the last entries folded at each point.
	FromID string `json:"fromId"`
	ToID   string `json:"toId"`
	// Events is how many entries of this group lie between the two points.
	Events int `json:"events"`
	// ExistedBefore and ExistsAfter tell a group created or deleted in between.
	ExistedBefore bool `json:"existedBefore"`
	ExistsAfter   bool `json:"existsAfter"`

	State                *Change[string] `json:"state,omitempty"`
	ShardCount           *Change[int]    `json:"shardCount,omitempty"`
	AssignableShardCount *Change[int]    `json:"assignableShardCount,omitempty"`
	GroupEpoch           *Change[int64]  `json:"groupEpoch,omitempty"`
	AssignmentEpoch      *Change[int64]  `json:"assignmentEpoch,omitempty"`
	MetadataVersion      *Change[int64]  `json:"metadataVersion,omitempty"`
	ActiveResharding     *Change[string] `json:"activeResharding,omitempty"`

	MembersAdded   []MemberSummary `json:"membersAdded"`
	MembersRemoved []MemberSummary `json:"membersRemoved"`
	MembersChanged []MemberChange  `json:"membersChanged"`
	// Targets lists members whose target assignment changed.
	Targets     []TargetChange     `json:"targets"`
	Reshardings []ReshardingChange `json:"reshardings"`
}

// MemberSummary names a member and its state.
type MemberSummary struct {
	MemberID string `json:"memberId"`
	State    string `json:"state"`
}

// MemberChange is a member present at both points that changed.
type MemberChange struct {
	MemberID          string          `json:"memberId"`
	State             *Change[string] `json:"state,omitempty"`
	MemberEpoch       *Change[int64]  `json:"memberEpoch,omitempty"`
	CurrentAssignment *ShardsChange   `json:"currentAssignment,omitempty"`
}

// TargetChange is a member whose target assignment changed.
type TargetChange struct {
	MemberID string `json:"memberId"`
	ShardsChange
}

// ReshardingChange is a resharding requested or moved between the two points.
type ReshardingChange struct {
	ReshardingID   string `json:"reshardingId"`
	FromShardCount int    `json:"fromShardCount"`
	ToShardCount   int    `json:"toShardCount"`
	// New: requested between the two points (State.From is then "").
	New   bool           `json:"new"`
	State Change[string] `json:"state"`
	// Changes are its state changes that lie between the two points.
	Changes []wire.StateChange `json:"changes"`
}

// Empty reports whether nothing changed.
func (d *GroupDiff) Empty() bool {
	return d.ExistedBefore == d.ExistsAfter && d.State == nil && d.ShardCount == nil && d.AssignableShardCount == nil &&
		d.GroupEpoch == nil && d.AssignmentEpoch == nil && d.MetadataVersion == nil && d.ActiveResharding == nil &&
		len(d.MembersAdded) == 0 && len(d.MembersRemoved) == 0 && len(d.MembersChanged) == 0 &&
		len(d.Targets) == 0 && len(d.Reshardings) == 0
}

// Diff folds the log to fromID and on to toID (both inclusive; "" is the start
// and the end of the log) and returns what changed for the group. fromID after
// toID is ErrInvalidArgument; a group that exists at neither point is
// ErrGroupNotFound. On a TrimmedLog the start is its base snapshot, and a point
// before it is ErrTrimmed.
func Diff(ctx context.Context, log events.Log, key projection.GroupKey, fromID, toID string) (*GroupDiff, error) {
	if err := checkPoint(log, "from id", fromID); err != nil {
		return nil, err
	}
	if err := checkPoint(log, "to id", toID); err != nil {
		return nil, err
	}
	if fromID == "" {
		fromID = events.ZeroID
	}
	from, err := parseUserID("from id", fromID)
	if err != nil {
		return nil, err
	}
	if toID != "" {
		to, err := parseUserID("to id", toID)
		if err != nil {
			return nil, err
		}
		if to.Less(from) {
			return nil, fmt.Errorf("%w: from id %s is after to id %s", ErrInvalidArgument, fromID, toID)
		}
	}
	f, err := startFolder(ctx, log)
	if err != nil {
		return nil, err
	}
	if err := f.fold(ctx, foldOptions{until: fromID}); err != nil {
		return nil, err
	}
	a, _ := f.st.Group(key)
	aID := f.st.LastID()
	n := 0
	err = f.fold(ctx, foldOptions{until: toID, after: func(rec events.Record) {
		if projection.KeyOf(rec) == key {
			n++
		}
	}})
	if err != nil {
		return nil, err
	}
	b, _ := f.st.Group(key)
	if a == nil && b == nil {
		return nil, fmt.Errorf("%w: %s exists neither at %s nor at %s", ErrGroupNotFound, groupName(key), aID, f.st.LastID())
	}
	d := diffGroups(key, a, b, aID, f.st.LastID())
	d.Events = n
	return d, nil
}

// diffGroups compares two copies of a group (nil: absent) taken after the
// entries fromID and toID.
func diffGroups(key projection.GroupKey, a, b *projection.Group, fromID, toID string) *GroupDiff {
	d := &GroupDiff{
		StreamPrefix: key.StreamPrefix, ConsumerGroup: key.ConsumerGroup, FromID: fromID, ToID: toID,
		ExistedBefore: a != nil, ExistsAfter: b != nil,
		MembersAdded: []MemberSummary{}, MembersRemoved: []MemberSummary{}, MembersChanged: []MemberChange{},
		Targets: []TargetChange{}, Reshardings: []ReshardingChange{},
	}
	empty := &projection.Group{Key: key}
	if a == nil {
		a = empty
	}
	if b == nil {
		b = empty
	}
	state := func(g *projection.Group) string {
		if g == empty {
			return ""
		}
		return g.State()
	}
	d.State = change(state(a), state(b))
	d.ShardCount = change(a.ShardCount, b.ShardCount)
	d.AssignableShardCount = change(a.AssignableCount, b.AssignableCount)
	d.GroupEpoch = change(a.GroupEpoch, b.GroupEpoch)
	d.AssignmentEpoch = change(a.AssignmentEpoch, b.AssignmentEpoch)
	d.MetadataVersion = change(a.MetadataVersion, b.MetadataVersion)
	d.ActiveResharding = change(a.ActiveResharding, b.ActiveResharding)

	for _, id := range unionIDs(a.MemberIDs(), b.MemberIDs()) {
		ma, mb := a.Member(id), b.Member(id)
		switch {
		case ma == nil:
			d.MembersAdded = append(d.MembersAdded, MemberSummary{MemberID: id, State: mb.State})
		case mb == nil:
			d.MembersRemoved = append(d.MembersRemoved, MemberSummary{MemberID: id, State: ma.State})
		default:
			c := MemberChange{MemberID: id, State: change(ma.State, mb.State), MemberEpoch: change(ma.Epoch, mb.Epoch), CurrentAssignment: shardsChange(ma.Current, mb.Current)}
			if c.State != nil || c.MemberEpoch != nil || c.CurrentAssignment != nil {
				d.MembersChanged = append(d.MembersChanged, c)
			}
		}
	}
	for _, id := range unionIDs(targetIDs(a), targetIDs(b)) {
		if c := shardsChange(a.Target(id), b.Target(id)); c != nil {
			d.Targets = append(d.Targets, TargetChange{MemberID: id, ShardsChange: *c})
		}
	}
	for _, mb := range b.Reshardings {
		ma := a.Resharding(mb.ReshardingID)
		rc := ReshardingChange{ReshardingID: mb.ReshardingID, FromShardCount: mb.From, ToShardCount: mb.To, New: ma == nil, State: Change[string]{To: mb.State}, Changes: []wire.StateChange{}}
		if ma != nil {
			rc.State.From = ma.State
		}
		for _, c := range projection.WireStateChanges(mb.History) {
			if after(c.EventID, fromID) {
				rc.Changes = append(rc.Changes, c)
			}
		}
		if rc.New || len(rc.Changes) > 0 {
			d.Reshardings = append(d.Reshardings, rc)
		}
	}
	return d
}

// after reports whether id comes after pos (false for malformed ids).
func after(id, pos string) bool {
	c, err := events.CompareIDs(id, pos)
	return err == nil && c > 0
}

func targetIDs(g *projection.Group) []string {
	ids := make([]string, 0, g.TargetCount())
	for id := range g.EachTarget() {
		ids = append(ids, id)
	}
	return ids
}

func unionIDs(a, b []string) []string {
	out := append(append([]string{}, a...), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

// WriteText renders the diff for people.
func (d *GroupDiff) WriteText(w io.Writer) error {
	var b strings.Builder
	name := groupName(projection.GroupKey{StreamPrefix: d.StreamPrefix, ConsumerGroup: d.ConsumerGroup})
	fmt.Fprintf(&b, "Changes to %s from %s to %s (%d events of the group)\n", name, d.FromID, d.ToID, d.Events)
	switch {
	case !d.ExistedBefore && d.ExistsAfter:
		b.WriteString("  group created\n")
	case d.ExistedBefore && !d.ExistsAfter:
		b.WriteString("  group deleted\n")
	}
	if d.Empty() {
		b.WriteString("  no changes\n")
	}
	line := func(what string, c fmt.Stringer) {
		if c != nil {
			fmt.Fprintf(&b, "  %s: %s\n", what, c)
		}
	}
	line("state", strChange(d.State))
	line("shard count", strChange(d.ShardCount))
	line("assignable shards", strChange(d.AssignableShardCount))
	line("group epoch", strChange(d.GroupEpoch))
	line("assignment epoch", strChange(d.AssignmentEpoch))
	line("metadata version", strChange(d.MetadataVersion))
	line("active resharding", strChange(d.ActiveResharding))
	for _, m := range d.MembersAdded {
		fmt.Fprintf(&b, "  member added: %s (%s)\n", m.MemberID, m.State)
	}
	for _, m := range d.MembersRemoved {
		fmt.Fprintf(&b, "  member removed: %s (was %s)\n", m.MemberID, m.State)
	}
	for _, m := range d.MembersChanged {
		var parts []string
		if m.State != nil {
			parts = append(parts, "state "+strChange(m.State).String())
		}
		if m.MemberEpoch != nil {
			parts = append(parts, "epoch "+strChange(m.MemberEpoch).String())
		}
		if m.CurrentAssignment != nil {
			parts = append(parts, "current "+m.CurrentAssignment.String())
		}
		fmt.Fprintf(&b, "  member %s: %s\n", m.MemberID, strings.Join(parts, "; "))
	}
	for _, t := range d.Targets {
		fmt.Fprintf(&b, "  target of %s: %s\n", t.MemberID, t.ShardsChange.String())
	}
	for _, r := range d.Reshardings {
		if r.New {
			fmt.Fprintf(&b, "  resharding %s (%d -> %d): requested, now %s\n", r.ReshardingID, r.FromShardCount, r.ToShardCount, r.State.To)
		} else {
			fmt.Fprintf(&b, "  resharding %s (%d -> %d): %s -> %s\n", r.ReshardingID, r.FromShardCount, r.ToShardCount, r.State.From, r.State.To)
		}
		for _, c := range r.Changes {
			fmt.Fprintf(&b, "    %s %s %s: %s (by %s)\n", c.EventID, timeText(c.At), c.State, c.Phase, orNone(c.Actor))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// String renders "[0 1 2 3] -> [0 1] (-2 -3)".
func (c ShardsChange) String() string {
	var parts []string
	for _, s := range c.Added {
		parts = append(parts, fmt.Sprintf("+%d", s))
	}
	for _, s := range c.Removed {
		parts = append(parts, fmt.Sprintf("-%d", s))
	}
	return fmt.Sprintf("%s -> %s (%s)", intList(c.From), intList(c.To), strings.Join(parts, " "))
}

// changeText renders a Change as "a -> b".
type changeText string

func (c changeText) String() string { return string(c) }

// strChange renders a change, or returns nil (an untyped nil Stringer) when there is none.
func strChange[T comparable](c *Change[T]) fmt.Stringer {
	if c == nil {
		return nil
	}
	return changeText(fmt.Sprintf("%s -> %s", valueText(c.From), valueText(c.To)))
}

func valueText(v any) string {
	if s, ok := v.(string); ok && s == "" {
		return "(none)"
	}
	return fmt.Sprint(v)
}
