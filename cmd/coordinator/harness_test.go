package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/internal/redistest"
)

// testCoordinator is a real coordinator (its Main on port 0) against a real Redis.
type testCoordinator struct {
	t     testing.TB
	Main  *Main
	URL   string
	Redis *redistest.Server
}

// startCoordinator runs Main in-process. mutate may change flags before Run.
func startCoordinator(t testing.TB, rs *redistest.Server, mutate func(m *Main)) *testCoordinator {
	t.Helper()
	m := NewMain()
	m.Stderr = io.Discard
	if os.Getenv("RSC_TEST_LOGS") != "" {
		m.Stderr = os.Stderr
	}
	if err := m.ParseFlags([]string{"--listen", "127.0.0.1:0", "--redis", rs.URL(), "--log-stream", fmt.Sprintf("coordinator:events:%d", time.Now().UnixNano())}); err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(m)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	tc := &testCoordinator{t: t, Main: m, URL: m.URL(), Redis: rs}
	tc.waitReady()
	return tc
}

func (tc *testCoordinator) waitReady() {
	tc.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(tc.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	tc.t.Fatal("coordinator not ready in 20s")
}

// apiResponse is a decoded answer.
type apiResponse struct {
	Status int
	Body   []byte
	JSON   map[string]any
}

// Do sends a request as admin (Basic) and decodes a JSON object answer.
func (tc *testCoordinator) Do(method, path string, body any) apiResponse {
	tc.t.Helper()
	return tc.DoAs("admin", "password", method, path, body)
}

// DoAs sends a request with Basic credentials (user "" sends none).
func (tc *testCoordinator) DoAs(user, pass, method, path string, body any) apiResponse {
	tc.t.Helper()
	r, err := tc.TryDoAs(user, pass, method, path, body)
	if err != nil {
		tc.t.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

// TryDoAs is DoAs that returns transport errors instead of failing the test
// (safe to call from background goroutines).
func (tc *testCoordinator) TryDoAs(user, pass, method, path string, body any) (apiResponse, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return apiResponse{}, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, tc.URL+path, rd)
	if err != nil {
		return apiResponse{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return apiResponse{}, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	out := apiResponse{Status: resp.StatusCode, Body: data}
	_ = json.Unmarshal(data, &out.JSON)
	return out, nil
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// MustStatus fails unless the answer has the wanted status.
func (r apiResponse) MustStatus(tb testing.TB, want int) apiResponse {
	tb.Helper()
	if r.Status != want {
		tb.Fatalf("status %d, want %d; body %s", r.Status, want, r.Body)
	}
	return r
}

// heartbeatBody builds a heartbeat like the reference clients send.
func heartbeatBody(member string, epoch, mv int64, owned []int, revoking []map[string]any) map[string]any {
	shards := []map[string]any{}
	for _, s := range owned {
		shards = append(shards, map[string]any{"shardIndex": s})
	}
	if revoking == nil {
		revoking = []map[string]any{}
	}
	return map[string]any{
		"protocolVersion": 1, "requestId": fmt.Sprintf("req-%d", time.Now().UnixNano()), "memberId": member, "memberName": member,
		"memberEpoch": epoch, "metadataVersion": mv,
		"runtimeConsumerCapacity": map[string]any{"runtimeMaxConcurrency": 1, "availableConcurrency": 1},
		"ownedShards":             shards, "revokingShards": revoking, "shardProgress": []any{},
	}
}

// hbResult is a decoded heartbeat answer.
type hbResult struct {
	Status          string
	MemberEpoch     int64
	GroupEpoch      int64
	MetadataVersion int64
	Assigned        []int
	Pending         []int
}

// Heartbeat posts a heartbeat and decodes the answer (HTTP 200 required).
func (tc *testCoordinator) Heartbeat(prefix, group, member string, epoch, mv int64, owned []int) hbResult {
	tc.t.Helper()
	r := tc.Do("POST", fmt.Sprintf("/coord/v1/streams/%s/groups/%s/members/%s/heartbeat", prefix, group, member), heartbeatBody(member, epoch, mv, owned, nil)).MustStatus(tc.t, 200)
	return decodeHeartbeat(tc.t, r.Body)
}

func decodeHeartbeat(tb testing.TB, body []byte) hbResult {
	tb.Helper()
	var raw struct {
		Status          string `json:"status"`
		MemberEpoch     int64  `json:"memberEpoch"`
		GroupEpoch      int64  `json:"groupEpoch"`
		MetadataVersion int64  `json:"metadataVersion"`
		Assignment      struct {
			Assigned []struct{ ShardIndex int } `json:"assignedShards"`
			Pending  []struct{ ShardIndex int } `json:"pendingShards"`
		} `json:"assignment"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		tb.Fatalf("decode heartbeat %s: %v", body, err)
	}
	res := hbResult{Status: raw.Status, MemberEpoch: raw.MemberEpoch, GroupEpoch: raw.GroupEpoch, MetadataVersion: raw.MetadataVersion, Assigned: []int{}, Pending: []int{}}
	for _, s := range raw.Assignment.Assigned {
		res.Assigned = append(res.Assigned, s.ShardIndex)
	}
	for _, s := range raw.Assignment.Pending {
		res.Pending = append(res.Pending, s.ShardIndex)
	}
	return res
}

// eventually retries cond until it holds or the timeout passes.
func eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Fatalf("timed out after %s waiting for %s", timeout, what)
}

// consistently checks cond every 50ms for d and fails at the first observation
// where it does not hold. It is the one place a test lets time pass on
// purpose: that something does not happen is shown only over a window, so a
// caller first waits (eventually) for what must have happened, then watches.
func consistently(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		if !cond() {
			tb.Fatalf("%s stopped holding within the %s window", what, d)
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// parallel marks a test to run alongside the package's other parallel tests,
// once every serial test has finished (go test -parallel bounds how many run
// at once). It is for tests that start their own Redis and coordinator, set
// no environment variable, signal no process, and hold no wall-clock bound
// that CPU contention could break (deadlines of several seconds and member
// leases of two seconds or more are fine). Chaos, HA takeovers, the Redis
// stall, Docker Compose, the Redis Cluster failover and the hostile member's
// rebalance windows stay serial. RSC_TEST_SERIAL=1 runs everything serially
// (to tell a flaky interaction from a flaky test).
func parallel(t *testing.T) {
	switch strings.ToLower(strings.TrimSpace(os.Getenv("RSC_TEST_SERIAL"))) {
	case "", "0", "false", "no":
		t.Parallel()
	}
}
