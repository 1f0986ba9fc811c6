package projection

import (
	"fmt"
	"strconv"
	"time"

	"github.com/rscoord/rsc/events"
)

// apply folds one record into the state.
func (s *State) apply(rec events.Record) {
	if q, ok := rec.Event.(*events.Quarantined); ok {
		s.quarantine(rec, q)
		return
	}
	if s.skipQuarantined(rec) {
		return
	}
	if ev, ok := rec.Event.(*events.LogRestored); ok {
		// The state goes on as it is: the restore wrote it back as the
		// snapshot at this entry.
		s.restored = RestoreMark{ID: rec.ID, From: ev.RestoredFrom}
		return
	}
	k := KeyOf(rec)
	if _, ok := rec.Event.(*events.GroupCreated); ok {
		s.prefixes[k.StreamPrefix] = true
	}
	old := s.groups[k]
	if touchesStream(rec) {
		s.streams[rec.StreamPrefix] = foldStream(s.streams[rec.StreamPrefix], rec, old)
	}
	d := beforeFold(old, rec)
	g := foldGroup(old, k, rec)
	s.settleCounts(old, g, d)
	switch {
	case g == nil && old != nil:
		delete(s.groups, k)
		s.removeOrder(k)
	case g != nil && old == nil:
		s.groups[k] = g
		s.order = append(s.order, k)
	case g != nil:
		s.groups[k] = g
	}
}

// KeyOf is the group a record belongs to.
func KeyOf(rec events.Record) GroupKey {
	return GroupKey{StreamPrefix: rec.StreamPrefix, ConsumerGroup: rec.ConsumerGroup}
}

// foldGroup is the fold of one group: one switch over every event type, each
// case one small function, mutation only. It returns the group after the
// event (a new group for group.created, nil after group.deleted or for events
// of an unknown group).
func foldGroup(g *Group, k GroupKey, rec events.Record) *Group {
	if ev, ok := rec.Event.(*events.GroupCreated); ok {
		return groupCreated(k, rec, ev)
	}
	if g == nil {
		// Events of an unknown group (command.rejected for a missing group) only
		// enter the history.
		return nil
	}
	if _, refused := rec.Event.(*events.CommandRejected); refused {
		// A refused command is in the history only: the group did not change,
		// so neither does its update time.
		return g
	}
	g.UpdatedAt = rec.Time
	ids := memberIDsOf(rec.Event)
	was := liveness(g, ids)
	defer func() {
		g.settle()
		g.noteEmpty(rec.Time, ids, was)
	}()
	switch ev := rec.Event.(type) {
	case *events.GroupDeleted:
		return nil
	case *events.ShardsRepaired, *events.RevokeAcknowledged:
		// Audit only (a revoke's new ownership came with member.ownership_reported).
	case *events.GroupOrderingChanged:
		g.Ordering = normalOrdering(ev.Ordering)
	case *events.AssignmentComputed:
		assignmentComputed(g, ev)
	case *events.AssignmentChanged:
		assignmentChanged(g, ev)
	case *events.MemberJoined:
		memberJoined(g, rec, ev)
	case *events.MemberUpdated:
		memberUpdated(g, rec, ev)
	case *events.MemberSynced:
		memberSynced(g, rec, ev)
	case *events.OwnershipReported:
		ownershipReported(g, rec, ev)
	case *events.MemberLeft:
		memberLeft(g, rec, ev)
	case *events.MembersExpired:
		membersExpired(g, rec, ev)
	case *events.MemberFenced:
		memberFenced(g, rec, ev)
	case *events.MembersPruned:
		membersPruned(g, ev)
	case *events.ReshardingPreparing:
		reshardingPreparing(g, rec, ev)
	case *events.ReshardingProvisioned:
		reshardingProvisioned(g, rec, ev)
	case *events.ReshardingActivated:
		reshardingActivated(g, rec, ev)
	case *events.ReshardingDraining:
		setEpochs(g, ev.Epochs)
		stateChange(g, ev.ReshardingID, Draining, "converged", rec)
	case *events.ReshardingDrained:
		reshardingDrained(g, rec, ev)
	case *events.ReshardingReopened:
		reshardingReopened(g, rec, ev)
	case *events.ReshardingCompleted:
		reshardingCompleted(g, rec, ev)
	case *events.ReshardingRolledBack:
		reshardingRolledBack(g, rec, ev)
	case *events.ReshardingCutover:
		reshardingCutover(g, k, rec, ev)
	case *events.BarrierReleased:
		barrierReleased(g, rec, ev)
	case *events.UnfencedWrites:
		for _, w := range ev.Shards {
			g.UnfencedWrites += w.Count
		}
	case *events.ShardsRetired:
		shardsRetired(g, rec, ev)
	case *events.AutoscalingConfigured:
		autoscalingConfigured(g, rec, ev)
	case *events.AutoscalingDisabled:
		autoscalingDisabled(g, rec, ev)
	case *events.AutoscalingDecided:
		autoscalingDecided(g, rec, ev)
	}
	return g
}

// --- the group and its assignment ---

func groupCreated(k GroupKey, rec events.Record, ev *events.GroupCreated) *Group {
	mv := ev.MetadataVersion
	if mv < 1 {
		mv = 1
	}
	g := &Group{
		Key: k, ShardCount: ev.ShardCount, AssignableCount: ev.ShardCount,
		GroupEpoch: 1, AssignmentEpoch: 1, MetadataVersion: mv, LayoutSince: mv,
		Members: map[string]*Member{}, Targets: map[string][]int{},
		CreatedAt: rec.Time, UpdatedAt: rec.Time, CreatedBy: ev.RequestedBy,
		Ordering: normalOrdering(ev.Ordering), ix: newMemberIndex(),
		Provisioned: ev.Provisioned, Registered: ev.RegisteredBy != "", Owner: ev.Principal, OwnerAnonymous: ev.Anonymous,
		EmptySince: rec.Time,
	}
	if len(ev.ForeignShards) > 0 {
		g.ForeignShards = SortedInts(ev.ForeignShards)
	}
	return g
}

// liveness is, for each member id, whether it is live.
func liveness(g *Group, ids []string) []bool {
	if len(ids) == 0 {
		return nil
	}
	out := make([]bool, len(ids))
	for i, id := range ids {
		m := g.Member(id)
		out[i] = m != nil && m.Live()
	}
	return out
}

// noteEmpty keeps EmptySince after a record that changed members ids (was:
// whether each was live before it): cleared when one of them is live, set
// at the record when one stopped being live and no member is live any more.
// Only a member event can change it, and the group is looked at whole only
// when a live member stopped being live (anyLive stops at the first live
// member it finds), so a fold does not scan the group per event.
func (g *Group) noteEmpty(at time.Time, ids []string, was []bool) {
	stopped := false
	for i, id := range ids {
		m := g.Member(id)
		if m != nil && m.Live() {
			g.EmptySince = time.Time{}
			return
		}
		stopped = stopped || was[i]
	}
	if stopped && g.EmptySince.IsZero() && !g.anyLive() {
		g.EmptySince = at
	}
}

// anyLive reports whether a member is live, from the index when the group
// has one, else stopping at the first live member.
func (g *Group) anyLive() bool {
	if g.lay != nil || g.ix != nil {
		return g.LiveCount() > 0
	}
	for _, m := range g.Members {
		if m.Live() {
			return true
		}
	}
	return false
}

func setEpochs(g *Group, e events.Epochs) {
	g.GroupEpoch = e.GroupEpoch
	g.MetadataVersion = e.MetadataVersion
}

func assignmentComputed(g *Group, ev *events.AssignmentComputed) {
	g.AssignmentEpoch = ev.AssignmentEpoch
	targets := make(map[string][]int, len(ev.Targets))
	for id, t := range ev.Targets {
		targets[id] = SortedInts(t)
	}
	g.replaceTargets(targets)
}

func assignmentChanged(g *Group, ev *events.AssignmentChanged) {
	g.AssignmentEpoch = ev.AssignmentEpoch
	for id, t := range ev.Targets {
		g.touch(id)
		g.setTarget(id, SortedInts(t))
	}
	for _, id := range ev.Removed {
		g.touch(id)
		g.deleteTarget(id)
	}
}

// --- members ---

// memberOf is the member id (created ACTIVE if the group has no record of
// it), touched at the record's time.
func memberOf(g *Group, id string, rec events.Record) *Member {
	g.touch(id)
	m := g.memberForWrite(id)
	if m == nil {
		m = &Member{ID: id, Name: id, State: MemberActive}
		g.putMember(m)
	}
	m.UpdatedAt = rec.Time
	return m
}

func memberJoined(g *Group, rec events.Record, ev *events.MemberJoined) {
	m := memberOf(g, ev.MemberID, rec)
	m.Name = ev.MemberName
	m.MaxConcurrency = ev.MaxConcurrency
	m.State = MemberActive
	m.Epoch = 0
	m.Current, m.Revoking, m.Granted = nil, nil, nil
	m.JoinedAt = rec.Time
	m.Principal = ev.Principal
	setEpochs(g, ev.Epochs)
}

func memberUpdated(g *Group, rec events.Record, ev *events.MemberUpdated) {
	m := memberOf(g, ev.MemberID, rec)
	m.Name = ev.MemberName
	m.MaxConcurrency = ev.MaxConcurrency
}

func memberSynced(g *Group, rec events.Record, ev *events.MemberSynced) {
	m := memberOf(g, ev.MemberID, rec)
	m.Epoch = ev.MemberEpoch
	m.Granted = SortedInts(ev.Granted)
}

func ownershipReported(g *Group, rec events.Record, ev *events.OwnershipReported) {
	m := memberOf(g, ev.MemberID, rec)
	m.Current = SortedInts(ev.Owned)
	m.Revoking = SortedInts(ev.Revoking)
}

func memberLeft(g *Group, rec events.Record, ev *events.MemberLeft) {
	m := memberOf(g, ev.MemberID, rec)
	m.State = MemberLeaving
	m.Epoch = -1
	m.Granted = nil
	setEpochs(g, ev.Epochs)
}

func membersExpired(g *Group, rec events.Record, ev *events.MembersExpired) {
	for _, id := range ev.MemberIDs {
		m := memberOf(g, id, rec)
		m.State = MemberExpired
		m.Epoch++
		m.Granted = nil
	}
	setEpochs(g, ev.Epochs)
}

func memberFenced(g *Group, rec events.Record, ev *events.MemberFenced) {
	m := memberOf(g, ev.MemberID, rec)
	m.State = MemberFenced
	m.Epoch = ev.MemberEpoch
	m.Current, m.Revoking, m.Granted = nil, nil, nil
	setEpochs(g, ev.Epochs)
}

func membersPruned(g *Group, ev *events.MembersPruned) {
	for _, id := range ev.MemberIDs {
		g.touch(id)
		g.deleteMember(id)
		g.deleteTarget(id)
	}
	g.MetadataVersion = ev.MetadataVersion
}

// --- reshardings ---

func reshardingPreparing(g *Group, rec events.Record, ev *events.ReshardingPreparing) {
	if g.lay != nil {
		g.lay.ownReshardings[ev.ReshardingID] = true
	}
	g.Reshardings = append(keptReshardings(g.Reshardings), &Resharding{
		ReshardingID: ev.ReshardingID, From: ev.FromShardCount, To: ev.ToShardCount,
		State: Preparing, CreatedAt: rec.Time, UpdatedAt: rec.Time,
		RequestedBy: ev.RequestedBy, Reason: ev.Reason, KeysChecked: ev.KeysChecked,
		StartEpochs: events.Epochs{GroupEpoch: g.GroupEpoch, MetadataVersion: g.MetadataVersion},
	})
	g.ActiveResharding = ev.ReshardingID
	stateChange(g, ev.ReshardingID, Preparing, "requested", rec)
}

func reshardingProvisioned(g *Group, rec events.Record, ev *events.ReshardingProvisioned) {
	if m := g.reshardingForWrite(ev.ReshardingID); m != nil {
		m.ProvisionedShards = ev.Shards
		stateChange(g, ev.ReshardingID, m.State, "provisioned", rec)
	}
}

func reshardingActivated(g *Group, rec events.Record, ev *events.ReshardingActivated) {
	groupLayout(g, ev.ShardCount, ev.MetadataVersion, rec)
	g.ShardCount = ev.ShardCount
	g.AssignableCount = ev.AssignableCount
	setEpochs(g, ev.Epochs)
	stateChange(g, ev.ReshardingID, Active, "activated", rec)
}

func reshardingDrained(g *Group, rec events.Record, ev *events.ReshardingDrained) {
	g.AssignableCount = ev.AssignableCount
	setEpochs(g, ev.Epochs)
	if m := g.reshardingForWrite(ev.ReshardingID); m != nil {
		m.Drained = true
		m.Evidence = ev.Evidence
		stateChange(g, ev.ReshardingID, m.State, "drained; revoking removed shards", rec)
	}
}

func reshardingReopened(g *Group, rec events.Record, ev *events.ReshardingReopened) {
	g.AssignableCount = ev.AssignableCount
	setEpochs(g, ev.Epochs)
	if m := g.reshardingForWrite(ev.ReshardingID); m != nil {
		m.Drained = false
		m.Evidence = ev.Evidence
		stateChange(g, ev.ReshardingID, m.State, "reopened: removed shard received entries", rec)
	}
}

func reshardingCompleted(g *Group, rec events.Record, ev *events.ReshardingCompleted) {
	g.MetadataVersion = ev.MetadataVersion
	if m := g.reshardingForWrite(ev.ReshardingID); m != nil {
		if len(ev.Evidence) > 0 {
			m.Evidence = ev.Evidence
		}
		stateChange(g, ev.ReshardingID, ev.State, "completed", rec)
	}
	if g.ActiveResharding == ev.ReshardingID {
		g.ActiveResharding = ""
	}
}

func reshardingRolledBack(g *Group, rec events.Record, ev *events.ReshardingRolledBack) {
	groupLayout(g, ev.ShardCount, ev.MetadataVersion, rec)
	g.ShardCount = ev.ShardCount
	g.AssignableCount = ev.AssignableCount
	setEpochs(g, ev.Epochs)
	if m := g.reshardingForWrite(ev.ReshardingID); m != nil {
		m.RollbackPolicy = ev.Policy
		m.RollbackRequestedBy = ev.RequestedBy
		m.RollbackReason = ev.Reason
		m.Drained = false
		stateChange(g, ev.ReshardingID, ev.State, "rollback requested ("+ev.Policy+")", rec)
	}
	if ev.State == RolledBack && g.ActiveResharding == ev.ReshardingID {
		g.ActiveResharding = ""
	}
}

// groupLayout records a change of the group's shard count to count at
// version mv (nothing when the count stays: a rollback before activation).
func groupLayout(g *Group, count int, mv int64, rec events.Record) {
	if count == g.ShardCount {
		return
	}
	g.PreviousLayouts = layoutChanged(g.PreviousLayouts, g.LayoutSince, g.ShardCount, mv, rec.Time)
	g.LayoutSince = mv
}

func shardsRetired(g *Group, rec events.Record, ev *events.ShardsRetired) {
	m := g.reshardingForWrite(ev.ReshardingID)
	if m == nil {
		return
	}
	m.Retired = true
	m.RetiredKeys = append([]string(nil), ev.StreamKeys...)
	m.RetiredKept = ev.Kept
	phase := "retired: streams deleted"
	if ev.Kept {
		phase = "retired: streams kept by policy"
	}
	stateChange(g, ev.ReshardingID, m.State, phase, rec)
}

// --- ordering ---

func reshardingCutover(g *Group, k GroupKey, rec events.Record, ev *events.ReshardingCutover) {
	byIndex := make(map[int]events.ShardCutover, len(ev.Shards))
	for _, c := range ev.Shards {
		byIndex[c.ShardIndex] = c
	}
	for _, cb := range ev.Barriers {
		b := &Barrier{
			ReshardingID: ev.ReshardingID, Fence: ev.Fence, Shard: cb.ShardIndex, After: cb.After, Since: rec.Time,
			StreamKey: k.StreamPrefix + ":" + strconv.Itoa(cb.ShardIndex),
		}
		for _, s := range cb.Sources {
			if c, ok := byIndex[s]; ok {
				b.Sources = append(b.Sources, c)
			}
		}
		g.Barriers = append(g.Barriers, b)
	}
	stateChange(g, ev.ReshardingID, stateOf(g, ev.ReshardingID), fmt.Sprintf("cutover: fences raised to %d; %d shards wait on a barrier", ev.Fence, len(ev.Barriers)), rec)
}

func barrierReleased(g *Group, rec events.Record, ev *events.BarrierReleased) {
	var kept []*Barrier // a new slice: a clone shares the old one
	for _, b := range g.Barriers {
		if b.Fence != ev.Fence || !containsInt(ev.Shards, b.Shard) {
			kept = append(kept, b)
		}
	}
	g.Barriers = kept
	stateChange(g, ev.ReshardingID, stateOf(g, ev.ReshardingID), fmt.Sprintf("barrier released on shards %v", ev.Shards), rec)
}

// --- autoscaling ---

// autoscalingOf is a copy of the group's autoscaling (a clone shares it).
func autoscalingOf(g *Group) Autoscaling {
	if g.Autoscaling != nil {
		return *g.Autoscaling
	}
	return Autoscaling{}
}

func autoscalingConfigured(g *Group, rec events.Record, ev *events.AutoscalingConfigured) {
	a := autoscalingOf(g)
	a.Policy, a.ConfiguredAt = *ev, rec.Time
	g.Autoscaling = &a
}

func autoscalingDisabled(g *Group, rec events.Record, ev *events.AutoscalingDisabled) {
	if g.Autoscaling == nil {
		return
	}
	a := autoscalingOf(g)
	a.Policy.Enabled = false
	a.Policy.RequestedBy, a.Policy.Reason = ev.RequestedBy, ev.Reason
	a.ConfiguredAt = rec.Time
	g.Autoscaling = &a
}

func autoscalingDecided(g *Group, rec events.Record, ev *events.AutoscalingDecided) {
	a := autoscalingOf(g)
	a.LastDecision = &AutoscaleDecision{At: rec.Time, EventID: rec.ID, Decided: *ev}
	if !ev.DryRun {
		if ev.Direction == events.ScaleIn {
			a.LastInAt = rec.Time
		} else {
			a.LastOutAt = rec.Time
		}
	}
	g.Autoscaling = &a
}

// normalOrdering is the ordering a group keeps: KEY, or "" for none.
func normalOrdering(o string) string {
	if o == events.OrderingKey {
		return o
	}
	return ""
}

// stateOf is a resharding's state ("" when unknown).
func stateOf(g *Group, id string) string {
	if m := g.Resharding(id); m != nil {
		return m.State
	}
	return ""
}

func stateChange(g *Group, id, state, phase string, rec events.Record) {
	m := g.reshardingForWrite(id)
	if m == nil {
		return
	}
	m.State = state
	m.UpdatedAt = rec.Time
	m.History = append(m.History, StateChange{
		State: state, Phase: phase, At: rec.Time, Actor: rec.Actor, EventID: rec.ID,
		GroupEpoch: g.GroupEpoch, MetadataVersion: g.MetadataVersion,
	})
}

// MaxFinishedReshardings is how many finished reshardings a group keeps in the
// projection (their whole story stays in the audit history): without a bound
// the state, and every snapshot, would grow with the log.
const MaxFinishedReshardings = 32

// keptReshardings drops the oldest finished reshardings beyond
// MaxFinishedReshardings - 1, before a new one is added (never the last one:
// it may still be retiring its streams).
func keptReshardings(rs []*Resharding) []*Resharding {
	finished := 0
	for _, r := range rs {
		if r.Terminal() {
			finished++
		}
	}
	drop := finished - (MaxFinishedReshardings - 1)
	if drop <= 0 {
		return rs
	}
	out := make([]*Resharding, 0, len(rs)-drop)
	for i, r := range rs {
		if drop > 0 && r.Terminal() && i < len(rs)-1 {
			drop--
			continue
		}
		out = append(out, r)
	}
	return out
}
