package projection

import (
	"github.com/rscoord/rsc/events"
)

// How a group's own records change it: created, deleted, its assignment.

func init() {
	registerWhole(func(_ *Group, k GroupKey, rec events.Record, ev *events.GroupCreated) *Group {
		return groupCreated(k, rec, ev)
	})
	registerGroup(func(*Group, GroupKey, events.Record, *events.GroupDeleted) *Group { return nil })
	// A refused command is in the history only: the group did not change,
	// so neither does its update time.
	registerWhole(func(g *Group, _ GroupKey, _ events.Record, _ *events.CommandRejected) *Group { return g })
	register(func(g *Group, _ events.Record, ev *events.AssignmentComputed) { assignmentComputed(g, ev) })
	register(func(g *Group, _ events.Record, ev *events.AssignmentChanged) { assignmentChanged(g, ev) })
	// Audit only; group.consumer_groups_destroyed ends a removal the stream
	// fold keeps (below).
	registerNoFold(&events.ShardsRepaired{}, &events.ConsumerGroupsDestroyed{})

	// The shard streams a group's records provision, recreate and leave.
	registerStream(nil, func(st *Stream, _ events.Record, ev *events.GroupCreated, _ *Group) {
		if ev.KeysChecked {
			st.CreatedShards = union(st.CreatedShards, ev.CreatedShards...)
			st.AdoptedShards = without(st.AdoptedShards, ev.CreatedShards...)
		} else {
			// An entry of a build that did not record it: that build
			// provisioned every shard of the group, and deleted what it
			// retired.
			st.CreatedShards = union(st.CreatedShards, shardRange(0, ev.ShardCount)...)
		}
	})
	registerStream(func(_ events.Record, ev *events.ShardsRepaired) bool {
		for _, s := range ev.Shards {
			if s.StreamMissing {
				return true
			}
		}
		return false
	}, func(st *Stream, _ events.Record, ev *events.ShardsRepaired, _ *Group) {
		var made []int
		for _, s := range ev.Shards {
			if s.StreamMissing {
				made = append(made, s.ShardIndex)
			}
		}
		st.CreatedShards = union(st.CreatedShards, made...)
		st.AdoptedShards = without(st.AdoptedShards, made...)
	})
	registerStream(func(rec events.Record, ev *events.GroupDeleted) bool {
		return len(ev.Destroy) > 0 && rec.StreamPrefix != ""
	}, func(st *Stream, rec events.Record, ev *events.GroupDeleted, _ *Group) {
		var shards []int
		for _, key := range ev.Destroy {
			if i := shardIndexOf(rec.StreamPrefix, key); i >= 0 {
				shards = append(shards, i)
			}
		}
		st.Removing = append(withoutRemoval(st.Removing, rec.ConsumerGroup), Removal{Group: rec.ConsumerGroup, Shards: SortedInts(shards)})
	})
	registerStream(nil, func(st *Stream, rec events.Record, _ *events.ConsumerGroupsDestroyed, _ *Group) {
		st.Removing = withoutRemoval(st.Removing, rec.ConsumerGroup)
	})
}

func groupCreated(k GroupKey, rec events.Record, ev *events.GroupCreated) *Group {
	mv := ev.MetadataVersion
	if mv < 1 {
		mv = 1
	}
	g := &Group{
		Key: k, ShardCount: ev.ShardCount, AssignableCount: ev.ShardCount,
		GroupEpoch: 1, AssignmentEpoch: 1, MetadataVersion: mv, LayoutSince: mv,
		members: map[string]*Member{}, targets: map[string][]int{},
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

func assignmentComputed(g *Group, ev *events.AssignmentComputed) {
	g.AssignmentEpoch = ev.AssignmentEpoch
	targets := make(map[string][]int, len(ev.Targets))
	for id, t := range ev.Targets {
		targets[id] = SortedInts(t)
	}
	replaceTargets(g, targets)
}

func assignmentChanged(g *Group, ev *events.AssignmentChanged) {
	g.AssignmentEpoch = ev.AssignmentEpoch
	for id, t := range ev.Targets {
		touch(g, id)
		setTarget(g, id, SortedInts(t))
	}
	for _, id := range ev.Removed {
		touch(g, id)
		deleteTarget(g, id)
	}
}
