package commands

import (
	"context"
	"sort"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// maintenance is the tick: for every group with something to do it submits
// the maintenance decision (expiry, rebalance timeouts, overdue correction
// rounds, pruning, the resharding steps that need no Redis), which reads
// nothing but the projection and the runtime.
type maintenance struct {
	state  *projection.State
	table  *runtimeTable
	dec    *decider
	rules  rules
	now    func() time.Time
	logger zerolog.Logger
}

// run submits the maintenance decision of every group that needs one.
func (mt *maintenance) run(ctx context.Context) {
	for _, k := range mt.due() {
		k := k
		_, err := submit(ctx, mt.dec, events.Meta{Actor: Actor}, func(t *tx) (struct{}, error) {
			maintain(t, k)
			return struct{}{}, nil
		})
		if err != nil {
			mt.logger.Debug().Err(err).Str("group", k.ConsumerGroup).Msg("maintenance tick")
		}
	}
}

// maintain is the maintenance decision of one group.
func maintain(t *tx, k projection.GroupKey) {
	if t.group(k) == nil {
		return
	}
	expireLapsed(t, k)
	endOverdueRound(t, k)
	enforceRebalance(t, k)
	prune(t, k)
	reconcile(t, k)
	advance(t, k)
}

// due is a cheap scan for groups with something to do.
func (mt *maintenance) due() []projection.GroupKey {
	now := mt.now()
	r := mt.rules
	mt.state.RLock()
	defer mt.state.RUnlock()
	var out []projection.GroupKey
	for _, k := range mt.state.GroupKeysLocked() {
		g := mt.state.GroupLocked(k)
		need := g.ActiveResharding != "" || g.AssignmentEpoch != g.GroupEpoch
		if rd := mt.table.round(k); rd.open && !now.Before(rd.openedAt.Add(r.rebalanceTimeout)) {
			need = true
		}
		if n := len(g.Reshardings); n > 0 && g.Reshardings[n-1].Terminal() && !g.Reshardings[n-1].Retired {
			lo, hi := g.Reshardings[n-1].RemovedRange()
			need = need || hi > lo
		}
		for id, m := range g.Members {
			if need {
				break
			}
			switch {
			case m.CanHold():
				if mt.table.needsTick(k, id, now, r.memberLease) || holdsOutsideTarget(g, m) {
					need = true
				}
				if m.State == projection.MemberLeaving && len(m.Current) == 0 && len(m.Revoking) == 0 && r.staleRetention > 0 {
					need = need || now.Sub(m.UpdatedAt) > r.staleRetention
				}
			default:
				if r.staleRetention > 0 && now.Sub(m.UpdatedAt) > r.staleRetention {
					need = true
				}
			}
		}
		if need {
			out = append(out, k)
		}
	}
	return out
}

func holdsOutsideTarget(g *projection.Group, m *projection.Member) bool {
	target := g.Target(m.ID)
	for _, set := range [][]int{m.Current, m.Revoking} {
		for _, s := range set {
			if !containsInt(target, s) {
				return true
			}
		}
	}
	return false
}

// expireLapsed expires members whose lease passed: live members, and leaving
// members that still hold shards (a crashed leaver must not block forever).
func expireLapsed(t *tx, k projection.GroupKey) {
	g := t.group(k)
	var expired []string
	for _, id := range g.MemberIDs() {
		m := g.Members[id]
		if !m.Live() && !(m.State == projection.MemberLeaving && (len(m.Current) > 0 || len(m.Revoking) > 0)) {
			continue
		}
		if t.rt.leaseLapsed(k, id, t.rules.memberLease) {
			expired = append(expired, id)
		}
	}
	if len(expired) == 0 {
		return
	}
	t.emitAs(Actor, k, &events.MembersExpired{MemberIDs: expired, Epochs: bump(g)})
	reconcile(t, k)
}

// enforceRebalance arms a deadline for members holding shards outside their
// target and fences those that miss it.
func enforceRebalance(t *tx, k projection.GroupKey) {
	g := t.group(k)
	var late []string
	for _, id := range g.MemberIDs() {
		m := g.Members[id]
		if !m.CanHold() {
			continue
		}
		if !holdsOutsideTarget(g, m) {
			t.rt.clearDeadline(k, id)
			continue
		}
		if t.rt.rebalanceDue(k, id, t.rules.memberLease, t.rules.rebalanceTimeout) {
			late = append(late, id)
		}
	}
	for _, id := range late {
		fence(t, k, id, "did not release revoked shards within the rebalance timeout")
	}
}

// prune removes terminal members after the retention period.
func prune(t *tx, k projection.GroupKey) {
	if t.rules.staleRetention <= 0 {
		return
	}
	g := t.group(k)
	var gone []string
	for id, m := range g.Members {
		if terminalMember(m) && t.now.Sub(m.UpdatedAt) > t.rules.staleRetention {
			gone = append(gone, id)
		}
	}
	pruneMembers(t, k, gone)
}

// pruneMembers removes member records (and their runtime).
func pruneMembers(t *tx, k projection.GroupKey, gone []string) {
	if len(gone) == 0 {
		return
	}
	g := t.group(k)
	sort.Strings(gone)
	t.emitAs(Actor, k, &events.MembersPruned{MemberIDs: gone, MetadataVersion: g.MetadataVersion + 1})
	t.rt.dropMembers(k, gone)
}
