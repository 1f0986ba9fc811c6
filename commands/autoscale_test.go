package commands_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

func testPolicy() events.AutoscalingConfigured {
	return events.AutoscalingConfigured{
		Enabled: true, MinShards: 2, MaxShards: 32, TargetRate: 100,
		ScaleOutCooldown: 60, ScaleInCooldown: 300, EvaluationWindow: 30, MaxStepFactor: 2,
	}
}

func fullLoad(rate float64) commands.Load {
	return commands.Load{Complete: true, Window: 30 * time.Second, Rate: rate}
}

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// TestEvaluateCases pins each rule of the policy: the count it recommends
// and every reason it holds.
func TestEvaluateCases(t *testing.T) {
	p := testPolicy()
	idle := commands.AutoscaleState{ShardCount: 4}
	cases := []struct {
		name   string
		p      func(*events.AutoscalingConfigured)
		st     func(*commands.AutoscaleState)
		load   commands.Load
		change bool
		to     int
		reason string
	}{
		{name: "within the target", load: fullLoad(400), to: 4, reason: "load within the target"},
		{name: "10% margin not reached", load: fullLoad(439), to: 4, reason: "load within the target"},
		{name: "scale out to the smallest count", load: fullLoad(590), change: true, to: 6},
		{name: "scale out limited to one step (x2)", load: fullLoad(5000), change: true, to: 8},
		{name: "scale out limited by maxShards", p: func(p *events.AutoscalingConfigured) { p.MaxShards = 5 }, load: fullLoad(5000), change: true, to: 5},
		{name: "at maxShards holds", p: func(p *events.AutoscalingConfigured) { p.MaxShards = 4 }, load: fullLoad(5000), to: 4, reason: "at maxShards"},
		{name: "scale in at 75% fill", load: fullLoad(140), change: true, to: 2},
		{name: "scale in limited to one step (/2)", st: func(s *commands.AutoscaleState) { s.ShardCount = 16 }, load: fullLoad(10), change: true, to: 8},
		{name: "scale in limited by minShards", load: fullLoad(0), change: true, to: 2},
		{name: "at minShards holds", st: func(s *commands.AutoscaleState) { s.ShardCount = 2 }, load: fullLoad(0), to: 2, reason: "at minShards"},
		{name: "hysteresis: 76% of the smaller count holds", load: fullLoad(230), to: 4, reason: "load within the target"},
		{name: "below minShards", st: func(s *commands.AutoscaleState) { s.ShardCount = 1 }, load: fullLoad(0), change: true, to: 2},
		{name: "above maxShards", st: func(s *commands.AutoscaleState) { s.ShardCount = 40 }, load: fullLoad(10000), change: true, to: 32},
		{name: "lag alone scales one step out", p: func(p *events.AutoscalingConfigured) { p.MaxLagSeconds = 10 },
			load: commands.Load{Complete: true, Window: 30 * time.Second, Rate: 100, MaxLagSecs: 11}, change: true, to: 8},
		{name: "lag above half the limit stops a scale-in", p: func(p *events.AutoscalingConfigured) { p.MaxLagSeconds = 10 },
			load: commands.Load{Complete: true, Window: 30 * time.Second, Rate: 10, MaxLagSecs: 6}, to: 4, reason: "load within the target"},
		{name: "off", p: func(p *events.AutoscalingConfigured) { p.Enabled = false }, load: fullLoad(5000), to: 4, reason: "autoscaling is off"},
		{name: "measuring", load: commands.Load{Window: 10 * time.Second, Rate: 5000}, to: 4, reason: "measuring"},
		{name: "Redis unreadable", load: commands.Load{Complete: true, Window: 30 * time.Second, Rate: 5000, Unreadable: "Redis could not be read: EOF"}, to: 4, reason: "no load evidence"},
		{name: "resharding active", st: func(s *commands.AutoscaleState) { s.Resharding = "resharding r1 is ACTIVE" }, load: fullLoad(5000), to: 4, reason: "resharding r1 is ACTIVE"},
		{name: "correction open", st: func(s *commands.AutoscaleState) { s.CorrectionOpen = true }, load: fullLoad(5000), to: 4, reason: "metadata correction"},
		{name: "scale-out cooldown", st: func(s *commands.AutoscaleState) { s.LastOutAt = t0.Add(-59 * time.Second) }, load: fullLoad(5000), to: 4, reason: "scale-out cooldown lasts until"},
		{name: "scale-out cooldown over", st: func(s *commands.AutoscaleState) { s.LastOutAt = t0.Add(-60 * time.Second) }, load: fullLoad(5000), change: true, to: 8},
		{name: "scale-in cooldown", st: func(s *commands.AutoscaleState) { s.LastInAt = t0.Add(-299 * time.Second) }, load: fullLoad(0), to: 4, reason: "scale-in cooldown"},
		{name: "one change per window", p: func(p *events.AutoscalingConfigured) { p.ScaleInCooldown = 1 },
			st: func(s *commands.AutoscaleState) {
				s.LastOutAt = t0.Add(-100 * time.Second)
				s.LastInAt = t0.Add(-29 * time.Second)
			}, load: fullLoad(5000), to: 4, reason: "less than a window ago"},
		{name: "dry run records", p: func(p *events.AutoscalingConfigured) { p.DryRun = true }, load: fullLoad(5000), change: true, to: 8, reason: "dry run"},
		{name: "dry run does not repeat itself", p: func(p *events.AutoscalingConfigured) { p.DryRun = true },
			st: func(s *commands.AutoscaleState) {
				s.LastDecision = &projection.AutoscaleDecision{At: t0.Add(-10 * time.Second), Decided: events.AutoscalingDecided{From: 4, To: 8, DryRun: true}}
			}, load: fullLoad(5000), to: 4, reason: "cooldown"},
		{name: "dry run paces scale-ins too", p: func(p *events.AutoscalingConfigured) { p.DryRun = true },
			st: func(s *commands.AutoscaleState) {
				s.LastDecision = &projection.AutoscaleDecision{At: t0.Add(-10 * time.Second), Decided: events.AutoscalingDecided{From: 4, To: 8, Direction: events.ScaleOut, DryRun: true}}
			}, load: fullLoad(0), to: 4, reason: "less than a window ago"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pp, st := p, idle
			if c.p != nil {
				c.p(&pp)
			}
			if c.st != nil {
				c.st(&st)
			}
			v := commands.Evaluate(pp, st, c.load, t0)
			if v.Change != c.change || (c.change && v.To != c.to) || (!c.change && v.To != st.ShardCount) {
				t.Fatalf("Evaluate = %+v, want change %v to %d", v, c.change, c.to)
			}
			if !strings.Contains(v.Reason, c.reason) {
				t.Fatalf("reason %q, want it to contain %q", v.Reason, c.reason)
			}
			if !c.change && c.reason == "" {
				t.Fatal("a hold needs an expected reason")
			}
		})
	}
}

// TestEvaluateProperties runs the policy over random load traces (a second a
// step, reshardings taking effect at once) and checks: the count never
// leaves [min, max]; two changes in one direction are a cooldown apart and
// any two a window apart; under a constant load it moves in one direction
// only and settles on a count that takes the load (within 10% of the
// target, or maxShards), where it stays.
func TestEvaluateProperties(t *testing.T) {
	seeds := 300
	if testing.Short() {
		seeds = 60
	}
	for seed := 0; seed < seeds; seed++ {
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		p := events.AutoscalingConfigured{
			Enabled: true, MinShards: 1 + r.IntN(4), TargetRate: float64(10 + r.IntN(1000)),
			ScaleOutCooldown: 1 + r.IntN(120), ScaleInCooldown: 1 + r.IntN(600), EvaluationWindow: 1 + r.IntN(60),
			MaxStepFactor: 1.2 + r.Float64()*3,
		}
		p.MaxShards = p.MinShards + r.IntN(60)
		st := commands.AutoscaleState{ShardCount: p.MinShards + r.IntN(p.MaxShards-p.MinShards+1)}
		now := t0
		var lastChange time.Time
		rate := r.Float64() * p.TargetRate * float64(p.MaxShards) * 1.5
		constantFrom := 2000 // the load stops moving here
		steps := constantFrom + 3*(p.ScaleInCooldown+p.ScaleOutCooldown+p.EvaluationWindow)*int(math.Log2(float64(p.MaxShards))+2)
		settleDir := "" // the direction of changes under the constant load
		for i := 0; i < steps; i++ {
			now = now.Add(time.Second)
			if i < constantFrom && r.IntN(50) == 0 {
				rate = r.Float64() * p.TargetRate * float64(p.MaxShards) * 1.5
			}
			v := commands.Evaluate(p, st, commands.Load{Complete: true, Window: time.Duration(p.EvaluationWindow) * time.Second, Rate: rate}, now)
			if !v.Change {
				continue
			}
			if v.To < p.MinShards || v.To > p.MaxShards {
				t.Fatalf("seed %d: %d -> %d outside [%d, %d]", seed, v.From, v.To, p.MinShards, p.MaxShards)
			}
			last, cooldown := st.LastOutAt, p.ScaleOutCooldown
			if v.Direction == events.ScaleIn {
				last, cooldown = st.LastInAt, p.ScaleInCooldown
			}
			if !last.IsZero() && now.Sub(last) < time.Duration(cooldown)*time.Second {
				t.Fatalf("seed %d: %s change %v after the last one in that direction (cooldown %ds)", seed, v.Direction, now.Sub(last), cooldown)
			}
			if !lastChange.IsZero() && now.Sub(lastChange) < time.Duration(p.EvaluationWindow)*time.Second {
				t.Fatalf("seed %d: two changes %v apart (window %ds)", seed, now.Sub(lastChange), p.EvaluationWindow)
			}
			if i >= constantFrom {
				if settleDir != "" && settleDir != v.Direction {
					t.Fatalf("seed %d: flaps under a constant %.0f entries/s: %s then %s (%d -> %d: %s)", seed, rate, settleDir, v.Direction, v.From, v.To, v.Reason)
				}
				settleDir = v.Direction
			}
			if v.Direction == events.ScaleIn {
				st.LastInAt = now
			} else {
				st.LastOutAt = now
			}
			lastChange = now
			st.ShardCount = v.To
		}
		// Settled: the count takes the load, or is at a bound.
		n := st.ShardCount
		takes := rate <= float64(n)*p.TargetRate*1.1+1e-9
		if !(takes || n == p.MaxShards) {
			t.Fatalf("seed %d: ended at %d shards for %.0f entries/s (target %g, max %d)", seed, n, rate, p.TargetRate, p.MaxShards)
		}
		if v := commands.Evaluate(p, st, commands.Load{Complete: true, Window: time.Duration(p.EvaluationWindow) * time.Second, Rate: rate}, now.Add(24*time.Hour)); v.Change {
			t.Fatalf("seed %d: did not converge: at %d shards for %.0f entries/s it still wants %d (%s)", seed, n, rate, v.To, v.Reason)
		}
	}
}
