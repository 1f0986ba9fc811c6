package commands

import (
	"context"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

// What the coordinator creates, it removes. A group's delete (or its expiry,
// expiry.go) destroys the Redis consumer groups the coordinator provisioned
// for it, and never one it found: a decision records group.deleted naming
// the shard streams to destroy them on (Destroy), the reconciler destroys
// them outside the writer (XGROUP DESTROY; a missing one is success) and
// records group.consumer_groups_destroyed. Shard streams are left in place
// (other groups of the stream read them; a stream's own delete is not a
// group's business).
//
// A coordinator that dies between the two finds the removal pending in the
// projection (the prefix's Stream.Removing) and finishes it on its next
// pass: the destroy is idempotent, and so is its record (a removal already
// recorded as done records nothing).
//
// Create, delete, create again with the same name: the consumer groups of
// the first group must never be destroyed under the second. Three rules rule
// it out:
//   - a group whose name has a pending removal cannot be created (planGroup
//     refuses it: STATE_VERSION_CONFLICT, retry), so no group ever uses a
//     consumer group a pending removal names;
//   - every side effect on a prefix's consumer groups and the decision that
//     records it run under the prefix's lock (prefixLocks): a create (or a
//     registration by heartbeat) holds it from its provisioning to its
//     group.created, a removal from re-reading the pending removal in the
//     committed state to its record; so a removal never acts on a state
//     that a create changed meanwhile, and a create that finds a removal
//     pending finishes it first (finishRemovalLocked) before it provisions;
//   - only the leader acts (mayAct before the destroy), and a leader that
//     lost its term cannot record (the log is fenced).
// What is left is a leader paused between its check and its XGROUP DESTROY
// for longer than its lease while the next leader finishes the removal and
// a create of the same name provisions again: the late destroy then removes
// the new group's consumer group, which the shard check recreates at the
// stream's start (repair.go: entries are read again, none lost).

// destroySet is the stream keys of the shards on which the coordinator
// provisioned g's consumer group: every shard it ever spanned (its span, and
// every resharding's source and target it still remembers), less the ones
// where the consumer group was someone else's (ForeignShards). None for a
// group whose consumer groups the coordinator did not provision, or when it
// provisions nothing now (--disable-provisioning: it touches no consumer
// group at all).
func destroySet(t *tx, g *projection.Group) []string {
	if !t.rules.provisioning || !g.Provisioned {
		return nil
	}
	hw := max(g.ShardCount, g.AssignableCount)
	for _, m := range g.Reshardings {
		hw = max(hw, m.From, m.To)
	}
	var keys []string
	for s := 0; s < hw; s++ {
		if !containsInt(g.ForeignShards, s) {
			keys = append(keys, routing.StreamKey(g.Key.StreamPrefix, s))
		}
	}
	return keys
}

// removeGroup records ev (group.deleted) for k with the consumer groups to
// destroy, and forgets the group's runtime.
func removeGroup(t *tx, k projection.GroupKey, ev *events.GroupDeleted) {
	ev.Destroy = destroySet(t, t.group(k))
	t.emit(k, ev)
	t.rt.dropGroup(k)
}

// removalPending refuses a group whose name still has consumer groups to
// destroy (a group created now would lose them to that removal).
func removalPending(t *tx, k projection.GroupKey) error {
	if t.b.ov.Stream(k.StreamPrefix).RemovalOf(k.ConsumerGroup) != nil {
		return withMsg(ErrStateConflict, "the consumer groups of an earlier group %s are still being destroyed; retry", k.ConsumerGroup)
	}
	return nil
}

// destroyed records that the pending removal of k's consumer groups on
// shards is done (nothing when it is not pending, or is another one).
func destroyed(t *tx, k projection.GroupKey, shards []int) {
	r := t.b.ov.Stream(k.StreamPrefix).RemovalOf(k.ConsumerGroup)
	if r == nil || !projection.EqualSets(r.Shards, projection.SortedInts(shards)) {
		return
	}
	keys := make([]string, len(shards))
	for i, s := range r.Shards {
		keys[i] = routing.StreamKey(k.StreamPrefix, s)
	}
	t.emitAs(Actor, k, &events.ConsumerGroupsDestroyed{StreamKeys: keys})
}

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
			return ErrNotLeader
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := r.remover.DestroyGroups(rctx, k.StreamPrefix, k.ConsumerGroup, rm.Shards)
		cancel()
		if err != nil {
			return failed(ErrProvisioningFailed, err, "could not destroy the consumer groups %s of a deleted group on %d shards of %s in Redis", k.ConsumerGroup, len(rm.Shards), k.StreamPrefix)
		}
	}
	if _, err := submit(ctx, r.dec, events.Meta{Actor: Actor}, func(t *tx) (struct{}, error) {
		destroyed(t, k, rm.Shards)
		return struct{}{}, nil
	}); err != nil {
		return err
	}
	r.evidence.dropGroup(k)
	return nil
}
