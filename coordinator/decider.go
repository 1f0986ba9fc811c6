package coordinator

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// The decider is the single writer of the log in this process. One goroutine
// runs every decision, in arrival order save for fairness between groups
// among heartbeats (backlog.go), against an overlay of the projection
// and one of the runtime table, appends what the decisions emitted as one
// batch (group commit: consecutive decisions share one compare-and-append),
// applies the appended records to the projection, commits the batch's runtime
// changes, and only then answers the callers. A batch whose append fails,
// conflicts or is fenced changes nothing, in the projection or in memory.
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
	deciderDeps
	reqs   chan *request
	exited chan struct{} // closed when the writer goroutine returned

	conflicts     atomic.Int64
	sinceSnapshot int
	lastSnapshot  time.Time
	// unresolved is the last batch whose append answered an error that does
	// not say it was refused: it may have landed (resolve).
	unresolved *unresolvedBatch
	// gap is where appends go when the log's last entries were deleted
	// (findTailGap).
	gap tailGap
}

// tailGap: the log has no entry after at, the projection's position, up to
// to, its last generated id (the entries there were deleted: an XDEL of the
// log's last entries, or skipped by a repair). Compare-and-append checks the
// last generated id, so the writer appends after to while its projection is
// at at, and the gap stays behind.
type tailGap struct{ at, to string }

// deciderDeps is what the writer is built from.
type deciderDeps struct {
	log    events.Log
	state  *projection.State
	table  *commands.RuntimeTable
	life   *lifecycle
	lead   writerLease
	clock  Clock
	rules  commands.Rules
	logger zerolog.Logger
	// maxBatch bounds the decisions folded into one append.
	maxBatch int
	// snapshotEvery and snapshotMinInterval space the periodic snapshots.
	snapshotEvery       int
	snapshotMinInterval time.Duration
	afterAppend         func(events.Record)
	// snapshot stores a capture (called in a goroutine of its own).
	snapshot func(*projection.Capture)
	// reload reloads the projection when the log was trimmed past it, or no
	// longer holds its last entry (a Redis failover lost entries), before a
	// catch-up; fold folds the log into the projection,
	// failing with errTrimmedDuringFold, before applying anything after a
	// gap, when a trim passed it while it read (loader.foldLog).
	reload func(ctx context.Context) error
	fold   func(ctx context.Context, st *projection.State) (int, error)
	// holds are the held heartbeats, told what each batch changed.
	holds *waiters
	// reloadRestored reloads the projection from the newest kept snapshot:
	// a fold met a restore of another state (projection.RestoredError).
	reloadRestored func(ctx context.Context) error
	// noteApplied notes the ids of appended entries once applied, and
	// whether their append answered that they landed.
	noteApplied func(answered bool, ids ...string)
}

// writer is what the parts that submit decisions (Service, the reconciler,
// the loops) ask of the writer: it holds none of them.
type writer interface {
	decide(ctx context.Context, r *request, fn decision) error
	runInWriter(ctx context.Context, job func()) error
}

// writerLease is what the writer asks of the leadership.
type writerLease interface {
	IsLeader() bool
	// fenced reports whether an append failed because the term was over,
	// stepping down if so.
	fenced(err error) bool
}

func newDecider(deps deciderDeps) *decider {
	return &decider{deciderDeps: deps, reqs: make(chan *request, 4096), exited: make(chan struct{})}
}

// request is one decision (or writer job) waiting for the writer.
type request struct {
	decide decision
	job    func() // a writer job instead of a decision: runs alone, emits nothing
	meta   events.Meta
	done   chan error
	// lane is the group a heartbeat's decision is about (laned): the
	// backlog is fair between lanes.
	lane  projection.GroupKey
	laned bool
}

// decision is a request's decision as the writer runs it: its result's
// records, encoded, or its refusal.
type decision func(t *commands.Tx) (recs []events.Record, data [][]byte, err error)

// writeBatch is what the writer appends: the records of the batch's
// decisions that stand, in order, and the overlay they share.
type writeBatch struct {
	*commands.Batch
	recs []events.Record
	data [][]byte
}

// unresolvedBatch is a batch appended after position after whose append
// answered an error of unknown outcome.
type unresolvedBatch struct {
	after string
	b     *writeBatch
}

// errUnknownOutcome marks a decision whose append failed in a way that does
// not say whether it landed: whoever undoes a side effect for a decision that
// did not happen (lowering the fences raised for it) must not, since the log
// may hold it.
var errUnknownOutcome = errors.New("the append failed; it may have landed")

// submit queues a decision and waits for what it decided: its answer once
// its records are in the log, or its refusal. Decisions for every group are
// serialised by the writer; consecutive decisions are folded into one append.
// A decision may run more than once (after a conflict the batch is decided
// again on the caught-up state): only the last run's answer is returned.
func submit[T any](ctx context.Context, d writer, meta events.Meta, decide func(t *commands.Tx) (T, error)) (T, error) {
	return submitTo(ctx, d, &request{meta: meta}, decide)
}

// submitFor is submit for a member's heartbeat in group k: its decision is
// in k's lane, where the writer is fair between groups (backlog).
func submitFor[T any](ctx context.Context, d writer, k projection.GroupKey, meta events.Meta, decide func(t *commands.Tx) (T, error)) (T, error) {
	return submitTo(ctx, d, &request{meta: meta, lane: k, laned: true}, decide)
}

func submitTo[T any](ctx context.Context, d writer, r *request, decide func(t *commands.Tx) (T, error)) (T, error) {
	var out T
	err := d.decide(ctx, r, func(t *commands.Tx) ([]events.Record, [][]byte, error) {
		res, err := commands.Decide(t, decide)
		if err != nil {
			return nil, nil, err
		}
		out = res.Answer
		return res.Records, res.Encoded, nil
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// decide runs one decision, r with fn, in the writer.
func (d *decider) decide(ctx context.Context, r *request, fn decision) error {
	if d.life.closing.Load() {
		return commands.ErrTerminating
	}
	if !d.life.ready.Load() {
		return commands.WithMsg(commands.ErrUnavailable, "coordinator is still loading the event log")
	}
	if !d.lead.IsLeader() {
		return commands.ErrNotLeader
	}
	r.decide = fn
	if _, err := d.enqueue(ctx, r); err != nil {
		return err
	}
	return d.await(r)
}

// runInWriter runs job in the writer goroutine, between batches, and waits for
// it: the way anything but a decision changes the projection.
func (d *decider) runInWriter(ctx context.Context, job func()) error {
	r, err := d.enqueue(ctx, &request{job: job})
	if err != nil {
		return err
	}
	return d.await(r)
}

// catchUpInWriter folds, in the writer, what the log holds beyond the
// projection.
func (d *decider) catchUpInWriter(ctx context.Context) error {
	var cerr error
	if err := d.runInWriter(ctx, func() { cerr = d.catchUp() }); err != nil {
		return err
	}
	return cerr
}

// catchUpPast is the follower's catch-up: it folds, in the writer, what the
// log holds beyond the projection, unless by the time the writer gets to it
// the projection already holds seen, the last entry the follower read. On the
// leader the follower reads the writer's own appends, often before the writer
// has applied them; when the job runs they are applied, and reading the log
// again (three round trips to Redis, in the writer) would only delay the
// decisions queued behind it. The projection can hold seen only by having
// folded it or by an append of its own that landed after it, and a
// compare-and-append at a position before seen cannot land once seen is in
// the log: so it holds every entry up to seen. A writer that is not healthy,
// or whose last append's outcome is unknown, always reads the log.
func (d *decider) catchUpPast(ctx context.Context, seen string) error {
	var cerr error
	err := d.runInWriter(ctx, func() {
		if seen != "" && d.unresolved == nil && d.life.healthy.Load() {
			if cmp, err := events.CompareIDs(seen, d.state.LastIDLocked()); err == nil && cmp <= 0 {
				return
			}
		}
		cerr = d.catchUp()
	})
	if err != nil {
		return err
	}
	return cerr
}

// enqueue hands a request to the writer, in order.
func (d *decider) enqueue(ctx context.Context, r *request) (*request, error) {
	r.done = make(chan error, 1)
	select {
	case d.reqs <- r:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-d.life.stop:
		return nil, commands.ErrTerminating
	}
}

// await waits for the writer's result of r.
func (d *decider) await(r *request) error {
	select {
	case err := <-r.done:
		return err
	case <-d.life.stop:
		// The writer finishes the batch in progress before stopping; a
		// request it never took is not answered.
		select {
		case err := <-r.done:
			return err
		case <-d.exited:
			select {
			case err := <-r.done:
				return err
			default:
				return commands.ErrTerminating
			}
		}
	}
}

// run is the writer goroutine. It takes what callers submitted into its
// backlog and runs what the backlog says runs next, until Close; what it never
// ran is then refused.
func (d *decider) run() {
	defer close(d.exited)
	var q backlog
	for {
		if len(q.reqs) == 0 {
			select {
			case r := <-d.reqs:
				q.reqs = append(q.reqs, r)
			case <-d.life.stop:
			}
		}
		select {
		case <-d.life.stop:
			q.rejectAll(commands.ErrTerminating)
			d.drainRejected()
			return
		default:
		}
		q.take(d.reqs, cap(d.reqs))
		batch, job := q.next(d.maxBatch)
		if job != nil {
			d.runJob(job)
			continue
		}
		d.runBatch(batch)
	}
}

func (d *decider) runJob(r *request) {
	defer func() {
		if p := recover(); p != nil {
			d.logger.Error().Interface("panic", p).Str("stack", string(debug.Stack())).Msg("writer job panicked")
			r.done <- fmt.Errorf("internal error")
		}
	}()
	r.job()
	r.done <- nil
}

func (d *decider) drainRejected() {
	for {
		select {
		case r := <-d.reqs:
			r.done <- commands.ErrTerminating
		default:
			return
		}
	}
}

const maxConflictRetries = 3

// now is the wall-clock time decisions record; timers the reading leases
// and deadlines are measured against (Clock).
func (d *decider) now() time.Time { return wallClock(d.clock)() }

func (d *decider) timers() time.Time { return timerClock(d.clock)() }

// errLogUnavailable is the answer to decisions whose batch is not known to
// be recorded: not appended (retry), or appended without an answer that says
// it landed (a timeout, a lost reply, replicas that did not acknowledge it),
// when it may be in the log after all and a blind retry could do it twice.
func errLogUnavailable(err error) error {
	if errors.Is(err, commands.ErrLogLost) || errors.Is(err, commands.ErrEvictionPolicy) {
		var ce *commands.Error
		errors.As(err, &ce)
		return ce
	}
	if errors.Is(err, errUnknownOutcome) {
		return commands.Failed(commands.ErrUnavailable, err, "the event log did not confirm the decision: it may have been recorded; read the state before retrying")
	}
	return commands.Failed(commands.ErrUnavailable, err, "the event log is unavailable: the decision was not recorded; retry")
}

func (d *decider) runBatch(batch []*request) {
	if d.unresolved != nil {
		// The last batch may be in the log: decide nothing until it is
		// known whether it is.
		if err := d.catchUp(); err != nil {
			for _, r := range batch {
				r.done <- errLogUnavailable(err)
			}
			return
		}
	}
	for attempt := 0; ; attempt++ {
		// A decision that would append is refused while the log is lost or
		// Redis may evict it; one that appends nothing (a steady
		// heartbeat's runtime change) goes on.
		refusal := d.life.refusal()
		// The writer is the only goroutine that changes the state: it reads it
		// here without the lock.
		now, timers := d.now(), d.timers()
		b := &writeBatch{Batch: commands.NewBatch(d.state, d.table, timers)}
		seed := drawSeed()
		errs := make([]error, len(batch))
		panicked := -1
		for i, r := range batch {
			t := &commands.Tx{B: b.Batch, RT: b.RT.Child(timers), Rules: d.rules, Meta: r.meta, Now: now, Log: d.logger, Seed: seedOf(seed, i)}
			t.Meta.Time = t.Now
			recs, data, err, p := runSafely(r.decide, t)
			if err == nil && p == nil {
				err = d.refuseQuarantined(recs)
			}
			if p != nil {
				d.logger.Error().Interface("panic", p).Str("stack", string(debug.Stack())).Msg("decision panicked")
				panicked = i
				break
			}
			if err == nil && refusal != nil && len(recs) > 0 {
				err = refusal
			}
			if err != nil {
				if t.Emitted() {
					b.Undo(b.recs) // and t.RT is dropped
				}
			} else {
				b.recs, b.data = append(b.recs, recs...), append(b.data, data...)
				t.RT.Merge()
			}
			errs[i] = err
		}
		if panicked >= 0 {
			batch[panicked].done <- fmt.Errorf("internal error")
			batch = append(batch[:panicked:panicked], batch[panicked+1:]...)
			if len(batch) == 0 {
				return
			}
			continue
		}
		err := d.commit(b)
		if d.lead.fenced(err) {
			// Nothing of this batch was appended or applied; the new leader
			// decides. Catch up so reads see what it appended.
			_ = d.catchUp()
			for _, r := range batch {
				r.done <- commands.ErrNotLeader
			}
			return
		}
		if errors.Is(err, events.ErrConflict) {
			d.conflicts.Add(1)
			if cerr := d.catchUp(); cerr != nil {
				err = cerr
			} else if attempt+1 < maxConflictRetries {
				d.findTailGap()
				continue
			} else {
				for _, r := range batch {
					r.done <- commands.ErrStateConflict
				}
				return
			}
		}
		for i, r := range batch {
			if err != nil {
				r.done <- errLogUnavailable(err)
				continue
			}
			r.done <- errs[i]
		}
		return
	}
}

// refuseQuarantined refuses a decision that emitted records of a quarantined
// prefix (from record n of the batch on): nothing of such a prefix is
// appended until a repair lifts its quarantine.
func (d *decider) refuseQuarantined(recs []events.Record) error {
	for _, rec := range recs {
		if rec.StreamPrefix == "" {
			continue
		}
		if q, ok := d.state.QuarantinedLocked(rec.StreamPrefix); ok {
			return quarantineError(q)
		}
	}
	return nil
}

func runSafely(fn decision, t *commands.Tx) (recs []events.Record, data [][]byte, err error, p any) {
	defer func() {
		if r := recover(); r != nil {
			p = r
		}
	}()
	recs, data, err = fn(t)
	return recs, data, err, nil
}

// drawSeed is a batch's random draw; seedOf gives each of its decisions
// its own (commands.Tx.Seed).
func drawSeed() [16]byte {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return b
}

func seedOf(seed [16]byte, i int) [16]byte {
	binary.BigEndian.PutUint32(seed[8:], binary.BigEndian.Uint32(seed[8:])^uint32(i))
	return seed
}

// commit appends the batch's events (no lock held: readers go on answering from
// the projection while Redis works), applies them under the write lock and
// commits the batch's runtime changes. An append that failed without saying
// it was refused may have landed: the writer reads the log to find out
// (resolve), and if its batch is there it carries on as if the append had
// answered.
func (d *decider) commit(b *writeBatch) error {
	if len(b.data) == 0 {
		d.table.Commit(b.RT)
		if rounds := b.RT.RoundsChanged(); len(rounds) > 0 {
			d.holds.changed(d.state, nil, rounds)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	after := d.appendPosition()
	ids, err := d.appendBatch(ctx, after, b)
	if err == nil {
		d.unresolved = nil // nothing else can land at after now
		return d.applied(b, ids, true)
	}
	if errors.Is(err, events.ErrConflict) || errors.Is(err, events.ErrFenced) {
		return err
	}
	d.life.healthy.Store(false)
	if errors.Is(err, events.ErrRefused) {
		// Redis answered, refusing it unwritten (out of memory, say): the
		// decisions are not recorded, and a retry cannot do them twice.
		d.logger.Error().Err(err).Int("events", len(b.data)).Msg("append refused; decisions not recorded")
		return err
	}
	d.unresolved = &unresolvedBatch{after: after, b: b}
	if errors.Is(err, events.ErrNotDurable) {
		// The entries are in the log but may not survive a failover: the
		// decision is not answered, though the next read of the log folds
		// them if they are still there (resolve, catchUp).
		d.logger.Error().Err(err).Int("events", len(b.data)).Msg("append not acknowledged by the replicas; decisions not answered")
		return fmt.Errorf("%w: %w", errUnknownOutcome, err)
	}
	landed, rerr := d.resolve(ctx)
	if rerr == nil && landed {
		d.logger.Warn().Err(err).Int("events", len(b.data)).Msg("append answered an error but landed; decisions recorded")
		return nil
	}
	d.logger.Error().Err(err).Int("events", len(b.data)).Msg("append failed; decisions dropped")
	return fmt.Errorf("%w: %w", errUnknownOutcome, err)
}

// appendPosition is the position a batch is appended after: the
// projection's, or the end of the gap after it (tailGap).
func (d *decider) appendPosition() string {
	at := d.state.LastIDLocked()
	if d.gap.to != "" && d.gap.at == at {
		return d.gap.to
	}
	return at
}

// findTailGap notes a gap at the end of the log: its last generated id is
// past the projection's position and no entry follows that position. The
// last generated id is read first, so every entry up to it that was not
// deleted would be read after the position.
// It runs after a conflict that a catch-up did not explain.
func (d *decider) findTailGap() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	at := d.state.LastIDLocked()
	last, err := d.log.LastID(ctx)
	if err != nil {
		return
	}
	if cmp, err := events.CompareIDs(last, at); err != nil || cmp <= 0 {
		d.gap = tailGap{}
		return
	}
	entries, err := d.log.Read(ctx, at, 1)
	if err != nil || len(entries) > 0 {
		return
	}
	if d.gap != (tailGap{at: at, to: last}) {
		d.logger.Warn().Str("lastId", at).Str("lastGeneratedId", last).
			Msg("the log's last entries after this projection's position were deleted (XDEL, or skipped by replay repair): the gap is skipped and appends go after it")
	}
	d.gap = tailGap{at: at, to: last}
}

// applied applies a batch that landed with ids, commits its runtime changes
// and schedules a snapshot when one is due. answered: its append said it
// landed (with --log-replicas, that the replicas acknowledged it), rather
// than a read of the log finding it.
func (d *decider) applied(b *writeBatch, ids []string, answered bool) error {
	d.life.healthy.Store(true)
	for i := range b.recs {
		b.recs[i].ID = ids[i]
	}
	if d.noteApplied != nil {
		defer d.noteApplied(answered, ids...)
	}
	if err := d.state.ApplyAll(b.recs); err != nil {
		// The log is ahead of the projection now; catch up with it.
		d.logger.Error().Err(err).Msg("apply after append failed")
		d.life.healthy.Store(false)
		return err
	}
	d.table.Commit(b.RT)
	d.holds.changed(d.state, b.recs, b.RT.RoundsChanged())
	if d.afterAppend != nil {
		for _, rec := range b.recs {
			d.afterAppend(rec)
		}
	}
	d.sinceSnapshot += len(b.data)
	if d.snapshotEvery > 0 && d.sinceSnapshot >= d.snapshotEvery && time.Since(d.lastSnapshot) >= d.snapshotMinInterval {
		d.sinceSnapshot = 0
		d.lastSnapshot = time.Now()
		capture := d.state.Capture()
		go d.snapshot(capture)
	}
	return nil
}

// resolve settles the unresolved batch by reading the log after the position
// it was appended after. The entries there are its own, byte for byte (every
// envelope carries its decision's time, actor and request id), when it
// landed: it is then applied as if its append had answered. Other entries
// there mean it did not land; none yet means it has not (yet): it stays
// unresolved until an append of this writer or of another lands there. A
// read that fails leaves it unresolved.
func (d *decider) resolve(ctx context.Context) (landed bool, err error) {
	u := d.unresolved
	if u == nil {
		return false, nil
	}
	if d.state.LastIDLocked() != u.after {
		d.unresolved = nil // the projection moved on (a reload): not this batch's place any more
		return false, nil
	}
	entries, err := d.log.Read(ctx, u.after, len(u.b.data))
	if err != nil {
		return false, err
	}
	if len(entries) == 0 {
		return false, nil
	}
	d.unresolved = nil
	if len(entries) != len(u.b.data) {
		return false, nil
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		if !bytes.Equal(e.Data, u.b.data[i]) {
			return false, nil
		}
		ids[i] = e.ID
	}
	return true, d.applied(u.b, ids, false)
}

// appendBatch appends the batch after position after, with each entry's id
// added to its group's history index when the log keeps one.
func (d *decider) appendBatch(ctx context.Context, after string, b *writeBatch) ([]string, error) {
	ix, ok := d.log.(events.Indexed)
	if !ok {
		return d.log.Append(ctx, after, b.data)
	}
	drafts := make([]events.Draft, len(b.data))
	for i, data := range b.data {
		dr := events.Draft{Data: data}
		dr.Index, dr.Membership = events.HistoryIndex(b.recs[i])
		drafts[i] = dr
	}
	return ix.AppendIndexed(ctx, after, drafts)
}

// catchUp applies, in the writer, the entries another writer appended after
// the projection's position (after a conflict, a fenced append, or when the
// follower saw them), settling first whether this writer's own unresolved
// batch landed. It reads the log itself: it only runs when the writer must
// wait for the log anyway.
func (d *decider) catchUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// What the writer did not decide may change any held heartbeat's answer.
	defer func(at string) {
		if d.state.LastIDLocked() != at {
			d.holds.wakeAll()
		}
	}(d.state.LastIDLocked())
	if _, err := d.resolve(ctx); err != nil {
		d.life.healthy.Store(false)
		return err
	}
	known := d.state.NumQuarantined()
	defer func() { noteQuarantines(d.logger, d.state, known) }()
	for attempt := 1; ; attempt++ {
		if err := d.reload(ctx); err != nil {
			if errors.Is(err, commands.ErrLogLost) {
				// Redis answers: the log lost what the projection holds,
				// which is kept (guard.go).
				d.life.healthy.Store(true)
				return err
			}
			d.life.healthy.Store(false)
			d.life.markCorrupt(err) // the reload's fold met an undecodable entry
			return err
		}
		n, err := d.fold(ctx, d.state)
		if n > 0 {
			// Members another writer changed may be active now with an old lease.
			d.table.ForgetLeaseFloors()
		}
		if errors.Is(err, errTrimmedDuringFold) && attempt < maxFoldAttempts {
			// A trim passed this projection while it read: the reload above
			// sees it now.
			continue
		}
		var restored *projection.RestoredError
		if errors.As(err, &restored) && attempt < maxFoldAttempts {
			// The leader restored the log from a state this projection
			// does not continue: the state after it is the restore's
			// snapshot.
			d.logger.Warn().Str("restoredAt", restored.ID).Str("restoredFrom", restored.From).Str("lastId", restored.At).Msg("the log was restored from another state: reloading from the restore's snapshot")
			if err := d.reloadRestored(ctx); err != nil {
				d.life.healthy.Store(false)
				return err
			}
			continue
		}
		if err == nil {
			break
		}
		d.life.healthy.Store(false)
		if d.life.markCorrupt(err) {
			d.logger.Error().Err(err).Msg("cannot decode log entry written by another coordinator")
		}
		return err
	}
	d.life.healthy.Store(true)
	return nil
}

// markTerm queues the record of a new term before anything of the term is
// decided; wait waits for it.
func (d *decider) markTerm(ctx context.Context, info LeaderInfo) (wait func() error, err error) {
	r, err := d.enqueue(ctx, &request{meta: events.Meta{Actor: commands.Actor}, decide: func(t *commands.Tx) ([]events.Record, [][]byte, error) {
		res, err := commands.Decide(t, func(t *commands.Tx) (struct{}, error) {
			return struct{}{}, commands.StartTerm(t, info.Token, info.Holder, info.URL)
		})
		return res.Records, res.Encoded, err
	}})
	if err != nil {
		return nil, err
	}
	return func() error { return d.await(r) }, nil
}
