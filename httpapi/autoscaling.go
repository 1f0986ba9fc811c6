package httpapi

import (
	"github.com/rscoord/rsc/httpapi/guard"
	"net/http"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// On-demand groups: a group's autoscaling policy, the load the leader's
// autoscaler sees and what it decided (commands/autoscale.go).

// autoscalingAPI serves a group's autoscaling policy and the autoscaler's
// latest evaluation.
type autoscalingAPI struct {
	kit
	dec Commands
	// rt is the leader's memory, read when fwd.ToLeader did not relay.
	rt    Runtime
	fwd   *guard.Forwarder
	limit *guard.RateLimiter
}

func (s *Server) registerAutoscalingRoutes(h *autoscalingAPI) {
	r := s.router
	r.HandleFunc(groupPath+"/autoscaling", h.handleGetAutoscaling).Methods(http.MethodGet)
	r.HandleFunc(groupPath+"/autoscaling", h.handleSetAutoscaling).Methods(http.MethodPut)
	r.HandleFunc(groupPath+"/autoscaling", h.handleDeleteAutoscaling).Methods(http.MethodDelete)
}

// handleSetAutoscaling serves PUT .../groups/{consumerGroup}/autoscaling.
func (h *autoscalingAPI) handleSetAutoscaling(w http.ResponseWriter, r *http.Request) {
	groupMutation(&h.kit, h.limit, w, r, http.StatusOK, func(k projection.GroupKey, req *wire.AutoscalingRequest) (any, error) {
		_, err := h.dec.SetAutoscaling(r.Context(), meta(r), k, commands.AutoscalingInput{
			Enabled: req.Enabled, MinShards: req.MinShards, MaxShards: req.MaxShards, TargetRate: req.TargetEntriesPerSecondPerShard,
			MaxLagSeconds: req.MaxLagSecondsPerShard, ScaleOutCooldown: req.ScaleOutCooldownSeconds, ScaleInCooldown: req.ScaleInCooldownSeconds,
			EvaluationWindow: req.EvaluationWindowSeconds, MaxStepFactor: req.MaxStepFactor, DryRun: req.DryRun,
			RequestedBy: req.RequestedBy, Reason: req.Reason,
		})
		if err != nil {
			return nil, err
		}
		return h.autoscalingBody(k, h.rt), nil
	})
}

// handleDeleteAutoscaling serves DELETE .../groups/{consumerGroup}/autoscaling:
// autoscaling off (the body, optional, names who and why; requestedBy
// defaults to the caller).
func (h *autoscalingAPI) handleDeleteAutoscaling(w http.ResponseWriter, r *http.Request) {
	k, ok := h.groupKey(w, r)
	if !ok {
		return
	}
	var req wire.AutoscalingDeleteRequest
	if !h.admit(h.limit, w, r, &req, false) {
		return
	}
	if req.RequestedBy == "" {
		req.RequestedBy = meta(r).Actor
	}
	if _, err := h.dec.DisableAutoscaling(r.Context(), meta(r), k, req.RequestedBy, req.Reason); err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, h.autoscalingBody(k, h.rt))
}

// handleGetAutoscaling serves GET .../groups/{consumerGroup}/autoscaling: the
// policy, and the leader's latest evaluation (a follower asks the leader).
func (h *autoscalingAPI) handleGetAutoscaling(w http.ResponseWriter, r *http.Request) {
	g, ok := h.leaderGroup(h.fwd, w, r)
	if !ok {
		return
	}
	rt := h.rt
	writeJSON(w, http.StatusOK, h.autoscalingBody(g.Key, rt))
}

// autoscalingBody renders a group's autoscaling from the projection and the
// runtime's latest evaluation.
func (h *autoscalingAPI) autoscalingBody(k projection.GroupKey, rt Runtime) wire.AutoscalingResponse {
	out := wire.AutoscalingResponse{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup}
	g, ok := h.read.State().Group(k)
	if !ok {
		return out
	}
	out.ShardCount = g.ShardCount
	if a := g.Autoscaling; a != nil {
		p := a.Policy
		out.Policy = &wire.AutoscalingPolicy{
			Enabled: p.Enabled, MinShards: p.MinShards, MaxShards: p.MaxShards, TargetEntriesPerSecondPerShard: p.TargetRate,
			ScaleOutCooldownSeconds: p.ScaleOutCooldown, ScaleInCooldownSeconds: p.ScaleInCooldown, EvaluationWindowSeconds: p.EvaluationWindow,
			MaxStepFactor: p.MaxStepFactor, DryRun: p.DryRun, RequestedBy: p.RequestedBy, Reason: p.Reason, ConfiguredAt: a.ConfiguredAt.UTC(),
		}
		if p.MaxLagSeconds > 0 {
			lag := p.MaxLagSeconds
			out.Policy.MaxLagSecondsPerShard = &lag
		}
		if d := a.LastDecision; d != nil {
			out.LastChange = recordedDecision(d)
		}
	}
	if ev, ok := rt.LastEvaluation(k); ok && g.Autoscaling.Enabled() {
		out.Load = loadBody(ev.Load)
		v := ev.Verdict
		dec := &wire.AutoscalingDecision{At: ev.At.UTC(), From: v.From, To: v.To, Reason: v.Reason, Outcome: "HOLD",
			Evidence: &wire.Evidence{WindowSeconds: ev.Load.Window.Seconds(), EntriesPerSecond: ev.Load.Rate, Shards: shardLoads(ev.Load.Shards)}}
		switch {
		case ev.Outcome == "refused":
			dec.Outcome = "REFUSED"
		case ev.Outcome == "dry_run":
			dec.Outcome = "DRY_RUN"
		case v.Change && v.Direction == events.ScaleIn:
			dec.Outcome = "SCALE_IN"
		case v.Change:
			dec.Outcome = "SCALE_OUT"
		}
		if c := out.LastChange; c != nil && v.Change && c.At.Equal(ev.At) {
			dec.ReshardingID, dec.EventID = c.ReshardingID, c.EventID
		}
		out.LastDecision = dec
		out.Recommendation = &wire.Recommendation{ShardCount: v.Recommended, Reason: v.Reason}
	} else if out.LastChange != nil {
		out.LastDecision = out.LastChange
	}
	return out
}

// recordedDecision is an autoscaling.decided as the API shows it.
func recordedDecision(d *projection.AutoscaleDecision) *wire.AutoscalingDecision {
	e := d.Decided
	out := &wire.AutoscalingDecision{At: d.At.UTC(), From: e.From, To: e.To, Reason: e.Reason, Outcome: "SCALE_OUT",
		Evidence: &wire.Evidence{WindowSeconds: e.Window, EntriesPerSecond: e.Rate, Shards: shardLoads(e.Shards)}}
	switch {
	case e.DryRun:
		out.Outcome = "DRY_RUN"
	case e.Direction == events.ScaleIn:
		out.Outcome = "SCALE_IN"
	}
	out.ReshardingID, out.EventID = nonEmpty(e.ReshardingID), nonEmpty(d.EventID)
	return out
}

func loadBody(l commands.Load) *wire.AutoscalingLoad {
	out := &wire.AutoscalingLoad{MeasuredAt: l.MeasuredAt.UTC(), WindowSeconds: l.Window.Seconds(), Complete: l.Complete,
		EntriesPerSecond: l.Rate, MaxLagSeconds: l.MaxLagSecs, Shards: shardLoads(l.Shards)}
	if l.Lag >= 0 {
		lag := l.Lag
		out.Lag = &lag
	}
	if l.Unreadable != "" {
		msg := "Redis could not be read at the last sample"
		out.Error = &msg
	}
	return out
}

func shardLoads(ls []events.ShardLoad) []wire.ShardLoad {
	out := make([]wire.ShardLoad, 0, len(ls))
	for _, x := range ls {
		sl := wire.ShardLoad{Shard: wire.ShardRef{ShardIndex: x.ShardIndex}, EntriesPerSecond: x.Rate, LagSeconds: x.LagSeconds}
		if x.Lag >= 0 {
			lag := x.Lag
			sl.Lag = &lag
		}
		out = append(out, sl)
	}
	return out
}
