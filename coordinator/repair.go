package coordinator

import (
	"context"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// repairShards runs the check once and returns how many shards it repaired.
func (r *reconciler) repairShards(ctx context.Context) int {
	if r.repairer == nil {
		return 0
	}
	repaired := 0
	r.checkBareFences(ctx)
	for _, g := range r.state.Groups() {
		if !r.mayAct(ctx) {
			break
		}
		r.checkFences(ctx, g)
		if g.ShardCount == 0 || !r.rules.Provisioning {
			continue
		}
		span := make([]int, commands.ShardSpan(g.ReadOnly()))
		for i := range span {
			span[i] = i
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		damage, err := r.repairer.Damage(rctx, g.Key.StreamPrefix, g.Key.ConsumerGroup, span)
		cancel()
		if err != nil {
			r.logger.Warn().Err(err).Str("prefix", g.Key.StreamPrefix).Str("group", g.Key.ConsumerGroup).Msg("check shard streams")
			continue
		}
		if len(damage) == 0 {
			continue
		}
		repaired += r.repairGroup(ctx, g.Key, damage)
	}
	return repaired
}

// mayAct reports whether a pass over many groups may go on to the next one:
// not once Close cancelled ctx, and not once this replica stopped leading (a
// deposed leader that went on lowering fences from its own, older state
// would lower the ones its successor raised for a layout change).
func (r *reconciler) mayAct(ctx context.Context) bool {
	return ctx.Err() == nil && r.lead.IsLeader()
}

// repairGroup records the repair of the damaged shards that are still routed,
// and of the lost consumer groups of removed shards not yet retired, then
// recreates them, with the prefix's lock held from the record to the
// recreation: a delete's removal of the group's consumer groups waits for it
// (removal.go), so it never leaves one recreated behind.
func (r *reconciler) repairGroup(ctx context.Context, k projection.GroupKey, damage []events.ShardRepair) int {
	unlock := r.locks.lock(k.StreamPrefix)
	defer unlock()
	shards, err := submit(ctx, r.dec, events.Meta{Actor: commands.Actor}, func(t *commands.Tx) ([]int, error) { return commands.RecordRepair(t, k, damage), nil })
	if err != nil {
		r.logger.Warn().Err(err).Str("group", k.ConsumerGroup).Msg("record shard repair")
		return 0
	}
	if len(shards) == 0 {
		return 0
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.repairer.Repair(rctx, k.StreamPrefix, k.ConsumerGroup, shards); err != nil {
		r.logger.Warn().Err(err).Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Ints("shards", shards).Msg("repair shard streams (retried at the next check)")
		return 0
	}
	r.logger.Warn().Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Ints("shards", shards).Msg("recreated shard streams or consumer groups Redis had lost")
	st, _ := r.state.Stream(k.StreamPrefix)
	r.configureIDMP(rctx, k.StreamPrefix, createdShards(st, nil, shards))
	return len(shards)
}
