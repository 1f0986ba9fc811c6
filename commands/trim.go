package commands

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
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
// did, and every migration's stateHistory (it is part of the projection),
// stay.

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
func (c *Coordinator) TrimmedTo(ctx context.Context) (string, error) {
	if c.cfg.Trimmer == nil {
		return events.ZeroID, nil
	}
	return c.cfg.Trimmer.TrimmedTo(ctx)
}

// HistoryLog is the log to read the audit history from: the archive below the
// log's first entry, then the log (just the log when nothing archives).
func (c *Coordinator) HistoryLog() events.Log {
	if c.cfg.Trimmer == nil {
		return c.log
	}
	return events.WithArchive(c.log, c.cfg.Trimmer.Archive())
}

// restoreSnapshot restores the newest kept snapshot that can start a fold of
// the log: it decodes, it is not ahead of the log (a log that was reset), and
// it is not behind the trim point (the log holds its whole tail). Snapshots
// that cannot are logged and the next older one is tried. nil when none can.
func (c *Coordinator) restoreSnapshot(ctx context.Context, trimmed string) (*projection.State, error) {
	last, err := c.log.LastID(ctx)
	if err != nil {
		return nil, fmt.Errorf("read log position: %w", err)
	}
	ids, err := c.snaps.Kept(ctx)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
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
			return nil, fmt.Errorf("load snapshot: %w", err)
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
		return restored, nil
	}
	return nil, nil
}

// errTrimmedNoSnapshot: the log cannot be folded from zero and no snapshot
// starts it. Start-up keeps retrying: a snapshot put back makes it succeed.
var errTrimmedNoSnapshot = errors.New("the log was trimmed (--trim-log) and no kept snapshot reaches its trim point")

// checkFoldable refuses to fold a trimmed log from zero.
func (c *Coordinator) checkFoldable(trimmed string, fromSnapshot bool) error {
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
func (c *Coordinator) trimLog() {
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

// StateAt folds the log up to and including until into a fresh projection. On
// a trimmed log the fold starts from the newest kept snapshot at or before
// until; a point before the oldest such snapshot is ErrLogTrimmed, naming the
// oldest point that can still be replayed.
func (c *Coordinator) StateAt(ctx context.Context, until string) (*projection.State, error) {
	trimmed, err := c.TrimmedTo(ctx)
	if err != nil {
		return nil, err
	}
	if trimmed == events.ZeroID || c.snaps == nil {
		st := projection.New()
		if _, err := FoldLog(ctx, c.log, st, until); err != nil {
			return nil, err
		}
		return st, nil
	}
	ids, err := c.snaps.Kept(ctx)
	if err != nil {
		return nil, err
	}
	oldest := ""
	for _, id := range ids { // newest first
		if cmp, err := events.CompareIDs(id, trimmed); err != nil || cmp < 0 {
			continue
		}
		oldest = id
		if cmp, _ := events.CompareIDs(id, until); cmp > 0 {
			continue
		}
		data, err := c.snaps.LoadAt(ctx, id)
		if err != nil {
			return nil, err
		}
		if data == nil {
			continue
		}
		st, err := projection.Restore(data)
		if err != nil || st.LastID() != id {
			continue
		}
		if _, err := FoldLog(ctx, c.log, st, until); err != nil {
			return nil, err
		}
		return st, nil
	}
	if oldest == "" {
		return nil, withMsg(ErrLogTrimmed, "the event log was trimmed up to %s and no kept snapshot reaches that point: no state can be replayed", trimmed)
	}
	return nil, withMsg(ErrLogTrimmed, "the event log was trimmed (--trim-log): the state at %s can no longer be replayed; the oldest replayable id is %s (the oldest kept snapshot). The audit history still lists the resharding and admin events before it", until, oldest)
}

// reloadIfTrimmedPast reloads the projection from the newest kept snapshot when
// the log was trimmed past its position: a follower that fell more than
// SnapshotKeep-1 snapshot intervals behind the leader would otherwise fold the
// entries after the gap onto a state that misses the ones in it.
func (c *Coordinator) reloadIfTrimmedPast(ctx context.Context) error {
	if c.cfg.Trimmer == nil || c.snaps == nil {
		return nil
	}
	c.reloadMu.Lock()
	defer c.reloadMu.Unlock()
	trimmed, err := c.TrimmedTo(ctx)
	if err != nil {
		return err
	}
	at := c.state.LastID()
	if cmp, _ := events.CompareIDs(at, trimmed); cmp >= 0 {
		return nil
	}
	c.cfg.Logger.Warn().Str("lastId", at).Str("trimmedTo", trimmed).Msg("the log was trimmed past this projection; reloading from the newest snapshot")
	st, err := c.restoreSnapshot(ctx, trimmed)
	if err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("the log was trimmed past this projection (at %s, trimmed to %s) and no kept snapshot covers the gap", at, trimmed)
	}
	if _, err := FoldLog(ctx, c.log, st, ""); err != nil {
		return err
	}
	c.state.Swap(st)
	c.rearm()
	return nil
}
