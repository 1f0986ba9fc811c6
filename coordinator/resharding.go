package coordinator

import (
	"context"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

// Scale starts a resharding of one group: read what Redis holds of the
// shards it adds, record PREPARING (refusing keys the coordinator does not
// manage), provision the target's shard streams (outside the writer),
// activate the new count (producers switch at once; members converge
// through heartbeats) and answer with the resharding. A provisioning failure
// leaves it PREPARING; repeating the request, or the reconciler's next
// pass, resumes it. A group of a stream with metadata and other groups
// scales with all of them (scaleStream): the stream has one layout.
func (s *Service) Scale(ctx context.Context, meta events.Meta, k projection.GroupKey, in commands.ScaleInput) (projection.ReshardingView, error) {
	v, err := s.scale(ctx, meta, k, in)
	return s.withEventIDs(k, v), err
}

func (s *Service) scale(ctx context.Context, meta events.Meta, k projection.GroupKey, in commands.ScaleInput) (projection.ReshardingView, error) {
	return admin(ctx, s, meta, k, "group.scale", in.RequestedBy, func(meta events.Meta) (projection.ReshardingView, error) {
		if err := commands.ValidateKey(k); err != nil {
			return projection.ReshardingView{}, err
		}
		if err := s.rules.ValidateScale(in); err != nil {
			return projection.ReshardingView{}, err
		}
		siblings := false
		_ = s.committed.peek(func(t *commands.Tx) error { siblings = commands.ManagedSiblings(t, k); return nil })
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
			return projection.ReshardingView{}, commands.ErrReshardingNotFound
		}
		kc, err := s.readTarget(ctx, k.StreamPrefix, *in.TargetShardCount)
		if err != nil {
			return projection.ReshardingView{}, err
		}
		id, err := submit(ctx, s.dec, meta, func(t *commands.Tx) (string, error) { return commands.PrepareScale(t, k, in, kc) })
		if err != nil {
			return projection.ReshardingView{}, err
		}
		if err := s.rec.provisionFor(ctx, k, *in.TargetShardCount); err != nil {
			return projection.ReshardingView{}, err
		}
		return fencedChange(ctx, s.rec, meta, []projection.GroupKey{k}, commands.Activation(func(projection.GroupKey) string { return id }), func(t *commands.Tx, co commands.Cutovers) (projection.ReshardingView, error) {
			if err := commands.Activate(t, k, id, co); err != nil {
				return projection.ReshardingView{}, err
			}
			g := t.Group(k)
			if g == nil || g.Resharding(id) == nil {
				return projection.ReshardingView{}, commands.ErrReshardingNotFound
			}
			return projection.ViewResharding(g, g.Resharding(id)), nil
		})
	})
}

// readTarget reads what Redis holds of the shards a scale of prefix's groups
// to target adds (from the smallest shard count among them); nil when the
// coordinator provisions nothing.
func (s *Service) readTarget(ctx context.Context, prefix string, target int) (*commands.KeyCheck, error) {
	if !s.rules.Provisioning {
		return nil, nil
	}
	from := target
	_ = s.committed.peek(func(t *commands.Tx) error {
		for _, g := range t.GroupsWithPrefix(prefix) {
			from = min(from, g.ShardCount)
		}
		return nil
	})
	kc, err := s.rec.readKeys(ctx, prefix, commands.ShardRange(from, target), false)
	if err != nil {
		return nil, err
	}
	return &kc, nil
}

// ScaleStream scales a stream: one without consumer groups changes its
// layout at once (scaleBareStream); otherwise every group of the prefix
// scales to the same count, all or none (scaleStream).
func (s *Service) ScaleStream(ctx context.Context, meta events.Meta, prefix string, in commands.ScaleInput) (commands.StreamScaleResult, error) {
	res, err := s.scaleStreamCommand(ctx, meta, prefix, in)
	for i, name := range res.AffectedConsumerGroups {
		if i < len(res.Reshardings) {
			res.Reshardings[i] = s.withEventIDs(projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: name}, res.Reshardings[i])
		}
	}
	return res, err
}

func (s *Service) scaleStreamCommand(ctx context.Context, meta events.Meta, prefix string, in commands.ScaleInput) (commands.StreamScaleResult, error) {
	k := projection.GroupKey{StreamPrefix: prefix}
	return admin(ctx, s, meta, k, "stream.scale", in.RequestedBy, func(meta events.Meta) (commands.StreamScaleResult, error) {
		if err := routing.ValidatePrefix(prefix); err != nil {
			return commands.StreamScaleResult{}, commands.WithMsg(commands.ErrInvalid, "%s", err.Error())
		}
		if err := s.rules.ValidateScale(in); err != nil {
			return commands.StreamScaleResult{}, err
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
func (s *Service) scaleStream(ctx context.Context, meta events.Meta, prefix string, in commands.ScaleInput, by projection.GroupKey) (commands.StreamScaleResult, error) {
	{
		target := *in.TargetShardCount
		kc, err := s.readTarget(ctx, prefix, target)
		if err != nil {
			return commands.StreamScaleResult{}, err
		}
		p, err := submit(ctx, s.dec, meta, func(t *commands.Tx) (commands.StreamPlan, error) {
			return commands.PrepareStreamScale(t, prefix, in, kc, by)
		})
		if err != nil {
			return commands.StreamScaleResult{}, err
		}
		var keys []projection.GroupKey
		for _, gk := range p.Order {
			if _, ok := p.Prepped[gk]; ok {
				if err := s.rec.provisionFor(ctx, gk, target); err != nil {
					return commands.StreamScaleResult{}, err
				}
				keys = append(keys, gk)
			}
		}
		return fencedChange(ctx, s.rec, meta, keys, commands.Activation(func(gk projection.GroupKey) string { return p.Prepped[gk] }), func(t *commands.Tx, co commands.Cutovers) (commands.StreamScaleResult, error) {
			return commands.ActivateStream(t, p, co)
		})
	}
}

// Rollback reverses a resharding while metadata alone can reverse it. For a
// scale-out past PREPARING, the entries added to its new shards are read from
// Redis first and handed to the decision.
func (s *Service) Rollback(ctx context.Context, meta events.Meta, k projection.GroupKey, id string, in commands.RollbackInput) (projection.ReshardingView, error) {
	v, err := s.rollback(ctx, meta, k, id, in)
	return s.withEventIDs(k, v), err
}

func (s *Service) rollback(ctx context.Context, meta events.Meta, k projection.GroupKey, id string, in commands.RollbackInput) (projection.ReshardingView, error) {
	return admin(ctx, s, meta, k, "resharding.rollback", in.RequestedBy, func(meta events.Meta) (projection.ReshardingView, error) {
		if err := commands.ValidateKey(k); err != nil {
			return projection.ReshardingView{}, err
		}
		problems := commands.CheckAudit(in.RequestedBy, in.Reason, true)
		if in.Policy != "" && in.Policy != "metadata" && in.Policy != "drain" {
			problems = append(problems, `policy: must be "metadata" or "drain"`)
		}
		if len(problems) > 0 {
			return projection.ReshardingView{}, commands.Invalid(problems)
		}
		var ids map[projection.GroupKey]string
		var keys []projection.GroupKey
		if err := s.committed.peek(func(t *commands.Tx) (err error) { ids, keys, err = commands.RollbackSet(t, k, id); return err }); err != nil {
			return projection.ReshardingView{}, err
		}
		written, err := s.rec.entriesForRollback(ctx, k, id)
		if err != nil {
			return projection.ReshardingView{}, err
		}
		return fencedChange(ctx, s.rec, meta, keys, commands.RollbackLayout(func(gk projection.GroupKey) string { return ids[gk] }), func(t *commands.Tx, co commands.Cutovers) (projection.ReshardingView, error) {
			now, _, err := commands.RollbackSet(t, k, id)
			if err != nil {
				return projection.ReshardingView{}, err
			}
			if len(now) != len(ids) {
				return projection.ReshardingView{}, commands.WithMsg(commands.ErrStateConflict, "the consumer groups of %s changed while the rollback was prepared; retry", k.StreamPrefix)
			}
			var out projection.ReshardingView
			for _, gk := range keys {
				if now[gk] != ids[gk] {
					return projection.ReshardingView{}, commands.WithMsg(commands.ErrStateConflict, "the consumer groups of %s changed while the rollback was prepared; retry", k.StreamPrefix)
				}
				v, err := commands.Rollback(t, gk, ids[gk], in, written, co)
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
	s.state.Read(func(st projection.Reader) { v = eventIDsOf(st.Group(k), v) })
	return v
}

// eventIDsOf fills in v's state changes the event ids g's resharding has
// (g is read under the projection's read lock).
func eventIDsOf(g projection.ReadOnlyGroup, v projection.ReshardingView) projection.ReshardingView {
	if !g.Exists() {
		return v
	}
	r := g.Resharding(v.ReshardingID)
	if !r.Exists() {
		return v
	}
	had := r.History()
	hist := append([]projection.StateChange(nil), v.StateHistory...)
	for i := range hist {
		if hist[i].EventID == "" && i < len(had) && had[i].State == hist[i].State && had[i].Phase == hist[i].Phase && had[i].At.Equal(hist[i].At) {
			hist[i].EventID = had[i].EventID
		}
	}
	v.StateHistory = hist
	return v
}
