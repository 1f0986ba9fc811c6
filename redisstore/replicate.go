package redisstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
)

// Replication of the log. Redis replicates asynchronously: a primary answers
// an append before any replica has it, and a failover that promotes a replica
// loses what the replica had not received. With Replicas set, every append
// script is followed on the same connection (in a Redis Cluster, on the
// master of the log's slot) by WAIT replicas timeout, and an append fewer
// replicas acknowledged is ErrNotReplicated: the caller treats it as failed
// (nothing applied, 503), and the entries stay in the primary's log, where the
// next fold finds them if the primary survives, or are lost with it, never
// having been applied or answered.

// ErrNotReplicated: the entries were written on the primary but fewer replicas
// than required acknowledged them within the timeout. Whether they survive
// depends on the primary: read the log again.
// It is events.ErrNotDurable, so that package commands can tell it apart.
var ErrNotReplicated = events.ErrNotDurable

// Replication is how many replicas must acknowledge a write, and for how long
// to wait for them (WAIT numreplicas timeout).
type Replication struct {
	Replicas int
	Timeout  time.Duration
}

// setOn stores r in *dst when Check accepts it for rdb (the SetReplication
// of Log and Lease); *dst is left as it was otherwise.
func (r Replication) setOn(rdb redis.UniversalClient, dst *Replication) error {
	if err := r.Check(rdb); err != nil {
		return err
	}
	*dst = r
	return nil
}

// Check reports whether r can be used with rdb: a timeout is needed (WAIT 0
// blocks forever), and it must end before the client's read timeout, which
// bounds the round trip the append and its WAIT share.
func (r Replication) Check(rdb redis.UniversalClient) error {
	if r.Replicas <= 0 {
		return nil
	}
	if r.Timeout <= 0 {
		return fmt.Errorf("a replica acknowledgement timeout is needed with %d replicas", r.Replicas)
	}
	var read time.Duration
	switch c := rdb.(type) {
	case *redis.Client:
		read = c.Options().ReadTimeout
	case *redis.ClusterClient:
		read = c.Options().ReadTimeout
	default:
		return fmt.Errorf("waiting for replicas needs one server, a Sentinel primary or a Redis Cluster, not %T", rdb)
	}
	// The options are normalised by then: 0 or less is no read timeout.
	if read > 0 && r.Timeout >= read {
		return fmt.Errorf("the replica acknowledgement timeout %v must be below the Redis read timeout %v (the URL's read_timeout)", r.Timeout, read)
	}
	return nil
}

// nodeFor is the client of the one server that holds key: the client itself,
// or on a Redis Cluster the master serving key's slot, so that WAIT runs on
// the connection that wrote.
func nodeFor(ctx context.Context, rdb redis.UniversalClient, key string) (*redis.Client, error) {
	switch c := rdb.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("find the master of %s: %w", key, err)
		}
		return n, nil
	}
	return nil, fmt.Errorf("waiting for replicas needs one server, a Sentinel primary or a Redis Cluster, not %T", rdb)
}

// runScript runs a script on rdb whose first key is the one whose node must
// replicate it, like s.Run. With r.Replicas > 0 the script and WAIT go out as
// one pipeline on one connection of that node, and the reply is
// ErrNotReplicated when fewer replicas acknowledged.
func (r Replication) runScript(ctx context.Context, rdb redis.UniversalClient, s *redis.Script, keys []string, args []any) *redis.Cmd {
	if r.Replicas <= 0 {
		return s.Run(ctx, rdb, keys, args...)
	}
	node, err := nodeFor(ctx, rdb, keys[0])
	if err != nil {
		return failedCmd(ctx, err)
	}
	cmd, acked, err := evalAndWait(ctx, node, s, keys, args, r, false)
	if err == nil && cmd.Err() != nil && strings.HasPrefix(cmd.Err().Error(), "NOSCRIPT") {
		// A new primary (after a failover) has no cached scripts yet.
		cmd, acked, err = evalAndWait(ctx, node, s, keys, args, r, true)
	}
	switch {
	case err != nil:
		return failedCmd(ctx, err)
	case cmd.Err() != nil:
		return cmd
	case acked < int64(r.Replicas):
		return failedCmd(ctx, fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, acked, r.Replicas, r.Timeout))
	}
	return cmd
}

func failedCmd(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// evalAndWait pipelines EVALSHA (or EVAL) and WAIT, and returns the script's
// reply and how many replicas acknowledged; err is WAIT's failure when the
// script succeeded (the write landed, its replication is unknown).
func evalAndWait(ctx context.Context, node *redis.Client, s *redis.Script, keys []string, args []any, r Replication, full bool) (*redis.Cmd, int64, error) {
	pipe := node.Pipeline()
	var script *redis.Cmd
	if full {
		script = s.Eval(ctx, pipe, keys, args...)
	} else {
		script = s.EvalSha(ctx, pipe, keys, args...)
	}
	// Pipeliner has no Wait method; the reply is the number of replicas.
	wait := pipe.Do(ctx, "WAIT", r.Replicas, max(1, r.Timeout.Milliseconds()))
	_, _ = pipe.Exec(ctx)
	if script.Err() != nil {
		return script, 0, nil
	}
	acked, err := wait.Int64()
	if err != nil {
		return script, 0, fmt.Errorf("%w: WAIT %d %d: %v", ErrNotReplicated, r.Replicas, max(1, r.Timeout.Milliseconds()), err)
	}
	return script, acked, nil
}
