package commands

import (
	"context"
	"sort"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Tick runs maintenance once and then one reconciler pass: member expiry,
// rebalance timeouts, overdue correction rounds, pruning, and the steps of a
// resharding that need no Redis; then resharding progress from Redis evidence
// (provisioning, drain checks, completion, retirement). A running coordinator
// does the two in separate loops, so a slow Redis never delays expiry;
// simulations call Tick with a virtual clock.
func (c *Coordinator) Tick(ctx context.Context) {
	c.maintain(ctx)
	c.rec.proveBarriers(ctx)
	c.rec.pass(ctx)
}

// maintain submits, for every group with something to do, the maintenance
// decision: it reads nothing but the projection and the runtime.
func (c *Coordinator) maintain(ctx context.Context) {
	for _, k := range c.groupsNeedingTick() {
		k := k
		_, err := c.submit(ctx, events.Meta{Actor: Actor}, func(t *tx) (any, error) {
			if t.group(k) == nil {
				return nil, nil
			}
			t.expireLapsed(k)
			t.endOverdueRound(k)
			t.enforceRebalance(k)
			t.prune(k)
			t.reconcile(k)
			t.advance(k)
			return nil, nil
		})
		if err != nil {
			c.cfg.Logger.Debug().Err(err).Str("group", k.ConsumerGroup).Msg("maintenance tick")
		}
	}
}

// groupsNeedingTick is a cheap scan for groups with something to do.
func (c *Coordinator) groupsNeedingTick() []projection.GroupKey {
	now := c.now()
	c.state.RLock()
	defer c.state.RUnlock()
	var out []projection.GroupKey
	for _, k := range c.state.GroupKeysLocked() {
		g := c.state.GroupLocked(k)
		need := g.ActiveResharding != "" || g.AssignmentEpoch != g.GroupEpoch
		if r := c.rt.round(k); r.open && !now.Before(r.openedAt.Add(c.cfg.RebalanceTimeout)) {
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
				if c.rt.needsTick(k, id, now, c.cfg.MemberLease) || holdsOutsideTarget(g, m) {
					need = true
				}
				if m.State == projection.MemberLeaving && len(m.Current) == 0 && len(m.Revoking) == 0 && c.cfg.StaleMemberRetention > 0 {
					need = need || now.Sub(m.UpdatedAt) > c.cfg.StaleMemberRetention
				}
			default:
				if c.cfg.StaleMemberRetention > 0 && now.Sub(m.UpdatedAt) > c.cfg.StaleMemberRetention {
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
func (t *tx) expireLapsed(k projection.GroupKey) {
	g := t.group(k)
	var expired []string
	for _, id := range g.MemberIDs() {
		m := g.Members[id]
		if !m.Live() && !(m.State == projection.MemberLeaving && (len(m.Current) > 0 || len(m.Revoking) > 0)) {
			continue
		}
		if t.c.rt.leaseLapsed(k, id, t.now, t.c.cfg.MemberLease) {
			expired = append(expired, id)
		}
	}
	if len(expired) == 0 {
		return
	}
	t.emitAs(Actor, k, &events.MembersExpired{MemberIDs: expired, Epochs: bump(g)})
	t.reconcile(k)
}

// enforceRebalance arms a deadline for members holding shards outside their
// target and fences those that miss it.
func (t *tx) enforceRebalance(k projection.GroupKey) {
	g := t.group(k)
	var late []string
	for _, id := range g.MemberIDs() {
		m := g.Members[id]
		if !m.CanHold() {
			continue
		}
		if !holdsOutsideTarget(g, m) {
			t.c.rt.clearDeadline(k, id)
			continue
		}
		if t.c.rt.rebalanceDue(k, id, t.now, t.c.cfg.MemberLease, t.c.cfg.RebalanceTimeout) {
			late = append(late, id)
		}
	}
	for _, id := range late {
		t.fence(k, id, "did not release revoked shards within the rebalance timeout")
	}
}

// prune removes terminal members after the retention period.
func (t *tx) prune(k projection.GroupKey) {
	if t.c.cfg.StaleMemberRetention <= 0 {
		return
	}
	g := t.group(k)
	var gone []string
	for id, m := range g.Members {
		if terminalMember(m) && t.now.Sub(m.UpdatedAt) > t.c.cfg.StaleMemberRetention {
			gone = append(gone, id)
		}
	}
	t.pruneMembers(k, gone)
}

// pruneMembers removes member records (and their runtime).
func (t *tx) pruneMembers(k projection.GroupKey, gone []string) {
	if len(gone) == 0 {
		return
	}
	g := t.group(k)
	sort.Strings(gone)
	t.emitAs(Actor, k, &events.MembersPruned{MemberIDs: gone, MetadataVersion: g.MetadataVersion + 1})
	t.c.rt.dropMembers(k, gone)
}
