package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// loader builds the projection from the newest usable kept snapshot and the
// log after it: at start (load), and again, in the writer, when the log was
// trimmed past the projection, lost entries no replica had acknowledged, or
// was restored from another state. Every fold goes through projection.Fold.
type loader struct {
	tl     *trimmedLog
	snaps  *snapshots
	state  *projection.State
	life   *lifecycle
	recent *recentIDs // noted by every fold (guard.go)
	// rearm gives every member a fresh lease after a load or a reload.
	rearm  func()
	logger zerolog.Logger
	mu     sync.Mutex // one reload from a snapshot at a time
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
func (l *loader) foldLog(ctx context.Context, st *projection.State) (int, error) {
	var o projection.FoldOptions
	if t := l.tl.trimmer; t != nil {
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
	return projection.Fold(ctx, notingLog{l.tl.log, l.recent}, st, o)
}

// load builds the projection before Run: the newest usable kept snapshot (if
// any, and if fromSnapshot; see snapshots.restore) plus every entry after it,
// or the whole log. A log trimmed at its head cannot be folded from zero:
// without a usable snapshot load fails. An undecodable entry stops the load
// with an error naming its id.
func (l *loader) load(ctx context.Context, fromSnapshot bool) error {
	trimmed, err := l.tl.adoptTrimRecord(ctx)
	if err != nil {
		return fmt.Errorf("read log trim point: %w", err)
	}
	l.tl.reportGaps(ctx)
	var st *projection.State
	var restored bool
	var n int
	for attempt := 1; ; attempt++ {
		st, restored = projection.New(), false
		undecodable := ""
		if fromSnapshot && l.snaps.on() {
			snap, bad, err := l.snaps.restoreNoting(ctx, trimmed)
			if err != nil {
				return err
			}
			if snap != nil {
				st, restored = snap, true
			}
			undecodable = bad
		}
		if !restored {
			if err := checkFoldable(trimmed, fromSnapshot); err != nil {
				if undecodable != "" {
					// The log cannot be folded from zero and the snapshot that
					// would start it cannot be decoded: nothing to build from.
					l.life.corrupt.Store(commands.WithMsg(commands.ErrMetadataCorrupt, "%s: kept snapshot %s cannot be decoded and the log was trimmed up to %s", commands.ErrMetadataCorrupt.Message, undecodable, trimmed))
				}
				return err
			}
		}
		l.recent.reset()
		n, err = l.foldLog(ctx, st)
		if err == nil {
			break
		}
		if !errors.Is(err, errTrimmedDuringFold) || attempt == maxFoldAttempts {
			l.life.markCorrupt(err)
			return err
		}
		// Another replica trimmed the log while this one read it: start again
		// from the snapshot that trim was behind.
		if trimmed, err = l.tl.TrimmedTo(ctx); err != nil {
			return fmt.Errorf("read log trim point: %w", err)
		}
	}
	if err := l.tl.backfillIndex(ctx); err != nil {
		return err
	}
	l.life.corrupt.Store(nil)
	l.state.Swap(st)
	l.rearm()
	l.life.healthy.Store(true)
	l.life.ready.Store(true)
	l.logger.Info().Str("lastId", l.state.LastID()).Int("tail", n).Bool("fromSnapshot", restored).Msg("projection loaded")
	noteQuarantines(l.logger, l.state, 0)
	return nil
}

// reloadIfTrimmedPast reloads the projection from the newest kept snapshot when
// the log was trimmed past its position: a follower that fell more than
// SnapshotKeep-1 snapshot intervals behind the leader would otherwise fold the
// entries after the gap onto a state that misses the ones in it.
func (l *loader) reloadIfTrimmedPast(ctx context.Context) error {
	if l.tl.trimmer == nil || !l.snaps.on() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	trimmed, err := l.tl.TrimmedTo(ctx)
	if err != nil {
		return err
	}
	at := l.state.LastID()
	if cmp, _ := events.CompareIDs(at, trimmed); cmp >= 0 {
		return nil
	}
	l.logger.Warn().Str("lastId", at).Str("trimmedTo", trimmed).Msg("the log was trimmed past this projection; reloading from the newest snapshot")
	var st *projection.State
	l.recent.reset()
	for attempt := 1; ; attempt++ {
		if st, err = l.snaps.restore(ctx, trimmed); err != nil {
			return err
		}
		if st == nil {
			return fmt.Errorf("the log was trimmed past this projection (at %s, trimmed to %s) and no kept snapshot covers the gap", at, trimmed)
		}
		_, err = l.foldLog(ctx, st)
		if err == nil {
			break
		}
		if !errors.Is(err, errTrimmedDuringFold) || attempt == maxFoldAttempts {
			return err
		}
		if trimmed, err = l.tl.TrimmedTo(ctx); err != nil {
			return err
		}
	}
	// Runs in the writer (catch-up): swapping is the one change to the
	// running projection that is not an Apply.
	l.state.Swap(st)
	l.rearm()
	return nil
}

// reloadFromLog replaces the projection with the replay of the log as it is
// (the newest kept snapshot the log still holds, plus the tail; or the whole
// log). It runs in the writer.
func (l *loader) reloadFromLog(ctx context.Context) error {
	trimmed, err := l.tl.TrimmedTo(ctx)
	if err != nil {
		return err
	}
	st := projection.New()
	if l.snaps.on() {
		snap, err := l.snaps.restore(ctx, trimmed)
		if err != nil {
			return err
		}
		if snap != nil {
			st = snap
		}
	}
	if st.LastID() == events.ZeroID {
		if err := checkFoldable(trimmed, true); err != nil {
			return err
		}
	}
	return l.replace(ctx, st)
}

// reloadFromSnapshot replaces the projection with the newest usable kept
// snapshot and the log after it (the log was restored from a state this
// projection cannot fold to). It runs in the writer.
func (l *loader) reloadFromSnapshot(ctx context.Context) error {
	if !l.snaps.on() {
		return fmt.Errorf("the log was restored from a snapshot and this coordinator reads none")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	trimmed, err := l.tl.TrimmedTo(ctx)
	if err != nil {
		return err
	}
	st, err := l.snaps.restore(ctx, trimmed)
	if err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("the log was restored from a snapshot and no kept snapshot reaches the restore")
	}
	return l.replace(ctx, st)
}

// recentIDsKept bounds the applied ids a replica remembers to count the
// entries a failover lost.
const recentIDsKept = 1024

// recentIDs are the ids of the last entries the projection applied, oldest
// first (at most recentIDsKept).
type recentIDs struct {
	mu  sync.Mutex
	ids []string
}

func (r *recentIDs) note(ids ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, ids...)
	if over := len(r.ids) - recentIDsKept; over > 0 {
		r.ids = append(r.ids[:0], r.ids[over:]...)
	}
}

// reset forgets them (the projection was replaced); ids are the new ones.
func (r *recentIDs) reset(ids ...string) {
	r.mu.Lock()
	r.ids = r.ids[:0]
	r.mu.Unlock()
	r.note(ids...)
}

func (r *recentIDs) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// notingLog is a log whose reads note the ids they return: what a fold read
// is what it applied.
type notingLog struct {
	events.Log
	recent *recentIDs
}

func (n notingLog) Read(ctx context.Context, after string, count int) ([]events.Entry, error) {
	entries, err := n.Log.Read(ctx, after, count)
	if len(entries) > 0 {
		ids := make([]string, len(entries))
		for i, e := range entries {
			ids[i] = e.ID
		}
		n.recent.note(ids...)
	}
	return entries, err
}

// replace folds the log after st into st and makes it the projection (in
// the writer: swapping is the one change to the running projection that is
// not an Apply).
func (l *loader) replace(ctx context.Context, st *projection.State) error {
	l.recent.reset()
	if _, err := l.foldLog(ctx, st); err != nil {
		return err
	}
	l.state.Swap(st)
	l.rearm()
	return nil
}
