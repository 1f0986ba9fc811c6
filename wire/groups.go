package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"
)

// CreateRequest is CreateStreamRequest / CreateGroupRequest. A missing or null
// initialShardCount takes the coordinator's default (for a group of a stream
// with metadata: the stream's shard count).
type CreateRequest struct {
	InitialShardCount *int   `json:"initialShardCount"`
	RequestedBy       string `json:"requestedBy"`
	Reason            string `json:"reason"`
	// Ordering is "KEY" (per-key order kept across reshardings) or "NONE";
	// missing or null is "NONE".
	Ordering *string `json:"ordering"`
}

// OrderingRequest switches a group's ordering (PUT .../groups/{g}/ordering).
type OrderingRequest struct {
	Ordering    *string `json:"ordering"`
	RequestedBy string  `json:"requestedBy"`
	Reason      string  `json:"reason"`
}

// StreamCreateResponse answers POST /coord/v1/streams/{p} and its adopt.
type StreamCreateResponse struct {
	StreamPrefix    string `json:"streamPrefix"`
	ShardCount      int    `json:"shardCount"`
	MetadataVersion int64  `json:"metadataVersion"`
}

// DeleteRequest is DeleteGroupRequest.
type DeleteRequest struct {
	RequestedBy string `json:"requestedBy"`
	Reason      string `json:"reason"`
	Force       bool   `json:"force"`
}

// Group is the contract's GroupResponse plus our additions
// (assignableShardCount, activeReshardingPhase, timestamps).
type Group struct {
	StreamPrefix         string `json:"streamPrefix"`
	ConsumerGroup        string `json:"consumerGroup"`
	State                string `json:"state"`
	GroupEpoch           int64  `json:"groupEpoch"`
	AssignmentEpoch      int64  `json:"assignmentEpoch"`
	MetadataVersion      int64  `json:"metadataVersion"`
	ShardCount           int    `json:"shardCount"`
	AssignableShardCount int    `json:"assignableShardCount"`
	// Ordering is "KEY" or "NONE".
	Ordering string `json:"ordering"`
	// Barriers are the shards whose entries after a cutover wait for Redis
	// to prove the shards their keys came from were read up to it (ordering
	// KEY only; empty when none wait).
	Barriers []Barrier `json:"barriers"`
	// ActiveMigration is the active resharding (null when none).
	ActiveMigration          *Resharding    `json:"activeMigration"`
	ActiveReshardingPhase    *string        `json:"activeReshardingPhase"`
	TargetAssignmentSummary  map[string]int `json:"targetAssignmentSummary"`
	CurrentAssignmentSummary map[string]int `json:"currentAssignmentSummary"`
	CreatedAt                time.Time      `json:"createdAt"`
	UpdatedAt                time.Time      `json:"updatedAt"`
}

// GroupsResponse answers GET /coord/v1/monitoring/groups.
type GroupsResponse struct {
	Groups []Group `json:"groups"`
}

// RoutingShard is one shard of the producer routing.
type RoutingShard struct {
	ShardIndex int    `json:"shardIndex"`
	StreamKey  string `json:"streamKey"`
	RedisSlot  int    `json:"redisSlot"`
	// FenceKey is the Redis hash, in the stream's slot, whose field named
	// after the consumer group holds the shard's fence: a publish with a
	// routing metadataVersion below it is stale (see docs/ordered-groups.md).
	FenceKey string `json:"fenceKey"`
}

// ProducerRoutingResponse is the routing metadata producers cache.
type ProducerRoutingResponse struct {
	StreamPrefix     string         `json:"streamPrefix"`
	ConsumerGroup    string         `json:"consumerGroup"`
	MetadataVersion  int64          `json:"metadataVersion"`
	ShardCount       int            `json:"shardCount"`
	StreamKeyPattern string         `json:"streamKeyPattern"`
	Shards           []RoutingShard `json:"shards"`
	// Ordering is "KEY" or "NONE".
	Ordering string `json:"ordering"`
	// PreviousLayouts are the shard layouts the routing had before the
	// current one that were still current within the last LayoutWindowMs,
	// newest first; omitted when there are none. Producers that publish
	// idempotently (an event id and a dedup window) check where an event id
	// routed under each of them before they write it (see the client README,
	// "Idempotent publishing").
	PreviousLayouts []RoutingLayout `json:"previousLayouts,omitempty"`
	// LayoutWindowMs is how far back PreviousLayouts reach: every layout that
	// stopped being current less than this long before the answer is listed.
	// Omitted (0) by a coordinator that lists none.
	LayoutWindowMs int64 `json:"layoutWindowMs,omitempty"`
}

// RoutingLayout is a shard layout a group's routing had before its current
// one. Its shards are 0..ShardCount-1 with the stream keys and fence keys the
// current layout's shards would have (routing.StreamKey, routing.FenceKey).
type RoutingLayout struct {
	// MetadataVersion is the version at which the layout became current.
	MetadataVersion int64 `json:"metadataVersion"`
	ShardCount      int   `json:"shardCount"`
	// Fence is the version the change away from this layout took the group
	// to. The coordinator raised each of the layout's shards that lose keys
	// in that change to at least this fence before the change became
	// visible, so no publish routed with this layout lands on them after it.
	Fence int64 `json:"fence"`
	// EndedAt is when the change away from this layout became visible.
	EndedAt time.Time `json:"endedAt"`
}

// ShardRef is a shard, always as an object: {"shardIndex": n}.
type ShardRef struct {
	ShardIndex int `json:"shardIndex"`
}

// ErrNoShardIndex: a shard object without a shardIndex, or null where a
// shard object belongs. Decoded as shard 0, it would claim a shard nobody
// named.
var ErrNoShardIndex = errors.New("shardIndex: must not be null (a shard is {\"shardIndex\": n})")

// UnmarshalJSON decodes {"shardIndex": n}, refusing null, an object without
// shardIndex and a null shardIndex (ErrNoShardIndex).
func (s *ShardRef) UnmarshalJSON(data []byte) error {
	var v struct {
		ShardIndex *int `json:"shardIndex"`
	}
	if string(bytes.TrimSpace(data)) == "null" {
		return ErrNoShardIndex
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	if v.ShardIndex == nil {
		return ErrNoShardIndex
	}
	s.ShardIndex = *v.ShardIndex
	return nil
}

// JSONKeysAreFields tells the server's strict key check (httpapi) that
// UnmarshalJSON reads ShardRef's own fields: its keys are checked like any
// struct's (no key twice, none that differs from shardIndex only by case).
func (ShardRef) JSONKeysAreFields() {}
