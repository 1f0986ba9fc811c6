package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/replay"
)

// Log growth. Every snapshot makes the entries before it unnecessary for
// start-up, and the store keeps the newest few (Config.SnapshotKeep) so that an
// unreadable newest one falls back to an older one. With Config.TrimLog, every
// saved snapshot is followed by a trim of the log behind the OLDEST kept
// snapshot, so each kept snapshot still has its whole tail. Before the entries
// go, the resharding and admin history among them (every type ArchivedType
// selects) is copied to an archive under the same ids; membership chatter is
// dropped. What is lost is the ability to fold the state at a point before the
// oldest kept snapshot; the audit history of what operators and reshardings
// did, and every resharding's stateHistory (it is part of the projection),
// stay.

// The replica keeps this process's projection in step with the log: it loads
// it at start (the newest usable kept snapshot plus the tail), follows the log
// for entries another process appended (a --ha leader's, seen by a follower),
// saves snapshots, trims the log behind the oldest kept one (--trim-log),
// reloads from a snapshot when the log was trimmed past its position, and
// holds the projection when the log lost what it applied (guard.go). Every
// fold goes through projection.Fold, and every change to a running projection
// goes through the writer (decider.go).
//
// It answers what every replica knows alike (httpapi.Reader): the projection,
// a past state, a group's history, readiness and the configuration.
type Replica struct {
	replicaDeps
	snapMu   sync.Mutex // one snapshot save at a time
	reloadMu sync.Mutex // one reload from a snapshot at a time
	states   stateCache
}

// replicaDeps is what the replica is built from.
type replicaDeps struct {
	cfg   Config // the effective configuration
	log   events.Log
	snaps SnapshotStore // nil: no snapshots
	state *projection.State
	life  *lifecycle
	// rearm gives every member a fresh lease after a load or a reload.
	rearm func()
	// recent are the ids the projection applied last (guard.go).
	recent *recentIDs
	// answered is the last entry this process appended whose append
	// answered that it landed, acknowledged by Config.LogReplicas replicas
	// ("" none; the writer's alone).
	answered string
}

func newReplica(deps replicaDeps) *Replica { return &Replica{replicaDeps: deps} }

// State is the projection (read through its copying methods).
func (r *Replica) State() *projection.State { return r.state }

// Config returns the effective configuration.
func (r *Replica) Config() Config { return r.cfg }

// Log is the event log.
func (r *Replica) Log() events.Log { return r.log }

// Ready reports whether the coordinator loaded the log and can append: not
// while the log is lost or Redis may evict it (Refusal).
func (r *Replica) Ready() bool {
	return r.life.ready.Load() && r.life.healthy.Load() && !r.life.closing.Load() && r.life.refusal() == nil
}

// Healthy reports whether the last log operation succeeded.
func (r *Replica) Healthy() bool { return r.life.healthy.Load() }

// Corrupt is COORDINATOR_METADATA_CORRUPT naming what cannot be decoded,
// while the log holds an entry this build cannot decode (at start-up, or
// written by another replica since); nil otherwise.
func (r *Replica) Corrupt() error {
	if e := r.life.corrupt.Load(); e != nil {
		return e
	}
	return nil
}

// Quarantined is COORDINATOR_METADATA_CORRUPT naming the entry while prefix
// is quarantined (an entry of it cannot be read: see
// projection.Quarantine); nil otherwise. Every other prefix is served.
func (r *Replica) Quarantined(prefix string) error {
	q, ok := r.state.Quarantined(prefix)
	if !ok {
		return nil
	}
	return quarantineError(q)
}

// quarantineError is COORDINATOR_METADATA_CORRUPT for a quarantined prefix.
func quarantineError(q projection.Quarantine) *commands.Error {
	return commands.WithMsg(commands.ErrMetadataCorrupt, "%s: stream prefix %q is quarantined: log entry %s (type %q) cannot be read (%s); every other prefix is served (docs/operations.md, Runbook: a corrupt log)",
		commands.ErrMetadataCorrupt.Message, q.StreamPrefix, q.EntryID, q.Type, q.Reason)
}

// noteQuarantines logs the quarantines of st when it holds more than known.
func noteQuarantines(logger zerolog.Logger, st *projection.State, known int) {
	if st.NumQuarantined() <= known {
		return
	}
	for _, q := range st.Quarantines() {
		logger.Error().Str("streamPrefix", q.StreamPrefix).Str("entry", q.EntryID).Str("type", q.Type).Str("reason", q.Reason).Int64("skipped", q.Skipped).
			Msg("stream prefix quarantined: a log entry of it cannot be read; the prefix answers 409 COORDINATOR_METADATA_CORRUPT naming the entry, every other prefix is served (docs/operations.md, Runbook: a corrupt log)")
	}
}

// LogTrimmer trims the log's head and reads what it archived (redisstore.Log).
type LogTrimmer interface {
	// TrimBefore copies the entries before id that keep selects to the archive
	// under their own ids, then removes every entry before id from the log. It
	// is idempotent: re-run after a crash, it copies nothing twice.
	TrimBefore(ctx context.Context, id string, keep func(events.Entry) bool) (archived, removed int64, err error)
	// TrimmedTo is the highest id ever removed from the log (events.ZeroID:
	// none); the log holds every entry after it.
	TrimmedTo(ctx context.Context) (string, error)
	// Archive is the archived entries as a log (read only).
	Archive() events.Log
}

// ArchivedType reports whether trimming keeps entries of this event type in
// the archive: everything but membership (member.*) and the assignments
// computed from it (assignment.*).
func ArchivedType(typ string) bool {
	return !strings.HasPrefix(typ, "member.") && !strings.HasPrefix(typ, "assignment.")
}

// archived is the trim's keep function: an entry that does not decode is kept,
// since nobody can tell whether it is history.
func archived(e events.Entry) bool {
	rec, err := events.Decode(e.ID, e.Data)
	return err != nil || ArchivedType(rec.Type)
}

// TrimmedTo is the highest id trimmed from the log (events.ZeroID when it never
// was, or no trimmer is configured).
func (r *Replica) TrimmedTo(ctx context.Context) (string, error) {
	if r.cfg.Trimmer == nil {
		return events.ZeroID, nil
	}
	return r.cfg.Trimmer.TrimmedTo(ctx)
}

// GroupHistory pages a group's audit history (every event recorded for it,
// refused commands included, also after the group was deleted): up to limit
// entries after after, and the id to page on from when the page was full. It
// reads the group's history index beside the log, so its cost does not grow
// with the log. On a trimmed log the membership events before the trim point
// are gone: the page skips them.
func (r *Replica) GroupHistory(ctx context.Context, k projection.GroupKey, after string, limit int) ([]events.Entry, string, error) {
	hl := r.HistoryLog()
	ix, ok := hl.(events.Indexed)
	if !ok {
		return nil, "", fmt.Errorf("the event log keeps no history index")
	}
	ids, err := ix.History(ctx, events.IndexName(k.StreamPrefix, k.ConsumerGroup), after, limit)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if limit > 0 && len(ids) == limit {
		next = ids[len(ids)-1]
	}
	entries, err := hl.Get(ctx, ids)
	return entries, next, err
}

// indexBackfiller is a log whose history index can catch up with entries it
// does not cover yet (redisstore.Log).
type indexBackfiller interface {
	BackfillIndex(ctx context.Context) (indexed, skipped int, err error)
}

// backfillIndex brings the history index up to the log's end before this
// process appends: after an upgrade from a build without the index it indexes
// the whole log once.
func (r *Replica) backfillIndex(ctx context.Context) error {
	b, ok := r.indexLog().(indexBackfiller)
	if !ok {
		return nil
	}
	n, skipped, err := b.BackfillIndex(ctx)
	if err != nil {
		return fmt.Errorf("index the log's history: %w", err)
	}
	if n > 0 || skipped > 0 {
		r.cfg.Logger.Info().Int("indexed", n).Int("skipped", skipped).Msg("history index caught up with the log")
	}
	return nil
}

// indexLog is the log that keeps the index: the trimmer's (the unfenced log)
// or the log itself.
func (r *Replica) indexLog() any {
	if r.cfg.Trimmer != nil {
		return r.cfg.Trimmer
	}
	return r.log
}

// HistoryLog is the log to read the audit history from: the archive below the
// log's first entry, then the log (just the log when nothing archives).
func (r *Replica) HistoryLog() events.Log {
	if r.cfg.Trimmer == nil {
		return r.log
	}
	return events.WithArchive(r.log, r.cfg.Trimmer.Archive())
}

// restoreSnapshot restores the newest kept snapshot that can start a fold of
// the log: it decodes, it is not ahead of the log (a log that was reset), it
// is not behind the trim point (the log holds its whole tail), and it holds
// no quarantine whose entry was removed from the log since (a repair lifts a
// quarantine: the prefix must be folded again from before the entry).
// Snapshots that cannot are logged and the next older one is tried. nil when
// none can.
func (r *Replica) restoreSnapshot(ctx context.Context, trimmed string) (*projection.State, error) {
	st, _, err := r.restoreSnapshotNoting(ctx, trimmed)
	return st, err
}

// restoreSnapshotNoting is restoreSnapshot that also says which kept
// snapshot could not be decoded, if one could not ("" when none).
func (r *Replica) restoreSnapshotNoting(ctx context.Context, trimmed string) (*projection.State, string, error) {
	var undecodable string
	var lifted *projection.State // the newest snapshot whose quarantine the log lifted
	c := r
	last, err := c.log.LastID(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("read log position: %w", err)
	}
	ids, err := c.snaps.Kept(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("list snapshots: %w", err)
	}
	legacy := len(ids) == 0
	if legacy {
		ids = []string{""} // one snapshot stored without its id
	}
	for _, id := range ids {
		var data []byte
		if legacy {
			data, err = c.snaps.Load(ctx)
		} else {
			data, err = c.snaps.LoadAt(ctx, id)
		}
		if err != nil {
			return nil, "", fmt.Errorf("load snapshot: %w", err)
		}
		if data == nil {
			if !legacy {
				c.cfg.Logger.Warn().Str("snapshot", id).Msg("kept snapshot is gone; trying an older one")
			}
			continue
		}
		restored, err := projection.Restore(data)
		if err != nil {
			c.cfg.Logger.Warn().Err(err).Str("snapshot", id).Msg("ignoring unreadable snapshot; trying an older one")
			if undecodable == "" {
				undecodable = orNewest(id)
			}
			continue
		}
		at := restored.LastID()
		if cmp, _ := events.CompareIDs(at, last); cmp > 0 {
			c.cfg.Logger.Warn().Str("snapshot", at).Str("log", last).Msg("ignoring snapshot newer than the log; trying an older one")
			continue
		}
		if cmp, _ := events.CompareIDs(at, trimmed); cmp < 0 {
			c.cfg.Logger.Warn().Str("snapshot", at).Str("trimmedTo", trimmed).Msg("ignoring snapshot older than the log's trim point")
			continue
		}
		if cmp, _ := events.CompareIDs(at, trimmed); cmp > 0 {
			// A failover can lose the entry a snapshot was taken at while the
			// log goes on past it (see holdIfLogLost).
			held, err := c.log.Get(ctx, []string{at})
			if err != nil {
				return nil, "", fmt.Errorf("check the log holds snapshot %s: %w", at, err)
			}
			if len(held) == 0 {
				c.cfg.Logger.Warn().Str("snapshot", at).Msg("ignoring snapshot taken at an entry the log no longer holds; trying an older one")
				continue
			}
		}
		gone, err := r.liftedQuarantine(ctx, restored, trimmed)
		if err != nil {
			return nil, "", err
		}
		if gone != nil {
			c.cfg.Logger.Warn().Str("snapshot", at).Str("streamPrefix", gone.StreamPrefix).Str("entry", gone.EntryID).
				Msg("ignoring snapshot that holds a quarantine whose entry the log no longer holds (repaired, or deleted by hand); trying an older one, so the prefix is folded again")
			if lifted == nil {
				lifted = restored
			}
			continue
		}
		return restored, undecodable, nil
	}
	if lifted != nil && trimmed != events.ZeroID {
		// No older snapshot can start the fold, and the log cannot be folded
		// from zero: the quarantine stays until a snapshot from before its
		// entry is put back.
		c.cfg.Logger.Warn().Str("snapshot", lifted.LastID()).Str("trimmedTo", trimmed).
			Msg("no kept snapshot from before the quarantining entry can start the fold of this trimmed log; restoring the one that holds the quarantine (the prefix stays quarantined)")
		return lifted, undecodable, nil
	}
	return nil, undecodable, nil
}

// liftedQuarantine returns a quarantine of st whose entry the log no longer
// holds (nil when there is none): the entry was removed after the trim point
// (replay repair, or XDEL), and a fold from a point before it lifts the
// quarantine.
func (r *Replica) liftedQuarantine(ctx context.Context, st *projection.State, trimmed string) (*projection.Quarantine, error) {
	for _, q := range st.Quarantines() {
		if cmp, _ := events.CompareIDs(q.EntryID, trimmed); cmp <= 0 {
			continue // trimmed away: nothing can fold the prefix again
		}
		held, err := r.log.Get(ctx, []string{q.EntryID})
		if err != nil {
			return nil, fmt.Errorf("check the log holds quarantining entry %s: %w", q.EntryID, err)
		}
		if len(held) == 0 {
			return &q, nil
		}
	}
	return nil, nil
}

func orNewest(id string) string {
	if id == "" {
		return "the newest"
	}
	return id
}

// errTrimmedNoSnapshot: the log cannot be folded from zero and no snapshot
// starts it. Start-up keeps retrying: a snapshot put back makes it succeed.
var errTrimmedNoSnapshot = errors.New("the log was trimmed (--trim-log) and no kept snapshot reaches its trim point")

// checkFoldable refuses to fold a trimmed log from zero.
func (r *Replica) checkFoldable(trimmed string, fromSnapshot bool) error {
	if trimmed == events.ZeroID {
		return nil
	}
	if !fromSnapshot {
		return fmt.Errorf("the log was trimmed up to %s (--trim-log): it cannot be folded from zero, so --ignore-snapshot cannot start it", trimmed)
	}
	return fmt.Errorf("%w (%s); restore a snapshot taken at or after it", errTrimmedNoSnapshot, trimmed)
}

// trimLog trims the log behind the oldest kept snapshot (Config.TrimLog), after
// a snapshot was saved.
func (r *Replica) trimLog() {
	c := r
	if !c.cfg.TrimLog || c.cfg.Trimmer == nil || c.snaps == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids, err := c.snaps.Kept(ctx)
	if err != nil || len(ids) == 0 {
		if err != nil {
			c.cfg.Logger.Warn().Err(err).Msg("trim log: list snapshots")
		}
		return
	}
	oldest := ids[len(ids)-1]
	n, removed, err := c.cfg.Trimmer.TrimBefore(ctx, oldest, archived)
	if err != nil {
		c.cfg.Logger.Warn().Err(err).Str("before", oldest).Msg("trim log")
		return
	}
	c.cfg.Logger.Info().Str("before", oldest).Int64("archived", n).Int64("removed", removed).Msg("log trimmed behind the oldest kept snapshot")
}

// StateAt is the projection after entry until (inclusive), for the replay
// endpoint: the replay library folds it from the newest kept snapshot at or
// before until, so its cost depends on the distance to that snapshot, not on
// the log's length; a few recent answers are cached (a point's state never
// changes). On a trimmed log a point before the oldest kept snapshot is
// ErrLogTrimmed, naming the oldest point that can still be replayed. The
// returned state is shared: read it through its copying methods only.
func (r *Replica) StateAt(ctx context.Context, until string) (*projection.State, error) {
	c := r
	if st, ok := r.states.get(until); ok {
		return st, nil
	}
	trimmed, err := c.TrimmedTo(ctx)
	if err != nil {
		return nil, err
	}
	var snaps replay.Snapshots
	if c.snaps != nil {
		snaps = c.snaps
	}
	st, _, err := replay.StateAtID(ctx, c.log, snaps, trimmed, until)
	if errors.Is(err, replay.ErrTrimmed) {
		return nil, commands.WithMsg(commands.ErrLogTrimmed, "%s", strings.TrimPrefix(err.Error(), replay.ErrTrimmed.Error()+": "))
	}
	if err != nil {
		return nil, err
	}
	r.states.put(until, st)
	return st, nil
}

// stateCacheSize is how many replayed states StateAt keeps.
const stateCacheSize = 8

// stateCache keeps the most recently replayed states, most recent first.
type stateCache struct {
	mu     sync.Mutex
	states []cachedState
}

type cachedState struct {
	until string
	st    *projection.State
}

func (sc *stateCache) get(until string) (*projection.State, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for i, e := range sc.states {
		if e.until == until {
			// Most recently used first.
			copy(sc.states[1:i+1], sc.states[:i])
			sc.states[0] = e
			return e.st, true
		}
	}
	return nil, false
}

func (sc *stateCache) put(until string, st *projection.State) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.states = append([]cachedState{{until, st}}, sc.states...)
	if len(sc.states) > stateCacheSize {
		sc.states = sc.states[:stateCacheSize]
	}
}

// errTrimmedDuringFold: the log was trimmed past the position a fold was
// reading from, so the page it read may start after a gap. Nothing of that
// page was applied; the caller reloads from a snapshot and folds again.
var errTrimmedDuringFold = errors.New("the log was trimmed past the fold's position while it read")

// maxFoldAttempts bounds the reloads one catch-up or load makes when trims
// keep passing it (each attempt starts from a newer snapshot).
const maxFoldAttempts = 3

// foldLog folds the log after st's position into st, checking after every
// page it reads that the log was not trimmed past the position it read from
// (errTrimmedDuringFold; see projection.FoldOptions.Check): a check of the
// trim point before folding is not enough, since a trim can land between the
// check and the read.
func (r *Replica) foldLog(ctx context.Context, st *projection.State) (int, error) {
	var o projection.FoldOptions
	if t := r.cfg.Trimmer; t != nil {
		o.Check = func(ctx context.Context, after string) error {
			trimmed, err := t.TrimmedTo(ctx)
			if err != nil {
				return err
			}
			if cmp, _ := events.CompareIDs(after, trimmed); cmp < 0 {
				return fmt.Errorf("%w (read after %s, trimmed to %s)", errTrimmedDuringFold, after, trimmed)
			}
			return nil
		}
	}
	return projection.Fold(ctx, notingLog{r.log, r.recent}, st, o)
}

// reload reloads the projection before a catch-up when the log was trimmed
// past it, and holds it when the log no longer holds its last entry
// (holdIfLogLost: ErrLogLost).
func (r *Replica) reload(ctx context.Context) error {
	if err := r.reloadIfTrimmedPast(ctx); err != nil {
		return err
	}
	return r.holdIfLogLost(ctx)
}

// reloadIfTrimmedPast reloads the projection from the newest kept snapshot when
// the log was trimmed past its position: a follower that fell more than
// SnapshotKeep-1 snapshot intervals behind the leader would otherwise fold the
// entries after the gap onto a state that misses the ones in it.
func (r *Replica) reloadIfTrimmedPast(ctx context.Context) error {
	c := r
	if c.cfg.Trimmer == nil || c.snaps == nil {
		return nil
	}
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	trimmed, err := c.TrimmedTo(ctx)
	if err != nil {
		return err
	}
	at := c.state.LastID()
	if cmp, _ := events.CompareIDs(at, trimmed); cmp >= 0 {
		return nil
	}
	c.cfg.Logger.Warn().Str("lastId", at).Str("trimmedTo", trimmed).Msg("the log was trimmed past this projection; reloading from the newest snapshot")
	var st *projection.State
	r.recent.reset()
	for attempt := 1; ; attempt++ {
		if st, err = r.restoreSnapshot(ctx, trimmed); err != nil {
			return err
		}
		if st == nil {
			return fmt.Errorf("the log was trimmed past this projection (at %s, trimmed to %s) and no kept snapshot covers the gap", at, trimmed)
		}
		_, err = r.foldLog(ctx, st)
		if err == nil {
			break
		}
		if !errors.Is(err, errTrimmedDuringFold) || attempt == maxFoldAttempts {
			return err
		}
		if trimmed, err = c.TrimmedTo(ctx); err != nil {
			return err
		}
	}
	// Runs in the writer (catch-up): swapping is the one change to the
	// running projection that is not an Apply.
	c.state.Swap(st)
	r.rearm()
	return nil
}

// Load builds the projection before Run: the newest usable kept snapshot (if
// any, and if fromSnapshot; see restoreSnapshot) plus every entry after it, or
// the whole log. A log trimmed at its head cannot be folded from zero: without a
// usable snapshot Load fails. An undecodable entry stops the load with an error
// naming its id.
func (r *Replica) Load(ctx context.Context, fromSnapshot bool) error {
	c := r
	trimmed, err := r.adoptTrimRecord(ctx)
	if err != nil {
		return fmt.Errorf("read log trim point: %w", err)
	}
	r.reportGaps(ctx)
	var st *projection.State
	var restored bool
	var n int
	for attempt := 1; ; attempt++ {
		st, restored = projection.New(), false
		undecodable := ""
		if fromSnapshot && c.snaps != nil {
			snap, bad, err := r.restoreSnapshotNoting(ctx, trimmed)
			if err != nil {
				return err
			}
			if snap != nil {
				st, restored = snap, true
			}
			undecodable = bad
		}
		if !restored {
			if err := r.checkFoldable(trimmed, fromSnapshot); err != nil {
				if undecodable != "" {
					// The log cannot be folded from zero and the snapshot that
					// would start it cannot be decoded: nothing to build from.
					r.life.corrupt.Store(commands.WithMsg(commands.ErrMetadataCorrupt, "%s: kept snapshot %s cannot be decoded and the log was trimmed up to %s", commands.ErrMetadataCorrupt.Message, undecodable, trimmed))
				}
				return err
			}
		}
		r.recent.reset()
		n, err = r.foldLog(ctx, st)
		if err == nil {
			break
		}
		if !errors.Is(err, errTrimmedDuringFold) || attempt == maxFoldAttempts {
			r.life.markCorrupt(err)
			return err
		}
		// Another replica trimmed the log while this one read it: start again
		// from the snapshot that trim was behind.
		if trimmed, err = c.TrimmedTo(ctx); err != nil {
			return fmt.Errorf("read log trim point: %w", err)
		}
	}
	if err := r.backfillIndex(ctx); err != nil {
		return err
	}
	r.life.corrupt.Store(nil)
	c.state.Swap(st)
	r.rearm()
	r.life.healthy.Store(true)
	r.life.ready.Store(true)
	c.cfg.Logger.Info().Str("lastId", c.state.LastID()).Int("tail", n).Bool("fromSnapshot", restored).Msg("projection loaded")
	noteQuarantines(c.cfg.Logger, c.state, 0)
	return nil
}

// trimRecorder is a trimmer that records its trim point beside the log
// (redisstore.Log).
type trimRecorder interface {
	// AdoptTrimRecord writes the trim record of a log that has none (never
	// trimmed, or trimmed by a build without the record) and returns the trim
	// point and whether it wrote it.
	AdoptTrimRecord(ctx context.Context) (string, bool, error)
	// Gaps reports the entries missing after the trim point: how many (-1:
	// unknown) and the highest ("" when none).
	Gaps(ctx context.Context) (deleted int64, maxDeleted string, err error)
}

// adoptTrimRecord is the log's trim point, recorded from now on if it was
// not (so that an entry deleted later is never taken for a trim).
func (r *Replica) adoptTrimRecord(ctx context.Context) (string, error) {
	tr, ok := r.cfg.Trimmer.(trimRecorder)
	if !ok {
		return r.TrimmedTo(ctx)
	}
	to, adopted, err := tr.AdoptTrimRecord(ctx)
	if err != nil {
		return "", err
	}
	if adopted && to != events.ZeroID {
		r.cfg.Logger.Info().Str("trimmedTo", to).Msg("the log was trimmed by an earlier build (it has an archive): its trim point is recorded from now on")
	}
	return to, nil
}

// reportGaps logs the entries deleted from the log after its trim point:
// they are skipped, and start-up goes on.
func (r *Replica) reportGaps(ctx context.Context) {
	tr, ok := r.cfg.Trimmer.(trimRecorder)
	if !ok {
		return
	}
	n, maxDeleted, err := tr.Gaps(ctx)
	if err != nil {
		r.cfg.Logger.Warn().Err(err).Msg("read the log's gaps")
		return
	}
	if maxDeleted != "" {
		r.cfg.Logger.Warn().Int64("deleted", n).Str("maxDeletedId", maxDeleted).
			Msg("the log has gaps: entries after its trim point were deleted (XDEL, or skipped by replay repair); they are not a trim and are skipped")
	}
}

// follow tails the log so entries appended by another coordinator process reach
// this projection, and re-checks Redis after an outage. It folds nothing
// itself: catchUp folds, in the writer, what the log holds past seen, the last
// entry it read (the writer's catchUpPast).
func (r *Replica) follow(catchUp func(ctx context.Context, seen string) error) {
	c := r
	for {
		select {
		case <-r.life.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		entries, err := c.log.Tail(ctx, c.state.LastID(), 1, time.Second)
		cancel()
		if err != nil {
			r.life.healthy.Store(false)
			select {
			case <-r.life.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		foreign, seen := false, ""
		if len(entries) > 0 {
			// Our own appends are applied right after they land; only entries
			// beyond our position can have come from another process (or be
			// ours, read before the writer applied them: catchUpPast).
			seen = entries[len(entries)-1].ID
			cmp, _ := events.CompareIDs(seen, c.state.LastID())
			foreign = cmp > 0
		}
		if foreign || !r.life.healthy.Load() {
			jctx, jcancel := context.WithTimeout(context.Background(), 15*time.Second)
			err := catchUp(jctx, seen)
			jcancel()
			if err != nil && !errors.Is(err, commands.ErrTerminating) {
				c.cfg.Logger.Warn().Err(err).Msg("catch up with the log")
			}
		}
	}
}

// saveSnapshot writes a snapshot of the projection now.
func (r *Replica) saveSnapshot() {
	if r.snaps == nil || !r.life.ready.Load() {
		return
	}
	r.saveCapture(r.state.Capture())
}

// saveCapture encodes and stores a capture (outside every lock), then trims
// the log behind the oldest kept snapshot when configured.
func (r *Replica) saveCapture(capture *projection.Capture) {
	c := r
	if c.snaps == nil {
		return
	}
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
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
	r.trimLog()
}

// SaveSnapshot writes a snapshot now.
func (r *Replica) SaveSnapshot() { r.saveSnapshot() }
