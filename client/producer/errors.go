package producer

import (
	"errors"
	"fmt"
)

// Sentinel errors; test with errors.Is.
var (
	// ErrNoShards: the group's routing has shardCount 0 (scaled to zero);
	// there is nowhere to publish. The error is a *NoShardsError.
	ErrNoShards = errors.New("producer: the group has no shards")
	// ErrRoutingUnavailable: no routing was ever fetched, and fetching it failed.
	ErrRoutingUnavailable = errors.New("producer: producer routing is unavailable")
	// ErrRoutingLeaseExpired: the cached routing could not be refreshed for
	// longer than the cache lease, so it may no longer be used.
	ErrRoutingLeaseExpired = errors.New("producer: cached producer routing expired (its lease is over and the coordinator cannot be reached)")
	// ErrInvalidRouting: the coordinator's routing answer is inconsistent
	// (another group, shard list not 0..shardCount-1, unexpected stream keys).
	ErrInvalidRouting = errors.New("producer: invalid producer routing")
	// ErrStreamMissing: XADD NOMKSTREAM answered nil, the shard stream does not
	// exist (a stale route to a retired shard).
	ErrStreamMissing = errors.New("producer: shard stream does not exist")
	// ErrNoFields: a message needs at least one field.
	ErrNoFields = errors.New("producer: a message needs at least one field")
	// ErrReservedField: the message has the field fenced publishes add
	// (routing.FenceField, "_rsc_rv"); members strip it.
	ErrReservedField = errors.New("producer: the field _rsc_rv is reserved (the routing version of a fenced publish)")
	// ErrUnexpectedReply: Redis answered PublishScript with something else
	// than one id per entry.
	ErrUnexpectedReply = errors.New("producer: unexpected reply to the publish script")
	// ErrStaleRouting: a shard's fence kept refusing the publish for longer
	// than Config.StaleTimeout; nothing was written. The error is a *StaleError.
	ErrStaleRouting = errors.New("producer: routing older than the shard's fence")
)

// NoShardsError is returned when the group has no shards. It matches ErrNoShards.
type NoShardsError struct {
	StreamPrefix    string
	ConsumerGroup   string
	MetadataVersion int64
}

func (e *NoShardsError) Error() string {
	return fmt.Sprintf("producer: group %s/%s has no shards (metadataVersion %d): publishing is impossible until it is scaled up",
		e.StreamPrefix, e.ConsumerGroup, e.MetadataVersion)
}

// Is matches ErrNoShards.
func (e *NoShardsError) Is(target error) bool { return target == ErrNoShards }

// BatchError is returned by PublishBatch when some messages were not
// published; each failed Result carries its own error.
type BatchError struct {
	Failed, Total int
	// First is the first failure, in input order.
	First error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("producer: %d of %d messages not published: %v", e.Failed, e.Total, e.First)
}

// Unwrap returns the first failure.
func (e *BatchError) Unwrap() error { return e.First }
