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
// the maintenance decision (expiry of members and of empty registered
// groups, rebalance timeouts, overdue correction rounds, pruning, the
// resharding steps that need no Redis), which reads nothing but the
// projection and the runtime.
type maintenance struct {
	state    *projection.State
	table    *runtimeTable
	evidence *evidenceTable
	dec      *decider
	rules    rules
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
		removed, err := submit(ctx, mt.dec, events.Meta{Actor: Actor}, func(t *tx) (bool, error) {
			return maintain(t, k), nil
		})
		if err != nil {
			mt.logger.Debug().Err(err).Str("group", k.ConsumerGroup).Msg("maintenance tick")
		}
		if removed {
			mt.evidence.dropGroup(k)
			mt.logger.Info().Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Dur("retention", mt.rules.emptyGroupRetention).Msg("empty registered group expired: removed with its consumer groups")
		}
	}
}

// maintain is the maintenance decision of one group; it reports whether it
// removed the group (an empty registered group past its retention:
// expiry.go).
func maintain(t *tx, k projection.GroupKey) bool {
	if t.group(k) == nil {
		return false
	}
	expireLapsed(t, k)
	if expireGroup(t, k) {
		return true
	}
	endOverdueRound(t, k)
	enforceRebalance(t, k)
	prune(t, k)
	reconcile(t, k)
	advance(t, k)
	return false
}

// due is a cheap scan for groups with something to do: it asks each group's
// indexes and runtime, never looks at every member.
func (mt *maintenance) due() []projection.GroupKey {
	now, timers := mt.now(), mt.now
	if mt.timers != nil {
		timers = mt.timers
	}
	at := timers()
	r := mt.rules
	mt.state.RLock()
	defer mt.state.RUnlock()
	var out []projection.GroupKey
	for _, k := range mt.state.GroupKeysLocked() {
		if mt.groupDue(mt.state.GroupLocked(k), now, at, r) {
			out = append(out, k)
		}
	}
	return out
}

// groupDue reports whether the maintenance decision of g has something to
// do: a resharding to move, an assignment to record, an overdue round, streams
// to retire, a lease that may have passed (the lease floor passed), a
// rebalance deadline, a member holding shards outside its target, or a
// terminal record past the retention.
func (mt *maintenance) groupDue(g *projection.Group, now, timers time.Time, r rules) bool {
	k := g.Key
	if g.ActiveResharding != "" || g.AssignmentEpoch != g.GroupEpoch {
		return true
	}
	if rd := mt.table.round(k); rd.open && !timers.Before(rd.openedAt.Add(r.rebalanceTimeout)) {
		return true
	}
	if n := len(g.Reshardings); n > 0 && g.Reshardings[n-1].Terminal() && !g.Reshardings[n-1].Retired {
		if lo, hi := g.Reshardings[n-1].RemovedRange(); hi > lo {
			return true
		}
	}
	if floor := mt.table.leaseFloor(k); floor.IsZero() || timers.After(floor) {
		return true
	}
	if len(mt.table.deadlineIDs(k)) > 0 || len(g.OutsideTargetIDs()) > 0 {
		return true
	}
	if r.staleRetention > 0 {
		if oldest := g.OldestTerminal(1, nil); len(oldest) > 0 && now.Sub(oldest[0].UpdatedAt) > r.staleRetention {
			return true
		}
	}
	return expiredGroup(g, now, r.emptyGroupRetention)
}

// expireLapsed expires members whose lease passed: live members, and leaving
// members that still hold shards (a crashed leaver must not block forever).
func expireLapsed(t *tx, k projection.GroupKey) {
	// No lease ends before the floor: until it passes, nobody to expire, and
	// a heartbeat in a group of thousands does not look at every lease.
	if floor := t.rt.leaseFloor(k); !floor.IsZero() && !t.timers().After(floor) {
		return
	}
	g := t.group(k)
	var expired []string
	floor := t.timers().Add(t.rules.memberLease) // every lease armed or renewed from now on ends later
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
	expire(t, k, expired, "")
}

// expire records that members expired (reason "": their lease passed) and
// reconciles the assignment: their shards become reassignable.
func expire(t *tx, k projection.GroupKey, ids []string, reason string) {
	if len(ids) == 0 {
		return
	}
	t.emitAs(Actor, k, &events.MembersExpired{MemberIDs: ids, Epochs: bump(t.group(k)), Reason: reason})
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
	var gone []string
	for _, m := range t.group(k).OldestTerminal(-1, func(m *projection.Member) bool { return t.now.Sub(m.UpdatedAt) > t.rules.staleRetention }) {
		gone = append(gone, m.ID)
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
