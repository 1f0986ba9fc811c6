package commands

import (
	"context"
	"errors"
	"sync"
	"time"

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
	c  *Coordinator
	mu sync.Mutex
	// prefixes holds one lock per stream prefix with side effects in flight.
	prefixes map[string]*prefixLock
}

type prefixLock struct {
	mu    sync.Mutex
	users int
}

func newReconciler(c *Coordinator) *reconciler {
	return &reconciler{c: c, prefixes: map[string]*prefixLock{}}
}

// lockPrefix serialises side effects on a prefix's streams; call the returned
// function to unlock.
func (r *reconciler) lockPrefix(prefix string) func() {
	r.mu.Lock()
	l := r.prefixes[prefix]
	if l == nil {
		l = &prefixLock{}
		r.prefixes[prefix] = l
	}
	l.users++
	r.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		r.mu.Lock()
		if l.users--; l.users == 0 {
			delete(r.prefixes, prefix)
		}
		r.mu.Unlock()
	}
}

// provisionGroup provisions a new group's shard streams 0..count-1. For a
// prefix the coordinator never used (known false) it first lists the keys
// Redis already has for it: the decision refuses a stranger's prefix.
func (r *reconciler) provisionGroup(ctx context.Context, k projection.GroupKey, count int, known bool) (foreign []string, err error) {
	c := r.c
	if c.shards == nil {
		return nil, ErrRedisNotConfigured
	}
	if !known {
		keys, err := c.shards.ExistingKeys(ctx, k.StreamPrefix, count)
		if err != nil {
			return nil, failed(ErrProvisioningFailed, err, "could not check Redis for existing stream keys of %s", k.StreamPrefix)
		}
		if len(keys) > 0 {
			return keys, nil // refused by the decision: nothing is created
		}
	}
	if err := c.shards.Provision(ctx, k.StreamPrefix, k.ConsumerGroup, 0, count); err != nil {
		return nil, failed(ErrProvisioningFailed, err, "could not provision %s shards 0..%d for group %s in Redis", k.StreamPrefix, count-1, k.ConsumerGroup)
	}
	// Fences an earlier group of this name left would refuse the new
	// group's producers (metadata version 1).
	r.lowerFencesTo(ctx, k, count, 1)
	return nil, nil
}

// provisionFor provisions a resharding's target streams 0..to-1 (idempotent).
func (r *reconciler) provisionFor(ctx context.Context, k projection.GroupKey, to int) error {
	c := r.c
	if to <= 0 || c.cfg.DisableProvisioning {
		return nil
	}
	if c.shards == nil {
		return ErrRedisNotConfigured
	}
	unlock := r.lockPrefix(k.StreamPrefix)
	defer unlock()
	if err := c.shards.Provision(ctx, k.StreamPrefix, k.ConsumerGroup, 0, to); err != nil {
		return failed(ErrProvisioningFailed, err, "could not provision %s shards 0..%d in Redis (the resharding stays PREPARING; repeat the request to resume)", k.StreamPrefix, to-1)
	}
	if g, ok := c.state.Group(k); ok {
		r.lowerFencesTo(ctx, k, to, g.MetadataVersion) // shards a deleted group of this name fenced
	}
	return nil
}

// entriesForRollback reads the entries added to the new shards of a scale-out
// past PREPARING (nil for anything else), the evidence a rollback decides on.
func (r *reconciler) entriesForRollback(ctx context.Context, k projection.GroupKey, id string) (map[int]int64, error) {
	c := r.c
	g, ok := c.state.Group(k)
	if !ok || c.shards == nil {
		return nil, nil
	}
	m := g.Resharding(id)
	if m == nil || m.To <= m.From || m.State == projection.Preparing || g.ActiveResharding != id {
		return nil, nil
	}
	written, err := c.shards.EntriesAdded(ctx, k.StreamPrefix, newShards(m))
	c.rt.setEntriesAdded(k, id, written, c.now(), err != nil) // what monitoring shows, fresher
	if err != nil {
		return nil, failed(ErrUnavailable, err, "could not read the new shards from Redis to check them for entries")
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
	c := r.c
	if !c.ready.Load() || !c.IsLeader() {
		return
	}
	for _, g := range c.state.GroupsWhere(inPass) {
		if m := g.Active(); m != nil {
			switch m.State {
			case projection.Preparing:
				r.resumePreparing(ctx, g.Key, m)
			case projection.Draining, projection.RollingBack:
				if p, ok := r.prove(ctx, g.Key, removedShards(m)); ok {
					_ = r.decide(ctx, g.Key, func(t *tx) { t.drainStep(g.Key, m.ReshardingID, p) })
				}
			case projection.Active:
				if m.To > m.From && c.shards != nil {
					rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					written, err := c.shards.EntriesAdded(rctx, g.Key.StreamPrefix, newShards(m))
					cancel()
					c.rt.setEntriesAdded(g.Key, m.ReshardingID, written, c.now(), err != nil)
				}
			}
			// What the steps above decided is in the projection now: a
			// resharding that just completed retires in the same pass.
			if fresh, ok := c.state.Group(g.Key); ok {
				g = fresh
			} else {
				continue
			}
		}
		r.retire(ctx, g)
	}
}

// decide submits a reconciler decision as the coordinator; the error says
// whether it was recorded.
func (r *reconciler) decide(ctx context.Context, k projection.GroupKey, fn func(t *tx)) error {
	_, err := r.c.submit(ctx, events.Meta{Actor: Actor}, func(t *tx) (any, error) {
		fn(t)
		return nil, nil
	})
	if err != nil {
		r.c.cfg.Logger.Debug().Err(err).Str("group", k.ConsumerGroup).Msg("reconciler decision")
	}
	return err
}

// resumePreparing provisions a PREPARING resharding's streams again and
// activates it (a coordinator died, or Redis failed, between the two).
func (r *reconciler) resumePreparing(ctx context.Context, k projection.GroupKey, m *projection.Resharding) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.provisionFor(rctx, k, m.To); err != nil {
		r.c.cfg.Logger.Warn().Err(err).Str("group", k.ConsumerGroup).Msg("resume provisioning")
		return
	}
	id := m.ReshardingID
	_, err := r.c.fencedChange(ctx, events.Meta{Actor: Actor}, []projection.GroupKey{k}, activation(func(projection.GroupKey) string { return id }), func(t *tx, co map[projection.GroupKey]*cutoverEvidence) (any, error) {
		return nil, t.activate(k, id, co)
	})
	if err != nil {
		r.c.cfg.Logger.Debug().Err(err).Str("group", k.ConsumerGroup).Msg("resume activation")
	}
}

// prove reads the drain evidence of shards (false when Redis could not be read).
func (r *reconciler) prove(ctx context.Context, k projection.GroupKey, shards []int) (drainProof, bool) {
	c := r.c
	if c.shards == nil {
		return drainProof{shards: shards, ok: true}, true // nothing to prove against
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ev, err := c.shards.DrainEvidence(rctx, k.StreamPrefix, shards)
	if err != nil {
		c.cfg.Logger.Warn().Err(err).Str("prefix", k.StreamPrefix).Msg("read drain evidence")
		return drainProof{}, false
	}
	c.rt.setEvidence(k, ev, c.now())
	return drainProof{shards: shards, ev: ev, ok: allDrained(ev)}, true
}

// retire deletes (or, by policy, keeps) the streams the group's last finished
// resharding took out of use, when its decision says so (retireStep), and
// records the deletion.
func (r *reconciler) retire(ctx context.Context, g *projection.Group) {
	c := r.c
	n := len(g.Reshardings)
	if n == 0 {
		return
	}
	m := g.Reshardings[n-1]
	if !m.Terminal() || m.Retired {
		return
	}
	removed := removedShards(m)
	if len(removed) == 0 {
		return
	}
	p, ok := r.prove(ctx, g.Key, removed)
	if !ok {
		return
	}
	var keys []string
	if err := r.decide(ctx, g.Key, func(t *tx) { keys = t.retireStep(g.Key, m.ReshardingID, p) }); err != nil || len(keys) == 0 {
		return
	}
	unlock := r.lockPrefix(g.Key.StreamPrefix)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := c.shards.Delete(rctx, keys)
	cancel()
	unlock()
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			c.cfg.Logger.Warn().Err(err).Strs("keys", keys).Msg("retire shard streams")
		}
		return
	}
	_ = r.decide(ctx, g.Key, func(t *tx) { t.retired(g.Key, m.ReshardingID, keys) })
}

// inPass reports whether the pass has anything to do for a group: an active
// resharding, or a finished one whose removed shards are not retired yet.
func inPass(g *projection.Group) bool {
	if g.ActiveResharding != "" {
		return true
	}
	n := len(g.Reshardings)
	if n == 0 {
		return false
	}
	m := g.Reshardings[n-1]
	lo, hi := m.RemovedRange()
	return m.Terminal() && !m.Retired && hi > lo
}
