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
// Every XADD runs inside PublishScript, with the routing metadataVersion it was
// routed with: the script first reads the shard's fence (a hash next to the
// stream, one field per consumer group) and refuses, writing nothing, when the
// fence is above that version. The coordinator raises fences on the shards
// whose keys move right before a resharding of a group with ordering KEY
// becomes visible, so a publish routed with the old layout cannot land after
// the cutover; the producer refreshes the routing (a few milliseconds may pass
// before the coordinator serves the new one) and publishes on the new layout,
// for up to StaleTimeout. With ordering KEY, entries also carry the field
// _rsc_rv (routing.FenceField) = that version, which members use to hold them
// back until they know the barriers of that version (package member). Callers
// change nothing; the field is reserved (ErrReservedField).
//
// Without DedupWindow, delivery is at least once: a retry after a lost reply
// (go-redis itself retries a command whose reply was lost, MaxRetries), or a
// retry that routes to another shard after a resharding, can write the same
// message twice. Set EventIDField so every message carries an id that stays
// the same across retries, for idempotent consumers; set DedupWindow too and
// the producer writes at most one entry per event id within the window
// (DedupPublishScript: a record per entry next to its shard stream, checked
// and written in the same atomic step as the fence check and the XADD; after
// a layout change, the shards an event id routed to before are read first).
//
// Async publishes in the background, in batches (a linger, a bound on the
// messages in flight, a Future per message), through PublishBatch's path.
//
// It depends on packages client and routing only.
package producer
