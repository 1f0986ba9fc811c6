package commands

import (
	"context"
	"sort"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

var timeZero time.Time

func (c *Coordinator) ticker() {
	tk := time.NewTicker(c.cfg.TickInterval)
	defer tk.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tk.C:
			if c.ready.Load() && c.IsLeader() {
				c.Tick(context.Background())
			}
		}
	}
}

// Tick runs maintenance once: member expiry, rebalance timeouts, pruning, and
// resharding progress (provisioning, drain checks, revoke, completion,
// retirement). Simulations call it directly with a virtual clock.
func (c *Coordinator) Tick(ctx context.Context) {
	for _, k := range c.groupsNeedingTick() {
		k := k
		_, err := c.submit(ctx, events.Meta{Actor: Actor}, false, func(t *tx) (any, error) {
			if t.group(k) == nil {
				return nil, nil
			}
			t.expireLapsed(k)
			t.endOverdueRound(k)
			t.enforceRebalance(k)
			t.prune(k)
			t.reconcile(k)
			t.advance(k)
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			t.advanceWithRedis(rctx, k)
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
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	var out []projection.GroupKey
	for _, k := range c.state.GroupKeysLocked() {
		g := c.state.GroupLocked(k)
		need := g.ActiveMigration != "" || g.AssignmentEpoch != g.GroupEpoch
		if gr := c.rt.groups[k]; gr != nil && gr.correction != nil && !now.Before(gr.correction.openedAt.Add(c.cfg.RebalanceTimeout)) {
			need = true
		}
		if n := len(g.Migrations); n > 0 && g.Migrations[n-1].Terminal() && !g.Migrations[n-1].Retired {
			lo, hi := g.Migrations[n-1].RemovedRange()
			need = need || hi > lo
		}
		for id, m := range g.Members {
			if need {
				break
			}
			switch {
			case m.CanHold():
				mr := c.rt.member(k, id, now, c.cfg.MemberLease)
				if now.After(mr.leaseExpiresAt) || !mr.rebalanceDeadline.IsZero() || holdsOutsideTarget(g, m) {
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
	t.c.rt.mu.Lock()
	for _, id := range g.MemberIDs() {
		m := g.Members[id]
		if !m.Live() && !(m.State == projection.MemberLeaving && (len(m.Current) > 0 || len(m.Revoking) > 0)) {
			continue
		}
		mr := t.c.rt.member(k, id, t.now, t.c.cfg.MemberLease)
		if t.now.After(mr.leaseExpiresAt) {
			expired = append(expired, id)
			mr.rebalanceDeadline = timeZero
		}
	}
	t.c.rt.mu.Unlock()
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
	t.c.rt.mu.Lock()
	for _, id := range g.MemberIDs() {
		m := g.Members[id]
		if !m.CanHold() {
			continue
		}
		mr := t.c.rt.member(k, id, t.now, t.c.cfg.MemberLease)
		if !holdsOutsideTarget(g, m) {
			mr.rebalanceDeadline = timeZero
			continue
		}
		if mr.rebalanceDeadline.IsZero() {
			mr.rebalanceDeadline = t.now.Add(t.c.cfg.RebalanceTimeout)
		} else if !t.now.Before(mr.rebalanceDeadline) {
			late = append(late, id)
		}
	}
	t.c.rt.mu.Unlock()
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
	t.c.rt.mu.Lock()
	if gr := t.c.rt.groups[k]; gr != nil {
		for _, id := range gone {
			delete(gr.members, id)
		}
	}
	t.c.rt.mu.Unlock()
}
