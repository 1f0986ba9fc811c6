// Package producer publishes to a coordinator-managed sharded Redis Stream.
//
// A Producer caches the producer routing of one (streamPrefix, consumerGroup):
// it fetches it from the coordinator on first use, refreshes it when its TTL
// (RefreshInterval, default 5 s) has passed, replaces it only by a routing
// with a newer metadataVersion, and keeps it while refreshes fail for at most
// Lease after the last successful fetch; after that, publishing fails with
// ErrRoutingLeaseExpired until the coordinator answers again.
//
// Publish routes a partition key with routeV1 (package routing, bit-exact with
// the reference clients) and writes XADD <key> NOMKSTREAM MAXLEN ~ N. A failed
// or nil XADD (nil means the shard stream does not exist: a stale route after
// a scale-in) invalidates the cache, refreshes it and retries once. PublishBatch
// does the same for many messages in one pipeline, grouped by shard.
//
// Delivery is at least once: a retry after a lost reply, or a retry that routes
// to another shard after a resharding, can write the same message twice. Set
// EventIDField so every message carries an id that stays the same across
// retries, for idempotent consumers.
//
// It depends on packages client and routing only.
package producer
