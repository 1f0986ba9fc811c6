package commands

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Several replicas on one log: each folds the whole log (the follower loop in
// coordinator.go tails it), so every replica serves reads; only the holder of
// the leader lease decides. A term begins when a replica acquires the lease: it
// first catches up with everything the previous leader appended, then re-arms
// every member's lease (as after a restart: it cannot know when the previous
// leader last heard from them), and only then accepts decisions and runs the
// maintenance tick, which resumes any resharding in progress from the log.
//
// Safety does not rest on the local view of the lease: the log given to New is
// fenced (redisstore.Lease.FencedLog), so an append by a replica whose term is
// over fails in Redis, atomically with the compare-and-append, and that replica
// steps down. The local view only keeps a replica from answering from a term it
// may have lost: it counts its lease as valid for leaseValidFraction of the TTL
// after the renewal started, by its own monotonic clock.

// Roles reported by Role.
const (
	RoleStandalone = "STANDALONE" // no lease configured: the only writer
	RoleLeader     = "LEADER"
	RoleFollower   = "FOLLOWER"
)

// leaseValidFraction of the TTL is how long a replica trusts a renewal, leaving
// room for clock-rate differences between it and Redis.
const leaseValidFraction = 0.8

type leadership struct {
	mu         sync.Mutex
	leading    bool
	validUntil time.Time // monotonic
	known      LeaderInfo
	ownToken   int64 // token of this replica's latest term
}

// IsLeader reports whether this coordinator may decide now: always without a
// lease; with one, while its term is running and its lease is locally valid.
func (c *Coordinator) IsLeader() bool {
	if c.cfg.Lease == nil {
		return true
	}
	c.lead.mu.Lock()
	defer c.lead.mu.Unlock()
	return c.lead.leading && time.Now().Before(c.lead.validUntil)
}

// Role is RoleStandalone, RoleLeader or RoleFollower.
func (c *Coordinator) Role() string {
	switch {
	case c.cfg.Lease == nil:
		return RoleStandalone
	case c.IsLeader():
		return RoleLeader
	}
	return RoleFollower
}

// Leader is the lease holder as this replica last saw it (refreshed every
// LeaseTTL/3); Holder is "" when nobody held it then.
func (c *Coordinator) Leader() LeaderInfo {
	if c.cfg.Lease == nil {
		return LeaderInfo{Holder: c.cfg.CoordinatorID, Self: true}
	}
	c.lead.mu.Lock()
	defer c.lead.mu.Unlock()
	info := c.lead.known
	info.Self = c.lead.leading && time.Now().Before(c.lead.validUntil)
	return info
}

// LeaderNow is Leader, re-read from Redis when the last view may be stale:
// nobody led then, or this replica did and its term has lapsed since (as
// after a pause). Followers call it to forward a write.
func (c *Coordinator) LeaderNow(ctx context.Context) LeaderInfo {
	info := c.Leader()
	if c.cfg.Lease == nil || info.Self {
		return info
	}
	c.lead.mu.Lock()
	stale := info.URL == "" || (c.lead.ownToken != 0 && info.Token == c.lead.ownToken)
	c.lead.mu.Unlock()
	if !stale {
		return info
	}
	fresh, err := c.cfg.Lease.Leader(ctx)
	if err != nil {
		return info
	}
	c.lead.mu.Lock()
	c.lead.known = fresh
	c.lead.mu.Unlock()
	fresh.Self = false // our own term, if it is, is not locally valid
	return fresh
}

// followerPoll bounds how often a follower tries the lease: a lease released
// at shutdown is taken within it (an expired one within the lease plus it).
const followerPoll = 250 * time.Millisecond

// elect runs the lease: renew every third of the lease while leading, try to
// acquire it every followerPoll (at most) while following.
func (c *Coordinator) elect() {
	renew := c.cfg.LeaseTTL / 3
	if renew < 10*time.Millisecond {
		renew = 10 * time.Millisecond
	}
	for {
		period := renew
		c.lead.mu.Lock()
		if !c.lead.leading && period > followerPoll {
			period = followerPoll
		}
		c.lead.mu.Unlock()
		select {
		case <-c.stop:
			return
		case <-time.After(period):
		}
		c.electOnce(renew)
	}
}

func (c *Coordinator) electOnce(timeout time.Duration) {
	if c.closing.Load() {
		return
	}
	lease, ttl := c.cfg.Lease, c.cfg.LeaseTTL
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	c.lead.mu.Lock()
	leading := c.lead.leading
	c.lead.mu.Unlock()
	if leading {
		ok, err := lease.Renew(ctx, ttl)
		switch {
		case err == nil && ok:
			c.lead.mu.Lock()
			c.lead.validUntil = start.Add(time.Duration(float64(ttl) * leaseValidFraction))
			c.lead.mu.Unlock()
			return
		case err == nil:
			c.stepDown("the lease was taken over or expired")
		default:
			c.cfg.Logger.Debug().Err(err).Msg("renew the leader lease")
			c.lead.mu.Lock()
			lapsed := time.Now().After(c.lead.validUntil)
			c.lead.mu.Unlock()
			if lapsed {
				c.stepDown("cannot renew the lease: " + err.Error())
			}
			return
		}
	}
	info, err := lease.Acquire(ctx, ttl)
	if err != nil {
		c.cfg.Logger.Debug().Err(err).Msg("acquire the leader lease")
		return
	}
	c.lead.mu.Lock()
	c.lead.known = info
	c.lead.mu.Unlock()
	if info.Self && c.closing.Load() {
		_ = lease.Release(ctx) // won it while shutting down: hand it on at once
		return
	}
	if !info.Self {
		return
	}
	// A new term: fold what the previous leader appended before deciding.
	var cerr error
	if err := c.dec.runInWriter(ctx, func() { cerr = c.dec.catchUp() }); err != nil || cerr != nil {
		if err == nil {
			err = cerr
		}
		c.cfg.Logger.Warn().Err(err).Msg("won the leader lease but cannot catch up with the log; releasing it")
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		_ = lease.Release(rctx)
		rcancel()
		return
	}
	bctx, bcancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = c.rep.backfillIndex(bctx)
	bcancel()
	if err != nil {
		c.cfg.Logger.Warn().Err(err).Msg("won the leader lease but cannot index the log's history; deciding anyway")
	}
	c.rt.rearm(c.state, c.now(), c.cfg.MemberLease)
	c.lead.mu.Lock()
	newTerm := c.lead.ownToken != info.Token
	c.lead.mu.Unlock()
	// The log says where a new term begins: its marker is queued to the writer
	// before this replica accepts any decision, so nothing of the term precedes
	// it. A failure (the term already over) is the next decision's problem.
	var marker *request
	if newTerm {
		marker, err = c.dec.enqueue(ctx, &request{meta: events.Meta{Actor: Actor}, fn: func(t *tx) (any, error) {
			t.emit(projection.GroupKey{}, &events.TermStarted{Term: info.Token, Holder: info.Holder, URL: info.URL})
			return nil, nil
		}})
		if err != nil {
			return
		}
	}
	c.lead.mu.Lock()
	c.lead.leading = true
	c.lead.ownToken = info.Token
	c.lead.validUntil = start.Add(time.Duration(float64(ttl) * leaseValidFraction))
	c.lead.mu.Unlock()
	c.cfg.Logger.Info().Int64("term", info.Token).Str("lastId", c.state.LastID()).Msg("leading: holds the leader lease")
	if marker != nil {
		if _, err := c.dec.await(marker); err != nil {
			c.cfg.Logger.Warn().Err(err).Int64("term", info.Token).Msg("record the start of the term")
		}
	}
}

// stepDown ends this replica's term locally; its appends are refused by the
// fenced log already.
func (c *Coordinator) stepDown(why string) {
	c.lead.mu.Lock()
	was := c.lead.leading
	c.lead.leading = false
	c.lead.mu.Unlock()
	if was {
		c.cfg.Logger.Warn().Str("reason", why).Msg("following: lost the leader lease")
	}
}

// releaseLease ends the term at shutdown so a follower takes over at once.
func (c *Coordinator) releaseLease() {
	if c.cfg.Lease == nil {
		return
	}
	c.stepDown("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.cfg.Lease.Release(ctx); err != nil {
		c.cfg.Logger.Warn().Err(err).Msg("release the leader lease")
	}
}

// fenced reports whether an append failed because the term was over, and
// steps down if so.
func (c *Coordinator) fenced(err error) bool {
	if err == nil || !errors.Is(err, events.ErrFenced) {
		return false
	}
	c.stepDown(err.Error())
	return true
}
