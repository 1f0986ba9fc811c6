package replay

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// Timeline is the resharding history of one group, folded from the whole log.
type Timeline struct {
	StreamPrefix  string `json:"streamPrefix"`
	ConsumerGroup string `json:"consumerGroup"`
	// LastID is the last log entry folded.
	LastID string `json:"lastId"`
	// Deleted: the group does not exist at the end of the log. Its reshardings
	// are still listed, as last seen before the deletion.
	Deleted bool `json:"deleted"`
	// Reshardings in the order they were requested.
	Reshardings []ReshardingTimeline `json:"reshardings"`
}

// Epochs is a group's epoch and metadata version at one moment.
type Epochs struct {
	GroupEpoch      int64 `json:"groupEpoch"`
	MetadataVersion int64 `json:"metadataVersion"`
}

// ReshardingTimeline is one resharding and every state change it went through.
type ReshardingTimeline struct {
	ReshardingID   string `json:"reshardingId"`
	FromShardCount int    `json:"fromShardCount"`
	ToShardCount   int    `json:"toShardCount"`
	Kind           string `json:"kind"`
	// State is the last state the log records.
	State       string `json:"state"`
	RequestedBy string `json:"requestedBy"`
	Reason      string `json:"reason"`
	// Before is the group epoch and metadata version just before it started.
	Before Epochs `json:"before"`
	// Changes are its state changes in log order, each with the epochs after it.
	Changes    []wire.StateChange `json:"changes"`
	Rollback   RollbackHistory    `json:"rollback"`
	Retirement *wire.Retirement   `json:"retirement"`
}

// RollbackHistory says whether a rollback was asked for, and whether one could
// be asked for at the end of the log.
type RollbackHistory struct {
	Requested   bool       `json:"requested"`
	Policy      string     `json:"policy,omitempty"`
	RequestedBy string     `json:"requestedBy,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	EventID     string     `json:"eventId,omitempty"`
	At          *time.Time `json:"at,omitempty"`
	// Eligible and EligibilityReason are the log's answer (projection's rule); for
	// a scale-out the coordinator also asks Redis whether new shards hold entries.
	Eligible          bool   `json:"eligible"`
	EligibilityReason string `json:"eligibilityReason"`
}

// History folds the whole log and returns the resharding timeline of the group.
// A group that never appears in the log is ErrGroupNotFound; a deleted group
// keeps the reshardings it had. A TrimmedLog is folded from its base snapshot,
// with the reshardings before it taken from the archive.
func History(ctx context.Context, log events.Log, key projection.GroupKey) (*Timeline, error) {
	f, err := startFolder(ctx, log)
	if err != nil {
		return nil, err
	}
	var (
		seen      bool
		order     []string
		last      = map[string]*projection.Resharding{}
		rollbacks = map[string]events.Record{}
	)
	capture := func(st *projection.State) {
		g, ok := st.Group(key)
		if !ok {
			return
		}
		seen = true
		for _, m := range g.Reshardings {
			if _, ok := last[m.ReshardingID]; !ok {
				order = append(order, m.ReshardingID)
			}
			last[m.ReshardingID] = m
		}
	}
	hooks := func(st *projection.State) foldOptions {
		return foldOptions{
			before: func(rec events.Record) {
				if _, del := rec.Event.(*events.GroupDeleted); del && projection.KeyOf(rec) == key {
					capture(st)
				}
			},
			after: func(rec events.Record) {
				if projection.KeyOf(rec) != key {
					return
				}
				if _, created := rec.Event.(*events.GroupCreated); created {
					seen = true
				}
				if id := reshardingOf(rec.Event); id != "" {
					capture(st)
					if _, rb := rec.Event.(*events.ReshardingRolledBack); rb {
						rollbacks[id] = rec
					}
				}
			},
		}
	}
	if t, ok := log.(*TrimmedLog); ok {
		// Before the base snapshot only the archive is left: folded alone it
		// gives every resharding of that time, including those of a group
		// deleted since. Membership events, which move the group epoch, are not
		// archived, so the epochs it records there may be too low; the base
		// snapshot then replaces every resharding it still holds with its
		// exact copy.
		pre := &folder{log: t, st: projection.New(), end: f.st.LastID()}
		if err := pre.fold(ctx, hooks(pre.st)); err != nil {
			return nil, err
		}
		capture(f.st)
	}
	if err := f.fold(ctx, hooks(f.st)); err != nil {
		return nil, err
	}
	capture(f.st)
	if !seen {
		return nil, fmt.Errorf("%w: %s never appears in the log (read to %s)", ErrGroupNotFound, groupName(key), f.st.LastID())
	}
	end, exists := f.st.Group(key)
	t := &Timeline{StreamPrefix: key.StreamPrefix, ConsumerGroup: key.ConsumerGroup, LastID: f.st.LastID(), Deleted: !exists, Reshardings: []ReshardingTimeline{}}
	for _, id := range order {
		m := last[id]
		r := ReshardingTimeline{
			ReshardingID: m.ReshardingID, FromShardCount: m.From, ToShardCount: m.To, Kind: kind(m.From, m.To),
			State: m.State, RequestedBy: m.RequestedBy, Reason: m.Reason,
			Before:  Epochs{GroupEpoch: m.StartEpochs.GroupEpoch, MetadataVersion: m.StartEpochs.MetadataVersion},
			Changes: projection.WireStateChanges(m.History),
		}
		if rec, ok := rollbacks[id]; ok {
			at := rec.Time.UTC()
			r.Rollback = RollbackHistory{Requested: true, Policy: m.RollbackPolicy, RequestedBy: m.RollbackRequestedBy, Reason: m.RollbackReason, EventID: rec.ID, At: &at}
		}
		info := eligibility(end, m)
		r.Rollback.Eligible, r.Rollback.EligibilityReason = info.Eligible, info.Reason
		if m.Retired {
			r.Retirement = &wire.Retirement{Retired: true, StreamKeys: append([]string{}, m.RetiredKeys...), Kept: m.RetiredKept}
		}
		t.Reshardings = append(t.Reshardings, r)
	}
	return t, nil
}

// eligibility is projection's rollback rule for m against the group at the end
// of the log (nil: deleted), or not eligible when m is no longer part of it.
func eligibility(end *projection.Group, m *projection.Resharding) projection.RollbackInfo {
	if end == nil {
		return projection.RollbackInfo{Reason: "the group was deleted"}
	}
	cur := end.Resharding(m.ReshardingID)
	if cur == nil {
		return projection.RollbackInfo{Reason: "the resharding belongs to an earlier incarnation of the group (deleted and created again)"}
	}
	return projection.StaticRollbackInfo(end, cur)
}

// WriteText renders the timeline for people.
func (t *Timeline) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Resharding history of %s (log read to %s)\n", groupName(projection.GroupKey{StreamPrefix: t.StreamPrefix, ConsumerGroup: t.ConsumerGroup}), t.LastID)
	if t.Deleted {
		b.WriteString("The group has been deleted; its reshardings are shown as last seen.\n")
	}
	if len(t.Reshardings) == 0 {
		b.WriteString("\nNo reshardings.\n")
	}
	for _, r := range t.Reshardings {
		fmt.Fprintf(&b, "\n%s: %s %d -> %d shards, %s\n", r.ReshardingID, r.Kind, r.FromShardCount, r.ToShardCount, r.State)
		fmt.Fprintf(&b, "  requested by %s: %s\n", orNone(r.RequestedBy), orNone(r.Reason))
		fmt.Fprintf(&b, "  before: group epoch %d, metadata version %d\n", r.Before.GroupEpoch, r.Before.MetadataVersion)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  TIME\tEVENT\tSTATE\tPHASE\tACTOR\tGROUP EPOCH\tMETADATA VERSION")
		for _, c := range r.Changes {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%d\t%d\n", timeText(c.At), c.EventID, c.State, c.Phase, orNone(c.Actor), c.GroupEpoch, c.MetadataVersion)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if r.Rollback.Requested {
			fmt.Fprintf(&b, "  rollback: requested by %s at %s (event %s, policy %s): %s\n", orNone(r.Rollback.RequestedBy), timeText(*r.Rollback.At), r.Rollback.EventID, orNone(r.Rollback.Policy), orNone(r.Rollback.Reason))
		} else {
			b.WriteString("  rollback: never requested\n")
		}
		if r.Rollback.Eligible {
			fmt.Fprintf(&b, "  rollback now: eligible (%s)\n", r.Rollback.EligibilityReason)
		} else {
			fmt.Fprintf(&b, "  rollback now: not eligible (%s)\n", r.Rollback.EligibilityReason)
		}
		if ret := r.Retirement; ret != nil {
			what := "deleted"
			if ret.Kept {
				what = "kept by policy"
			}
			fmt.Fprintf(&b, "  retired streams (%s): %s\n", what, strings.Join(ret.StreamKeys, ", "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
