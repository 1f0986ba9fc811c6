package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// SetAutoscaling stores a group's autoscaling policy (autoscaling.configured).
func (s *Service) SetAutoscaling(ctx context.Context, meta events.Meta, k projection.GroupKey, in commands.AutoscalingInput) (*projection.Autoscaling, error) {
	return admin(ctx, s, meta, k, "autoscaling.set", in.RequestedBy, func(meta events.Meta) (*projection.Autoscaling, error) {
		if err := commands.ValidateKey(k); err != nil {
			return nil, err
		}
		p, problems := s.rules.Policy(in)
		if len(problems) > 0 {
			return nil, commands.Invalid(problems)
		}
		return submit(ctx, s.dec, meta, func(t *commands.Tx) (*projection.Autoscaling, error) {
			return commands.SetAutoscaling(t, k, p)
		})
	})
}

// DisableAutoscaling turns a group's autoscaling off (autoscaling.disabled;
// nothing is recorded when it is not on).
func (s *Service) DisableAutoscaling(ctx context.Context, meta events.Meta, k projection.GroupKey, requestedBy, reason string) (*projection.Autoscaling, error) {
	return admin(ctx, s, meta, k, "autoscaling.delete", requestedBy, func(meta events.Meta) (*projection.Autoscaling, error) {
		if err := commands.ValidateKey(k); err != nil {
			return nil, err
		}
		if problems := commands.CheckAudit(requestedBy, reason, false); len(problems) > 0 {
			return nil, commands.Invalid(problems)
		}
		return submit(ctx, s.dec, meta, func(t *commands.Tx) (*projection.Autoscaling, error) {
			return commands.DisableAutoscaling(t, k, requestedBy, reason)
		})
	})
}

// autoscaler samples every autoscaled group's shards, evaluates its policy
// and acts on the verdict: an ordinary scale request (scale), or for a dry
// run the recorded recommendation.
type autoscaler struct {
	sampler  Sampler // nil: no Redis holds the shard streams
	state    *projection.State
	evidence *evidenceTable
	table    *commands.RuntimeTable
	dec      writer
	scale    func(ctx context.Context, meta events.Meta, k projection.GroupKey, in commands.ScaleInput) (projection.ReshardingView, error)
	now      func() time.Time
	logger   zerolog.Logger
	// afterEvaluate, if set, sees every evaluation (Config.AfterEvaluate).
	afterEvaluate func(k projection.GroupKey, v commands.Verdict, outcome string)
}

// run reads the load of every autoscaled group, evaluates its policy and
// acts on the verdict.
func (a *autoscaler) run(ctx context.Context) {
	if a.sampler == nil {
		return
	}
	groups := a.state.GroupsWhere(projection.ReadOnlyGroup.AutoscalingEnabled)
	on := make(map[projection.GroupKey]bool, len(groups))
	for _, g := range groups {
		on[g.Key] = true
	}
	a.evidence.keepLoadOf(on)
	for _, g := range groups {
		a.group(ctx, g)
	}
}

// group samples one group's shards, evaluates and acts.
func (a *autoscaler) group(ctx context.Context, g *projection.Group) {
	k := g.Key
	p := g.Autoscaling.Policy
	span := max(g.ShardCount, g.AssignableCount)
	shards := make([]int, span)
	for i := range shards {
		shards[i] = i
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	samples, err := a.sampler.Load(rctx, k.StreamPrefix, k.ConsumerGroup, shards)
	cancel()
	now := a.now()
	if err != nil {
		a.logger.Warn().Err(err).Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Msg("read autoscaling load")
	}
	load := a.evidence.addLoadSample(k, now, samples, err, time.Duration(p.EvaluationWindow)*time.Second)
	st := commands.AutoscaleState{ShardCount: g.ShardCount, CorrectionOpen: a.table.CorrectionOpen(k), LastOutAt: g.Autoscaling.LastOutAt, LastInAt: g.Autoscaling.LastInAt, LastDecision: g.Autoscaling.LastDecision}
	if m := g.Active(); m != nil {
		st.Resharding = fmt.Sprintf("resharding %s is %s", m.ReshardingID, m.State)
	} else if len(g.Barriers) > 0 {
		st.Resharding = "ordering barriers still wait"
	}
	v := commands.Evaluate(p, st, load, now)
	outcome := "hold"
	if v.Change {
		decided := &events.AutoscalingDecided{From: v.From, To: v.To, Direction: v.Direction, DryRun: p.DryRun, Reason: v.Reason, Window: load.Window.Seconds(), Rate: load.Rate, Shards: load.Shards}
		meta := events.Meta{Actor: commands.AutoscalerActor}
		if p.DryRun {
			outcome = "dry_run"
			_, err = submit(ctx, a.dec, meta, func(t *commands.Tx) (struct{}, error) { return struct{}{}, commands.RecordDryRun(t, k, decided) })
		} else {
			outcome = "applied"
			target := v.To
			_, err = a.scale(ctx, meta, k, commands.ScaleInput{TargetShardCount: &target, RequestedBy: commands.AutoscalerActor, Reason: "autoscaler: " + v.Reason, Decided: decided})
		}
		if err != nil {
			outcome = "refused"
			v.Reason = fmt.Sprintf("%s (not applied: %v)", v.Reason, err)
			a.logger.Warn().Err(err).Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Int("to", v.To).Msg("autoscaling decision")
		}
	}
	a.evidence.setEvaluation(k, commands.Evaluation{At: now, Verdict: v, Outcome: outcome, Load: load})
	if a.afterEvaluate != nil {
		a.afterEvaluate(k, v, outcome)
	}
}
