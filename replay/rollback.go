package replay

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// Plan is what undoing one resharding involves, read from the log: the group
// just before the resharding's first event and after its last one, the diff
// between them, whether the coordinator would accept a rollback now, and the
// steps a rollback (or, when it is no longer eligible, a manual undo) would
// have to take, as plain sentences.
type Plan struct {
	StreamPrefix   string `json:"streamPrefix"`
	ConsumerGroup  string `json:"consumerGroup"`
	ReshardingID   string `json:"reshardingId"`
	FromShardCount int    `json:"fromShardCount"`
	ToShardCount   int    `json:"toShardCount"`
	Kind           string `json:"kind"`
	// State is the resharding's state at the end of the log.
	State string `json:"state"`
	// FirstEventID is its resharding.preparing entry, LastEventID its last entry.
	FirstEventID string `json:"firstEventId"`
	LastEventID  string `json:"lastEventId"`
	// Before is the group after the entry preceding FirstEventID; After is the
	// group after LastEventID.
	Before *GroupSnapshot `json:"before"`
	After  *GroupSnapshot `json:"after"`
	// Diff is what changed from Before to After, all events of the group included.
	Diff *GroupDiff `json:"diff"`
	// Rollback is projection's rollback rule at the end of the log.
	Rollback wire.RollbackInfo `json:"rollback"`
	// Undo lists what a rollback would have to undo, one sentence per step. For
	// a resharding that is still active they compare Before with the end of the
	// log, since a rollback would start from there.
	Undo []string `json:"undo"`
}

// RollbackPlan folds the whole log and explains what rolling back the
// resharding would involve. An unknown resharding is ErrReshardingNotFound; a
// group that never appears is ErrGroupNotFound. On a TrimmedLog, a resharding
// that began before the base snapshot is ErrTrimmed.
func RollbackPlan(ctx context.Context, log events.Log, key projection.GroupKey, reshardingID string) (*Plan, error) {
	if reshardingID == "" {
		return nil, fmt.Errorf("%w: empty resharding id", ErrInvalidArgument)
	}
	f, err := startFolder(ctx, log)
	if err != nil {
		return nil, err
	}
	// On a trimmed log, a resharding that began before the base snapshot has
	// no state before it left to compare with.
	g0, inBase := f.st.Group(key)
	startedBefore := inBase && g0.Resharding(reshardingID) != nil
	var (
		seen          bool
		before, after *projection.Group
		beforeID      string
		firstID       string
		lastID        string
		running, n    int // entries of the group since the first event; up to the last
	)
	seen = inBase
	err = f.fold(ctx, foldOptions{
		before: func(rec events.Record) {
			if projection.KeyOf(rec) != key {
				return
			}
			if p, ok := rec.Event.(*events.ReshardingPreparing); ok && p.ReshardingID == reshardingID && firstID == "" {
				before, _ = f.st.Group(key)
				beforeID = f.st.LastID()
			}
		},
		after: func(rec events.Record) {
			if projection.KeyOf(rec) != key {
				return
			}
			if _, ok := f.st.Group(key); ok {
				seen = true
			}
			if firstID == "" && before == nil {
				return
			}
			if firstID == "" {
				firstID = rec.ID
			}
			running++
			if reshardingOf(rec.Event) == reshardingID {
				after, _ = f.st.Group(key)
				lastID, n = rec.ID, running
			}
		},
	})
	if err != nil {
		return nil, err
	}
	if !seen {
		return nil, fmt.Errorf("%w: %s never appears in the log (read to %s)", ErrGroupNotFound, groupName(key), f.st.LastID())
	}
	if startedBefore && firstID == "" {
		return nil, log.(*TrimmedLog).errBefore("the start of resharding " + reshardingID)
	}
	if firstID == "" || after == nil || after.Resharding(reshardingID) == nil {
		return nil, fmt.Errorf("%w: %s has no resharding %s (log read to %s)", ErrReshardingNotFound, groupName(key), reshardingID, f.st.LastID())
	}
	end, _ := f.st.Group(key)
	m := after.Resharding(reshardingID)
	info := eligibility(end, m)
	p := &Plan{
		StreamPrefix: key.StreamPrefix, ConsumerGroup: key.ConsumerGroup, ReshardingID: reshardingID,
		FromShardCount: m.From, ToShardCount: m.To, Kind: kind(m.From, m.To), State: m.State,
		FirstEventID: firstID, LastEventID: lastID,
		Rollback: projection.WireRollback(info),
	}
	if end != nil && end.Resharding(reshardingID) != nil {
		p.State = end.Resharding(reshardingID).State
	}
	bs, as := snapshotOf(before, beforeID), snapshotOf(after, lastID)
	p.Before, p.After = &bs, &as
	p.Diff = diffGroups(key, before, after, beforeID, lastID)
	p.Diff.Events = n
	p.Undo = undoSteps(key, before, after, end, m, info)
	return p, nil
}

// undoSteps says, step by step, what a rollback of m would have to undo: the
// difference between before (the group just before m) and after (just after m's
// last event), read with the group at the end of the log (nil: deleted). While
// m is still the group's active resharding, everything since it started is
// part of it (its reconciles carry no resharding id), so the steps compare
// before with the end of the log instead.
func undoSteps(key projection.GroupKey, before, after, end *projection.Group, m *projection.Resharding, info projection.RollbackInfo) []string {
	if end != nil && end.ActiveResharding == m.ReshardingID {
		after = end
	}
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	direction := "out"
	if m.To < m.From {
		direction = "in"
	}
	add("Resharding %s scaled %s %s from %d to %d shards; the log records it as %s.", m.ReshardingID, groupName(key), direction, m.From, m.To, m.State)
	if info.Eligible {
		add("Eligible for rollback (policy %s): %s.", info.Policy, info.Reason)
	} else {
		add("Not eligible for rollback: %s. The steps below are what undoing it by hand, or by a new resharding, would involve.", info.Reason)
	}
	if end == nil {
		add("The group was deleted after the resharding; there is nothing left to roll back.")
		return out
	}

	steps := len(out)
	switch {
	case after.ShardCount < before.ShardCount:
		add("Restore the routed shard count from %d to %d: %s go back into producer routing.", after.ShardCount, before.ShardCount, shardRange(after.ShardCount, before.ShardCount))
	case after.ShardCount > before.ShardCount:
		add("Restore the routed shard count from %d to %d: remove %s from producer routing.", after.ShardCount, before.ShardCount, shardRange(before.ShardCount, after.ShardCount))
	}
	switch {
	case after.AssignableCount < before.AssignableCount:
		add("Restore the assignable shard count from %d to %d: %s are assigned to members again.", after.AssignableCount, before.AssignableCount, shardRange(after.AssignableCount, before.AssignableCount))
	case after.AssignableCount > before.AssignableCount:
		add("Restore the assignable shard count from %d to %d: %s are no longer assigned.", after.AssignableCount, before.AssignableCount, shardRange(before.AssignableCount, after.AssignableCount))
	}

	// Shards the resharding added (scale-out): whoever holds them must let go,
	// and entries that reached them must be drained before their streams go.
	if m.To > m.From && after.ShardCount > before.ShardCount {
		lo, hi := m.From, m.To
		if holders := holding(after, lo, hi); len(holders) > 0 {
			add("Revoke %s from %s and wait until they release them.", shardRange(lo, hi), joinAnd(holders))
		}
		add("If entries reached %s, drain them first (rollback policy \"drain\"): a metadata-only rollback is allowed only while they are empty.", shardRange(lo, hi))
		add("Retire the new shard streams %s once nobody holds them (delete them, or keep them by policy).", joinAnd(streamKeys(key.StreamPrefix, lo, hi)))
	}
	// Shards the resharding removed (scale-in): they come back, and their
	// streams must exist again if retirement deleted them.
	if m.To < m.From {
		lo, hi := m.To, m.From
		if m.Drained || m.Terminal() {
			if holders := holding(before, lo, hi); len(holders) > 0 {
				add("%s were revoked from %s after the drain; they come back through the restored targets.", capitalize(shardRange(lo, hi)), joinAnd(holders))
			}
		}
		if m.Retired && !m.RetiredKept {
			add("Recreate the deleted shard streams %s and their consumer groups before routing to them: retirement deleted them (they had been proven drained).", joinAnd(m.RetiredKeys))
		} else if m.Retired {
			add("The shard streams %s were kept at retirement; check their consumer groups before routing to them again.", joinAnd(m.RetiredKeys))
		}
	}

	// Target assignment per member.
	for _, id := range unionIDs(targetIDs(before), targetIDs(after)) {
		mb, ma := before.Member(id), after.Member(id)
		tb, ta := projection.SortedInts(before.Target(id)), projection.SortedInts(after.Target(id))
		if projection.EqualSets(tb, ta) {
			continue
		}
		switch {
		case mb == nil || !mb.Live():
			add("Member %s joined during the resharding with target %s; a rollback keeps it and recomputes its target.", id, intList(ta))
		case ma == nil || !ma.Live():
			state := "was pruned"
			if ma != nil {
				state = "is " + ma.State
			}
			add("Member %s %s since the resharding started; a rollback does not bring back its target %s, the remaining members share it.", id, state, intList(tb))
		default:
			add("Restore the target assignment of member %s from %s to %s.", id, intList(ta), intList(tb))
		}
	}
	if len(out) == steps {
		add("Shard counts and target assignments are as they were before the resharding; nothing to restore.")
	}

	// Epochs only move forward.
	if after.GroupEpoch != before.GroupEpoch || after.MetadataVersion != before.MetadataVersion {
		add("Epochs are not restored: the resharding moved the group epoch from %d to %d and the metadata version from %d to %d; a rollback bumps them again (from %d and %d now) so members fetch the old layout.",
			before.GroupEpoch, after.GroupEpoch, before.MetadataVersion, after.MetadataVersion, end.GroupEpoch, end.MetadataVersion)
	}

	// Later reshardings sit on top of this one.
	var later []string
	found := false
	for _, o := range end.Reshardings {
		if o.ReshardingID == m.ReshardingID {
			found = true
			continue
		}
		if found {
			later = append(later, fmt.Sprintf("%s (%d -> %d, %s)", o.ReshardingID, o.From, o.To, o.State))
		}
	}
	if len(later) > 0 {
		add("Later reshardings changed the group after this one: %s; undo them first.", joinAnd(later))
	}
	return out
}

// holding lists members that hold any shard of [lo, hi), as "m1 (4, 5)".
func holding(g *projection.Group, lo, hi int) []string {
	var out []string
	for _, id := range g.MemberIDs() {
		mem := g.Member(id)
		var held []string
		for s := lo; s < hi; s++ {
			if mem.Holds(s) || slices.Contains(g.Target(id), s) {
				held = append(held, fmt.Sprint(s))
			}
		}
		if len(held) > 0 {
			out = append(out, fmt.Sprintf("member %s (%s)", id, strings.Join(held, ", ")))
		}
	}
	sort.Strings(out)
	return out
}

func streamKeys(prefix string, lo, hi int) []string {
	var out []string
	for s := lo; s < hi; s++ {
		out = append(out, fmt.Sprintf("%s:%d", prefix, s))
	}
	return out
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// WriteText renders the plan for people: the sentences, then the diff.
func (p *Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Rollback plan for resharding %s of %s (%s %d -> %d, %s)\n", p.ReshardingID,
		groupName(projection.GroupKey{StreamPrefix: p.StreamPrefix, ConsumerGroup: p.ConsumerGroup}), p.Kind, p.FromShardCount, p.ToShardCount, p.State)
	fmt.Fprintf(&b, "Events %s to %s; state before is at %s.\n\n", p.FirstEventID, p.LastEventID, p.Before.LastID)
	for i, s := range p.Undo {
		fmt.Fprintf(&b, "%2d. %s\n", i+1, s)
	}
	b.WriteString("\n")
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	return p.Diff.WriteText(w)
}
