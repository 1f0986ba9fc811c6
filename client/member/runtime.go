package member

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// EventKind names what happened to a member.
type EventKind string

// Event kinds.
const (
	// EventJoined: the coordinator accepted a join (or rejoin).
	EventJoined EventKind = "joined"
	// EventAssigned: the member started reading Shards.
	EventAssigned EventKind = "assigned"
	// EventRevoking: the member stopped reading Shards and finishes their in-flight messages.
	EventRevoking EventKind = "revoking"
	// EventReleased: Shards are drained; the member reports them REVOKED.
	EventReleased EventKind = "released"
	// EventClaimed: on taking Shards[0], the member claimed Count entries a
	// previous owner left pending.
	EventClaimed EventKind = "claimed"
	// EventFenced: the coordinator fenced the member or forgot it (Detail has
	// the status); it stopped every shard and rejoins.
	EventFenced EventKind = "fenced"
	// EventLeaseLapsed: heartbeats failed for longer than the member lease,
	// or a held heartbeat went unanswered (the coordinator may expire the
	// member after its drop grace); reading is paused.
	EventLeaseLapsed EventKind = "lease-lapsed"
	// EventLeaseRestored: a heartbeat succeeded again after a lapse.
	EventLeaseRestored EventKind = "lease-restored"
	// EventLeft: the member left the group (graceful shutdown).
	EventLeft EventKind = "left"
	// EventHeld: an ordered group's entries of Shards[0] wait, Count of them
	// read; Detail says why (a barrier, or an entry published with a routing
	// newer than the last heartbeat answer).
	EventHeld EventKind = "held"
	// EventResumed: the entries held back on Shards[0] (Count, from the id
	// in Detail) are handled now.
	EventResumed EventKind = "resumed"
)

// Event is a change in a member's assignment or standing.
type Event struct {
	Time     time.Time
	MemberID string
	Kind     EventKind
	Shards   []int
	Count    int
	Detail   string
}

// Stats are counters of a runtime since Start.
type Stats struct {
	Delivered         int64 // entries read (new or claimed)
	Handled           int64 // handler successes
	Failed            int64 // handler failures (left pending)
	Acked             int64 // entries acked
	Claimed           int64 // entries claimed from pending lists
	DeadLettered      int64 // entries handed to DeadLetter and acked
	Heartbeats        int64 // heartbeats answered
	HeartbeatFailures int64 // heartbeats that got no answer
	// Holds counts the times a shard's entries were held back (EventHeld).
	Holds int64
	// HeldHeartbeats counts the heartbeats the coordinator held before it
	// answered them (a change concerned the member, or the hold passed).
	HeldHeartbeats int64
}

type counters struct {
	delivered, handled, failed, acked, claimed, deadLettered, heartbeats, heartbeatFailures, holds, heldHeartbeats atomic.Int64
}

// MemberStatus is a logical member's state as its heartbeat loop last saw it.
type MemberStatus struct {
	MemberID        string
	MemberEpoch     int64
	MetadataVersion int64
	// Owned are the shards it reads (or would, but for a lapsed lease).
	Owned []int
	// Draining are revoked shards still finishing in-flight messages.
	Draining []int
	// LastStatus is the status of the last heartbeat answer.
	LastStatus string
	// LeaseValid reports whether the assignment lease is valid.
	LeaseValid bool
}

// Runtime is a running set of logical members. Stop it by cancelling the
// context given to Start, or with Close.
type Runtime struct {
	cfg     Config
	handler Handler
	members []*member
	stats   counters

	cancel context.CancelFunc
	// hard is cancelled once the graceful stop is over (or ran out of time):
	// it is the context of handlers and Redis calls.
	hard       context.Context
	hardCancel context.CancelFunc
	readers    sync.WaitGroup
	done       chan struct{}
}

// Listen runs the members until ctx is done, then stops them gracefully
// (finish in-flight messages, ack, leave) and returns. It returns an error
// only for an unusable Config.
func Listen(ctx context.Context, cfg Config, h Handler) error {
	rt, err := Start(ctx, cfg, h)
	if err != nil {
		return err
	}
	return rt.Wait()
}

// Start is Listen without waiting: it starts the members and returns.
func Start(ctx context.Context, cfg Config, h Handler) (*Runtime, error) {
	if err := cfg.validate(h); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	ctx, cancel := context.WithCancel(ctx)
	hard, hardCancel := context.WithCancel(context.WithoutCancel(ctx))
	rt := &Runtime{cfg: cfg, handler: h, cancel: cancel, hard: hard, hardCancel: hardCancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for _, id := range MemberIDs(cfg.MemberIDBase, cfg.Concurrency) {
		m := newMember(rt, id)
		rt.members = append(rt.members, m)
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.run(ctx)
		}()
	}
	go func() {
		wg.Wait()
		rt.hardCancel()
		waitTimeout(&rt.readers, 2*time.Second)
		close(rt.done)
	}()
	return rt, nil
}

// Wait blocks until the runtime has stopped.
func (r *Runtime) Wait() error {
	<-r.done
	return nil
}

// Close stops the runtime gracefully and waits for it.
func (r *Runtime) Close() error {
	r.cancel()
	return r.Wait()
}

// Done is closed when the runtime has stopped.
func (r *Runtime) Done() <-chan struct{} { return r.done }

// MemberIDs returns the ids of the runtime's logical members.
func (r *Runtime) MemberIDs() []string {
	ids := make([]string, len(r.members))
	for i, m := range r.members {
		ids[i] = m.id
	}
	return ids
}

// Members returns each logical member's status.
func (r *Runtime) Members() []MemberStatus {
	out := make([]MemberStatus, len(r.members))
	for i, m := range r.members {
		out[i] = m.snapshot()
	}
	return out
}

// Stats returns the runtime's counters.
func (r *Runtime) Stats() Stats {
	s := &r.stats
	return Stats{
		Delivered: s.delivered.Load(), Handled: s.handled.Load(), Failed: s.failed.Load(), Acked: s.acked.Load(),
		Claimed: s.claimed.Load(), DeadLettered: s.deadLettered.Load(),
		Heartbeats: s.heartbeats.Load(), HeartbeatFailures: s.heartbeatFailures.Load(), Holds: s.holds.Load(),
		HeldHeartbeats: s.heldHeartbeats.Load(),
	}
}

func (r *Runtime) emit(e Event) {
	if r.cfg.OnEvent != nil {
		if e.Time.IsZero() {
			e.Time = time.Now()
		}
		r.cfg.OnEvent(e)
	}
}

// waitTimeout waits for wg at most d; it reports whether wg finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	ch := make(chan struct{})
	go func() {
		wg.Wait()
		close(ch)
	}()
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}
