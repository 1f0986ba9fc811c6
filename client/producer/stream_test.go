package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// streamCoordinator serves the stream-scoped routing of prefix (2 shards at
// stream version 2) naming fenceField; any other route is 404.
func streamCoordinator(t *testing.T, fenceField string) *client.Client {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+client.StreamPath(prefix)+"/producer-routing", func(w http.ResponseWriter, _ *http.Request) {
		rt := wire.StreamRoutingResponse{StreamPrefix: prefix, MetadataVersion: 2, ShardCount: 2, StreamKeyPattern: routing.KeyPattern(prefix), FenceField: fenceField}
		for i := 0; i < 2; i++ {
			key := routing.StreamKey(prefix, i)
			rt.Shards = append(rt.Shards, wire.RoutingShard{ShardIndex: i, StreamKey: key, RedisSlot: routing.Slot(key), FenceKey: routing.FenceKey(key)})
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rt)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return client.New(srv.URL, client.BasicAuth{Username: "reader", Password: "pw"})
}

// TestStreamScopedProducer: without a ConsumerGroup the producer reads the
// stream's routing and its publishes are checked against the stream's fence
// field, not a group's: a group's fence above the routing does not refuse
// it, the stream's does (with and without a dedup window); an answer naming
// another fence field is refused as invalid.
func TestStreamScopedProducer(t *testing.T) {
	rdb := redistest.StartProcess(t).Client(t)
	mustStreams(t, rdb, 2)
	ctx := context.Background()
	coord := streamCoordinator(t, routing.StreamFenceField)
	for _, window := range []time.Duration{0, time.Minute} {
		p, err := producer.New(producer.Config{Coordinator: coord, Redis: rdb, StreamPrefix: prefix, StaleTimeout: 200 * time.Millisecond,
			EventIDField: "eventId", DedupWindow: window})
		if err != nil {
			t.Fatal(err)
		}
		shard, _ := routing.RouteKey("k", 2)
		fence := routing.FenceKey(routing.StreamKey(prefix, shard))
		rdb.Del(ctx, fence)
		rdb.HSet(ctx, fence, group, 9) // a group's fence: not this producer's
		res, err := p.Publish(ctx, "k", map[string]any{"n": 1})
		if err != nil || res.MetadataVersion != 2 || res.ShardIndex != shard {
			t.Fatalf("window %s: publish under a group's fence: %+v, %v", window, res, err)
		}
		rdb.HSet(ctx, fence, routing.StreamFenceField, 3) // the stream moved on
		if _, err := p.Publish(ctx, "k", map[string]any{"n": 2}); !errors.Is(err, producer.ErrStaleRouting) {
			t.Fatalf("window %s: publish under the stream's fence: %v, want ErrStaleRouting", window, err)
		}
		if st := p.Stats(); st.StaleRetries < 1 {
			t.Fatalf("window %s: stats %+v", window, st)
		}
	}

	p, err := producer.New(producer.Config{Coordinator: streamCoordinator(t, group), Redis: rdb, StreamPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Publish(ctx, "k", map[string]any{"n": 1}); !errors.Is(err, producer.ErrInvalidRouting) {
		t.Fatalf("a stream routing naming fence field %q: %v, want ErrInvalidRouting", group, err)
	}
}
