package coordinator

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

// The evidence table is what the reconciler and the autoscaler last read from
// the Redis of the shard streams: drain evidence of removed shards, the
// entries added to a scale-out's new shards, the reads of the shards ordering
// barriers wait on, and the autoscaler's load samples and evaluations. It is
// re-read every pass, so none of it needs the log; a decision never reads it
// (what a decision needs is handed to it as evidence). Monitoring shows it.

// entriesEvidence is what the reconciler last read of a scale-out's new shards.
type entriesEvidence struct {
	reshardingID string
	written      map[int]int64
	at           time.Time
	err          bool
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

type groupEvidence struct {
	drain   []events.ShardDrain
	drainAt time.Time
	entries *entriesEvidence
	// barriers is the latest read of the shards the group's barriers wait
	// on, per "<stream key> <cutover id>" (ordering.go).
	barriers map[string]*barrierRuntime
	// load holds the autoscaler's samples (oldest first: at most
	// maxLoadSamples, see addLoadSample), latest the newest read in full,
	// and evaluation its latest evaluation (autoscale.go).
	load       []commands.LoadSample
	latest     map[int]events.ShardSample
	evaluation *commands.Evaluation
}

type evidenceTable struct {
	mu     sync.Mutex
	groups map[projection.GroupKey]*groupEvidence
	// streams: a Redis holds the shard streams (false: there is nothing to
	// read, RollbackEligibility answers from the log alone).
	streams bool
}

func newEvidenceTable(streams bool) *evidenceTable {
	return &evidenceTable{groups: map[projection.GroupKey]*groupEvidence{}, streams: streams}
}

// groupLocked returns a group's evidence, creating it; the caller holds e.mu.
func (e *evidenceTable) groupLocked(k projection.GroupKey) *groupEvidence {
	g := e.groups[k]
	if g == nil {
		g = &groupEvidence{}
		e.groups[k] = g
	}
	return g
}

// reset forgets everything: after a load or at a new term, what this process
// read before may be another leader's business since.
func (e *evidenceTable) reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.groups = map[projection.GroupKey]*groupEvidence{}
}

// dropGroup forgets a deleted group's evidence.
func (e *evidenceTable) dropGroup(k projection.GroupKey) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.groups, k)
}

// setDrain keeps the drain evidence read for a group's removed shards.
func (e *evidenceTable) setDrain(k projection.GroupKey, ev []events.ShardDrain, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.groupLocked(k)
	g.drain, g.drainAt = ev, at
}

// DrainEvidence returns the last Redis evidence read for the group's removed
// shards, and when it was read.
func (e *evidenceTable) DrainEvidence(k projection.GroupKey) ([]events.ShardDrain, time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.groups[k]
	if g == nil {
		return nil, time.Time{}
	}
	return append([]events.ShardDrain(nil), g.drain...), g.drainAt
}

// setEntriesAdded keeps what the reconciler read of a scale-out's new shards
// (failed: it could not read them).
func (e *evidenceTable) setEntriesAdded(k projection.GroupKey, reshardingID string, written map[int]int64, at time.Time, failed bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.groupLocked(k).entries = &entriesEvidence{reshardingID: reshardingID, written: written, at: at, err: failed}
}

// entriesAdded returns the last read of a resharding's new shards.
func (e *evidenceTable) entriesAdded(k projection.GroupKey, reshardingID string) (entriesEvidence, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.groups[k]
	if g == nil || g.entries == nil || g.entries.reshardingID != reshardingID {
		return entriesEvidence{}, false
	}
	return *g.entries, true
}

// RollbackEligibility refines the log's answer for a scale-out with what the
// reconciler last read of its new shards (it never waits for Redis).
func (e *evidenceTable) RollbackEligibility(ctx context.Context, g *projection.Group, m *projection.Resharding) projection.RollbackInfo {
	info := projection.StaticRollbackInfo(g, m)
	if !info.Eligible || m.To <= m.From || m.State == projection.Preparing || !e.streams {
		return info
	}
	ev, ok := e.entriesAdded(g.Key, m.ReshardingID)
	switch {
	case !ok:
		return projection.RollbackInfo{Eligible: true, Reason: "no entry seen on a new shard yet (the new shards are read from Redis every tick; the rollback itself reads them again)", Policy: "metadata"}
	case ev.err:
		return projection.RollbackInfo{Eligible: false, Reason: "cannot read the new shards from Redis right now"}
	}
	var used []string
	for s := m.From; s < m.To; s++ {
		if n := ev.written[s]; n > 0 {
			used = append(used, fmt.Sprintf("%s (%d entries)", routing.StreamKey(g.Key.StreamPrefix, s), n))
		}
	}
	if len(used) > 0 {
		return projection.RollbackInfo{Eligible: false, Reason: "entries already written to new shards: " + strings.Join(used, ", ") + ` (as of ` + ev.at.UTC().Format(time.RFC3339Nano) + `); only "policy": "drain" can roll back`, Policy: "drain"}
	}
	return projection.RollbackInfo{Eligible: true, Reason: "no entry reached a new shard as of " + ev.at.UTC().Format(time.RFC3339Nano) + " (read every tick)", Policy: "metadata"}
}

// scanFrom is where the next scan for unfenced entries after a cutover starts
// ("" at the cutover).
func (e *evidenceTable) scanFrom(k projection.GroupKey, streamKey, cutoverID string) string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if g := e.groups[k]; g != nil {
		if b := g.barriers[streamKey+" "+cutoverID]; b != nil {
			return b.scannedTo
		}
	}
	return ""
}

// setBarrierReads keeps the latest read of every source shard the group's
// barriers wait on (and forgets the ones they no longer wait on), advances
// the scans and adds up the unfenced entries they found.
func (e *evidenceTable) setBarrierReads(k projection.GroupKey, reads []events.BarrierRead, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.groupLocked(k)
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
func (e *evidenceTable) unfencedDue(k projection.GroupKey, now time.Time, force bool) []commands.UnfencedCount {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []commands.UnfencedCount
	if g := e.groups[k]; g != nil {
		for _, b := range g.barriers {
			if b.unfenced > 0 && (force || now.Sub(b.reported) >= unfencedReportEvery) {
				out = append(out, commands.UnfencedCount{Shard: b.read.ShardIndex, StreamKey: b.read.StreamKey, CutoverID: b.read.CutoverID, Count: b.unfenced, First: b.first})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StreamKey < out[j].StreamKey })
	return out
}

// unfencedReported takes what a decision recorded off the counts.
func (e *evidenceTable) unfencedReported(k projection.GroupKey, done []commands.UnfencedCount, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.groupLocked(k)
	for _, u := range done {
		if b := g.barriers[u.StreamKey+" "+u.CutoverID]; b != nil {
			b.unfenced -= u.Count
			b.first = ""
			b.reported = at
		}
	}
}

// BarrierRead is the latest read of one source shard of a barrier.
type BarrierRead struct {
	events.BarrierRead
	At time.Time
}

// BarrierReads returns the latest read of the source shards the group's
// barriers wait on, per "<stream key> <cutover id>".
func (e *evidenceTable) BarrierReads(k projection.GroupKey) map[string]BarrierRead {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]BarrierRead{}
	if g := e.groups[k]; g != nil {
		for key, b := range g.barriers {
			out[key] = BarrierRead{BarrierRead: b.read, At: b.at}
		}
	}
	return out
}

// loadBuckets is how many samples a group keeps per evaluation window: one
// per window/loadBuckets (the first sample of each such step), whatever the
// window and however often the autoscaler samples, so a group's samples take
// O(shards) memory (at most maxLoadSamples of them, each one entry per shard).
const loadBuckets = 64

// maxLoadSamples bounds the samples a group keeps: a window's buckets, the
// newest one at least a window old (where the load is measured from) and the
// newest sample.
const maxLoadSamples = loadBuckets + 2

// addLoadSample keeps one read of a group's shards (or notes that Redis
// could not be read) and returns the load over window. The kept samples are
// buckets, each at least window/loadBuckets after the one before, and the
// newest sample: a sample closer than that to the last bucket replaces the
// newest one instead of adding one. Buckets older than needed for one window
// are dropped (and, should a longer window make them more than
// maxLoadSamples, the closest to the one before). The load is then measured
// over a span between one window and one window plus one bucket (plus a
// sampling interval).
func (e *evidenceTable) addLoadSample(k projection.GroupKey, at time.Time, samples []events.ShardSample, readErr error, window time.Duration) commands.Load {
	e.mu.Lock()
	defer e.mu.Unlock()
	g := e.groupLocked(k)
	if readErr != nil {
		l := commands.LoadOver(g.load, g.latest, window)
		l.Unreadable = "Redis could not be read: " + readErr.Error()
		return l
	}
	s := commands.NewLoadSample(at, samples)
	g.latest = make(map[int]events.ShardSample, len(samples))
	for _, x := range samples {
		g.latest[x.ShardIndex] = x
	}
	step := window / loadBuckets
	if n := len(g.load); n >= 2 && g.load[n-1].At.Sub(g.load[n-2].At) < step {
		g.load[n-1] = s // the newest is no bucket yet: s takes its place
	} else {
		g.load = append(g.load, s)
	}
	// Keep the newest bucket at least a window old and everything after it.
	keep := 0
	for i, x := range g.load {
		if at.Sub(x.At) >= window {
			keep = i
		}
	}
	if keep > 0 {
		g.load = append(g.load[:0:0], g.load[keep:]...)
	}
	for len(g.load) > maxLoadSamples {
		closest := 1
		for i := 2; i < len(g.load)-1; i++ {
			if g.load[i].At.Sub(g.load[i-1].At) < g.load[closest].At.Sub(g.load[closest-1].At) {
				closest = i
			}
		}
		g.load = append(g.load[:closest], g.load[closest+1:]...)
	}
	return commands.LoadOver(g.load, g.latest, window)
}

// LoadSamples is how many autoscaling samples the group keeps (metrics).
func (e *evidenceTable) LoadSamples(k projection.GroupKey) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	if g := e.groups[k]; g != nil {
		return len(g.load)
	}
	return 0
}

// keepLoadOf forgets the autoscaling samples of every group not in on
// (autoscaling off, or the group deleted).
func (e *evidenceTable) keepLoadOf(on map[projection.GroupKey]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, g := range e.groups {
		if !on[k] {
			g.load, g.latest, g.evaluation = nil, nil, nil
		}
	}
}

// setEvaluation keeps the autoscaler's latest evaluation of a group.
func (e *evidenceTable) setEvaluation(k projection.GroupKey, ev commands.Evaluation) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.groupLocked(k).evaluation = &ev
}

// LastEvaluation is the autoscaler's latest evaluation of a group (false
// when none since this process leads).
func (e *evidenceTable) LastEvaluation(k projection.GroupKey) (commands.Evaluation, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if g := e.groups[k]; g != nil && g.evaluation != nil {
		return *g.evaluation, true
	}
	return commands.Evaluation{}, false
}

// RuntimeView is what this process holds only in memory, for monitoring
// (httpapi.Runtime): the runtime table and the evidence table.
type RuntimeView struct {
	*commands.RuntimeTable
	*evidenceTable
}
