package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestGrafanaFollowerForwardsMemberRows: on a --ha follower, the Grafana member
// rows (leases and last heartbeats are the leader's memory) go to the leader;
// every other Grafana route is served from the follower's own state.
func TestGrafanaFollowerForwardsMemberRows(t *testing.T) {
	leader := &fakeLeader{}
	ls := httptest.NewServer(leader)
	defer ls.Close()
	fs, _ := startFollower(t, ls.URL)
	const gf = "/coord/v1/monitoring/grafana"
	q := "?streamPrefix=p&consumerGroup=g"
	for _, c := range []struct {
		path      string
		forwarded bool
	}{
		{gf + "/members" + q, true},
		{gf + "/groups", false},
		{gf + "/options/streams", false},
		{gf + "/options/consumer-groups", false},
		{gf + "/options/shards?streamPrefix=&consumerGroup=", false},
		{gf + "/shards?streamPrefix=&consumerGroup=", false},
		{gf + "/assignments?streamPrefix=&consumerGroup=", false},
		{gf + "/messages?streamPrefix=&consumerGroup=", false},
	} {
		t.Run(c.path, func(t *testing.T) {
			before := leader.count()
			resp, body := send(t, http.MethodGet, fs.URL+c.path, "", nil)
			hits := leader.count() - before
			switch {
			case c.forwarded && (hits != 1 || resp.Header.Get("X-Rsc-Forwarded-To") != ls.URL):
				t.Fatalf("want forwarded: leader hits %d, status %d, body %s", hits, resp.StatusCode, body)
			case !c.forwarded && (hits != 0 || resp.StatusCode != http.StatusOK || body != "[]\n"):
				t.Fatalf("want served locally: leader hits %d, status %d, body %q", hits, resp.StatusCode, body)
			}
		})
	}
}
