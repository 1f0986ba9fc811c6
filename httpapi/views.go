package httpapi

import (
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// How projection's views reach the wire: the functions below put a group, a
// resharding and an assignment into the contract's shapes. Handlers add what
// only memory and Redis know (reshardingBody's callers, MembersOf) on top.

// GroupOf is a group as GET .../groups/{g} shows it: everything in it comes
// from the log.
func GroupOf(g *projection.Group) wire.Group { return groupBody(projection.ViewGroup(g)) }

func groupBody(v projection.GroupView) wire.Group {
	g := wire.Group{
		StreamPrefix: v.StreamPrefix, ConsumerGroup: v.ConsumerGroup, State: v.State,
		GroupEpoch: v.GroupEpoch, AssignmentEpoch: v.AssignmentEpoch, MetadataVersion: v.MetadataVersion,
		ShardCount: v.ShardCount, AssignableShardCount: v.AssignableShardCount,
		TargetAssignmentSummary: v.TargetAssignmentSummary, CurrentAssignmentSummary: v.CurrentAssignmentSummary,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt,
	}
	if a := v.ActiveResharding; a != nil {
		r, phase := reshardingBody(*a), a.Phase
		g.ActiveMigration, g.ActiveReshardingPhase = &r, &phase
	}
	return g
}

func reshardingBody(v projection.ReshardingView) wire.Resharding {
	r := wire.Resharding{
		ReshardingID: v.ReshardingID, FromShardCount: v.FromShardCount, ToShardCount: v.ToShardCount, State: v.State,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Kind: v.Kind, Phase: v.Phase, RequestedBy: v.RequestedBy, Reason: v.Reason,
		StateHistory:  make([]wire.StateChange, 0, len(v.StateHistory)),
		Provisioning:  wire.Provisioning{ProvisionedShards: v.Provisioning.ProvisionedShards, TotalShards: v.Provisioning.TotalShards, State: v.Provisioning.State},
		RemovedShards: shardRefs(v.RemovedShards), Drain: make([]wire.ShardDrainRow, 0, len(v.Drain)), DrainProven: v.DrainProven,
		Revoke:   wire.RevokeProgress{Holding: shardMap(v.Revoke.Holding), Remaining: v.Revoke.Remaining, Started: v.Revoke.Started},
		Rollback: rollbackBody(v.Rollback),
	}
	for _, c := range v.StateHistory {
		r.StateHistory = append(r.StateHistory, wire.StateChange{State: c.State, Phase: c.Phase, At: c.At.UTC(), Actor: c.Actor,
			EventID: c.EventID, GroupEpoch: c.GroupEpoch, MetadataVersion: c.MetadataVersion})
	}
	for _, d := range v.Drain {
		row := wire.ShardDrainRow{
			Shard: wire.ShardRef{ShardIndex: d.Shard}, StreamKey: d.StreamKey, Exists: d.Exists, RedisPending: d.RedisPending, RedisLag: d.RedisLag,
			Groups: make([]wire.GroupDrain, 0, len(d.Groups)), Owners: d.Owners, MemberPending: d.MemberPending, MemberAckedID: d.MemberAckedID,
			Drained: d.Drained, EvidenceSource: d.EvidenceSource,
		}
		for _, gd := range d.Groups {
			row.Groups = append(row.Groups, wire.GroupDrain{Name: gd.Name, Pending: gd.Pending, Lag: gd.Lag})
		}
		r.Drain = append(r.Drain, row)
	}
	if t := v.Retirement; t != nil {
		r.Retirement = &wire.Retirement{Retired: t.Retired, StreamKeys: t.StreamKeys, Kept: t.Kept}
	}
	return r
}

func rollbackBody(v projection.RollbackInfo) wire.RollbackInfo {
	return wire.RollbackInfo{Eligible: v.Eligible, Reason: v.Reason, Policy: v.Policy}
}

func assignmentsBody(v projection.AssignmentsView) wire.Assignments {
	return wire.Assignments{
		TargetAssignment: shardMap(v.TargetAssignment), CurrentAssignments: shardMap(v.CurrentAssignments),
		GrantedAssignments: shardMap(v.GrantedAssignments), RevokeProgress: shardMap(v.RevokeProgress),
		PendingAssignments: shardMap(v.PendingAssignments), InvariantViolations: v.InvariantViolations,
	}
}

// shardRefs converts shard indexes to their wire form, in order (never nil).
func shardRefs(idx []int) []wire.ShardRef {
	out := make([]wire.ShardRef, 0, len(idx))
	for _, i := range idx {
		out = append(out, wire.ShardRef{ShardIndex: i})
	}
	return out
}

// sortedShardRefs is shardRefs of a member's shard set, sorted.
func sortedShardRefs(idx []int) []wire.ShardRef { return shardRefs(projection.SortedInts(idx)) }

// shardMap converts shard lists by member id (never nil).
func shardMap(m map[string][]int) map[string][]wire.ShardRef {
	out := make(map[string][]wire.ShardRef, len(m))
	for id, idx := range m {
		out[id] = shardRefs(idx)
	}
	return out
}
