package commands

import (
	"sort"
	"sync"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// What lives only in memory (and why): leases and rebalance deadlines are timers,
// re-armed for every member when the coordinator starts from the log; consumption
// progress, available concurrency and the metadata version a member last reported
// are re-reported with every heartbeat; the metadata-correction round is reopened
// by the next member that reports a newer metadata version; Redis evidence (drain
// state, entries added to a scale-out's new shards) is re-read by the reconciler
// every pass. None of it is needed to rebuild a decision from the log.
//
// runtimeState holds all of it behind one mutex; everything reads and changes
// it through the methods below.

type memberRuntime struct {
	leaseExpiresAt    time.Time
	lastHeartbeatAt   time.Time
	rebalanceDeadline time.Time
	reportedMV        int64
	available         int
	progress          []wire.ShardProgress
	epoch             int64 // the member epoch the last accepted heartbeat was answered with
}

type correctionRound struct {
	targetMV int64
	acked    map[string]bool
	openedAt time.Time // the round ends by fencing at openedAt + RebalanceTimeout
}

// entriesEvidence is what the reconciler last read of a scale-out's new shards.
type entriesEvidence struct {
	reshardingID string
	written      map[int]int64
	at           time.Time
	err          bool
}

type groupRuntime struct {
	members    map[string]*memberRuntime
	correction *correctionRound
	evidence   []events.ShardDrain
	evidenceAt time.Time
	entries    *entriesEvidence
	// quarantined holds, per "m:<member id>" and "p:<principal>", until when a
	// member fenced by an overdue correction round may not open another.
	quarantined map[string]time.Time
	// barriers is the latest read of the shards the group's barriers wait
	// on, per "<stream key> <cutover id>" (ordering.go).
	barriers map[string]*barrierRuntime
	// load holds the autoscaler's samples, oldest first, and its latest
	// evaluation (autoscale.go).
	load       []loadSample
	evaluation *Evaluation
}

// barrierRuntime is what the reconciler last read of one source shard of a
// barrier, where its scan for unfenced entries stands, and the unfenced
// entries found but not recorded yet.
type barrierRuntime struct {
	read      events.BarrierRead
	at        time.Time
	scannedTo string
	unfenced  int64
	first     string
	reported  time.Time
}

// unfencedCount is a number of unfenced entries found after one cutover.
type unfencedCount struct {
	shard     int
	streamKey string
	cutoverID string
	count     int64
	first     string
}

type runtimeState struct {
	mu     sync.Mutex
	groups map[projection.GroupKey]*groupRuntime
}

func newRuntimeState() *runtimeState {
	return &runtimeState{groups: map[projection.GroupKey]*groupRuntime{}}
}

// group returns the runtime of a group; the caller holds r.mu.
func (r *runtimeState) group(k projection.GroupKey) *groupRuntime {
	g := r.groups[k]
	if g == nil {
		g = &groupRuntime{members: map[string]*memberRuntime{}}
		r.groups[k] = g
	}
	return g
}

// member returns a member's runtime, arming a lease from now if the member was
// never seen by this process (joined before a restart or via another
// coordinator); the caller holds r.mu.
func (r *runtimeState) member(k projection.GroupKey, id string, now time.Time, lease time.Duration) *memberRuntime {
	g := r.group(k)
	m := g.members[id]
	if m == nil {
		m = &memberRuntime{leaseExpiresAt: now.Add(lease), lastHeartbeatAt: now}
		g.members[id] = m
	}
	return m
}

// rearm forgets everything and gives every member of st a fresh lease from now:
// after a load (or a new term) the coordinator cannot know when it last heard
// from them.
func (r *runtimeState) rearm(st *projection.State, now time.Time, lease time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.groups = map[projection.GroupKey]*groupRuntime{}
	for _, g := range st.Groups() {
		for _, id := range g.MemberIDs() {
			r.member(g.Key, id, now, lease)
		}
	}
}

// renew records the in-memory part of an accepted heartbeat.
func (r *runtimeState) renew(k projection.GroupKey, id string, now time.Time, lease time.Duration, reportedMV int64, available int, progress []wire.ShardProgress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.member(k, id, now, lease)
	m.leaseExpiresAt = now.Add(lease)
	m.lastHeartbeatAt = now
	m.reportedMV = reportedMV
	m.available = available
	m.progress = progress
}

// issued remembers the member epoch a heartbeat was answered with.
func (r *runtimeState) issued(k projection.GroupKey, id string, epoch int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.groups[k]; g != nil && g.members[id] != nil {
		g.members[id].epoch = epoch
	}
}

// leaseLapsed reports whether the member's lease passed at now (arming one from
// now for a member never seen); a lapsed member's rebalance deadline is cleared.
func (r *runtimeState) leaseLapsed(k projection.GroupKey, id string, now time.Time, lease time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.member(k, id, now, lease)
	if now.After(m.leaseExpiresAt) {
		m.rebalanceDeadline = time.Time{}
		return true
	}
	return false
}

// rebalanceDue arms the member's rebalance deadline (now + timeout) when it has
// none, and reports whether an armed one passed.
func (r *runtimeState) rebalanceDue(k projection.GroupKey, id string, now time.Time, lease, timeout time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.member(k, id, now, lease)
	if m.rebalanceDeadline.IsZero() {
		m.rebalanceDeadline = now.Add(timeout)
		return false
	}
	return !now.Before(m.rebalanceDeadline)
}

// clearDeadline forgets the member's rebalance deadline.
func (r *runtimeState) clearDeadline(k projection.GroupKey, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.groups[k]; g != nil && g.members[id] != nil {
		g.members[id].rebalanceDeadline = time.Time{}
	}
}

// deadlinePassed reports whether the member has a rebalance deadline that passed.
func (r *runtimeState) deadlinePassed(k projection.GroupKey, id string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[k]
	if g == nil || g.members[id] == nil {
		return false
	}
	d := g.members[id].rebalanceDeadline
	return !d.IsZero() && !now.Before(d)
}

// needsTick reports whether the member's lease passed or it has a deadline.
func (r *runtimeState) needsTick(k projection.GroupKey, id string, now time.Time, lease time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.member(k, id, now, lease)
	return now.After(m.leaseExpiresAt) || !m.rebalanceDeadline.IsZero()
}

// dropMembers forgets members (pruned).
func (r *runtimeState) dropMembers(k projection.GroupKey, ids []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.groups[k]; g != nil {
		for _, id := range ids {
			delete(g.members, id)
		}
	}
}

// dropGroup forgets a group (deleted).
func (r *runtimeState) dropGroup(k projection.GroupKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.groups, k)
}

// --- metadata-correction rounds ---

// roundInfo is a copy of a group's open correction round.
type roundInfo struct {
	open     bool
	targetMV int64
	openedAt time.Time
}

// round returns the group's correction round, if one is open.
func (r *runtimeState) round(k projection.GroupKey) roundInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[k]
	if g == nil || g.correction == nil {
		return roundInfo{}
	}
	return roundInfo{open: true, targetMV: g.correction.targetMV, openedAt: g.correction.openedAt}
}

// openRound opens a correction round targeting targetMV (or re-targets the
// open one); it reports whether it opened a new one.
func (r *runtimeState) openRound(k projection.GroupKey, now time.Time, targetMV int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.group(k)
	opened := g.correction == nil
	if opened {
		g.correction = &correctionRound{acked: map[string]bool{}, openedAt: now}
	}
	g.correction.targetMV = targetMV
	return opened
}

// ackRound records that member id converged on the round's version.
func (r *runtimeState) ackRound(k projection.GroupKey, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.groups[k]; g != nil && g.correction != nil {
		g.correction.acked[id] = true
	}
}

// roundAcked reports whether member id converged in the open round.
func (r *runtimeState) roundAcked(k projection.GroupKey, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[k]
	return g != nil && g.correction != nil && g.correction.acked[id]
}

// closeRound ends the open round; it reports whether one was open.
func (r *runtimeState) closeRound(k projection.GroupKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[k]
	if g == nil || g.correction == nil {
		return false
	}
	g.correction = nil
	return true
}

// maxQuarantined bounds a group's quarantine list (the oldest entry goes).
const maxQuarantined = 1024

// quarantine records that member id (and its principal, if any) may not open
// a correction round until until.
func (r *runtimeState) quarantine(k projection.GroupKey, id, principal string, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.group(k)
	if g.quarantined == nil {
		g.quarantined = map[string]time.Time{}
	}
	for _, key := range []string{"m:" + id, "p:" + principal} {
		if key == "p:" {
			continue
		}
		if len(g.quarantined) >= maxQuarantined {
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
}

// isQuarantined reports whether member id or its principal may not open a
// correction round at now (and forgets entries that lapsed).
func (r *runtimeState) isQuarantined(k projection.GroupKey, id, principal string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[k]
	if g == nil {
		return false
	}
	hit := false
	for key, until := range g.quarantined {
		if !now.Before(until) {
			delete(g.quarantined, key)
			continue
		}
		if key == "m:"+id || (principal != "" && key == "p:"+principal) {
			hit = true
		}
	}
	return hit
}

// --- Redis evidence the reconciler read last ---

// setEvidence keeps the drain evidence read for a group's removed shards.
func (r *runtimeState) setEvidence(k projection.GroupKey, ev []events.ShardDrain, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.group(k)
	g.evidence, g.evidenceAt = ev, at
}

// setEntriesAdded keeps what the reconciler read of a scale-out's new shards
// (failed: it could not read them).
func (r *runtimeState) setEntriesAdded(k projection.GroupKey, reshardingID string, written map[int]int64, at time.Time, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.group(k).entries = &entriesEvidence{reshardingID: reshardingID, written: written, at: at, err: failed}
}

// entriesAdded returns the last read of a resharding's new shards.
func (r *runtimeState) entriesAdded(k projection.GroupKey, reshardingID string) (entriesEvidence, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[k]
	if g == nil || g.entries == nil || g.entries.reshardingID != reshardingID {
		return entriesEvidence{}, false
	}
	return *g.entries, true
}

// scanFrom is where the next scan for unfenced entries after a cutover starts
// ("" at the cutover).
func (r *runtimeState) scanFrom(k projection.GroupKey, streamKey, cutoverID string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.group(k).barriers[streamKey+" "+cutoverID]; b != nil {
		return b.scannedTo
	}
	return ""
}

// setBarrierReads keeps the latest read of every source shard the group's
// barriers wait on (and forgets the ones they no longer wait on), advances
// the scans and adds up the unfenced entries they found.
func (r *runtimeState) setBarrierReads(k projection.GroupKey, reads []events.BarrierRead, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.group(k)
	next := make(map[string]*barrierRuntime, len(reads))
	for _, rd := range reads {
		key := rd.StreamKey + " " + rd.CutoverID
		b := g.barriers[key]
		if b == nil {
			b = &barrierRuntime{reported: at}
		}
		b.read, b.at = rd, at
		if rd.ScannedTo != "" {
			b.scannedTo = rd.ScannedTo
		}
		if rd.Unfenced > 0 {
			if b.unfenced == 0 {
				b.first = rd.FirstUnfenced
			}
			b.unfenced += rd.Unfenced
		}
		next[key] = b
	}
	g.barriers = next
}

// unfencedDue returns the unfenced entries found and not recorded yet, when
// it is time to record them: unfencedReportEvery after the last record, or
// at once when a barrier may be released (force).
func (r *runtimeState) unfencedDue(k projection.GroupKey, now time.Time, force bool) []unfencedCount {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []unfencedCount
	for _, b := range r.group(k).barriers {
		if b.unfenced > 0 && (force || now.Sub(b.reported) >= unfencedReportEvery) {
			out = append(out, unfencedCount{shard: b.read.ShardIndex, streamKey: b.read.StreamKey, cutoverID: b.read.CutoverID, count: b.unfenced, first: b.first})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].streamKey < out[j].streamKey })
	return out
}

// unfencedReported takes what a decision recorded off the counts.
func (r *runtimeState) unfencedReported(k projection.GroupKey, done []unfencedCount, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.group(k)
	for _, u := range done {
		if b := g.barriers[u.streamKey+" "+u.cutoverID]; b != nil {
			b.unfenced -= u.count
			b.first = ""
			b.reported = at
		}
	}
}

// addLoadSample keeps one read of a group's shards (or notes that Redis
// could not be read) and returns the load over window. Samples older than
// needed for one window are dropped.
func (r *runtimeState) addLoadSample(k projection.GroupKey, at time.Time, samples []events.ShardSample, readErr error, window time.Duration) Load {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.group(k)
	if readErr != nil {
		l := loadOver(g.load, window)
		l.Unreadable = "Redis could not be read: " + readErr.Error()
		return l
	}
	s := loadSample{at: at, shards: make(map[int]events.ShardSample, len(samples))}
	for _, x := range samples {
		s.shards[x.ShardIndex] = x
	}
	g.load = append(g.load, s)
	// Keep the newest sample at least a window old and everything after it.
	keep := 0
	for i, x := range g.load {
		if at.Sub(x.at) >= window {
			keep = i
		}
	}
	if keep > 0 {
		g.load = append(g.load[:0:0], g.load[keep:]...)
	}
	return loadOver(g.load, window)
}

// keepLoadOf forgets the autoscaling samples of every group not in on
// (autoscaling off, or the group deleted).
func (r *runtimeState) keepLoadOf(on map[projection.GroupKey]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, g := range r.groups {
		if !on[k] {
			g.load, g.evaluation = nil, nil
		}
	}
}

// setEvaluation keeps the autoscaler's latest evaluation of a group.
func (r *runtimeState) setEvaluation(k projection.GroupKey, e Evaluation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.group(k).evaluation = &e
}

// LastEvaluation is the autoscaler's latest evaluation of a group (false
// when none since this process leads).
func (c *Coordinator) LastEvaluation(k projection.GroupKey) (Evaluation, bool) {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	if g := c.rt.groups[k]; g != nil && g.evaluation != nil {
		return *g.evaluation, true
	}
	return Evaluation{}, false
}

// BarrierRead is the latest read of one source shard of a barrier.
type BarrierRead struct {
	events.BarrierRead
	At time.Time
}

// BarrierReads returns the latest read of the source shards the group's
// barriers wait on, per "<stream key> <cutover id>".
func (c *Coordinator) BarrierReads(k projection.GroupKey) map[string]BarrierRead {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	out := map[string]BarrierRead{}
	if g := c.rt.groups[k]; g != nil {
		for key, b := range g.barriers {
			out[key] = BarrierRead{BarrierRead: b.read, At: b.at}
		}
	}
	return out
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
func (c *Coordinator) MemberRuntimes(k projection.GroupKey) map[string]MemberRuntime {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	out := map[string]MemberRuntime{}
	g := c.rt.groups[k]
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

// DrainEvidence returns the last Redis evidence read for the group's removed
// shards, and when it was read.
func (c *Coordinator) DrainEvidence(k projection.GroupKey) ([]events.ShardDrain, time.Time) {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	g := c.rt.groups[k]
	if g == nil {
		return nil, time.Time{}
	}
	return append([]events.ShardDrain(nil), g.evidence...), g.evidenceAt
}

// CorrectionOpen reports whether a metadata-correction round is open for the group.
func (c *Coordinator) CorrectionOpen(k projection.GroupKey) bool { return c.rt.round(k).open }
