package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
)

// DefaultLogStream is the default key of the coordinator's event log.
const DefaultLogStream = "coordinator:events"

// entryField is the stream field that holds an encoded envelope.
const entryField = "e"

// appendScript is compare-and-append: the batch lands only if the stream's last
// generated id is still the caller's position. The script runs atomically, so two
// coordinators appending against the same stale position can never both succeed.
var appendScript = redis.NewScript(compareAndAppendLua(1))

// comparePositionLua opens every append script: it refuses with RSCCONFLICT
// and the log's last generated id unless that id (KEYS[1] the log, '0-0'
// when it does not exist) is still the caller's position ARGV[pos].
func comparePositionLua(pos int) string {
	return luaXInfo + fmt.Sprintf(`
local last = '0-0'
if redis.call('EXISTS', KEYS[1]) == 1 then
  last = streamInfo(KEYS[1])['last-generated-id'] or last
end
if last ~= ARGV[%d] then
  return redis.error_reply('RSCCONFLICT ' .. last)
end`, pos)
}

// compareAndAppendLua is the body of every plain append script: KEYS[1] is
// the log, ARGV[pos] the caller's position, the ARGVs after it the entries.
func compareAndAppendLua(pos int) string {
	return comparePositionLua(pos) + fmt.Sprintf(`
local ids = {}
for i = %d, #ARGV do
  ids[#ids+1] = redis.call('XADD', KEYS[1], '*', 'e', ARGV[i])
end
return ids
`, pos+1)
}

// Log is an events.Log on one Redis Stream.
type Log struct {
	rdb   redis.UniversalClient
	key   string
	repl  Replication
	index historyIndex // index.go
}

// NewLog returns the log stored at key.
func NewLog(rdb redis.UniversalClient, key string) *Log {
	if key == "" {
		key = DefaultLogStream
	}
	return &Log{rdb: rdb, key: key, index: historyIndex{rdb: rdb, log: key}}
}

// Key is the stream key of the log.
func (l *Log) Key() string { return l.key }

// SetReplication makes every append (plain, indexed and fenced) wait for
// r.Replicas replicas to acknowledge it (see ErrNotReplicated). Call it before
// the first append; the zero Replication waits for none.
func (l *Log) SetReplication(r Replication) error {
	return r.setOn(l.rdb, &l.repl)
}

func (l *Log) Append(ctx context.Context, after string, batch [][]byte) ([]string, error) {
	pos, err := events.ParseID(after)
	if err != nil {
		return nil, err
	}
	if len(batch) == 0 {
		return nil, nil
	}
	args := make([]any, 0, len(batch)+1)
	args = append(args, pos.String())
	for _, b := range batch {
		args = append(args, b)
	}
	res, err := l.repl.runScript(ctx, l.rdb, appendScript, []string{l.key}, args).StringSlice()
	if err != nil {
		return nil, appendError(err, l.key, after, len(batch), 0)
	}
	return res, nil
}

// appendError maps the error reply of a compare-and-append script: RSCCONFLICT
// (the log moved past after), RSCFENCED (the lease term tok is over),
// ErrNotReplicated, or anything else Redis said.
func appendError(err error, key, after string, n int, tok int64) error {
	if errors.Is(err, ErrNotReplicated) {
		return fmt.Errorf("append %d events to %s: %w", n, key, err)
	}
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "RSCFENCED"):
		return fmt.Errorf("%w: term %d is over (lease token now %s)", events.ErrFenced, tok, strings.TrimPrefix(msg, "RSCFENCED "))
	case strings.HasPrefix(msg, "RSCCONFLICT"):
		return fmt.Errorf("%w: log is at %s, caller at %s", events.ErrConflict, strings.TrimPrefix(msg, "RSCCONFLICT "), after)
	case refusedBeforeWriting(err):
		return fmt.Errorf("append %d events to %s: %w: %w", n, key, events.ErrRefused, err)
	}
	return fmt.Errorf("append %d events to %s: %w", n, key, err)
}

// refusalCodes are the error codes of a Redis reply refusing a script before
// its first write (a script is checked for memory, read-only, min-replicas
// and persistence errors at its first write command, for permissions at
// each command; the append script writes nothing before its XADDs), or
// refusing it unrun.
var refusalCodes = []string{"OOM", "READONLY", "NOPERM", "MISCONF", "NOREPLICAS", "MASTERDOWN", "BUSY", "LOADING", "WRONGTYPE", "CLUSTERDOWN", "TRYAGAIN", "CROSSSLOT"}

// refusedBeforeWriting reports whether err is Redis's reply refusing the
// append script with one of refusalCodes (not a failure to get an answer).
func refusedBeforeWriting(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	for _, code := range refusalCodes {
		if redis.HasErrorPrefix(err, code) {
			return true
		}
	}
	return false
}

func (l *Log) Read(ctx context.Context, after string, count int) ([]events.Entry, error) {
	pos, err := events.ParseID(after)
	if err != nil {
		return nil, err
	}
	var msgs []redis.XMessage
	if count > 0 {
		msgs, err = l.rdb.XRangeN(ctx, l.key, "("+pos.String(), "+", int64(count)).Result()
	} else {
		msgs, err = l.rdb.XRange(ctx, l.key, "("+pos.String(), "+").Result()
	}
	if err != nil {
		return nil, fmt.Errorf("read %s after %s: %w", l.key, after, err)
	}
	return toEntries(msgs), nil
}

func (l *Log) Tail(ctx context.Context, after string, count int, block time.Duration) ([]events.Entry, error) {
	pos, err := events.ParseID(after)
	if err != nil {
		return nil, err
	}
	if block <= 0 {
		block = time.Millisecond
	}
	streams, err := l.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{l.key, pos.String()}, Count: int64(count), Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tail %s after %s: %w", l.key, after, err)
	}
	var out []events.Entry
	for _, s := range streams {
		out = append(out, toEntries(s.Messages)...)
	}
	return out, nil
}

func (l *Log) Get(ctx context.Context, ids []string) ([]events.Entry, error) {
	pipe := l.rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(ids))
	for i, id := range ids {
		p, err := events.ParseID(id)
		if err != nil {
			return nil, err
		}
		cmds[i] = pipe.XRange(ctx, l.key, p.String(), p.String())
	}
	if len(ids) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("get %d entries from %s: %w", len(ids), l.key, err)
		}
	}
	out := make([]events.Entry, 0, len(ids))
	for _, c := range cmds {
		out = append(out, toEntries(c.Val())...)
	}
	return out, nil
}

func (l *Log) LastID(ctx context.Context) (string, error) {
	info, found, err := streamInfo(ctx, l.rdb, l.key)
	if err != nil {
		return "", fmt.Errorf("last id of %s: %w", l.key, err)
	}
	if !found {
		return events.ZeroID, nil
	}
	return info.LastGeneratedID, nil
}

// streamInfo is XINFO STREAM of key; found is false, with no error, when the
// key does not exist.
func streamInfo(ctx context.Context, c redis.Cmdable, key string) (info *redis.XInfoStream, found bool, err error) {
	info, err = c.XInfoStream(ctx, key).Result()
	if err != nil {
		if strings.Contains(err.Error(), "no such key") {
			return nil, false, nil
		}
		return nil, false, err
	}
	return info, true, nil
}

func (l *Log) Len(ctx context.Context) (int64, error) {
	n, err := l.rdb.XLen(ctx, l.key).Result()
	if err != nil {
		return 0, fmt.Errorf("length of %s: %w", l.key, err)
	}
	return n, nil
}

func toEntries(msgs []redis.XMessage) []events.Entry {
	out := make([]events.Entry, 0, len(msgs))
	for _, m := range msgs {
		var data []byte
		switch v := m.Values[entryField].(type) {
		case string:
			// The reply's string is not copied: entries are read only.
			data = unsafe.Slice(unsafe.StringData(v), len(v))
		case []byte:
			data = v
		}
		out = append(out, events.Entry{ID: m.ID, Data: data})
	}
	return out
}
