package projection

import (
	"github.com/rscoord/rsc/events"
)

// How autoscaling records change a group.

func init() {
	register(autoscalingConfigured)
	register(autoscalingDisabled)
	register(autoscalingDecided)
}

// autoscalingOf is a copy of the group's autoscaling (a clone shares it).
func autoscalingOf(g *Group) Autoscaling {
	if g.Autoscaling != nil {
		return *g.Autoscaling
	}
	return Autoscaling{}
}

func autoscalingConfigured(g *Group, rec events.Record, ev *events.AutoscalingConfigured) {
	a := autoscalingOf(g)
	a.Policy, a.ConfiguredAt = *ev, rec.Time
	g.Autoscaling = &a
}

func autoscalingDisabled(g *Group, rec events.Record, ev *events.AutoscalingDisabled) {
	if g.Autoscaling == nil {
		return
	}
	a := autoscalingOf(g)
	a.Policy.Enabled = false
	a.Policy.RequestedBy, a.Policy.Reason = ev.RequestedBy, ev.Reason
	a.ConfiguredAt = rec.Time
	g.Autoscaling = &a
}

func autoscalingDecided(g *Group, rec events.Record, ev *events.AutoscalingDecided) {
	a := autoscalingOf(g)
	a.LastDecision = &AutoscaleDecision{At: rec.Time, EventID: rec.ID, Decided: *ev}
	if !ev.DryRun {
		if ev.Direction == events.ScaleIn {
			a.LastInAt = rec.Time
		} else {
			a.LastOutAt = rec.Time
		}
	}
	g.Autoscaling = &a
}
