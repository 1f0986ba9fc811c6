package httpapi_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"testing"

	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/replay"
)

// TestReplayEndpointAgreesWithReplayTool holds the two renderings of a
// folded group to one shape: the HTTP replay endpoint (httpapi's mapping of
// projection's views) and `replay state` (replay's own mapping) show the
// group, its assignments and its reshardings byte for byte alike.
func TestReplayEndpointAgreesWithReplayTool(t *testing.T) {
	s, c := newDocServer(t, httpapi.AuthConfig{})
	g := "/coord/v1/streams/orders/groups/billing"
	steps := []struct{ path, body string }{
		{g, `{"initialShardCount":4,"requestedBy":"alice","reason":"test"}`},
		{g + "/members/m1/heartbeat", `{"protocolVersion":1,"requestId":"r1","memberId":"m1","memberEpoch":0,"metadataVersion":0,"runtimeConsumerCapacity":{"runtimeMaxConcurrency":2,"availableConcurrency":1}}`},
		{g + "/scale", `{"targetShardCount":6,"requestedBy":"alice","reason":"more"}`},
	}
	for _, st := range steps {
		if w := serveDoc(s, http.MethodPost, st.path, "admin", "password", st.body); w.Code >= 300 {
			t.Fatalf("POST %s = %d %s", st.path, w.Code, w.Body)
		}
	}
	w := serveDoc(s, http.MethodGet, "/coord/v1/monitoring/streams/orders/groups/billing/replay", "admin", "password", "")
	if w.Code != http.StatusOK {
		t.Fatalf("replay = %d %s", w.Code, w.Body)
	}
	served := decodeObject(t, w.Body.Bytes())
	st, _, err := replay.StateAt(t.Context(), c.Log(), replay.Point{UntilID: served["asOf"].(string)})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := replay.GroupState(st, projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	printed := decodeObject(t, data)
	// Members differ on purpose: the API shows MemberMetadata (runtime fields
	// zero), the tool what the log knows of each member.
	for _, k := range []string{"asOf", "members"} {
		delete(served, k)
	}
	for _, k := range []string{"lastId", "members"} {
		delete(printed, k)
	}
	if len(served) < 15 || !maps.EqualFunc(served, printed, func(a, b any) bool { return string(mustJSON(t, a)) == string(mustJSON(t, b)) }) {
		t.Errorf("replay endpoint and replay tool disagree:\nAPI:  %s\ntool: %s", mustJSON(t, served), mustJSON(t, printed))
	}
}

func decodeObject(t *testing.T, data []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%v: %s", err, data)
	}
	return m
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
