package coordinator

import (
	"context"
	"time"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// maintenance is the tick: for every group with something to do it submits
// the maintenance decision (expiry of members and of empty registered
// groups, rebalance timeouts, overdue correction rounds, pruning, the
// resharding steps that need no Redis), which reads nothing but the
// projection and the runtime.
type maintenance struct {
	state    *projection.State
	table    *commands.RuntimeTable
	evidence *evidenceTable
	dec      writer
	rules    commands.Rules
	// now is the wall-clock time (what terminal members' records are aged
	// by), timers the reading leases and rounds are measured against (nil:
	// now; Clock).
	now    func() time.Time
	timers func() time.Time
	logger zerolog.Logger
}

// run submits the maintenance decision of every group that needs one.
func (mt *maintenance) run(ctx context.Context) {
	for _, k := range mt.due() {
		k := k
		removed, err := submit(ctx, mt.dec, events.Meta{Actor: commands.Actor}, func(t *commands.Tx) (bool, error) {
			return commands.Maintain(t, k), nil
		})
		if err != nil {
			mt.logger.Debug().Err(err).Str("group", k.ConsumerGroup).Msg("maintenance tick")
		}
		if removed {
			mt.evidence.dropGroup(k)
			mt.logger.Info().Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Dur("retention", mt.rules.EmptyGroupRetention).Msg("empty registered group expired: removed with its consumer groups")
		}
	}
}

// due lists the groups with something to do (commands.Due).
func (mt *maintenance) due() []projection.GroupKey {
	now, timers := mt.now(), mt.now
	if mt.timers != nil {
		timers = mt.timers
	}
	return commands.Due(mt.state, mt.table, mt.rules, now, timers())
}
