package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/wire"
)

// holdLeader is a standalone coordinator and its server, with group p/g of
// two shards.
type holdLeader struct {
	c   *coordinator.Coordinator
	api *httpapi.Server
	srv *httptest.Server
}

func startHoldLeader(t *testing.T) *holdLeader {
	t.Helper()
	c := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop()}, events.NewMemLog(), nil, nil, nil)
	if err := c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c.Run()
	t.Cleanup(c.Close)
	api := httpapi.NewServer(httpapi.Config{Logger: zerolog.Nop(), Auth: httpapi.AuthConfig{ClusterSecret: testClusterSecret}}, httpapi.PartsOf(c), nil)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	if resp, body := send(t, http.MethodPost, srv.URL+"/coord/v1/streams/p/groups/g", `{"initialShardCount":2,"requestedBy":"t"}`, nil); resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, body)
	}
	return &holdLeader{c: c, api: api, srv: srv}
}

// hbMember is a member heartbeating over HTTP.
type hbMember struct {
	id           string
	epoch, mv    int64
	owned        []int
	lastResponse wire.HeartbeatResponse
}

func (m *hbMember) body() string {
	owned := make([]wire.ShardRef, 0, len(m.owned))
	for _, s := range m.owned {
		owned = append(owned, wire.ShardRef{ShardIndex: s})
	}
	b, _ := json.Marshal(map[string]any{"protocolVersion": 1, "requestId": "r", "memberId": m.id, "memberEpoch": m.epoch, "metadataVersion": m.mv,
		"ownedShards": owned, "revokingShards": []any{}, "shardProgress": []any{}})
	return string(b)
}

// beat sends m's heartbeat to base with hdr and adopts an OK answer; it
// returns the HTTP status, the hold outcome header and the body.
func (m *hbMember) beat(ctx context.Context, base string, hdr map[string]string) (int, string, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/coord/v1/streams/p/groups/g/members/"+m.id+"/heartbeat", strings.NewReader(m.body()))
	if err != nil {
		return 0, "", "", err
	}
	req.SetBasicAuth("admin", "password")
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		var r wire.HeartbeatResponse
		if err := json.Unmarshal(b, &r); err == nil && r.Status == wire.StatusOK {
			m.lastResponse = r
			m.epoch, m.mv, m.owned = r.MemberEpoch, r.MetadataVersion, nil
			for _, s := range r.Assignment.AssignedShards {
				m.owned = append(m.owned, s.ShardIndex)
			}
		}
	}
	return resp.StatusCode, resp.Header.Get("X-Rsc-Hold"), string(b), nil
}

// settle heartbeats m until its answer is quiet.
func (m *hbMember) settle(t *testing.T, base string) {
	t.Helper()
	for i := 0; i < 10; i++ {
		before := fmt.Sprint(m.epoch, m.mv, m.owned)
		code, _, body, err := m.beat(context.Background(), base, nil)
		if err != nil || code != http.StatusOK {
			t.Fatalf("heartbeat of %s: %d %s %v", m.id, code, body, err)
		}
		if fmt.Sprint(m.epoch, m.mv, m.owned) == before {
			return
		}
	}
	t.Fatalf("%s did not settle", m.id)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHeldHeartbeatHeader: X-Rsc-Hold-Ms asks for a hold, X-Rsc-Hold says
// how it ended; a value that is not a whole number of milliseconds within
// bounds is a 400 that names the header; a heartbeat without the header is
// answered at once without X-Rsc-Hold, as the reference's clients expect.
func TestHeldHeartbeatHeader(t *testing.T) {
	l := startHoldLeader(t)
	m := &hbMember{id: "m1"}
	m.settle(t, l.srv.URL)
	code, why, body, err := m.beat(context.Background(), l.srv.URL, map[string]string{"X-Rsc-Hold-Ms": "30"})
	if err != nil || code != http.StatusOK || why != string(coordinator.HoldElapsed) {
		t.Fatalf("held for 30 ms: %d %q %s %v", code, why, body, err)
	}
	code, why, _, _ = m.beat(context.Background(), l.srv.URL, nil)
	if code != http.StatusOK || why != "" {
		t.Fatalf("plain heartbeat: %d, X-Rsc-Hold %q (want none)", code, why)
	}
	for _, bad := range []string{"abc", "-1", "1.5", "600001", "99999999999999999999"} {
		code, _, body, _ := m.beat(context.Background(), l.srv.URL, map[string]string{"X-Rsc-Hold-Ms": bad})
		if code != http.StatusBadRequest || !strings.Contains(body, "X-Rsc-Hold-Ms") {
			t.Errorf("X-Rsc-Hold-Ms %q: %d %s, want 400 naming the header", bad, code, body)
		}
	}
	// At its maximum the header is accepted: the heartbeat is held (a 400
	// would be answered at once).
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if code, why, body, err := m.beat(ctx, l.srv.URL, map[string]string{"X-Rsc-Hold-Ms": "600000"}); err == nil {
		t.Errorf("X-Rsc-Hold-Ms at its maximum: answered %d %q %s, want held", code, why, body)
	}
}

// TestServerCloseAnswersHeldHeartbeats: closing the server answers a held
// heartbeat at once (released, with its answer) instead of waiting for its
// bound: Close finishes within a deadline shorter than the hold.
func TestServerCloseAnswersHeldHeartbeats(t *testing.T) {
	l := startHoldLeader(t)
	m := &hbMember{id: "m1"}
	m.settle(t, l.srv.URL)
	type result struct {
		code      int
		why, body string
		err       error
	}
	done := make(chan result, 1)
	go func() {
		code, why, body, err := m.beat(context.Background(), l.srv.URL, map[string]string{"X-Rsc-Hold-Ms": "600000"})
		done <- result{code, why, body, err}
	}()
	waitUntil(t, "the heartbeat held", func() bool { return l.c.HeldHeartbeats() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // the hold would last 7.5s (half the lease)
	defer cancel()
	if err := l.api.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	r := <-done
	if r.err != nil || r.code != http.StatusOK || r.why != string(coordinator.HoldReleased) {
		t.Fatalf("held heartbeat at Close: %d %q %s %v, want 200 released", r.code, r.why, r.body, r.err)
	}
}

// TestFollowerForwardsHeldHeartbeats: a follower forwards a held heartbeat
// to the leader, which holds it (the follower holds none of its own) and
// answers it when a change concerns it; the follower relays the answer.
func TestFollowerForwardsHeldHeartbeats(t *testing.T) {
	l := startHoldLeader(t)
	fs, fc := startFollower(t, l.srv.URL)
	a, b := &hbMember{id: "a"}, &hbMember{id: "b"}
	a.settle(t, fs.URL)
	type result struct {
		code      int
		why, body string
		err       error
	}
	done := make(chan result, 1)
	go func() {
		code, why, body, err := a.beat(context.Background(), fs.URL, map[string]string{"X-Rsc-Hold-Ms": "60000"})
		done <- result{code, why, body, err}
	}()
	waitUntil(t, "the leader holding the heartbeat", func() bool { return l.c.HeldHeartbeats() == 1 })
	if n := fc.HeldHeartbeats(); n != 0 {
		t.Fatalf("the follower holds %d heartbeats itself", n)
	}
	// b joins through the follower: a's answer now carries another
	// metadata version and one shard less.
	if code, _, body, err := b.beat(context.Background(), fs.URL, nil); err != nil || code != http.StatusOK {
		t.Fatalf("b's join: %d %s %v", code, body, err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.code != http.StatusOK || r.why != string(coordinator.HoldWoken) {
			t.Fatalf("a's held heartbeat: %d %q %s %v, want 200 woken", r.code, r.why, r.body, r.err)
		}
		if len(a.lastResponse.Assignment.AssignedShards) != 1 {
			t.Fatalf("a's answer assigns %v, want one shard (b joined)", a.lastResponse.Assignment.AssignedShards)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a's held heartbeat was not answered after b joined")
	}
}
