package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/wire"
)

// layoutServer is a server over an in-memory coordinator whose routing
// answers list the layouts of the last window.
func layoutServer(t *testing.T, window time.Duration) *httpapi.Server {
	t.Helper()
	c := coordinator.New(coordinator.Config{DisableProvisioning: true}, events.NewMemLog(), nil, nil, nil)
	if err := c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c.Run()
	t.Cleanup(c.Close)
	return httpapi.NewServer(httpapi.Config{Addr: "127.0.0.1:0", LayoutWindow: window}, httpapi.PartsOf(c), nil)
}

func mustServe(t *testing.T, s *httpapi.Server, method, path, body string, out any) {
	t.Helper()
	w := serveDoc(s, method, path, "admin", "password", body)
	if w.Code >= 300 {
		t.Fatalf("%s %s = %d %s", method, path, w.Code, w.Body)
	}
	if out != nil {
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRoutingListsPreviousLayouts: after 4 -> 8 and a rollback to 4, the
// group's routing lists both earlier layouts, newest first, each fenced at
// the version the change away from it took the group to and no later than
// the layout after it began (what the SDK checks), with the window; a
// stream's routing lists its own (in stream versions); a window of 0 lists
// none and omits the window.
func TestRoutingListsPreviousLayouts(t *testing.T) {
	s := layoutServer(t, time.Hour)
	g := "/coord/v1/streams/orders/groups/billing"
	mustServe(t, s, http.MethodPost, g, `{"initialShardCount":4,"requestedBy":"alice","reason":"test"}`, nil)
	var res wire.Resharding
	mustServe(t, s, http.MethodPost, g+"/scale", `{"targetShardCount":8,"requestedBy":"alice","reason":"more"}`, &res)
	mustServe(t, s, http.MethodPost, g+"/migrations/"+res.ReshardingID+"/rollback", `{"requestedBy":"alice","reason":"back"}`, nil)
	var rt wire.ProducerRoutingResponse
	mustServe(t, s, http.MethodGet, g+"/producer-routing", "", &rt)
	if rt.ShardCount != 4 || len(rt.PreviousLayouts) != 2 || rt.LayoutWindowMs != time.Hour.Milliseconds() {
		t.Fatalf("routing %+v", rt)
	}
	newer, older := rt.PreviousLayouts[0], rt.PreviousLayouts[1]
	if newer.ShardCount != 8 || older.ShardCount != 4 || newer.Fence > rt.MetadataVersion || newer.MetadataVersion != older.Fence ||
		older.Fence <= older.MetadataVersion || newer.Fence <= newer.MetadataVersion || newer.EndedAt.Before(older.EndedAt) || time.Since(newer.EndedAt) > time.Minute {
		t.Fatalf("previous layouts %+v (current version %d)", rt.PreviousLayouts, rt.MetadataVersion)
	}

	st := "/coord/v1/streams/events"
	mustServe(t, s, http.MethodPost, st, `{"initialShardCount":2,"requestedBy":"alice","reason":"test"}`, nil)
	mustServe(t, s, http.MethodPost, st+"/scale", `{"targetShardCount":3,"requestedBy":"alice","reason":"more"}`, nil)
	var srt wire.StreamRoutingResponse
	mustServe(t, s, http.MethodGet, st+"/producer-routing", "", &srt)
	if srt.ShardCount != 3 || len(srt.PreviousLayouts) != 1 || srt.PreviousLayouts[0].ShardCount != 2 || srt.PreviousLayouts[0].Fence != srt.MetadataVersion ||
		srt.LayoutWindowMs != time.Hour.Milliseconds() {
		t.Fatalf("stream routing %+v", srt)
	}

	off := layoutServer(t, 0)
	mustServe(t, off, http.MethodPost, g, `{"initialShardCount":4,"requestedBy":"alice","reason":"test"}`, nil)
	mustServe(t, off, http.MethodPost, g+"/scale", `{"targetShardCount":8,"requestedBy":"alice","reason":"more"}`, nil)
	w := serveDoc(off, http.MethodGet, g+"/producer-routing", "admin", "password", "")
	var raw map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw["previousLayouts"]; ok {
		t.Fatalf("window 0 lists layouts: %s", w.Body)
	}
	if _, ok := raw["layoutWindowMs"]; ok {
		t.Fatalf("window 0 sends a window: %s", w.Body)
	}
}
