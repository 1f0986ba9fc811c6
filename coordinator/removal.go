package coordinator

import (
	"context"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// removePass finishes every pending removal of consumer groups, oldest
// first per prefix.
func (r *reconciler) removePass(ctx context.Context) {
	for _, p := range r.state.Removals() {
		if !r.mayAct(ctx) {
			return
		}
		if err := r.finishRemoval(ctx, p.Key); err != nil {
			r.logger.Warn().Err(err).Str("prefix", p.Key.StreamPrefix).Str("group", p.Key.ConsumerGroup).Msg("destroy the consumer groups of a deleted group")
		}
	}
}

// finishRemoval destroys, with the prefix's lock held, the consumer groups
// of k that a removal still names, and records it.
func (r *reconciler) finishRemoval(ctx context.Context, k projection.GroupKey) error {
	unlock := r.locks.lock(k.StreamPrefix)
	defer unlock()
	return r.finishRemovalLocked(ctx, k)
}

// finishRemovalLocked is finishRemoval for a caller holding the prefix's
// lock: the removal is read again from the committed state (it may have
// been finished meanwhile), the consumer groups destroyed, the removal
// recorded as done.
func (r *reconciler) finishRemovalLocked(ctx context.Context, k projection.GroupKey) error {
	rm, ok := r.state.Removal(k)
	if !ok {
		return nil
	}
	if r.remover != nil && len(rm.Shards) > 0 {
		if !r.lead.IsLeader() {
			return commands.ErrNotLeader
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.remover.DestroyGroups(rctx, k.StreamPrefix, k.ConsumerGroup, rm.Shards)
		cancel()
		if err != nil {
			return commands.Failed(commands.ErrProvisioningFailed, err, "could not destroy the consumer groups %s of a deleted group on %d shards of %s in Redis", k.ConsumerGroup, len(rm.Shards), k.StreamPrefix)
		}
	}
	if _, err := submit(ctx, r.dec, events.Meta{Actor: commands.Actor}, func(t *commands.Tx) (struct{}, error) {
		commands.Destroyed(t, k, rm.Shards)
		return struct{}{}, nil
	}); err != nil {
		return err
	}
	r.evidence.dropGroup(k)
	return nil
}
