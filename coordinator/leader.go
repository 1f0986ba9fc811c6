package coordinator

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
)

// Several replicas on one log: each folds the whole log (the replica's
// follower tails it), so every replica serves reads; only the holder of
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

// Leadership is this replica's place among --ha replicas (httpapi.Leadership):
// it runs the lease and tells the other parts whether they may decide.
type Leadership struct {
	leadershipDeps
	mu         sync.Mutex
	leading    bool
	validUntil time.Time // monotonic
	known      LeaderInfo
	ownToken   int64 // token of this replica's latest term
}

// leadershipDeps is what the leadership is built from.
type leadershipDeps struct {
	lease  LeaderLease // nil: the only writer, always leading
	ttl    time.Duration
	id     string // the coordinator id (Leader without a lease)
	life   *lifecycle
	logger zerolog.Logger
	// position is the projection's last id (logged when a term begins).
	position func() string
	// steppedDown, if set, is called when this replica's term ends.
	steppedDown func()
}

// termStart is what a replica that won the lease does before it decides,
// wired by New from the parts that do it.
type termStart struct {
	// catchUp folds, in the writer, what the previous leader appended.
	catchUp func(ctx context.Context) error
	// backfill brings the history index up to the log's end.
	backfill func(ctx context.Context) error
	// rearm gives every member a fresh lease and forgets the evidence read
	// in an earlier term.
	rearm func()
	// mark queues the record of the new term; wait waits for it.
	mark func(ctx context.Context, info LeaderInfo) (wait func() error, err error)
}

func newLeadership(deps leadershipDeps) *Leadership { return &Leadership{leadershipDeps: deps} }

// IsLeader reports whether this coordinator may decide now: always without a
// lease; with one, while its term is running and its lease is locally valid.
func (l *Leadership) IsLeader() bool {
	if l.lease == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leading && time.Now().Before(l.validUntil)
}

// Role is RoleStandalone, RoleLeader or RoleFollower.
func (l *Leadership) Role() string {
	switch {
	case l.lease == nil:
		return RoleStandalone
	case l.IsLeader():
		return RoleLeader
	}
	return RoleFollower
}

// Leader is the lease holder as this replica last saw it (refreshed every
// LeaseTTL/3); Holder is "" when nobody held it then.
func (l *Leadership) Leader() LeaderInfo {
	if l.lease == nil {
		return LeaderInfo{Holder: l.id, Self: true}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	info := l.known
	info.Self = l.leading && time.Now().Before(l.validUntil)
	return info
}

// LeaderNow is Leader, re-read from Redis when the last view may be stale:
// nobody led then, or this replica did and its term has lapsed since (as
// after a pause). Followers call it to forward a write.
func (l *Leadership) LeaderNow(ctx context.Context) LeaderInfo {
	info := l.Leader()
	if l.lease == nil || info.Self {
		return info
	}
	l.mu.Lock()
	stale := info.URL == "" || (l.ownToken != 0 && info.Token == l.ownToken)
	l.mu.Unlock()
	if !stale {
		return info
	}
	fresh, err := l.lease.Leader(ctx)
	if err != nil {
		return info
	}
	l.mu.Lock()
	l.known = fresh
	l.mu.Unlock()
	fresh.Self = false // our own term, if it is, is not locally valid
	return fresh
}

// followerPoll bounds how often a follower tries the lease: a lease released
// at shutdown is taken within it (an expired one within the lease plus it).
const followerPoll = 250 * time.Millisecond

// elect runs the lease: renew every third of the lease while leading, try to
// acquire it every followerPoll (at most) while following.
func (l *Leadership) elect(term termStart) {
	renew := l.ttl / 3
	if renew < 10*time.Millisecond {
		renew = 10 * time.Millisecond
	}
	for {
		period := renew
		l.mu.Lock()
		if !l.leading && period > followerPoll {
			period = followerPoll
		}
		l.mu.Unlock()
		select {
		case <-l.life.stop:
			return
		case <-time.After(period):
		}
		l.electOnce(renew, term)
	}
}

// electOnce renews or acquires the lease once; a won lease starts a term
// (term: what the replica does before it decides, given by whoever runs
// the election, so that the leadership holds no part that holds it).
func (l *Leadership) electOnce(timeout time.Duration, term termStart) {
	if l.life.closing.Load() {
		return
	}
	lease, ttl := l.lease, l.ttl
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	l.mu.Lock()
	leading := l.leading
	l.mu.Unlock()
	if leading {
		ok, err := lease.Renew(ctx, ttl)
		switch {
		case err == nil && ok:
			l.mu.Lock()
			l.validUntil = start.Add(time.Duration(float64(ttl) * leaseValidFraction))
			l.mu.Unlock()
			return
		case err == nil:
			l.stepDown("the lease was taken over or expired")
		default:
			l.logger.Debug().Err(err).Msg("renew the leader lease")
			l.mu.Lock()
			lapsed := time.Now().After(l.validUntil)
			l.mu.Unlock()
			if lapsed {
				l.stepDown("cannot renew the lease: " + err.Error())
			}
			return
		}
	}
	info, err := lease.Acquire(ctx, ttl)
	if err != nil {
		l.logger.Debug().Err(err).Msg("acquire the leader lease")
		return
	}
	l.mu.Lock()
	l.known = info
	l.mu.Unlock()
	if info.Self && l.life.closing.Load() {
		_ = lease.Release(ctx) // won it while shutting down: hand it on at once
		return
	}
	if !info.Self {
		return
	}
	// A new term: fold what the previous leader appended before deciding.
	// A log that lost what this replica holds is no reason to hand the
	// lease on: the leader is who restores it (guard.go).
	if err := term.catchUp(ctx); err != nil && !errors.Is(err, commands.ErrLogLost) {
		l.logger.Warn().Err(err).Msg("won the leader lease but cannot catch up with the log; releasing it")
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		_ = lease.Release(rctx)
		rcancel()
		return
	}
	bctx, bcancel := context.WithTimeout(context.Background(), 30*time.Second)
	err = term.backfill(bctx)
	bcancel()
	if err != nil {
		l.logger.Warn().Err(err).Msg("won the leader lease but cannot index the log's history; deciding anyway")
	}
	term.rearm()
	l.mu.Lock()
	newTerm := l.ownToken != info.Token
	l.mu.Unlock()
	// The log says where a new term begins: its marker is queued to the writer
	// before this replica accepts any decision, so nothing of the term precedes
	// it. A failure (the term already over) is the next decision's problem.
	var wait func() error
	if newTerm && l.life.lost.Load() == nil {
		if wait, err = term.mark(ctx, info); err != nil {
			return
		}
	}
	l.mu.Lock()
	l.leading = true
	l.ownToken = info.Token
	l.validUntil = start.Add(time.Duration(float64(ttl) * leaseValidFraction))
	l.mu.Unlock()
	l.logger.Info().Int64("term", info.Token).Str("lastId", l.position()).Msg("leading: holds the leader lease")
	if wait != nil {
		if err := wait(); err != nil {
			l.logger.Warn().Err(err).Int64("term", info.Token).Msg("record the start of the term")
		}
	}
}

// stepDown ends this replica's term locally; its appends are refused by the
// fenced log already.
func (l *Leadership) stepDown(why string) {
	l.mu.Lock()
	was := l.leading
	l.leading = false
	l.mu.Unlock()
	if was {
		l.logger.Warn().Str("reason", why).Msg("following: lost the leader lease")
		if l.steppedDown != nil {
			l.steppedDown()
		}
	}
}

// release ends the term at shutdown so a follower takes over at once.
func (l *Leadership) release() {
	if l.lease == nil {
		return
	}
	l.stepDown("shutting down")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.lease.Release(ctx); err != nil {
		l.logger.Warn().Err(err).Msg("release the leader lease")
	}
}

// fenced reports whether an append failed because the term was over, and
// steps down if so.
func (l *Leadership) fenced(err error) bool {
	if err == nil || !errors.Is(err, events.ErrFenced) {
		return false
	}
	l.stepDown(err.Error())
	return true
}
