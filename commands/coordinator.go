package commands

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Config holds the coordinator's tunables. Zero values take the defaults below.
type Config struct {
	HeartbeatInterval    time.Duration // 3s: heartbeatIntervalMs in responses
	MemberLease          time.Duration // 15s
	RebalanceTimeout     time.Duration // 60s
	TickInterval         time.Duration // 1s: expiry, timeouts, resharding progress
	StaleMemberRetention time.Duration // 10m: pruning of terminal members (<0 disables)
	DefaultShardCount    int           // 12
	MaxShardCount        int           // 1024
	// MaxMembersPerGroup bounds a group's member records (4096): a join into a
	// full group first prunes terminal records, then is refused (ErrGroupFull).
	MaxMembersPerGroup int
	// ShardCheckInterval is how often the leader checks that Redis still has
	// every routed shard stream and consumer group, and recreates what it lost
	// (10s; <0 disables; repair.go).
	ShardCheckInterval time.Duration
	// DisableProvisioning turns off stream and consumer-group creation (on by default).
	DisableProvisioning bool
	// KeepRetiredStreams keeps removed shard streams after a resharding finishes
	// instead of deleting them.
	KeepRetiredStreams bool
	SnapshotEvery      int // events between snapshots (10000); <0 disables
	// SnapshotMinInterval spaces periodic snapshots in time (30s; <0: no minimum).
	SnapshotMinInterval time.Duration
	MaxBatch            int // decisions folded into one append (256)
	CoordinatorID       string
	// Lease, if set, makes this coordinator one replica of several on the log:
	// it decides only while it holds the leader lease (see leader.go). The log
	// given to New must then be fenced by the same lease. nil: the only writer.
	Lease LeaderLease
	// LeaseTTL is how long a lease lasts without renewal (5s); it is renewed
	// every LeaseTTL/3.
	LeaseTTL time.Duration
	Logger   zerolog.Logger
	// AfterAppend, if set, is called with every appended record (metrics, test hooks).
	AfterAppend func(rec events.Record)
	// SnapshotKeep is how many snapshots the store keeps (2); start-up falls
	// back to an older one when the newest cannot be restored.
	SnapshotKeep int
	// TrimLog trims the log behind the oldest kept snapshot after each snapshot,
	// archiving its resharding and admin history first (trim.go).
	TrimLog bool
	// Trimmer trims the log and reads its archive (the unfenced redisstore.Log);
	// nil: the log is never trimmed and has no archive.
	Trimmer LogTrimmer
}

func (c *Config) setDefaults() {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 3 * time.Second
	}
	if c.MemberLease <= 0 {
		c.MemberLease = 15 * time.Second
	}
	if c.RebalanceTimeout <= 0 {
		c.RebalanceTimeout = 60 * time.Second
	}
	if c.TickInterval <= 0 {
		c.TickInterval = time.Second
	}
	if c.StaleMemberRetention == 0 {
		c.StaleMemberRetention = 10 * time.Minute
	}
	if c.DefaultShardCount <= 0 {
		c.DefaultShardCount = 12
	}
	if c.MaxShardCount <= 0 {
		c.MaxShardCount = 1024
	}
	if c.MaxMembersPerGroup <= 0 {
		c.MaxMembersPerGroup = 4096
	}
	if c.ShardCheckInterval == 0 {
		c.ShardCheckInterval = 10 * time.Second
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = 10000
	}
	if c.SnapshotMinInterval == 0 {
		c.SnapshotMinInterval = 30 * time.Second
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 256
	}
	if c.CoordinatorID == "" {
		c.CoordinatorID = "local-coordinator"
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 5 * time.Second
	}
	if c.SnapshotKeep <= 0 {
		c.SnapshotKeep = 2
	}
}

// Coordinator owns the projection and is the only writer of the log in this process.
type Coordinator struct {
	cfg    Config
	log    events.Log
	shards ShardStore
	snaps  SnapshotStore
	clock  Clock
	state  *projection.State
	rt     *runtimeState

	reqs    chan *request
	stop    chan struct{}
	wg      sync.WaitGroup
	ready   atomic.Bool
	healthy atomic.Bool
	closing atomic.Bool

	sinceSnapshot int
	lastSnapshot  time.Time
	snapMu        sync.Mutex
	conflicts     atomic.Int64

	writerWG sync.WaitGroup // the writer alone, so Close can hand over before the other loops end
	lead     leadership
	reloadMu sync.Mutex // one reload from a snapshot at a time (trim.go)
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// New builds a coordinator. shards may be nil (no Redis for shard streams: creating
// groups then fails with REDIS_NOT_CONFIGURED unless provisioning is disabled);
// snaps may be nil; clock nil means the system clock.
func New(cfg Config, log events.Log, shards ShardStore, snaps SnapshotStore, clock Clock) *Coordinator {
	cfg.setDefaults()
	if clock == nil {
		clock = systemClock{}
	}
	c := &Coordinator{
		cfg: cfg, log: log, shards: shards, snaps: snaps, clock: clock,
		state: projection.New(),
		rt:    newRuntimeState(),
		reqs:  make(chan *request, 4096),
		stop:  make(chan struct{}),
	}
	return c
}

// Config returns the effective configuration.
func (c *Coordinator) Config() Config { return c.cfg }

// State is the projection (read through its copying methods).
func (c *Coordinator) State() *projection.State { return c.state }

// Log is the event log.
func (c *Coordinator) Log() events.Log { return c.log }

// Ready reports whether the coordinator loaded the log and can append.
func (c *Coordinator) Ready() bool { return c.ready.Load() && c.healthy.Load() && !c.closing.Load() }

// Healthy reports whether the last log operation succeeded.
func (c *Coordinator) Healthy() bool { return c.healthy.Load() }

// Conflicts is the number of compare-and-append conflicts seen.
func (c *Coordinator) Conflicts() int64 { return c.conflicts.Load() }

// Load builds the projection: the newest usable kept snapshot (if any, and if
// fromSnapshot; see restoreSnapshot) plus every entry after it, or the whole
// log. A log trimmed at its head cannot be folded from zero: without a usable
// snapshot Load fails. An undecodable entry stops the load with an error
// naming its id.
func (c *Coordinator) Load(ctx context.Context, fromSnapshot bool) error {
	trimmed, err := c.TrimmedTo(ctx)
	if err != nil {
		return fmt.Errorf("read log trim point: %w", err)
	}
	st := projection.New()
	restored := false
	if fromSnapshot && c.snaps != nil {
		snap, err := c.restoreSnapshot(ctx, trimmed)
		if err != nil {
			return err
		}
		if snap != nil {
			st, restored = snap, true
		}
	}
	if !restored {
		if err := c.checkFoldable(trimmed, fromSnapshot); err != nil {
			return err
		}
	}
	n, err := FoldLog(ctx, c.log, st, "")
	if err != nil {
		return err
	}
	c.state.Swap(st)
	c.rearm()
	c.healthy.Store(true)
	c.ready.Store(true)
	c.cfg.Logger.Info().Str("lastId", c.state.LastID()).Int("tail", n).Msg("projection loaded")
	return nil
}

// FoldLog applies every entry of l after st's last id (up to until, inclusive, when
// not empty) and returns how many it applied.
func FoldLog(ctx context.Context, l events.Log, st *projection.State, until string) (int, error) {
	n := 0
	for {
		entries, err := l.Read(ctx, st.LastID(), 2000)
		if err != nil {
			return n, fmt.Errorf("read log: %w", err)
		}
		if len(entries) == 0 {
			return n, nil
		}
		for _, e := range entries {
			if until != "" {
				if cmp, err := events.CompareIDs(e.ID, until); err == nil && cmp > 0 {
					return n, nil
				}
			}
			rec, err := events.Decode(e.ID, e.Data)
			if err != nil {
				return n, err
			}
			if err := st.Apply(rec); err != nil {
				return n, err
			}
			n++
		}
	}
}

// Run starts the writer, the maintenance ticker and the log follower. It returns
// at once; Close stops them.
func (c *Coordinator) Run() {
	c.wg.Add(4)
	c.writerWG.Add(1)
	go func() { defer c.wg.Done(); defer c.writerWG.Done(); c.writer() }()
	go func() { defer c.wg.Done(); c.ticker() }()
	go func() { defer c.wg.Done(); c.follow() }()
	go func() { defer c.wg.Done(); c.repairer() }()
	if c.cfg.Lease != nil {
		// One round before returning, so a replica that finds the lease free
		// leads by the time its first request arrives.
		c.electOnce(c.cfg.LeaseTTL / 3)
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.elect() }()
	}
}

// Close stops accepting decisions, lets the one in progress finish, writes a
// snapshot (a leader or the only writer) and stops the background loops; a
// leader then releases its lease so a follower takes over at once.
func (c *Coordinator) Close() {
	if c.closing.Swap(true) {
		return
	}
	close(c.stop)
	// Once the writer finished the batch in progress nothing more is decided:
	// snapshot and hand the lease over before waiting for the other loops (the
	// follower's blocking read may take a second).
	c.writerWG.Wait()
	if c.IsLeader() {
		c.saveSnapshot(context.Background())
	}
	c.releaseLease()
	c.wg.Wait()
}

// request is one decision waiting for the writer.
type request struct {
	fn        func(t *tx) (any, error)
	exclusive bool
	meta      events.Meta
	done      chan result
}

type result struct {
	v   any
	err error
}

// submit queues a decision and waits for its result. Decisions for every group
// are serialised by the single writer; consecutive non-exclusive decisions are
// folded into one append.
func (c *Coordinator) submit(ctx context.Context, meta events.Meta, exclusive bool, fn func(t *tx) (any, error)) (any, error) {
	if c.closing.Load() {
		return nil, ErrTerminating
	}
	if !c.ready.Load() {
		return nil, withMsg(ErrUnavailable, "coordinator is still loading the event log")
	}
	if !c.IsLeader() {
		return nil, ErrNotLeader
	}
	r, err := c.enqueue(ctx, meta, exclusive, fn)
	if err != nil {
		return nil, err
	}
	return c.await(r)
}

// enqueue hands a decision to the writer, in order, without the checks of submit.
func (c *Coordinator) enqueue(ctx context.Context, meta events.Meta, exclusive bool, fn func(t *tx) (any, error)) (*request, error) {
	r := &request{fn: fn, exclusive: exclusive, meta: meta, done: make(chan result, 1)}
	select {
	case c.reqs <- r:
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.stop:
		return nil, ErrTerminating
	}
}

// await waits for the writer's result of r.
func (c *Coordinator) await(r *request) (any, error) {
	select {
	case res := <-r.done:
		return res.v, res.err
	case <-c.stop:
		// The writer finishes the batch in progress before stopping.
		select {
		case res := <-r.done:
			return res.v, res.err
		case <-time.After(10 * time.Second):
			return nil, ErrTerminating
		}
	}
}

func (c *Coordinator) writer() {
	var carry *request
	for {
		var first *request
		if carry != nil {
			first, carry = carry, nil
		} else {
			select {
			case first = <-c.reqs:
			case <-c.stop:
				c.drainRejected()
				return
			}
		}
		batch := []*request{first}
		if !first.exclusive {
		fill:
			for len(batch) < c.cfg.MaxBatch {
				select {
				case r := <-c.reqs:
					if r.exclusive {
						carry = r
						break fill
					}
					batch = append(batch, r)
				default:
					break fill
				}
			}
		}
		c.runBatch(batch)
	}
}

func (c *Coordinator) drainRejected() {
	for {
		select {
		case r := <-c.reqs:
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

const maxConflictRetries = 3

func (c *Coordinator) runBatch(batch []*request) {
	for attempt := 0; ; attempt++ {
		c.state.Lock()
		b := &batchCtx{ov: c.state.NewOverlayLocked()}
		results := make([]result, len(batch))
		panicked := -1
		for i, r := range batch {
			t := &tx{c: c, b: b, meta: r.meta, now: c.now()}
			t.meta.Time = t.now
			v, err, p := runSafely(r.fn, t)
			if p != nil {
				c.cfg.Logger.Error().Interface("panic", p).Str("stack", string(debug.Stack())).Msg("decision panicked")
				panicked = i
				break
			}
			results[i] = result{v, err}
		}
		if panicked >= 0 {
			c.state.Unlock()
			batch[panicked].done <- result{err: fmt.Errorf("internal error")}
			batch = append(batch[:panicked:panicked], batch[panicked+1:]...)
			if len(batch) == 0 {
				return
			}
			continue
		}
		err := c.commitLocked(b)
		c.state.Unlock()
		fenced := c.fenced(err)
		for _, r := range results {
			fenced = c.fenced(r.err) || fenced
		}
		if fenced {
			// Nothing of this batch was appended or applied; the new leader
			// decides. Catch up so reads see what it appended.
			_ = c.catchUp()
			for _, r := range batch {
				r.done <- result{err: ErrNotLeader}
			}
			return
		}
		conflict := errors.Is(err, events.ErrConflict)
		for _, r := range results {
			if errors.Is(r.err, events.ErrConflict) {
				conflict = true
			}
		}
		if conflict {
			c.conflicts.Add(1)
			if cerr := c.catchUp(); cerr != nil {
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
			if err != nil && !conflict {
				r.done <- result{err: withMsg(ErrUnavailable, "event log append failed: the decision was not recorded; retry")}
				continue
			} else if err != nil {
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

// commitLocked appends the batch's events and applies them to the projection.
func (c *Coordinator) commitLocked(b *batchCtx) error {
	if len(b.data) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ids, err := c.log.Append(ctx, c.state.LastIDLocked(), b.data)
	if err != nil {
		if !errors.Is(err, events.ErrConflict) && !errors.Is(err, events.ErrFenced) {
			c.healthy.Store(false)
			c.cfg.Logger.Error().Err(err).Int("events", len(b.data)).Msg("append failed; decisions dropped")
		}
		return err
	}
	c.healthy.Store(true)
	for i := range b.recs {
		rec := b.recs[i]
		rec.ID = ids[i]
		if err := c.state.ApplyLocked(rec); err != nil {
			// The log is ahead of the projection now; reload it from the log.
			c.cfg.Logger.Error().Err(err).Str("id", rec.ID).Msg("apply after append failed")
			c.healthy.Store(false)
			return err
		}
		if c.cfg.AfterAppend != nil {
			c.cfg.AfterAppend(rec)
		}
	}
	c.sinceSnapshot += len(b.data)
	// A snapshot holds the whole state (with the history index it grows with
	// the log), so periodic snapshots are also spaced in time.
	if c.cfg.SnapshotEvery > 0 && c.sinceSnapshot >= c.cfg.SnapshotEvery && time.Since(c.lastSnapshot) >= c.cfg.SnapshotMinInterval {
		c.sinceSnapshot = 0
		c.lastSnapshot = time.Now()
		capture := c.state.CaptureLocked()
		go c.saveCapture(capture)
	}
	b.data, b.recs = nil, nil
	b.ov = c.state.NewOverlayLocked()
	return nil
}

// catchUp applies entries another writer appended.
func (c *Coordinator) catchUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.reloadIfTrimmedPast(ctx); err != nil {
		c.healthy.Store(false)
		return err
	}
	c.state.Lock()
	defer c.state.Unlock()
	for {
		entries, err := c.log.Read(ctx, c.state.LastIDLocked(), 1000)
		if err != nil {
			c.healthy.Store(false)
			return err
		}
		if len(entries) == 0 {
			c.healthy.Store(true)
			return nil
		}
		for _, e := range entries {
			rec, err := events.Decode(e.ID, e.Data)
			if err != nil {
				c.healthy.Store(false)
				c.cfg.Logger.Error().Err(err).Msg("cannot decode log entry written by another coordinator")
				return err
			}
			if err := c.state.ApplyLocked(rec); err != nil {
				return err
			}
		}
	}
}

// follow tails the log so entries appended by another coordinator process reach
// this projection, and re-checks Redis after an outage.
func (c *Coordinator) follow() {
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		entries, err := c.log.Tail(ctx, c.state.LastID(), 1, time.Second)
		cancel()
		if err != nil {
			c.healthy.Store(false)
			select {
			case <-c.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		foreign := false
		if len(entries) > 0 {
			// Our own appends are applied before the writer lets go of the lock;
			// only entries beyond our position came from another process.
			cmp, _ := events.CompareIDs(entries[len(entries)-1].ID, c.state.LastID())
			foreign = cmp > 0
		}
		if foreign || !c.healthy.Load() {
			if err := c.catchUp(); err != nil {
				c.cfg.Logger.Warn().Err(err).Msg("catch up with the log")
			}
		}
	}
}

func (c *Coordinator) saveSnapshot(ctx context.Context) {
	if c.snaps == nil || !c.ready.Load() {
		return
	}
	c.saveCapture(c.state.Capture())
}

func (c *Coordinator) saveCapture(capture *projection.Capture) {
	if c.snaps == nil {
		return
	}
	c.snapMu.Lock()
	defer c.snapMu.Unlock()
	data, err := capture.Encode()
	if err != nil {
		c.cfg.Logger.Error().Err(err).Msg("encode snapshot")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.snaps.Save(ctx, capture.LastID(), data, c.cfg.SnapshotKeep); err != nil {
		if errors.Is(err, events.ErrConflict) {
			c.cfg.Logger.Info().Err(err).Msg("snapshot not saved: a newer one is stored")
			return
		}
		c.cfg.Logger.Warn().Err(err).Msg("save snapshot")
		return
	}
	c.cfg.Logger.Debug().Str("lastId", capture.LastID()).Int("bytes", len(data)).Msg("snapshot saved")
	c.trimLog()
}

// SaveSnapshot writes a snapshot now.
func (c *Coordinator) SaveSnapshot() { c.saveSnapshot(context.Background()) }

func (c *Coordinator) now() time.Time { return time.Unix(0, c.clock.Now().UnixNano()).UTC() }

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

// flush appends what the decision emitted so far, before a step with side effects
// outside the log (provisioning) that must follow a recorded intent.
func (t *tx) flush() error {
	if err := t.c.commitLocked(t.b); err != nil {
		return err
	}
	// What follows (provisioning) takes time: later events carry their own.
	t.now = t.c.now()
	t.meta.Time = t.now
	return nil
}

// Actor names the coordinator's own decisions in the log.
const Actor = "coordinator"
