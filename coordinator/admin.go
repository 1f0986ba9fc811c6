package coordinator

import (
	"context"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// CreateGroup creates a group: verify it does not exist, place it on its
// stream (planGroup), read what Redis holds under its shard keys and
// provision every shard stream and consumer group (outside the writer,
// refusing keys the coordinator does not manage), then record group.created
// (after the stream's metadata, for the first group of a bare prefix) in a
// decision that checks everything again.
func (s *Service) CreateGroup(ctx context.Context, meta events.Meta, in commands.CreateGroupInput) (projection.GroupView, error) {
	k := projection.GroupKey{StreamPrefix: in.StreamPrefix, ConsumerGroup: in.ConsumerGroup}
	by := commands.OwnerOfCaller(meta.Actor) // the authenticated caller
	return admin(ctx, s, meta, k, "group.create", in.RequestedBy, func(meta events.Meta) (projection.GroupView, error) {
		if err := commands.ValidateKey(k); err != nil {
			return projection.GroupView{}, err
		}
		problems := commands.CheckAudit(in.RequestedBy, in.Reason, false)
		ordering, bad := commands.CheckOrdering(in.Ordering)
		problems = append(problems, bad...)
		_, bad = s.rules.ShardCountOf("initialShardCount", in.InitialShardCount, 1)
		if problems = append(problems, bad...); len(problems) > 0 {
			return projection.GroupView{}, commands.Invalid(problems)
		}
		// Refuse what the committed state refuses before touching Redis,
		// with the prefix's side effects serialised: a create that
		// provisioned before this one has decided by then.
		if s.rules.Provisioning {
			unlock := s.locks.lock(k.StreamPrefix)
			defer unlock()
			// The consumer groups of a deleted group of this name go first.
			if err := s.rec.finishRemovalLocked(ctx, k); err != nil {
				return projection.GroupView{}, err
			}
		}
		var plan commands.GroupPlan
		if err := s.committed.peek(func(t *commands.Tx) (err error) {
			plan, err = commands.PlanGroup(t, k, in.InitialShardCount, s.rules.DefaultShardCount, by)
			return err
		}); err != nil {
			return projection.GroupView{}, err
		}
		var prov commands.Provisioned
		if s.rules.Provisioning {
			var err error
			if prov, err = s.rec.provisionGroup(ctx, k, plan); err != nil {
				return projection.GroupView{}, err
			}
		}
		var refused error
		v, err := submit(ctx, s.dec, meta, func(t *commands.Tx) (projection.GroupView, error) {
			v, err := commands.CreateGroup(t, k, in, ordering, plan, prov, by)
			refused = err
			return v, err
		})
		if refused != nil {
			s.rec.unprovision(ctx, k, prov)
		}
		return v, err
	})
}

// DeleteGroup removes a group (refused while members are live unless
// forced) and the Redis consumer groups the coordinator provisioned for it
// (removal.go: destroyed by the reconciler after the decision). Shard
// streams are left in place.
func (s *Service) DeleteGroup(ctx context.Context, meta events.Meta, k projection.GroupKey, in commands.DeleteGroupInput) (projection.GroupView, error) {
	v, err := admin(ctx, s, meta, k, "group.delete", in.RequestedBy, func(meta events.Meta) (projection.GroupView, error) {
		if problems := commands.CheckAudit(in.RequestedBy, in.Reason, true); len(problems) > 0 {
			return projection.GroupView{}, commands.Invalid(problems)
		}
		return submit(ctx, s.dec, meta, func(t *commands.Tx) (projection.GroupView, error) { return commands.DeleteGroup(t, k, in) })
	})
	if err == nil {
		s.evidence.dropGroup(k)
		// Its consumer groups now, best effort: the reconciler finishes
		// what this leaves (a Redis that fails, a coordinator that stops).
		if rerr := s.rec.finishRemoval(ctx, k); rerr != nil {
			s.logger.Warn().Err(rerr).Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Msg("destroy the consumer groups of a deleted group (retried by the reconciler)")
		}
	}
	return v, err
}
