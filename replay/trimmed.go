package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// TrimmedLog is a log the coordinator trimmed at its head (--trim-log): the
// log holds every entry after TrimmedTo, the archive holds the resharding and
// admin events trimmed from it (same ids; membership events were dropped), and
// a kept snapshot taken at or after TrimmedTo is where folding starts, since a
// fold from zero is no longer possible.
//
// Hand it to this package's functions in place of the log: it reads as the
// archive below the log's first entry followed by the log (Events lists the
// archived history), and folds start from its base snapshot. A point before
// the base is ErrTrimmed.
type TrimmedLog struct {
	events.Log
	trimmedTo string
	base      []byte // nil: no snapshot reaches the trim point
	baseID    string
}

// NewTrimmedLog describes a trimmed log. snapshots are the kept snapshots
// (oldest first is fastest, any order works): the oldest one that restores and
// is at or after trimmedTo becomes the base. With none, only Events works; the
// folds are ErrTrimmed.
func NewTrimmedLog(log, archive events.Log, trimmedTo string, snapshots [][]byte) (*TrimmedLog, error) {
	if _, err := parseUserID("trim point", trimmedTo); err != nil {
		return nil, err
	}
	t := &TrimmedLog{Log: events.WithArchive(log, archive), trimmedTo: trimmedTo}
	for _, data := range snapshots {
		st, err := projection.Restore(data)
		if err != nil {
			continue
		}
		if c, _ := events.CompareIDs(st.LastID(), trimmedTo); c < 0 {
			continue
		}
		if t.base != nil {
			if c, _ := events.CompareIDs(st.LastID(), t.baseID); c >= 0 {
				continue
			}
		}
		t.base, t.baseID = data, st.LastID()
	}
	return t, nil
}

// TrimmedTo is the highest id removed from the log.
func (t *TrimmedLog) TrimmedTo() string { return t.trimmedTo }

// BaseID is the last id of the snapshot folds start from ("" when none).
func (t *TrimmedLog) BaseID() string { return t.baseID }

// restoreBase returns a fresh state restored from the base snapshot.
func (t *TrimmedLog) restoreBase() (*projection.State, error) {
	if t.base == nil {
		return nil, fmt.Errorf("%w: the log was trimmed up to %s and no kept snapshot reaches that point; only the events (with the archive) can be read", ErrTrimmed, t.trimmedTo)
	}
	return projection.Restore(t.base)
}

// errBefore is ErrTrimmed for a point before the base.
func (t *TrimmedLog) errBefore(what string) error {
	return fmt.Errorf("%w: %s is before %s, the oldest point that can be replayed (the log was trimmed up to %s; the archive keeps only the resharding and admin events before it: see `replay events` and `replay history`)", ErrTrimmed, what, t.baseID, t.trimmedTo)
}

// startFolder returns a folder at the first point log can be folded from:
// zero, or the base snapshot of a TrimmedLog.
func startFolder(ctx context.Context, log events.Log) (*folder, error) {
	if t, ok := log.(*TrimmedLog); ok {
		st, err := t.restoreBase()
		if err != nil {
			return nil, err
		}
		return newFolder(ctx, log, st)
	}
	return newFolder(ctx, log, projection.New())
}

// checkPoint refuses a point (an id given by the caller) that lies before the
// base of a TrimmedLog.
func checkPoint(log events.Log, what, id string) error {
	t, ok := log.(*TrimmedLog)
	if !ok || id == "" {
		return nil
	}
	if t.base == nil {
		_, err := t.restoreBase()
		return err
	}
	if c, err := events.CompareIDs(id, t.baseID); err == nil && c < 0 {
		return t.errBefore(what + " " + id)
	}
	return nil
}

// checkTime refuses a time before the decision time of the base snapshot's
// last entry of a TrimmedLog (the log keeps that entry: it is trimmed behind).
func checkTime(ctx context.Context, log events.Log, at time.Time) error {
	t, ok := log.(*TrimmedLog)
	if !ok {
		return nil
	}
	if t.base == nil {
		_, err := t.restoreBase()
		return err
	}
	entries, err := t.Get(ctx, []string{t.baseID})
	if err != nil {
		return fmt.Errorf("read log entry %s: %w", t.baseID, err)
	}
	if len(entries) == 0 {
		return nil
	}
	rec, err := events.Decode(entries[0].ID, entries[0].Data)
	if err != nil {
		return err
	}
	if rec.Time.After(at) {
		return t.errBefore("time " + at.UTC().Format(time.RFC3339Nano))
	}
	return nil
}
