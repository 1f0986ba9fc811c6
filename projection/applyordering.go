package projection

import (
	"fmt"
	"strconv"

	"github.com/rscoord/rsc/events"
)

// How an ordered group's records change it: its ordering, cutovers and barriers.

func init() {
	register(func(g *Group, _ events.Record, ev *events.GroupOrderingChanged) {
		g.Ordering = normalOrdering(ev.Ordering)
	})
	registerGroup(func(g *Group, k GroupKey, rec events.Record, ev *events.ReshardingCutover) *Group {
		reshardingCutover(g, k, rec, ev)
		return g
	})
	register(barrierReleased)
	register(func(g *Group, _ events.Record, ev *events.UnfencedWrites) {
		for _, w := range ev.Shards {
			g.UnfencedWrites += w.Count
		}
	})
}

func reshardingCutover(g *Group, k GroupKey, rec events.Record, ev *events.ReshardingCutover) {
	byIndex := make(map[int]events.ShardCutover, len(ev.Shards))
	for _, c := range ev.Shards {
		byIndex[c.ShardIndex] = c
	}
	for _, cb := range ev.Barriers {
		b := &Barrier{
			ReshardingID: ev.ReshardingID, Fence: ev.Fence, Shard: cb.ShardIndex, After: cb.After, Since: rec.Time,
			StreamKey: k.StreamPrefix + ":" + strconv.Itoa(cb.ShardIndex),
		}
		for _, s := range cb.Sources {
			if c, ok := byIndex[s]; ok {
				b.Sources = append(b.Sources, c)
			}
		}
		g.Barriers = append(g.Barriers, b)
	}
	stateChange(g, ev.ReshardingID, stateOf(g, ev.ReshardingID), fmt.Sprintf("cutover: fences raised to %d; %d shards wait on a barrier", ev.Fence, len(ev.Barriers)), rec)
}

func barrierReleased(g *Group, rec events.Record, ev *events.BarrierReleased) {
	var kept []*Barrier // a new slice: a clone shares the old one
	for _, b := range g.Barriers {
		if b.Fence != ev.Fence || !containsInt(ev.Shards, b.Shard) {
			kept = append(kept, b)
		}
	}
	g.Barriers = kept
	stateChange(g, ev.ReshardingID, stateOf(g, ev.ReshardingID), fmt.Sprintf("barrier released on shards %v", ev.Shards), rec)
}

// normalOrdering is the ordering a group keeps: KEY, or "" for none.
func normalOrdering(o string) string {
	if o == events.OrderingKey {
		return o
	}
	return ""
}
