package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/rscoord/rsc/wire"
)

// Streams: a stream prefix's one layout, shared by every consumer group of
// it. The operator calls create, adopt and scale a stream; producers that
// route by stream read StreamProducerRouting.

type (
	// Stream is the coordinator's view of a stream: its metadata, groups and
	// which of its shard streams the coordinator created or adopted.
	Stream = wire.Stream
	// StreamRouting is the stream-scoped producer routing (no consumer group).
	StreamRouting = wire.StreamRoutingResponse
	// StreamCreated answers a stream's create and adopt.
	StreamCreated = wire.StreamCreateResponse
	// StreamScale answers a stream's scale: every group's resharding.
	StreamScale = wire.StreamScaleResult
)

// StreamPath is the path of a stream: /coord/v1/streams/{p}, percent-encoded.
func StreamPath(streamPrefix string) string {
	return basePath + "/streams/" + url.PathEscape(streamPrefix)
}

// CreateStream creates a stream's shard streams (no consumer group) with
// initialShardCount shards (0: the coordinator's default):
// POST /coord/v1/streams/{p}.
func (c *Client) CreateStream(ctx context.Context, streamPrefix string, initialShardCount int, requestedBy, reason string) (*StreamCreated, error) {
	body := wire.CreateRequest{RequestedBy: requestedBy, Reason: reason}
	if initialShardCount > 0 {
		body.InitialShardCount = &initialShardCount
	}
	return call[StreamCreated](ctx, c, http.MethodPost, StreamPath(streamPrefix), body, "create stream %s", streamPrefix)
}

// AdoptStream takes over existing shard streams <p>:0..shardCount-1 without
// creating anything: POST /coord/v1/streams/{p}/adopt.
func (c *Client) AdoptStream(ctx context.Context, streamPrefix string, shardCount int, requestedBy, reason string) (*StreamCreated, error) {
	body := wire.AdoptRequest{ShardCount: &shardCount, RequestedBy: requestedBy, Reason: reason}
	return call[StreamCreated](ctx, c, http.MethodPost, StreamPath(streamPrefix)+"/adopt", body, "adopt stream %s", streamPrefix)
}

// ScaleStream scales a stream to targetShardCount: at once without groups,
// else every group of it together: POST /coord/v1/streams/{p}/scale.
func (c *Client) ScaleStream(ctx context.Context, streamPrefix string, targetShardCount int, requestedBy, reason string) (*StreamScale, error) {
	body := wire.ScaleRequest{TargetShardCount: &targetShardCount, RequestedBy: requestedBy, Reason: reason}
	return call[StreamScale](ctx, c, http.MethodPost, StreamPath(streamPrefix)+"/scale", body, "scale stream %s to %d", streamPrefix, targetShardCount)
}

// StreamProducerRouting fetches the stream-scoped producer routing:
// GET /coord/v1/streams/{p}/producer-routing (the layout producers route
// by, whatever the consumer group).
func (c *Client) StreamProducerRouting(ctx context.Context, streamPrefix string) (*StreamRouting, error) {
	return call[StreamRouting](ctx, c, http.MethodGet, StreamPath(streamPrefix)+"/producer-routing", nil, "producer routing of stream %s", streamPrefix)
}

// Stream reads a stream: GET /coord/v1/streams/{p}.
func (c *Client) Stream(ctx context.Context, streamPrefix string) (*Stream, error) {
	return call[Stream](ctx, c, http.MethodGet, StreamPath(streamPrefix), nil, "get stream %s", streamPrefix)
}

// Streams lists every stream: GET /coord/v1/monitoring/streams.
func (c *Client) Streams(ctx context.Context) (*wire.StreamsResponse, error) {
	return call[wire.StreamsResponse](ctx, c, http.MethodGet, basePath+"/monitoring/streams", nil, "list streams")
}
