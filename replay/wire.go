package replay

import (
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// The JSON this package writes shows groups, reshardings and assignments in
// the HTTP API's shapes (package wire), so what `replay state` prints reads
// like what the API answers. The functions below put projection's views into
// those shapes; httpapi has its own for the API (it cannot be imported here).

func wireGroup(v projection.GroupView) wire.Group {
	g := wire.Group{
		StreamPrefix: v.StreamPrefix, ConsumerGroup: v.ConsumerGroup, State: v.State,
		GroupEpoch: v.GroupEpoch, AssignmentEpoch: v.AssignmentEpoch, MetadataVersion: v.MetadataVersion,
		ShardCount: v.ShardCount, AssignableShardCount: v.AssignableShardCount,
		TargetAssignmentSummary: v.TargetAssignmentSummary, CurrentAssignmentSummary: v.CurrentAssignmentSummary,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt,
	}
	if a := v.ActiveResharding; a != nil {
		r, phase := wireResharding(*a), a.Phase
		g.ActiveMigration, g.ActiveReshardingPhase = &r, &phase
	}
	return g
}

func wireResharding(v projection.ReshardingView) wire.Resharding {
	r := wire.Resharding{
		ReshardingID: v.ReshardingID, FromShardCount: v.FromShardCount, ToShardCount: v.ToShardCount, State: v.State,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Kind: v.Kind, Phase: v.Phase, RequestedBy: v.RequestedBy, Reason: v.Reason,
		StateHistory:  wireStateChanges(v.StateHistory),
		Provisioning:  wire.Provisioning{ProvisionedShards: v.Provisioning.ProvisionedShards, TotalShards: v.Provisioning.TotalShards, State: v.Provisioning.State},
		RemovedShards: wireShards(v.RemovedShards), Drain: make([]wire.ShardDrainRow, 0, len(v.Drain)), DrainProven: v.DrainProven,
		Revoke:   wire.RevokeProgress{Holding: wireShardMap(v.Revoke.Holding), Remaining: v.Revoke.Remaining, Started: v.Revoke.Started},
		Rollback: wireRollback(v.Rollback), Retirement: wireRetirement(v.Retirement),
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
	return r
}

func wireAssignments(v projection.AssignmentsView) wire.Assignments {
	return wire.Assignments{
		TargetAssignment: wireShardMap(v.TargetAssignment), CurrentAssignments: wireShardMap(v.CurrentAssignments),
		GrantedAssignments: wireShardMap(v.GrantedAssignments), RevokeProgress: wireShardMap(v.RevokeProgress),
		PendingAssignments: wireShardMap(v.PendingAssignments), InvariantViolations: v.InvariantViolations,
	}
}

// wireStateChanges copies a resharding's history with its times in UTC (never nil).
func wireStateChanges(h []projection.StateChange) []wire.StateChange {
	out := make([]wire.StateChange, 0, len(h))
	for _, c := range h {
		out = append(out, wire.StateChange{State: c.State, Phase: c.Phase, At: c.At.UTC(), Actor: c.Actor, EventID: c.EventID,
			GroupEpoch: c.GroupEpoch, MetadataVersion: c.MetadataVersion})
	}
	return out
}

func wireRollback(v projection.RollbackInfo) wire.RollbackInfo {
	return wire.RollbackInfo{Eligible: v.Eligible, Reason: v.Reason, Policy: v.Policy}
}

func wireRetirement(v *projection.Retirement) *wire.Retirement {
	if v == nil {
		return nil
	}
	return &wire.Retirement{Retired: v.Retired, StreamKeys: v.StreamKeys, Kept: v.Kept}
}

// wireShards converts shard indexes to their wire form, in order (never nil).
func wireShards(idx []int) []wire.ShardRef {
	out := make([]wire.ShardRef, 0, len(idx))
	for _, i := range idx {
		out = append(out, wire.ShardRef{ShardIndex: i})
	}
	return out
}

// wireShardMap converts shard lists by member id (never nil).
func wireShardMap(m map[string][]int) map[string][]wire.ShardRef {
	out := make(map[string][]wire.ShardRef, len(m))
	for id, idx := range m {
		out[id] = wireShards(idx)
	}
	return out
}
