package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/wire"
)

// The pieces of the deterministic simulation in sim_test.go: a virtual clock, a
// fake of the Redis that holds the shard streams, and the two client models.

// simClock is a coordinator.Clock the simulation moves by hand.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func newSimClock(start time.Time) *simClock { return &simClock{now: start} }

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *simClock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// errFakeRedis is what the fake answers while an outage window is open.
var errFakeRedis = errors.New("fake redis: connection refused")

// fakeEntry is one stream entry. Its id is "<id>-0", ids counting from 1
// across every stream of the fake, like Redis's time-based ids (a stream
// recreated after a loss gets ids above the ones it had). Entries a keyed
// producer wrote carry their partition key, their sequence number among the
// entries of that key (publish order) and, when tagged (ordering KEY), the
// routing version they were published with (routing.FenceField).
type fakeEntry struct {
	id     int64
	key    string
	seq    int
	rv     int64
	tagged bool
}

// fakePending is an entry delivered to a consumer and not acknowledged: the
// index of the entry in its stream, the consumer, and when it was delivered
// (XAUTOCLAIM's idle time).
type fakePending struct {
	idx      int
	consumer string
	at       time.Time
}

// fakeGroup is one Redis consumer group on a shard stream: the stream's first
// delivered entries have been delivered (the last of them is the group's
// last-delivered-id), and pending lists those not acknowledged, in id order.
type fakeGroup struct {
	delivered int
	pending   []fakePending
}

// lag is the number of entries added but not yet delivered.
func (g *fakeGroup) lag(st *fakeStream) int64 { return int64(len(st.entries) - g.delivered) }

// pendingCount is the number of entries delivered but not acknowledged.
func (g *fakeGroup) pendingCount() int64 { return int64(len(g.pending)) }

// fakeStream is one shard stream.
type fakeStream struct {
	entries []fakeEntry // in id order; the fake never trims
	groups  map[string]*fakeGroup
}

// added is XINFO STREAM's entries-added.
func (st *fakeStream) added() int64 { return int64(len(st.entries)) }

// lastID is the stream's last-generated-id ("0-0" when empty).
func (st *fakeStream) lastID() string {
	if len(st.entries) == 0 {
		return "0-0"
	}
	return fakeID(st.entries[len(st.entries)-1].id)
}

// lastDelivered is the group's last-delivered-id ("0-0" when it delivered nothing).
func (st *fakeStream) lastDelivered(g *fakeGroup) string {
	if g.delivered == 0 {
		return "0-0"
	}
	return fakeID(st.entries[g.delivered-1].id)
}

// fakeShards implements coordinator.ShardStore over in-memory streams. It also lets
// the simulation publish and consume, hide a group's lag (Redis reports lag=null),
// and fail every operation for a while.
type fakeShards struct {
	mu         sync.Mutex
	clock      *simClock
	streams    map[string]*fakeStream
	unknownLag map[string]time.Time // stream key -> lag reported as null until then
	downUntil  time.Time            // every operation fails before this time
	ops        int
	deleted    int
	// violations: streams deleted while a group still had entries to consume,
	// retired streams recreated by a repair.
	violations []string
	// retired: streams deleted by retirement and not provisioned since.
	retired map[string]bool
	// lost: routed streams (or their group) Redis lost and nobody recreated yet.
	lost    map[string]bool
	repairs int
	// fences per "<stream key> <group>" (ordered resharding).
	fences map[string]int64
	// lastID is the id of the last entry added to any stream.
	lastID int64
	// dropped: keyed entries that vanished with their stream (lost, or
	// deleted by a retirement), for the ordered simulation's ledger.
	dropped []fakeEntry
	// provisionDown makes Provision fail (and nothing else): Redis refusing
	// writes after the reads before them.
	provisionDown bool
	// typed are keys holding a value of another type than a stream (key ->
	// TYPE): KeyTypes reports them, provisioning over them fails.
	typed map[string]string
	// late, if set, runs after an evidence read computed its answer and
	// before the caller gets it (f.mu released): a slow Redis, during which
	// the simulation lets time pass and members heartbeat, so the decision
	// that carries the evidence meets a state that moved on.
	late func(call string)
}

// answerLate runs the late hook (deferred before f.mu is locked, so it runs
// after the unlock).
func (f *fakeShards) answerLate(call string) {
	if f.late != nil {
		f.late(call)
	}
}

var _ coordinator.ShardStore = (*fakeShards)(nil)

func newFakeShards(clock *simClock) *fakeShards {
	return &fakeShards{clock: clock, streams: map[string]*fakeStream{}, unknownLag: map[string]time.Time{}, retired: map[string]bool{}, lost: map[string]bool{}, fences: map[string]int64{}}
}

func streamKey(prefix string, i int) string { return fmt.Sprintf("%s:%d", prefix, i) }

func (f *fakeShards) down() bool { return f.clock.Now().Before(f.downUntil) }

func (f *fakeShards) Provision(ctx context.Context, prefix, group string, from, to int) ([]int, error) {
	defer f.answerLate("Provision")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() || f.provisionDown {
		return nil, errFakeRedis
	}
	for i := from; i < to; i++ {
		if typ, ok := f.typed[streamKey(prefix, i)]; ok {
			return nil, fmt.Errorf("provision %s: WRONGTYPE a %s", streamKey(prefix, i), typ)
		}
	}
	var existed []int
	for i := from; i < to; i++ {
		k := streamKey(prefix, i)
		delete(f.retired, k)
		delete(f.lost, k)
		st := f.streams[k]
		if st == nil {
			st = &fakeStream{groups: map[string]*fakeGroup{}}
			f.streams[k] = st
		}
		if st.groups[group] == nil {
			// XGROUP CREATE ... $ MKSTREAM ENTRIESREAD <entries-added>: known lag 0.
			st.groups[group] = &fakeGroup{}
		} else {
			existed = append(existed, i)
		}
	}
	return existed, nil
}

func (f *fakeShards) DestroyGroups(ctx context.Context, prefix, group string, shards []int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return errFakeRedis
	}
	for _, s := range shards {
		if st := f.streams[streamKey(prefix, s)]; st != nil {
			delete(st.groups, group)
		}
	}
	return nil
}

func (f *fakeShards) KeyTypes(ctx context.Context, keys []string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return nil, errFakeRedis
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = "none"
		if typ, ok := f.typed[k]; ok {
			out[i] = typ
		} else if f.streams[k] != nil {
			out[i] = "stream"
		}
	}
	return out, nil
}

func (f *fakeShards) CreateStreams(ctx context.Context, keys []string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return nil, errFakeRedis
	}
	var existed []string
	for _, k := range keys {
		if _, typed := f.typed[k]; typed || f.streams[k] != nil {
			existed = append(existed, k)
		}
	}
	if len(existed) > 0 {
		return existed, nil
	}
	for _, k := range keys {
		delete(f.retired, k)
		delete(f.lost, k)
		f.streams[k] = &fakeStream{groups: map[string]*fakeGroup{}}
	}
	return nil, nil
}

func (f *fakeShards) DrainEvidence(ctx context.Context, prefix string, shards []int) ([]events.ShardDrain, error) {
	defer f.answerLate("DrainEvidence")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return nil, errFakeRedis
	}
	out := make([]events.ShardDrain, 0, len(shards))
	for _, s := range shards {
		k := streamKey(prefix, s)
		d := events.ShardDrain{ShardIndex: s, StreamKey: k, Exists: true, Groups: []events.GroupDrain{}}
		st := f.streams[k]
		if st == nil {
			d.Exists = false
			out = append(out, d)
			continue
		}
		for _, name := range sortedKeys(st.groups) {
			g := st.groups[name]
			gd := events.GroupDrain{Name: name, Pending: g.pendingCount(), Lag: g.lag(st)}
			if f.lagUnknownLocked(k) {
				gd.Lag = -1
			}
			d.Groups = append(d.Groups, gd)
		}
		out = append(out, d)
	}
	return out, nil
}

func (f *fakeShards) EntriesAdded(ctx context.Context, prefix string, shards []int) (map[int]int64, error) {
	defer f.answerLate("EntriesAdded")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return nil, errFakeRedis
	}
	out := map[int]int64{}
	for _, s := range shards {
		if st := f.streams[streamKey(prefix, s)]; st != nil {
			out[s] = st.added()
		} else {
			out[s] = 0
		}
	}
	return out, nil
}

func (f *fakeShards) Delete(ctx context.Context, keys []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return errFakeRedis
	}
	for _, k := range keys {
		if st := f.streams[k]; st != nil {
			f.deleted++
			for _, name := range sortedKeys(st.groups) {
				if g := st.groups[name]; g.pendingCount() != 0 || g.lag(st) != 0 {
					f.violations = append(f.violations, fmt.Sprintf("stream %s deleted with unconsumed entries: group %s pending=%d lag=%d", k, name, g.pendingCount(), g.lag(st)))
				}
			}
			f.drop(st)
		}
		delete(f.streams, k)
		delete(f.unknownLag, k)
		f.retired[k] = true
	}
	return nil
}

func (f *fakeShards) Damage(ctx context.Context, prefix, group string, shards []int) ([]events.ShardRepair, error) {
	defer f.answerLate("Damage")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return nil, errFakeRedis
	}
	var out []events.ShardRepair
	for _, s := range shards {
		k := streamKey(prefix, s)
		st := f.streams[k]
		if st != nil && st.groups[group] != nil {
			continue
		}
		out = append(out, events.ShardRepair{ShardIndex: s, StreamKey: k, StreamMissing: st == nil, GroupMissing: true})
	}
	return out, nil
}

// Repair recreates a lost stream (empty) or a lost group at the stream's
// start (everything in the stream is to be read again).
func (f *fakeShards) Repair(ctx context.Context, prefix, group string, shards []int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return errFakeRedis
	}
	for _, s := range shards {
		k := streamKey(prefix, s)
		if f.retired[k] {
			f.violations = append(f.violations, fmt.Sprintf("retired stream %s recreated by a repair", k))
		}
		delete(f.lost, k)
		st := f.streams[k]
		if st == nil {
			st = &fakeStream{groups: map[string]*fakeGroup{}}
			f.streams[k] = st
		}
		if st.groups[group] == nil {
			st.groups[group] = &fakeGroup{} // nothing delivered: all of it is lag
			f.repairs++
		}
	}
	return nil
}

// lose drops a stream (lost with its entries) or only the group's consumer
// group on it, as a Redis restart without persistence or an operator would.
func (f *fakeShards) lose(prefix, group string, shard int, wholeStream bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := streamKey(prefix, shard)
	st := f.streams[k]
	if st == nil {
		return false
	}
	f.lost[k] = true
	if wholeStream {
		f.drop(st)
		delete(f.streams, k)
		delete(f.unknownLag, k)
		return true
	}
	delete(st.groups, group)
	return true
}

// drop records the keyed entries of a stream about to vanish.
func (f *fakeShards) drop(st *fakeStream) {
	for _, e := range st.entries {
		if e.key != "" {
			f.dropped = append(f.dropped, e)
		}
	}
}

// takeDropped returns the keyed entries that vanished since the last call.
func (f *fakeShards) takeDropped() []fakeEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.dropped
	f.dropped = nil
	return d
}

// An entry's id in the fake is "<n>-0" (fakeEntry).

func fakeID(n int64) string { return fmt.Sprintf("%d-0", n) }

func fakeSeq(id string) int64 {
	head, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(head, 10, 64)
	return n
}

func (f *fakeShards) Cutover(ctx context.Context, prefix, group string, fence, streamFence int64, shards []events.CutoverShard) ([]events.CutoverRead, error) {
	defer f.answerLate("Cutover")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return nil, errFakeRedis
	}
	out := make([]events.CutoverRead, len(shards))
	for i, sh := range shards {
		k := streamKey(prefix, sh.Index)
		if sh.Raise && f.fences[k+" "+group] < fence {
			f.fences[k+" "+group] = fence
		}
		r := events.CutoverRead{ShardCutover: events.ShardCutover{ShardIndex: sh.Index, StreamKey: k, LastID: "0-0", Fenced: sh.Raise}, Done: true}
		if st := f.streams[k]; st != nil && len(st.entries) > 0 {
			r.LastID = st.lastID()
			g := st.groups[group]
			r.Done = g != nil && g.lag(st) == 0 && g.pendingCount() == 0
		}
		out[i] = r
	}
	return out, nil
}

func (f *fakeShards) LowerFences(ctx context.Context, prefix, group string, count int, mv int64) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return 0, errFakeRedis
	}
	n := 0
	for i := 0; i < count; i++ {
		if key := streamKey(prefix, i) + " " + group; f.fences[key] > mv {
			f.fences[key] = mv
			n++
		}
	}
	return n, nil
}

func (f *fakeShards) BarrierEvidence(ctx context.Context, group string, sources []events.BarrierSource) ([]events.BarrierRead, error) {
	defer f.answerLate("BarrierEvidence")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return nil, errFakeRedis
	}
	out := make([]events.BarrierRead, len(sources))
	for i, src := range sources {
		// The scan for entries after the cutover without the fence field
		// starts after ScanFrom (the cutover when empty), as the script's.
		from := src.ScanFrom
		if from == "" {
			from = src.CutoverID
		}
		r := events.BarrierRead{BarrierProof: events.BarrierProof{ShardIndex: src.ShardIndex, StreamKey: src.StreamKey, CutoverID: src.CutoverID}, ScannedTo: from}
		st := f.streams[src.StreamKey]
		if st == nil {
			out[i] = r
			continue
		}
		r.Exists = true
		r.LastGenerated = st.lastID()
		cut := fakeSeq(src.CutoverID)
		if g := st.groups[group]; g != nil {
			r.LastDelivered = st.lastDelivered(g)
			for _, p := range g.pending {
				if st.entries[p.idx].id <= cut {
					r.Pending++
				}
			}
		}
		after := fakeSeq(from)
		first := sort.Search(len(st.entries), func(i int) bool { return st.entries[i].id > after })
		for _, e := range st.entries[first:min(len(st.entries), first+src.Scan)] {
			r.ScannedTo = fakeID(e.id)
			if !e.tagged {
				r.Unfenced++
				if r.FirstUnfenced == "" {
					r.FirstUnfenced = fakeID(e.id)
				}
			}
		}
		out[i] = r
	}
	return out, nil
}

// fence is the group's fence on a shard (0 when none).
func (f *fakeShards) fence(prefix, group string, shard int) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fences[streamKey(prefix, shard)+" "+group]
}

func (f *fakeShards) takeViolations() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.violations
	f.violations = nil
	return v
}

func (f *fakeShards) lagUnknownLocked(k string) bool {
	until, ok := f.unknownLag[k]
	return ok && f.clock.Now().Before(until)
}

// publish is XADD ... NOMKSTREAM of an entry without key: false when the
// stream does not exist.
func (f *fakeShards) publish(prefix string, shard int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.streams[streamKey(prefix, shard)]
	if st == nil {
		return false
	}
	f.lastID++
	st.entries = append(st.entries, fakeEntry{id: f.lastID})
	return true
}

// consume is one poll of a reader: acknowledge what it had in flight (claiming
// entries a previous owner left pending), then take what arrived since. It
// reports false when the stream or the group is missing (NOGROUP).
func (f *fakeShards) consume(prefix, group string, shard int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.streams[streamKey(prefix, shard)]
	if st == nil || st.groups[group] == nil {
		return false
	}
	g := st.groups[group]
	g.pending = g.pending[:0]
	for i := g.delivered; i < len(st.entries); i++ {
		g.pending = append(g.pending, fakePending{idx: i, at: f.clock.Now()})
	}
	g.delivered = len(st.entries)
	return true
}

// ack acknowledges what is in flight without reading more (a revoked shard draining).
func (f *fakeShards) ack(prefix, group string, shard int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.streams[streamKey(prefix, shard)]; st != nil && st.groups[group] != nil {
		st.groups[group].pending = nil
	}
}

func (f *fakeShards) pending(prefix, group string, shard int) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.streams[streamKey(prefix, shard)]; st != nil && st.groups[group] != nil {
		return st.groups[group].pendingCount()
	}
	return 0
}

// --- what the Go SDK does to a shard stream (ordered simulation) ---

// publishResult is the answer of the SDK's publish script (producer.PublishScript).
type publishResult int

const (
	published       publishResult = iota
	publishStale                  // RSCSTALE: the fence is above the routing version; nothing written
	publishNoStream               // NOMKSTREAM: the stream does not exist; nothing written
)

// publishFenced is producer.PublishScript on one shard for one entry of key
// (its seq-th): refused when the group's fence is above rv; the entry is
// tagged with rv when tag (the routing says ordering KEY).
func (f *fakeShards) publishFenced(prefix, group string, shard int, rv int64, tag bool, key string, seq int) (fakeEntry, publishResult) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := streamKey(prefix, shard)
	if f.fences[k+" "+group] > rv {
		return fakeEntry{}, publishStale
	}
	st := f.streams[k]
	if st == nil {
		return fakeEntry{}, publishNoStream
	}
	f.lastID++
	e := fakeEntry{id: f.lastID, key: key, seq: seq, tagged: tag}
	if tag {
		e.rv = rv
	}
	st.entries = append(st.entries, e)
	return e, published
}

// claim is XAUTOCLAIM from 0-0 over the whole pending list: the entries
// pending for at least minIdle become consumer's (delivered now), returned
// in id order; skip names entries not to claim (the reader's own). ok is false
// on NOGROUP.
func (f *fakeShards) claim(prefix, group string, shard int, consumer string, minIdle time.Duration, skip map[int64]bool) (out []fakeEntry, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.streams[streamKey(prefix, shard)]
	if st == nil || st.groups[group] == nil {
		return nil, false
	}
	g := st.groups[group]
	now := f.clock.Now()
	for i := range g.pending {
		p := &g.pending[i]
		e := st.entries[p.idx]
		if skip[e.id] || now.Sub(p.at) < minIdle {
			continue
		}
		p.consumer, p.at = consumer, now
		out = append(out, e)
	}
	return out, true
}

// pendingFor is XPENDING key group id id 1 consumer: whether entry id is
// pending for consumer (false on NOGROUP).
func (f *fakeShards) pendingFor(prefix, group string, shard int, consumer string, id int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.streams[streamKey(prefix, shard)]
	if st == nil || st.groups[group] == nil {
		return false
	}
	for _, p := range st.groups[group].pending {
		if st.entries[p.idx].id == id && p.consumer == consumer {
			return true
		}
	}
	return false
}

// readNew is XREADGROUP > COUNT n: up to n entries after the group's
// last-delivered-id, now pending for consumer. ok is false on NOGROUP.
func (f *fakeShards) readNew(prefix, group string, shard int, consumer string, n int) (out []fakeEntry, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.streams[streamKey(prefix, shard)]
	if st == nil || st.groups[group] == nil {
		return nil, false
	}
	g := st.groups[group]
	now := f.clock.Now()
	for ; g.delivered < len(st.entries) && len(out) < n; g.delivered++ {
		g.pending = append(g.pending, fakePending{idx: g.delivered, consumer: consumer, at: now})
		out = append(out, st.entries[g.delivered])
	}
	return out, true
}

// ackIDs is XACK of the given entry ids.
func (f *fakeShards) ackIDs(prefix, group string, shard int, ids []int64) {
	if len(ids) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.streams[streamKey(prefix, shard)]
	if st == nil || st.groups[group] == nil {
		return
	}
	g := st.groups[group]
	acked := make(map[int64]bool, len(ids))
	for _, id := range ids {
		acked[id] = true
	}
	kept := g.pending[:0]
	for _, p := range g.pending {
		if !acked[st.entries[p.idx].id] {
			kept = append(kept, p)
		}
	}
	g.pending = kept
}

// where describes an entry's place for a failure report: its stream, whether
// the group delivered it and to whom it is pending.
func (f *fakeShards) where(prefix, group string, shard int, id int64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := streamKey(prefix, shard)
	st := f.streams[k]
	if st == nil {
		return k + " (no stream)"
	}
	g := st.groups[group]
	if g == nil {
		return k + " (no group)"
	}
	for _, p := range g.pending {
		if st.entries[p.idx].id == id {
			return fmt.Sprintf("%s pending for %s since %s", k, p.consumer, p.at.Format("15:04:05.000"))
		}
	}
	for i := g.delivered; i < len(st.entries); i++ {
		if st.entries[i].id == id {
			return k + " not delivered yet (last delivered " + st.lastDelivered(g) + ")"
		}
	}
	return k + " delivered and acknowledged"
}

// isLost reports whether Redis lost the shard's stream or group and nobody
// recreated it yet.
func (f *fakeShards) isLost(prefix string, shard int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lost[streamKey(prefix, shard)]
}

func (f *fakeShards) exists(prefix string, shard int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.streams[streamKey(prefix, shard)] != nil
}

func (f *fakeShards) setLagUnknown(prefix string, shard int, until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unknownLag[streamKey(prefix, shard)] = until
}

func (f *fakeShards) clearFaults() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unknownLag = map[string]time.Time{}
	f.downUntil = time.Time{}
}

func (f *fakeShards) setDown(until time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.downUntil = until
}

// undrained lists why the given shards are not drained right now (nil when every
// group on every existing stream has pending 0 and a known lag of 0). The truth,
// not what DrainEvidence would report: a hidden lag counts as not drained.
func (f *fakeShards) undrained(prefix string, shards []int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, s := range shards {
		k := streamKey(prefix, s)
		st := f.streams[k]
		if st == nil {
			continue
		}
		for _, name := range sortedKeys(st.groups) {
			g := st.groups[name]
			if g.pendingCount() != 0 || g.lag(st) != 0 || f.lagUnknownLocked(k) {
				out = append(out, fmt.Sprintf("%s group %s pending=%d lag=%d lagUnknown=%v", k, name, g.pendingCount(), g.lag(st), f.lagUnknownLocked(k)))
			}
		}
	}
	return out
}

// unconsumed sums lag and pending over the streams of shards >= from.
func (f *fakeShards) unconsumed(prefix string, from int) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for s := from; s < 64; s++ {
		if st := f.streams[streamKey(prefix, s)]; st != nil {
			for _, g := range st.groups {
				n += g.lag(st) + g.pendingCount()
			}
		}
	}
	return n
}

func (f *fakeShards) entriesAdded(prefix string, shards []int) map[int]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[int]int64{}
	for _, s := range shards {
		if st := f.streams[streamKey(prefix, s)]; st != nil {
			out[s] = st.added()
		}
	}
	return out
}

// describe renders every stream for a failure report.
func (f *fakeShards) describe() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	keys := make([]string, 0, len(f.streams))
	for k := range f.streams {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if len(keys[i]) != len(keys[j]) {
			return len(keys[i]) < len(keys[j])
		}
		return keys[i] < keys[j]
	})
	for _, k := range keys {
		st := f.streams[k]
		fmt.Fprintf(&b, "  %s added=%d last=%s", k, st.added(), st.lastID())
		for _, name := range sortedKeys(st.groups) {
			g := st.groups[name]
			fmt.Fprintf(&b, " [%s lag=%d pending=%d delivered=%s unknownLag=%v]", name, g.lag(st), g.pendingCount(), st.lastDelivered(g), f.lagUnknownLocked(k))
		}
		b.WriteString("\n")
	}
	if f.down() {
		fmt.Fprintf(&b, "  (redis down until %s)\n", f.downUntil.Format("15:04:05.000"))
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// --- client models ---

type clientKind int

const (
	pythonClient clientKind = iota // adopts assigned on OK, never reports revokes, never leaves
	springClient                   // DRAINING/REVOKED reports, graceful leave
	// goClient is the Go SDK member runtime (client/member): Spring's protocol,
	// plus entry by entry processing with an assignment lease and, in ordered
	// groups, barriers, routing versions and takeover claims (simorder_test.go).
	goClient
)

func (k clientKind) String() string {
	switch k {
	case springClient:
		return "spring"
	case goClient:
		return "go"
	}
	return "python"
}

// simMember is one logical member process as a client library runs it.
type simMember struct {
	id   string
	kind clientKind
	// incarnation counts process starts and protocol resets of this id: member
	// epochs only have to grow within one incarnation.
	incarnation int
	alive       bool // the process runs
	gone        bool // replaced by a new id; never restarts
	epoch, mv   int64
	// reading: shards it polls (started only on an OK that assigned them).
	reading map[int]bool
	// draining (spring): revoked shards whose in-flight entries it still processes.
	draining map[int]bool
	// revoked (spring): REVOKED reports to send once.
	revoked map[int]bool
	paused  bool // python after INVALID_REQUEST/UNSUPPORTED: keeps its shards, polls nothing
	leaving bool // spring graceful leave in progress (memberEpoch -1)
	// slowUntil (spring): a handler is stuck; in-flight work on revoked shards
	// does not finish before then.
	slowUntil time.Time
	nextHB    time.Time
	restartAt time.Time
	// lastAdopted is the highest member epoch adopted in this incarnation.
	lastAdopted int64
	// sdk is the Go SDK runtime's state (goClient only).
	sdk *sdkState
}

func newSimMember(id string, kind clientKind, now time.Time) *simMember {
	m := &simMember{id: id, kind: kind, alive: true, nextHB: now}
	m.reset()
	return m
}

// reset is a process restart or a protocol reset (FENCED / UNKNOWN_MEMBER_ID):
// epoch 0, nothing read.
func (m *simMember) reset() {
	m.incarnation++
	m.epoch, m.mv = 0, 0
	m.reading, m.draining, m.revoked = map[int]bool{}, map[int]bool{}, map[int]bool{}
	m.paused, m.leaving = false, false
	m.lastAdopted = 0
	m.slowUntil = time.Time{}
	if m.sdk != nil {
		m.sdk.reset()
	}
}

// readSet is every shard whose entries the member is processing: polled shards
// and revoked shards still draining in-flight work.
func (m *simMember) readSet() []int {
	var out []int
	for s := range m.reading {
		out = append(out, s)
	}
	for s := range m.draining {
		if !m.reading[s] {
			out = append(out, s)
		}
	}
	sort.Ints(out)
	return out
}

func setList(set map[int]bool) []int {
	out := make([]int, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Ints(out)
	return out
}

func shardIDs(idx []int) []wire.ShardRef {
	out := make([]wire.ShardRef, 0, len(idx))
	for _, s := range idx {
		out = append(out, wire.ShardRef{ShardIndex: s})
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// --- projection comparison ---

// msgpackDiff lists up to max paths where two msgpack documents differ.
func msgpackDiff(a, b []byte, max int) []string {
	var va, vb any
	if err := msgpack.Unmarshal(a, &va); err != nil {
		return []string{"decode live: " + err.Error()}
	}
	if err := msgpack.Unmarshal(b, &vb); err != nil {
		return []string{"decode replayed: " + err.Error()}
	}
	var out []string
	diffValue("$", va, vb, &out, max)
	return out
}

func diffValue(path string, a, b any, out *[]string, max int) {
	if len(*out) >= max {
		return
	}
	switch ta := a.(type) {
	case map[string]any:
		tb, ok := b.(map[string]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: %T vs %T", path, a, b))
			return
		}
		keys := map[string]bool{}
		for k := range ta {
			keys[k] = true
		}
		for k := range tb {
			keys[k] = true
		}
		for _, k := range sortedKeys(keys) {
			diffValue(path+"."+k, ta[k], tb[k], out, max)
		}
	case []any:
		tb, ok := b.([]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: %v vs %v", path, short(a), short(b)))
			return
		}
		if len(ta) != len(tb) {
			*out = append(*out, fmt.Sprintf("%s: len %d vs %d", path, len(ta), len(tb)))
		}
		for i := 0; i < len(ta) && i < len(tb); i++ {
			diffValue(fmt.Sprintf("%s[%d]", path, i), ta[i], tb[i], out, max)
		}
	default:
		if !reflect.DeepEqual(a, b) {
			*out = append(*out, fmt.Sprintf("%s: live %v vs replayed %v", path, short(a), short(b)))
		}
	}
}

func short(v any) string {
	s := fmt.Sprintf("%#v", v)
	if len(s) > 120 {
		s = s[:120] + "..."
	}
	return s
}
