package commands

import (
	"context"
	"crypto/rand"
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

// Scale starts a resharding of one group: read what Redis holds of the
// shards it adds, record PREPARING (refusing keys the coordinator does not
// manage), provision the target's shard streams (outside the writer),
// activate the new count (producers switch at once; members converge
// through heartbeats) and answer with the resharding. A provisioning failure
// leaves it PREPARING; repeating the request, or the reconciler's next
// pass, resumes it. A group of a stream with metadata and other groups
// scales with all of them (scaleStream): the stream has one layout.
func (s *Service) Scale(ctx context.Context, meta events.Meta, k projection.GroupKey, in ScaleInput) (projection.ReshardingView, error) {
	v, err := s.scale(ctx, meta, k, in)
	return s.withEventIDs(k, v), err
}

func (s *Service) scale(ctx context.Context, meta events.Meta, k projection.GroupKey, in ScaleInput) (projection.ReshardingView, error) {
	return admin(ctx, s, meta, k, "group.scale", in.RequestedBy, func(meta events.Meta) (projection.ReshardingView, error) {
		if err := ValidateKey(k); err != nil {
			return projection.ReshardingView{}, err
		}
		if err := s.rules.validateScale(in); err != nil {
			return projection.ReshardingView{}, err
		}
		siblings := false
		_ = s.peek(func(t *tx) error { siblings = managedSiblings(t, k); return nil })
		if siblings {
			res, err := s.scaleStream(ctx, meta, k.StreamPrefix, in, k)
			if err != nil {
				return projection.ReshardingView{}, err
			}
			for i, name := range res.AffectedConsumerGroups {
				if name == k.ConsumerGroup {
					return res.Reshardings[i], nil
				}
			}
			return projection.ReshardingView{}, ErrReshardingNotFound
		}
		kc, err := s.readTarget(ctx, k.StreamPrefix, *in.TargetShardCount)
		if err != nil {
			return projection.ReshardingView{}, err
		}
		id, err := submit(ctx, s.dec, meta, func(t *tx) (string, error) { return prepareScale(t, k, in, kc) })
		if err != nil {
			return projection.ReshardingView{}, err
		}
		if err := s.rec.provisionFor(ctx, k, *in.TargetShardCount); err != nil {
			return projection.ReshardingView{}, err
		}
		return fencedChange(ctx, s.rec, meta, []projection.GroupKey{k}, activation(func(projection.GroupKey) string { return id }), func(t *tx, co cutovers) (projection.ReshardingView, error) {
			if err := activate(t, k, id, co); err != nil {
				return projection.ReshardingView{}, err
			}
			g := t.group(k)
			if g == nil || g.Resharding(id) == nil {
				return projection.ReshardingView{}, ErrReshardingNotFound
			}
			return projection.ViewResharding(g, g.Resharding(id)), nil
		})
	})
}

// prepareScale checks a group scale request against the state (and, for the
// autoscaler's, that the policy and the group are still what it evaluated)
// and records the PREPARING resharding.
func prepareScale(t *tx, k projection.GroupKey, in ScaleInput, kc *keyCheck) (string, error) {
	if t.group(k) == nil {
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
func decidedStill(t *tx, k projection.GroupKey, d *events.AutoscalingDecided) error {
	if d == nil {
		return nil
	}
	if g := t.group(k); g == nil || !g.AutoscalingEnabled() || g.Autoscaling.Policy.DryRun || g.ShardCount != d.From || g.Active() != nil {
		return withMsg(ErrStateConflict, "the group or its autoscaling policy changed since the load was evaluated")
	}
	return nil
}

// readTarget reads what Redis holds of the shards a scale of prefix's groups
// to target adds (from the smallest shard count among them); nil when the
// coordinator provisions nothing.
func (s *Service) readTarget(ctx context.Context, prefix string, target int) (*keyCheck, error) {
	if !s.rules.provisioning {
		return nil, nil
	}
	from := target
	_ = s.peek(func(t *tx) error {
		for _, g := range t.groupsWithPrefix(prefix) {
			from = min(from, g.ShardCount)
		}
		return nil
	})
	kc, err := s.rec.readKeys(ctx, prefix, shardRange(from, target), false)
	if err != nil {
		return nil, err
	}
	return &kc, nil
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

// ScaleStream scales a stream: one without consumer groups changes its
// layout at once (scaleBareStream); otherwise every group of the prefix
// scales to the same count, all or none (scaleStream).
func (s *Service) ScaleStream(ctx context.Context, meta events.Meta, prefix string, in ScaleInput) (StreamScaleResult, error) {
	res, err := s.scaleStreamCommand(ctx, meta, prefix, in)
	for i, name := range res.AffectedConsumerGroups {
		if i < len(res.Reshardings) {
			res.Reshardings[i] = s.withEventIDs(projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: name}, res.Reshardings[i])
		}
	}
	return res, err
}

func (s *Service) scaleStreamCommand(ctx context.Context, meta events.Meta, prefix string, in ScaleInput) (StreamScaleResult, error) {
	k := projection.GroupKey{StreamPrefix: prefix}
	return admin(ctx, s, meta, k, "stream.scale", in.RequestedBy, func(meta events.Meta) (StreamScaleResult, error) {
		if err := routing.ValidatePrefix(prefix); err != nil {
			return StreamScaleResult{}, withMsg(ErrInvalid, "%s", err.Error())
		}
		if err := s.rules.validateScale(in); err != nil {
			return StreamScaleResult{}, err
		}
		if res, bare, err := s.scaleBareStream(ctx, meta, prefix, in); bare || err != nil {
			return res, err
		}
		return s.scaleStream(ctx, meta, prefix, in, projection.GroupKey{})
	})
}

// scaleStream scales every group of a prefix to the same count, all or
// none: one decision validates every group and records their PREPARING
// reshardings, the target's streams are provisioned for each, and one
// decision activates them all. by is the group whose own scale request it
// is (an autoscaler's decision is recorded with its resharding alone); zero
// for a stream-level request.
func (s *Service) scaleStream(ctx context.Context, meta events.Meta, prefix string, in ScaleInput, by projection.GroupKey) (StreamScaleResult, error) {
	{
		target := *in.TargetShardCount
		kc, err := s.readTarget(ctx, prefix, target)
		if err != nil {
			return StreamScaleResult{}, err
		}
		p, err := submit(ctx, s.dec, meta, func(t *tx) (streamPlan, error) { return prepareStreamScale(t, prefix, in, kc, by) })
		if err != nil {
			return StreamScaleResult{}, err
		}
		var keys []projection.GroupKey
		for _, gk := range p.order {
			if _, ok := p.prepped[gk]; ok {
				if err := s.rec.provisionFor(ctx, gk, target); err != nil {
					return StreamScaleResult{}, err
				}
				keys = append(keys, gk)
			}
		}
		return fencedChange(ctx, s.rec, meta, keys, activation(func(gk projection.GroupKey) string { return p.prepped[gk] }), func(t *tx, co cutovers) (StreamScaleResult, error) {
			return activateStream(t, p, co)
		})
	}
}

// streamPlan is what a stream scale prepared: the answer so far, the
// PREPARING resharding of each group that changes, and every group in order.
type streamPlan struct {
	res     StreamScaleResult
	prepped map[projection.GroupKey]string
	order   []projection.GroupKey
}

// prepareStreamScale validates every group of the prefix and records the
// PREPARING reshardings of those that change, all or none.
func prepareStreamScale(t *tx, prefix string, in ScaleInput, kc *keyCheck, by projection.GroupKey) (streamPlan, error) {
	target := *in.TargetShardCount
	groups := t.groupsWithPrefix(prefix)
	if len(groups) == 0 {
		if st := t.b.ov.Stream(prefix); st != nil && st.Metadata {
			return streamPlan{}, withMsg(ErrStateConflict, "the consumer groups of %s changed while it was scaled; retry", prefix)
		}
		return streamPlan{}, withMsg(ErrStreamNotFound, "No coordinator metadata or groups exist for stream prefix %s", prefix)
	}
	if by.ConsumerGroup != "" && t.group(by) == nil {
		return streamPlan{}, ErrGroupNotFound
	}
	if err := decidedStill(t, by, in.Decided); err != nil {
		return streamPlan{}, err
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Key.ConsumerGroup < groups[j].Key.ConsumerGroup })
	unchanged := 0
	for _, g := range groups {
		if g.ShardCount == target && g.Active() == nil {
			unchanged++
			continue
		}
		if err := checkScalable(t, g.Key, target, true); err != nil {
			return streamPlan{}, err
		}
	}
	if unchanged == len(groups) {
		return streamPlan{}, withMsg(ErrShardCountUnchanged, "every group of %s already has %d shards", prefix, target)
	}
	p := streamPlan{res: StreamScaleResult{StreamPrefix: prefix, TargetShardCount: target, AffectedConsumerGroups: []string{}, Reshardings: []projection.ReshardingView{}}, prepped: map[projection.GroupKey]string{}}
	for _, g := range groups {
		p.res.AffectedConsumerGroups = append(p.res.AffectedConsumerGroups, g.Key.ConsumerGroup)
		p.order = append(p.order, g.Key)
		if g.ShardCount == target && g.Active() == nil {
			continue
		}
		gin := in
		if g.Key != by {
			gin.Decided = nil
		}
		id, err := prepare(t, g.Key, gin, kc)
		if err != nil {
			return streamPlan{}, err
		}
		p.prepped[g.Key] = id
	}
	return p, nil
}

// activateStream activates every prepared resharding of a stream scale in
// one decision; a group already at the target answers a synthetic "noop".
func activateStream(t *tx, p streamPlan, co cutovers) (StreamScaleResult, error) {
	target := p.res.TargetShardCount
	res := p.res
	res.Reshardings = []projection.ReshardingView{}
	for _, gk := range p.order {
		id, ok := p.prepped[gk]
		if !ok {
			res.Reshardings = append(res.Reshardings, projection.ReshardingView{
				ReshardingID: "noop", FromShardCount: target, ToShardCount: target, State: projection.Deprecated,
				CreatedAt: t.now, UpdatedAt: t.now, Kind: "NOOP", Phase: "done", StateHistory: []projection.StateChange{},
				Drain: []projection.ShardDrainRow{}, RemovedShards: []int{},
				Revoke:   projection.RevokeProgress{Holding: map[string][]int{}},
				Rollback: projection.RollbackInfo{Reason: "no-op: the group already had this shard count"},
			})
			continue
		}
		if err := activate(t, gk, id, co); err != nil {
			return StreamScaleResult{}, err
		}
		g := t.group(gk)
		if g == nil || g.Resharding(id) == nil {
			return StreamScaleResult{}, ErrReshardingNotFound
		}
		res.Reshardings = append(res.Reshardings, projection.ViewResharding(g, g.Resharding(id)))
	}
	return res, nil
}

// checkScalable applies the acceptance rules of a scale request to one group.
func checkScalable(t *tx, k projection.GroupKey, target int, streamLevel bool) error {
	g := t.group(k)
	if t.rt.round(k).open {
		return ErrMetadataSync
	}
	if m := g.Active(); m != nil {
		if m.State == projection.Preparing && m.To == target {
			return nil // resumed by scaleGroup
		}
		if streamLevel {
			return withMsg(ErrActiveResharding, "Consumer group %s already has an active resharding (%s, %s)", k.ConsumerGroup, m.ReshardingID, m.State)
		}
		return withMsg(ErrActiveResharding, "Group already has an active migration: %s (%d -> %d, %s)", m.ReshardingID, m.From, m.To, m.State)
	}
	if g.ShardCount == target {
		return withMsg(ErrShardCountUnchanged, "group already has %d shards; a resharding must change the shard count", target)
	}
	if len(g.Barriers) > 0 {
		return withMsg(ErrActiveResharding, "Group still has %s; a new resharding starts once they are released", describeBarriers(g.Barriers))
	}
	return nil
}

// prepare records a PREPARING resharding of k to the requested count, or
// returns the PREPARING one with the same target that it resumes. The
// shards it adds are claimed from what Redis held (kc; nil when the
// coordinator provisions nothing): their streams are the coordinator's to
// create, or refuse it when Redis has keys the coordinator does not manage.
func prepare(t *tx, k projection.GroupKey, in ScaleInput, kc *keyCheck) (string, error) {
	g := t.group(k)
	if m := g.Active(); m != nil {
		return m.ReshardingID, nil // PREPARING with the same target (checkScalable)
	}
	target := *in.TargetShardCount
	prep := &events.ReshardingPreparing{ReshardingID: "reshard-" + newUUID(), FromShardCount: g.ShardCount, ToShardCount: target, RequestedBy: in.RequestedBy, Reason: in.Reason, KeysChecked: true}
	if kc != nil {
		created, err := claim(t.b.ov.Stream(k.StreamPrefix), false, *kc, shardRange(g.ShardCount, target))
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
func activation(idOf func(projection.GroupKey) string) layoutChange {
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
func activate(t *tx, k projection.GroupKey, id string, co cutovers) error {
	g := t.group(k)
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
	g = t.group(k)
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
func grantNewShards(t *tx, k projection.GroupKey, from, to int) {
	if to <= from || t.rt.round(k).open {
		return
	}
	g := t.group(k)
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

// Rollback reverses a resharding while metadata alone can reverse it. For a
// scale-out past PREPARING, the entries added to its new shards are read from
// Redis first and handed to the decision.
func (s *Service) Rollback(ctx context.Context, meta events.Meta, k projection.GroupKey, id string, in RollbackInput) (projection.ReshardingView, error) {
	v, err := s.rollback(ctx, meta, k, id, in)
	return s.withEventIDs(k, v), err
}

func (s *Service) rollback(ctx context.Context, meta events.Meta, k projection.GroupKey, id string, in RollbackInput) (projection.ReshardingView, error) {
	return admin(ctx, s, meta, k, "resharding.rollback", in.RequestedBy, func(meta events.Meta) (projection.ReshardingView, error) {
		if err := ValidateKey(k); err != nil {
			return projection.ReshardingView{}, err
		}
		problems := checkAudit(in.RequestedBy, in.Reason, true)
		if in.Policy != "" && in.Policy != "metadata" && in.Policy != "drain" {
			problems = append(problems, `policy: must be "metadata" or "drain"`)
		}
		if len(problems) > 0 {
			return projection.ReshardingView{}, withMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
		}
		var ids map[projection.GroupKey]string
		var keys []projection.GroupKey
		if err := s.peek(func(t *tx) (err error) { ids, keys, err = rollbackSet(t, k, id); return err }); err != nil {
			return projection.ReshardingView{}, err
		}
		written, err := s.rec.entriesForRollback(ctx, k, id)
		if err != nil {
			return projection.ReshardingView{}, err
		}
		return fencedChange(ctx, s.rec, meta, keys, rollbackLayout(func(gk projection.GroupKey) string { return ids[gk] }), func(t *tx, co cutovers) (projection.ReshardingView, error) {
			now, _, err := rollbackSet(t, k, id)
			if err != nil {
				return projection.ReshardingView{}, err
			}
			if len(now) != len(ids) {
				return projection.ReshardingView{}, withMsg(ErrStateConflict, "the consumer groups of %s changed while the rollback was prepared; retry", k.StreamPrefix)
			}
			var out projection.ReshardingView
			for _, gk := range keys {
				if now[gk] != ids[gk] {
					return projection.ReshardingView{}, withMsg(ErrStateConflict, "the consumer groups of %s changed while the rollback was prepared; retry", k.StreamPrefix)
				}
				v, err := rollback(t, gk, ids[gk], in, written, co)
				if err != nil {
					return projection.ReshardingView{}, err
				}
				if gk == k {
					out = v
				}
			}
			return out, nil
		})
	})
}

// rollbackSet is what a rollback of k's resharding id reverses, by group:
// on a stream with metadata and other groups, the same resharding of every
// group of the stream (they changed the stream's layout together), all or
// none, refused when one of them is not in it; otherwise k's alone. keys
// lists them, k first, then by name.
func rollbackSet(t *tx, k projection.GroupKey, id string) (map[projection.GroupKey]string, []projection.GroupKey, error) {
	ids := map[projection.GroupKey]string{k: id}
	keys := []projection.GroupKey{k}
	g := t.group(k)
	if g == nil || !managedSiblings(t, k) {
		return ids, keys, nil
	}
	m := g.Resharding(id)
	if m == nil || g.ActiveResharding != id || m.Terminal() || m.State == projection.RollingBack {
		return ids, keys, nil // rollback answers it (refused, or already done)
	}
	others := t.groupsWithPrefix(k.StreamPrefix)
	sort.Slice(others, func(i, j int) bool { return others[i].Key.ConsumerGroup < others[j].Key.ConsumerGroup })
	for _, o := range others {
		if o.Key == k {
			continue
		}
		om := o.Active()
		if om == nil || om.From != m.From || om.To != m.To || om.State == projection.RollingBack {
			return nil, nil, withMsg(ErrTopologyConflict, "consumer group %s of stream %s is not in this resharding (%d -> %d) any more: rolling the others back would leave the stream's groups on different layouts; scale the stream (POST /coord/v1/streams/%s/scale) instead", o.Key.ConsumerGroup, k.StreamPrefix, m.From, m.To, k.StreamPrefix)
		}
		ids[o.Key] = om.ReshardingID
		keys = append(keys, o.Key)
	}
	return ids, keys, nil
}

// rollbackLayout is the layout change of rolling back the resharding idOf
// names for a group once it was activated: back to its original count.
func rollbackLayout(idOf func(projection.GroupKey) string) layoutChange {
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
func rollback(t *tx, k projection.GroupKey, id string, in RollbackInput, written map[int]int64, co cutovers) (projection.ReshardingView, error) {
	g := t.group(k)
	if g == nil {
		return projection.ReshardingView{}, ErrGroupNotFound
	}
	if t.rt.round(k).open {
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
		return projection.ReshardingView{}, withMsg(ErrRollbackNotAllowed, "resharding %s already completed (DEPRECATED); start a new resharding to change the shard count", id)
	}
	if g.ActiveResharding != id {
		return projection.ReshardingView{}, withMsg(ErrRollbackNotAllowed, "resharding %s is not the group's active resharding", id)
	}
	policy, state := "metadata", projection.RolledBack
	shardCount, assignable := m.From, m.From
	if m.To > m.From && m.State != projection.Preparing {
		var used []string
		for s := m.From; s < m.To; s++ {
			n, known := written[s]
			if !known && t.rules.streams {
				// The resharding changed between reading Redis and deciding.
				return projection.ReshardingView{}, withMsg(ErrStateConflict, "resharding %s changed while its new shards were read; retry", id)
			}
			if n > 0 {
				used = append(used, fmt.Sprintf("%s (%d entries)", routing.StreamKey(k.StreamPrefix, s), n))
			}
		}
		if len(used) > 0 {
			if in.Policy != "drain" {
				return projection.ReshardingView{}, withMsg(ErrRollbackNotAllowed, "entries were already written to new shards: %s; metadata alone cannot reverse this scale-out. Repeat with \"policy\": \"drain\" to route back to %d shards and drain the new ones first", strings.Join(used, ", "), m.From)
			}
			policy, state = "drain", projection.RollingBack
			assignable = m.To
		}
	}
	if m.State != projection.Preparing {
		if err := recordCutover(t, k, id, m.From, co); err != nil {
			return projection.ReshardingView{}, err
		}
		g = t.group(k)
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
func reconcile(t *tx, k projection.GroupKey) *projection.Group {
	g := t.group(k)
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
func advance(t *tx, k projection.GroupKey) {
	g := t.group(k)
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
		if len(g.BarriersOf(m.ReshardingID)) > 0 {
			return // ordered: completes once its barriers are released
		}
		t.emitAs(Actor, k, &events.ReshardingCompleted{ReshardingID: m.ReshardingID, State: projection.Deprecated, MetadataVersion: g.MetadataVersion + 1})
		return
	}
	t.emitAs(Actor, k, &events.ReshardingDraining{ReshardingID: m.ReshardingID, Epochs: bump(g)})
	reconcile(t, k)
}

func removedShards(m *projection.Resharding) []int {
	lo, hi := m.RemovedRange()
	var out []int
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

func allDrained(ev []events.ShardDrain) bool {
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
type drainProof struct {
	shards []int
	ev     []events.ShardDrain
	ok     bool
}

// covers reports whether the proof is about exactly these shards.
func (p drainProof) covers(shards []int) bool {
	return projection.EqualSets(projection.SortedInts(p.shards), projection.SortedInts(shards))
}

// drainStep advances a DRAINING (or ROLLING_BACK) resharding with the proof
// read for its removed shards: once drained they are revoked; once nobody
// holds them and the proof still says drained, the resharding completes; if
// entries appeared again they are reopened. A proof about other shards (the
// resharding changed since it was read) decides nothing.
func drainStep(t *tx, k projection.GroupKey, id string, p drainProof) {
	g := t.group(k)
	if g == nil {
		return
	}
	m := g.Resharding(id)
	if m == nil || g.ActiveResharding != id || (m.State != projection.Draining && m.State != projection.RollingBack) {
		return
	}
	removed := removedShards(m)
	if !p.covers(removed) {
		return
	}
	final := projection.Deprecated
	if m.State == projection.RollingBack {
		final = projection.RolledBack
	}
	justDrained := false
	if !m.Drained {
		if !p.ok {
			return
		}
		t.emitAs(Actor, k, &events.ReshardingDrained{ReshardingID: id, AssignableCount: g.ShardCount, Evidence: p.ev, Epochs: bump(g)})
		reconcile(t, k)
		g = t.group(k)
		justDrained = true
	}
	for _, s := range removed {
		if g.Held(s) {
			return // revoke in progress
		}
	}
	if !p.ok {
		if p.ev != nil && !justDrained {
			hi := max(m.From, m.To)
			t.emitAs(Actor, k, &events.ReshardingReopened{ReshardingID: id, AssignableCount: hi, Evidence: p.ev, Epochs: bump(g)})
			reconcile(t, k)
		}
		return
	}
	if len(g.BarriersOf(id)) > 0 {
		return // ordered: completes once its barriers are released
	}
	t.emitAs(Actor, k, &events.ReshardingCompleted{ReshardingID: id, State: final, Evidence: p.ev, MetadataVersion: g.MetadataVersion + 1})
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
func retireStep(t *tx, k projection.GroupKey, id string, p drainProof) (del, kept []string) {
	g := t.group(k)
	if g == nil || len(g.Reshardings) == 0 {
		return nil, nil
	}
	m := g.Reshardings[len(g.Reshardings)-1]
	if m.ReshardingID != id || !m.Terminal() || m.Retired {
		return nil, nil
	}
	removed := removedShards(m)
	if len(removed) == 0 || !p.covers(removed) {
		return nil, nil
	}
	lo := removed[0]
	hi := removed[len(removed)-1] + 1
	reopened := g.AssignableCount > lo
	for _, other := range t.groupsWithPrefix(k.StreamPrefix) {
		if other.ShardCount > lo || (other.Key != k && other.AssignableCount > lo) {
			return nil, nil
		}
	}
	st := t.b.ov.Stream(k.StreamPrefix)
	if st != nil && st.Metadata && st.ShardCount > lo {
		return nil, nil // the stream routes to them again
	}
	keys := make([]string, len(removed))
	for i, s := range removed {
		keys[i] = routing.StreamKey(k.StreamPrefix, s)
	}
	if !reopened && t.rules.keepRetired {
		t.emitAs(Actor, k, &events.ShardsRetired{ReshardingID: id, StreamKeys: keys, Kept: true})
		return nil, nil
	}
	held := false
	for _, s := range removed {
		held = held || g.Held(s)
	}
	if held && !reopened {
		return nil, nil // revoke in progress
	}
	switch {
	case reopened && p.ok:
		t.emitAs(Actor, k, &events.ReshardingDrained{ReshardingID: id, AssignableCount: g.ShardCount, Evidence: p.ev, Epochs: bump(g)})
		reconcile(t, k)
		return nil, nil
	case reopened:
		return nil, nil // members are reading them
	case !p.ok:
		if p.ev != nil && unreadBy(p.ev, k.ConsumerGroup) {
			t.emitAs(Actor, k, &events.ReshardingReopened{ReshardingID: id, AssignableCount: hi, Evidence: p.ev, Epochs: bump(g)})
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
func retired(t *tx, k projection.GroupKey, id string, keys, kept []string) {
	g := t.group(k)
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

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// withEventIDs fills in v the event ids of the state changes its own
// decision recorded: a decision answers before its records are appended, so
// those changes have no id yet in the answer, while the projection has them
// once the append landed. A history only grows: the change at the same
// position, with the same state and time, is the same one.
func (s *Service) withEventIDs(k projection.GroupKey, v projection.ReshardingView) projection.ReshardingView {
	missing := false
	for _, c := range v.StateHistory {
		missing = missing || c.EventID == ""
	}
	if !missing || v.ReshardingID == "" {
		return v
	}
	s.state.RLock()
	defer s.state.RUnlock()
	g := s.state.GroupLocked(k)
	if g == nil {
		return v
	}
	r := g.Resharding(v.ReshardingID)
	if r == nil {
		return v
	}
	hist := append([]projection.StateChange(nil), v.StateHistory...)
	for i := range hist {
		if hist[i].EventID == "" && i < len(r.History) && r.History[i].State == hist[i].State && r.History[i].Phase == hist[i].Phase && r.History[i].At.Equal(hist[i].At) {
			hist[i].EventID = r.History[i].EventID
		}
	}
	v.StateHistory = hist
	return v
}
