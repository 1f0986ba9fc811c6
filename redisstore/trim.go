package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
)

// trimPage is how many log entries one XRANGE of a trim reads.
const trimPage = 1000

// ArchiveKey is the stream that keeps the entries trimmed from the log's head
// that a trim was asked to keep, under their log ids: "<log stream>:archive".
func (l *Log) ArchiveKey() string { return l.key + ":archive" }

// Archive is the archive stream read as a log. Its ids are the log's; nothing
// appends to it but TrimBefore.
func (l *Log) Archive() events.Log { return NewLog(l.rdb, l.ArchiveKey()) }

// The trim record. The coordinator records where it trimmed the log in a
// hash beside it, in its cluster slot (TrimKey): "to" is the highest id a
// trim may have removed (every entry after it is still in the log, unless
// deleted by hand) and "removed" how many entries its trims removed. An entry
// missing after "to" is a gap (an operator's XDEL, or the entries a repair
// skipped), never a trim: it is skipped, and start-up goes on.
//
// Builds before the record trimmed without writing it: a log with an archive
// (only TrimBefore writes one) and no record was trimmed by such a build, up
// to the entry before its first one, where those builds' trims always left
// it (XTRIM MINID <the oldest kept snapshot's id> keeps that entry). A log
// with neither was never trimmed, whatever XINFO says was deleted from it.
// AdoptTrimRecord writes what it finds as the record, once.

// TrimKey is the hash of the log's trim record.
func (l *Log) TrimKey() string {
	k, err := SameSlotKey(l.key, "trim")
	if err != nil {
		return l.key + ":trim"
	}
	return k
}

// TrimmedTo is the highest id that may have been removed from the log's head
// by a trim: every entry after it is still there, unless an operator deleted
// it (a gap). events.ZeroID when the log was never trimmed, or does not
// exist. It reads the trim record, or, for a log trimmed by a build without
// one, works it out (see above).
func (l *Log) TrimmedTo(ctx context.Context) (string, error) {
	to, err := l.rdb.HGet(ctx, l.TrimKey(), "to").Result()
	if err == nil {
		id, err := events.ParseID(to)
		if err != nil {
			return "", fmt.Errorf("trim record %s holds %q: %w", l.TrimKey(), to, err)
		}
		return id.String(), nil
	}
	if !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("trim point of %s: %w", l.key, err)
	}
	return l.legacyTrimmedTo(ctx)
}

// legacyTrimmedTo is the trim point of a log without a trim record: the
// entry before its first one when a build without the record trimmed it
// (it has an archive), else events.ZeroID.
func (l *Log) legacyTrimmedTo(ctx context.Context) (string, error) {
	info, found, err := streamInfo(ctx, l.rdb, l.key)
	if err != nil {
		return "", fmt.Errorf("trim point of %s: %w", l.key, err)
	}
	if !found {
		return events.ZeroID, nil
	}
	if info.EntriesAdded <= info.Length {
		return events.ZeroID, nil
	}
	archived, err := l.rdb.XLen(ctx, l.ArchiveKey()).Result()
	if err != nil {
		return "", fmt.Errorf("trim point of %s: %w", l.key, err)
	}
	if archived == 0 {
		return events.ZeroID, nil // never trimmed: what is missing was deleted by hand
	}
	if info.Length == 0 {
		return info.LastGeneratedID, nil
	}
	first, err := events.ParseID(info.FirstEntry.ID)
	if err != nil {
		return "", fmt.Errorf("trim point of %s: %w", l.key, err)
	}
	return predecessor(first).String(), nil
}

// AdoptTrimRecord writes the trim record of a log that has none (a log no
// build of this kind trimmed yet, or one trimmed by a build without the
// record; see above), so that what is deleted from the log later is never
// taken for a trim. It returns the trim point and whether it wrote it.
func (l *Log) AdoptTrimRecord(ctx context.Context) (string, bool, error) {
	to, err := l.TrimmedTo(ctx)
	if err != nil {
		return "", false, err
	}
	set, err := l.rdb.HSetNX(ctx, l.TrimKey(), "to", to).Result()
	if err != nil {
		return "", false, fmt.Errorf("record the trim point of %s: %w", l.key, err)
	}
	return to, set, nil
}

// recordTrimScript raises the trim record's "to" to ARGV[1] (never lowers it).
var recordTrimScript = redis.NewScript(`
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local cur = redis.call('HGET', KEYS[1], 'to')
if cur then
  local cm, cs = parse(cur)
  local nm, ns = parse(ARGV[1])
  if cm > nm or (cm == nm and cs >= ns) then return 0 end
end
redis.call('HSET', KEYS[1], 'to', ARGV[1])
return 1
`)

// recordTrim raises the trim record to to before a trim removes anything up
// to it: a crash between the two leaves a record ahead of the log (a fold
// from zero is refused although it was still possible), never a trimmed log
// without its record.
func (l *Log) recordTrim(ctx context.Context, to events.ID) error {
	// Lua numbers are doubles: an id part beyond 2^53 would compare wrong.
	// Real ids are milliseconds and small sequences; a larger one is
	// recorded as it is, without the comparison.
	if to.Ms > 1<<53 || to.Seq > 1<<53 {
		return l.rdb.HSet(ctx, l.TrimKey(), "to", to.String()).Err()
	}
	if err := recordTrimScript.Run(ctx, l.rdb, []string{l.TrimKey()}, to.String()).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("record the trim point of %s: %w", l.key, err)
	}
	return nil
}

// Gaps reports the entries missing from the log after its trim point
// (deleted by hand, or skipped by a repair): how many (-1 when it cannot be
// told) and the highest of them ("" when none).
func (l *Log) Gaps(ctx context.Context) (deleted int64, maxDeleted string, err error) {
	info, found, err := streamInfo(ctx, l.rdb, l.key)
	if err != nil {
		return 0, "", fmt.Errorf("gaps of %s: %w", l.key, err)
	}
	if !found {
		return 0, "", nil
	}
	to, err := l.TrimmedTo(ctx)
	if err != nil {
		return 0, "", err
	}
	trimmed, _ := events.ParseID(to)
	del, err := events.ParseID(info.MaxDeletedEntryID)
	if err != nil || !trimmed.Less(del) {
		return 0, "", nil
	}
	removed, err := l.rdb.HGet(ctx, l.TrimKey(), "removed").Int64()
	switch {
	case errors.Is(err, redis.Nil):
		if to != events.ZeroID {
			return -1, del.String(), nil
		}
		removed = 0
	case err != nil:
		return 0, "", fmt.Errorf("gaps of %s: %w", l.key, err)
	}
	return info.EntriesAdded - info.Length - removed, del.String(), nil
}

// predecessor is the greatest id below id.
func predecessor(id events.ID) events.ID {
	switch {
	case id.Seq > 0:
		return events.ID{Ms: id.Ms, Seq: id.Seq - 1}
	case id.Ms > 0:
		return events.ID{Ms: id.Ms - 1, Seq: ^uint64(0)}
	}
	return events.ID{}
}

// TrimBefore removes every entry before id from the log (XTRIM MINID; the
// last generated id, which compare-and-append checks, does not change), and
// records the trim point first (TrimKey). First
// it copies the entries before id that keep selects into the archive, under
// their own ids (XADD with an explicit id), in order. It can be run again
// after a crash at any point: entries at or below the archive's last id are
// not copied twice. It reports how many entries it archived and how many it
// removed. No command touches two keys, so the log and the archive may live in
// different hash slots. With a Replication, the copies must be acknowledged by
// the replicas before anything is removed (ErrNotReplicated otherwise, and the
// log stays as it is): a failover cannot keep the trim and lose the copies.
func (l *Log) TrimBefore(ctx context.Context, id string, keep func(events.Entry) bool) (archived, removed int64, err error) {
	before, err := events.ParseID(id)
	if err != nil {
		return 0, 0, err
	}
	arch := l.ArchiveKey()
	pos, err := NewLog(l.rdb, arch).LastID(ctx)
	if err != nil {
		return 0, 0, err
	}
	for keep != nil {
		msgs, err := l.rdb.XRangeN(ctx, l.key, "("+pos, "("+before.String(), trimPage).Result()
		if err != nil {
			return archived, 0, fmt.Errorf("read %s before %s: %w", l.key, before, err)
		}
		if len(msgs) == 0 {
			break
		}
		pipe := l.rdb.Pipeline()
		if l.repl.Replicas > 0 {
			// The copies must reach the replicas before the entries go: WAIT
			// on the connection that wrote them (the archive's node).
			node, err := nodeFor(ctx, l.rdb, arch)
			if err != nil {
				return archived, 0, err
			}
			pipe = node.Pipeline()
		}
		var adds []*redis.StringCmd
		var ids []string
		for _, e := range toEntries(msgs) {
			if keep(e) {
				adds = append(adds, pipe.XAdd(ctx, &redis.XAddArgs{Stream: arch, ID: e.ID, Values: []any{entryField, e.Data}}))
				ids = append(ids, e.ID)
			}
		}
		var wait *redis.Cmd
		if len(adds) > 0 && l.repl.Replicas > 0 {
			wait = pipe.Do(ctx, "WAIT", l.repl.Replicas, max(1, l.repl.Timeout.Milliseconds()))
		}
		if len(adds) > 0 {
			_, _ = pipe.Exec(ctx)
		}
		for i, c := range adds {
			if err := c.Err(); err != nil {
				// Another trim got there first: the entry is archived.
				if strings.Contains(err.Error(), "equal or smaller than the target stream top item") {
					continue
				}
				return archived, 0, fmt.Errorf("archive %s to %s: %w", ids[i], arch, err)
			}
			archived++
		}
		if wait != nil {
			if n, err := wait.Int64(); err != nil || n < int64(l.repl.Replicas) {
				return archived, 0, fmt.Errorf("archive before %s: %w: %d of %d replicas (%v); the log is not trimmed", before, ErrNotReplicated, n, l.repl.Replicas, err)
			}
		}
		pos = msgs[len(msgs)-1].ID
	}
	head, err := l.rdb.XRangeN(ctx, l.key, "-", "("+before.String(), 1).Result()
	if err != nil {
		return archived, 0, fmt.Errorf("read %s before %s: %w", l.key, before, err)
	}
	if len(head) > 0 {
		if err := l.recordTrim(ctx, predecessor(before)); err != nil {
			return archived, 0, err
		}
		removed, err = l.rdb.XTrimMinID(ctx, l.key, before.String()).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return archived, 0, fmt.Errorf("trim %s before %s: %w", l.key, before, err)
		}
		if removed > 0 {
			if err := l.rdb.HIncrBy(ctx, l.TrimKey(), "removed", removed).Err(); err != nil {
				return archived, removed, fmt.Errorf("record the trim of %s: %w", l.key, err)
			}
		}
	}
	if err := l.index.trim(ctx, before); err != nil {
		return archived, removed, err
	}
	return archived, removed, nil
}
