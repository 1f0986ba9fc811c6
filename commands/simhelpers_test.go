package commands_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/wire"
)

// The pieces of the deterministic simulation in sim_test.go: a virtual clock, a
// fake of the Redis that holds the shard streams, and the two client models.

// simClock is a commands.Clock the simulation moves by hand.
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

// fakeGroup is one Redis consumer group on a shard stream: lag is entries added
// but not yet delivered, pending entries delivered but not acknowledged.
type fakeGroup struct {
	lag, pending int64
}

// fakeStream is one shard stream.
type fakeStream struct {
	added  int64 // entries-added
	groups map[string]*fakeGroup
}

// fakeShards implements commands.ShardStore over in-memory streams. It also lets
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
}

var _ commands.ShardStore = (*fakeShards)(nil)

func newFakeShards(clock *simClock) *fakeShards {
	return &fakeShards{clock: clock, streams: map[string]*fakeStream{}, unknownLag: map[string]time.Time{}, retired: map[string]bool{}, lost: map[string]bool{}, fences: map[string]int64{}}
}

func streamKey(prefix string, i int) string { return fmt.Sprintf("%s:%d", prefix, i) }

func (f *fakeShards) down() bool { return f.clock.Now().Before(f.downUntil) }

func (f *fakeShards) Provision(ctx context.Context, prefix, group string, from, to int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return errFakeRedis
	}
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
		}
	}
	return nil
}

func (f *fakeShards) ExistingKeys(ctx context.Context, prefix string, count int) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return nil, errFakeRedis
	}
	var out []string
	for i := 0; i < count; i++ {
		if f.streams[streamKey(prefix, i)] != nil {
			out = append(out, streamKey(prefix, i))
		}
	}
	return out, nil
}

func (f *fakeShards) DrainEvidence(ctx context.Context, prefix string, shards []int) ([]events.ShardDrain, error) {
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
			gd := events.GroupDrain{Name: name, Pending: g.pending, Lag: g.lag}
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
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return nil, errFakeRedis
	}
	out := map[int]int64{}
	for _, s := range shards {
		if st := f.streams[streamKey(prefix, s)]; st != nil {
			out[s] = st.added
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
				if g := st.groups[name]; g.pending != 0 || g.lag != 0 {
					f.violations = append(f.violations, fmt.Sprintf("stream %s deleted with unconsumed entries: group %s pending=%d lag=%d", k, name, g.pending, g.lag))
				}
			}
		}
		delete(f.streams, k)
		delete(f.unknownLag, k)
		f.retired[k] = true
	}
	return nil
}

func (f *fakeShards) Damage(ctx context.Context, prefix, group string, shards []int) ([]events.ShardRepair, error) {
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
			st.groups[group] = &fakeGroup{lag: st.added}
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
		delete(f.streams, k)
		delete(f.unknownLag, k)
		return true
	}
	delete(st.groups, group)
	return true
}

// An entry's id in the fake is "<n>-0", n counting from 1 in the order they
// were added; a group has delivered the first added-lag of them, and the
// last pending of those are pending.

func fakeID(n int64) string { return fmt.Sprintf("%d-0", n) }

func fakeSeq(id string) int64 {
	var n int64
	fmt.Sscanf(id, "%d-", &n)
	return n
}

func (f *fakeShards) Cutover(ctx context.Context, prefix, group string, fence int64, shards []events.CutoverShard) ([]events.CutoverRead, error) {
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
		if st := f.streams[k]; st != nil && st.added > 0 {
			r.LastID = fakeID(st.added)
			g := st.groups[group]
			r.Done = g != nil && g.lag == 0 && g.pending == 0
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
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return nil, errFakeRedis
	}
	out := make([]events.BarrierRead, len(sources))
	for i, src := range sources {
		r := events.BarrierRead{BarrierProof: events.BarrierProof{ShardIndex: src.ShardIndex, StreamKey: src.StreamKey, CutoverID: src.CutoverID}, ScannedTo: src.ScanFrom}
		if st := f.streams[src.StreamKey]; st != nil {
			r.Exists = true
			if g := st.groups[group]; g != nil {
				delivered := st.added - g.lag
				r.LastDelivered = fakeID(delivered)
				if firstPending := delivered - g.pending + 1; g.pending > 0 && firstPending <= fakeSeq(src.CutoverID) {
					r.Pending = min(g.pending, fakeSeq(src.CutoverID)-firstPending+1)
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

// publish is XADD ... NOMKSTREAM: false when the stream does not exist.
func (f *fakeShards) publish(prefix string, shard int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.streams[streamKey(prefix, shard)]
	if st == nil {
		return false
	}
	st.added++
	for _, g := range st.groups {
		g.lag++
	}
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
	g.pending = g.lag
	g.lag = 0
	return true
}

// ack acknowledges what is in flight without reading more (a revoked shard draining).
func (f *fakeShards) ack(prefix, group string, shard int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.streams[streamKey(prefix, shard)]; st != nil && st.groups[group] != nil {
		st.groups[group].pending = 0
	}
}

func (f *fakeShards) pending(prefix, group string, shard int) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st := f.streams[streamKey(prefix, shard)]; st != nil && st.groups[group] != nil {
		return st.groups[group].pending
	}
	return 0
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
			if g.pending != 0 || g.lag != 0 || f.lagUnknownLocked(k) {
				out = append(out, fmt.Sprintf("%s group %s pending=%d lag=%d lagUnknown=%v", k, name, g.pending, g.lag, f.lagUnknownLocked(k)))
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
				n += g.lag + g.pending
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
			out[s] = st.added
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
		fmt.Fprintf(&b, "  %s added=%d", k, st.added)
		for _, name := range sortedKeys(st.groups) {
			g := st.groups[name]
			fmt.Fprintf(&b, " [%s lag=%d pending=%d unknownLag=%v]", name, g.lag, g.pending, f.lagUnknownLocked(k))
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
)

func (k clientKind) String() string {
	if k == springClient {
		return "spring"
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
