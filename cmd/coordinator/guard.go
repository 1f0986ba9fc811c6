package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/internal/redisurl"
	"github.com/rscoord/rsc/redisstore"
)

// redisGuard adapts redisstore.CheckDurability to coordinator.RedisGuard: the
// eviction policy and persistence of the servers holding the coordinator's
// keys, which keys names (the log and its archive, the snapshots, the
// history index, the token secret and the lease).
type redisGuard struct {
	rdb    redis.UniversalClient
	logKey string
	keys   func(ctx context.Context) ([]string, error)
}

func (g redisGuard) CheckRedis(ctx context.Context) (coordinator.RedisSafety, error) {
	d, err := redisstore.CheckDurability(ctx, g.rdb, g.logKey, g.keys)
	if err != nil {
		return coordinator.RedisSafety{}, err
	}
	return coordinator.RedisSafety{Policy: d.Policy, Node: d.Node, Evicts: d.Evicts, Why: d.Why, Persistence: d.Persistence}, nil
}

// coordinatorKeys lists the coordinator's own keys: the ones whose time to
// live the guard reads under a volatile-* policy (the fixed ones first, then
// the history index's, which grow with the groups).
func coordinatorKeys(log *redisstore.Log, snaps *redisstore.SnapshotStore, logStream string) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		keys := []string{log.Key(), log.ArchiveKey()}
		for _, name := range []string{"token-secret", "leader"} {
			if k, err := redisstore.SameSlotKey(logStream, name); err == nil {
				keys = append(keys, k)
			}
		}
		sk, err := snaps.Keys(ctx)
		if err != nil {
			return nil, err
		}
		keys = append(keys, sk...)
		ik, err := log.IndexKeys(ctx)
		if err != nil {
			return nil, err
		}
		return append(keys, ik...), nil
	}
}

// checkRedisAtStart refuses a Redis whose maxmemory-policy can evict the log
// (unless --allow-redis-eviction, which is logged) and warns loudly about
// one without persistence. A Redis that does not answer yet is the guard's
// to check once it does.
func (m *Main) checkRedisAtStart(ctx context.Context, g redisGuard) error {
	cctx, cancel := context.WithTimeout(ctx, redisCheckWait)
	defer cancel()
	s, err := g.CheckRedis(cctx)
	if err != nil {
		m.logger.Warn().Err(err).Msg("cannot read Redis's maxmemory-policy and persistence yet; the guard checks them every --redis-check-interval")
		return nil
	}
	if s.Evicts {
		if !m.AllowRedisEviction {
			return fmt.Errorf("--redis %s: %s: the coordinator's state would be lost under memory pressure. Set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf), or accept the risk with --allow-redis-eviction", redisurl.Redact(m.RedisURL), s.Why)
		}
		m.logger.Warn().Str("maxmemoryPolicy", s.Policy).Str("node", s.Node).Msg("--allow-redis-eviction: " + s.Why + "; the coordinator starts anyway and Redis may drop the log (LOG_LOST)")
	}
	switch s.Persistence {
	case redisstore.PersistenceOff:
		m.logger.Warn().Str("persistence", s.Persistence).Msg("PERSISTENCE OFF: the Redis holding the event log has neither AOF nor RDB save points: a Redis restart loses the log, and the coordinator then holds the only copy of its state until it is restored (LOG_LOST; docs/operations.md, Reliability). Turn on appendonly yes for anything but development")
	case redisstore.PersistenceUnknown:
		m.logger.Warn().Str("persistence", s.Persistence).Msg("the Redis holding the event log has AOF off and refuses CONFIG GET save: whether it saves RDB snapshots is unknown; without them a Redis restart loses the log")
	default:
		m.logger.Info().Str("persistence", s.Persistence).Str("maxmemoryPolicy", s.Policy).Msg("redis durability")
	}
	return nil
}

// defaultRedisCheckInterval is --redis-check-interval's default.
const defaultRedisCheckInterval = 5 * time.Second
