package projection

import "github.com/rscoord/rsc/wire"

// The views in the HTTP API's shapes (package wire): the one mapping the API
// answers with and the replay tool prints, so "what the coordinator believed
// then" reads exactly like "what it answers now". What only memory and Redis
// know is added to the views by the API before they are mapped.

// WireGroup is a group view as GET .../groups/{g} shows it.
func WireGroup(v GroupView) wire.Group {
	g := wire.Group{
		StreamPrefix: v.StreamPrefix, ConsumerGroup: v.ConsumerGroup, State: v.State,
		GroupEpoch: v.GroupEpoch, AssignmentEpoch: v.AssignmentEpoch, MetadataVersion: v.MetadataVersion,
		ShardCount: v.ShardCount, AssignableShardCount: v.AssignableShardCount,
		TargetAssignmentSummary: v.TargetAssignmentSummary, CurrentAssignmentSummary: v.CurrentAssignmentSummary,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt,
		Ordering: v.Ordering, Barriers: WireBarriers(v.Barriers),
	}
	if a := v.ActiveResharding; a != nil {
		r, phase := WireResharding(*a), a.Phase
		g.ActiveMigration, g.ActiveReshardingPhase = &r, &phase
	}
	return g
}

// WireResharding is a resharding view as GET .../migrations/{id} shows it.
func WireResharding(v ReshardingView) wire.Resharding {
	r := wire.Resharding{
		ReshardingID: v.ReshardingID, FromShardCount: v.FromShardCount, ToShardCount: v.ToShardCount, State: v.State,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Kind: v.Kind, Phase: v.Phase, RequestedBy: v.RequestedBy, Reason: v.Reason,
		StateHistory:  WireStateChanges(v.StateHistory),
		Provisioning:  wire.Provisioning{ProvisionedShards: v.Provisioning.ProvisionedShards, TotalShards: v.Provisioning.TotalShards, State: v.Provisioning.State},
		RemovedShards: WireShards(v.RemovedShards), Drain: make([]wire.ShardDrainRow, 0, len(v.Drain)), DrainProven: v.DrainProven,
		Revoke:   wire.RevokeProgress{Holding: WireShardMap(v.Revoke.Holding), Remaining: v.Revoke.Remaining, Started: v.Revoke.Started},
		Rollback: WireRollback(v.Rollback),
		Barriers: WireBarriers(v.Barriers),
	}
	for _, d := range v.Drain {
		row := wire.ShardDrainRow{
			Shard: wire.ShardRef{ShardIndex: d.Shard}, StreamKey: d.StreamKey, Exists: d.Exists, RedisPending: d.RedisPending, RedisLag: d.RedisLag,
			Groups: make([]wire.GroupDrain, 0, len(d.Groups)), Owners: d.Owners, MemberPending: d.MemberPending, MemberAckedID: d.MemberAckedID,
			Drained: d.Drained, EvidenceSource: d.EvidenceSource, WaitingFor: append([]string{}, d.WaitingFor...),
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

// WireRollback is a rollback eligibility in its wire form.
func WireRollback(v RollbackInfo) wire.RollbackInfo {
	return wire.RollbackInfo{Eligible: v.Eligible, Reason: v.Reason, Policy: v.Policy}
}

// WireBarriers is barrier views in their wire form (never nil).
func WireBarriers(bs []BarrierView) []wire.Barrier {
	out := make([]wire.Barrier, 0, len(bs))
	for _, b := range bs {
		wb := wire.Barrier{ReshardingID: b.ReshardingID, Shard: wire.ShardRef{ShardIndex: b.Shard}, StreamKey: b.StreamKey,
			After: b.After, Fence: b.Fence, Since: b.Since, WaitingOn: make([]wire.BarrierSource, 0, len(b.WaitingOn))}
		for _, s := range b.WaitingOn {
			wb.WaitingOn = append(wb.WaitingOn, wire.BarrierSource{Shard: wire.ShardRef{ShardIndex: s.Shard}, StreamKey: s.StreamKey,
				CutoverID: s.CutoverID, Proven: s.Proven, LastDeliveredID: s.LastDeliveredID, PendingToCutover: s.PendingToCutover, CheckedAt: s.CheckedAt})
		}
		out = append(out, wb)
	}
	return out
}

// WireAssignments is an assignment view in its wire form.
func WireAssignments(v AssignmentsView) wire.Assignments {
	return wire.Assignments{
		TargetAssignment: WireShardMap(v.TargetAssignment), CurrentAssignments: WireShardMap(v.CurrentAssignments),
		GrantedAssignments: WireShardMap(v.GrantedAssignments), RevokeProgress: WireShardMap(v.RevokeProgress),
		PendingAssignments: WireShardMap(v.PendingAssignments), InvariantViolations: v.InvariantViolations,
	}
}

// WireStateChanges copies a resharding's history with its times in UTC (never nil).
func WireStateChanges(h []StateChange) []wire.StateChange {
	out := make([]wire.StateChange, 0, len(h))
	for _, c := range h {
		out = append(out, wire.StateChange{State: c.State, Phase: c.Phase, At: c.At.UTC(), Actor: c.Actor, EventID: c.EventID,
			GroupEpoch: c.GroupEpoch, MetadataVersion: c.MetadataVersion})
	}
	return out
}

// WireShards converts shard indexes to their wire form, in order (never nil).
func WireShards(idx []int) []wire.ShardRef {
	out := make([]wire.ShardRef, 0, len(idx))
	for _, i := range idx {
		out = append(out, wire.ShardRef{ShardIndex: i})
	}
	return out
}

// WireShardMap converts shard lists by member id (never nil).
func WireShardMap(m map[string][]int) map[string][]wire.ShardRef {
	out := make(map[string][]wire.ShardRef, len(m))
	for id, idx := range m {
		out[id] = WireShards(idx)
	}
	return out
}

// WireStream is a stream view as GET /coord/v1/streams/{p} shows it.
func WireStream(v StreamView) wire.Stream {
	out := wire.Stream{StreamPrefix: v.StreamPrefix, HasMetadata: v.Metadata, TopologyConflict: v.Conflict,
		CreatedAt: v.CreatedAt.UTC(), UpdatedAt: v.UpdatedAt.UTC(), ConsumerGroups: v.ConsumerGroups,
		CreatedShards: v.CreatedShards, AdoptedShards: v.AdoptedShards}
	if !v.Conflict {
		count, mv := v.ShardCount, v.MetadataVersion
		out.ShardCount, out.MetadataVersion = &count, &mv
	}
	if v.Metadata {
		origin, by := v.Origin, v.CreatedBy
		out.Origin, out.CreatedBy = &origin, &by
	}
	return out
}

// StreamViews is every stream of a state with metadata or groups, by prefix.
func StreamViews(s *State) []StreamView {
	var out []StreamView
	for _, prefix := range s.StreamPrefixes() {
		st, groups := s.StreamWithGroups(prefix)
		if (st == nil || !st.Metadata) && len(groups) == 0 {
			continue
		}
		out = append(out, ViewStream(prefix, st, groups))
	}
	return out
}
