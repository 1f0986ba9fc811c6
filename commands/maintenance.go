package commands

import (
	"sort"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// maintain is the maintenance decision of one group; it reports whether it
// removed the group (an empty registered group past its retention:
// expiry.go).
func Maintain(t *Tx, k projection.GroupKey) bool {
	if t.Group(k) == nil {
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

// expireLapsed expires members whose lease passed: live members, and leaving
// members that still hold shards (a crashed leaver must not block forever).
func expireLapsed(t *Tx, k projection.GroupKey) {
	// No lease ends before the floor: until it passes, nobody to expire, and
	// a heartbeat in a group of thousands does not look at every lease.
	if floor := t.RT.leaseFloor(k); !floor.IsZero() && !t.timers().After(floor) {
		return
	}
	g := t.Group(k)
	var expired []string
	floor := t.timers().Add(t.Rules.MemberLease) // every lease armed or renewed from now on ends later
	for _, id := range g.ActiveMemberIDs() {
		lapsed, ends := t.RT.leaseLapsed(k, id, t.Rules.MemberLease)
		switch {
		case lapsed:
			expired = append(expired, id)
		case ends.Before(floor):
			floor = ends
		}
	}
	t.RT.setLeaseFloor(k, floor)
	expire(t, k, expired, "")
}

// expire records that members expired (reason "": their lease passed) and
// reconciles the assignment: their shards become reassignable.
func expire(t *Tx, k projection.GroupKey, ids []string, reason string) {
	if len(ids) == 0 {
		return
	}
	t.emitAs(Actor, k, &events.MembersExpired{MemberIDs: ids, Epochs: bump(t.Group(k)), Reason: reason})
	reconcile(t, k)
}

// enforceRebalance arms a deadline for members holding shards outside their
// target, fences those that miss it and forgets the deadlines of members that
// released what they had to (it visits those members and the ones with a
// deadline, not every member).
func enforceRebalance(t *Tx, k projection.GroupKey) {
	g := t.Group(k)
	var late []string
	for _, id := range unionSorted(g.OutsideTargetIDs(), t.RT.deadlineIDs(k)) {
		m := g.Member(id)
		if m == nil || !m.CanHold() {
			continue
		}
		if !g.HoldsOutsideTarget(m) {
			t.RT.clearDeadline(k, id)
			continue
		}
		if t.RT.rebalanceDue(k, id, t.Rules.MemberLease, t.Rules.RebalanceTimeout) {
			late = append(late, id)
		}
	}
	for _, id := range late {
		fence(t, k, id, "did not release revoked shards within the rebalance timeout")
	}
}

// prune removes terminal members after the retention period.
func prune(t *Tx, k projection.GroupKey) {
	if t.Rules.StaleRetention <= 0 {
		return
	}
	var gone []string
	for _, m := range t.Group(k).OldestTerminal(-1, func(m *projection.Member) bool { return t.Now.Sub(m.UpdatedAt) > t.Rules.StaleRetention }) {
		gone = append(gone, m.ID)
	}
	pruneMembers(t, k, gone)
}

// pruneMembers removes member records (and their runtime).
func pruneMembers(t *Tx, k projection.GroupKey, gone []string) {
	if len(gone) == 0 {
		return
	}
	g := t.Group(k)
	sort.Strings(gone)
	t.emitAs(Actor, k, &events.MembersPruned{MemberIDs: gone, MetadataVersion: g.MetadataVersion + 1})
	t.RT.dropMembers(k, gone)
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

// Due is the tick's cheap scan for groups with something to do: it asks each group's
// indexes and runtime, never looks at every member.
func Due(st *projection.State, table *RuntimeTable, r Rules, now, at time.Time) []projection.GroupKey {
	var out []projection.GroupKey
	st.Read(func(st projection.Reader) {
		for _, k := range st.GroupKeys() {
			if groupDue(table, st.Group(k), now, at, r) {
				out = append(out, k)
			}
		}
	})
	return out
}

// groupDue reports whether the maintenance decision of g has something to
// do: a resharding to move, an assignment to record, an overdue round, streams
// to retire, a lease that may have passed (the lease floor passed), a
// rebalance deadline, a member holding shards outside its target, or a
// terminal record past the retention.
func groupDue(table *RuntimeTable, g projection.ReadOnlyGroup, now, timers time.Time, r Rules) bool {
	k := g.Key()
	if g.ActiveReshardingID() != "" || g.AssignmentEpoch() != g.GroupEpoch() {
		return true
	}
	if rd := table.Round(k); rd.Open && !timers.Before(rd.OpenedAt.Add(r.RebalanceTimeout)) {
		return true
	}
	if last := g.LastResharding(); last.Exists() && last.Terminal() && !last.Retired() {
		if lo, hi := last.RemovedRange(); hi > lo {
			return true
		}
	}
	if floor := table.LeaseFloor(k); floor.IsZero() || timers.After(floor) {
		return true
	}
	if len(table.DeadlineIDs(k)) > 0 || len(g.OutsideTargetIDs()) > 0 {
		return true
	}
	if r.StaleRetention > 0 {
		if oldest := g.OldestTerminal(); oldest.Exists() && now.Sub(oldest.UpdatedAt()) > r.StaleRetention {
			return true
		}
	}
	return ExpiredGroup(g, now, r.EmptyGroupRetention)
}
