package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
)

// A restore (events.Restorable). Its entry is appended under an id the
// coordinator chose, so that the snapshot of the restored state is stored
// under that id before the entry lands; the index hash remembers it as the
// log's last restore (field "restored") and moves its high-water mark to it,
// in the same script. It is in the log's slot, so it is lost with the log
// and never outlives it on another node.

// restoreField is the index hash's field naming the last restore.
const restoreField = "restored"

// restoreLua is compare-and-append of one entry with its id (the position
// check is comparePositionLua's): KEYS[1] the log, KEYS[idx] the index hash;
// ARGV[pos] the caller's position, ARGV[pos+1] the id, ARGV[pos+2] the entry.
func restoreLua(idx, pos int) string {
	return comparePositionLua(pos) + fmt.Sprintf(`
local id = redis.call('XADD', KEYS[1], ARGV[%[2]d + 1], 'e', ARGV[%[2]d + 2])
redis.call('HSET', KEYS[%[1]d], 'at', id, '`+restoreField+`', id)
return id
`, idx, pos)
}

var restoreScript = redis.NewScript(restoreLua(2, 1))

// fencedRestoreScript is the restore behind the lease check: KEYS[1] log,
// KEYS[2] lease, KEYS[3] index hash; ARGV[1] token, then as restoreLua.
var fencedRestoreScript = redis.NewScript(leaseCheck + restoreLua(3, 2))

var _ events.Restorable = (*Log)(nil)

// AppendRestore implements events.Restorable.
func (l *Log) AppendRestore(ctx context.Context, after, id string, data []byte) error {
	pos, at, err := restoreArgs(after, id)
	if err != nil {
		return err
	}
	if err := l.repl.runScript(ctx, l.rdb, restoreScript, []string{l.key, l.IndexKey()}, []any{pos, at, data}).Err(); err != nil {
		return appendError(err, l.key, after, 1, 0)
	}
	return nil
}

// LastRestore implements events.Restorable.
func (l *Log) LastRestore(ctx context.Context) (string, error) {
	id, err := l.rdb.HGet(ctx, l.IndexKey(), restoreField).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the last restore of %s: %w", l.key, err)
	}
	return id, nil
}

// AppendRestore is the fenced restore: it lands only while this replica
// holds the lease.
func (f *fencedLog) AppendRestore(ctx context.Context, after, id string, data []byte) error {
	pos, at, err := restoreArgs(after, id)
	if err != nil {
		return err
	}
	tok, err := f.token()
	if err != nil {
		return err
	}
	if err := f.repl.runScript(ctx, f.rdb, fencedRestoreScript, []string{f.key, f.lease.key, f.IndexKey()}, []any{tok, pos, at, data}).Err(); err != nil {
		return appendError(err, f.key, after, 1, tok)
	}
	return nil
}

func restoreArgs(after, id string) (string, string, error) {
	pos, err := events.ParseID(after)
	if err != nil {
		return "", "", err
	}
	at, err := events.ParseID(id)
	if err != nil {
		return "", "", err
	}
	if !pos.Less(at) {
		return "", "", fmt.Errorf("restore entry %s: not above the position %s", at, pos)
	}
	return pos.String(), at.String(), nil
}
