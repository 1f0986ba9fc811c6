package commands

import (
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
func destroySet(t *Tx, g *projection.Group) []string {
	if !t.Rules.Provisioning || !g.Provisioned {
		return nil
	}
	hw := max(g.ShardCount, g.AssignableCount)
	for _, m := range g.Reshardings {
		hw = max(hw, m.From, m.To)
	}
	var keys []string
	for s := 0; s < hw; s++ {
		if !ContainsInt(g.ForeignShards, s) {
			keys = append(keys, routing.StreamKey(g.Key.StreamPrefix, s))
		}
	}
	return keys
}

// removeGroup records ev (group.deleted) for k with the consumer groups to
// destroy, and forgets the group's runtime.
func removeGroup(t *Tx, k projection.GroupKey, ev *events.GroupDeleted) {
	ev.Destroy = destroySet(t, t.Group(k))
	t.emit(k, ev)
	t.RT.dropGroup(k)
}

// removalPending refuses a group whose name still has consumer groups to
// destroy (a group created now would lose them to that removal).
func removalPending(t *Tx, k projection.GroupKey) error {
	if t.B.Overlay.Stream(k.StreamPrefix).RemovalOf(k.ConsumerGroup) != nil {
		return WithMsg(ErrStateConflict, "the consumer groups of an earlier group %s are still being destroyed; retry", k.ConsumerGroup)
	}
	return nil
}

// destroyed records that the pending removal of k's consumer groups on
// shards is done (nothing when it is not pending, or is another one).
func Destroyed(t *Tx, k projection.GroupKey, shards []int) {
	r := t.B.Overlay.Stream(k.StreamPrefix).RemovalOf(k.ConsumerGroup)
	if r == nil || !projection.EqualSets(r.Shards, projection.SortedInts(shards)) {
		return
	}
	keys := make([]string, len(shards))
	for i, s := range r.Shards {
		keys[i] = routing.StreamKey(k.StreamPrefix, s)
	}
	t.emitAs(Actor, k, &events.ConsumerGroupsDestroyed{StreamKeys: keys})
}
