package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

// SetOrdering switches a group's ordering while no resharding is active and
// no barrier waits. Asking for the ordering the group has changes nothing.
func (s *Service) SetOrdering(ctx context.Context, meta events.Meta, k projection.GroupKey, in commands.OrderingInput) (projection.GroupView, error) {
	return admin(ctx, s, meta, k, "group.ordering", in.RequestedBy, func(meta events.Meta) (projection.GroupView, error) {
		if err := commands.ValidateKey(k); err != nil {
			return projection.GroupView{}, err
		}
		problems := commands.CheckAudit(in.RequestedBy, in.Reason, false)
		if in.Ordering == nil {
			problems = append(problems, "ordering: must not be null")
		}
		ordering, bad := commands.CheckOrdering(in.Ordering)
		if problems = append(problems, bad...); len(problems) > 0 {
			return projection.GroupView{}, commands.Invalid(problems)
		}
		return submit(ctx, s.dec, meta, func(t *commands.Tx) (projection.GroupView, error) { return commands.SetOrdering(t, k, ordering, in) })
	})
}

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
func fencedChange[T any](ctx context.Context, r *reconciler, meta events.Meta, keys []projection.GroupKey, layout commands.LayoutChange, decide func(t *commands.Tx, co commands.Cutovers) (T, error)) (T, error) {
	var zero T
	var prefixes []string
	for _, k := range keys {
		if !commands.ContainsString(prefixes, k.StreamPrefix) {
			prefixes = append(prefixes, k.StreamPrefix)
		}
	}
	sort.Strings(prefixes)
	for _, p := range prefixes {
		unlock := r.locks.lock(p)
		defer unlock()
	}
	for attempt := 1; ; attempt++ {
		co := commands.Cutovers{}
		for _, k := range keys {
			ev, err := r.cutover(ctx, k, layout)
			if err != nil {
				return zero, err
			}
			if ev != nil {
				co[k] = ev
			}
		}
		v, err := submit(ctx, r.dec, meta, func(t *commands.Tx) (T, error) { return decide(t, co) })
		if !errors.Is(err, commands.ErrRefence) {
			if err != nil && len(co) > 0 && !errors.Is(err, errUnknownOutcome) {
				r.lowerFences(ctx, keys) // the change did not happen
			}
			return v, err
		}
		if attempt == fenceAttempts {
			r.lowerFences(ctx, keys)
			return zero, commands.WithMsg(commands.ErrStateConflict, "the group's metadata version kept changing while its shards were fenced (%d attempts); retry", attempt)
		}
	}
}

// cutover raises the fences of the layout change layout asks for, whatever
// the group's ordering, and reads the cutover (nil when there is nothing to
// fence). Every group is fenced: producers that publish idempotently check,
// after a layout change, the shard an event id routed to before it, and
// rely on that shard's fence to know no publish with the old layout lands
// there after the change (docs/exactly-once.md).
// The barriers are an ordered group's alone (recordCutover).
func (r *reconciler) cutover(ctx context.Context, k projection.GroupKey, layout commands.LayoutChange) (*commands.CutoverEvidence, error) {
	g, ok := r.state.Group(k)
	if !ok || r.fencer == nil {
		return nil, nil
	}
	to, change := layout(g)
	if !change {
		return nil, nil
	}
	from := g.ShardCount
	ev := &commands.CutoverEvidence{Fence: g.MetadataVersion + 1, From: from, To: to}
	if st, ok := r.state.Stream(k.StreamPrefix); ok && st.Metadata {
		ev.StreamFence = st.MetadataVersion + 1
		if st.ShardCount == to {
			ev.StreamFence = st.MetadataVersion // another group of the stream changed it in this decision
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
	for s := from; s < min(to, commands.ShardSpan(g.ReadOnly())); s++ {
		shards = append(shards, events.CutoverShard{Index: s})
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	read, err := r.fencer.Cutover(rctx, k.StreamPrefix, k.ConsumerGroup, ev.Fence, ev.StreamFence, shards)
	if err != nil || len(read) != len(shards) {
		r.lowerFences(ctx, []projection.GroupKey{k})
		if err == nil {
			err = fmt.Errorf("%d cutover reads for %d shards", len(read), len(shards))
		}
		return nil, commands.Failed(commands.ErrUnavailable, err, "could not raise the ordering fences of %s in Redis", k.StreamPrefix)
	}
	ev.Shards = read[:from]
	for _, rd := range read[from:] {
		if ev.Removed == nil {
			ev.Removed = map[int]string{}
		}
		ev.Removed[rd.ShardIndex] = rd.LastID
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

// proveBarriers reads, for every group with a waiting barrier, what Redis
// shows of the shards the barriers wait on, and hands it to a decision that
// releases the barriers whose sources are all proven and records the
// unfenced entries found after the cutovers.
func (r *reconciler) proveBarriers(ctx context.Context) {
	if r.fencer == nil {
		return
	}
	for _, g := range r.state.GroupsWhere(projection.ReadOnlyGroup.HasBarriers) {
		sources := commands.BarrierSources(g)
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
		unfenced := r.evidence.unfencedDue(g.Key, now, commands.AnyProven(reads))
		k := g.Key
		if err := r.record(ctx, k, func(t *commands.Tx) { commands.ReleaseBarriers(t, k, reads, unfenced) }); err == nil && len(unfenced) > 0 {
			r.evidence.unfencedReported(k, unfenced, now)
		}
	}
}

// fenceAttempts bounds how often a layout change is fenced again because the
// group's metadata version moved in between (members joining and leaving).
const fenceAttempts = 5

// cutoverScan is how many entries after a cutover one barrier read scans for
// unfenced ones, per source shard.
const cutoverScan = 200

// unfencedReportEvery spaces resharding.unfenced_writes events of one cutover.
const unfencedReportEvery = 10 * time.Second
