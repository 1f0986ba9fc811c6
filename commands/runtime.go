package commands

import (
	"sync"
	"time"

	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// The runtime table is what the member protocol keeps only in memory, and
// why: leases and rebalance deadlines are timers, re-armed for every member
// when the coordinator starts from the log or begins a term; the progress,
// capacity and metadata version a member last reported are re-reported with
// every heartbeat; a metadata-correction round is reopened by the next member
// that reports a newer metadata version, and a quarantine only slows a member
// that keeps opening rounds. None of it is needed to rebuild a decision from
// the log. (What the reconciler last read from Redis is kept apart, in the
// evidence table: evidence.go.)
//
// Decisions read and change it only through a RuntimeOverlay (rtoverlay.go),
// which the writer commits once the batch's records were applied, and drops
// when the decision fails or the append does. Two writers change it outside
// the writer: the steady heartbeat renews a lease (renew) and remembers the
// epoch it answered (issued), and a new term or a reload re-arms every member
// (rearm). A commit writes only the fields its decisions changed, so it never
// undoes what those wrote meanwhile.

type memberRuntime struct {
	leaseExpiresAt    time.Time
	lastHeartbeatAt   time.Time
	rebalanceDeadline time.Time
	reportedMV        int64
	available         int
	progress          []wire.ShardProgress
	epoch             int64 // the member epoch the last accepted heartbeat was answered with
	// beats counts the renewals: a held heartbeat whose caller went away
	// expires its member only if none came after it (hold.go).
	beats uint64
}

// renewal is the in-memory part of an accepted heartbeat.
type renewal struct {
	at         time.Time
	lease      time.Duration
	reportedMV int64
	available  int
	progress   []wire.ShardProgress
}

func (m *memberRuntime) renew(r renewal) {
	m.leaseExpiresAt = r.at.Add(r.lease)
	m.lastHeartbeatAt = r.at
	m.reportedMV = r.reportedMV
	m.available = r.available
	m.progress = r.progress
	m.beats++
}

type correctionRound struct {
	targetMV int64
	acked    map[string]bool
	openedAt time.Time // the round ends by fencing at openedAt + RebalanceTimeout
}

func (r *correctionRound) clone() *correctionRound {
	if r == nil {
		return nil
	}
	out := &correctionRound{targetMV: r.targetMV, openedAt: r.openedAt, acked: make(map[string]bool, len(r.acked)+1)}
	for id := range r.acked {
		out.acked[id] = true
	}
	return out
}

type groupRuntime struct {
	members    map[string]*memberRuntime
	correction *correctionRound
	// quarantined holds, per "m:<member id>" and "p:<principal>", until when a
	// member fenced by an overdue correction round may not open another.
	quarantined map[string]time.Time
	// deadlines are the members with a rebalance deadline armed, so that
	// enforcing deadlines visits those and the members holding shards
	// outside their target, not every member.
	deadlines map[string]struct{}
	// churn is what each principal has left of its join and leave budget
	// in the group (rules.churn; one entry per principal that joined or left
	// a member: bounded by the users file).
	churn map[string]Bucket
	// leaseFloor is at or before every lease of the group's members (zero:
	// unknown): until it passes nobody's lease can have, and expiry need not
	// look at every member. Every write of a lease lowers it; an expiry scan
	// sets it to the earliest lease it saw (leaseFloor).
	leaseFloor time.Time
}

// lowerFloor keeps the lease floor at or before lease.
func (g *groupRuntime) lowerFloor(lease time.Time) {
	if !g.leaseFloor.IsZero() && lease.Before(g.leaseFloor) {
		g.leaseFloor = lease
	}
}

// setDeadline records member id's rebalance deadline (zero: none).
func (g *groupRuntime) setDeadline(id string, m *memberRuntime, at time.Time) {
	m.rebalanceDeadline = at
	if at.IsZero() {
		delete(g.deadlines, id)
		return
	}
	if g.deadlines == nil {
		g.deadlines = map[string]struct{}{}
	}
	g.deadlines[id] = struct{}{}
}

type RuntimeTable struct {
	mu     sync.Mutex
	groups map[projection.GroupKey]*groupRuntime
	// principals is what each principal has left of its join and leave
	// budget across its groups (quota.go).
	principals map[string]Bucket
}

func NewRuntimeTable() *RuntimeTable {
	return &RuntimeTable{groups: map[projection.GroupKey]*groupRuntime{}}
}

// groupLocked returns the runtime of a group, creating it; the caller holds r.mu.
func (r *RuntimeTable) groupLocked(k projection.GroupKey) *groupRuntime {
	g := r.groups[k]
	if g == nil {
		g = &groupRuntime{members: map[string]*memberRuntime{}}
		r.groups[k] = g
	}
	return g
}

// memberLocked returns a member's runtime, arming a lease from now if the
// member was never seen by this process (joined before a restart or via
// another coordinator); the caller holds r.mu.
func (r *RuntimeTable) memberLocked(k projection.GroupKey, id string, now time.Time, lease time.Duration) *memberRuntime {
	g := r.groupLocked(k)
	m := g.members[id]
	if m == nil {
		m = armed(now, lease)
		g.members[id] = m
		g.lowerFloor(m.leaseExpiresAt)
	}
	return m
}

// armed is the runtime of a member first seen at now.
func armed(now time.Time, lease time.Duration) *memberRuntime {
	return &memberRuntime{leaseExpiresAt: now.Add(lease), lastHeartbeatAt: now}
}

// rearm forgets everything and gives every member of st a fresh lease from now:
// after a load (or a new term) the coordinator cannot know when it last heard
// from them.
func (r *RuntimeTable) Rearm(st *projection.State, now time.Time, lease time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups = map[projection.GroupKey]*groupRuntime{}
	for _, g := range st.Groups() {
		for _, id := range g.MemberIDs() {
			r.memberLocked(g.Key, id, now, lease)
		}
	}
}

// renew records a steady heartbeat (answered without the writer).
func (r *RuntimeTable) renew(k projection.GroupKey, id string, rn renewal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.memberLocked(k, id, rn.at, rn.lease)
	m.renew(rn)
	r.groups[k].lowerFloor(m.leaseExpiresAt)
}

// forgetLeaseFloors makes the next expiry look at every member of every
// group (the projection changed under the decisions: a catch-up).
func (r *RuntimeTable) ForgetLeaseFloors() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.groups {
		g.leaseFloor = time.Time{}
	}
}

// leaseFloor is the group's lease floor (zero: unknown).
func (r *RuntimeTable) LeaseFloor(k projection.GroupKey) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.groups[k]; g != nil {
		return g.leaseFloor
	}
	return time.Time{}
}

// churnBucket is what the principal has left of its join and leave budget
// in the group (false: never spent, a full budget).
func (r *RuntimeTable) churnBucket(k projection.GroupKey, principal string) (Bucket, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.groups[k]; g != nil {
		b, ok := g.churn[principal]
		return b, ok
	}
	return Bucket{}, false
}

// deadlineIDs is a copy of the set of members with a rebalance deadline.
func (r *RuntimeTable) DeadlineIDs(k projection.GroupKey) map[string]struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]struct{}{}
	if g := r.groups[k]; g != nil {
		for id := range g.deadlines {
			out[id] = struct{}{}
		}
	}
	return out
}

// issued remembers the member epoch a heartbeat was answered with.
func (r *RuntimeTable) Issued(k projection.GroupKey, id string, epoch int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.groups[k]; g != nil && g.members[id] != nil {
		g.members[id].epoch = epoch
	}
}

// beatsOf is the number of renewals of the member's lease in this term (0:
// never seen).
func (r *RuntimeTable) BeatsOf(k projection.GroupKey, id string) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.groups[k]; g != nil && g.members[id] != nil {
		return g.members[id].beats
	}
	return 0
}

// needsTick reports whether the member's lease passed or it has a deadline.
func (r *RuntimeTable) needsTick(k projection.GroupKey, id string, now time.Time, lease time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.memberLocked(k, id, now, lease)
	return now.After(m.leaseExpiresAt) || !m.rebalanceDeadline.IsZero()
}

// deadlinePassed reports whether the member has a rebalance deadline that passed.
func (r *RuntimeTable) deadlinePassed(k projection.GroupKey, id string, now time.Time) bool {
	m, ok := r.member(k, id)
	return ok && !m.rebalanceDeadline.IsZero() && !now.Before(m.rebalanceDeadline)
}

// member is a copy of a member's runtime (false: never seen).
func (r *RuntimeTable) member(k projection.GroupKey, id string) (memberRuntime, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.groups[k]; g != nil && g.members[id] != nil {
		return *g.members[id], true
	}
	return memberRuntime{}, false
}

// roundInfo is a copy of a group's open correction round.
type RoundInfo struct {
	Open     bool
	TargetMV int64
	OpenedAt time.Time
}

func infoOf(c *correctionRound) RoundInfo {
	if c == nil {
		return RoundInfo{}
	}
	return RoundInfo{Open: true, TargetMV: c.targetMV, OpenedAt: c.openedAt}
}

// round returns the group's correction round, if one is open.
func (r *RuntimeTable) Round(k projection.GroupKey) RoundInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.groups[k]; g != nil {
		return infoOf(g.correction)
	}
	return RoundInfo{}
}

// roundCopy is a copy of the group's open round (nil when none).
func (r *RuntimeTable) roundCopy(k projection.GroupKey) *correctionRound {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.groups[k]; g != nil {
		return g.correction.clone()
	}
	return nil
}

// roundAcked reports whether member id converged in the open round.
func (r *RuntimeTable) roundAcked(k projection.GroupKey, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[k]
	return g != nil && g.correction != nil && g.correction.acked[id]
}

// quarantinedUntil is until when key ("m:<id>" or "p:<principal>") may not
// open a correction round.
func (r *RuntimeTable) quarantinedUntil(k projection.GroupKey, key string) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.groups[k]; g != nil {
		until, ok := g.quarantined[key]
		return until, ok
	}
	return time.Time{}, false
}

// maxQuarantined bounds a group's quarantine list (the oldest entry goes).
const maxQuarantined = 1024

// quarantineLocked keeps key quarantined until until, first forgetting the
// entries that lapsed at now and, when the list is full, the oldest; the
// caller holds r.mu.
func (g *groupRuntime) quarantineLocked(key string, until, now time.Time) {
	if g.quarantined == nil {
		g.quarantined = map[string]time.Time{}
	}
	for k, t := range g.quarantined {
		if !now.Before(t) {
			delete(g.quarantined, k)
		}
	}
	if _, ok := g.quarantined[key]; !ok && len(g.quarantined) >= maxQuarantined {
		oldest := ""
		for k, t := range g.quarantined {
			if oldest == "" || t.Before(g.quarantined[oldest]) {
				oldest = k
			}
		}
		delete(g.quarantined, oldest)
	}
	g.quarantined[key] = until
}

// commit writes what the overlay's decisions changed (its parent must be
// nil: the batch's overlay), field by field: a renewal only when no later
// one landed meanwhile (the steady heartbeat renews without the writer), a
// member created only when the table has none.
func (r *RuntimeTable) Commit(o *RuntimeOverlay) {
	if o.empty() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commitPrincipalsLocked(o)
	for k := range o.dropped.Edits() {
		delete(r.groups, k)
	}
	for k, e := range o.rounds.Edits() {
		r.groupLocked(k).correction = e.Value
	}
	for k, e := range o.floors.Edits() {
		// Before the members below: a lease they write lowers it.
		r.groupLocked(k).leaseFloor = e.Value
	}
	for ck, e := range o.churn.Edits() {
		g := r.groupLocked(ck.k)
		if g.churn == nil {
			g.churn = map[string]Bucket{}
		}
		g.churn[ck.id] = e.Value
	}
	for qk, e := range o.quarantined.Edits() {
		r.groupLocked(qk.k).quarantineLocked(qk.id, e.Value, o.now)
	}
	for mk, me := range o.members.Edits() {
		if me.Deleted { // only a decision's layer holds deletions
			continue
		}
		e := me.Value
		g := r.groups[mk.k]
		if e.dropped && g != nil {
			delete(g.members, mk.id)
			delete(g.deadlines, mk.id)
		}
		if e.changed == 0 || !e.exists {
			continue
		}
		g = r.groupLocked(mk.k)
		cur := g.members[mk.id]
		if cur == nil {
			m := e.m
			g.members[mk.id] = &m
			g.lowerFloor(m.leaseExpiresAt)
			g.setDeadline(mk.id, &m, m.rebalanceDeadline)
			continue
		}
		if e.changed&fieldRenewed != 0 && !e.m.lastHeartbeatAt.Before(cur.lastHeartbeatAt) {
			cur.leaseExpiresAt, cur.lastHeartbeatAt = e.m.leaseExpiresAt, e.m.lastHeartbeatAt
			cur.reportedMV, cur.available, cur.progress = e.m.reportedMV, e.m.available, e.m.progress
			g.lowerFloor(cur.leaseExpiresAt)
		}
		if e.changed&fieldRenewed != 0 {
			cur.beats++ // counted even when a later steady renewal landed first
		}
		if e.changed&fieldDeadline != 0 {
			g.setDeadline(mk.id, cur, e.m.rebalanceDeadline)
		}
	}
}

// MemberRuntime is the in-memory view of a member for monitoring.
type MemberRuntime struct {
	LeaseExpiresAt    time.Time
	LastHeartbeatAt   time.Time
	RebalanceDeadline *time.Time
	ReportedMV        int64
	Available         int
	Progress          []wire.ShardProgress
	// Epoch is the member epoch the last accepted heartbeat was answered with
	// (0 when none since this process started).
	Epoch int64
}

// MemberRuntimes returns the in-memory state of every member of a group.
func (r *RuntimeTable) MemberRuntimes(k projection.GroupKey) map[string]MemberRuntime {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]MemberRuntime{}
	g := r.groups[k]
	if g == nil {
		return out
	}
	for id, m := range g.members {
		mr := MemberRuntime{LeaseExpiresAt: m.leaseExpiresAt, LastHeartbeatAt: m.lastHeartbeatAt, ReportedMV: m.reportedMV, Available: m.available, Progress: append([]wire.ShardProgress(nil), m.progress...), Epoch: m.epoch}
		if !m.rebalanceDeadline.IsZero() {
			d := m.rebalanceDeadline
			mr.RebalanceDeadline = &d
		}
		out[id] = mr
	}
	return out
}

// CorrectionOpen reports whether a metadata-correction round is open for the group.
func (r *RuntimeTable) CorrectionOpen(k projection.GroupKey) bool { return r.Round(k).Open }
