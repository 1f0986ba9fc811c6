package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi"
)

// testClusterSecret signs the assertions of the test replicas.
const testClusterSecret = "cluster-secret"

// otherLeader is a lease always held by another replica.
type otherLeader struct{ url string }

func (o otherLeader) info() coordinator.LeaderInfo {
	return coordinator.LeaderInfo{Holder: "replica-a#00ff", URL: o.url, Token: 7}
}
func (o otherLeader) Acquire(context.Context, time.Duration) (coordinator.LeaderInfo, error) {
	return o.info(), nil
}
func (o otherLeader) Renew(context.Context, time.Duration) (bool, error)     { return false, nil }
func (o otherLeader) Release(context.Context) error                          { return nil }
func (o otherLeader) Leader(context.Context) (coordinator.LeaderInfo, error) { return o.info(), nil }

// fakeLeader records what reaches it.
type fakeLeader struct {
	mu   sync.Mutex
	hits []*http.Request
	body []string
}

func (f *fakeLeader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.hits = append(f.hits, r.Clone(context.Background()))
	f.body = append(f.body, string(b))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(`{"servedBy":"leader"}`))
}

func (f *fakeLeader) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.hits)
}

func startFollower(t *testing.T, leaderURL string) (*httptest.Server, *coordinator.Coordinator) {
	t.Helper()
	return startFollowerOn(t, leaderURL, events.NewMemLog())
}

// startFollowerOn starts a follower of the leader at leaderURL on log.
func startFollowerOn(t *testing.T, leaderURL string, log events.Log) (*httptest.Server, *coordinator.Coordinator) {
	t.Helper()
	c := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop(), CoordinatorID: "replica-b",
		Lease: otherLeader{url: leaderURL}, LeaseTTL: 300 * time.Millisecond}, log, nil, nil, nil)
	if err := c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c.Run()
	t.Cleanup(c.Close)
	deadline := time.Now().Add(5 * time.Second)
	for c.Leader().URL != leaderURL {
		if time.Now().After(deadline) {
			t.Fatal("the follower never learned the leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	srv := httptest.NewServer(httpapi.NewServer(httpapi.Config{Logger: zerolog.Nop(), Auth: httpapi.AuthConfig{ClusterSecret: testClusterSecret}}, httpapi.PartsOf(c), nil))
	t.Cleanup(srv.Close)
	return srv, c
}

func send(t *testing.T, method, url, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth("admin", "password")
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestFollowerForwardsWritesAndLeaderReads(t *testing.T) {
	leader := &fakeLeader{}
	ls := httptest.NewServer(leader)
	defer ls.Close()
	fs, c := startFollower(t, ls.URL)
	if c.Role() != coordinator.RoleFollower || c.IsLeader() {
		t.Fatalf("role %s", c.Role())
	}
	scalePath := "/coord/v1/streams/a%2Fb/groups/g/scale"
	cases := []struct {
		name, method, path string
		forwarded          bool
	}{
		{"scale", http.MethodPost, scalePath, true},
		{"heartbeat", http.MethodPost, "/coord/v1/streams/p/groups/g/members/m1/heartbeat", true},
		{"delete", http.MethodDelete, "/coord/v1/streams/p/groups/g", true},
		{"members (leader memory)", http.MethodGet, "/coord/v1/monitoring/streams/p/groups/g/members", true},
		{"migration (leader memory)", http.MethodGet, "/coord/v1/streams/p/groups/g/migrations/r1", true},
		{"migrations (leader memory)", http.MethodGet, "/coord/v1/streams/p/groups/g/migrations", true},
		{"monitoring migration (leader memory)", http.MethodGet, "/coord/v1/monitoring/streams/p/groups/g/migrations/r1", true},
		{"monitoring migrations (leader memory)", http.MethodGet, "/coord/v1/monitoring/streams/p/groups/g/migrations", true},
		{"consumption (leader memory)", http.MethodGet, "/coord/v1/monitoring/streams/p/groups/g/consumption", true},
		{"grafana members (leader memory)", http.MethodGet, "/coord/v1/monitoring/grafana/members?streamPrefix=p&consumerGroup=g", true},
		{"assignments (local)", http.MethodGet, "/coord/v1/monitoring/streams/p/groups/g/assignments", false},
		{"routing (local)", http.MethodGet, "/coord/v1/streams/p/groups/g/producer-routing", false},
		{"group (local)", http.MethodGet, "/coord/v1/monitoring/streams/p/groups/g", false},
		{"audit (local)", http.MethodGet, "/coord/v1/monitoring/events", false},
		{"login (local)", http.MethodPost, "/coord/v1/auth/login", false},
		// Which writes go to the leader is decided from the matched route:
		// the login route's path with another method is answered here (405),
		// an unknown route's write by the leader (404), the API's root here.
		{"login, another method (local)", http.MethodPut, "/coord/v1/auth/login", false},
		{"unknown route (forwarded)", http.MethodPost, "/coord/v1/streams/p/nothing", true},
		{"API root (local)", http.MethodPost, "/coord/v1", false},
		{"readyz (local)", http.MethodGet, "/readyz", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := leader.count()
			resp, body := send(t, tc.method, fs.URL+tc.path, `{"targetShardCount":3}`, nil)
			got := leader.count() - before
			if tc.forwarded {
				if got != 1 || resp.StatusCode != http.StatusAccepted || resp.Header.Get("X-Rsc-Forwarded-To") != ls.URL || !strings.Contains(body, "leader") {
					t.Fatalf("want forwarded: leader hits %d, status %d, X-Rsc-Forwarded-To %q, body %s", got, resp.StatusCode, resp.Header.Get("X-Rsc-Forwarded-To"), body)
				}
				leader.mu.Lock()
				hit, hitBody := leader.hits[len(leader.hits)-1], leader.body[len(leader.body)-1]
				leader.mu.Unlock()
				if hit.URL.RequestURI() != tc.path || hit.Method != tc.method || hit.Header.Get("X-Rsc-Forwarded-By") != "replica-b" {
					t.Fatalf("leader saw %s %s by %q", hit.Method, hit.URL.RequestURI(), hit.Header.Get("X-Rsc-Forwarded-By"))
				}
				// The caller's credentials stay with the follower; an assertion vouches for it.
				if hit.Header.Get("Authorization") != "" || hit.Header.Get("X-Rsc-Principal-Assertion") == "" {
					t.Fatalf("leader saw Authorization %q, assertion %q", hit.Header.Get("Authorization"), hit.Header.Get("X-Rsc-Principal-Assertion"))
				}
				if tc.method == http.MethodPost && hitBody != `{"targetShardCount":3}` {
					t.Fatalf("leader got body %q", hitBody)
				}
				return
			}
			if got != 0 || resp.Header.Get("X-Rsc-Forwarded-To") != "" {
				t.Fatalf("want served locally: leader hits %d, status %d, body %s", got, resp.StatusCode, body)
			}
		})
	}

	var ready map[string]any
	_, body := send(t, http.MethodGet, fs.URL+"/readyz", "", nil)
	if err := json.Unmarshal([]byte(body), &ready); err != nil {
		t.Fatal(err)
	}
	if ready["status"] != "READY" || ready["role"] != "FOLLOWER" || ready["leader"] != "replica-a" || ready["leaderUrl"] != ls.URL {
		t.Fatalf("follower /readyz: %s", body)
	}

	// A request that says another follower forwarded it, without that
	// follower's assertion, is refused, not forwarded.
	before := leader.count()
	resp, body := send(t, http.MethodPost, fs.URL+scalePath, `{}`, map[string]string{"X-Rsc-Forwarded-By": "replica-c"})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "FORWARDED_REQUEST_REFUSED") || leader.count() != before {
		t.Fatalf("re-forward: %d %s (leader hits +%d)", resp.StatusCode, body, leader.count()-before)
	}
	// Decisions reached directly (not over HTTP) are refused on a follower.
	if _, err := c.CreateGroup(context.Background(), events.Meta{}, commands.CreateGroupInput{StreamPrefix: "p", ConsumerGroup: "g"}); err == nil || !strings.Contains(err.Error(), "leader lease") {
		t.Fatalf("CreateGroup on a follower: %v", err)
	}

	// The leader stops answering: writes get a retryable 503, leader-memory
	// reads fall back to the follower's own state.
	ls.Close()
	resp, body = send(t, http.MethodPost, fs.URL+scalePath, `{}`, nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "did not answer") {
		t.Fatalf("write with the leader down: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = send(t, http.MethodGet, fs.URL+"/coord/v1/monitoring/streams/p/groups/g/members", "", nil)
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("X-Rsc-Leader-Unreachable") == "" || !strings.Contains(body, "GROUP_NOT_FOUND") {
		t.Fatalf("members read with the leader down: %d %v %s", resp.StatusCode, resp.Header, body)
	}
}

// TestForwardedRequestKeepsItsID: the leader serves a forwarded request under
// the follower's request id, and the caller sees that one id.
func TestForwardedRequestKeepsItsID(t *testing.T) {
	leader := &fakeLeader{}
	ls := httptest.NewServer(leader)
	defer ls.Close()
	fs, _ := startFollower(t, ls.URL)
	for _, given := range []string{"", "client-id-1"} {
		hdr := map[string]string{}
		if given != "" {
			hdr["X-Request-Id"] = given
		}
		resp, _ := send(t, http.MethodPost, fs.URL+"/coord/v1/streams/p/groups/g/scale", `{"targetShardCount":3}`, hdr)
		leader.mu.Lock()
		seen := leader.hits[len(leader.hits)-1].Header.Get("X-Request-Id")
		leader.mu.Unlock()
		ids := resp.Header.Values("X-Request-Id")
		if len(ids) != 1 || ids[0] != seen || seen == "" || (given != "" && seen != given) {
			t.Errorf("X-Request-Id %q: the leader saw %q, the caller got %q", given, seen, ids)
		}
	}
}

// tap records every request it relays to target.
type tap struct {
	mu   sync.Mutex
	reqs []*http.Request
	body []string
	// positions holds the X-Rsc-Log-Position of each answer, which the tap
	// takes off: the follower tails a log of its own, so it would wait
	// ForwardCatchUpWait for a position it never reaches.
	positions []string
	next      http.Handler
}

func (p *tap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.reqs = append(p.reqs, r.Clone(context.Background()))
	p.body = append(p.body, string(b))
	p.mu.Unlock()
	r.Body = io.NopCloser(strings.NewReader(string(b)))
	p.next.ServeHTTP(&positionTaker{ResponseWriter: w, tap: p}, r)
}

type positionTaker struct {
	http.ResponseWriter
	tap   *tap
	taken bool
}

func (w *positionTaker) take() {
	if w.taken {
		return
	}
	w.taken = true
	w.tap.mu.Lock()
	w.tap.positions = append(w.tap.positions, w.Header().Get("X-Rsc-Log-Position"))
	w.tap.mu.Unlock()
	w.Header().Del("X-Rsc-Log-Position")
}

func (w *positionTaker) WriteHeader(code int) {
	w.take()
	w.ResponseWriter.WriteHeader(code)
}

func (w *positionTaker) Write(b []byte) (int, error) {
	w.take()
	return w.ResponseWriter.Write(b)
}

func (p *tap) lastPosition() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.positions[len(p.positions)-1]
}

func (p *tap) last() (*http.Request, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reqs[len(p.reqs)-1], p.body[len(p.body)-1]
}

// followerWithGroup starts a leader with cfg, a tap in front of it and a
// follower of the tap, and creates group p/g through the follower. It returns
// the follower, the tap and the leader.
func followerWithGroup(t *testing.T, cfg httpapi.Config) (follower *httptest.Server, tp *tap, leader *secServer) {
	t.Helper()
	leader = newSecServer(t, cfg, nil)
	lu, _ := url.Parse(leader.URL)
	tp = &tap{next: httputil.NewSingleHostReverseProxy(lu)}
	ts := httptest.NewServer(tp)
	t.Cleanup(ts.Close)
	follower, _ = startFollower(t, ts.URL)
	resp, body := send(t, http.MethodPost, follower.URL+"/coord/v1/streams/p/groups/g", `{"initialShardCount":2,"requestedBy":"t"}`, nil)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create through the follower: %d %s", resp.StatusCode, body)
	}
	return follower, tp, leader
}

// TestForwardedRequestsCarryAnAssertion: the leader accepts a forwarded
// request on the follower's signed assertion, never the caller's
// credentials, which the follower keeps. What a tap between them sees is
// good for that one request, for seconds: on another path, with another
// body, forged or expired, the leader refuses it.
func TestForwardedRequestsCarryAnAssertion(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	fs, tp, leader := followerWithGroup(t, httpapi.Config{Now: clock.Now, Auth: httpapi.AuthConfig{ClusterSecret: testClusterSecret}})
	const scale = "/coord/v1/streams/p/groups/g/scale"
	scaleBody := `{"targetShardCount":3,"requestedBy":"t","reason":"r"}`
	if resp, body := send(t, http.MethodPost, fs.URL+scale, scaleBody, nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("scale through the follower: %d %s", resp.StatusCode, body)
	}
	seen, seenBody := tp.last()
	if seen.Header.Get("Authorization") != "" || seen.Header.Get("X-Rsc-Principal-Assertion") == "" {
		t.Fatalf("the tap saw Authorization %q and assertion %q", seen.Header.Get("Authorization"), seen.Header.Get("X-Rsc-Principal-Assertion"))
	}
	replay := func(method, path, body string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest(method, leader.URL+path, strings.NewReader(body))
		for _, h := range []string{"X-Rsc-Principal-Assertion", "X-Rsc-Forwarded-By", "Content-Type"} {
			req.Header.Set(h, seen.Header.Get(h))
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	refused := func(what string, code int, body string) {
		t.Helper()
		if code != http.StatusForbidden || !strings.Contains(body, "FORWARDED_REQUEST_REFUSED") {
			t.Fatalf("%s: %d %s, want 403 FORWARDED_REQUEST_REFUSED", what, code, body)
		}
	}
	if code, b := replay(http.MethodPost, scale, seenBody, nil); code == http.StatusForbidden {
		t.Fatalf("the very request, replayed at once: %d %s", code, b)
	}
	code, b := replay(http.MethodDelete, "/coord/v1/streams/p/groups/g", `{"requestedBy":"t","reason":"r","force":true}`, nil)
	refused("another path and method", code, b)
	code, b = replay(http.MethodPost, scale+"?x=1", seenBody, nil)
	refused("another query", code, b)
	code, b = replay(http.MethodPost, scale, `{"targetShardCount":1,"requestedBy":"t","reason":"r"}`, nil)
	refused("another body", code, b)
	tok := seen.Header.Get("X-Rsc-Principal-Assertion")
	forged := base64.RawURLEncoding.EncodeToString([]byte(`{"v":1,"u":"admin","r":["ADMIN"],"p":null,"a":"1.2.3.4","e":9999999999999,"m":"POST","t":"`+scale+`","b":""}`)) + tok[strings.Index(tok, "."):]
	code, b = replay(http.MethodPost, scale, seenBody, map[string]string{"X-Rsc-Principal-Assertion": forged})
	refused("a forged payload", code, b)
	code, b = replay(http.MethodPost, scale, seenBody, map[string]string{"X-Rsc-Principal-Assertion": ""})
	refused("X-Rsc-Forwarded-By without an assertion", code, b)
	clock.Add(httpapi.ForwardAssertionTTL + time.Since(clock.Now()) + time.Millisecond)
	code, b = replay(http.MethodPost, scale, seenBody, nil)
	refused("the very request once the assertion expired", code, b)
}

// TestLeaderNamesItsPositionOnForwardedWrites: the leader's answer to a
// forwarded write carries the last entry its projection held; a forwarded
// heartbeat's does not (heartbeats are not held back), nor an answer to a
// client that came to the leader itself.
func TestLeaderNamesItsPositionOnForwardedWrites(t *testing.T) {
	fs, tp, leader := followerWithGroup(t, httpapi.Config{Auth: httpapi.AuthConfig{ClusterSecret: testClusterSecret}})
	created := tp.lastPosition()
	if _, err := events.ParseID(created); err != nil || created == events.ZeroID {
		t.Fatalf("the leader's answer to a forwarded create: X-Rsc-Log-Position %q, want its position after the create", created)
	}
	hb := `{"protocolVersion":1,"requestId":"r1","memberId":"m1","memberEpoch":0,"metadataVersion":0,"runtimeConsumerCapacity":{"runtimeMaxConcurrency":1,"availableConcurrency":1}}`
	if resp, body := send(t, http.MethodPost, fs.URL+"/coord/v1/streams/p/groups/g/members/m1/heartbeat", hb, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("forwarded heartbeat: %d %s", resp.StatusCode, body)
	}
	if pos := tp.lastPosition(); pos != "" {
		t.Fatalf("the leader's answer to a forwarded heartbeat: X-Rsc-Log-Position %q, want none", pos)
	}
	if resp, body := send(t, http.MethodPost, fs.URL+"/coord/v1/streams/p/groups/g/scale", `{"targetShardCount":3,"requestedBy":"t","reason":"r"}`, nil); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("scale through the follower: %d %s", resp.StatusCode, body)
	}
	if pos := tp.lastPosition(); pos == "" {
		t.Fatal("the leader's answer to a forwarded scale names no position")
	} else if cmp, err := events.CompareIDs(pos, created); err != nil || cmp <= 0 {
		t.Fatalf("the leader's position after the scale %q is not past the one after the create %q", pos, created)
	}
	if resp, body := send(t, http.MethodPost, leader.URL+"/coord/v1/streams/q/groups/h", `{"initialShardCount":2,"requestedBy":"t"}`, nil); resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Rsc-Log-Position") != "" {
		t.Fatalf("create at the leader: %d, X-Rsc-Log-Position %q: %s", resp.StatusCode, resp.Header.Get("X-Rsc-Log-Position"), body)
	}
}

// TestFollowerAnswersAForwardedWriteOnceItHoldsIt: the leader's answer to a
// forwarded write names its log position (X-Rsc-Log-Position); the follower
// relays it only once its own projection holds that entry, so a read sent to
// the follower next sees the write. Here the leader's entry reaches the log
// 100 ms after its answer: without the wait the follower relayed at once and
// the group read after it was 404.
func TestFollowerAnswersAForwardedWriteOnceItHoldsIt(t *testing.T) {
	log := events.NewMemLog()
	data, err := events.Encode(events.Meta{StreamPrefix: "p", ConsumerGroup: "g", Time: time.Now().UTC(), Actor: "admin"},
		&events.GroupCreated{ShardCount: 2, RequestedBy: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	var position string // what the leader answers
	var mu sync.Mutex
	leader := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		pos := position
		mu.Unlock()
		if pos == "1-0" {
			go func() {
				time.Sleep(100 * time.Millisecond)
				if _, err := log.Append(context.Background(), events.ZeroID, [][]byte{data}); err != nil {
					t.Error(err)
				}
			}()
		}
		w.Header().Set("X-Rsc-Log-Position", pos)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{}`))
	})
	ls := httptest.NewServer(leader)
	defer ls.Close()
	fs, c := startFollowerOn(t, ls.URL, log)
	create := func(pos string) *http.Response {
		mu.Lock()
		position = pos
		mu.Unlock()
		resp, _ := send(t, http.MethodPost, fs.URL+"/coord/v1/streams/p/groups", `{"consumerGroup":"g","initialShardCount":2}`, nil)
		return resp
	}

	resp := create("1-0")
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Rsc-Log-Position") != "1-0" {
		t.Fatalf("forwarded create: %d, position %q", resp.StatusCode, resp.Header.Get("X-Rsc-Log-Position"))
	}
	if at := c.State().LastID(); at != "1-0" {
		t.Fatalf("the follower relayed the answer at %s, before it held the leader's position 1-0", at)
	}
	if resp, body := send(t, http.MethodGet, fs.URL+"/coord/v1/monitoring/streams/p/groups/g", "", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("read after the forwarded create: %d %s", resp.StatusCode, body)
	}

	// A position that is not an entry id is not waited for, and one the
	// follower never reaches holds the answer ForwardCatchUpWait at most: the
	// write was done either way.
	if resp := create("not-an-id"); resp.StatusCode != http.StatusCreated {
		t.Fatalf("forwarded create with a bad position: %d", resp.StatusCode)
	}
	if resp := create("99-0"); resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Rsc-Log-Position") != "99-0" {
		t.Fatalf("forwarded create with a position the follower never reaches: %d", resp.StatusCode)
	}
}
