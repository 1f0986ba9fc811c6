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

// TrimmedTo is the highest id that may have been removed from the log's head:
// every entry after it is still there. events.ZeroID when nothing was ever
// removed, or the stream does not exist. It reads XINFO STREAM (Redis 7): when
// entries-added exceeds the length, entries were removed, and they were the
// ones below the first entry (XTRIM), or up to max-deleted-entry-id (XDEL),
// whichever is higher.
func (l *Log) TrimmedTo(ctx context.Context) (string, error) {
	info, err := l.rdb.XInfoStream(ctx, l.key).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return events.ZeroID, nil
		}
		return "", fmt.Errorf("trim point of %s: %w", l.key, err)
	}
	if info.EntriesAdded <= info.Length {
		return events.ZeroID, nil
	}
	to := events.ID{}
	if info.Length == 0 {
		if to, err = events.ParseID(info.LastGeneratedID); err != nil {
			return "", fmt.Errorf("trim point of %s: %w", l.key, err)
		}
	} else if first, err := events.ParseID(info.FirstEntry.ID); err == nil {
		to = predecessor(first)
	}
	if del, err := events.ParseID(info.MaxDeletedEntryID); err == nil && to.Less(del) {
		to = del
	}
	return to.String(), nil
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
// last generated id, which compare-and-append checks, does not change). First
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
	removed, err = l.rdb.XTrimMinID(ctx, l.key, before.String()).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return archived, 0, fmt.Errorf("trim %s before %s: %w", l.key, before, err)
	}
	if err := l.trimIndex(ctx, before); err != nil {
		return archived, removed, err
	}
	return archived, removed, nil
}
