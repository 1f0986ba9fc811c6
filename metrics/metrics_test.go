package metrics_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/metrics"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// fakeOffsets answers every shard with pending = index and lag = 10*index;
// shard 3 has an unknown lag. err, when set, fails every read.
type fakeOffsets struct {
	mu    sync.Mutex
	err   error
	calls int
}

func (f *fakeOffsets) Offsets(ctx context.Context, prefix, group string, shards []int) ([]metrics.ShardOffset, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil {
		return nil, f.err
	}
	out := make([]metrics.ShardOffset, len(shards))
	for i, s := range shards {
		out[i] = metrics.ShardOffset{ShardIndex: s, Pending: int64(s)}
		if s != 3 {
			lag := int64(10 * s)
			out[i].Lag = &lag
		}
	}
	return out, nil
}

func (f *fakeOffsets) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// fixture is a coordinator on an in-memory log, served by httpapi with the
// metrics hooked in as cmd/coordinator hooks them.
type fixture struct {
	t       *testing.T
	coord   *coordinator.Coordinator
	metrics *metrics.Metrics
	offsets *fakeOffsets
	url     string
}

func mustFixture(t *testing.T) *fixture {
	t.Helper()
	met := metrics.New(metrics.Config{Interval: -1, Logger: zerolog.Nop(), CacheFor: -1})
	coord := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop(), AfterAppend: met.AfterAppend}, events.NewMemLog(), nil, nil, nil)
	offs := &fakeOffsets{}
	met.Watch(coord, offs)
	if err := coord.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	coord.Run()
	t.Cleanup(coord.Close)
	parts := httpapi.PartsOf(coord)
	parts.Commands = countedHeartbeats{Commands: parts.Commands, met: met}
	srv := httpapi.NewServer(httpapi.Config{Logger: zerolog.Nop(), Observe: met.Observe, Mount: met.Mount}, parts, nil)
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return &fixture{t: t, coord: coord, metrics: met, offsets: offs, url: ts.URL}
}

// countedHeartbeats counts heartbeat answers as cmd/coordinator's wrapper
// of the same name does.
type countedHeartbeats struct {
	httpapi.Commands
	met *metrics.Metrics
}

func (c countedHeartbeats) Heartbeat(ctx context.Context, k projection.GroupKey, memberID, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatResponse, error) {
	resp, err := c.Commands.Heartbeat(ctx, k, memberID, principal, req)
	c.met.HeartbeatAnswered(resp, err)
	return resp, err
}

// do sends a request (Basic admin:password when auth is true) and returns status and body.
func (f *fixture) do(method, path string, body any, auth bool) (int, []byte) {
	f.t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			f.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, f.url+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if auth {
		req.SetBasicAuth("admin", "password")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func (f *fixture) mustCreateGroup(prefix, group string, shards int) {
	f.t.Helper()
	code, body := f.do("POST", "/coord/v1/streams/"+prefix+"/groups/"+group, map[string]any{"initialShardCount": shards, "requestedBy": "alice"}, true)
	if code != http.StatusCreated {
		f.t.Fatalf("create group: %d %s", code, body)
	}
}

func heartbeatBody(member string, epoch int64) map[string]any {
	return map[string]any{
		"protocolVersion": 1, "requestId": "req-" + member, "memberId": member, "memberName": member,
		"memberEpoch": epoch, "metadataVersion": 0,
		"runtimeConsumerCapacity": map[string]any{"runtimeMaxConcurrency": 1, "availableConcurrency": 1},
		"ownedShards":             []any{}, "revokingShards": []any{}, "shardProgress": []any{},
	}
}

func (f *fixture) heartbeat(prefix, group, member string, epoch int64) (int, string) {
	f.t.Helper()
	code, body := f.do("POST", fmt.Sprintf("/coord/v1/streams/%s/groups/%s/members/%s/heartbeat", prefix, group, member), heartbeatBody(member, epoch), false)
	var v struct {
		Status string `json:"status"`
	}
	_ = json.Unmarshal(body, &v)
	return code, v.Status
}

// value gathers the registry and returns the value of the one series of name
// with exactly these labels; found is false when there is none.
func value(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (v float64, found bool) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !sameLabels(m.GetLabel(), labels) {
				continue
			}
			switch {
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func sameLabels(got []*dto.LabelPair, want map[string]string) bool {
	if len(got) != len(want) {
		return false
	}
	for _, lp := range got {
		if w, ok := want[lp.GetName()]; !ok || w != lp.GetValue() {
			return false
		}
	}
	return true
}

func mustValue(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	got, found := value(t, reg, name, labels)
	if !found {
		t.Errorf("%s%v: no such series", name, labels)
		return
	}
	if got != want {
		t.Errorf("%s%v = %v, want %v", name, labels, got, want)
	}
}

func mustAbsent(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) {
	t.Helper()
	if got, found := value(t, reg, name, labels); found {
		t.Errorf("%s%v = %v, want no series", name, labels, got)
	}
}

func TestMetricsAfterCreateAndHeartbeat(t *testing.T) {
	f := mustFixture(t)
	reg := f.metrics.Registry()
	f.mustCreateGroup("orders", "oc", 4)
	if code, status := f.heartbeat("orders", "oc", "A", 0); code != 200 || status != wire.StatusOK {
		t.Fatalf("heartbeat: %d %s", code, status)
	}
	if code, status := f.heartbeat("orders", "oc", "ghost", 7); code != 200 || status == wire.StatusOK {
		t.Fatalf("heartbeat of an unknown member at epoch 7: %d %s, want a non-OK protocol status", code, status)
	}
	// A body the coordinator refuses (no memberEpoch): counted by its errorCode.
	bad := heartbeatBody("B", 0)
	delete(bad, "memberEpoch")
	if code, body := f.do("POST", "/coord/v1/streams/orders/groups/oc/members/B/heartbeat", bad, false); code != http.StatusBadRequest {
		t.Fatalf("heartbeat without memberEpoch: %d %s, want 400", code, body)
	}
	f.metrics.Refresh(context.Background())

	g := map[string]string{"stream_prefix": "orders", "consumer_group": "oc"}
	group, _ := f.coord.State().Group(projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "oc"})
	cases := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"rsc_ready", nil, 1},
		{"rsc_leader", nil, 1},
		{"rsc_log_append_conflicts_total", nil, 0},
		{"rsc_events_appended_total", map[string]string{"type": "group.created"}, 1},
		{"rsc_events_appended_total", map[string]string{"type": "member.joined"}, 1},
		{"rsc_heartbeats_total", map[string]string{"status": "OK"}, 1},
		{"rsc_heartbeats_total", map[string]string{"status": "INVALID_REQUEST"}, 1},
		{"rsc_http_requests_total", map[string]string{"route": "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}", "method": "POST", "status": "201"}, 1},
		{"rsc_http_requests_total", map[string]string{"route": "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}/members/{memberId}/heartbeat", "method": "POST", "status": "200"}, 2},
		{"rsc_http_requests_total", map[string]string{"route": "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}/members/{memberId}/heartbeat", "method": "POST", "status": "400"}, 1},
		{"rsc_http_request_duration_seconds", map[string]string{"route": "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}/members/{memberId}/heartbeat", "method": "POST"}, 3},
		{"rsc_group_shard_count", g, 4},
		{"rsc_group_live_members", g, 1},
		{"rsc_group_epoch", g, float64(group.GroupEpoch)},
		{"rsc_group_assignment_epoch", g, float64(group.AssignmentEpoch)},
		{"rsc_group_metadata_version", g, float64(group.MetadataVersion)},
		{"rsc_group_revoking_shards", g, 0},
		{"rsc_group_active_resharding", g, 0},
		{"rsc_group_active_resharding_age_seconds", g, 0},
		{"rsc_group_metadata_correction_open", g, 0},
		{"rsc_log_length_entries", nil, float64(mustLen(t, f.coord))},
		{"rsc_projection_apply_lag_entries", nil, 0},
		{"rsc_shard_pending_entries", shard(g, 2), 2},
		{"rsc_shard_lag_entries", shard(g, 2), 20},
		{"rsc_shard_lag_entries", shard(g, 0), 0},
	}
	for _, c := range cases {
		mustValue(t, reg, c.name, c.labels, c.want)
	}
	if group.GroupEpoch == 0 {
		t.Errorf("group epoch is 0 after a member joined")
	}
	// Redis could not tell the lag of shard 3: the series is absent, not 0.
	mustAbsent(t, reg, "rsc_shard_lag_entries", shard(g, 3))
	mustValue(t, reg, "rsc_shard_pending_entries", shard(g, 3), 3)
	// The unknown member's answer was counted under its protocol status.
	total := 0.0
	for _, s := range []string{wire.StatusUnknownMember, wire.StatusFenced, wire.StatusRetry} {
		v, _ := value(t, reg, "rsc_heartbeats_total", map[string]string{"status": s})
		total += v
	}
	if total != 1 {
		t.Errorf("non-OK heartbeats counted %v times, want 1", total)
	}
	lastMs, found := value(t, reg, "rsc_log_last_id_ms", nil)
	if !found || lastMs <= 0 {
		t.Errorf("rsc_log_last_id_ms = %v (found %v), want the ms of the last id", lastMs, found)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		// Two names were chosen against promlint's advice, on purpose: a shard
		// count is not a histogram's _count, and a stream id's ms part is not a
		// duration in ms.
		if p.Metric == "rsc_group_shard_count" || p.Metric == "rsc_log_last_id_ms" {
			continue
		}
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestMetricsEndpointIsPublicExposition(t *testing.T) {
	f := mustFixture(t)
	f.mustCreateGroup("orders", "oc", 2)
	code, body := f.do("GET", "/metrics", nil, false)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics without credentials: %d %s", code, body)
	}
	for _, want := range []string{
		"# TYPE rsc_group_shard_count gauge",
		`rsc_group_shard_count{consumer_group="oc",stream_prefix="orders"} 2`,
		`rsc_events_appended_total{type="group.created"} 1`,
		"rsc_ready 1",
		"go_goroutines",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// The scrape itself is observed like any other route.
	mustValue(t, f.metrics.Registry(), "rsc_http_requests_total", map[string]string{"route": "/metrics", "method": "GET", "status": "200"}, 1)
}

func TestMetricsExpositionOfGroupGauges(t *testing.T) {
	f := mustFixture(t)
	f.mustCreateGroup("pay", "billing", 3)
	want := `
# HELP rsc_group_shard_count Shards producers route to.
# TYPE rsc_group_shard_count gauge
rsc_group_shard_count{consumer_group="billing",stream_prefix="pay"} 3
# HELP rsc_group_live_members Members taking part in assignment (ACTIVE or STARTING).
# TYPE rsc_group_live_members gauge
rsc_group_live_members{consumer_group="billing",stream_prefix="pay"} 0
# HELP rsc_group_active_resharding 1 while a resharding of the group is in progress, else 0.
# TYPE rsc_group_active_resharding gauge
rsc_group_active_resharding{consumer_group="billing",stream_prefix="pay"} 0
`
	if err := testutil.GatherAndCompare(f.metrics.Registry(), strings.NewReader(want),
		"rsc_group_shard_count", "rsc_group_live_members", "rsc_group_active_resharding"); err != nil {
		t.Error(err)
	}
}

func TestMetricsRefreshDropsValuesOnFailure(t *testing.T) {
	f := mustFixture(t)
	reg := f.metrics.Registry()
	f.mustCreateGroup("orders", "oc", 2)
	g := map[string]string{"stream_prefix": "orders", "consumer_group": "oc"}

	// Before any refresh the Redis-derived gauges are absent, not zero.
	mustAbsent(t, reg, "rsc_log_length_entries", nil)
	mustAbsent(t, reg, "rsc_shard_pending_entries", shard(g, 1))

	f.metrics.Refresh(context.Background())
	mustValue(t, reg, "rsc_shard_pending_entries", shard(g, 1), 1)

	f.offsets.fail(errors.New("redis down"))
	f.metrics.Refresh(context.Background())
	mustAbsent(t, reg, "rsc_shard_pending_entries", shard(g, 1))
	mustValue(t, reg, "rsc_metrics_refresh_errors_total", map[string]string{"source": "shards"}, 1)
	// The log is still readable: its gauges stay.
	mustValue(t, reg, "rsc_log_length_entries", nil, float64(mustLen(t, f.coord)))

	f.offsets.fail(nil)
	f.metrics.Refresh(context.Background())
	mustValue(t, reg, "rsc_shard_pending_entries", shard(g, 1), 1)
}

func TestMetricsRunRefreshesPeriodically(t *testing.T) {
	met := metrics.New(metrics.Config{Interval: 10 * time.Millisecond, Logger: zerolog.Nop()})
	coord := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop(), AfterAppend: met.AfterAppend}, events.NewMemLog(), nil, nil, nil)
	offs := &fakeOffsets{}
	met.Watch(coord, offs)
	if err := coord.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	coord.Run()
	t.Cleanup(coord.Close)
	two := 2
	if _, err := coord.CreateGroup(context.Background(), events.Meta{Actor: "test"}, commands.CreateGroupInput{StreamPrefix: "s", ConsumerGroup: "g", InitialShardCount: &two, RequestedBy: "test"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); met.Run(ctx) }()
	g := map[string]string{"stream_prefix": "s", "consumer_group": "g"}
	deadline := time.Now().Add(5 * time.Second)
	for {
		offs.mu.Lock()
		calls := offs.calls
		offs.mu.Unlock()
		if _, found := value(t, met.Registry(), "rsc_shard_pending_entries", shard(g, 1)); found && calls >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("refresher did not read offsets twice in 5s (calls %d)", calls)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
}

func TestMetricsHTTPMethodLabelIsBounded(t *testing.T) {
	met := metrics.New(metrics.Config{Interval: -1})
	met.Observe("unmatched", "BREW", 404, time.Millisecond)
	mustValue(t, met.Registry(), "rsc_http_requests_total", map[string]string{"route": "unmatched", "method": "OTHER", "status": "404"}, 1)
}

func shard(g map[string]string, i int) map[string]string {
	out := map[string]string{"shard": fmt.Sprint(i)}
	for k, v := range g {
		out[k] = v
	}
	return out
}

func mustLen(t *testing.T, c *coordinator.Coordinator) int64 {
	t.Helper()
	n, err := c.Log().Len(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMetricsScrapeSurvivesANameThatIsNotUTF8: a log written before names
// had to be valid UTF-8 may hold a group named "\xff"; Prometheus refuses
// such a label value, and the whole scrape answered 500 with a stack trace
// for as long as the group existed. Such a name is shown quoted.
func TestMetricsScrapeSurvivesANameThatIsNotUTF8(t *testing.T) {
	log := events.NewMemLog()
	rec, err := events.Encode(events.Meta{StreamPrefix: "orders", ConsumerGroup: "\xff", Time: time.Unix(1, 0)}, &events.GroupCreated{ShardCount: 2, RequestedBy: "old-build"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := log.Append(context.Background(), events.ZeroID, [][]byte{rec}); err != nil {
		t.Fatal(err)
	}
	met := metrics.New(metrics.Config{Interval: -1, Logger: zerolog.Nop()})
	coord := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop()}, log, nil, nil, nil)
	met.Watch(coord, &fakeOffsets{})
	if err := coord.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(coord.Close)
	mustValue(t, met.Registry(), "rsc_group_shard_count", map[string]string{"stream_prefix": "orders", "consumer_group": `"\xff"`}, 2)
}
