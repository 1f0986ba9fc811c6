package member_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
)

const (
	prefix = "orders"
	group  = "billing"
)

// reply decides the answer to one heartbeat; status 0 means 200.
type reply func(req client.HeartbeatRequest) (client.HeartbeatResponse, int)

// fakeCoordinator answers heartbeats with a reply the test swaps, and
// records every request.
type fakeCoordinator struct {
	srv *httptest.Server

	mu    sync.Mutex
	reqs  []client.HeartbeatRequest
	reply reply
}

func newFakeCoordinator(t *testing.T, r reply) *fakeCoordinator {
	t.Helper()
	f := &fakeCoordinator{reply: r}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		if !strings.HasSuffix(hr.URL.Path, "/heartbeat") || !strings.HasPrefix(hr.URL.Path, client.GroupPath(prefix, group)+"/members/") {
			http.NotFound(w, hr)
			return
		}
		var req client.HeartbeatRequest
		if err := json.NewDecoder(hr.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, req)
		rep := f.reply
		f.mu.Unlock()
		resp, status := rep(req)
		if status != 0 && status != http.StatusOK {
			http.Error(w, `{"status":"SERVICE_UNAVAILABLE","errorCode":"COORDINATOR_TERMINATING","message":"down"}`, status)
			return
		}
		resp.ResponseTo, resp.MemberID = req.RequestID, req.MemberID
		if resp.HeartbeatIntervalMs == 0 {
			resp.HeartbeatIntervalMs = 50
		}
		if resp.Assignment.AssignedShards == nil {
			resp.Assignment.AssignedShards = []client.Shard{}
		}
		if resp.Assignment.PendingShards == nil {
			resp.Assignment.PendingShards = []client.Shard{}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeCoordinator) set(r reply) {
	f.mu.Lock()
	f.reply = r
	f.mu.Unlock()
}

// requests returns the heartbeats received so far (of member id, or all).
func (f *fakeCoordinator) requests(id string) []client.HeartbeatRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []client.HeartbeatRequest
	for _, r := range f.reqs {
		if id == "" || r.MemberID == id {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeCoordinator) last(id string) client.HeartbeatRequest {
	reqs := f.requests(id)
	if len(reqs) == 0 {
		return client.HeartbeatRequest{}
	}
	return reqs[len(reqs)-1]
}

// answer builds a reply with a fixed status, epoch and assigned shards: a
// join (epoch 0) gets epoch; others get it too.
func answer(status string, epoch int64, assigned ...int) reply {
	return func(req client.HeartbeatRequest) (client.HeartbeatResponse, int) {
		e := epoch
		if status == client.StatusOK && *req.MemberEpoch == -1 {
			e = -1
		}
		return client.HeartbeatResponse{
			Status: status, MemberEpoch: e, GroupEpoch: epoch, AssignmentEpoch: epoch, MetadataVersion: epoch + 10,
			Assignment: client.Assignment{AssignedShards: client.Shards(assigned), MetadataVersion: epoch + 10},
		}, 0
	}
}

func httpStatus(code int) reply {
	return func(client.HeartbeatRequest) (client.HeartbeatResponse, int) { return client.HeartbeatResponse{}, code }
}

type env struct {
	coord *fakeCoordinator
	rdb   *redis.Client
}

// setup starts Redis with the group's streams 0..shards-1 provisioned and a
// fake coordinator answering r.
func setup(t *testing.T, shards int, r reply) env {
	t.Helper()
	rs := redistest.StartProcess(t)
	rdb := rs.Client(t)
	for i := 0; i < shards; i++ {
		if err := rdb.XGroupCreateMkStream(context.Background(), routing.StreamKey(prefix, i), group, "$").Err(); err != nil {
			t.Fatal(err)
		}
	}
	return env{coord: newFakeCoordinator(t, r), rdb: rdb}
}

func (e env) config(mutate func(*member.Config)) member.Config {
	cfg := member.Config{
		Coordinator: client.New(e.coord.srv.URL, nil), Redis: e.rdb,
		StreamPrefix: prefix, ConsumerGroup: group, MemberIDBase: "w",
		Block: 50 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond,
		ClaimMinIdle: 100 * time.Millisecond, RetryBackoff: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		// The fake answers every heartbeat at once, as the reference does.
		PlainHeartbeats: true,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	return cfg
}

// start runs the members until the test ends.
func (e env) start(t *testing.T, cfg member.Config, h member.Handler) *member.Runtime {
	t.Helper()
	rt, err := member.Start(context.Background(), cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	return rt
}

func (e env) publish(t *testing.T, shard int, payload string) string {
	t.Helper()
	id, err := e.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: routing.StreamKey(prefix, shard), Values: map[string]any{"p": payload}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (e env) pending(t *testing.T, shard int) int64 {
	t.Helper()
	p, err := e.rdb.XPending(context.Background(), routing.StreamKey(prefix, shard), group).Result()
	if err != nil {
		t.Fatal(err)
	}
	return p.Count
}

// heartbeats waits until member id sent n more heartbeats: its loop ran that
// often since (every heartbeat follows the member's reaction to the last
// answer), which is what a negative check waits for before it looks.
func (e env) heartbeats(t *testing.T, id string, n int) {
	t.Helper()
	k := len(e.coord.requests(id))
	eventually(t, fmt.Sprintf("%d more heartbeats of %s", n, id), func() bool { return len(e.coord.requests(id)) >= k+n })
}

// delivered reports whether the group's last-delivered-id on shard reached
// id: some consumer read the entry (whether or not it handled it yet).
func (e env) delivered(t *testing.T, shard int, id string) bool {
	t.Helper()
	groups, err := e.rdb.XInfoGroups(context.Background(), routing.StreamKey(prefix, shard)).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		if g.Name == group {
			c, err := compareIDs(g.LastDeliveredID, id)
			if err != nil {
				t.Fatal(err)
			}
			return c >= 0
		}
	}
	return false
}

func compareIDs(a, b string) (int, error) {
	var am, as, bm, bs uint64
	if _, err := fmt.Sscanf(a, "%d-%d", &am, &as); err != nil {
		return 0, fmt.Errorf("stream id %q: %w", a, err)
	}
	if _, err := fmt.Sscanf(b, "%d-%d", &bm, &bs); err != nil {
		return 0, fmt.Errorf("stream id %q: %w", b, err)
	}
	switch {
	case am != bm:
		return cmp.Compare(am, bm), nil
	default:
		return cmp.Compare(as, bs), nil
	}
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// received collects handled payloads.
type received struct {
	mu   sync.Mutex
	msgs []member.Message
}

func (r *received) handler(ctx context.Context, m member.Message) error {
	r.mu.Lock()
	r.msgs = append(r.msgs, m)
	r.mu.Unlock()
	return nil
}

func (r *received) payloads() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.msgs {
		out = append(out, m.Field("p"))
	}
	return out
}

func (r *received) has(p string) bool {
	for _, got := range r.payloads() {
		if got == p {
			return true
		}
	}
	return false
}

func owned(req client.HeartbeatRequest) []int { return client.Indexes(req.OwnedShards) }

func revokeState(req client.HeartbeatRequest, shard int) (string, int) {
	for _, r := range req.RevokingShards {
		if r.Shard.ShardIndex == shard {
			return r.State, r.InFlight
		}
	}
	return "", 0
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
