package commands

import (
	"sort"
	"time"

	"github.com/rscoord/rsc/internal/cow"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// RuntimeOverlay is what decisions change in the runtime table, kept apart
// until it may happen: copy-on-write layers (package cow), as
// projection.Overlay is over the projection. A batch
// has one, over the table; each decision in it gets a child, merged into the
// batch's when the decision succeeds and dropped when it fails. The writer
// commits the batch's overlay right after the batch's records were applied
// to the projection (RuntimeTable.Commit), and drops it when the append
// failed, conflicted or was fenced: a decision whose records never reached
// the log changes nothing in memory either.
//
// Reads fall through to the parent and then to the table (under its lock);
// only a write copies a member or a round into the overlay, so a decision
// that reads every member's lease (expiry) allocates nothing for those it
// leaves alone.
type RuntimeOverlay struct {
	base *RuntimeTable
	now  time.Time
	// Each is a copy-on-write layer (package cow): the batch's over nothing
	// (the table answers what they do not hold), a decision's over the
	// batch's.
	members cow.Map[memberKey, *memberEdit]
	// dropped are the groups deleted: the table forgets them first, and
	// nothing the table holds of them is seen after.
	dropped cow.Map[projection.GroupKey, struct{}]
	// rounds are the correction rounds set (nil: closed), owned by the
	// overlay; floors the lease floors that replace the table's.
	rounds cow.Map[projection.GroupKey, *correctionRound]
	floors cow.Map[projection.GroupKey, time.Time]
	// quarantined are the quarantine entries added, by "m:<member id>" or
	// "p:<principal>"; churn the join and leave budgets spent in a group, by
	// principal.
	quarantined cow.Map[memberKey, time.Time]
	churn       cow.Map[memberKey, Bucket]
	// principals are the join and leave budgets across groups spent, by
	// principal (quota.go).
	principals cow.Map[string, Bucket]
}

// memberKey names one member of a group (or, in quarantined and churn, one
// entry of the group's).
type memberKey struct {
	k  projection.GroupKey
	id string
}

// fields names what a decision changed in a member's runtime.
type fields uint8

const (
	fieldArmed    fields = 1 << iota // first seen by the decision: the table gets m if it has none
	fieldRenewed                     // lease, last heartbeat, reported version, capacity, progress
	fieldDeadline                    // rebalance deadline
)

// memberEdit is a member as the overlay's decisions left it. A decision's
// edit starts as a copy of the batch's (what both changed adds up: Merge
// replaces the batch's with it).
type memberEdit struct {
	m       memberRuntime
	exists  bool   // false: pruned or its group deleted, and not seen again since
	dropped bool   // the table's record goes first
	changed fields // which parts of m to write
}

func newRuntimeOverlay(base *RuntimeTable, now time.Time) *RuntimeOverlay {
	return &RuntimeOverlay{base: base, now: now}
}

// Child starts the overlay of one decision.
func (o *RuntimeOverlay) Child(now time.Time) *RuntimeOverlay {
	return &RuntimeOverlay{base: o.base, now: now,
		members: o.members.Child(), dropped: o.dropped.Child(), rounds: o.rounds.Child(), floors: o.floors.Child(),
		quarantined: o.quarantined.Child(), churn: o.churn.Child(), principals: o.principals.Child()}
}

// Merge folds a decision's overlay into its parent (the decision succeeded).
func (o *RuntimeOverlay) Merge() {
	o.members.Merge()
	o.dropped.Merge()
	o.rounds.Merge()
	o.floors.Merge()
	o.quarantined.Merge()
	o.churn.Merge()
	o.principals.Merge()
}

// empty reports whether the overlay changed nothing.
func (o *RuntimeOverlay) empty() bool {
	return o.members.EditCount()+o.dropped.EditCount()+o.rounds.EditCount()+o.floors.EditCount()+
		o.quarantined.EditCount()+o.churn.EditCount()+o.principals.EditCount() == 0
}

// isDropped reports whether the overlay's decisions deleted the group.
func (o *RuntimeOverlay) isDropped(k projection.GroupKey) bool {
	_, ok := o.dropped.Get(k)
	return ok
}

// view is a member's runtime as the overlay sees it (false: never seen, or
// gone).
func (o *RuntimeOverlay) view(k projection.GroupKey, id string) (memberRuntime, bool) {
	if e, ok := o.members.Get(memberKey{k, id}); ok {
		return e.m, e.exists
	}
	if o.isDropped(k) {
		return memberRuntime{}, false
	}
	return o.base.member(k, id)
}

// edit is the member's runtime to change, copied into this overlay on first
// write; a member never seen is armed from now.
func (o *RuntimeOverlay) edit(k projection.GroupKey, id string, lease time.Duration) *memberEdit {
	mk := memberKey{k, id}
	e, own := o.members.Local(mk)
	if !own {
		e = &memberEdit{}
		if pe, ok := o.members.Get(mk); ok {
			*e = *pe
		} else if !o.isDropped(k) {
			e.m, e.exists = o.base.member(k, id)
		}
		o.members.Set(mk, e)
	}
	if !e.exists {
		e.m, e.exists = *armed(o.now, lease), true
		e.changed |= fieldArmed
	}
	return e
}

// leaseLapsed reports whether the member's lease passed at now (arming one
// from now for a member never seen), and when it ends; a lapsed member's
// rebalance deadline is cleared.
func (o *RuntimeOverlay) leaseLapsed(k projection.GroupKey, id string, lease time.Duration) (bool, time.Time) {
	m, ok := o.view(k, id)
	if !ok {
		return false, o.edit(k, id, lease).m.leaseExpiresAt
	}
	if !o.now.After(m.leaseExpiresAt) {
		return false, m.leaseExpiresAt
	}
	if !m.rebalanceDeadline.IsZero() {
		e := o.edit(k, id, lease)
		e.m.rebalanceDeadline = time.Time{}
		e.changed |= fieldDeadline
	}
	return true, m.leaseExpiresAt
}

// leaseFloor is the group's lease floor as the overlay sees it (zero:
// unknown): no member's lease ends before it.
func (o *RuntimeOverlay) leaseFloor(k projection.GroupKey) time.Time {
	if f, ok := o.floors.Get(k); ok {
		return f
	}
	if o.isDropped(k) {
		return time.Time{}
	}
	return o.base.LeaseFloor(k)
}

// setLeaseFloor records a new lease floor for the group, committed with the
// decision (an expiry scan found no lease ending before it).
func (o *RuntimeOverlay) setLeaseFloor(k projection.GroupKey, floor time.Time) {
	o.floors.Set(k, floor)
}

// deadlineIDs lists, sorted, the members with a rebalance deadline as the
// overlay sees them.
func (o *RuntimeOverlay) deadlineIDs(k projection.GroupKey) []string {
	set := o.base.DeadlineIDs(k)
	if o.isDropped(k) {
		clear(set)
	}
	for mk, e := range o.members.All() {
		if mk.k != k {
			continue
		}
		if e.exists && !e.m.rebalanceDeadline.IsZero() {
			set[mk.id] = struct{}{}
		} else {
			delete(set, mk.id)
		}
	}
	out := make([]string, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// rebalanceDue arms the member's rebalance deadline (now + timeout) when it
// has none, and reports whether an armed one passed.
func (o *RuntimeOverlay) rebalanceDue(k projection.GroupKey, id string, lease, timeout time.Duration) bool {
	m, ok := o.view(k, id)
	if ok && !m.rebalanceDeadline.IsZero() {
		return !o.now.Before(m.rebalanceDeadline)
	}
	e := o.edit(k, id, lease)
	e.m.rebalanceDeadline = o.now.Add(timeout)
	e.changed |= fieldDeadline
	return false
}

// clearDeadline forgets the member's rebalance deadline.
func (o *RuntimeOverlay) clearDeadline(k projection.GroupKey, id string) {
	if m, ok := o.view(k, id); !ok || m.rebalanceDeadline.IsZero() {
		return
	}
	e := o.edit(k, id, 0)
	e.m.rebalanceDeadline = time.Time{}
	e.changed |= fieldDeadline
}

// renew records the in-memory part of an accepted heartbeat.
func (o *RuntimeOverlay) renew(k projection.GroupKey, id string, lease time.Duration, req *wire.HeartbeatRequest, available int, progress []wire.ShardProgress) {
	e := o.edit(k, id, lease)
	e.m.renew(renewal{at: o.now, lease: lease, reportedMV: *req.MetadataVersion, available: available, progress: progress})
	e.changed |= fieldRenewed
}

// dropMembers forgets members (pruned).
func (o *RuntimeOverlay) dropMembers(k projection.GroupKey, ids []string) {
	for _, id := range ids {
		o.members.Set(memberKey{k, id}, &memberEdit{dropped: true})
	}
}

// dropGroup forgets a group (deleted).
func (o *RuntimeOverlay) dropGroup(k projection.GroupKey) {
	inGroup := func(mk memberKey) bool { return mk.k == k }
	o.members.DeleteWhere(inGroup)
	o.quarantined.DeleteWhere(inGroup)
	o.churn.DeleteWhere(inGroup)
	o.rounds.Delete(k)
	o.floors.Delete(k)
	o.dropped.Set(k, struct{}{})
}

// roundOf finds the group's round in the overlays (found false: the table
// decides).
func (o *RuntimeOverlay) roundOf(k projection.GroupKey) (r *correctionRound, found bool) {
	if r, ok := o.rounds.Get(k); ok {
		return r, true
	}
	return nil, o.isDropped(k)
}

// round returns the group's correction round, if one is open.
func (o *RuntimeOverlay) round(k projection.GroupKey) RoundInfo {
	if r, found := o.roundOf(k); found {
		return infoOf(r)
	}
	return o.base.Round(k)
}

// roundAcked reports whether member id converged in the open round.
func (o *RuntimeOverlay) roundAcked(k projection.GroupKey, id string) bool {
	if r, found := o.roundOf(k); found {
		return r != nil && r.acked[id]
	}
	return o.base.roundAcked(k, id)
}

// writeRound is the group's round to change, copied into this overlay (nil
// when none is open).
func (o *RuntimeOverlay) writeRound(k projection.GroupKey) *correctionRound {
	if r, own := o.rounds.Local(k); own {
		return r
	}
	r, found := o.roundOf(k)
	if found {
		r = r.clone()
	} else {
		r = o.base.roundCopy(k)
	}
	o.rounds.Set(k, r)
	return r
}

// openRound opens a correction round targeting targetMV (or re-targets the
// open one); it reports whether it opened a new one.
func (o *RuntimeOverlay) openRound(k projection.GroupKey, targetMV int64) bool {
	if cur := o.round(k); cur.Open && cur.TargetMV == targetMV {
		return false
	}
	r := o.writeRound(k)
	opened := r == nil
	if opened {
		r = &correctionRound{acked: map[string]bool{}, openedAt: o.now}
		o.rounds.Set(k, r)
	}
	r.targetMV = targetMV
	return opened
}

// ackRound records that member id converged on the round's version.
func (o *RuntimeOverlay) ackRound(k projection.GroupKey, id string) {
	if !o.round(k).Open || o.roundAcked(k, id) {
		return
	}
	o.writeRound(k).acked[id] = true
}

// closeRound ends the open round; it reports whether one was open.
func (o *RuntimeOverlay) closeRound(k projection.GroupKey) bool {
	if !o.round(k).Open {
		return false
	}
	o.rounds.Set(k, nil)
	return true
}

// quarantine records that member id (and its principal, if any) may not open
// a correction round until until.
func (o *RuntimeOverlay) quarantine(k projection.GroupKey, id, principal string, until time.Time) {
	o.quarantined.Set(memberKey{k, "m:" + id}, until)
	if principal != "" {
		o.quarantined.Set(memberKey{k, "p:" + principal}, until)
	}
}

// isQuarantined reports whether member id or its principal may not open a
// correction round now.
func (o *RuntimeOverlay) isQuarantined(k projection.GroupKey, id, principal string) bool {
	keys := []string{"m:" + id}
	if principal != "" {
		keys = append(keys, "p:"+principal)
	}
	for _, key := range keys {
		if until, ok := o.quarantinedUntil(k, key); ok && o.now.Before(until) {
			return true
		}
	}
	return false
}

// quarantinedUntil finds a quarantine entry in the overlays, then the table.
func (o *RuntimeOverlay) quarantinedUntil(k projection.GroupKey, key string) (time.Time, bool) {
	if until, ok := o.quarantined.Get(memberKey{k, key}); ok {
		return until, true
	}
	if o.isDropped(k) {
		return time.Time{}, false
	}
	return o.base.quarantinedUntil(k, key)
}

// takeChurn spends one join or leave of the principal's budget in the group
// (b), committed with the decision; false, with when to retry, when it has
// none left.
func (o *RuntimeOverlay) takeChurn(k projection.GroupKey, principal string, b Budget) (bool, time.Duration) {
	var cur *Bucket
	if v, ok := o.churn.Get(memberKey{k, principal}); ok {
		cur = &v
	} else if v, ok := o.base.churnBucket(k, principal); ok && !o.isDropped(k) {
		cur = &v
	}
	next, ok, wait := b.Take(cur, o.now)
	if !ok {
		return false, wait
	}
	o.churn.Set(memberKey{k, principal}, next)
	return true, 0
}

// RoundsChanged lists the groups whose correction round the overlay's
// decisions opened, re-targeted or closed (or deleted with the group).
func (o *RuntimeOverlay) RoundsChanged() []projection.GroupKey {
	var out []projection.GroupKey
	for k := range o.rounds.Edits() {
		out = append(out, k)
	}
	for k := range o.dropped.Edits() {
		if !o.rounds.Edited(k) {
			out = append(out, k)
		}
	}
	return out
}
