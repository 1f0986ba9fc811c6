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
}

func (c *Coordinator) validateScale(in ScaleInput) error {
	var problems []string
	if in.TargetShardCount == nil {
		problems = append(problems, "targetShardCount: must not be null")
	} else if *in.TargetShardCount < 0 {
		problems = append(problems, "targetShardCount must be zero or positive")
	} else if *in.TargetShardCount > c.cfg.MaxShardCount {
		problems = append(problems, fmt.Sprintf("targetShardCount: must be less than or equal to %d", c.cfg.MaxShardCount))
	}
	problems = append(problems, checkAudit(in.RequestedBy, in.Reason, true)...)
	if len(problems) > 0 {
		return withMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
	}
	return nil
}

// Scale starts a resharding of one group: record PREPARING, provision the target's
// shard streams, activate the new count (producers switch at once; members
// converge through heartbeats) and answer with the resharding.
func (c *Coordinator) Scale(ctx context.Context, meta events.Meta, k projection.GroupKey, in ScaleInput) (projection.MigrationView, error) {
	v, err := c.admin(ctx, meta, k, "group.scale", in.RequestedBy, func(t *tx) (any, error) {
		if err := ValidateKey(k); err != nil {
			return nil, err
		}
		if err := c.validateScale(in); err != nil {
			return nil, err
		}
		if t.group(k) == nil {
			return nil, ErrGroupNotFound
		}
		if err := t.checkScalable(k, *in.TargetShardCount, false); err != nil {
			return nil, err
		}
		return t.scaleGroup(ctx, k, in)
	})
	if err != nil {
		return projection.MigrationView{}, err
	}
	return v.(projection.MigrationView), nil
}

// StreamScaleResult is the answer to a stream-level scale.
type StreamScaleResult struct {
	StreamPrefix           string                     `json:"streamPrefix"`
	TargetShardCount       int                        `json:"targetShardCount"`
	AffectedConsumerGroups []string                   `json:"affectedConsumerGroups"`
	Migrations             []projection.MigrationView `json:"migrations"`
}

// ScaleStream scales every group of a prefix to the same count, all or none.
func (c *Coordinator) ScaleStream(ctx context.Context, meta events.Meta, prefix string, in ScaleInput) (StreamScaleResult, error) {
	k := projection.GroupKey{StreamPrefix: prefix}
	v, err := c.admin(ctx, meta, k, "stream.scale", in.RequestedBy, func(t *tx) (any, error) {
		if err := routing.ValidatePrefix(prefix); err != nil {
			return nil, withMsg(ErrInvalid, "%s", err.Error())
		}
		if err := c.validateScale(in); err != nil {
			return nil, err
		}
		groups := t.groupsWithPrefix(prefix)
		if len(groups) == 0 {
			return nil, withMsg(ErrStreamNotFound, "No coordinator groups exist for stream prefix %s", prefix)
		}
		sort.Slice(groups, func(i, j int) bool { return groups[i].Key.ConsumerGroup < groups[j].Key.ConsumerGroup })
		target := *in.TargetShardCount
		unchanged := 0
		for _, g := range groups {
			if g.ShardCount == target && g.Active() == nil {
				unchanged++
				continue
			}
			if err := t.checkScalable(g.Key, target, true); err != nil {
				return nil, err
			}
		}
		if unchanged == len(groups) {
			return nil, withMsg(ErrShardCountUnchanged, "every group of %s already has %d shards", prefix, target)
		}
		res := StreamScaleResult{StreamPrefix: prefix, TargetShardCount: target, AffectedConsumerGroups: []string{}, Migrations: []projection.MigrationView{}}
		for _, g := range groups {
			res.AffectedConsumerGroups = append(res.AffectedConsumerGroups, g.Key.ConsumerGroup)
			if g.ShardCount == target && g.Active() == nil {
				res.Migrations = append(res.Migrations, projection.MigrationView{
					ReshardingID: "noop", FromShardCount: target, ToShardCount: target, State: projection.Deprecated,
					CreatedAt: t.now, UpdatedAt: t.now, Kind: "NOOP", Phase: "done", StateHistory: []projection.StateChange{},
					Drain: []projection.ShardDrainRow{}, RemovedShards: []projection.ShardRef{},
					Revoke:   projection.RevokeProgress{Holding: map[string][]projection.ShardRef{}},
					Rollback: projection.RollbackInfo{Reason: "no-op: the group already had this shard count"},
				})
				continue
			}
			mv, err := t.scaleGroup(ctx, g.Key, in)
			if err != nil {
				return nil, err
			}
			res.Migrations = append(res.Migrations, mv)
		}
		return res, nil
	})
	if err != nil {
		return StreamScaleResult{}, err
	}
	return v.(StreamScaleResult), nil
}

// checkScalable applies the acceptance rules of a scale request to one group.
func (t *tx) checkScalable(k projection.GroupKey, target int, streamLevel bool) error {
	g := t.group(k)
	if t.c.CorrectionOpen(k) {
		return ErrMetadataSync
	}
	if m := g.Active(); m != nil {
		if m.State == projection.Preparing && m.To == target {
			return nil // resumed by scaleGroup
		}
		if streamLevel {
			return withMsg(ErrActiveMigration, "Consumer group %s already has an active resharding (%s, %s)", k.ConsumerGroup, m.ReshardingID, m.State)
		}
		return withMsg(ErrActiveMigration, "Group already has an active migration: %s (%d -> %d, %s)", m.ReshardingID, m.From, m.To, m.State)
	}
	if g.ShardCount == target {
		return withMsg(ErrShardCountUnchanged, "group already has %d shards; a resharding must change the shard count", target)
	}
	return nil
}

func (t *tx) scaleGroup(ctx context.Context, k projection.GroupKey, in ScaleInput) (projection.MigrationView, error) {
	g := t.group(k)
	target := *in.TargetShardCount
	m := g.Active()
	if m == nil {
		id := "reshard-" + newUUID()
		g = t.emit(k, &events.ReshardingPreparing{ReshardingID: id, FromShardCount: g.ShardCount, ToShardCount: target, RequestedBy: in.RequestedBy, Reason: in.Reason})
		if err := t.flush(); err != nil {
			return projection.MigrationView{}, err
		}
		g = t.group(k)
		m = g.Migration(id)
	}
	if err := t.provisionAndActivate(ctx, k, m.ReshardingID); err != nil {
		return projection.MigrationView{}, err
	}
	g = t.group(k)
	return projection.ViewMigration(g, g.Migration(m.ReshardingID)), nil
}

// provisionAndActivate moves a PREPARING resharding to ACTIVE. Provisioning is
// idempotent, so a crash between the two steps is resumed by doing both again.
func (t *tx) provisionAndActivate(ctx context.Context, k projection.GroupKey, id string) error {
	g := t.group(k)
	m := g.Migration(id)
	if m == nil || m.State != projection.Preparing {
		return nil
	}
	if m.To > 0 && !t.c.cfg.DisableProvisioning {
		if t.c.shards == nil {
			return ErrRedisNotConfigured
		}
		if err := t.c.shards.Provision(ctx, k.StreamPrefix, k.ConsumerGroup, 0, m.To); err != nil {
			return failed(ErrProvisioningFailed, err, "could not provision %s shards 0..%d in Redis (the resharding stays PREPARING; repeat the request to resume)", k.StreamPrefix, m.To-1)
		}
	}
	t.emitAs(Actor, k, &events.ReshardingProvisioned{ReshardingID: id, Shards: m.To})
	g = t.group(k)
	assignable := m.To
	if m.From > assignable {
		assignable = m.From
	}
	t.emitAs(Actor, k, &events.ReshardingActivated{ReshardingID: id, ShardCount: m.To, AssignableCount: assignable, Epochs: bump(g)})
	t.reconcile(k)
	return nil
}

// RollbackInput is an operator's rollback request.
type RollbackInput struct {
	RequestedBy string
	Reason      string
	// Policy "" or "metadata": only when metadata alone reverses it; "drain":
	// a scale-out whose new shards hold entries drains them first.
	Policy string
}

// Rollback reverses a resharding while metadata alone can reverse it.
func (c *Coordinator) Rollback(ctx context.Context, meta events.Meta, k projection.GroupKey, id string, in RollbackInput) (projection.MigrationView, error) {
	v, err := c.admin(ctx, meta, k, "resharding.rollback", in.RequestedBy, func(t *tx) (any, error) {
		if err := ValidateKey(k); err != nil {
			return nil, err
		}
		problems := checkAudit(in.RequestedBy, in.Reason, true)
		if in.Policy != "" && in.Policy != "metadata" && in.Policy != "drain" {
			problems = append(problems, `policy: must be "metadata" or "drain"`)
		}
		if len(problems) > 0 {
			return nil, withMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
		}
		g := t.group(k)
		if g == nil {
			return nil, ErrGroupNotFound
		}
		if c.CorrectionOpen(k) {
			return nil, ErrMetadataSync
		}
		m := g.Migration(id)
		if m == nil {
			return nil, ErrMigrationNotFound
		}
		if m.State == projection.RolledBack || m.State == projection.RollingBack {
			return projection.ViewMigration(g, m), nil
		}
		if m.State == projection.Deprecated {
			return nil, withMsg(ErrRollbackNotAllowed, "resharding %s already completed (DEPRECATED); start a new resharding to change the shard count", id)
		}
		if g.ActiveMigration != id {
			return nil, withMsg(ErrRollbackNotAllowed, "resharding %s is not the group's active resharding", id)
		}
		policy, state := "metadata", projection.RolledBack
		shardCount, assignable := m.From, m.From
		if m.To > m.From && m.State != projection.Preparing {
			var newShards []int
			for i := m.From; i < m.To; i++ {
				newShards = append(newShards, i)
			}
			written := map[int]int64{}
			if c.shards != nil {
				var err error
				written, err = c.shards.EntriesAdded(ctx, k.StreamPrefix, newShards)
				if err != nil {
					return nil, failed(ErrUnavailable, err, "could not read the new shards from Redis to check them for entries")
				}
			}
			var used []string
			for _, s := range newShards {
				if written[s] > 0 {
					used = append(used, fmt.Sprintf("%s (%d entries)", routing.StreamKey(k.StreamPrefix, s), written[s]))
				}
			}
			if len(used) > 0 {
				if in.Policy != "drain" {
					return nil, withMsg(ErrRollbackNotAllowed, "entries were already written to new shards: %s; metadata alone cannot reverse this scale-out. Repeat with \"policy\": \"drain\" to route back to %d shards and drain the new ones first", strings.Join(used, ", "), m.From)
				}
				policy, state = "drain", projection.RollingBack
				assignable = m.To
			}
		}
		g = t.emit(k, &events.ReshardingRolledBack{ReshardingID: id, Policy: policy, State: state, ShardCount: shardCount, AssignableCount: assignable, RequestedBy: in.RequestedBy, Reason: in.Reason, Epochs: bump(g)})
		g = t.reconcile(k)
		return projection.ViewMigration(g, g.Migration(id)), nil
	})
	if err != nil {
		return projection.MigrationView{}, err
	}
	return v.(projection.MigrationView), nil
}

// RollbackEligibility refines the log's answer with Redis for a scale-out.
func (c *Coordinator) RollbackEligibility(ctx context.Context, g *projection.Group, m *projection.Migration) projection.RollbackInfo {
	info := projection.StaticRollbackInfo(g, m)
	if !info.Eligible || m.To <= m.From || m.State == projection.Preparing || c.shards == nil {
		return info
	}
	var newShards []int
	for i := m.From; i < m.To; i++ {
		newShards = append(newShards, i)
	}
	written, err := c.shards.EntriesAdded(ctx, g.Key.StreamPrefix, newShards)
	if err != nil {
		c.cfg.Logger.Warn().Err(err).Str("prefix", g.Key.StreamPrefix).Msg("read new shards for rollback eligibility")
		return projection.RollbackInfo{Eligible: false, Reason: "cannot read the new shards from Redis right now"}
	}
	var used []string
	for _, s := range newShards {
		if written[s] > 0 {
			used = append(used, fmt.Sprintf("%s (%d entries)", routing.StreamKey(g.Key.StreamPrefix, s), written[s]))
		}
	}
	if len(used) > 0 {
		return projection.RollbackInfo{Eligible: false, Reason: "entries already written to new shards: " + strings.Join(used, ", ") + `; only "policy": "drain" can roll back`, Policy: "drain"}
	}
	return projection.RollbackInfo{Eligible: true, Reason: "no entry reached a new shard yet", Policy: "metadata"}
}

// bump is the next group epoch and metadata version.
func bump(g *projection.Group) events.Epochs {
	return events.Epochs{GroupEpoch: g.GroupEpoch + 1, MetadataVersion: g.MetadataVersion + 1}
}

// reconcile recomputes the target assignment and records it when it changed or
// when the assignment epoch lags the group epoch.
func (t *tx) reconcile(k projection.GroupKey) *projection.Group {
	g := t.group(k)
	if g == nil {
		return nil
	}
	targets := Assign(g.Targets, g.LiveMemberIDs(), g.AssignableCount)
	changed, removed := diffAssignment(g.Targets, targets)
	if len(changed) == 0 && len(removed) == 0 && g.AssignmentEpoch == g.GroupEpoch {
		return g
	}
	return t.emitAs(Actor, k, &events.AssignmentChanged{AssignmentEpoch: g.GroupEpoch, Targets: changed, Removed: removed})
}

// advance moves the active resharding along the steps that need no Redis: a
// converged scale-out completes, a converged scale-in starts draining.
func (t *tx) advance(k projection.GroupKey) {
	g := t.group(k)
	if g == nil {
		return
	}
	m := g.Active()
	if m == nil || m.State != projection.Active {
		return
	}
	if len(g.LiveMemberIDs()) > 0 && g.State() != "STABLE" {
		return
	}
	if m.To >= m.From {
		t.emitAs(Actor, k, &events.ReshardingCompleted{ReshardingID: m.ReshardingID, State: projection.Deprecated, MetadataVersion: g.MetadataVersion + 1})
		return
	}
	t.emitAs(Actor, k, &events.ReshardingDraining{ReshardingID: m.ReshardingID, Epochs: bump(g)})
	t.reconcile(k)
}

// advanceWithRedis runs the steps that need Redis: resume provisioning, prove
// removed shards drained, revoke them, complete, and retire their streams.
func (t *tx) advanceWithRedis(ctx context.Context, k projection.GroupKey) {
	g := t.group(k)
	if g == nil {
		return
	}
	if m := g.Active(); m != nil {
		switch m.State {
		case projection.Preparing:
			if err := t.provisionAndActivate(ctx, k, m.ReshardingID); err != nil {
				t.c.cfg.Logger.Warn().Err(err).Str("group", k.ConsumerGroup).Msg("resume provisioning")
			}
		case projection.Draining, projection.RollingBack:
			t.drainStep(ctx, k, m)
		}
	}
	t.retire(ctx, k)
}

func removedShards(m *projection.Migration) []int {
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

func (t *tx) evidence(ctx context.Context, k projection.GroupKey, shards []int) ([]events.ShardDrain, bool) {
	if t.c.shards == nil {
		return nil, true // nothing to prove against: no Redis for shard streams
	}
	ev, err := t.c.shards.DrainEvidence(ctx, k.StreamPrefix, shards)
	if err != nil {
		t.c.cfg.Logger.Warn().Err(err).Str("prefix", k.StreamPrefix).Msg("read drain evidence")
		return nil, false
	}
	t.c.rt.mu.Lock()
	gr := t.c.rt.group(k)
	gr.evidence, gr.evidenceAt = ev, t.now
	t.c.rt.mu.Unlock()
	return ev, allDrained(ev)
}

func (t *tx) drainStep(ctx context.Context, k projection.GroupKey, m *projection.Migration) {
	g := t.group(k)
	removed := removedShards(m)
	final := projection.Deprecated
	if m.State == projection.RollingBack {
		final = projection.RolledBack
	}
	if !m.Drained {
		ev, ok := t.evidence(ctx, k, removed)
		if !ok {
			return
		}
		t.emitAs(Actor, k, &events.ReshardingDrained{ReshardingID: m.ReshardingID, AssignableCount: g.ShardCount, Evidence: ev, Epochs: bump(g)})
		t.reconcile(k)
		g = t.group(k)
		m = g.Migration(m.ReshardingID)
	}
	for _, mem := range g.Members {
		for _, s := range removed {
			if mem.Holds(s) {
				return // revoke in progress
			}
		}
	}
	ev, ok := t.evidence(ctx, k, removed)
	if !ok {
		if ev != nil {
			hi := m.From
			if m.To > hi {
				hi = m.To
			}
			t.emitAs(Actor, k, &events.ReshardingReopened{ReshardingID: m.ReshardingID, AssignableCount: hi, Evidence: ev, Epochs: bump(g)})
			t.reconcile(k)
		}
		return
	}
	t.emitAs(Actor, k, &events.ReshardingCompleted{ReshardingID: m.ReshardingID, State: final, Evidence: ev, MetadataVersion: g.MetadataVersion + 1})
}

// retire deletes (or, by policy, keeps) the streams a finished resharding took out
// of use, once nobody holds them, no group of the prefix routes to them and Redis
// shows nothing left on them.
//
// A producer with stale routing can still write to a removed shard after the
// resharding finished (or, for a scale-out rolled back by metadata, after the
// rollback, which checked the new shards were empty only at that moment). Such
// entries are never deleted unread: when Redis shows this group has entries
// left on a removed shard, the removed shards become assignable again
// (resharding.reopened) so members read them, and once Redis proves them
// drained they are revoked (resharding.drained) and retired as usual.
func (t *tx) retire(ctx context.Context, k projection.GroupKey) {
	g := t.group(k)
	if g == nil || len(g.Migrations) == 0 {
		return
	}
	m := g.Migrations[len(g.Migrations)-1]
	if !m.Terminal() || m.Retired {
		return
	}
	removed := removedShards(m)
	if len(removed) == 0 {
		return
	}
	lo, hi := removed[0], removed[len(removed)-1]+1
	reopened := g.AssignableCount > lo
	for _, other := range t.groupsWithPrefix(k.StreamPrefix) {
		if other.ShardCount > lo || (other.Key != k && other.AssignableCount > lo) {
			return
		}
	}
	keys := make([]string, len(removed))
	for i, s := range removed {
		keys[i] = routing.StreamKey(k.StreamPrefix, s)
	}
	if !reopened && (t.c.cfg.KeepRetiredStreams || t.c.shards == nil) {
		t.emitAs(Actor, k, &events.ShardsRetired{ReshardingID: m.ReshardingID, StreamKeys: keys, Kept: true})
		return
	}
	held := false
	for _, mem := range g.Members {
		for _, s := range removed {
			held = held || mem.Holds(s)
		}
	}
	if held && !reopened {
		return // revoke in progress
	}
	ev, ok := t.evidence(ctx, k, removed)
	switch {
	case reopened && ok:
		t.emitAs(Actor, k, &events.ReshardingDrained{ReshardingID: m.ReshardingID, AssignableCount: g.ShardCount, Evidence: ev, Epochs: bump(g)})
		t.reconcile(k)
		return
	case reopened:
		return // members are reading them
	case !ok:
		if ev != nil && unreadBy(ev, k.ConsumerGroup) {
			t.emitAs(Actor, k, &events.ReshardingReopened{ReshardingID: m.ReshardingID, AssignableCount: hi, Evidence: ev, Epochs: bump(g)})
			t.reconcile(k)
		}
		return
	}
	if err := t.c.shards.Delete(ctx, keys); err != nil {
		t.c.cfg.Logger.Warn().Err(err).Strs("keys", keys).Msg("retire shard streams")
		return
	}
	t.emitAs(Actor, k, &events.ShardsRetired{ReshardingID: m.ReshardingID, StreamKeys: keys})
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
