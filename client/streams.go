package client

import (
	"context"
	"fmt"
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
	var out StreamCreated
	if err := c.Do(ctx, http.MethodPost, StreamPath(streamPrefix), body, &out); err != nil {
		return nil, fmt.Errorf("create stream %s: %w", streamPrefix, err)
	}
	return &out, nil
}

// AdoptStream takes over existing shard streams <p>:0..shardCount-1 without
// creating anything: POST /coord/v1/streams/{p}/adopt.
func (c *Client) AdoptStream(ctx context.Context, streamPrefix string, shardCount int, requestedBy, reason string) (*StreamCreated, error) {
	body := wire.AdoptRequest{ShardCount: &shardCount, RequestedBy: requestedBy, Reason: reason}
	var out StreamCreated
	if err := c.Do(ctx, http.MethodPost, StreamPath(streamPrefix)+"/adopt", body, &out); err != nil {
		return nil, fmt.Errorf("adopt stream %s: %w", streamPrefix, err)
	}
	return &out, nil
}

// ScaleStream scales a stream to targetShardCount: at once without groups,
// else every group of it together: POST /coord/v1/streams/{p}/scale.
func (c *Client) ScaleStream(ctx context.Context, streamPrefix string, targetShardCount int, requestedBy, reason string) (*StreamScale, error) {
	body := wire.ScaleRequest{TargetShardCount: &targetShardCount, RequestedBy: requestedBy, Reason: reason}
	var out StreamScale
	if err := c.Do(ctx, http.MethodPost, StreamPath(streamPrefix)+"/scale", body, &out); err != nil {
		return nil, fmt.Errorf("scale stream %s to %d: %w", streamPrefix, targetShardCount, err)
	}
	return &out, nil
}

// StreamProducerRouting fetches the stream-scoped producer routing:
// GET /coord/v1/streams/{p}/producer-routing (the layout producers route
// by, whatever the consumer group).
func (c *Client) StreamProducerRouting(ctx context.Context, streamPrefix string) (*StreamRouting, error) {
	var out StreamRouting
	if err := c.Do(ctx, http.MethodGet, StreamPath(streamPrefix)+"/producer-routing", nil, &out); err != nil {
		return nil, fmt.Errorf("producer routing of stream %s: %w", streamPrefix, err)
	}
	return &out, nil
}

// Stream reads a stream: GET /coord/v1/streams/{p}.
func (c *Client) Stream(ctx context.Context, streamPrefix string) (*Stream, error) {
	var out Stream
	if err := c.Do(ctx, http.MethodGet, StreamPath(streamPrefix), nil, &out); err != nil {
		return nil, fmt.Errorf("get stream %s: %w", streamPrefix, err)
	}
	return &out, nil
}

// Streams lists every stream: GET /coord/v1/monitoring/streams.
func (c *Client) Streams(ctx context.Context) (*wire.StreamsResponse, error) {
	var out wire.StreamsResponse
	if err := c.Do(ctx, http.MethodGet, basePath+"/monitoring/streams", nil, &out); err != nil {
		return nil, fmt.Errorf("list streams: %w", err)
	}
	return &out, nil
}
