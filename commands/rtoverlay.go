package commands

import (
	"sort"
	"time"

	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// runtimeOverlay is what decisions change in the runtime table, kept apart
// until it may happen: the copy-on-write twin of projection.Overlay. A batch
// has one, over the table; each decision in it gets a child, merged into the
// batch's when the decision succeeds and dropped when it fails. The writer
// commits the batch's overlay right after the batch's records were applied
// to the projection (runtimeTable.commit), and drops it when the append
// failed, conflicted or was fenced: a decision whose records never reached
// the log changes nothing in memory either.
//
// Reads fall through to the parent and then to the table (under its lock);
// only a write copies a member or a round into the overlay, so a decision
// that reads every member's lease (expiry) allocates nothing for those it
// leaves alone.
type RuntimeOverlay struct {
	base    *RuntimeTable
	parent  *RuntimeOverlay
	now     time.Time
	members map[memberKey]*memberEdit
	groups  map[projection.GroupKey]*groupEdit
	// principals are the join and leave budgets across groups spent, by
	// principal (quota.go).
	principals map[string]Bucket
}

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

// memberEdit is a member as the overlay's decisions left it.
type memberEdit struct {
	m       memberRuntime
	exists  bool   // false: pruned or its group deleted, and not seen again since
	dropped bool   // the table's record goes first
	changed fields // which parts of m to write
}

// groupEdit is what the overlay's decisions changed of a group's runtime.
type groupEdit struct {
	dropped    bool                 // deleted: the table forgets the group first
	roundSet   bool                 // round replaces the table's
	round      *correctionRound     // the round (nil: none); owned by the overlay
	quarantine map[string]time.Time // entries added
	floorSet   bool                 // floor replaces the table's lease floor
	floor      time.Time
	churn      map[string]Bucket // budgets spent, by principal
}

func newRuntimeOverlay(base *RuntimeTable, now time.Time) *RuntimeOverlay {
	return &RuntimeOverlay{base: base, now: now}
}

// child starts the overlay of one decision.
func (o *RuntimeOverlay) Child(now time.Time) *RuntimeOverlay {
	c := newRuntimeOverlay(o.base, now)
	c.parent = o
	return c
}

// merge folds a decision's overlay into its parent (the decision succeeded).
func (o *RuntimeOverlay) Merge() {
	o.mergePrincipals()
	p := o.parent
	for k, ge := range o.groups {
		pe := p.groupEdit(k)
		if ge.dropped {
			*pe = groupEdit{dropped: true}
			for mk := range p.members {
				if mk.k == k {
					delete(p.members, mk)
				}
			}
		}
		if ge.roundSet {
			pe.roundSet, pe.round = true, ge.round
		}
		if ge.floorSet {
			pe.floorSet, pe.floor = true, ge.floor
		}
		for principal, b := range ge.churn {
			if pe.churn == nil {
				pe.churn = map[string]Bucket{}
			}
			pe.churn[principal] = b
		}
		for key, until := range ge.quarantine {
			if pe.quarantine == nil {
				pe.quarantine = map[string]time.Time{}
			}
			pe.quarantine[key] = until
		}
	}
	for mk, e := range o.members {
		pe := p.members[mk]
		if pe == nil || e.dropped {
			cp := *e
			p.setMember(mk, &cp)
			continue
		}
		pe.m, pe.exists = e.m, e.exists
		pe.changed |= e.changed
	}
}

func (o *RuntimeOverlay) groupEdit(k projection.GroupKey) *groupEdit {
	ge := o.groups[k]
	if ge == nil {
		if o.groups == nil {
			o.groups = map[projection.GroupKey]*groupEdit{}
		}
		ge = &groupEdit{}
		o.groups[k] = ge
	}
	return ge
}

// setMember puts a member's edit into the overlay (its maps are made on
// first write: most decisions change little or nothing in memory).
func (o *RuntimeOverlay) setMember(mk memberKey, e *memberEdit) {
	if o.members == nil {
		o.members = map[memberKey]*memberEdit{}
	}
	o.members[mk] = e
}

// view is a member's runtime as the overlay sees it (false: never seen, or
// gone).
func (o *RuntimeOverlay) view(k projection.GroupKey, id string) (memberRuntime, bool) {
	for l := o; l != nil; l = l.parent {
		if e := l.members[memberKey{k, id}]; e != nil {
			return e.m, e.exists
		}
		if ge := l.groups[k]; ge != nil && ge.dropped {
			return memberRuntime{}, false
		}
	}
	return o.base.member(k, id)
}

// edit is the member's runtime to change, copied into this overlay on first
// write; a member never seen is armed from now.
func (o *RuntimeOverlay) edit(k projection.GroupKey, id string, lease time.Duration) *memberEdit {
	mk := memberKey{k, id}
	if e := o.members[mk]; e != nil {
		if !e.exists {
			e.m, e.exists = *armed(o.now, lease), true
			e.changed |= fieldArmed
		}
		return e
	}
	m, ok := o.view(k, id)
	e := &memberEdit{m: m, exists: true}
	if !ok {
		e.m = *armed(o.now, lease)
		e.changed = fieldArmed
	}
	o.setMember(mk, e)
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
	for l := o; l != nil; l = l.parent {
		if ge := l.groups[k]; ge != nil {
			if ge.floorSet {
				return ge.floor
			}
			if ge.dropped {
				return time.Time{}
			}
		}
	}
	return o.base.LeaseFloor(k)
}

// setLeaseFloor records a new lease floor for the group, committed with the
// decision (an expiry scan found no lease ending before it).
func (o *RuntimeOverlay) setLeaseFloor(k projection.GroupKey, floor time.Time) {
	ge := o.groupEdit(k)
	ge.floorSet, ge.floor = true, floor
}

// deadlineIDs lists, sorted, the members with a rebalance deadline as the
// overlay sees them.
func (o *RuntimeOverlay) deadlineIDs(k projection.GroupKey) []string {
	set := o.base.DeadlineIDs(k)
	var chain []*RuntimeOverlay
	for l := o; l != nil; l = l.parent {
		chain = append(chain, l)
	}
	for i := len(chain) - 1; i >= 0; i-- {
		l := chain[i]
		if ge := l.groups[k]; ge != nil && ge.dropped {
			clear(set)
		}
		for mk, e := range l.members {
			if mk.k != k {
				continue
			}
			if e.exists && !e.m.rebalanceDeadline.IsZero() {
				set[mk.id] = struct{}{}
			} else {
				delete(set, mk.id)
			}
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
		o.setMember(memberKey{k, id}, &memberEdit{dropped: true})
	}
}

// dropGroup forgets a group (deleted).
func (o *RuntimeOverlay) dropGroup(k projection.GroupKey) {
	for mk := range o.members {
		if mk.k == k {
			delete(o.members, mk)
		}
	}
	*o.groupEdit(k) = groupEdit{dropped: true}
}

// roundOf finds the group's round in the overlays (found false: the table
// decides).
func (o *RuntimeOverlay) roundOf(k projection.GroupKey) (r *correctionRound, found bool) {
	for l := o; l != nil; l = l.parent {
		if ge := l.groups[k]; ge != nil {
			if ge.roundSet {
				return ge.round, true
			}
			if ge.dropped {
				return nil, true
			}
		}
	}
	return nil, false
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
func (o *RuntimeOverlay) writeRound(k projection.GroupKey) *groupEdit {
	ge := o.groupEdit(k)
	if ge.roundSet {
		return ge
	}
	var r *correctionRound
	found := false
	if o.parent != nil {
		r, found = o.parent.roundOf(k)
	}
	switch {
	case ge.dropped:
		ge.round = nil
	case found:
		ge.round = r.clone()
	default:
		ge.round = o.base.roundCopy(k)
	}
	ge.roundSet = true
	return ge
}

// openRound opens a correction round targeting targetMV (or re-targets the
// open one); it reports whether it opened a new one.
func (o *RuntimeOverlay) openRound(k projection.GroupKey, targetMV int64) bool {
	if cur := o.round(k); cur.Open && cur.TargetMV == targetMV {
		return false
	}
	ge := o.writeRound(k)
	opened := ge.round == nil
	if opened {
		ge.round = &correctionRound{acked: map[string]bool{}, openedAt: o.now}
	}
	ge.round.targetMV = targetMV
	return opened
}

// ackRound records that member id converged on the round's version.
func (o *RuntimeOverlay) ackRound(k projection.GroupKey, id string) {
	if !o.round(k).Open || o.roundAcked(k, id) {
		return
	}
	o.writeRound(k).round.acked[id] = true
}

// closeRound ends the open round; it reports whether one was open.
func (o *RuntimeOverlay) closeRound(k projection.GroupKey) bool {
	if !o.round(k).Open {
		return false
	}
	ge := o.groupEdit(k)
	ge.roundSet, ge.round = true, nil
	return true
}

// quarantine records that member id (and its principal, if any) may not open
// a correction round until until.
func (o *RuntimeOverlay) quarantine(k projection.GroupKey, id, principal string, until time.Time) {
	ge := o.groupEdit(k)
	if ge.quarantine == nil {
		ge.quarantine = map[string]time.Time{}
	}
	ge.quarantine["m:"+id] = until
	if principal != "" {
		ge.quarantine["p:"+principal] = until
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
	for l := o; l != nil; l = l.parent {
		if ge := l.groups[k]; ge != nil {
			if until, ok := ge.quarantine[key]; ok {
				return until, true
			}
			if ge.dropped {
				return time.Time{}, false
			}
		}
	}
	return o.base.quarantinedUntil(k, key)
}

// takeChurn spends one join or leave of the principal's budget in the group
// (b), committed with the decision; false, with when to retry, when it has
// none left.
func (o *RuntimeOverlay) takeChurn(k projection.GroupKey, principal string, b Budget) (bool, time.Duration) {
	var cur *Bucket
	found := false
	for l := o; l != nil && !found; l = l.parent {
		if ge := l.groups[k]; ge != nil {
			if v, ok := ge.churn[principal]; ok {
				cur, found = &v, true
			} else if ge.dropped {
				found = true
			}
		}
	}
	if !found {
		if v, ok := o.base.churnBucket(k, principal); ok {
			cur = &v
		}
	}
	next, ok, wait := b.Take(cur, o.now)
	if !ok {
		return false, wait
	}
	ge := o.groupEdit(k)
	if ge.churn == nil {
		ge.churn = map[string]Bucket{}
	}
	ge.churn[principal] = next
	return true, 0
}

// roundsChanged lists the groups whose correction round the overlay's
// decisions opened, re-targeted or closed.
func (o *RuntimeOverlay) RoundsChanged() []projection.GroupKey {
	var out []projection.GroupKey
	for k, ge := range o.groups {
		if ge.roundSet || ge.dropped {
			out = append(out, k)
		}
	}
	return out
}
