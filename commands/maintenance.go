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
		for m := range g.EachMember() {
			id := m.ID
			if need {
				break
			}
			switch {
			case m.CanHold():
				if mt.table.needsTick(k, id, now, r.memberLease) || g.HoldsOutsideTarget(m) {
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

// expireLapsed expires members whose lease passed: live members, and leaving
// members that still hold shards (a crashed leaver must not block forever).
func expireLapsed(t *tx, k projection.GroupKey) {
	// No lease ends before the floor: until it passes, nobody to expire, and
	// a heartbeat in a group of thousands does not look at every lease.
	if floor := t.rt.leaseFloor(k); !floor.IsZero() && !t.now.After(floor) {
		return
	}
	g := t.group(k)
	var expired []string
	floor := t.now.Add(t.rules.memberLease) // every lease armed or renewed from now on ends later
	for _, id := range g.ActiveMemberIDs() {
		lapsed, ends := t.rt.leaseLapsed(k, id, t.rules.memberLease)
		switch {
		case lapsed:
			expired = append(expired, id)
		case ends.Before(floor):
			floor = ends
		}
	}
	t.rt.setLeaseFloor(k, floor)
	if len(expired) == 0 {
		return
	}
	t.emitAs(Actor, k, &events.MembersExpired{MemberIDs: expired, Epochs: bump(g)})
	reconcile(t, k)
}

// enforceRebalance arms a deadline for members holding shards outside their
// target, fences those that miss it and forgets the deadlines of members that
// released what they had to (it visits those members and the ones with a
// deadline, not every member).
func enforceRebalance(t *tx, k projection.GroupKey) {
	g := t.group(k)
	var late []string
	for _, id := range unionSorted(g.OutsideTargetIDs(), t.rt.deadlineIDs(k)) {
		m := g.Member(id)
		if m == nil || !m.CanHold() {
			continue
		}
		if !g.HoldsOutsideTarget(m) {
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
	for m := range g.EachMember() {
		if terminalMember(m) && t.now.Sub(m.UpdatedAt) > t.rules.staleRetention {
			gone = append(gone, m.ID)
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

// unionSorted merges two sorted id lists without duplicates.
func unionSorted(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			out = append(out, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	return out
}
