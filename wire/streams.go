package wire

import "time"

// AdoptRequest is POST /coord/v1/streams/{p}/adopt (the reference's
// AdoptStreamRequest): take over existing shard streams
// <p>:0..shardCount-1.
type AdoptRequest struct {
	ShardCount  *int   `json:"shardCount"`
	RequestedBy string `json:"requestedBy"`
	Reason      string `json:"reason"`
}

// StreamRoutingResponse answers GET /coord/v1/streams/{p}/producer-routing:
// the stream's layout, with no consumer group (the reference's
// stream-scoped ProducerRoutingResponse).
type StreamRoutingResponse struct {
	StreamPrefix     string         `json:"streamPrefix"`
	MetadataVersion  int64          `json:"metadataVersion"`
	ShardCount       int            `json:"shardCount"`
	StreamKeyPattern string         `json:"streamKeyPattern"`
	Shards           []RoutingShard `json:"shards"`
	// FenceField is the field of each shard's fence hash (shards[].fenceKey)
	// that holds the stream's fence, in stream metadata versions: raised at
	// every cutover of an ordered group of the stream.
	FenceField string `json:"fenceField"`
	// PreviousLayouts and LayoutWindowMs are as in ProducerRoutingResponse,
	// in stream metadata versions (listed only for a stream with metadata:
	// its fences are the ones raised under FenceField).
	PreviousLayouts []RoutingLayout `json:"previousLayouts,omitempty"`
	LayoutWindowMs  int64           `json:"layoutWindowMs,omitempty"`
}

// Stream is a stream as GET /coord/v1/monitoring/streams lists it: its
// metadata, when it has some, else the layout its groups agree on (null
// counts when they disagree), its groups, and which of its shard streams
// the coordinator created or adopted.
type Stream struct {
	StreamPrefix string `json:"streamPrefix"`
	// HasMetadata: the stream has metadata (created, adopted, or written by
	// its first group); false for a prefix whose groups predate it.
	HasMetadata     bool   `json:"hasMetadata"`
	ShardCount      *int   `json:"shardCount"`
	MetadataVersion *int64 `json:"metadataVersion"`
	// TopologyConflict: no metadata, and the groups' shard counts differ
	// (stream-scoped routing answers 409 STREAM_SHARD_TOPOLOGY_CONFLICT).
	TopologyConflict bool `json:"topologyConflict"`
	// Origin is CREATED, ADOPTED or GROUP (written by its first group's
	// create); null without metadata.
	Origin         *string   `json:"origin"`
	CreatedBy      *string   `json:"createdBy"`
	CreatedAt      time.Time `json:"createdAt"`
	UpdatedAt      time.Time `json:"updatedAt"`
	ConsumerGroups []string  `json:"consumerGroups"`
	// CreatedShards are the shards whose streams the coordinator created
	// (the only ones it ever deletes); AdoptedShards the ones it took over.
	CreatedShards []int `json:"createdShards"`
	AdoptedShards []int `json:"adoptedShards"`
}

// StreamsResponse answers GET /coord/v1/monitoring/streams.
type StreamsResponse struct {
	Streams []Stream `json:"streams"`
}

// StreamReplay answers GET /coord/v1/monitoring/streams/{p}/replay: the
// stream as it was right after event AsOf.
type StreamReplay struct {
	AsOf   string `json:"asOf"`
	Stream Stream `json:"stream"`
}
