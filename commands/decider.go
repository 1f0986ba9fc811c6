package commands

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// The decider is the single writer of the log in this process. One goroutine
// runs every decision in arrival order against an overlay of the projection,
// appends what the decisions emitted as one batch (group commit: consecutive
// decisions share one compare-and-append), applies the appended records to the
// projection, and only then answers the callers.
//
// It is also the only goroutine that changes the projection: catch-up with
// entries another writer appended and reloads from a snapshot run here too.
// That is why a decision reads the projection without a lock (nobody else
// writes it) and why the write lock is held only while records that already
// landed are applied: a reader never waits for the append, whatever Redis does.
//
// A decision never calls Redis. What it needs from the shard streams (drain
// evidence, entries added, whether provisioning happened) is gathered before it
// is submitted (reconciler.go) and handed to it as evidence.
type decider struct {
	c      *Coordinator
	reqs   chan *request
	exited chan struct{} // closed when the writer goroutine returned

	conflicts     atomic.Int64
	sinceSnapshot int
	lastSnapshot  time.Time
}

func newDecider(c *Coordinator) *decider {
	return &decider{c: c, reqs: make(chan *request, 4096), exited: make(chan struct{})}
}

// request is one decision (or writer job) waiting for the writer.
type request struct {
	fn   func(t *tx) (any, error)
	job  func() // a writer job instead of a decision: runs alone, emits nothing
	meta events.Meta
	done chan result
}

type result struct {
	v   any
	err error
}

// submit queues a decision and waits for its result. Decisions for every group
// are serialised by the writer; consecutive decisions are folded into one append.
func (c *Coordinator) submit(ctx context.Context, meta events.Meta, fn func(t *tx) (any, error)) (any, error) {
	if c.closing.Load() {
		return nil, ErrTerminating
	}
	if !c.ready.Load() {
		return nil, withMsg(ErrUnavailable, "coordinator is still loading the event log")
	}
	if !c.IsLeader() {
		return nil, ErrNotLeader
	}
	r, err := c.dec.enqueue(ctx, &request{fn: fn, meta: meta})
	if err != nil {
		return nil, err
	}
	return c.dec.await(r)
}

// runInWriter runs job in the writer goroutine, between batches, and waits for
// it: the way anything but a decision changes the projection.
func (d *decider) runInWriter(ctx context.Context, job func()) error {
	r, err := d.enqueue(ctx, &request{job: job})
	if err != nil {
		return err
	}
	_, err = d.await(r)
	return err
}

// enqueue hands a request to the writer, in order.
func (d *decider) enqueue(ctx context.Context, r *request) (*request, error) {
	r.done = make(chan result, 1)
	select {
	case d.reqs <- r:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-d.c.stop:
		return nil, ErrTerminating
	}
}

// await waits for the writer's result of r.
func (d *decider) await(r *request) (any, error) {
	select {
	case res := <-r.done:
		return res.v, res.err
	case <-d.c.stop:
		// The writer finishes the batch in progress before stopping; a
		// request it never took is not answered.
		select {
		case res := <-r.done:
			return res.v, res.err
		case <-d.exited:
			select {
			case res := <-r.done:
				return res.v, res.err
			default:
				return nil, ErrTerminating
			}
		}
	}
}

// run is the writer goroutine.
func (d *decider) run() {
	defer close(d.exited)
	var carry *request
	for {
		var first *request
		if carry != nil {
			first, carry = carry, nil
		} else {
			select {
			case first = <-d.reqs:
			case <-d.c.stop:
				d.drainRejected()
				return
			}
		}
		if first.job != nil {
			d.runJob(first)
			continue
		}
		batch := []*request{first}
	fill:
		for len(batch) < d.c.cfg.MaxBatch {
			select {
			case r := <-d.reqs:
				if r.job != nil {
					carry = r
					break fill
				}
				batch = append(batch, r)
			default:
				break fill
			}
		}
		d.runBatch(batch)
	}
}

func (d *decider) runJob(r *request) {
	defer func() {
		if p := recover(); p != nil {
			d.c.cfg.Logger.Error().Interface("panic", p).Str("stack", string(debug.Stack())).Msg("writer job panicked")
			r.done <- result{err: fmt.Errorf("internal error")}
		}
	}()
	r.job()
	r.done <- result{}
}

func (d *decider) drainRejected() {
	for {
		select {
		case r := <-d.reqs:
			r.done <- result{err: ErrTerminating}
		default:
			return
		}
	}
}

// batchCtx accumulates the events of one batch before they are appended.
type batchCtx struct {
	ov   *projection.Overlay
	data [][]byte
	recs []events.Record
}

// undo drops what the decision that started at record n emitted (it failed):
// the overlay is rebuilt from the records before it.
func (b *batchCtx) undo(base *projection.State, n int) {
	if len(b.recs) == n {
		return
	}
	b.data, b.recs = b.data[:n], b.recs[:n]
	b.ov = base.NewOverlayLocked()
	for _, rec := range b.recs {
		b.ov.Apply(rec)
	}
}

const maxConflictRetries = 3

func (d *decider) runBatch(batch []*request) {
	c := d.c
	for attempt := 0; ; attempt++ {
		// The writer is the only goroutine that changes the state: it reads it
		// here without the lock.
		b := &batchCtx{ov: c.state.NewOverlayLocked()}
		results := make([]result, len(batch))
		panicked := -1
		for i, r := range batch {
			t := &tx{c: c, b: b, meta: r.meta, now: c.now()}
			t.meta.Time = t.now
			n := len(b.recs)
			v, err, p := runSafely(r.fn, t)
			if p != nil {
				c.cfg.Logger.Error().Interface("panic", p).Str("stack", string(debug.Stack())).Msg("decision panicked")
				panicked = i
				break
			}
			if err != nil {
				b.undo(c.state, n)
			}
			results[i] = result{v, err}
		}
		if panicked >= 0 {
			batch[panicked].done <- result{err: fmt.Errorf("internal error")}
			batch = append(batch[:panicked:panicked], batch[panicked+1:]...)
			if len(batch) == 0 {
				return
			}
			continue
		}
		err := d.commit(b)
		if c.fenced(err) {
			// Nothing of this batch was appended or applied; the new leader
			// decides. Catch up so reads see what it appended.
			_ = d.catchUp()
			for _, r := range batch {
				r.done <- result{err: ErrNotLeader}
			}
			return
		}
		if errors.Is(err, events.ErrConflict) {
			d.conflicts.Add(1)
			if cerr := d.catchUp(); cerr != nil {
				err = cerr
			} else if attempt+1 < maxConflictRetries {
				continue
			} else {
				for _, r := range batch {
					r.done <- result{err: ErrStateConflict}
				}
				return
			}
		}
		for i, r := range batch {
			if err != nil {
				r.done <- result{err: failed(ErrUnavailable, err, "the event log is unavailable: the decision was not recorded; retry")}
				continue
			}
			r.done <- results[i]
		}
		return
	}
}

func runSafely(fn func(t *tx) (any, error), t *tx) (v any, err error, p any) {
	defer func() {
		if r := recover(); r != nil {
			p = r
		}
	}()
	v, err = fn(t)
	return v, err, nil
}

// commit appends the batch's events (no lock held: readers go on answering from
// the projection while Redis works) and applies them under the write lock.
func (d *decider) commit(b *batchCtx) error {
	c := d.c
	if len(b.data) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ids, err := c.appendBatch(ctx, b)
	if err != nil {
		if !errors.Is(err, events.ErrConflict) && !errors.Is(err, events.ErrFenced) {
			c.healthy.Store(false)
			c.cfg.Logger.Error().Err(err).Int("events", len(b.data)).Msg("append failed; decisions dropped")
		}
		return err
	}
	c.healthy.Store(true)
	for i := range b.recs {
		b.recs[i].ID = ids[i]
	}
	if err := c.state.ApplyAll(b.recs); err != nil {
		// The log is ahead of the projection now; catch up with it.
		c.cfg.Logger.Error().Err(err).Msg("apply after append failed")
		c.healthy.Store(false)
		return err
	}
	if c.cfg.AfterAppend != nil {
		for _, rec := range b.recs {
			c.cfg.AfterAppend(rec)
		}
	}
	d.sinceSnapshot += len(b.data)
	if c.cfg.SnapshotEvery > 0 && d.sinceSnapshot >= c.cfg.SnapshotEvery && time.Since(d.lastSnapshot) >= c.cfg.SnapshotMinInterval {
		d.sinceSnapshot = 0
		d.lastSnapshot = time.Now()
		capture := c.state.Capture()
		go c.rep.saveCapture(capture)
	}
	return nil
}

// appendBatch appends the batch, with each entry's id added to its group's
// history index when the log keeps one.
func (c *Coordinator) appendBatch(ctx context.Context, b *batchCtx) ([]string, error) {
	ix, ok := c.log.(events.Indexed)
	if !ok {
		return c.log.Append(ctx, c.state.LastIDLocked(), b.data)
	}
	drafts := make([]events.Draft, len(b.data))
	for i, data := range b.data {
		rec := b.recs[i]
		d := events.Draft{Data: data}
		if rec.StreamPrefix != "" || rec.ConsumerGroup != "" {
			d.Index = events.IndexName(rec.StreamPrefix, rec.ConsumerGroup)
			d.Membership = events.Membership(rec.Type)
		}
		drafts[i] = d
	}
	return ix.AppendIndexed(ctx, c.state.LastIDLocked(), drafts)
}

// catchUp applies, in the writer, the entries another writer appended after
// the projection's position (after a conflict, a fenced append, or when the
// follower saw them). It reads the log itself: it only runs when the writer
// must wait for the log anyway.
func (d *decider) catchUp() error {
	c := d.c
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.rep.reloadIfTrimmedPast(ctx); err != nil {
		c.healthy.Store(false)
		return err
	}
	if err := c.rep.reloadIfLogBehind(ctx); err != nil {
		c.healthy.Store(false)
		return err
	}
	if _, err := projection.Fold(ctx, c.log, c.state, projection.FoldOptions{}); err != nil {
		c.healthy.Store(false)
		var de *events.DecodeError
		if errors.As(err, &de) {
			c.cfg.Logger.Error().Err(err).Msg("cannot decode log entry written by another coordinator")
		}
		return err
	}
	c.healthy.Store(true)
	return nil
}

// tx is one decision in progress.
type tx struct {
	c    *Coordinator
	b    *batchCtx
	meta events.Meta
	now  time.Time
}

func (t *tx) group(k projection.GroupKey) *projection.Group { return t.b.ov.Group(k) }

// emit records an event for group k (encoded now, appended with the batch) and
// folds it into the overlay; it returns the group as it is after the event.
func (t *tx) emit(k projection.GroupKey, ev events.Event) *projection.Group {
	m := t.meta
	m.StreamPrefix, m.ConsumerGroup = k.StreamPrefix, k.ConsumerGroup
	// Callers validate what they pass; this is the last line of defence for
	// what every event carries.
	m.Actor, m.RequestID = truncate(m.Actor, MaxTextBytes), truncate(m.RequestID, MaxTextBytes)
	data, err := events.Encode(m, ev)
	if err != nil {
		panic(fmt.Sprintf("encode %s: %v", ev.EventType(), err))
	}
	rec := events.Record{Type: ev.EventType(), Schema: events.SchemaVersion, Meta: m, Event: ev}
	t.b.data = append(t.b.data, data)
	t.b.recs = append(t.b.recs, rec)
	t.b.ov.Apply(rec)
	return t.b.ov.Group(k)
}

// emitAs is emit with another actor (the coordinator's own follow-up decisions).
func (t *tx) emitAs(actor string, k projection.GroupKey, ev events.Event) *projection.Group {
	saved := t.meta.Actor
	t.meta.Actor = actor
	defer func() { t.meta.Actor = saved }()
	return t.emit(k, ev)
}

// Actor names the coordinator's own decisions in the log.
const Actor = "coordinator"
