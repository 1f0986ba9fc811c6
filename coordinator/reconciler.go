package coordinator

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// The reconciler does everything that touches shard streams: provisioning,
// reading drain evidence (XINFO GROUPS), reading the entries added to a
// scale-out's new shards (rollback eligibility), retiring streams and
// recreating lost ones (repair.go). It runs outside the writer: it reads the
// committed projection, does its Redis work, and hands what it found to a
// decision as evidence (the events carry it). A slow or dead Redis delays
// reshardings; it never delays a decision, a heartbeat or a read. Every step
// is idempotent and re-derived from the log on every pass, so a coordinator
// that dies between two steps resumes where the log says it was.
//
// Side effects on the streams of one prefix (every group of the prefix shares
// them) are serialised by a per-prefix lock, held by commands that provision
// too.
type reconciler struct {
	reconcilerDeps
	prov     Provisioner
	drains   DrainReader
	retirer  Retirer
	fencer   Fencer
	repairer Repairer
	remover  Remover
}

// reconcilerDeps is what the reconciler is built from.
type reconcilerDeps struct {
	shards   ShardStore // nil: no Redis holds the shard streams
	state    *projection.State
	evidence *evidenceTable
	dec      writer
	locks    *prefixLocks
	rules    commands.Rules
	ready    *lifecycle
	lead     interface{ IsLeader() bool }
	now      func() time.Time
	logger   zerolog.Logger
}

func newReconciler(deps reconcilerDeps) *reconciler {
	r := &reconciler{reconcilerDeps: deps}
	if deps.shards != nil {
		r.prov, r.drains, r.retirer, r.fencer, r.repairer, r.remover = deps.shards, deps.shards, deps.shards, deps.shards, deps.shards, deps.shards
	}
	return r
}

// prefixLocks holds one lock per stream prefix with side effects in flight.
type prefixLocks struct {
	mu       sync.Mutex
	prefixes map[string]*prefixLock
}

type prefixLock struct {
	mu    sync.Mutex
	users int
}

func newPrefixLocks() *prefixLocks { return &prefixLocks{prefixes: map[string]*prefixLock{}} }

// lock serialises side effects on a prefix's streams; call the returned
// function to unlock.
func (p *prefixLocks) lock(prefix string) func() {
	p.mu.Lock()
	l := p.prefixes[prefix]
	if l == nil {
		l = &prefixLock{}
		p.prefixes[prefix] = l
	}
	l.users++
	p.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		p.mu.Lock()
		if l.users--; l.users == 0 {
			delete(p.prefixes, prefix)
		}
		p.mu.Unlock()
	}
}

// provisionGroup provisions a new group's shard streams 0..count-1 and its
// consumer group on each (at the stream's end), after reading what Redis
// holds under the keys: a key the coordinator does not manage refuses it
// (claim), nothing created. The caller holds the prefix's lock.
func (r *reconciler) provisionGroup(ctx context.Context, k projection.GroupKey, p commands.GroupPlan) (commands.Provisioned, error) {
	if r.prov == nil {
		return commands.Provisioned{}, commands.ErrRedisNotConfigured
	}
	shards := commands.ShardRange(0, p.Count)
	kc, err := r.readKeys(ctx, k.StreamPrefix, shards, p.Unknown)
	if err != nil {
		return commands.Provisioned{}, err
	}
	created, err := commands.Claim(p.Stream, p.Leftovers, kc, shards)
	if err != nil {
		return commands.Provisioned{}, err
	}
	existed, err := r.prov.Provision(ctx, k.StreamPrefix, k.ConsumerGroup, 0, p.Count)
	if err != nil {
		return commands.Provisioned{}, commands.Failed(commands.ErrProvisioningFailed, err, "could not provision %s shards 0..%d for group %s in Redis", k.StreamPrefix, p.Count-1, k.ConsumerGroup)
	}
	r.configureIDMP(ctx, k.StreamPrefix, createdShards(p.Stream, created, shards))
	out := commands.Provisioned{Created: created}
	for s := 0; s < p.Count; s++ {
		if !commands.ContainsInt(existed, s) {
			out.Made = append(out.Made, s)
		}
	}
	for _, s := range existed {
		// On a stream the coordinator created, a consumer group of this
		// name is one it provisioned before (an earlier group of the name,
		// an attempt whose decision failed): its own.
		if !commands.ContainsInt(created, s) && !p.Stream.Created(s) {
			out.Foreign = append(out.Foreign, s)
		}
	}
	// Fences an earlier group of this name left would refuse the new
	// group's producers (its starting metadata version).
	r.lowerFencesTo(ctx, k, p.Count, p.MV)
	return out, nil
}

// unprovision destroys the consumer groups a provisioning made for a group
// whose decision then refused it (a quota another decision of the batch
// reached first, a member refused after its group's registration): nobody
// records them, so nobody would ever remove them. The caller holds the
// prefix's lock it provisioned under, so no group of the name uses them.
// Best effort: the shard streams it created stay (empty).
func (r *reconciler) unprovision(ctx context.Context, k projection.GroupKey, p commands.Provisioned) {
	if r.remover == nil || len(p.Made) == 0 {
		return
	}
	if _, exists := r.metadataVersion(k); exists {
		return // recorded after all: they are its
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.remover.DestroyGroups(rctx, k.StreamPrefix, k.ConsumerGroup, p.Made); err != nil {
		r.logger.Warn().Err(err).Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Msg("destroy the consumer groups of a refused create")
	}
}

// provisionFor provisions a resharding's target streams 0..to-1 (idempotent).
func (r *reconciler) provisionFor(ctx context.Context, k projection.GroupKey, to int) error {
	if to <= 0 || !r.rules.Provisioning {
		return nil
	}
	if r.prov == nil {
		return commands.ErrRedisNotConfigured
	}
	unlock := r.locks.lock(k.StreamPrefix)
	defer unlock()
	mv, ok := r.metadataVersion(k)
	if !ok {
		// Deleted meanwhile: its consumer groups are being removed
		// (removal.go), and none is provisioned for it again.
		return commands.ErrGroupNotFound
	}
	if _, err := r.prov.Provision(ctx, k.StreamPrefix, k.ConsumerGroup, 0, to); err != nil {
		return commands.Failed(commands.ErrProvisioningFailed, err, "could not provision %s shards 0..%d in Redis (the resharding stays PREPARING; repeat the request to resume)", k.StreamPrefix, to-1)
	}
	st, _ := r.state.Stream(k.StreamPrefix)
	r.configureIDMP(ctx, k.StreamPrefix, createdShards(st, nil, commands.ShardRange(0, to)))
	r.lowerFencesTo(ctx, k, to, mv) // shards a deleted group of this name fenced
	return nil
}

// metadataVersion is k's metadata version in the committed state (false:
// no such group).
func (r *reconciler) metadataVersion(k projection.GroupKey) (int64, bool) {
	var mv int64
	var ok bool
	r.state.Read(func(st projection.Reader) {
		if g := st.Group(k); g.Exists() {
			mv, ok = g.MetadataVersion(), true
		}
	})
	return mv, ok
}

// entriesForRollback reads the entries added to the new shards of a scale-out
// past PREPARING (nil for anything else), the evidence a rollback decides on.
func (r *reconciler) entriesForRollback(ctx context.Context, k projection.GroupKey, id string) (map[int]int64, error) {
	g, ok := r.state.Group(k)
	if !ok || r.drains == nil {
		return nil, nil
	}
	m := g.Resharding(id)
	if m == nil || m.To <= m.From || m.State == projection.Preparing || g.ActiveResharding != id {
		return nil, nil
	}
	written, err := r.drains.EntriesAdded(ctx, k.StreamPrefix, newShards(m))
	r.evidence.setEntriesAdded(k, id, written, r.now(), err != nil) // what monitoring shows, fresher
	if err != nil {
		return nil, commands.Failed(commands.ErrUnavailable, err, "could not read the new shards from Redis to check them for entries")
	}
	return written, nil
}

func newShards(m *projection.Resharding) []int {
	var out []int
	for i := m.From; i < m.To; i++ {
		out = append(out, i)
	}
	return out
}

// pass moves every resharding that needs Redis one step: resume provisioning
// of a PREPARING one, prove removed shards drained (then revoke, complete),
// retire a finished one's streams, and keep the latest read of an active
// scale-out's new shards for rollback eligibility.
func (r *reconciler) pass(ctx context.Context) {
	if !r.ready.ready.Load() || !r.lead.IsLeader() {
		return
	}
	// First: a deleted group's consumer group on a removed shard holds the
	// other groups' drain proofs.
	r.removePass(ctx)
	for _, g := range r.state.GroupsWhere(inPass) {
		if !r.mayAct(ctx) {
			return
		}
		if m := g.Active(); m != nil {
			switch m.State {
			case projection.Preparing:
				r.resumePreparing(ctx, g.Key, m)
			case projection.Draining, projection.RollingBack:
				if p, ok := r.prove(ctx, g.Key, commands.RemovedShards(m)); ok {
					_ = r.record(ctx, g.Key, func(t *commands.Tx) { commands.DrainStep(t, g.Key, m.ReshardingID, p) })
				}
			case projection.Active:
				if m.To > m.From && r.drains != nil {
					rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					written, err := r.drains.EntriesAdded(rctx, g.Key.StreamPrefix, newShards(m))
					cancel()
					r.evidence.setEntriesAdded(g.Key, m.ReshardingID, written, r.now(), err != nil)
				}
			}
			// What the steps above decided is in the projection now: a
			// resharding that just completed retires in the same pass.
			if fresh, ok := r.state.Group(g.Key); ok {
				g = fresh
			} else {
				continue
			}
		}
		r.retire(ctx, g)
	}
}

// decideAs submits a reconciler decision as the coordinator; the error says
// whether it was recorded.
func decideAs[T any](ctx context.Context, r *reconciler, k projection.GroupKey, decide func(t *commands.Tx) (T, error)) (T, error) {
	v, err := submit(ctx, r.dec, events.Meta{Actor: commands.Actor}, decide)
	if err != nil {
		r.logger.Debug().Err(err).Str("group", k.ConsumerGroup).Msg("reconciler decision")
	}
	return v, err
}

// record submits a reconciler decision that answers nothing.
func (r *reconciler) record(ctx context.Context, k projection.GroupKey, decide func(t *commands.Tx)) error {
	_, err := decideAs(ctx, r, k, func(t *commands.Tx) (struct{}, error) {
		decide(t)
		return struct{}{}, nil
	})
	return err
}

// resumePreparing provisions a PREPARING resharding's streams again and
// activates it (a coordinator died, or Redis failed, between the two).
func (r *reconciler) resumePreparing(ctx context.Context, k projection.GroupKey, m *projection.Resharding) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.provisionFor(rctx, k, m.To); err != nil {
		r.logger.Warn().Err(err).Str("group", k.ConsumerGroup).Msg("resume provisioning")
		return
	}
	id := m.ReshardingID
	_, err := fencedChange(ctx, r, events.Meta{Actor: commands.Actor}, []projection.GroupKey{k}, commands.Activation(func(projection.GroupKey) string { return id }), func(t *commands.Tx, co commands.Cutovers) (struct{}, error) {
		return struct{}{}, commands.Activate(t, k, id, co)
	})
	if err != nil {
		r.logger.Debug().Err(err).Str("group", k.ConsumerGroup).Msg("resume activation")
	}
}

// prove reads the drain evidence of shards (false when Redis could not be read).
func (r *reconciler) prove(ctx context.Context, k projection.GroupKey, shards []int) (commands.DrainProof, bool) {
	if r.drains == nil {
		return commands.DrainProof{Shards: shards, OK: true}, true // nothing to prove against
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ev, err := r.drains.DrainEvidence(rctx, k.StreamPrefix, shards)
	if err != nil {
		r.logger.Warn().Err(err).Str("prefix", k.StreamPrefix).Msg("read drain evidence")
		return commands.DrainProof{}, false
	}
	r.evidence.setDrain(k, ev, r.now())
	return commands.DrainProof{Shards: shards, Ev: ev, OK: commands.AllDrained(ev)}, true
}

// retire deletes (or, by policy, keeps) the streams the group's last finished
// resharding took out of use, when its decision says so (retireStep), and
// records the deletion.
func (r *reconciler) retire(ctx context.Context, g *projection.Group) {
	n := len(g.Reshardings)
	if n == 0 {
		return
	}
	m := g.Reshardings[n-1]
	if !m.Terminal() || m.Retired {
		return
	}
	removed := commands.RemovedShards(m)
	if len(removed) == 0 {
		return
	}
	p, ok := r.prove(ctx, g.Key, removed)
	if !ok {
		return
	}
	var kept []string
	keys, err := decideAs(ctx, r, g.Key, func(t *commands.Tx) ([]string, error) {
		del, keep := commands.RetireStep(t, g.Key, m.ReshardingID, p)
		kept = keep
		return del, nil
	})
	if err != nil || len(keys) == 0 {
		return
	}
	unlock := r.locks.lock(g.Key.StreamPrefix)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = r.retirer.Delete(rctx, keys)
	cancel()
	unlock()
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			r.logger.Warn().Err(err).Strs("keys", keys).Msg("retire shard streams")
		}
		return
	}
	_ = r.record(ctx, g.Key, func(t *commands.Tx) { commands.Retired(t, g.Key, m.ReshardingID, keys, kept) })
}

// inPass reports whether the pass has anything to do for a group: an active
// resharding, or a finished one whose removed shards are not retired yet.
func inPass(g projection.ReadOnlyGroup) bool {
	if g.ActiveReshardingID() != "" {
		return true
	}
	m := g.LastResharding()
	if !m.Exists() {
		return false
	}
	lo, hi := m.RemovedRange()
	return m.Terminal() && !m.Retired() && hi > lo
}
