package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// TokenSecretKey is the key that keeps the bearer-token secret of the
// coordinator whose event log is logStream: next to the log, in its cluster
// slot ("{<log-stream>}:token-secret").
func TokenSecretKey(logStream string) (string, error) {
	return SameSlotKey(logStream, "token-secret")
}

// TokenSecret returns the HMAC secret the coordinators of one log sign bearer
// tokens with. The first caller makes it (32 random bytes) and stores it with
// SET NX; everyone, the first included, then reads what is stored, so every
// replica of a highly available coordinator signs with the same one, and a
// restart keeps the tokens it issued valid. Deleting the key revokes every
// token once the coordinators restart.
func TokenSecret(ctx context.Context, rdb redis.UniversalClient, logStream string) (string, error) {
	key, err := TokenSecretKey(logStream)
	if err != nil {
		return "", err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token secret: %w", err)
	}
	if err := rdb.SetNX(ctx, key, base64.RawURLEncoding.EncodeToString(b[:]), 0).Err(); err != nil {
		return "", fmt.Errorf("token secret: SET NX %s: %w", key, err)
	}
	secret, err := rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) || (err == nil && secret == "") {
		return "", fmt.Errorf("token secret: %s vanished right after it was set", key)
	}
	if err != nil {
		return "", fmt.Errorf("token secret: GET %s: %w", key, err)
	}
	return secret, nil
}
