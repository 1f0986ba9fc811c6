package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
)

// The history index. Every group's audit history is a stream of the group's
// log ids beside the log, in the log's cluster slot, written by the append
// script itself (atomically with the entries): "{<log>}:idx:h:<name>" for
// resharding and admin events, "{<log>}:idx:m:<name>" for membership chatter
// (member.*, assignment.*), where <name> is events.IndexName. A hash
// "{<log>}:idx" holds the index's high-water mark ("at": the last log id the
// appends indexed) and one field "n:<name>" per index. A page of a group's
// history is two XRANGEs, whatever the length of the log; the projection
// (and its snapshots) no longer carries the history. Trimming the log trims
// the membership streams at the same point; the history streams keep their ids
// (the archive keeps those entries).

// indexField is the one field of an index entry (its id is the log id).
const indexField = "t"

// historyIndex names, lists and trims the history index of one log (above);
// the log writes it in its append scripts.
type historyIndex struct {
	rdb redis.UniversalClient
	log string // the log's key
}

func (x historyIndex) key(suffix string) string {
	k, err := SameSlotKey(x.log, "idx"+suffix)
	if err != nil {
		// NewLog's callers use keys without a stray '}' (the coordinator checks
		// --log-stream); such a log just has no index in the same slot.
		return x.log + ":idx" + suffix
	}
	return k
}

// IndexKey is the hash of the history index (its high-water mark and names).
func (l *Log) IndexKey() string { return l.index.key("") }

// stream is the index stream of name: its membership chatter, or the rest of
// its history.
func (x historyIndex) stream(membership bool, name string) string {
	if membership {
		return x.key(":m:" + name)
	}
	return x.key(":h:" + name)
}

// indexedAppendLua is compare-and-append that also indexes: KEYS[1] the log,
// KEYS[kb] the index hash, the KEYS after it the index streams of the batch;
// ARGV[pos] the caller's position, ARGV[pos+1] the number of entries, then per
// entry its data, the KEYS position of its index stream (0: none) and the
// index name to register ("" when registered by an earlier entry).
func indexedAppendLua(pos, kb int) string {
	return comparePositionLua(pos) + fmt.Sprintf(`
local n = tonumber(ARGV[%[1]d + 1])
local ids = {}
for i = 0, n - 1 do
  local b = %[1]d + 2 + i * 3
  local id = redis.call('XADD', KEYS[1], '*', 'e', ARGV[b])
  ids[#ids+1] = id
  local k = tonumber(ARGV[b + 1])
  if k > 0 then
    redis.call('XADD', KEYS[k], id, 't', '1')
    if ARGV[b + 2] ~= '' then redis.call('HSET', KEYS[%[2]d], 'n:' .. ARGV[b + 2], '1') end
  end
end
if #ids > 0 then redis.call('HSET', KEYS[%[2]d], 'at', ids[#ids]) end
return ids
`, pos, kb)
}

var indexedAppendScript = redis.NewScript(indexedAppendLua(1, 2))

// appendArgs lays a batch out for indexedAppendLua: keys after the first
// firstKey ones, args after the position.
func (x historyIndex) appendArgs(batch []events.Draft, firstKey int) (keys []string, args []any) {
	keys = []string{x.key("")}
	pos := map[string]int{}
	args = append(args, len(batch))
	for _, d := range batch {
		k, name := 0, ""
		if d.Index != "" {
			hk := x.stream(d.Membership, d.Index)
			p, seen := pos[hk]
			if !seen {
				keys = append(keys, hk)
				p = firstKey + len(keys)
				pos[hk] = p
				name = d.Index
			}
			k = p
		}
		args = append(args, d.Data, k, name)
	}
	return keys, args
}

// AppendIndexed implements events.Indexed: compare-and-append of the batch,
// with each entry's id added to its group's history index in the same script.
func (l *Log) AppendIndexed(ctx context.Context, after string, batch []events.Draft) ([]string, error) {
	pos, err := events.ParseID(after)
	if err != nil {
		return nil, err
	}
	if len(batch) == 0 {
		return nil, nil
	}
	keys, args := l.index.appendArgs(batch, 1)
	res, err := l.repl.runScript(ctx, l.rdb, indexedAppendScript, append([]string{l.key}, keys...), append([]any{pos.String()}, args...)).StringSlice()
	if err != nil {
		return nil, appendError(err, l.key, after, len(batch), 0)
	}
	return res, nil
}

// History implements events.Indexed: up to limit ids of a group's history
// after after, both streams merged in order.
func (l *Log) History(ctx context.Context, index, after string, limit int) ([]string, error) {
	from, err := events.ParseID(after)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 1000
	}
	pipe := l.rdb.Pipeline()
	h := pipe.XRangeN(ctx, l.index.stream(false, index), "("+from.String(), "+", int64(limit))
	m := pipe.XRangeN(ctx, l.index.stream(true, index), "("+from.String(), "+", int64(limit))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the history index %s: %w", index, err)
	}
	ids := make([]events.ID, 0, 2*limit)
	for _, msgs := range [][]redis.XMessage{h.Val(), m.Val()} {
		for _, msg := range msgs {
			if id, err := events.ParseID(msg.ID); err == nil {
				ids = append(ids, id)
			}
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].Less(ids[j]) })
	if len(ids) > limit {
		ids = ids[:limit]
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out, nil
}

// names lists the names of every history index.
func (x historyIndex) names(ctx context.Context) ([]string, error) {
	fields, err := x.rdb.HKeys(ctx, x.key("")).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("list history indexes of %s: %w", x.log, err)
	}
	var out []string
	for _, f := range fields {
		if name, ok := strings.CutPrefix(f, "n:"); ok {
			out = append(out, name)
		}
	}
	return out, nil
}

// trim drops the membership index entries before id (their log entries
// were trimmed and not archived).
func (x historyIndex) trim(ctx context.Context, before events.ID) error {
	names, err := x.names(ctx)
	if err != nil {
		return err
	}
	pipe := x.rdb.Pipeline()
	for _, name := range names {
		pipe.XTrimMinID(ctx, x.stream(true, name), before.String())
	}
	if len(names) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("trim the membership history of %s: %w", x.log, err)
		}
	}
	return nil
}

// BackfillIndex indexes the entries the history index does not cover yet: a
// log written by a build without the index (once, at the first start of a
// build with it), or entries appended while the index was lost. It reads the
// log after the index's high-water mark and adds each entry of a group to its
// index. Entries below an index's newest id cannot be added to it (streams
// grow in order) and are counted as skipped; that only happens when a build
// without the index appended after one with it. It returns how many entries
// it indexed.
func (l *Log) BackfillIndex(ctx context.Context) (indexed, skipped int, err error) {
	at, err := l.rdb.HGet(ctx, l.IndexKey(), "at").Result()
	if errors.Is(err, redis.Nil) {
		at, err = events.ZeroID, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("read the history index mark of %s: %w", l.key, err)
	}
	pos := at
	for {
		msgs, err := l.rdb.XRangeN(ctx, l.key, "("+pos, "+", trimPage).Result()
		if err != nil {
			return indexed, skipped, fmt.Errorf("read %s after %s: %w", l.key, pos, err)
		}
		if len(msgs) == 0 {
			return indexed, skipped, nil
		}
		pipe := l.rdb.Pipeline()
		var adds []*redis.StringCmd
		names := map[string]bool{}
		for _, e := range toEntries(msgs) {
			rec, err := events.Decode(e.ID, e.Data)
			if err != nil {
				continue
			}
			name, membership := events.HistoryIndex(rec)
			if name == "" {
				continue
			}
			names[name] = true
			adds = append(adds, pipe.XAdd(ctx, &redis.XAddArgs{Stream: l.index.stream(membership, name), ID: e.ID, Values: []any{indexField, "1"}}))
		}
		fields := []any{"at", msgs[len(msgs)-1].ID}
		for name := range names {
			fields = append(fields, "n:"+name, "1")
		}
		pipe.HSet(ctx, l.IndexKey(), fields...)
		_, _ = pipe.Exec(ctx)
		for _, c := range adds {
			switch err := c.Err(); {
			case err == nil:
				indexed++
			case strings.Contains(err.Error(), "equal or smaller than the target stream top item"):
				skipped++
			default:
				return indexed, skipped, fmt.Errorf("index %s: %w", l.key, err)
			}
		}
		pos = msgs[len(msgs)-1].ID
	}
}

// IndexKeys lists every key of the history index (for tools that remove a
// log with everything beside it).
func (l *Log) IndexKeys(ctx context.Context) ([]string, error) {
	names, err := l.index.names(ctx)
	if err != nil {
		return nil, err
	}
	keys := []string{l.IndexKey()}
	for _, name := range names {
		keys = append(keys, l.index.stream(false, name), l.index.stream(true, name))
	}
	return keys, nil
}
