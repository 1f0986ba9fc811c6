package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/wire"
)

// TestStreamCalls: the stream calls send their routes (path segments
// percent-encoded on their own) and bodies, and decode wire's answers.
func TestStreamCalls(t *testing.T) {
	type seen struct{ method, path, body string }
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, seen{r.Method, r.URL.EscapedPath(), string(b)})
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.EscapedPath() {
		case "/coord/v1/streams/a%2Fb/producer-routing":
			_ = json.NewEncoder(w).Encode(wire.StreamRoutingResponse{StreamPrefix: "a/b", MetadataVersion: 3, ShardCount: 1,
				Shards: []wire.RoutingShard{{ShardIndex: 0, StreamKey: "a/b:0"}}, FenceField: "*"})
		case "/coord/v1/streams/a%2Fb/scale":
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(wire.StreamScaleResult{StreamPrefix: "a/b", TargetShardCount: 4, AffectedConsumerGroups: []string{}, Migrations: []wire.Resharding{}})
		default:
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(wire.StreamCreateResponse{StreamPrefix: "a/b", ShardCount: 2, MetadataVersion: 1})
		}
	}))
	defer srv.Close()
	c := client.New(srv.URL, nil)
	ctx := context.Background()
	if s, err := c.CreateStream(ctx, "a/b", 2, "ops", "launch"); err != nil || s.MetadataVersion != 1 {
		t.Fatalf("CreateStream: %+v %v", s, err)
	}
	if _, err := c.AdoptStream(ctx, "a/b", 2, "ops", ""); err != nil {
		t.Fatal(err)
	}
	if res, err := c.ScaleStream(ctx, "a/b", 4, "ops", "more"); err != nil || res.TargetShardCount != 4 {
		t.Fatalf("ScaleStream: %+v %v", res, err)
	}
	rt, err := c.StreamProducerRouting(ctx, "a/b")
	if err != nil || rt.MetadataVersion != 3 || rt.FenceField != "*" || len(rt.Shards) != 1 {
		t.Fatalf("StreamProducerRouting: %+v %v", rt, err)
	}
	want := []seen{
		{"POST", "/coord/v1/streams/a%2Fb", `{"initialShardCount":2,"requestedBy":"ops","reason":"launch","ordering":null}`},
		{"POST", "/coord/v1/streams/a%2Fb/adopt", `{"shardCount":2,"requestedBy":"ops","reason":""}`},
		{"POST", "/coord/v1/streams/a%2Fb/scale", `{"targetShardCount":4,"requestedBy":"ops","reason":"more","deprecatedAfter":null}`},
		{"GET", "/coord/v1/streams/a%2Fb/producer-routing", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("requests %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
