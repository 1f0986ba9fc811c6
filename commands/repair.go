package commands

import (
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Self-healing shards. Redis can lose a routed shard's stream or the group's
// consumer group on it (a restart without persistence, an operator's DEL or
// XGROUP DESTROY); producers then fail their XADD NOMKSTREAM and members their
// XREADGROUP until somebody recreates it. Every ShardCheckInterval the leader
// reads the routed shards of every provisioned group (outside the writer),
// hands what Redis lost to a decision that re-checks the shards are still
// routed and records group.shards_repaired, and only then recreates them.
// A removed shard that still drains (or that an ordered group's barrier
// waits on) gets back a lost consumer group, at the stream's start, so its
// entries are read again and its drain can be proven; a lost stream of a
// removed shard is not recreated (nothing is left to drain), and retired
// shards are never touched: retired streams stay deleted. The same check lowers fences left above a group's metadata version
// (ordering.go, checkFences) and a stream's without groups (checkBareFences).

// recordRepair records group.shards_repaired for the damaged shards that are
// still routed, and for the lost consumer groups of removed shards not yet
// retired, and returns them.
func RecordRepair(t *Tx, k projection.GroupKey, damage []events.ShardRepair) []int {
	g := t.Group(k)
	if g == nil {
		return nil
	}
	var still []events.ShardRepair
	var shards []int
	for _, d := range damage {
		if d.ShardIndex < g.ShardCount || (d.ShardIndex < ShardSpan(g.ReadOnly()) && !d.StreamMissing) {
			still = append(still, d)
			shards = append(shards, d.ShardIndex)
		}
	}
	if len(still) > 0 {
		t.emitAs(Actor, k, &events.ShardsRepaired{Shards: still})
	}
	return shards
}
