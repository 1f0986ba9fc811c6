package member

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// A reader's XREADGROUP blocks for up to Config.Block. When the reader is
// stopped (its shard revoked, the member leaving), waiting for the block to
// time out would leave the shard unread by anyone for that long: its next
// owner is granted it only once this reader exited and the member reported
// it released. On a single Redis server (a *redis.Client) the reader
// therefore reads on a connection of its own, and stop unblocks its read at
// once with CLIENT UNBLOCK (which ends a blocked XREADGROUP as if its block
// had timed out: nothing is delivered). On a Redis Cluster, or when the
// user may not run CLIENT ID or CLIENT UNBLOCK, the reader reads through the
// pool and stops when its block ends, as before.

// blockingConn is a reader's own connection and its Redis client id.
type blockingConn struct {
	conn *redis.Conn
	id   int64
}

// ownConn takes a connection of the pool for the reader's blocking reads
// (nil when rdb is not a single server's client or CLIENT ID fails).
func ownConn(ctx context.Context, rdb redis.UniversalClient) *blockingConn {
	c, ok := rdb.(*redis.Client)
	if !ok {
		return nil
	}
	conn := c.Conn()
	id, err := conn.ClientID(ctx).Result()
	if err != nil {
		_ = conn.Close()
		return nil
	}
	return &blockingConn{conn: conn, id: id}
}

// unblock ends the reader's blocked read, if it reads on its own
// connection. A read that is not blocked yet (the reader is handling a
// batch, or about to read) is tried again for up to a block's time: the
// reader checks for its stop between reads.
func (r *reader) unblock() {
	id := r.blockID.Load()
	if id == 0 {
		return
	}
	go func() {
		deadline := time.Now().Add(r.rt.cfg.Block)
		for !r.exited() && time.Now().Before(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			n, err := r.rt.cfg.Redis.ClientUnblock(ctx, id).Result()
			cancel()
			if err != nil || n == 1 {
				return
			}
			select {
			case <-r.done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
}

// isReply reports whether err is an error reply of Redis (NOGROUP, say): the
// connection is fine.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
