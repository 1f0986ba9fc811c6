package commands

import (
	"context"
	"time"

	"github.com/rscoord/rsc/events"
)

// ShardStore is what decisions need from the Redis that holds the shard streams.
// redisstore.Shards implements it; tests may use a fake.
type ShardStore interface {
	// Provision creates streams prefix:from..prefix:to-1 and the consumer group on
	// each (XGROUP CREATE ... MKSTREAM; an existing group is success).
	Provision(ctx context.Context, prefix, group string, from, to int) error
	// ExistingKeys returns which of prefix and prefix:0..count-1 exist.
	ExistingKeys(ctx context.Context, prefix string, count int) ([]string, error)
	// DrainEvidence reports every consumer group on each shard stream (XINFO GROUPS).
	DrainEvidence(ctx context.Context, prefix string, shards []int) ([]events.ShardDrain, error)
	// EntriesAdded reports how many entries were ever added to each shard stream.
	EntriesAdded(ctx context.Context, prefix string, shards []int) (map[int]int64, error)
	// Delete removes shard streams, atomically refusing any stream that is not
	// drained (an error names them; the others are deleted).
	Delete(ctx context.Context, keys []string) error
}

// SnapshotStore keeps the latest projection snapshot next to the log.
type SnapshotStore interface {
	Load(ctx context.Context) ([]byte, error) // nil, nil when there is none
	Save(ctx context.Context, data []byte) error
}

// Clock is the time source; simulations use a virtual one.
type Clock interface{ Now() time.Time }
