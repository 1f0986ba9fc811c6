package projection

import (
	"github.com/rscoord/rsc/events"
)

// How a resharding's lifecycle changes its group.

func init() {
	register(reshardingPreparing)
	register(reshardingProvisioned)
	register(reshardingActivated)
	register(func(g *Group, rec events.Record, ev *events.ReshardingDraining) {
		setEpochs(g, ev.Epochs)
		stateChange(g, ev.ReshardingID, Draining, "converged", rec)
	})
	register(reshardingDrained)
	register(reshardingReopened)
	register(reshardingCompleted)
	register(reshardingRolledBack)
	register(shardsRetired)

	// The shard streams a resharding provisions and retires, and the layout
	// of a stream with metadata (StreamMetadataVersion).
	registerStream(nil, func(st *Stream, _ events.Record, ev *events.ReshardingPreparing, _ *Group) {
		if ev.KeysChecked {
			st.CreatedShards = union(st.CreatedShards, ev.CreatedShards...)
			st.AdoptedShards = without(st.AdoptedShards, ev.CreatedShards...)
		}
	})
	registerStream(nil, func(st *Stream, _ events.Record, ev *events.ReshardingProvisioned, g *Group) {
		if g != nil {
			if m := g.Resharding(ev.ReshardingID); m != nil && !m.KeysChecked {
				st.CreatedShards = union(st.CreatedShards, without(shardRange(0, ev.Shards), st.AdoptedShards...)...)
			}
		}
	})
	registerStream(func(_ events.Record, ev *events.ReshardingActivated) bool { return ev.StreamMetadataVersion > 0 },
		func(st *Stream, rec events.Record, ev *events.ReshardingActivated, _ *Group) {
			streamLayout(st, ev.ShardCount, ev.StreamMetadataVersion, rec)
			st.ShardCount, st.MetadataVersion, st.UpdatedAt = ev.ShardCount, ev.StreamMetadataVersion, rec.Time
		})
	registerStream(func(_ events.Record, ev *events.ReshardingRolledBack) bool { return ev.StreamMetadataVersion > 0 },
		func(st *Stream, rec events.Record, ev *events.ReshardingRolledBack, _ *Group) {
			streamLayout(st, ev.ShardCount, ev.StreamMetadataVersion, rec)
			st.ShardCount, st.MetadataVersion, st.UpdatedAt = ev.ShardCount, ev.StreamMetadataVersion, rec.Time
		})
	registerStream(nil, func(st *Stream, rec events.Record, ev *events.ShardsRetired, _ *Group) {
		if !ev.Kept {
			var gone []int
			for _, key := range ev.StreamKeys {
				if i := shardIndexOf(rec.StreamPrefix, key); i >= 0 {
					gone = append(gone, i)
				}
			}
			st.CreatedShards = without(st.CreatedShards, gone...)
		}
	})
}

func reshardingPreparing(g *Group, rec events.Record, ev *events.ReshardingPreparing) {
	if g.lay != nil {
		g.lay.ownReshardings[ev.ReshardingID] = true
	}
	g.Reshardings = append(keptReshardings(g.Reshardings), &Resharding{
		ReshardingID: ev.ReshardingID, From: ev.FromShardCount, To: ev.ToShardCount,
		State: Preparing, CreatedAt: rec.Time, UpdatedAt: rec.Time,
		RequestedBy: ev.RequestedBy, Reason: ev.Reason, KeysChecked: ev.KeysChecked,
		StartEpochs: events.Epochs{GroupEpoch: g.GroupEpoch, MetadataVersion: g.MetadataVersion},
	})
	g.ActiveResharding = ev.ReshardingID
	stateChange(g, ev.ReshardingID, Preparing, "requested", rec)
}

func reshardingProvisioned(g *Group, rec events.Record, ev *events.ReshardingProvisioned) {
	if m := reshardingForWrite(g, ev.ReshardingID); m != nil {
		m.ProvisionedShards = ev.Shards
		stateChange(g, ev.ReshardingID, m.State, "provisioned", rec)
	}
}

func reshardingActivated(g *Group, rec events.Record, ev *events.ReshardingActivated) {
	groupLayout(g, ev.ShardCount, ev.MetadataVersion, rec)
	g.ShardCount = ev.ShardCount
	g.AssignableCount = ev.AssignableCount
	setEpochs(g, ev.Epochs)
	stateChange(g, ev.ReshardingID, Active, "activated", rec)
}

func reshardingDrained(g *Group, rec events.Record, ev *events.ReshardingDrained) {
	g.AssignableCount = ev.AssignableCount
	setEpochs(g, ev.Epochs)
	if m := reshardingForWrite(g, ev.ReshardingID); m != nil {
		m.Drained = true
		m.Evidence = ev.Evidence
		stateChange(g, ev.ReshardingID, m.State, "drained; revoking removed shards", rec)
	}
}

func reshardingReopened(g *Group, rec events.Record, ev *events.ReshardingReopened) {
	g.AssignableCount = ev.AssignableCount
	setEpochs(g, ev.Epochs)
	if m := reshardingForWrite(g, ev.ReshardingID); m != nil {
		m.Drained = false
		m.Evidence = ev.Evidence
		stateChange(g, ev.ReshardingID, m.State, "reopened: removed shard received entries", rec)
	}
}

func reshardingCompleted(g *Group, rec events.Record, ev *events.ReshardingCompleted) {
	g.MetadataVersion = ev.MetadataVersion
	if m := reshardingForWrite(g, ev.ReshardingID); m != nil {
		if len(ev.Evidence) > 0 {
			m.Evidence = ev.Evidence
		}
		stateChange(g, ev.ReshardingID, ev.State, "completed", rec)
	}
	if g.ActiveResharding == ev.ReshardingID {
		g.ActiveResharding = ""
	}
}

func reshardingRolledBack(g *Group, rec events.Record, ev *events.ReshardingRolledBack) {
	groupLayout(g, ev.ShardCount, ev.MetadataVersion, rec)
	g.ShardCount = ev.ShardCount
	g.AssignableCount = ev.AssignableCount
	setEpochs(g, ev.Epochs)
	if m := reshardingForWrite(g, ev.ReshardingID); m != nil {
		m.RollbackPolicy = ev.Policy
		m.RollbackRequestedBy = ev.RequestedBy
		m.RollbackReason = ev.Reason
		m.Drained = false
		stateChange(g, ev.ReshardingID, ev.State, "rollback requested ("+ev.Policy+")", rec)
	}
	if ev.State == RolledBack && g.ActiveResharding == ev.ReshardingID {
		g.ActiveResharding = ""
	}
}

// groupLayout records a change of the group's shard count to count at
// version mv (nothing when the count stays: a rollback before activation).
func groupLayout(g *Group, count int, mv int64, rec events.Record) {
	if count == g.ShardCount {
		return
	}
	g.PreviousLayouts = layoutChanged(g.PreviousLayouts, g.LayoutSince, g.ShardCount, mv, rec.Time)
	g.LayoutSince = mv
}

func shardsRetired(g *Group, rec events.Record, ev *events.ShardsRetired) {
	m := reshardingForWrite(g, ev.ReshardingID)
	if m == nil {
		return
	}
	m.Retired = true
	m.RetiredKeys = append([]string(nil), ev.StreamKeys...)
	m.RetiredKept = ev.Kept
	phase := "retired: streams deleted"
	if ev.Kept {
		phase = "retired: streams kept by policy"
	}
	stateChange(g, ev.ReshardingID, m.State, phase, rec)
}

// MaxFinishedReshardings is how many finished reshardings a group keeps in the
// projection (their whole story stays in the audit history): without a bound
// the state, and every snapshot, would grow with the log.
const MaxFinishedReshardings = 32

// keptReshardings drops the oldest finished reshardings beyond
// MaxFinishedReshardings - 1, before a new one is added (never the last one:
// it may still be retiring its streams).
func keptReshardings(rs []*Resharding) []*Resharding {
	finished := 0
	for _, r := range rs {
		if r.Terminal() {
			finished++
		}
	}
	drop := finished - (MaxFinishedReshardings - 1)
	if drop <= 0 {
		return rs
	}
	out := make([]*Resharding, 0, len(rs)-drop)
	for i, r := range rs {
		if drop > 0 && r.Terminal() && i < len(rs)-1 {
			drop--
			continue
		}
		out = append(out, r)
	}
	return out
}
