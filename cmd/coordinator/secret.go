package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
)

// secretKeepInterval is how often a replica checks the token secret kept in
// Redis: within it, a key that is gone (evicted, FLUSHALL, a restart without
// persistence) is put back.
const secretKeepInterval = 2 * time.Second

// errSecretMismatch is /readyz's reason while the secret kept in Redis is not
// the one this process signs with.
var errSecretMismatch = &commands.Error{Kind: commands.KindUnavailable, Code: "TOKEN_SECRET_MISMATCH",
	Message: "The token secret kept in Redis is not the one this coordinator signs with: its bearer tokens are refused by the other replicas (401) and its forwarded writes by the leader (403). Restart it to take the kept secret (tokens it issued become invalid), or put its secret back (docs/operations.md, Reliability)"}

// secretKeeper keeps the random token and cluster secret in Redis
// (--users-file or --ha without --token-secret) equal to the one this
// process holds: every replica read it at start, and a replica started
// after its key was lost would otherwise make a new one, splitting the
// replicas silently (forwarded writes 403, each one's tokens 401 on the
// other). It puts the held secret back when the key is gone (SET NX: the
// first replica to do so wins, and every replica holds the same one), and
// reports a different secret in the key as a mismatch on /readyz until it
// clears.
type secretKeeper struct {
	rdb  redis.UniversalClient
	key  string
	held string
	log  zerolog.Logger

	mismatch atomic.Bool
	restored atomic.Int64 // times this process put the secret back
}

// run checks every interval until ctx ends.
func (k *secretKeeper) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.check(ctx, interval)
		}
	}
}

// check puts the held secret back if the key is gone and compares what the
// key holds with it (SET NX GET: one round trip).
func (k *secretKeeper) check(ctx context.Context, timeout time.Duration) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cur, err := k.rdb.SetArgs(cctx, k.key, k.held, redis.SetArgs{Mode: "NX", Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		k.restored.Add(1)
		k.log.Warn().Str("key", k.key).Msg("the token secret's key was gone (eviction, FLUSHALL, a Redis restart without persistence): put back the secret this coordinator holds, so replicas started now read the same")
		cur = k.held
	case err != nil:
		k.log.Debug().Err(err).Str("key", k.key).Msg("check the token secret kept in Redis")
		return
	}
	differs := cur != k.held
	if was := k.mismatch.Swap(differs); was != differs {
		if differs {
			k.log.Error().Str("key", k.key).Msg("the token secret kept in Redis is not the one this coordinator signs with: its tokens are refused by the other replicas and its forwarded writes by the leader; /readyz is 503 TOKEN_SECRET_MISMATCH until it is restarted or the secret is put back")
		} else {
			k.log.Info().Str("key", k.key).Msg("the token secret kept in Redis is this coordinator's again")
		}
	}
}

// ready is /readyz's check: errSecretMismatch while the kept secret differs.
func (k *secretKeeper) ready() *commands.Error {
	if k == nil || !k.mismatch.Load() {
		return nil
	}
	return errSecretMismatch
}
