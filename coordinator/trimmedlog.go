package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

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

// trimmedLog is the event log with what trimming keeps beside it: its trim
// point, the archive below it, the history index and the gaps after it. The
// replica's parts read the log through it.
type trimmedLog struct {
	log     events.Log
	trimmer LogTrimmer // nil: the log is never trimmed
	logger  zerolog.Logger
}

// TrimmedTo is the highest id trimmed from the log (events.ZeroID when it never
// was, or no trimmer is configured).
func (l *trimmedLog) TrimmedTo(ctx context.Context) (string, error) {
	if l.trimmer == nil {
		return events.ZeroID, nil
	}
	return l.trimmer.TrimmedTo(ctx)
}

// GroupHistory pages a group's audit history (every event recorded for it,
// refused commands included, also after the group was deleted): up to limit
// entries after after, and the id to page on from when the page was full. It
// reads the group's history index beside the log, so its cost does not grow
// with the log. On a trimmed log the membership events before the trim point
// are gone: the page skips them.
func (l *trimmedLog) GroupHistory(ctx context.Context, k projection.GroupKey, after string, limit int) ([]events.Entry, string, error) {
	hl := l.HistoryLog()
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

// HistoryLog is the log to read the audit history from: the archive below the
// log's first entry, then the log (just the log when nothing archives).
func (l *trimmedLog) HistoryLog() events.Log {
	if l.trimmer == nil {
		return l.log
	}
	return events.WithArchive(l.log, l.trimmer.Archive())
}

// indexBackfiller is a log whose history index can catch up with entries it
// does not cover yet (redisstore.Log).
type indexBackfiller interface {
	BackfillIndex(ctx context.Context) (indexed, skipped int, err error)
}

// backfillIndex brings the history index up to the log's end before this
// process appends: after an upgrade from a build without the index it indexes
// the whole log once.
func (l *trimmedLog) backfillIndex(ctx context.Context) error {
	b, ok := l.indexLog().(indexBackfiller)
	if !ok {
		return nil
	}
	n, skipped, err := b.BackfillIndex(ctx)
	if err != nil {
		return fmt.Errorf("index the log's history: %w", err)
	}
	if n > 0 || skipped > 0 {
		l.logger.Info().Int("indexed", n).Int("skipped", skipped).Msg("history index caught up with the log")
	}
	return nil
}

// indexLog is the log that keeps the index: the trimmer's (the unfenced log)
// or the log itself.
func (l *trimmedLog) indexLog() any {
	if l.trimmer != nil {
		return l.trimmer
	}
	return l.log
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
func (l *trimmedLog) adoptTrimRecord(ctx context.Context) (string, error) {
	tr, ok := l.trimmer.(trimRecorder)
	if !ok {
		return l.TrimmedTo(ctx)
	}
	to, adopted, err := tr.AdoptTrimRecord(ctx)
	if err != nil {
		return "", err
	}
	if adopted && to != events.ZeroID {
		l.logger.Info().Str("trimmedTo", to).Msg("the log was trimmed by an earlier build (it has an archive): its trim point is recorded from now on")
	}
	return to, nil
}

// reportGaps logs the entries deleted from the log after its trim point:
// they are skipped, and start-up goes on.
func (l *trimmedLog) reportGaps(ctx context.Context) {
	tr, ok := l.trimmer.(trimRecorder)
	if !ok {
		return
	}
	n, maxDeleted, err := tr.Gaps(ctx)
	if err != nil {
		l.logger.Warn().Err(err).Msg("read the log's gaps")
		return
	}
	if maxDeleted != "" {
		l.logger.Warn().Int64("deleted", n).Str("maxDeletedId", maxDeleted).
			Msg("the log has gaps: entries after its trim point were deleted (XDEL, or skipped by replay repair); they are not a trim and are skipped")
	}
}

// errTrimmedNoSnapshot: the log cannot be folded from zero and no snapshot
// starts it. Start-up keeps retrying: a snapshot put back makes it succeed.
var errTrimmedNoSnapshot = errors.New("the log was trimmed (--trim-log) and no kept snapshot reaches its trim point")

// checkFoldable refuses to fold a log trimmed up to trimmed from zero.
func checkFoldable(trimmed string, fromSnapshot bool) error {
	if trimmed == events.ZeroID {
		return nil
	}
	if !fromSnapshot {
		return fmt.Errorf("the log was trimmed up to %s (--trim-log): it cannot be folded from zero, so --ignore-snapshot cannot start it", trimmed)
	}
	return fmt.Errorf("%w (%s); restore a snapshot taken at or after it", errTrimmedNoSnapshot, trimmed)
}
