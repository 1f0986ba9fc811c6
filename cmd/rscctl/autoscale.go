package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/rscoord/rsc/wire"
)

// setupAutoscale: rscctl autoscale <prefix> <group> shows the group's
// autoscaling (GET .../autoscaling); with --min/--max/--target (and the
// optional policy flags) it sets the policy (PUT), with --off it turns it off
// (DELETE).
func setupAutoscale(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	minShards := fs.Int("min", 0, "minShards (setting a policy needs --min, --max and --target)")
	maxShards := fs.Int("max", 0, "maxShards (at most the coordinator's --max-shard-count)")
	target := fs.Float64("target", 0, "targetEntriesPerSecondPerShard")
	maxLag := fs.Float64("max-lag", 0, "maxLagSecondsPerShard: scale out when a shard's oldest unread entry is older (0: none)")
	window := fs.Int("window", 0, "evaluationWindowSeconds (default 60)")
	outCooldown := fs.Int("out-cooldown", 0, "scaleOutCooldownSeconds (default 60)")
	inCooldown := fs.Int("in-cooldown", 0, "scaleInCooldownSeconds (default 300)")
	step := fs.Float64("step", 0, "maxStepFactor (default 2: at most double or halve per step)")
	dryRun := fs.Bool("dry-run", false, "record recommendations without acting on them")
	off := fs.Bool("off", false, "turn autoscaling off")
	requestedBy := fs.String("requested-by", defaultActor(), "audit identity recorded with the request")
	reason := fs.String("reason", "", "audit text recorded with the request")
	return func(ctx context.Context, args []string) error {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		p, g := args[0], args[1]
		var resp *wire.AutoscalingResponse
		var data []byte
		var err error
		switch {
		case *off:
			del := wire.AutoscalingDeleteRequest{RequestedBy: *requestedBy, Reason: *reason}
			resp, data, err = call(ctx, a, func(ctx context.Context) (*wire.AutoscalingResponse, error) {
				return a.c.DisableAutoscaling(ctx, p, g, del)
			})
		case set["min"] || set["max"] || set["target"]:
			req := wire.AutoscalingRequest{MinShards: minShards, MaxShards: maxShards, TargetEntriesPerSecondPerShard: target, DryRun: dryRun, RequestedBy: *requestedBy, Reason: *reason}
			if !set["min"] || !set["max"] || !set["target"] {
				return usageErrorf("setting a policy needs --min, --max and --target")
			}
			if set["max-lag"] {
				req.MaxLagSecondsPerShard = maxLag
			}
			if set["window"] {
				req.EvaluationWindowSeconds = window
			}
			if set["out-cooldown"] {
				req.ScaleOutCooldownSeconds = outCooldown
			}
			if set["in-cooldown"] {
				req.ScaleInCooldownSeconds = inCooldown
			}
			if set["step"] {
				req.MaxStepFactor = step
			}
			resp, data, err = call(ctx, a, func(ctx context.Context) (*wire.AutoscalingResponse, error) {
				return a.c.SetAutoscaling(ctx, p, g, req)
			})
		default:
			resp, data, err = call(ctx, a, func(ctx context.Context) (*wire.AutoscalingResponse, error) { return a.c.Autoscaling(ctx, p, g) })
		}
		if err != nil {
			return err
		}
		if a.g.output == "json" {
			return printJSON(a.stdout, data)
		}
		return printAutoscaling(a, *resp)
	}
}

func printAutoscaling(a *app, r wire.AutoscalingResponse) error {
	kv := newTable(a.stdout, "GROUP", r.StreamPrefix+" / "+r.ConsumerGroup)
	kv.row("SHARDS", strconv.Itoa(r.ShardCount))
	if p := r.Policy; p == nil {
		kv.row("AUTOSCALING", "never configured")
	} else {
		state := "on"
		switch {
		case !p.Enabled:
			state = "off"
		case p.DryRun:
			state = "on (dry run: recommends, does not act)"
		}
		kv.row("AUTOSCALING", state)
		lag := "none"
		if p.MaxLagSecondsPerShard != nil {
			lag = fmt.Sprintf("%gs", *p.MaxLagSecondsPerShard)
		}
		kv.row("  POLICY", fmt.Sprintf("%d..%d shards, target %g entries/s per shard, max lag %s, window %ds, cooldowns out %ds / in %ds, step x%g",
			p.MinShards, p.MaxShards, p.TargetEntriesPerSecondPerShard, lag, p.EvaluationWindowSeconds, p.ScaleOutCooldownSeconds, p.ScaleInCooldownSeconds, p.MaxStepFactor))
		kv.row("  SET", fmt.Sprintf("by %s at %s: %s", p.RequestedBy, formatTime(p.ConfiguredAt), p.Reason))
	}
	if l := r.Load; l != nil {
		lag := "unknown"
		if l.Lag != nil {
			lag = strconv.FormatInt(*l.Lag, 10)
		}
		complete := ""
		if !l.Complete {
			complete = " (window not complete yet)"
		}
		kv.row("LOAD", fmt.Sprintf("%.1f entries/s over %.0fs%s, lag %s entries, oldest unread %.1fs", l.EntriesPerSecond, l.WindowSeconds, complete, lag, l.MaxLagSeconds))
	}
	if rec := r.Recommendation; rec != nil {
		kv.row("RECOMMENDS", fmt.Sprintf("%d shards", rec.ShardCount))
	}
	if d := r.LastDecision; d != nil {
		kv.row("LAST DECISION", fmt.Sprintf("%s %d -> %d at %s: %s", d.Outcome, d.From, d.To, formatTime(d.At), d.Reason))
	}
	if d := r.LastChange; d != nil {
		id := "-"
		if d.ReshardingID != nil {
			id = *d.ReshardingID
		}
		kv.row("LAST CHANGE", fmt.Sprintf("%s %d -> %d at %s (resharding %s): %s", d.Outcome, d.From, d.To, formatTime(d.At), id, d.Reason))
	}
	return kv.flush()
}
