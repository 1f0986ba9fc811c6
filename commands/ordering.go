package commands

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

// Fenced layout changes. Every layout change of every group (an activation,
// or a rollback after one) raises the fences of step 1 below, whatever the
// group's ordering; steps 2 (the record of the cutover and its barriers) and
// 3 are ordered resharding's (a group created with ordering KEY; README,
// "Ordered groups"):
//
//  1. The reconciler raises, on every shard of the layout before the change
//     whose keys move elsewhere, the group's fence to the metadata version the
//     change takes the group to (producers that fence their publishes with an
//     older routing version are refused from then on), and reads in the same
//     atomic step where each shard stands (its cutover id) and whether the
//     group already read and acknowledged everything up to it.
//  2. The decision that changes the layout checks the fence is exactly the
//     version it bumps to (else the reconciler fences again) and records
//     resharding.cutover with the barriers: each shard of the new layout that
//     gains keys from shards not yet done holds its entries after its own
//     cutover until those shards are proven read and acknowledged up to theirs.
//  3. The reconciler reads that proof from Redis (barrier loop) and a decision
//     records resharding.barrier_released; members (heartbeat answers) hold
//     entries beyond an unreleased barrier.
//
// A resharding of an ordered group completes only once its barriers are
// released, and no new resharding starts while any barrier waits.

// errRefence: the group moved on between raising the fences and the decision
// (another metadata version, another layout); fence again.
var errRefence = errors.New("fences are behind the group's metadata version")

// fenceAttempts bounds how often a layout change is fenced again because the
// group's metadata version moved in between (members joining and leaving).
const fenceAttempts = 5

// cutoverScan is how many entries after a cutover one barrier read scans for
// unfenced ones, per source shard.
const cutoverScan = 200

// unfencedReportEvery spaces resharding.unfenced_writes events of one cutover.
const unfencedReportEvery = 10 * time.Second

// cutoverEvidence is what the reconciler read while fencing one layout change
// of one group.
type cutoverEvidence struct {
	fence int64
	// streamFence is the stream metadata version the change takes the
	// stream to (0 without stream metadata), raised under
	// routing.StreamFenceField on the same shards.
	streamFence int64
	from, to    int
	shards      []events.CutoverRead
	// removed is where the shards from..to-1 that still exist stand (shards
	// a scale-in removed and a rollback routes again), by index.
	removed map[int]string
}

// cutovers is the cutover evidence of a layout change, per group (absent for
// a group that needs none).
type cutovers map[projection.GroupKey]*cutoverEvidence

// OrderingInput switches a group's ordering.
type OrderingInput struct {
	Ordering    *string
	RequestedBy string
	Reason      string
}

// checkOrdering validates an ordering value from a request ("" or nil is
// NONE).
func checkOrdering(o *string) (string, []string) {
	if o == nil || *o == "" || *o == events.OrderingNone {
		return "", nil
	}
	if *o == events.OrderingKey {
		return events.OrderingKey, nil
	}
	return "", []string{`ordering: must be "KEY" or "NONE"`}
}

// SetOrdering switches a group's ordering while no resharding is active and
// no barrier waits. Asking for the ordering the group has changes nothing.
func (s *Service) SetOrdering(ctx context.Context, meta events.Meta, k projection.GroupKey, in OrderingInput) (projection.GroupView, error) {
	return admin(ctx, s, meta, k, "group.ordering", in.RequestedBy, func(meta events.Meta) (projection.GroupView, error) {
		if err := ValidateKey(k); err != nil {
			return projection.GroupView{}, err
		}
		problems := checkAudit(in.RequestedBy, in.Reason, false)
		if in.Ordering == nil {
			problems = append(problems, "ordering: must not be null")
		}
		ordering, bad := checkOrdering(in.Ordering)
		if problems = append(problems, bad...); len(problems) > 0 {
			return projection.GroupView{}, withMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
		}
		return submit(ctx, s.dec, meta, func(t *tx) (projection.GroupView, error) { return setOrdering(t, k, ordering, in) })
	})
}

// setOrdering records group.ordering_changed while no resharding is active
// and no barrier waits; the ordering the group has changes nothing.
func setOrdering(t *tx, k projection.GroupKey, ordering string, in OrderingInput) (projection.GroupView, error) {
	g := t.group(k)
	if g == nil {
		return projection.GroupView{}, ErrGroupNotFound
	}
	if g.Ordering == ordering {
		return projection.ViewGroup(g), nil
	}
	if m := g.Active(); m != nil {
		return projection.GroupView{}, withMsg(ErrActiveResharding, "Group has an active migration: %s (%d -> %d, %s); switch the ordering once it finished", m.ReshardingID, m.From, m.To, m.State)
	}
	if len(g.Barriers) > 0 {
		return projection.GroupView{}, withMsg(ErrActiveResharding, "Group still has %s; switch the ordering once they are released", describeBarriers(g.Barriers))
	}
	name := events.OrderingNone
	if ordering != "" {
		name = ordering
	}
	g = t.emit(k, &events.GroupOrderingChanged{Ordering: name, RequestedBy: in.RequestedBy, Reason: in.Reason})
	return projection.ViewGroup(g), nil
}

// describeBarriers names waiting barriers for an error message.
func describeBarriers(bs []*projection.Barrier) string {
	var shards []int
	for _, b := range bs {
		if !containsInt(shards, b.Shard) {
			shards = append(shards, b.Shard)
		}
	}
	sort.Ints(shards)
	return fmt.Sprintf("ordering barriers waiting on shards %v (resharding %s)", shards, bs[0].ReshardingID)
}

// layoutChange is the shard layout a decision is about to switch a group to:
// from the current shard count to to; ok false when the decision changes no
// layout (the group is not ordered, or the resharding is not at that step).
type layoutChange func(g *projection.Group) (to int, ok bool)

// fencedChange runs a decision that may change the shard layout of the groups in
// keys, each fenced first (for ordered groups) as the package comment says.
// decide gets the evidence per group (absent for a group that needs none)
// and returns errRefence when a group moved on; the fences are then raised
// again, up to fenceAttempts times. The prefix locks are held from the first
// fence to the decision, so nothing else raises or lowers these fences in
// between. When the decision did not happen the fences are lowered again;
// when its append failed without saying whether it landed they are left to
// the shard check (checkFences), which lowers them once the projection is
// known to be behind them: lowering the fences of a cutover the log holds
// would let stale producers write after it.
func fencedChange[T any](ctx context.Context, r *reconciler, meta events.Meta, keys []projection.GroupKey, layout layoutChange, decide func(t *tx, co cutovers) (T, error)) (T, error) {
	var zero T
	var prefixes []string
	for _, k := range keys {
		if !containsString(prefixes, k.StreamPrefix) {
			prefixes = append(prefixes, k.StreamPrefix)
		}
	}
	sort.Strings(prefixes)
	for _, p := range prefixes {
		unlock := r.locks.lock(p)
		defer unlock()
	}
	for attempt := 1; ; attempt++ {
		co := cutovers{}
		for _, k := range keys {
			ev, err := r.cutover(ctx, k, layout)
			if err != nil {
				return zero, err
			}
			if ev != nil {
				co[k] = ev
			}
		}
		v, err := submit(ctx, r.dec, meta, func(t *tx) (T, error) { return decide(t, co) })
		if !errors.Is(err, errRefence) {
			if err != nil && len(co) > 0 && !errors.Is(err, errUnknownOutcome) {
				r.lowerFences(ctx, keys) // the change did not happen
			}
			return v, err
		}
		if attempt == fenceAttempts {
			r.lowerFences(ctx, keys)
			return zero, withMsg(ErrStateConflict, "the group's metadata version kept changing while its shards were fenced (%d attempts); retry", attempt)
		}
	}
}

func containsString(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// cutover raises the fences of the layout change layout asks for, whatever
// the group's ordering, and reads the cutover (nil when there is nothing to
// fence). Every group is fenced: producers that publish idempotently check,
// after a layout change, the shard an event id routed to before it, and
// rely on that shard's fence to know no publish with the old layout lands
// there after the change (README, "Exactly once across layout changes").
// The barriers are an ordered group's alone (recordCutover).
func (r *reconciler) cutover(ctx context.Context, k projection.GroupKey, layout layoutChange) (*cutoverEvidence, error) {
	g, ok := r.state.Group(k)
	if !ok || r.fencer == nil {
		return nil, nil
	}
	to, change := layout(g)
	if !change {
		return nil, nil
	}
	from := g.ShardCount
	ev := &cutoverEvidence{fence: g.MetadataVersion + 1, from: from, to: to}
	if st, ok := r.state.Stream(k.StreamPrefix); ok && st.Metadata {
		ev.streamFence = st.MetadataVersion + 1
		if st.ShardCount == to {
			ev.streamFence = st.MetadataVersion // another group of the stream changed it in this decision
		}
	}
	shards := make([]events.CutoverShard, from)
	for s := range shards {
		shards[s] = events.CutoverShard{Index: s, Raise: routing.LosesKeys(from, to, s)}
	}
	// A shard the change routes again that a scale-in removed and that is
	// not retired still holds entries its keys had before the scale-in,
	// which are older than anything the keys got on the shards that took them
	// over: its barrier starts after them, not at its start (its own fence,
	// raised by the scale-in, keeps writes out until this change is recorded).
	for s := from; s < min(to, shardSpan(g)); s++ {
		shards = append(shards, events.CutoverShard{Index: s})
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	read, err := r.fencer.Cutover(rctx, k.StreamPrefix, k.ConsumerGroup, ev.fence, ev.streamFence, shards)
	if err != nil || len(read) != len(shards) {
		r.lowerFences(ctx, []projection.GroupKey{k})
		if err == nil {
			err = fmt.Errorf("%d cutover reads for %d shards", len(read), len(shards))
		}
		return nil, failed(ErrUnavailable, err, "could not raise the ordering fences of %s in Redis", k.StreamPrefix)
	}
	ev.shards = read[:from]
	for _, rd := range read[from:] {
		if ev.removed == nil {
			ev.removed = map[int]string{}
		}
		ev.removed[rd.ShardIndex] = rd.LastID
	}
	return ev, nil
}

// lowerFences lowers the fences of groups above their metadata version:
// raised for a layout change that was never recorded (refused, or Redis
// failed half-way), or left by an earlier group of the same name, they would
// refuse producers that are up to date. The caller holds the prefix locks, or
// nothing else fences (see checkFences).
func (r *reconciler) lowerFences(ctx context.Context, keys []projection.GroupKey) {
	for _, k := range keys {
		g, ok := r.state.Group(k)
		if !ok {
			continue
		}
		span := max(g.ShardCount, g.AssignableCount)
		if m := g.Active(); m != nil {
			span = max(span, m.From, m.To)
		}
		r.lowerFencesTo(ctx, k, span, g.MetadataVersion)
		if st, ok := r.state.Stream(k.StreamPrefix); ok && st.Metadata {
			r.lowerFencesTo(ctx, projection.GroupKey{StreamPrefix: k.StreamPrefix, ConsumerGroup: routing.StreamFenceField}, span, st.MetadataVersion)
		}
	}
}

// lowerFencesTo lowers k's fences above mv on shards 0..span-1.
func (r *reconciler) lowerFencesTo(ctx context.Context, k projection.GroupKey, span int, mv int64) {
	if r.fencer == nil || span <= 0 {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	n, err := r.fencer.LowerFences(rctx, k.StreamPrefix, k.ConsumerGroup, span, mv)
	cancel()
	if err != nil {
		r.logger.Warn().Err(err).Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Msg("lower ordering fences (retried by the shard check)")
		return
	}
	if n > 0 {
		r.logger.Warn().Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Int("shards", n).Int64("metadataVersion", mv).Msg("lowered fences above the group's metadata version (a layout change that was not recorded, or a deleted group of the same name)")
	}
}

// checkFences is the shard check's safety net, for every group (the Go SDK
// fences its publishes whatever the ordering): with the prefix lock held (no
// layout change in flight here), fences above the group's metadata version
// are lowered.
func (r *reconciler) checkFences(ctx context.Context, g *projection.Group) {
	unlock := r.locks.lock(g.Key.StreamPrefix)
	defer unlock()
	r.lowerFences(ctx, []projection.GroupKey{g.Key})
}

// recordCutover is the decision's half of a layout change of k to shard
// count to: for an ordered group it checks the evidence is about this very
// change (fences at the version it bumps to, the current layout) and records
// resharding.cutover with its barriers; errRefence when it is not.
func recordCutover(t *tx, k projection.GroupKey, id string, to int, co cutovers) error {
	g := t.group(k)
	if g == nil || !t.rules.streams {
		return nil // no shard streams to fence (tests without Redis)
	}
	ev := co[k]
	if ev == nil || ev.fence != g.MetadataVersion+1 || ev.from != g.ShardCount || ev.to != to || len(ev.shards) != ev.from ||
		ev.streamFence != streamVersionAfter(t, k.StreamPrefix, to) {
		return errRefence
	}
	if !g.Ordered() {
		return nil // fenced; the barriers and their record are ordering KEY's
	}
	out := &events.ReshardingCutover{ReshardingID: id, Fence: ev.fence, FromCount: ev.from, ToCount: ev.to, Shards: make([]events.ShardCutover, len(ev.shards)),
		StreamFence: ev.streamFence}
	for i, s := range ev.shards {
		out.Shards[i] = s.ShardCutover
	}
	for target := 0; target < to; target++ {
		var sources []int
		for _, s := range routing.Sources(ev.from, to, target) {
			if !ev.shards[s].Done {
				sources = append(sources, s)
			}
		}
		if len(sources) == 0 {
			continue
		}
		after := "0-0"
		if target < ev.from {
			after = ev.shards[target].LastID
		} else if id, ok := ev.removed[target]; ok {
			after = id
		}
		out.Barriers = append(out.Barriers, events.CutoverBarrier{ShardIndex: target, After: after, Sources: sources})
	}
	t.emitAs(Actor, k, out)
	return nil
}

// barrierSources lists the distinct source shards the group's barriers wait on.
func barrierSources(g *projection.Group) []events.ShardCutover {
	seen := map[string]bool{}
	var out []events.ShardCutover
	for _, b := range g.Barriers {
		for _, s := range b.Sources {
			key := s.StreamKey + " " + s.LastID
			if !seen[key] {
				seen[key] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// proveBarriers reads, for every group with a waiting barrier, what Redis
// shows of the shards the barriers wait on, and hands it to a decision that
// releases the barriers whose sources are all proven and records the
// unfenced entries found after the cutovers.
func (r *reconciler) proveBarriers(ctx context.Context) {
	if r.fencer == nil {
		return
	}
	for _, g := range r.state.GroupsWhere(func(g *projection.Group) bool { return len(g.Barriers) > 0 }) {
		sources := barrierSources(g)
		req := make([]events.BarrierSource, len(sources))
		for i, s := range sources {
			req[i] = events.BarrierSource{ShardIndex: s.ShardIndex, StreamKey: s.StreamKey, CutoverID: s.LastID, ScanFrom: r.evidence.scanFrom(g.Key, s.StreamKey, s.LastID), Scan: cutoverScan}
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		reads, err := r.fencer.BarrierEvidence(rctx, g.Key.ConsumerGroup, req)
		cancel()
		if err != nil {
			r.logger.Warn().Err(err).Str("prefix", g.Key.StreamPrefix).Str("group", g.Key.ConsumerGroup).Msg("read barrier evidence")
			continue
		}
		now := r.now()
		r.evidence.setBarrierReads(g.Key, reads, now)
		unfenced := r.evidence.unfencedDue(g.Key, now, anyProven(reads))
		k := g.Key
		if err := r.record(ctx, k, func(t *tx) { releaseBarriers(t, k, reads, unfenced) }); err == nil && len(unfenced) > 0 {
			r.evidence.unfencedReported(k, unfenced, now)
		}
	}
}

func anyProven(reads []events.BarrierRead) bool {
	for _, rd := range reads {
		if projection.SourceProven(rd.BarrierProof) {
			return true
		}
	}
	return false
}

// releaseBarriers releases the barriers of k whose every source the reads
// prove, one barrier_released per cutover, records the unfenced entries
// found after the cutovers (per cutover), then lets the resharding advance.
func releaseBarriers(t *tx, k projection.GroupKey, reads []events.BarrierRead, unfenced []unfencedCount) {
	g := t.group(k)
	if g == nil || len(g.Barriers) == 0 {
		return
	}
	proof := map[string]events.BarrierProof{}
	for _, rd := range reads {
		proof[rd.StreamKey+" "+rd.CutoverID] = rd.BarrierProof
	}
	type release struct {
		id       string
		shards   []int
		evidence []events.BarrierProof
		seen     map[string]bool
	}
	var order []int64
	byFence := map[int64]*release{}
	owner := map[string]*projection.Barrier{} // source -> a barrier waiting on it
	for _, b := range g.Barriers {
		all := true
		var ev []events.BarrierProof
		for _, s := range b.Sources {
			key := s.StreamKey + " " + s.LastID
			if owner[key] == nil {
				owner[key] = b
			}
			p, ok := proof[key]
			if !ok || !projection.SourceProven(p) {
				all = false
				continue
			}
			ev = append(ev, p)
		}
		if !all {
			continue
		}
		r := byFence[b.Fence]
		if r == nil {
			r = &release{id: b.ReshardingID, seen: map[string]bool{}}
			byFence[b.Fence] = r
			order = append(order, b.Fence)
		}
		r.shards = append(r.shards, b.Shard)
		for _, p := range ev {
			if key := p.StreamKey + " " + p.CutoverID; !r.seen[key] {
				r.seen[key] = true
				r.evidence = append(r.evidence, p)
			}
		}
	}
	// Unfenced entries first: the release is the last word on a cutover.
	writes := map[int64]*events.UnfencedWrites{}
	var wOrder []int64
	for _, u := range unfenced {
		b := owner[u.streamKey+" "+u.cutoverID]
		if b == nil {
			continue
		}
		w := writes[b.Fence]
		if w == nil {
			w = &events.UnfencedWrites{ReshardingID: b.ReshardingID, Fence: b.Fence}
			writes[b.Fence] = w
			wOrder = append(wOrder, b.Fence)
		}
		w.Shards = append(w.Shards, events.ShardWrites{ShardIndex: u.shard, StreamKey: u.streamKey, Count: u.count, FirstID: u.first})
	}
	for _, fence := range wOrder {
		t.emitAs(Actor, k, writes[fence])
	}
	for _, fence := range order {
		r := byFence[fence]
		sort.Ints(r.shards)
		sort.Slice(r.evidence, func(i, j int) bool { return r.evidence[i].ShardIndex < r.evidence[j].ShardIndex })
		t.emitAs(Actor, k, &events.BarrierReleased{ReshardingID: r.id, Fence: fence, Shards: r.shards, Evidence: r.evidence})
	}
	if len(order) > 0 {
		advance(t, k)
	}
}
