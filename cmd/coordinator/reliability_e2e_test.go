package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// readyzBody is a /readyz answer with its status code.
func readyzBody(t *testing.T, url string) (int, wire.Readiness) {
	t.Helper()
	resp, err := http.Get(url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r wire.Readiness
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, r
}

// metricLine is the value line of a metric in /metrics ("" when absent).
func metricLine(t *testing.T, url, prefix string) string {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

// The reproduction: a Redis with maxmemory-policy allkeys-lru (a
// common default of managed caches) evicted the log, and the coordinator
// said READY. Now it refuses to start on one, naming maxmemory-policy (the
// binary exits 1), starts with --allow-redis-eviction (saying so on /readyz),
// and a policy switched at run time makes it NOT_READY and refuse writes
// until it is noeviction again; under volatile-lru, only a TTL on one of its
// keys does.
func TestIntegrationEvictionPolicyRefused(t *testing.T) {
	parallel(t)
	lru := redistest.StartProcess(t, redistest.WithArgs("--maxmemory", "20mb", "--maxmemory-policy", "allkeys-lru"))

	t.Run("at start", func(t *testing.T) {
		m := NewMain()
		m.Stderr = io.Discard
		if err := m.ParseFlags([]string{"--listen", "127.0.0.1:0", "--redis", lru.URL()}); err != nil {
			t.Fatal(err)
		}
		err := m.Run(context.Background())
		if err == nil {
			_ = m.Close()
			t.Fatal("the coordinator started on a Redis with maxmemory-policy allkeys-lru")
		}
		_ = m.Close()
		if !strings.Contains(err.Error(), "maxmemory-policy allkeys-lru") || !strings.Contains(err.Error(), "--allow-redis-eviction") {
			t.Fatalf("start refused with %q, want it to name maxmemory-policy allkeys-lru and the escape flag", err)
		}
		cmd := exec.Command(coordinatorBinary(t), "--listen", "127.0.0.1:0", "--redis", lru.URL())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err = cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(stderr.String(), "maxmemory-policy allkeys-lru") {
			t.Fatalf("the binary on an allkeys-lru Redis: %v, stderr %q; want exit status 1 naming maxmemory-policy", err, stderr.String())
		}
	})

	t.Run("--allow-redis-eviction starts and says so", func(t *testing.T) {
		tc := startCoordinator(t, lru, func(m *Main) { m.AllowRedisEviction = true; m.RedisCheckInterval = 50 * time.Millisecond })
		eventually(t, 10*time.Second, "/readyz to report the policy", func() bool {
			code, r := readyzBody(t, tc.URL)
			return code == 200 && r.Redis != nil && r.Redis.Evicts && r.Redis.EvictionAllowed && r.Redis.MaxmemoryPolicy == "allkeys-lru"
		})
		tc.Do("POST", "/coord/v1/streams/ev/groups/g", map[string]any{"initialShardCount": 1, "requestedBy": "test"}).MustStatus(t, 201)
	})

	t.Run("at run time", func(t *testing.T) {
		rs := redistest.StartProcess(t)
		tc := startCoordinator(t, rs, func(m *Main) { m.RedisCheckInterval = 50 * time.Millisecond })
		tc.Do("POST", "/coord/v1/streams/ev/groups/g", map[string]any{"initialShardCount": 1, "requestedBy": "test"}).MustStatus(t, 201)
		rdb := rs.Client(t)
		ctx := context.Background()
		setPolicy := func(p string) {
			t.Helper()
			if err := rdb.ConfigSet(ctx, "maxmemory-policy", p).Err(); err != nil {
				t.Fatal(err)
			}
		}
		refusing := func(why string) {
			t.Helper()
			eventually(t, 10*time.Second, "/readyz 503 REDIS_EVICTION_POLICY ("+why+")", func() bool {
				code, r := readyzBody(t, tc.URL)
				return code == 503 && r.Status == "NOT_READY" && r.ErrorCode == "REDIS_EVICTION_POLICY" && strings.Contains(r.Message, "maxmemory-policy")
			})
			r := tc.Do("POST", "/coord/v1/streams/ev/groups/refused", map[string]any{"initialShardCount": 1, "requestedBy": "test"})
			if r.Status != 503 || r.JSON["errorCode"] != "REDIS_EVICTION_POLICY" {
				t.Fatalf("a create while Redis may evict the log (%s): %d %s, want 503 REDIS_EVICTION_POLICY", why, r.Status, r.Body)
			}
			tc.Do("GET", "/coord/v1/streams/ev/groups/g", nil).MustStatus(t, 200) // reads go on
			if got := metricLine(t, tc.URL, "rsc_redis_evicting "); got != "rsc_redis_evicting 1" {
				t.Fatalf("metric %q, want rsc_redis_evicting 1", got)
			}
		}
		ready := func() {
			t.Helper()
			eventually(t, 10*time.Second, "/readyz 200", func() bool { code, _ := readyzBody(t, tc.URL); return code == 200 })
		}

		setPolicy("allkeys-lru")
		refusing("allkeys-lru")
		setPolicy("noeviction")
		ready()
		tc.Do("POST", "/coord/v1/streams/ev/groups/after", map[string]any{"initialShardCount": 1, "requestedBy": "test"}).MustStatus(t, 201)

		// volatile-lru evicts keys with a TTL only: none of the coordinator's has one.
		setPolicy("volatile-lru")
		if err := rdb.Set(ctx, "someone-elses-cache", "x", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		ready()
		tc.Do("POST", "/coord/v1/streams/ev/groups/volatile", map[string]any{"initialShardCount": 1, "requestedBy": "test"}).MustStatus(t, 201)
		if err := rdb.Expire(ctx, tc.Main.LogStream, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		refusing("volatile-lru and a TTL on the log")
		if err := rdb.Persist(ctx, tc.Main.LogStream).Err(); err != nil {
			t.Fatal(err)
		}
		ready()
		if got := metricLine(t, tc.URL, "rsc_redis_persistence_enabled "); got != "rsc_redis_persistence_enabled 0" {
			t.Fatalf("metric %q, want rsc_redis_persistence_enabled 0 (the test Redis saves nothing)", got)
		}
		if _, r := readyzBody(t, tc.URL); r.Redis == nil || r.Redis.Persistence != "off" {
			t.Fatalf("/readyz redis %+v, want persistence off", r.Redis)
		}
	})
}

// The reproduction: FLUSHALL (or a Redis restart without
// persistence) while running made the coordinator throw away the state it
// held and go on READY with nothing. Now it keeps it: /readyz LOG_LOST,
// reads and steady heartbeats served, writes and heartbeats that would
// append refused with 503 LOG_LOST; the restore writes it back, the
// coordinator decides again, and a coordinator restarted afterwards loads
// the same state.
func TestIntegrationFlushallWhileRunningIsRestored(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, func(m *Main) { m.RedisCheckInterval = 50 * time.Millisecond })
	tc.Do("POST", "/coord/v1/streams/orders/groups/billing", map[string]any{"initialShardCount": 4, "requestedBy": "test"}).MustStatus(t, 201)
	tc.Do("POST", "/coord/v1/streams/payments/groups/ledger", map[string]any{"initialShardCount": 2, "requestedBy": "test"}).MustStatus(t, 201)
	steady := converge(t, tc, "orders", "billing", "m1")
	owned := refIndexes(steady.Assignment.AssignedShards)
	// Heartbeat until one appends nothing: the member is steady.
	eventually(t, 10*time.Second, "a steady heartbeat", func() bool {
		at := tc.Main.Coordinator().State().LastID()
		steady = heartbeatAnswer(t, tc, "orders", "billing", "m1", steady.MemberEpoch, steady.MetadataVersion, owned)
		owned = refIndexes(steady.Assignment.AssignedShards)
		return tc.Main.Coordinator().State().LastID() == at
	})
	before, err := tc.Main.Coordinator().State().Capture().Encode()
	if err != nil {
		t.Fatal(err)
	}

	if err := rs.Client(t).FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "/readyz LOG_LOST", func() bool {
		code, r := readyzBody(t, tc.URL)
		return code == 503 && r.Status == "LOG_LOST" && r.LogLost != nil && r.LogLost.Cause == "LOG_GONE"
	})
	// Reads are served from the state kept.
	g := tc.Do("GET", "/coord/v1/streams/orders/groups/billing", nil).MustStatus(t, 200)
	if g.JSON["shardCount"] != float64(4) {
		t.Fatalf("group read while the log is lost: %s", g.Body)
	}
	tc.Do("GET", "/coord/v1/streams/payments/groups/ledger/producer-routing", nil).MustStatus(t, 200)
	// A steady heartbeat is answered; one that would append is refused.
	res := heartbeatAnswer(t, tc, "orders", "billing", "m1", steady.MemberEpoch, steady.MetadataVersion, owned)
	if res.Status != wire.StatusOK {
		t.Fatalf("steady heartbeat while the log is lost: %s", res.Status)
	}
	join := tc.Do("POST", "/coord/v1/streams/orders/groups/billing/members/m2/heartbeat", heartbeatBody("m2", 0, 0, nil, nil))
	if join.Status != 503 || join.JSON["errorCode"] != "LOG_LOST" {
		t.Fatalf("a join while the log is lost: %d %s, want 503 LOG_LOST", join.Status, join.Body)
	}
	create := tc.Do("POST", "/coord/v1/streams/new/groups/g", map[string]any{"initialShardCount": 1, "requestedBy": "test"})
	if create.Status != 503 || create.JSON["errorCode"] != "LOG_LOST" {
		t.Fatalf("a create while the log is lost: %d %s, want 503 LOG_LOST", create.Status, create.Body)
	}
	if got := metricLine(t, tc.URL, `rsc_log_lost{cause="LOG_GONE"}`); got != `rsc_log_lost{cause="LOG_GONE"} 1` {
		t.Fatalf("metric %q, want 1", got)
	}
	if got, err := tc.Main.Coordinator().State().Capture().Encode(); err != nil || !bytes.Equal(got, before) {
		t.Fatal("the state served changed while the log was lost")
	}

	// The restore, through the SDK's client (as rscctl log restore).
	api := client.New(tc.URL, client.BasicAuth{Username: "admin", Password: "password"})
	restored, err := api.RestoreLog(context.Background(), wire.LogRestoreRequest{RequestedBy: "ops", Reason: "FLUSHALL by mistake"})
	if err != nil {
		t.Fatal(err)
	}
	if restored.Cause != "LOG_GONE" || restored.LogLastID != "0-0" || restored.RestoredFrom != tc.Main.Coordinator().State().LastRestore().From {
		t.Fatalf("restore answered %+v", restored)
	}
	code, r := readyzBody(t, tc.URL)
	if code != 200 || r.LastEventID != restored.EventID {
		t.Fatalf("/readyz after the restore: %d %+v, want READY at %s", code, r, restored.EventID)
	}
	if again := tc.Do("POST", "/coord/v1/log/restore", map[string]any{"requestedBy": "ops", "reason": "again"}); again.Status != 409 || again.JSON["errorCode"] != "LOG_NOT_LOST" {
		t.Fatalf("a second restore: %d %s, want 409 LOG_NOT_LOST", again.Status, again.Body)
	}
	tc.Do("POST", "/coord/v1/streams/new/groups/g", map[string]any{"initialShardCount": 1, "requestedBy": "test"}).MustStatus(t, 201)
	if res := heartbeatAnswer(t, tc, "orders", "billing", "m1", steady.MemberEpoch, steady.MetadataVersion, owned); res.Status != wire.StatusOK {
		t.Fatalf("heartbeat after the restore: %s", res.Status)
	}
	ev := tc.Do("GET", "/coord/v1/monitoring/events?limit=10", nil).MustStatus(t, 200)
	if !strings.Contains(string(ev.Body), `"log.restored"`) || !strings.Contains(string(ev.Body), "FLUSHALL by mistake") {
		t.Fatalf("the audit events lack the restore: %s", ev.Body)
	}
	// The history index goes on from the restore: the new group's history
	// has its creation; the history of a group from before the loss is gone
	// with the log (its index too), and answers empty.
	if h := tc.Do("GET", "/coord/v1/monitoring/streams/new/groups/g/events", nil).MustStatus(t, 200); !strings.Contains(string(h.Body), `"group.created"`) {
		t.Fatalf("the new group's history lacks its creation: %s", h.Body)
	}
	tc.Do("GET", "/coord/v1/monitoring/streams/orders/groups/billing/events", nil).MustStatus(t, 200)

	// A restart loads the same state.
	served, err := tc.Main.Coordinator().State().Capture().Encode()
	if err != nil {
		t.Fatal(err)
	}
	logStream := tc.Main.LogStream
	if err := tc.Main.Close(); err != nil {
		t.Fatal(err)
	}
	next := startCoordinator(t, rs, func(m *Main) { m.LogStream = logStream })
	got, err := next.Main.Coordinator().State().Capture().Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, served) {
		t.Fatalf("after a restart the coordinator serves groups %v at %s, want %v at %s", names(next.Main.Coordinator().State()), next.Main.Coordinator().State().LastID(),
			names(tc.Main.Coordinator().State()), tc.Main.Coordinator().State().LastID())
	}
	for _, k := range []projection.GroupKey{{StreamPrefix: "orders", ConsumerGroup: "billing"}, {StreamPrefix: "payments", ConsumerGroup: "ledger"}, {StreamPrefix: "new", ConsumerGroup: "g"}} {
		next.Do("GET", fmt.Sprintf("/coord/v1/streams/%s/groups/%s", k.StreamPrefix, k.ConsumerGroup), nil).MustStatus(t, 200)
	}
	next.Do("POST", "/coord/v1/streams/later/groups/g", map[string]any{"initialShardCount": 1, "requestedBy": "test"}).MustStatus(t, 201)
}

func refIndexes(refs []wire.ShardRef) []int {
	out := []int{}
	for _, r := range refs {
		out = append(out, r.ShardIndex)
	}
	return out
}
