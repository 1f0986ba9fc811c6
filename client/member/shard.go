package member

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/routing"
)

// reader reads one shard for one member: XREADGROUP, handle, XACK, in batches,
// until stopped. A stop takes effect between batches, so what was read is
// always handled and acked (or left pending on failure) before it exits.
type reader struct {
	m     *member
	rt    *Runtime
	index int
	key   string

	stopCh   chan struct{}
	stopOnce sync.Once
	done     chan struct{}
	// blockID is the Redis client id of the reader's own connection while
	// it reads on one (0: it reads through the pool); unblock.go.
	blockID atomic.Int64

	// inFlight is the number of read entries not acked yet (held back ones
	// excluded).
	inFlight atomic.Int64
	// held is the number of read entries held back (see gate.go).
	held atomic.Int64
	// failedCount is the number of this reader's failed entries still pending.
	failedCount atomic.Int64
	// failed is the reader goroutine's own: failed entry id → deliveries.
	failed map[string]int64
	// restart is set by wait when the entry it held back is no longer pending
	// for the reader: the reader goroutine's own.
	restart bool

	mu            sync.Mutex
	lastDelivered string
	lastAcked     string
	updatedAt     time.Time
}

func newReader(m *member, index int) *reader {
	return &reader{
		m: m, rt: m.rt, index: index, key: routing.StreamKey(m.rt.cfg.StreamPrefix, index),
		stopCh: make(chan struct{}), done: make(chan struct{}), failed: map[string]int64{},
	}
}

// stop asks the reader to stop after its current batch, ending a blocked
// read at once where it can (unblock.go).
func (r *reader) stop() {
	r.stopOnce.Do(func() {
		close(r.stopCh)
		r.unblock()
	})
}

func (r *reader) stopped() bool { return isClosed(r.stopCh) }

func (r *reader) exited() bool { return isClosed(r.done) }

// isClosed says whether ch is closed (it is never sent on).
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sleep waits d, or less if stopped; it reports whether the reader was stopped.
func (r *reader) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.stopCh:
		return true
	case <-t.C:
		return false
	}
}

func (r *reader) run() {
	defer func() {
		close(r.done)
		r.m.poke()
	}()
	ctx := r.rt.hard
	// A held-back entry that Redis no longer lists as pending for this
	// reader (the consumer group was lost and recreated at the stream's
	// start, or the stream itself) makes the reader start over: take over
	// what is pending, then read what the group delivers again.
	for r.takeOver(ctx) {
		if !r.read(ctx) {
			return
		}
		r.m.log.Warn("a held-back entry is no longer pending (the consumer group or the stream was lost); reading the shard again from what the group delivers", "stream", r.key)
	}
}

// takeOver takes over what a previous owner (crashed, fenced, or one that
// failed messages) left pending. In an ordered group, all of it and first: a
// new entry must not overtake an older one of its key, so nothing is read
// before the whole pending list was claimed and handled. It reports false
// when the reader was stopped.
func (r *reader) takeOver(ctx context.Context) bool {
	r.restart = false
	if r.m.gate.load().ordered {
		for backoff := time.Duration(0); !r.claim(ctx, 0, true); {
			r.restart = false // a lost held entry: claim again from the start
			backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
			if r.sleep(backoff) || ctx.Err() != nil {
				return false
			}
		}
		return true
	}
	r.claim(ctx, r.rt.cfg.ClaimMinIdle, true)
	return !r.stopped() && ctx.Err() == nil
}

// read is the reader's loop: XREADGROUP, handle, XACK, and the sweep of idle
// pending entries. It reports true when the reader must start over (restart),
// false when it was stopped or the runtime ended.
func (r *reader) read(ctx context.Context) bool {
	cfg := &r.rt.cfg
	sweepIdle := min(cfg.ClaimMinIdle, cfg.RetryBackoff)
	nextSweep := time.Now().Add(sweepIdle)
	var backoff time.Duration
	args := &redis.XReadGroupArgs{
		Group: cfg.ConsumerGroup, Consumer: r.m.id, Streams: []string{r.key, ">"},
		Count: cfg.BatchSize, Block: cfg.Block,
	}
	var own *blockingConn
	readGroup := cfg.Redis.XReadGroup
	// connect takes a connection of the reader's own (a fresh one after a
	// failure: a failed connection stays failed, and a failover client's
	// next one reaches the new primary), or reads through the pool.
	connect := func() {
		if own != nil {
			r.blockID.Store(0)
			_ = own.conn.Close()
		}
		readGroup = cfg.Redis.XReadGroup
		if own = ownConn(ctx, cfg.Redis); own != nil {
			readGroup = own.conn.XReadGroup
			r.blockID.Store(own.id)
		}
	}
	connect()
	defer func() {
		if own != nil {
			r.blockID.Store(0)
			_ = own.conn.Close()
		}
	}()
	for !r.stopped() && ctx.Err() == nil {
		if !r.m.leaseValid() {
			// Another member may own the shard by now: read nothing until a
			// heartbeat renews the lease.
			if r.sleep(20 * time.Millisecond) {
				return false
			}
			continue
		}
		streams, err := readGroup(ctx, args).Result()
		switch {
		case err == nil:
			backoff = 0
			for _, s := range streams {
				if !r.process(ctx, s.Messages, nil) {
					return r.restart // stopped while entries were held back, or the held entry was lost
				}
			}
		case errors.Is(err, redis.Nil):
			backoff = 0
		case ctx.Err() != nil:
			return false
		default:
			if own != nil && !isReply(err) {
				connect() // the connection failed, not the command
			}
			backoff = min(max(2*backoff, 50*time.Millisecond), 2*time.Second)
			if isNoGroup(err) {
				// The stream or its consumer group is gone: a retired shard,
				// or one not provisioned (yet). Wait for the coordinator.
				r.m.log.Debug("shard stream or consumer group missing", "stream", r.key, "err", err)
			} else {
				r.m.log.Warn("XREADGROUP failed", "stream", r.key, "err", err)
			}
			if r.sleep(backoff) {
				return false
			}
		}
		if time.Now().After(nextSweep) && !r.stopped() {
			r.claim(ctx, sweepIdle, false)
			if r.restart {
				return true
			}
			nextSweep = time.Now().Add(sweepIdle)
		}
	}
	return false
}

// claim takes over pending entries idle for at least minIdle (entries of a
// previous owner, and this reader's own failed ones) and handles them, in id
// order. It reports whether it went through the whole pending list (a missing
// stream or group has none).
func (r *reader) claim(ctx context.Context, minIdle time.Duration, takeover bool) bool {
	cfg := &r.rt.cfg
	start := "0-0"
	total := 0
	defer func() {
		if takeover && total > 0 {
			r.m.log.Info("claimed entries a previous owner left pending", "stream", r.key, "count", total)
			r.rt.emit(Event{MemberID: r.m.id, Kind: EventClaimed, Shards: []int{r.index}, Count: total})
		}
	}()
	for !r.stopped() && r.m.leaseValid() {
		msgs, next, err := cfg.Redis.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: r.key, Group: cfg.ConsumerGroup, Consumer: r.m.id, MinIdle: minIdle, Start: start, Count: cfg.BatchSize,
		}).Result()
		if err != nil {
			if isNoGroup(err) {
				return true
			}
			if ctx.Err() == nil {
				r.m.log.Warn("XAUTOCLAIM failed", "stream", r.key, "err", err)
			}
			return false
		}
		if len(msgs) > 0 {
			r.rt.stats.claimed.Add(int64(len(msgs)))
			total += len(msgs)
			if !r.process(ctx, msgs, r.deliveries(ctx, msgs)) {
				return false
			}
		}
		if next == "" || next == "0-0" {
			return true
		}
		start = next
	}
	return false
}

// deliveries reads the delivery counts of just-claimed entries.
func (r *reader) deliveries(ctx context.Context, msgs []redis.XMessage) map[string]int64 {
	out := make(map[string]int64, len(msgs))
	lo, hi := msgs[0].ID, msgs[0].ID
	for _, m := range msgs {
		if idLess(m.ID, lo) {
			lo = m.ID
		}
		if idLess(hi, m.ID) {
			hi = m.ID
		}
	}
	pend, err := r.rt.cfg.Redis.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: r.key, Group: r.rt.cfg.ConsumerGroup, Start: lo, End: hi, Count: int64(len(msgs)) + 100, Consumer: r.m.id,
	}).Result()
	if err != nil {
		return out
	}
	for _, p := range pend {
		out[p.ID] = p.RetryCount
	}
	return out
}

// process handles a batch in order and acks the entries the handler accepted
// (or the dead-letter hook took). Failed entries stay pending (in an ordered
// group they are retried in place first, see settle). An entry the gate holds
// back (and every entry after it) waits, after the entries before it were
// acked; process reports false when the reader was stopped while waiting or
// retrying: the entries from there on stay pending, for this shard's next
// reader.
func (r *reader) process(ctx context.Context, msgs []redis.XMessage, deliveries map[string]int64) bool {
	if len(msgs) == 0 {
		return true
	}
	r.inFlight.Store(int64(len(msgs)))
	r.rt.stats.delivered.Add(int64(len(msgs)))
	acks := make([]string, 0, len(msgs))
	completed := true
entries:
	for i, xm := range msgs {
		if xm.Values == nil {
			acks = append(acks, xm.ID) // trimmed away while pending: nothing to handle
			continue
		}
		rv := takeFenceField(xm.Values)
		if k := r.m.gate.load(); k.judge(r.index, xm.ID, rv) != admit {
			acks = r.ack(ctx, acks)
			if !r.wait(ctx, k, xm.ID, rv, len(msgs)-i, &acks) {
				completed = false
				break
			}
		}
		d := int64(1)
		if deliveries != nil {
			if v, ok := deliveries[xm.ID]; ok {
				d = v
			}
		} else if v, ok := r.failed[xm.ID]; ok {
			d = v + 1
		}
		msg := Message{MemberID: r.m.id, StreamKey: r.key, ShardIndex: r.index, ID: xm.ID, Values: xm.Values, Deliveries: d}
		switch out, last := r.settle(ctx, msg, &acks); out {
		case settledAck:
			acks = append(acks, xm.ID)
			r.forget(xm.ID)
		case settledGone:
			r.forget(xm.ID)
		case settledPending:
			if _, ok := r.failed[xm.ID]; !ok {
				r.failedCount.Add(1)
			}
			r.failed[xm.ID] = last
		case settledStopped:
			completed = false
			break entries
		}
	}
	r.ack(ctx, acks)
	// Entries come in stream order, from XREADGROUP and XAUTOCLAIM alike.
	last := msgs[len(msgs)-1].ID
	r.mu.Lock()
	if deliveries == nil && idLess(r.lastDelivered, last) {
		r.lastDelivered = last
	}
	r.updatedAt = time.Now()
	r.mu.Unlock()
	r.inFlight.Store(0)
	return completed
}

// settled is what became of one entry handed to the handler.
type settled int

const (
	// settledAck: handled, or taken by the dead-letter hook: ack it.
	settledAck settled = iota
	// settledPending: failed; it stays pending, for a later delivery.
	settledPending
	// settledGone: no longer pending for this consumer while it was retried
	// in place (acked or claimed elsewhere, or deleted): nothing to ack.
	settledGone
	// settledStopped: the reader was stopped (or the runtime ended) while it
	// retried the entry in place; it stays pending, and so do the ones after it.
	settledStopped
)

// settle runs the handler on msg and decides its fate; it also returns the
// deliveries of the last attempt. A failure on the MaxDeliveries-th delivery
// goes to the dead-letter hook when there is one. Otherwise a failed entry
// stays pending and the shard moves on (it is retried after RetryBackoff,
// possibly after later entries), except in a group with ordering KEY: there a
// failed entry blocks its shard. It is retried in place every RetryBackoff,
// each time claimed again with XCLAIM (Redis counts the delivery, and the
// entry's fields are read afresh), until it is handled or dead-lettered,
// before any later entry of the shard is handed over. The entries handled
// before it are acked while it waits.
func (r *reader) settle(ctx context.Context, msg Message, acks *[]string) (settled, int64) {
	cfg := &r.rt.cfg
	for {
		err := r.call(ctx, msg)
		if err == nil {
			r.rt.stats.handled.Add(1)
			return settledAck, msg.Deliveries
		}
		r.rt.stats.failed.Add(1)
		if cfg.MaxDeliveries > 0 && msg.Deliveries >= cfg.MaxDeliveries && cfg.DeadLetter != nil {
			dlErr := r.deadLetter(ctx, msg, err)
			if dlErr == nil {
				r.rt.stats.deadLettered.Add(1)
				return settledAck, msg.Deliveries
			}
			r.m.log.Warn("dead-letter hook failed; the message stays pending", "stream", r.key, "id", msg.ID, "err", dlErr)
		}
		if !r.m.gate.load().ordered {
			r.m.log.Debug("handler failed; the message stays pending", "stream", r.key, "id", msg.ID, "deliveries", msg.Deliveries, "err", err)
			return settledPending, msg.Deliveries
		}
		r.m.log.Info("handler failed in an ordered group; retrying the entry in place before any later entry of the shard",
			"stream", r.key, "id", msg.ID, "deliveries", msg.Deliveries, "retryIn", cfg.RetryBackoff, "err", err)
		*acks = r.ack(ctx, *acks)
		next, out := r.reclaim(ctx, msg)
		if next == nil {
			return out, msg.Deliveries
		}
		msg = *next
	}
}

// reclaim waits RetryBackoff and claims msg again for this consumer (XCLAIM
// with min-idle 0), for another attempt; it waits longer while the member's
// lease is lapsed, and retries a failed XCLAIM after another RetryBackoff. It
// returns the entry as claimed, or nil and what became of it: stopped, or gone
// (no longer pending here, or its stream or group is gone).
func (r *reader) reclaim(ctx context.Context, msg Message) (*Message, settled) {
	cfg := &r.rt.cfg
	for {
		if r.sleep(cfg.RetryBackoff) || ctx.Err() != nil {
			return nil, settledStopped
		}
		for !r.m.leaseValid() {
			// Another member may own the shard by now: touch nothing.
			if r.sleep(20*time.Millisecond) || ctx.Err() != nil {
				return nil, settledStopped
			}
		}
		got, err := cfg.Redis.XClaim(ctx, &redis.XClaimArgs{
			Stream: r.key, Group: cfg.ConsumerGroup, Consumer: r.m.id, MinIdle: 0, Messages: []string{msg.ID},
		}).Result()
		switch {
		case err != nil && isNoGroup(err):
			return nil, settledGone
		case err != nil:
			if ctx.Err() != nil {
				return nil, settledStopped
			}
			r.m.log.Warn("XCLAIM of a failed entry failed; trying again", "stream", r.key, "id", msg.ID, "err", err)
			continue
		case len(got) == 0 || got[0].ID != msg.ID:
			r.m.log.Warn("a failed entry is no longer pending for this member; moving on", "stream", r.key, "id", msg.ID)
			return nil, settledGone
		case got[0].Values == nil:
			// Deleted from the stream while pending: nothing to handle.
			return nil, settledAck
		}
		takeFenceField(got[0].Values)
		msg.Values = got[0].Values
		msg.Deliveries++
		return &msg, settledAck
	}
}

// ack acks ids (the handled entries of a batch, in order) and returns what
// is left to ack: ids[:0], or ids when XACK failed.
func (r *reader) ack(ctx context.Context, ids []string) []string {
	if len(ids) == 0 {
		return ids
	}
	cfg := &r.rt.cfg
	n, err := cfg.Redis.XAck(ctx, r.key, cfg.ConsumerGroup, ids...).Result()
	if err != nil {
		r.m.log.Warn("XACK failed; the messages stay pending and will be delivered again", "stream", r.key, "count", len(ids), "err", err)
		return ids
	}
	r.rt.stats.acked.Add(n)
	r.inFlight.Add(-int64(len(ids)))
	acked := ids[len(ids)-1]
	r.mu.Lock()
	if idLess(r.lastAcked, acked) {
		r.lastAcked = acked
	}
	r.updatedAt = time.Now()
	r.mu.Unlock()
	return ids[:0]
}

// wait holds back entry id (published with routing version rv, 0 for
// untagged) and the held-1 read entries after it until the member's
// knowledge admits it: a heartbeat answer without a barrier below id on this
// shard, at least as new as rv. It asks for a heartbeat at once (the member
// heartbeats fast while a reader waits). It keeps retrying to ack *acks, the
// entries handled before id: a barrier elsewhere may wait for them. It
// reports false when the reader was stopped or the runtime ended first.
func (r *reader) wait(ctx context.Context, k *knowledge, id string, rv int64, held int, acks *[]string) bool {
	r.held.Store(int64(held))
	r.inFlight.Add(-int64(held))
	r.m.holding.Add(1)
	defer func() {
		r.m.holding.Add(-1)
		r.inFlight.Add(r.held.Swap(0))
	}()
	r.rt.stats.holds.Add(1)
	why := r.holdReason(k, id, rv)
	r.m.log.Info("holding back entries of an ordered resharding", "stream", r.key, "from", id, "count", held, "reason", why)
	r.rt.emit(Event{MemberID: r.m.id, Kind: EventHeld, Shards: []int{r.index}, Count: held, Detail: why})
	r.m.poke()
	since := time.Now()
	var retry <-chan time.Time
	slow := time.NewTimer(holdWarnAfter)
	defer slow.Stop()
	lostCheck := time.NewTicker(holdLostCheckEvery)
	defer lostCheck.Stop()
	for {
		if len(*acks) > 0 && retry == nil {
			retry = time.After(r.rt.cfg.Block)
		}
		select {
		case <-retry:
			retry = nil
			*acks = r.ack(ctx, *acks)
			continue
		case <-slow.C:
			// A barrier waits for Redis to prove the source shards acked up
			// to their cutovers; a version wait for the coordinator to reach
			// the entry's routing version. Either can stall on another part.
			r.m.log.Warn("entries still held back", "stream", r.key, "from", id, "count", held,
				"for", time.Since(since).Round(time.Second), "reason", r.holdReason(r.m.gate.load(), id, rv))
			slow.Reset(holdWarnEvery)
			continue
		case <-lostCheck.C:
			if r.heldLost(ctx, id) {
				r.restart = true
				return false
			}
			continue
		case <-k.changed:
		case <-r.stopCh:
			r.m.log.Info("stopped while holding back entries; they stay pending for the shard's next owner", "stream", r.key, "from", id, "count", held)
			return false
		case <-ctx.Done():
			return false
		}
		k = r.m.gate.load()
		if k.judge(r.index, id, rv) == admit {
			r.m.log.Info("entries released", "stream", r.key, "from", id, "metadataVersion", k.version)
			r.rt.emit(Event{MemberID: r.m.id, Kind: EventResumed, Shards: []int{r.index}, Count: held, Detail: id})
			return true
		}
	}
}

// A hold is logged again after holdWarnAfter, then every holdWarnEvery; the
// held entry is checked to be still pending every holdLostCheckEvery.
const (
	holdWarnAfter      = 10 * time.Second
	holdWarnEvery      = 30 * time.Second
	holdLostCheckEvery = time.Second
)

// heldLost reports whether Redis no longer lists entry id as pending for this
// reader: its consumer group (or its stream) was lost, and was recreated at
// the stream's start or not at all. Waiting for the barrier would then wait
// forever: the barrier waits until the group has read this shard again, and
// the reader reads nothing while it holds. An error reading it is not a
// verdict.
func (r *reader) heldLost(ctx context.Context, id string) bool {
	pend, err := r.rt.cfg.Redis.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: r.key, Group: r.rt.cfg.ConsumerGroup, Start: id, End: id, Count: 1, Consumer: r.m.id,
	}).Result()
	if err != nil {
		return isNoGroup(err)
	}
	return len(pend) == 0
}

func (r *reader) holdReason(k *knowledge, id string, rv int64) string {
	if k.judge(r.index, id, rv) == holdVersion {
		return "entry " + id + " was published with routing version " + strconv.FormatInt(rv, 10) +
			", newer than the last heartbeat answer's " + strconv.FormatInt(k.version, 10)
	}
	return "entry " + id + " is past the barrier after " + k.barriers[r.index]
}

func (r *reader) forget(id string) {
	if len(r.failed) == 0 {
		return
	}
	if _, ok := r.failed[id]; ok {
		delete(r.failed, id)
		r.failedCount.Add(-1)
	}
}

// call runs the handler; a panic is a failure.
func (r *reader) call(ctx context.Context, msg Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panic: %v", p)
			r.m.log.Error("handler panicked; the message stays pending", "stream", r.key, "id", msg.ID, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	return r.rt.handler(ctx, msg)
}

func (r *reader) deadLetter(ctx context.Context, msg Message, cause error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("dead-letter hook panic: %v", p)
		}
	}()
	return r.rt.cfg.DeadLetter(ctx, msg, cause)
}

// progress is the shard's consumption progress, for heartbeats.
func (r *reader) progress() client.ShardProgress {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := client.ShardProgress{
		Shard: client.Shard{ShardIndex: r.index}, StreamKey: r.key,
		PendingCount: r.inFlight.Load() + r.held.Load() + r.failedCount.Load(),
	}
	if r.lastDelivered != "" {
		v := r.lastDelivered
		p.LastDeliveredID = &v
	}
	if r.lastAcked != "" {
		v := r.lastAcked
		p.LastAckedID = &v
	}
	if !r.updatedAt.IsZero() {
		t := r.updatedAt.UTC()
		p.UpdatedAt = &t
	}
	return p
}

func isNoGroup(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "NOGROUP") || strings.Contains(s, "no such key")
}

// idLess orders stream ids ("ms-seq"); "" is below every id.
func idLess(a, b string) bool {
	if a == "" || b == "" {
		return a == "" && b != ""
	}
	am, as := splitID(a)
	bm, bs := splitID(b)
	if am != bm {
		return am < bm
	}
	return as < bs
}

func splitID(id string) (uint64, uint64) {
	ms, seq, _ := strings.Cut(id, "-")
	m, _ := strconv.ParseUint(ms, 10, 64)
	s, _ := strconv.ParseUint(seq, 10, 64)
	return m, s
}
