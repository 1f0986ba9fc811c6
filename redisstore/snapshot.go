package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// SnapshotStore keeps the latest projection snapshot in one Redis string next to
// the log (key "<log stream>:snapshot").
type SnapshotStore struct {
	rdb redis.UniversalClient
	key string
}

// NewSnapshotStore stores snapshots of the log at logKey.
func NewSnapshotStore(rdb redis.UniversalClient, logKey string) *SnapshotStore {
	if logKey == "" {
		logKey = DefaultLogStream
	}
	return &SnapshotStore{rdb: rdb, key: logKey + ":snapshot"}
}

// Key is where the snapshot lives.
func (s *SnapshotStore) Key() string { return s.key }

func (s *SnapshotStore) Load(ctx context.Context) ([]byte, error) {
	b, err := s.rdb.Get(ctx, s.key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load snapshot %s: %w", s.key, err)
	}
	return b, nil
}

func (s *SnapshotStore) Save(ctx context.Context, data []byte) error {
	if err := s.rdb.Set(ctx, s.key, data, 0).Err(); err != nil {
		return fmt.Errorf("save snapshot %s: %w", s.key, err)
	}
	return nil
}
