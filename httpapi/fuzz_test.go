package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/wire"
)

// Fuzz targets for the request decoders and validators behind the mutating routes
// and login. A Server on an in-memory log (no Redis, provisioning off) is driven
// through its ServeHTTP with arbitrary bodies and path segments. Invariants:
//   - no panic, never a 5xx;
//   - 401 from the auth interceptor: empty body and the Basic challenge; 401 from
//     login: the Spring default error body; 403: empty body;
//   - any other non-2xx: the ErrorResponse shape (status name matching the code,
//     a known errorCode, a message);
//   - 2xx: a JSON object.
//
// Run one for a while with, for example:
//
//	go test -run '^$' -fuzz '^FuzzCreate$' -fuzztime 10s -fuzzminimizetime 1s ./httpapi/
//
// The server keeps state between inputs, so coverage is not exactly repeatable and
// minimising a new interesting input can use the whole default minimise budget (60 s,
// shown as "0/sec"); a short -fuzzminimizetime keeps the campaign fuzzing.

const fuzzAdmin = "Basic YWRtaW46cGFzc3dvcmQ=" // admin:password

// fuzzServer is a Server with a group orders/oc (4 shards), a live member m1 that
// never converges, and an active scale-out, so requests can reach deep code paths.
type fuzzServer struct {
	mu  sync.Mutex
	srv *httpapi.Server
}

func newFuzzServer(tb testing.TB) *fuzzServer {
	tb.Helper()
	c := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop()}, events.NewMemLog(), nil, nil, nil)
	if err := c.Load(context.Background(), false); err != nil {
		tb.Fatal(err)
	}
	c.Run()
	tb.Cleanup(c.Close)
	fs := &fuzzServer{srv: httpapi.NewServer(httpapi.Config{Logger: zerolog.Nop()}, httpapi.PartsOf(c), nil)}
	fs.ensure(tb)
	return fs
}

func (fs *fuzzServer) do(method, path, auth string, body []byte) *httptest.ResponseRecorder {
	req, err := http.NewRequest(method, "http://coordinator.test"+path, bytes.NewReader(body))
	if err != nil {
		return nil
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	fs.srv.ServeHTTP(rec, req)
	return rec
}

func fuzzJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// ensure recreates the fixture when an earlier input deleted or changed it, and
// returns the active resharding id.
func (fs *fuzzServer) ensure(tb testing.TB) string {
	tb.Helper()
	fs.mu.Lock()
	defer fs.mu.Unlock()
	group := "/coord/v1/streams/orders/groups/oc"
	rec := fs.do("GET", group, fuzzAdmin, nil)
	if rec.Code == 404 {
		fs.do("POST", group, fuzzAdmin, fuzzJSON(map[string]any{"initialShardCount": 4, "requestedBy": "fuzz"}))
		rec = fs.do("GET", group, fuzzAdmin, nil)
	}
	var g wire.Group
	if err := json.Unmarshal(rec.Body.Bytes(), &g); err != nil {
		tb.Fatalf("fixture: %v: %s", err, rec.Body)
	}
	if _, ok := g.TargetAssignmentSummary["m1"]; !ok {
		// A member that stays on its join answer, so a scale-out stays ACTIVE.
		hb := map[string]any{"protocolVersion": 1, "requestId": "fixture", "memberId": "m1", "memberEpoch": 0, "metadataVersion": 0,
			"runtimeConsumerCapacity": map[string]any{"runtimeMaxConcurrency": 1, "availableConcurrency": 1}}
		fs.do("POST", group+"/members/m1/heartbeat", "", fuzzJSON(hb))
	}
	if g.ActiveMigration != nil {
		return g.ActiveMigration.ReshardingID
	}
	target := 8
	if g.ShardCount >= 8 {
		target = 4
	}
	rec = fs.do("POST", group+"/scale", fuzzAdmin, fuzzJSON(map[string]any{"targetShardCount": target, "requestedBy": "fuzz", "reason": "fixture"}))
	var m wire.Resharding
	_ = json.Unmarshal(rec.Body.Bytes(), &m)
	return m.ReshardingID
}

// fuzzSeg percent-encodes a path segment as the Python client does
// (quote(value, safe="")).
func fuzzSeg(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '.', c == '_', c == '~':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

var fuzzStatusName = map[int]string{
	400: "BAD_REQUEST", 404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 409: "CONFLICT", 413: "PAYLOAD_TOO_LARGE",
	422: "UNPROCESSABLE_ENTITY", 429: "TOO_MANY_REQUESTS",
}

var fuzzErrorCodes = map[string]bool{
	"INVALID_REQUEST": true, "GROUP_NOT_FOUND": true, "STREAM_NOT_FOUND": true, "MIGRATION_NOT_FOUND": true,
	"GROUP_ALREADY_EXISTS": true, "STREAM_PREFIX_ALREADY_EXISTS": true, "GROUP_HAS_ACTIVE_MEMBERS": true,
	"ACTIVE_MIGRATION_EXISTS": true, "METADATA_SYNC_IN_PROGRESS": true, "STATE_VERSION_CONFLICT": true,
	"SHARD_COUNT_UNCHANGED": true, "ROLLBACK_NOT_ALLOWED": true, "RATE_LIMIT_EXCEEDED": true,
	"NOT_FOUND": true, "METHOD_NOT_ALLOWED": true,
	"GROUP_LIMIT_REACHED": true, "SHARD_LIMIT_REACHED": true, "STREAM_SHARD_TOPOLOGY_CONFLICT": true,
	// The quotas (docs/security.md): a fuzzer that creates enough streams
	// reaches them, and the answer is the documented 409.
	"PRINCIPAL_GROUP_QUOTA_EXCEEDED": true, "PRINCIPAL_SHARD_QUOTA_EXCEEDED": true,
	"PREFIX_GROUP_QUOTA_EXCEEDED": true, "PREFIX_SHARD_QUOTA_EXCEEDED": true, "PRINCIPAL_MEMBER_QUOTA_EXCEEDED": true,
	"GROUP_MAX_SIZE_REACHED": true, // joins of many fuzzed member ids (--max-members-per-group)
}

// TestFuzzAcceptsAQuotaAnswer: the create fuzzer's inputs add up on one
// server, and CI's run reached the principal's shard quota (7,280 of 8,192
// shards, a create of 1,024 more): a 409 PRINCIPAL_SHARD_QUOTA_EXCEEDED is
// an answer the invariants accept, not a failure.
func TestFuzzAcceptsAQuotaAnswer(t *testing.T) {
	fs := newFuzzServer(t)
	var last *httptest.ResponseRecorder
	for i := 0; i < 16; i++ {
		last = fs.do("POST", fmt.Sprintf("/coord/v1/streams/quota%d", i), fuzzAdmin, fuzzJSON(map[string]any{"initialShardCount": 1024, "requestedBy": "fuzz"}))
		check(t, "POST stream", last, false)
		if last.Code == 409 {
			break
		}
	}
	var e wire.ErrorResponse
	if err := json.Unmarshal(last.Body.Bytes(), &e); err != nil || last.Code != 409 || e.ErrorCode != "PRINCIPAL_SHARD_QUOTA_EXCEEDED" {
		t.Fatalf("16 creates of 1,024 shards ended with HTTP %d %s, want 409 PRINCIPAL_SHARD_QUOTA_EXCEEDED", last.Code, last.Body)
	}
}

var fuzzHeartbeatStatuses = map[string]bool{
	"OK": true, "RETRY": true, "SYNC_METADATA": true, "REVOKE_PENDING": true, "UNKNOWN_MEMBER_ID": true,
	"FENCED_MEMBER_EPOCH": true, "UNSUPPORTED_PROTOCOL": true, "INVALID_REQUEST": true,
}

// check applies the invariants to one answer.
func check(t *testing.T, what string, rec *httptest.ResponseRecorder, login bool) {
	t.Helper()
	if rec == nil {
		return // not a valid URL: nothing was sent
	}
	body := rec.Body.Bytes()
	code := rec.Code
	switch {
	case code >= 500:
		t.Fatalf("%s: HTTP %d: %s", what, code, body)
	case code >= 200 && code < 300:
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil {
			t.Fatalf("%s: HTTP %d with a body that is not a JSON object: %q", what, code, body)
		}
	case code == 401 && login:
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil || v["status"] != 401.0 || v["error"] == nil || v["path"] == nil {
			t.Fatalf("%s: login 401 without the default error body: %q", what, body)
		}
		if _, ok := v["accessToken"]; ok {
			t.Fatalf("%s: a 401 carries a token", what)
		}
	case code == 401:
		if len(body) != 0 || rec.Header().Get("WWW-Authenticate") != `Basic realm="redis-stream-coordinator"` {
			t.Fatalf("%s: 401 with body %q and challenge %q", what, body, rec.Header().Get("WWW-Authenticate"))
		}
	case code == 403:
		if len(body) != 0 {
			t.Fatalf("%s: 403 with a body %q", what, body)
		}
	default:
		var e wire.ErrorResponse
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("%s: HTTP %d with a body that is not an ErrorResponse: %q", what, code, body)
		}
		if !fuzzErrorCodes[e.ErrorCode] || e.Status != fuzzStatusName[code] || strings.TrimSpace(e.Message) == "" {
			t.Fatalf("%s: HTTP %d with ErrorResponse %+v", what, code, e)
		}
	}
}

func addBodies(f *testing.F, add func(body []byte), valid ...any) {
	for _, v := range valid {
		add(fuzzJSON(v))
	}
	for _, raw := range []string{"", "null", "{}", "[]", "{", `{"requestedBy":`, `"text"`, "0", `{"requestedBy":123}`,
		`{"initialShardCount":"x","requestedBy":"a"}`, `{"initialShardCount":1e30,"requestedBy":"a"}`,
		`{"targetShardCount":-1,"requestedBy":"a","reason":"r"}`, `{"targetShardCount":99999999999,"requestedBy":"a","reason":"r"}`,
		"\xff\xfe", `{"requestedBy":"a","reason":"r","force":"yes"}`, `{"a":{"b":{"c":[[[[[]]]]]}}}`} {
		add([]byte(raw))
	}
}

func FuzzCreate(f *testing.F) {
	for _, seg := range [][2]string{{"orders", "oc"}, {"orders", "new"}, {"fresh", "g"}, {"a{b", "g"}, {"a*", "g"}, {" ", "g"}, {"x", "a/b"}, {"x", "\x00"}} {
		addBodies(f, func(b []byte) { f.Add(seg[0], seg[1], b, false); f.Add(seg[0], seg[1], b, true) },
			map[string]any{"initialShardCount": 2, "requestedBy": "alice"},
			map[string]any{"requestedBy": "alice", "reason": "r"},
			map[string]any{"initialShardCount": 1024, "requestedBy": "a"},
			map[string]any{"initialShardCount": 1025, "requestedBy": "a"},
			map[string]any{"initialShardCount": 0, "requestedBy": "a"})
	}
	f.Add("", "g", fuzzJSON(map[string]any{"initialShardCount": 2, "requestedBy": "alice"}), false) // blank prefix
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, prefix, group string, body []byte, streamLevel bool) {
		fs.ensure(t)
		path := "/coord/v1/streams/" + fuzzSeg(prefix)
		if !streamLevel {
			path += "/groups/" + fuzzSeg(group)
		}
		check(t, "POST "+path, fs.do("POST", path, fuzzAdmin, body), false)
	})
}

func FuzzScale(f *testing.F) {
	for _, seg := range [][2]string{{"orders", "oc"}, {"orders", "nope"}, {"nope", "oc"}, {"a}", "g"}} {
		addBodies(f, func(b []byte) { f.Add(seg[0], seg[1], b, false); f.Add(seg[0], seg[1], b, true) },
			map[string]any{"targetShardCount": 6, "requestedBy": "a", "reason": "r"},
			map[string]any{"targetShardCount": 4, "requestedBy": "a", "reason": "r"},
			map[string]any{"targetShardCount": 0, "requestedBy": "a", "reason": "r"},
			map[string]any{"targetShardCount": 1025, "requestedBy": "a", "reason": "r"},
			map[string]any{"targetShardCount": 8, "requestedBy": "a", "reason": "r", "deprecatedAfter": "2030-01-01T00:00:00Z"})
	}
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, prefix, group string, body []byte, streamLevel bool) {
		fs.ensure(t)
		path := "/coord/v1/streams/" + fuzzSeg(prefix)
		if !streamLevel {
			path += "/groups/" + fuzzSeg(group)
		}
		path += "/scale"
		check(t, "POST "+path, fs.do("POST", path, fuzzAdmin, body), false)
	})
}

// FuzzRollback: the id "$ACTIVE" stands for the fixture's active resharding.
func FuzzRollback(f *testing.F) {
	for _, seg := range [][3]string{{"orders", "oc", "$ACTIVE"}, {"orders", "oc", "reshard-nope"}, {"orders", "nope", "$ACTIVE"}, {"orders", "oc", "noop"}, {"{", "}", "x"}} {
		addBodies(f, func(b []byte) { f.Add(seg[0], seg[1], seg[2], b) },
			map[string]any{"requestedBy": "a", "reason": "r"},
			map[string]any{"requestedBy": "a", "reason": "r", "policy": "drain"},
			map[string]any{"requestedBy": "a", "reason": "r", "policy": "metadata"},
			map[string]any{"requestedBy": "a", "reason": "r", "policy": "bogus"},
			map[string]any{"requestedBy": "a"})
	}
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, prefix, group, id string, body []byte) {
		active := fs.ensure(t)
		id = strings.ReplaceAll(id, "$ACTIVE", active)
		path := "/coord/v1/streams/" + fuzzSeg(prefix) + "/groups/" + fuzzSeg(group) + "/migrations/" + fuzzSeg(id) + "/rollback"
		check(t, "POST "+path, fs.do("POST", path, fuzzAdmin, body), false)
	})
}

func FuzzDelete(f *testing.F) {
	for _, seg := range [][2]string{{"orders", "oc"}, {"orders", "nope"}, {"a*", "b"}} {
		addBodies(f, func(b []byte) { f.Add(seg[0], seg[1], b) },
			map[string]any{"requestedBy": "a", "reason": "r"},
			map[string]any{"requestedBy": "a", "reason": "r", "force": true},
			map[string]any{"requestedBy": "a", "reason": " "},
			map[string]any{"requestedBy": "a"})
	}
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, prefix, group string, body []byte) {
		fs.ensure(t)
		path := "/coord/v1/streams/" + fuzzSeg(prefix) + "/groups/" + fuzzSeg(group)
		check(t, "DELETE "+path, fs.do("DELETE", path, fuzzAdmin, body), false)
	})
}

func FuzzHeartbeat(f *testing.F) {
	hb := func(mut func(m map[string]any)) map[string]any {
		m := map[string]any{"protocolVersion": 1, "requestId": "r-1", "memberId": "m2", "memberName": "m2", "memberEpoch": 0, "metadataVersion": 0,
			"runtimeConsumerCapacity": map[string]any{"runtimeMaxConcurrency": 1, "availableConcurrency": 1},
			"ownedShards":             []any{}, "revokingShards": []any{}, "shardProgress": []any{}}
		if mut != nil {
			mut(m)
		}
		return m
	}
	shard := func(i int) map[string]any { return map[string]any{"shardIndex": i} }
	// orders has stream metadata (its first group wrote it): a first
	// heartbeat of a group that does not exist registers it.
	for _, seg := range [][3]string{{"orders", "oc", "m2"}, {"orders", "oc", "m1"}, {"orders", "nope", "m2"}, {"orders", "a*", "m2"}, {"a{", "b", "m2"}, {"orders", "oc", "a/b"}, {"nostream", "g", "m2"}} {
		addBodies(f, func(b []byte) { f.Add(seg[0], seg[1], seg[2], b) },
			hb(nil),
			hb(func(m map[string]any) { m["memberId"] = "m1"; m["memberEpoch"] = 2; m["metadataVersion"] = 2 }),
			hb(func(m map[string]any) { m["memberEpoch"] = -1; m["ownedShards"] = []any{shard(0)} }),
			hb(func(m map[string]any) { m["memberEpoch"] = -2 }),
			hb(func(m map[string]any) { m["memberEpoch"] = 99; m["metadataVersion"] = 99 }),
			hb(func(m map[string]any) { m["protocolVersion"] = 2 }),
			hb(func(m map[string]any) { m["protocolVersion"] = 0 }),
			hb(func(m map[string]any) { delete(m, "runtimeConsumerCapacity") }),
			hb(func(m map[string]any) { delete(m, "protocolVersion") }),
			hb(func(m map[string]any) { m["runtimeConsumerCapacity"] = map[string]any{"runtimeMaxConcurrency": 2} }),
			hb(func(m map[string]any) { m["ownedShards"] = []any{shard(-1), shard(1 << 30)} }),
			hb(func(m map[string]any) {
				m["memberId"] = "m1"
				m["memberEpoch"] = 2
				m["revokingShards"] = []any{map[string]any{"shard": shard(3), "state": "DRAINING", "inFlight": 1}, map[string]any{"shard": nil, "state": "REVOKED"}}
			}),
			hb(func(m map[string]any) {
				m["shardProgress"] = []any{map[string]any{"shard": shard(0), "streamKey": "orders:0", "pendingCount": -5, "updatedAt": "not a time"}}
			}),
			hb(func(m map[string]any) { m["memberName"] = nil; m["metadataVersion"] = 1 << 62 }))
	}
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, prefix, group, member string, body []byte) {
		fs.ensure(t)
		path := "/coord/v1/streams/" + fuzzSeg(prefix) + "/groups/" + fuzzSeg(group) + "/members/" + fuzzSeg(member) + "/heartbeat"
		rec := fs.do("POST", path, "", body)
		check(t, "POST "+path, rec, false)
		if rec != nil && rec.Code == 200 {
			var hb struct {
				Status              string `json:"status"`
				HeartbeatIntervalMs int64  `json:"heartbeatIntervalMs"`
				Assignment          *struct {
					AssignedShards []map[string]any `json:"assignedShards"`
					PendingShards  []map[string]any `json:"pendingShards"`
				} `json:"assignment"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &hb); err != nil || !fuzzHeartbeatStatuses[hb.Status] || hb.HeartbeatIntervalMs <= 0 ||
				hb.Assignment == nil || hb.Assignment.AssignedShards == nil || hb.Assignment.PendingShards == nil {
				t.Fatalf("heartbeat 200 without a well-formed HeartbeatResponse: %s", rec.Body)
			}
		}
	})
}

// FuzzAdopt: the adopt body and prefix. The fuzz server has no Redis for
// shard streams, so an adopt that passes validation and the state's checks
// answers 503 REDIS_NOT_CONFIGURED; any other 5xx fails.
func FuzzAdopt(f *testing.F) {
	for _, prefix := range []string{"theirs", "orders", "a{b", " ", "x/y"} {
		addBodies(f, func(b []byte) { f.Add(prefix, b) },
			map[string]any{"shardCount": 2, "requestedBy": "alice", "reason": "take over"},
			map[string]any{"shardCount": 0, "requestedBy": "alice"},
			map[string]any{"shardCount": 1025, "requestedBy": "alice"},
			map[string]any{"requestedBy": "alice"},
			map[string]any{"shardCount": 2, "requestedBy": ""})
	}
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, prefix string, body []byte) {
		fs.ensure(t)
		path := "/coord/v1/streams/" + fuzzSeg(prefix) + "/adopt"
		rec := fs.do("POST", path, fuzzAdmin, body)
		if rec != nil && rec.Code == 503 {
			var e wire.ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.ErrorCode != "REDIS_NOT_CONFIGURED" {
				t.Fatalf("POST %s: HTTP 503 %s", path, rec.Body)
			}
			return
		}
		check(t, "POST "+path, rec, false)
	})
}

// FuzzStreamRead: the stream-scoped routing and the stream's view, on any
// prefix: 200 with exactly the shards 0..shardCount-1, or an ErrorResponse.
func FuzzStreamRead(f *testing.F) {
	for _, prefix := range []string{"orders", "nope", "a{b", "a*", " ", "x/y", "\x00", "orders:0"} {
		f.Add(prefix)
	}
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, prefix string) {
		fs.ensure(t)
		path := "/coord/v1/streams/" + fuzzSeg(prefix)
		check(t, "GET "+path, fs.do("GET", path, fuzzAdmin, nil), false)
		rec := fs.do("GET", path+"/producer-routing", fuzzAdmin, nil)
		check(t, "GET "+path+"/producer-routing", rec, false)
		if rec != nil && rec.Code == 200 {
			var rt wire.StreamRoutingResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &rt); err != nil || rt.StreamPrefix != prefix || len(rt.Shards) != rt.ShardCount {
				t.Fatalf("routing of %q: %s", prefix, rec.Body)
			}
			for i, s := range rt.Shards {
				if s.ShardIndex != i {
					t.Fatalf("routing of %q: shard %d at position %d", prefix, s.ShardIndex, i)
				}
			}
		}
	})
}

func FuzzLogin(f *testing.F) {
	for _, auth := range []string{"", fuzzAdmin, "basic YWRtaW46cGFzc3dvcmQ=", "Basic !!!", "Bearer x.y", "Bearer ", "Digest x", "Basic YWRtaW4="} {
		addBodies(f, func(b []byte) { f.Add(b, auth) },
			map[string]any{"username": "admin", "password": "password"},
			map[string]any{"username": "admin", "password": "wrong"},
			map[string]any{"username": "admin\n", "password": "password"},
			map[string]any{"username": "", "password": ""},
			map[string]any{"token": "x"})
	}
	fs := newFuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte, auth string) {
		rec := fs.do("POST", "/coord/v1/auth/login", auth, body)
		check(t, "POST login", rec, true)
		if rec != nil && rec.Code == 200 {
			var l struct {
				AccessToken string   `json:"accessToken"`
				TokenType   string   `json:"tokenType"`
				Roles       []string `json:"roles"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil || l.AccessToken == "" || l.TokenType != "Bearer" || len(l.Roles) == 0 {
				t.Fatalf("login 200 without a token: %s", rec.Body)
			}
			// A token is only handed out for the right password.
			var req struct {
				Username string `json:"username"`
				Password string `json:"password"`
			}
			if json.Unmarshal(body, &req) == nil && req.Username != "" && (req.Username != "admin" || req.Password != "password") {
				t.Fatalf("login succeeded for %q/%q", req.Username, req.Password)
			}
			// And it works.
			session := fs.do("GET", "/coord/v1/monitoring/session", "Bearer "+l.AccessToken, nil)
			if session.Code != 200 {
				t.Fatalf("fresh token refused: HTTP %d", session.Code)
			}
		}
	})
}

// TestEmptyAndDotPathSegments: a blank path parameter (Python's quote("") is "")
// or a dot segment must get the contract's answer (400 "must not be blank", or an
// ErrorResponse 404), not the router's 301 to another, cleaned path: a client that
// follows it re-sends a POST as a GET to a different route.
func TestEmptyAndDotPathSegments(t *testing.T) {
	fs := newFuzzServer(t)
	create := fuzzJSON(map[string]any{"initialShardCount": 2, "requestedBy": "alice"})
	hb := fuzzJSON(map[string]any{"protocolVersion": 1, "requestId": "r", "memberId": "", "memberEpoch": 0, "metadataVersion": 0,
		"runtimeConsumerCapacity": map[string]any{"runtimeMaxConcurrency": 1, "availableConcurrency": 1}})
	for _, c := range []struct {
		method, path string
		body         []byte
	}{
		{"POST", "/coord/v1/streams//groups/g", create},
		{"POST", "/coord/v1/streams/orders/groups/", create},
		{"POST", "/coord/v1/streams//scale", fuzzJSON(map[string]any{"targetShardCount": 2, "requestedBy": "a", "reason": "r"})},
		{"GET", "/coord/v1/streams/orders/groups//producer-routing", nil},
		{"POST", "/coord/v1/streams/orders/groups/oc/members//heartbeat", hb},
		{"POST", "/coord/v1/streams/./groups/g", create},
		{"POST", "/coord/v1/streams/../groups/g", create},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			rec := fs.do(c.method, c.path, fuzzAdmin, c.body)
			if rec.Code >= 300 && rec.Code < 400 {
				t.Fatalf("HTTP %d (Location %q); want the contract's 400 or an ErrorResponse", rec.Code, rec.Header().Get("Location"))
			}
			check(t, c.method+" "+c.path, rec, false)
		})
	}
}
