package commands

import (
	"fmt"
	"sort"
	"strings"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

// ScaleInput is an operator's scale request.
type ScaleInput struct {
	TargetShardCount *int
	RequestedBy      string
	Reason           string
	// Decided is the autoscaler's decision behind the request (nil for an
	// operator's): recorded with the resharding it starts, which must start
	// from its From count while the policy is on.
	Decided *events.AutoscalingDecided
}

// prepareScale checks a group scale request against the state (and, for the
// autoscaler's, that the policy and the group are still what it evaluated)
// and records the PREPARING resharding.
func PrepareScale(t *Tx, k projection.GroupKey, in ScaleInput, kc *KeyCheck) (string, error) {
	if t.Group(k) == nil {
		return "", ErrGroupNotFound
	}
	if err := checkScalable(t, k, *in.TargetShardCount, false); err != nil {
		return "", err
	}
	if err := decidedStill(t, k, in.Decided); err != nil {
		return "", err
	}
	return prepare(t, k, in, kc)
}

// decidedStill checks that an autoscaler's request meets the policy and the
// group it evaluated (nil d: an operator's request).
func decidedStill(t *Tx, k projection.GroupKey, d *events.AutoscalingDecided) error {
	if d == nil {
		return nil
	}
	if g := t.Group(k); g == nil || !g.Autoscaling.Enabled() || g.Autoscaling.Policy.DryRun || g.ShardCount != d.From || g.Active() != nil {
		return WithMsg(ErrStateConflict, "the group or its autoscaling policy changed since the load was evaluated")
	}
	return nil
}

// StreamScaleResult is the answer to a stream-level scale: every group of the
// prefix (sorted) and its resharding, in the same order; a group already at
// the target has a synthetic "noop" one.
type StreamScaleResult struct {
	StreamPrefix           string
	TargetShardCount       int
	AffectedConsumerGroups []string
	Reshardings            []projection.ReshardingView
}

// streamPlan is what a stream scale prepared: the answer so far, the
// PREPARING resharding of each group that changes, and every group in order.
type StreamPlan struct {
	Res     StreamScaleResult
	Prepped map[projection.GroupKey]string
	Order   []projection.GroupKey
}

// prepareStreamScale validates every group of the prefix and records the
// PREPARING reshardings of those that change, all or none.
func PrepareStreamScale(t *Tx, prefix string, in ScaleInput, kc *KeyCheck, by projection.GroupKey) (StreamPlan, error) {
	target := *in.TargetShardCount
	groups := t.GroupsWithPrefix(prefix)
	if len(groups) == 0 {
		if st := t.B.Overlay.Stream(prefix); st != nil && st.Metadata {
			return StreamPlan{}, WithMsg(ErrStateConflict, "the consumer groups of %s changed while it was scaled; retry", prefix)
		}
		return StreamPlan{}, WithMsg(ErrStreamNotFound, "No coordinator metadata or groups exist for stream prefix %s", prefix)
	}
	if by.ConsumerGroup != "" && t.Group(by) == nil {
		return StreamPlan{}, ErrGroupNotFound
	}
	if err := decidedStill(t, by, in.Decided); err != nil {
		return StreamPlan{}, err
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Key.ConsumerGroup < groups[j].Key.ConsumerGroup })
	unchanged := 0
	for _, g := range groups {
		if g.ShardCount == target && g.Active() == nil {
			unchanged++
			continue
		}
		if err := checkScalable(t, g.Key, target, true); err != nil {
			return StreamPlan{}, err
		}
	}
	if unchanged == len(groups) {
		return StreamPlan{}, WithMsg(ErrShardCountUnchanged, "every group of %s already has %d shards", prefix, target)
	}
	p := StreamPlan{Res: StreamScaleResult{StreamPrefix: prefix, TargetShardCount: target, AffectedConsumerGroups: []string{}, Reshardings: []projection.ReshardingView{}}, Prepped: map[projection.GroupKey]string{}}
	for _, g := range groups {
		p.Res.AffectedConsumerGroups = append(p.Res.AffectedConsumerGroups, g.Key.ConsumerGroup)
		p.Order = append(p.Order, g.Key)
		if g.ShardCount == target && g.Active() == nil {
			continue
		}
		gin := in
		if g.Key != by {
			gin.Decided = nil
		}
		id, err := prepare(t, g.Key, gin, kc)
		if err != nil {
			return StreamPlan{}, err
		}
		p.Prepped[g.Key] = id
	}
	return p, nil
}

// activateStream activates every prepared resharding of a stream scale in
// one decision; a group already at the target answers a synthetic "noop".
func ActivateStream(t *Tx, p StreamPlan, co Cutovers) (StreamScaleResult, error) {
	target := p.Res.TargetShardCount
	res := p.Res
	res.Reshardings = []projection.ReshardingView{}
	for _, gk := range p.Order {
		id, ok := p.Prepped[gk]
		if !ok {
			res.Reshardings = append(res.Reshardings, projection.ReshardingView{
				ReshardingID: "noop", FromShardCount: target, ToShardCount: target, State: projection.Deprecated,
				CreatedAt: t.Now, UpdatedAt: t.Now, Kind: "NOOP", Phase: "done", StateHistory: []projection.StateChange{},
				Drain: []projection.ShardDrainRow{}, RemovedShards: []int{},
				Revoke:   projection.RevokeProgress{Holding: map[string][]int{}},
				Rollback: projection.RollbackInfo{Reason: "no-op: the group already had this shard count"},
			})
			continue
		}
		if err := Activate(t, gk, id, co); err != nil {
			return StreamScaleResult{}, err
		}
		g := t.Group(gk)
		if g == nil || g.Resharding(id) == nil {
			return StreamScaleResult{}, ErrReshardingNotFound
		}
		res.Reshardings = append(res.Reshardings, projection.ViewResharding(g, g.Resharding(id)))
	}
	return res, nil
}

// checkScalable applies the acceptance rules of a scale request to one group.
func checkScalable(t *Tx, k projection.GroupKey, target int, streamLevel bool) error {
	g := t.Group(k)
	if t.RT.round(k).Open {
		return ErrMetadataSync
	}
	if m := g.Active(); m != nil {
		if m.State == projection.Preparing && m.To == target {
			return nil // resumed by scaleGroup
		}
		if streamLevel {
			return WithMsg(ErrActiveResharding, "Consumer group %s already has an active resharding (%s, %s)", k.ConsumerGroup, m.ReshardingID, m.State)
		}
		return WithMsg(ErrActiveResharding, "Group already has an active migration: %s (%d -> %d, %s)", m.ReshardingID, m.From, m.To, m.State)
	}
	if g.ShardCount == target {
		return WithMsg(ErrShardCountUnchanged, "group already has %d shards; a resharding must change the shard count", target)
	}
	if len(g.Barriers) > 0 {
		return WithMsg(ErrActiveResharding, "Group still has %s; a new resharding starts once they are released", describeBarriers(g.Barriers))
	}
	return nil
}

// prepare records a PREPARING resharding of k to the requested count, or
// returns the PREPARING one with the same target that it resumes. The
// shards it adds are claimed from what Redis held (kc; nil when the
// coordinator provisions nothing): their streams are the coordinator's to
// create, or refuse it when Redis has keys the coordinator does not manage.
func prepare(t *Tx, k projection.GroupKey, in ScaleInput, kc *KeyCheck) (string, error) {
	g := t.Group(k)
	if m := g.Active(); m != nil {
		return m.ReshardingID, nil // PREPARING with the same target (checkScalable)
	}
	target := *in.TargetShardCount
	prep := &events.ReshardingPreparing{ReshardingID: "reshard-" + t.newID(), FromShardCount: g.ShardCount, ToShardCount: target, RequestedBy: in.RequestedBy, Reason: in.Reason, KeysChecked: true}
	if kc != nil {
		created, err := Claim(t.B.Overlay.Stream(k.StreamPrefix), false, *kc, ShardRange(g.ShardCount, target))
		if err != nil {
			return "", err
		}
		prep.CreatedShards = created
	}
	if err := withinQuotas(t, k.StreamPrefix, groupOwner(g), 0, target-groupSpan(g)); err != nil {
		return "", err
	}
	id := prep.ReshardingID
	t.emit(k, prep)
	if in.Decided != nil {
		d := *in.Decided
		d.ReshardingID = id
		t.emitAs(AutoscalerActor, k, &d)
	}
	return id, nil
}

// activation is the layout change of activating the PREPARING resharding
// idOf names for a group (ordering.go).
func Activation(idOf func(projection.GroupKey) string) LayoutChange {
	return func(g *projection.Group) (int, bool) {
		m := g.Resharding(idOf(g.Key))
		if m == nil || m.State != projection.Preparing || g.ActiveResharding != m.ReshardingID {
			return 0, false
		}
		return m.To, true
	}
}

// activate moves a PREPARING resharding whose streams were provisioned to
// ACTIVE (nothing when it is not PREPARING any more: somebody else did). An
// ordered group's activation records its cutover first (errRefence when the
// fences co holds are not this activation's).
func Activate(t *Tx, k projection.GroupKey, id string, co Cutovers) error {
	g := t.Group(k)
	if g == nil {
		return nil
	}
	m := g.Resharding(id)
	if m == nil || m.State != projection.Preparing {
		return nil
	}
	if err := recordCutover(t, k, id, m.To, co); err != nil {
		return err
	}
	t.emitAs(Actor, k, &events.ReshardingProvisioned{ReshardingID: id, Shards: m.To})
	g = t.Group(k)
	assignable := max(m.From, m.To)
	t.emitAs(Actor, k, &events.ReshardingActivated{ReshardingID: id, ShardCount: m.To, AssignableCount: assignable, Epochs: bump(g),
		StreamMetadataVersion: streamVersionAfter(t, k.StreamPrefix, m.To)})
	reconcile(t, k)
	grantNewShards(t, k, m.From, m.To)
	return nil
}

// grantNewShards grants the shards a scale-out added (from to to-1) to the
// live members whose target holds them, in the decision that activates
// them: nobody ever held them, so nobody has to release them first, and a
// member's next heartbeat (a held one: at once) is answered with them
// without another decision. Only a grant that adds such shards and takes
// nothing away is made here; anything else is its member's heartbeat's to
// decide. The member's epoch stays: the heartbeat in flight that reports it
// is not fenced by the grant.
func grantNewShards(t *Tx, k projection.GroupKey, from, to int) {
	if to <= from || t.RT.round(k).Open {
		return
	}
	g := t.Group(k)
	for _, id := range g.LiveMemberIDs() {
		m := g.Member(id)
		if m.Epoch < 1 {
			continue // never granted anything: its heartbeat decides
		}
		assigned, _ := g.Grantable(id)
		added := minus(assigned, m.Granted)
		if len(added) == 0 || len(minus(m.Granted, assigned)) > 0 || added[0] < from || added[len(added)-1] >= to {
			continue
		}
		g = t.emitAs(Actor, k, &events.MemberSynced{MemberID: id, MemberEpoch: m.Epoch, Granted: assigned})
	}
}

// RollbackInput is an operator's rollback request.
type RollbackInput struct {
	RequestedBy string
	Reason      string
	// Policy "" or "metadata": only when metadata alone reverses it; "drain":
	// a scale-out whose new shards hold entries drains them first.
	Policy string
}

// rollbackSet is what a rollback of k's resharding id reverses, by group:
// on a stream with metadata and other groups, the same resharding of every
// group of the stream (they changed the stream's layout together), all or
// none, refused when one of them is not in it; otherwise k's alone. keys
// lists them, k first, then by name.
func RollbackSet(t *Tx, k projection.GroupKey, id string) (map[projection.GroupKey]string, []projection.GroupKey, error) {
	ids := map[projection.GroupKey]string{k: id}
	keys := []projection.GroupKey{k}
	g := t.Group(k)
	if g == nil || !ManagedSiblings(t, k) {
		return ids, keys, nil
	}
	m := g.Resharding(id)
	if m == nil || g.ActiveResharding != id || m.Terminal() || m.State == projection.RollingBack {
		return ids, keys, nil // rollback answers it (refused, or already done)
	}
	others := t.GroupsWithPrefix(k.StreamPrefix)
	sort.Slice(others, func(i, j int) bool { return others[i].Key.ConsumerGroup < others[j].Key.ConsumerGroup })
	for _, o := range others {
		if o.Key == k {
			continue
		}
		om := o.Active()
		if om == nil || om.From != m.From || om.To != m.To || om.State == projection.RollingBack {
			return nil, nil, WithMsg(ErrTopologyConflict, "consumer group %s of stream %s is not in this resharding (%d -> %d) any more: rolling the others back would leave the stream's groups on different layouts; scale the stream (POST /coord/v1/streams/%s/scale) instead", o.Key.ConsumerGroup, k.StreamPrefix, m.From, m.To, k.StreamPrefix)
		}
		ids[o.Key] = om.ReshardingID
		keys = append(keys, o.Key)
	}
	return ids, keys, nil
}

// rollbackLayout is the layout change of rolling back the resharding idOf
// names for a group once it was activated: back to its original count.
func RollbackLayout(idOf func(projection.GroupKey) string) LayoutChange {
	return func(g *projection.Group) (int, bool) {
		id := idOf(g.Key)
		m := g.Resharding(id)
		if m == nil || g.ActiveResharding != id || m.State == projection.Preparing || m.State == projection.RollingBack || m.Terminal() {
			return 0, false
		}
		return m.From, true
	}
}

// rollback decides a rollback with the entries written to the new shards
// (nil: not read, because the resharding was not an active scale-out when the
// evidence was gathered) and, for an ordered group past PREPARING, the
// cutover of going back to the original layout.
func Rollback(t *Tx, k projection.GroupKey, id string, in RollbackInput, written map[int]int64, co Cutovers) (projection.ReshardingView, error) {
	g := t.Group(k)
	if g == nil {
		return projection.ReshardingView{}, ErrGroupNotFound
	}
	if t.RT.round(k).Open {
		return projection.ReshardingView{}, ErrMetadataSync
	}
	m := g.Resharding(id)
	if m == nil {
		return projection.ReshardingView{}, ErrReshardingNotFound
	}
	if m.State == projection.RolledBack || m.State == projection.RollingBack {
		return projection.ViewResharding(g, m), nil
	}
	if m.State == projection.Deprecated {
		return projection.ReshardingView{}, WithMsg(ErrRollbackNotAllowed, "resharding %s already completed (DEPRECATED); start a new resharding to change the shard count", id)
	}
	if g.ActiveResharding != id {
		return projection.ReshardingView{}, WithMsg(ErrRollbackNotAllowed, "resharding %s is not the group's active resharding", id)
	}
	policy, state := "metadata", projection.RolledBack
	shardCount, assignable := m.From, m.From
	if m.To > m.From && m.State != projection.Preparing {
		var used []string
		for s := m.From; s < m.To; s++ {
			n, known := written[s]
			if !known && t.Rules.Streams {
				// The resharding changed between reading Redis and deciding.
				return projection.ReshardingView{}, WithMsg(ErrStateConflict, "resharding %s changed while its new shards were read; retry", id)
			}
			if n > 0 {
				used = append(used, fmt.Sprintf("%s (%d entries)", routing.StreamKey(k.StreamPrefix, s), n))
			}
		}
		if len(used) > 0 {
			if in.Policy != "drain" {
				return projection.ReshardingView{}, WithMsg(ErrRollbackNotAllowed, "entries were already written to new shards: %s; metadata alone cannot reverse this scale-out. Repeat with \"policy\": \"drain\" to route back to %d shards and drain the new ones first", strings.Join(used, ", "), m.From)
			}
			policy, state = "drain", projection.RollingBack
			assignable = m.To
		}
	}
	if m.State != projection.Preparing {
		if err := recordCutover(t, k, id, m.From, co); err != nil {
			return projection.ReshardingView{}, err
		}
		g = t.Group(k)
	}
	var streamMV int64
	if shardCount != g.ShardCount {
		streamMV = streamVersionAfter(t, k.StreamPrefix, shardCount)
	}
	t.emit(k, &events.ReshardingRolledBack{ReshardingID: id, Policy: policy, State: state, ShardCount: shardCount, AssignableCount: assignable, RequestedBy: in.RequestedBy, Reason: in.Reason, Epochs: bump(g),
		StreamMetadataVersion: streamMV})
	g = reconcile(t, k)
	return projection.ViewResharding(g, g.Resharding(id)), nil
}

// bump is the next group epoch and metadata version.
func bump(g *projection.Group) events.Epochs {
	return events.Epochs{GroupEpoch: g.GroupEpoch + 1, MetadataVersion: g.MetadataVersion + 1}
}

// reconcile recomputes the target assignment and records it when it changed or
// when the assignment epoch lags the group epoch.
func reconcile(t *Tx, k projection.GroupKey) *projection.Group {
	g := t.Group(k)
	if g == nil {
		return nil
	}
	changed, removed := assignmentDelta(g, g.AssignableCount)
	if len(changed) == 0 && len(removed) == 0 && g.AssignmentEpoch == g.GroupEpoch {
		return g
	}
	return t.emitAs(Actor, k, &events.AssignmentChanged{AssignmentEpoch: g.GroupEpoch, Targets: changed, Removed: removed})
}

// advance moves the active resharding along the steps that need no Redis: a
// converged scale-out completes, a converged scale-in starts draining.
func advance(t *Tx, k projection.GroupKey) {
	g := t.Group(k)
	if g == nil {
		return
	}
	m := g.Active()
	if m == nil || m.State != projection.Active {
		return
	}
	if g.LiveCount() > 0 && g.State() != "STABLE" {
		return
	}
	if m.To >= m.From {
		if len(g.Barriers.Of(m.ReshardingID)) > 0 {
			return // ordered: completes once its barriers are released
		}
		t.emitAs(Actor, k, &events.ReshardingCompleted{ReshardingID: m.ReshardingID, State: projection.Deprecated, MetadataVersion: g.MetadataVersion + 1})
		return
	}
	t.emitAs(Actor, k, &events.ReshardingDraining{ReshardingID: m.ReshardingID, Epochs: bump(g)})
	reconcile(t, k)
}

func RemovedShards(m *projection.Resharding) []int {
	lo, hi := m.RemovedRange()
	var out []int
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

func AllDrained(ev []events.ShardDrain) bool {
	for _, e := range ev {
		if !projection.ShardDrained(e) {
			return false
		}
	}
	return true
}

// drainProof is the Redis evidence about a resharding's removed shards the
// reconciler read just before a decision: ev per shard, and whether it proves
// every one drained (always, without a Redis for shard streams: nothing to
// prove against).
type DrainProof struct {
	Shards []int
	Ev     []events.ShardDrain
	OK     bool
}

// covers reports whether the proof is about exactly these shards.
func (p DrainProof) covers(shards []int) bool {
	return projection.EqualSets(projection.SortedInts(p.Shards), projection.SortedInts(shards))
}

// drainStep advances a DRAINING (or ROLLING_BACK) resharding with the proof
// read for its removed shards: once drained they are revoked; once nobody
// holds them and the proof still says drained, the resharding completes; if
// entries appeared again they are reopened. A proof about other shards (the
// resharding changed since it was read) decides nothing.
func DrainStep(t *Tx, k projection.GroupKey, id string, p DrainProof) {
	g := t.Group(k)
	if g == nil {
		return
	}
	m := g.Resharding(id)
	if m == nil || g.ActiveResharding != id || (m.State != projection.Draining && m.State != projection.RollingBack) {
		return
	}
	removed := RemovedShards(m)
	if !p.covers(removed) {
		return
	}
	final := projection.Deprecated
	if m.State == projection.RollingBack {
		final = projection.RolledBack
	}
	justDrained := false
	if !m.Drained {
		if !p.OK {
			return
		}
		t.emitAs(Actor, k, &events.ReshardingDrained{ReshardingID: id, AssignableCount: g.ShardCount, Evidence: p.Ev, Epochs: bump(g)})
		reconcile(t, k)
		g = t.Group(k)
		justDrained = true
	}
	for _, s := range removed {
		if g.HeldByOthers("", s) {
			return // revoke in progress
		}
	}
	if !p.OK {
		if p.Ev != nil && !justDrained {
			hi := max(m.From, m.To)
			t.emitAs(Actor, k, &events.ReshardingReopened{ReshardingID: id, AssignableCount: hi, Evidence: p.Ev, Epochs: bump(g)})
			reconcile(t, k)
		}
		return
	}
	if len(g.Barriers.Of(id)) > 0 {
		return // ordered: completes once its barriers are released
	}
	t.emitAs(Actor, k, &events.ReshardingCompleted{ReshardingID: id, State: final, Evidence: p.Ev, MetadataVersion: g.MetadataVersion + 1})
}

// retireStep decides what happens to the streams a finished resharding took
// out of use, with a proof read just before: once nobody holds them, no group
// of the prefix routes to them and Redis shows nothing left on them, it
// returns the keys of those the coordinator created for the reconciler to
// delete, and the others (adopted ones) to keep (shards.retired is recorded
// after the deletion, or at once when there is nothing to delete); kept by
// policy, they are recorded as kept at once.
//
// A producer with stale routing can still write to a removed shard after the
// resharding finished (or, for a scale-out rolled back by metadata, after the
// rollback, which checked the new shards were empty only at that moment). Such
// entries are never deleted unread: when Redis shows this group has entries
// left on a removed shard, the removed shards become assignable again
// (resharding.reopened) so members read them, and once Redis proves them
// drained they are revoked (resharding.drained) and retired as usual.
func RetireStep(t *Tx, k projection.GroupKey, id string, p DrainProof) (del, kept []string) {
	g := t.Group(k)
	if g == nil || len(g.Reshardings) == 0 {
		return nil, nil
	}
	m := g.Reshardings[len(g.Reshardings)-1]
	if m.ReshardingID != id || !m.Terminal() || m.Retired {
		return nil, nil
	}
	removed := RemovedShards(m)
	if len(removed) == 0 || !p.covers(removed) {
		return nil, nil
	}
	lo := removed[0]
	hi := removed[len(removed)-1] + 1
	reopened := g.AssignableCount > lo
	for _, other := range t.GroupsWithPrefix(k.StreamPrefix) {
		if other.ShardCount > lo || (other.Key != k && other.AssignableCount > lo) {
			return nil, nil
		}
	}
	st := t.B.Overlay.Stream(k.StreamPrefix)
	if st != nil && st.Metadata && st.ShardCount > lo {
		return nil, nil // the stream routes to them again
	}
	keys := make([]string, len(removed))
	for i, s := range removed {
		keys[i] = routing.StreamKey(k.StreamPrefix, s)
	}
	if !reopened && t.Rules.KeepRetired {
		t.emitAs(Actor, k, &events.ShardsRetired{ReshardingID: id, StreamKeys: keys, Kept: true})
		return nil, nil
	}
	held := false
	for _, s := range removed {
		held = held || g.HeldByOthers("", s)
	}
	if held && !reopened {
		return nil, nil // revoke in progress
	}
	switch {
	case reopened && p.OK:
		t.emitAs(Actor, k, &events.ReshardingDrained{ReshardingID: id, AssignableCount: g.ShardCount, Evidence: p.Ev, Epochs: bump(g)})
		reconcile(t, k)
		return nil, nil
	case reopened:
		return nil, nil // members are reading them
	case !p.OK:
		if p.Ev != nil && unreadBy(p.Ev, k.ConsumerGroup) {
			t.emitAs(Actor, k, &events.ReshardingReopened{ReshardingID: id, AssignableCount: hi, Evidence: p.Ev, Epochs: bump(g)})
			reconcile(t, k)
		}
		return nil, nil
	}
	for i, s := range removed {
		if st.Created(s) {
			del = append(del, keys[i])
		} else {
			kept = append(kept, keys[i])
		}
	}
	if len(del) == 0 {
		t.emitAs(Actor, k, &events.ShardsRetired{ReshardingID: id, StreamKeys: []string{}, KeptKeys: kept})
		return nil, nil
	}
	return del, kept
}

// retired records that the reconciler deleted a finished resharding's
// streams, and kept those it did not create (nothing when somebody recorded
// it already).
func Retired(t *Tx, k projection.GroupKey, id string, keys, kept []string) {
	g := t.Group(k)
	if g == nil || len(g.Reshardings) == 0 {
		return
	}
	m := g.Reshardings[len(g.Reshardings)-1]
	if m.ReshardingID != id || !m.Terminal() || m.Retired {
		return
	}
	t.emitAs(Actor, k, &events.ShardsRetired{ReshardingID: id, StreamKeys: keys, KeptKeys: kept})
}

// unreadBy reports whether consumer group name has entries pending or left to
// read (or an unknown lag) on any of the shards.
func unreadBy(ev []events.ShardDrain, name string) bool {
	for _, e := range ev {
		if !e.Exists {
			continue
		}
		for _, gd := range e.Groups {
			if gd.Name == name && (gd.Pending != 0 || gd.Lag != 0) {
				return true
			}
		}
	}
	return false
}
