package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Helpers for api_e2e_test.go and security_e2e_test.go. Every name starts with
// "api" so that it cannot collide with helpers other files add to package main.

// apiResp is an answer with its headers; JSON is nil unless the body is a JSON object.
type apiResp struct {
	Status int
	Header http.Header
	Body   []byte
	JSON   map[string]any
}

// apiAuth is the Authorization header value of a request ("" sends none).
type apiAuth string

// apiBasic is a Basic Authorization value.
func apiBasic(user, pass string) apiAuth {
	return apiAuth("Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
}

// apiAdmin is the harness's default admin.
var apiAdmin = apiBasic("admin", "password")

// apiNoAuth sends no Authorization header.
const apiNoAuth apiAuth = ""

// apiMember authenticates heartbeats: they need the MEMBER role by default,
// which the harness admin holds.
var apiMember = apiAdmin

// apiSend sends a request with the given Authorization value (and extra headers)
// and decodes a JSON object answer when there is one.
func apiSend(tb testing.TB, tc *testCoordinator, auth apiAuth, method, path string, body any, hdr map[string]string) apiResp {
	tb.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			tb.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, tc.URL+path, rd)
	if err != nil {
		tb.Fatalf("build %s %s: %v", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", string(auth))
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	out := apiResp{Status: resp.StatusCode, Header: resp.Header, Body: data}
	_ = json.Unmarshal(data, &out.JSON)
	return out
}

// apiDo sends a request as the harness admin.
func apiDo(tb testing.TB, tc *testCoordinator, method, path string, body any) apiResp {
	tb.Helper()
	return apiSend(tb, tc, apiAdmin, method, path, body, nil)
}

// apiWant fails unless the answer has the wanted status.
func (r apiResp) apiWant(tb testing.TB, status int) apiResp {
	tb.Helper()
	if r.Status != status {
		tb.Fatalf("HTTP %d, want %d; body %s", r.Status, status, r.Body)
	}
	return r
}

// apiWantError fails unless the answer is the contract's ErrorResponse with this
// status and errorCode and a non-empty message.
func (r apiResp) apiWantError(tb testing.TB, status int, errorCode string) apiResp {
	tb.Helper()
	r.apiWant(tb, status)
	if r.JSON == nil {
		tb.Fatalf("HTTP %d: body is not a JSON object: %q", r.Status, r.Body)
	}
	if got := r.JSON["errorCode"]; got != errorCode {
		tb.Fatalf("errorCode %v, want %s; body %s", got, errorCode, r.Body)
	}
	if want := apiStatusName[status]; want != "" && r.JSON["status"] != want {
		tb.Fatalf("status %v, want %s; body %s", r.JSON["status"], want, r.Body)
	}
	if msg, _ := r.JSON["message"].(string); strings.TrimSpace(msg) == "" {
		tb.Fatalf("error without a message: %s", r.Body)
	}
	return r
}

// apiStatusName is the contract's HTTP status enum names (§1.4).
var apiStatusName = map[int]string{
	400: "BAD_REQUEST", 404: "NOT_FOUND", 409: "CONFLICT", 422: "UNPROCESSABLE_ENTITY",
	429: "TOO_MANY_REQUESTS", 503: "SERVICE_UNAVAILABLE",
}

// apiMsg is the error message of an answer.
func (r apiResp) apiMsg() string {
	s, _ := r.JSON["message"].(string)
	return s
}

// apiEsc percent-encodes a path segment the way the Python client does
// (quote(value, safe="")): everything but unreserved characters.
func apiEsc(s string) string {
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

// apiGroupPath is /coord/v1/streams/{p}/groups/{g} plus extra segments (raw).
func apiGroupPath(prefix, group string, rest ...string) string {
	p := "/coord/v1/streams/" + apiEsc(prefix) + "/groups/" + apiEsc(group)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// apiMonPath is /coord/v1/monitoring/streams/{p}/groups/{g} plus extra segments.
func apiMonPath(prefix, group string, rest ...string) string {
	p := "/coord/v1/monitoring/streams/" + apiEsc(prefix) + "/groups/" + apiEsc(group)
	for _, r := range rest {
		p += "/" + r
	}
	return p
}

// apiHBPath is the heartbeat path of a member.
func apiHBPath(prefix, group, member string) string {
	return apiGroupPath(prefix, group, "members", apiEsc(member), "heartbeat")
}

// apiCreate creates a group through the compat path and requires 201.
func apiCreate(tb testing.TB, tc *testCoordinator, prefix, group string, shards int) apiResp {
	tb.Helper()
	return apiDo(tb, tc, "POST", apiGroupPath(prefix, group), map[string]any{"initialShardCount": shards, "requestedBy": "tester", "reason": "test"}).apiWant(tb, 201)
}

// apiScale asks a group-level scale.
func apiScale(tb testing.TB, tc *testCoordinator, prefix, group string, target any) apiResp {
	tb.Helper()
	return apiDo(tb, tc, "POST", apiGroupPath(prefix, group, "scale"), map[string]any{"targetShardCount": target, "requestedBy": "tester", "reason": "test"})
}

// apiRollback asks a rollback with an optional policy.
func apiRollback(tb testing.TB, tc *testCoordinator, prefix, group, id, policy string) apiResp {
	tb.Helper()
	body := map[string]any{"requestedBy": "tester", "reason": "test"}
	if policy != "" {
		body["policy"] = policy
	}
	return apiDo(tb, tc, "POST", apiGroupPath(prefix, group, "migrations", apiEsc(id), "rollback"), body)
}

// apiGroup reads a group (200 required).
func apiGroup(tb testing.TB, tc *testCoordinator, prefix, group string) map[string]any {
	tb.Helper()
	return apiDo(tb, tc, "GET", apiGroupPath(prefix, group), nil).apiWant(tb, 200).JSON
}

// apiRouting reads a group's producer routing (200 required).
func apiRouting(tb testing.TB, tc *testCoordinator, prefix, group string) map[string]any {
	tb.Helper()
	return apiDo(tb, tc, "GET", apiGroupPath(prefix, group, "producer-routing"), nil).apiWant(tb, 200).JSON
}

// apiHBBody is a heartbeat body with full control over the fields.
type apiHBBody struct {
	Member    string
	Epoch     int64
	MV        int64
	Owned     []int
	Revoking  []map[string]any
	Progress  []map[string]any
	RequestID string
}

func (b apiHBBody) toMap() map[string]any {
	m := heartbeatBody(b.Member, b.Epoch, b.MV, b.Owned, b.Revoking)
	if b.Progress != nil {
		m["shardProgress"] = b.Progress
	}
	if b.RequestID != "" {
		m["requestId"] = b.RequestID
	}
	return m
}

// apiHB is a decoded heartbeat answer with the raw JSON.
type apiHB struct {
	hbResult
	AssignmentEpoch int64
	JSON            map[string]any
	Body            []byte
}

// apiHeartbeat posts a heartbeat body (any JSON value) for member path id and
// requires HTTP 200.
func apiHeartbeat(tb testing.TB, tc *testCoordinator, auth apiAuth, prefix, group, pathMember string, body any) apiHB {
	tb.Helper()
	r := apiSend(tb, tc, auth, "POST", apiHBPath(prefix, group, pathMember), body, nil).apiWant(tb, 200)
	out := apiHB{hbResult: decodeHeartbeat(tb, r.Body), JSON: r.JSON, Body: r.Body}
	if v, ok := r.JSON["assignmentEpoch"].(float64); ok {
		out.AssignmentEpoch = int64(v)
	}
	return out
}

// apiBeat is a plain heartbeat of member in its own path.
func apiBeat(tb testing.TB, tc *testCoordinator, prefix, group string, b apiHBBody) apiHB {
	tb.Helper()
	return apiHeartbeat(tb, tc, apiMember, prefix, group, b.Member, b.toMap())
}

// apiJoinSteady joins a single member and makes it report its assignment, so
// it owns every shard; it returns the member's epoch and metadata version.
func apiJoinSteady(tb testing.TB, tc *testCoordinator, prefix, group, member string) (epoch, mv int64, owned []int) {
	tb.Helper()
	j := apiBeat(tb, tc, prefix, group, apiHBBody{Member: member})
	if j.Status != "OK" {
		tb.Fatalf("join %s: %s", member, j.Body)
	}
	s := apiBeat(tb, tc, prefix, group, apiHBBody{Member: member, Epoch: j.MemberEpoch, MV: j.MetadataVersion, Owned: j.Assigned})
	if s.Status != "OK" {
		tb.Fatalf("steady %s: %s", member, s.Body)
	}
	return s.MemberEpoch, s.MetadataVersion, s.Assigned
}

// apiShards turns wire ShardId objects into indexes.
func apiShards(tb testing.TB, v any) []int {
	tb.Helper()
	arr, ok := v.([]any)
	if !ok {
		tb.Fatalf("not a shard array: %#v", v)
	}
	out := []int{}
	for _, e := range arr {
		obj, ok := e.(map[string]any)
		if !ok {
			tb.Fatalf("shard is not an object: %#v", e)
		}
		out = append(out, int(obj["shardIndex"].(float64)))
	}
	return out
}

// apiInt reads a JSON number field.
func apiInt(tb testing.TB, m map[string]any, key string) int64 {
	tb.Helper()
	v, ok := m[key].(float64)
	if !ok {
		tb.Fatalf("field %q is not a number: %#v (in %v)", key, m[key], m)
	}
	return int64(v)
}

// apiObj reads a JSON object field.
func apiObj(tb testing.TB, m map[string]any, key string) map[string]any {
	tb.Helper()
	v, ok := m[key].(map[string]any)
	if !ok {
		tb.Fatalf("field %q is not an object: %#v", key, m[key])
	}
	return v
}

// apiArr reads a JSON array field.
func apiArr(tb testing.TB, m map[string]any, key string) []any {
	tb.Helper()
	v, ok := m[key].([]any)
	if !ok {
		tb.Fatalf("field %q is not an array: %#v", key, m[key])
	}
	return v
}

// apiHasKeys fails unless every key is present (null counts as present).
func apiHasKeys(tb testing.TB, what string, m map[string]any, keys ...string) {
	tb.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			tb.Errorf("%s: missing field %q in %v", what, k, m)
		}
	}
}

// apiJSONEqual fails unless got (a body) and want (JSON text) are the same JSON value.
func apiJSONEqual(tb testing.TB, got []byte, want string) {
	tb.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		tb.Fatalf("body is not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		tb.Fatalf("want is not JSON: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		tb.Fatalf("JSON mismatch\n got: %s\nwant: %s", got, want)
	}
}

// apiRedis is a client of the test Redis.
func apiRedis(tb testing.TB, tc *testCoordinator) *redis.Client {
	tb.Helper()
	return tc.Redis.Client(tb)
}

// apiLogLen is XLEN of the coordinator's event log stream.
func apiLogLen(tb testing.TB, tc *testCoordinator, rdb *redis.Client) int64 {
	tb.Helper()
	n, err := rdb.XLen(context.Background(), tc.Main.LogStream).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// apiEvent is one audit event as the API renders it.
type apiEvent struct {
	ID            string         `json:"id"`
	Type          string         `json:"type"`
	Actor         string         `json:"actor"`
	StreamPrefix  string         `json:"streamPrefix"`
	ConsumerGroup string         `json:"consumerGroup"`
	Payload       map[string]any `json:"payload"`
}

// apiAllEvents pages through GET path (an events endpoint) and returns every event.
func apiAllEvents(tb testing.TB, tc *testCoordinator, path string) []apiEvent {
	tb.Helper()
	var out []apiEvent
	after := ""
	for i := 0; i < 10000; i++ {
		q := path + "?limit=1000"
		if after != "" {
			q += "&after=" + after
		}
		r := apiDo(tb, tc, "GET", q, nil).apiWant(tb, 200)
		var page struct {
			Events    []apiEvent `json:"events"`
			NextAfter *string    `json:"nextAfter"`
		}
		if err := json.Unmarshal(r.Body, &page); err != nil {
			tb.Fatalf("decode events page: %v: %s", err, r.Body)
		}
		out = append(out, page.Events...)
		if page.NextAfter == nil {
			return out
		}
		after = *page.NextAfter
	}
	tb.Fatal("events paging does not end")
	return nil
}

// apiPayloadField reads a payload field whatever the case of its name.
func apiPayloadField(p map[string]any, name string) (any, bool) {
	for k, v := range p {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return nil, false
}

// apiKeysOf lists a JSON object's field names, sorted.
func apiKeysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// apiKeys lists the Redis keys, without the coordinator's own (log, snapshots,
// archive: "<log>..." and "{<log>:snapshot}:...").
func apiKeys(tb testing.TB, tc *testCoordinator, rdb *redis.Client) []string {
	tb.Helper()
	keys, err := rdb.Keys(context.Background(), "*").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, k := range keys {
		if strings.HasPrefix(k, tc.Main.LogStream) || strings.HasPrefix(k, "{"+tc.Main.LogStream) {
			continue
		}
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// apiSorted returns a sorted copy.
func apiSorted(s []int) []int {
	out := append([]int{}, s...)
	sort.Ints(out)
	return out
}

// apiSyncBuffer is a goroutine-safe log sink.
type apiSyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *apiSyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *apiSyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// apiAvoidMinuteEdge waits when the wall clock is about to start a new minute,
// so a test of the fixed one-minute rate-limit window does not straddle two windows.
func apiAvoidMinuteEdge() {
	now := time.Now()
	if s := now.Second(); s >= 50 {
		time.Sleep(now.Truncate(time.Minute).Add(time.Minute + 200*time.Millisecond).Sub(now))
	}
}

// apiEventually retries cond until it holds; unlike eventually it reports the last
// observation on timeout.
func apiEventually(tb testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, obs := cond()
		if ok {
			return
		}
		last = obs
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("timed out after %s waiting for %s; last: %s", timeout, what, last)
}
