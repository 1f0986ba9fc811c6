package coordinator

// A heartbeat that can wait for news. A member that asks for it (the HTTP
// header X-Rsc-Hold-Ms; the reference's clients never send it and see no
// change) gets its answer at once when the answer says something it did not
// report: a shard to revoke or to start, a new metadata version, a fence, a
// status other than OK. Otherwise its heartbeat is held (waiters.go) until
// a change concerns its answer, or its bound passes, and is then decided
// again: the answer it gets is the one a heartbeat sent at that moment
// would get, and a heartbeat held to its bound counts as the member's
// heartbeat then (its lease is renewed at the start and at the end). A
// held heartbeat that ends with no change appends nothing, as any steady
// heartbeat.
//
// Held heartbeats are bounded per principal and in total (past either, the
// answer is given at once), are answered at once when the server shuts down
// or this replica loses the leadership, and one member has at most one: a
// newer heartbeat answers the older at once.
//
// A crash is seen when its connection drops. A member whose held
// heartbeat's caller went away without an answer (its process died, its
// connection closed) and that does not heartbeat again within the grace is
// expired then (member.expired, with the reason), not when its lease ends.
// The grace is runtime only: a timer and the count of the member's renewals
// when its heartbeat was held. The decision at its end (expireDropped)
// expires the member only when no renewal came since; a restart or a new
// term forgets the timer, and the lease applies as before. A partition that
// closes nothing is bounded by the lease, as before.

import (
	"context"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// holdBound is how long a heartbeat asking for d is held: at most the
// configured maximum and half the member lease, so a member whose held
// answer is lost in transit still has time to heartbeat again.
func (hb *heartbeats) holdBound(d time.Duration) time.Duration {
	return min(d, hb.hold.maxBound, hb.rules.MemberLease/2)
}

// held answers a heartbeat that asked to be held (see above): the answer,
// how it was reached, and the error of a heartbeat that failed
// (Service.HeldHeartbeat).
func (hb *heartbeats) held(ctx context.Context, k projection.GroupKey, id, principal string, req *wire.HeartbeatRequest, h HoldRequest) (*wire.HeartbeatResponse, HoldOutcome, error) {
	resp, err := hb.beat(ctx, k, id, principal, req)
	switch {
	case err != nil:
		return nil, HoldAnswered, err
	case !hb.holds.on():
		return resp, HoldOff, nil
	case h.Bound <= 0 || !quiet(req, resp):
		return resp, HoldAnswered, nil
	}
	w := &waiter{k: k, id: id, principal: principal, mv: resp.MetadataVersion,
		assigned: indexesOf(resp.Assignment.AssignedShards), pending: indexesOf(resp.Assignment.PendingShards)}
	if why := hb.holds.register(w); why != "" {
		return resp, why, nil
	}
	// Read after the answer's renewal: a later renewal means the member is
	// still there.
	token := hb.table.BeatsOf(k, id)
	if hb.heldAnswerMoved(w) {
		// A batch applied between the answer and the registration.
		hb.holds.fire(w, HoldWoken)
	}
	why := hb.await(ctx, w, hb.holdBound(h.Bound), h.Release)
	switch why {
	case HoldDropped:
		hb.dropped(k, id, token)
		return nil, HoldDropped, ctx.Err()
	case HoldReleased:
		return resp, HoldReleased, nil
	}
	again, err := hb.beat(ctx, k, id, principal, req)
	if ctx.Err() != nil {
		// Gone while it was decided: the answer reaches nobody.
		hb.dropped(k, id, hb.table.BeatsOf(k, id))
		return nil, HoldDropped, ctx.Err()
	}
	if err != nil {
		return nil, why, err
	}
	return again, why, nil
}

// await waits for w's wait to end and takes it out of the registry.
func (hb *heartbeats) await(ctx context.Context, w *waiter, bound time.Duration, release <-chan struct{}) HoldOutcome {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	var why HoldOutcome
	select {
	case <-w.done:
		return hb.holds.outcome(w)
	case <-timer.C:
		why = HoldElapsed
	case <-ctx.Done():
		why = HoldDropped
	case <-release:
		why = HoldReleased
	}
	hb.holds.remove(w)
	return why
}

// heldAnswerMoved reports, from the committed state, whether w's answer
// changed since it was given (or a correction round is open).
func (hb *heartbeats) heldAnswerMoved(w *waiter) bool {
	var moved bool
	hb.state.Read(func(st projection.Reader) { moved = answerMoved(st.Group(w.k), w) })
	return moved || hb.table.Round(w.k).Open
}

// dropped starts the grace of a member whose held heartbeat's caller went
// away: at its end, the member is expired unless it renewed its lease since
// (token is the count of its renewals when it was held). At most as many
// graces run at once as heartbeats may be held; past that the lease alone
// applies.
func (hb *heartbeats) dropped(k projection.GroupKey, id string, token uint64) {
	grace := hb.hold.grace
	if grace <= 0 || token == 0 {
		return
	}
	if hb.graces.Add(1) > int64(hb.holds.maxTotal) {
		hb.graces.Add(-1)
		return
	}
	time.AfterFunc(grace, func() {
		defer hb.graces.Add(-1)
		_, err := submitFor(hb.life.ctx, hb.dec, k, events.Meta{Actor: commands.Actor}, func(t *commands.Tx) (struct{}, error) {
			commands.ExpireDropped(t, k, id, token, grace)
			return struct{}{}, nil
		})
		if err != nil {
			hb.logger.Debug().Err(err).Str("group", k.ConsumerGroup).Str("member", id).Msg("grace of a dropped held heartbeat")
		}
	})
}

// HoldOutcome says how a heartbeat that asked to be held was answered (the
// HTTP header X-Rsc-Hold: wire.Hold*, but for HoldDropped, which nobody
// hears).
type HoldOutcome string

// Hold outcomes.
const (
	// HoldAnswered: not held; the answer brings news, or the heartbeat
	// reported something to decide (a revoke report, other shards).
	HoldAnswered HoldOutcome = wire.HoldAnswered
	// HoldWoken: held, and answered when a change concerned the answer.
	HoldWoken HoldOutcome = wire.HoldWoken
	// HoldElapsed: held for the whole bound, then answered as a heartbeat
	// sent at that moment.
	HoldElapsed HoldOutcome = wire.HoldElapsed
	// HoldLimit: not held: as many heartbeats are held as allowed, for the
	// principal or in total (MaxHeldHeartbeats*).
	HoldLimit HoldOutcome = wire.HoldLimit
	// HoldReleased: held, and answered at once with the answer it was held
	// with: the coordinator shuts down, this replica lost the leadership,
	// or a newer heartbeat of the same member arrived.
	HoldReleased HoldOutcome = wire.HoldReleased
	// HoldOff: not held: holding is disabled (MaxHeldHeartbeats < 0).
	HoldOff HoldOutcome = wire.HoldOff
	// HoldDropped: the caller went away before the answer; nothing is
	// answered.
	HoldDropped HoldOutcome = "dropped"
)

// HoldRequest is a heartbeat's request to be held: for at most Bound
// (clamped: see holdBound), and released at once when Release is closed (the
// HTTP server shutting down).
type HoldRequest struct {
	Bound   time.Duration
	Release <-chan struct{}
}

// quiet reports whether resp tells the member nothing its request did not
// report: OK, the epoch and metadata version it sent, exactly the shards it
// reads assigned, and no revoke report to act on. Pending shards may
// differ: the member cannot act on them until they are granted, and that
// wakes it.
func quiet(req *wire.HeartbeatRequest, resp *wire.HeartbeatResponse) bool {
	if resp.Status != wire.StatusOK || req.MemberEpoch == nil || req.MetadataVersion == nil || len(req.RevokingShards) > 0 {
		return false
	}
	if *req.MemberEpoch != resp.MemberEpoch || *req.MetadataVersion != resp.MetadataVersion {
		return false
	}
	owned := make([]int, 0, len(req.OwnedShards))
	for _, s := range req.OwnedShards {
		owned = append(owned, s.ShardIndex)
	}
	return projection.EqualSets(projection.SortedInts(owned), indexesOf(resp.Assignment.AssignedShards))
}

func indexesOf(refs []wire.ShardRef) []int {
	out := make([]int, 0, len(refs))
	for _, r := range refs {
		out = append(out, r.ShardIndex)
	}
	return projection.SortedInts(out)
}
