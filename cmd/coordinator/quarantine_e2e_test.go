package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/internal/redistest"
)

// Faults of the log itself and the repairs of docs/operations.md
// (Reliability, Runbook: a corrupt log), each against a real Redis.

// rawLogEntry is an envelope of type typ for prefix (group group) around
// payload, as msgpack writes it: what a newer build, a hand-written XADD or a
// broken writer can put in the log, without events.Encode's checks.
func rawLogEntry(t *testing.T, typ, prefix, group string, payload any) []byte {
	t.Helper()
	p, err := msgpack.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	data, err := msgpack.Marshal(map[string]any{"type": typ, "v": 1, "prefix": prefix, "group": group, "time": time.Now().UnixNano(), "actor": "ops", "payload": msgpack.RawMessage(p)})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// xadd appends data to the log stream by hand and returns its id.
func xadd(t *testing.T, rdb *redis.Client, stream string, data []byte) string {
	t.Helper()
	id, err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: map[string]any{"e": data}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// wantCorrupt checks an answer is 409 COORDINATOR_METADATA_CORRUPT naming entry.
func wantCorrupt(t *testing.T, what string, r apiResponse, entry string) {
	t.Helper()
	if r.Status != 409 || r.JSON["errorCode"] != "COORDINATOR_METADATA_CORRUPT" || !strings.Contains(fmt.Sprint(r.JSON["message"]), entry) {
		t.Errorf("%s: HTTP %d %s, want 409 COORDINATOR_METADATA_CORRUPT naming %s", what, r.Status, r.Body, entry)
	}
}

// beatOK sends a heartbeat for member (joining it when epoch is 0) until the
// coordinator answers OK, and returns the member's epoch, metadata version
// and assigned shards. It fails the test on any answer but 200.
func beatOK(t *testing.T, tc *testCoordinator, prefix, group, member string, epoch, mv int64, owned []int) (int64, int64, []int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		hb := tc.Heartbeat(prefix, group, member, epoch, mv, owned)
		switch hb.Status {
		case "OK":
			return hb.MemberEpoch, hb.MetadataVersion, hb.Assigned
		case "UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH":
			epoch, mv, owned = 0, 0, nil
		default:
			epoch, mv = hb.MemberEpoch, hb.MetadataVersion
			owned = hb.Assigned
		}
		if time.Now().After(deadline) {
			t.Fatalf("member %s of %s/%s not OK in 10s (last %s)", member, prefix, group, hb.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestIntegrationUnknownEntryQuarantinesOnePrefix (reproduction: one log
// entry of an unknown type naming prefix orders made every route of every
// prefix answer 409, payments' heartbeats and routing included; then an XDEL
// of it and a restart left the coordinator NOT_READY for good, taking the
// deleted entry for a trim point). Now the entry quarantines orders alone,
// before and after a restart, while payments' member heartbeats and its
// routing, writes and monitoring go on; an XDEL of the entry and a restart
// serve orders again, although the snapshot taken after it holds the
// quarantine.
func TestIntegrationUnknownEntryQuarantinesOnePrefix(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	stream := fmt.Sprintf("coordinator:events:quarantine:%d", time.Now().UnixNano())
	opts := func(m *Main) {
		fastTimings(m)
		m.MemberLease = 30 * time.Second // the restarts take longer than fastTimings' lease
		m.LogStream = stream
		m.SnapshotEvery = 1
		m.SnapshotMinInterval = -time.Second
	}
	tc := startCoordinator(t, rs, opts)
	createGroup(t, tc, "payments", "ledger", 2)
	createGroup(t, tc, "orders", "billing", 2)
	epoch, mv, owned := beatOK(t, tc, "payments", "ledger", "p1", 0, 0, nil)
	if len(owned) != 2 {
		t.Fatalf("p1 owns %v, want both shards", owned)
	}

	bad := xadd(t, rdb, stream, rawLogEntry(t, "group.teleported", "orders", "billing", map[string]any{"to": "mars"}))
	eventually(t, 10*time.Second, "orders quarantined by "+bad, func() bool {
		r := tc.Do("GET", "/coord/v1/streams/orders/groups/billing/producer-routing", nil)
		return r.Status == 409 && strings.Contains(fmt.Sprint(r.JSON["message"]), bad)
	})

	check := func(t *testing.T, tc *testCoordinator) {
		t.Helper()
		// payments: its member beats OK and keeps its shards, its routing
		// answers, a write is decided and recorded.
		for i := 0; i < 5; i++ {
			hb := tc.Heartbeat("payments", "ledger", "p1", epoch, mv, owned)
			if hb.Status != "OK" || len(hb.Assigned) != 2 {
				t.Fatalf("payments heartbeat %d: %+v, want OK with both shards", i, hb)
			}
		}
		if r := tc.Do("GET", "/coord/v1/streams/payments/groups/ledger/producer-routing", nil); r.Status != 200 || apiInt(t, r.JSON, "shardCount") != 2 {
			t.Errorf("payments routing: HTTP %d %s", r.Status, r.Body)
		}
		// orders: every route of it, reads, writes and heartbeats, names the entry.
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/coord/v1/streams/orders/groups/billing/producer-routing", nil},
			{"GET", "/coord/v1/streams/orders/producer-routing", nil},
			{"GET", "/coord/v1/streams/orders/groups/billing", nil},
			{"GET", "/coord/v1/monitoring/streams/orders/groups/billing/events", nil},
			{"POST", "/coord/v1/streams/orders/groups/billing/scale", map[string]any{"targetShardCount": 3, "requestedBy": "ops", "reason": "r"}},
			{"POST", "/coord/v1/streams/orders/groups/other", map[string]any{"initialShardCount": 2, "requestedBy": "ops"}},
			{"POST", "/coord/v1/streams/orders/groups/billing/members/o1/heartbeat", heartbeatBody("o1", 0, 0, nil, nil)},
		} {
			wantCorrupt(t, c.method+" "+c.path, tc.Do(c.method, c.path, c.body), bad)
		}
		r := tc.DoAs("", "", "GET", "/readyz", nil)
		if r.Status != 200 || r.JSON["status"] != "READY" || apiInt(t, r.JSON, "quarantinedPrefixes") != 1 {
			t.Errorf("/readyz: HTTP %d %s, want READY with 1 quarantined prefix", r.Status, r.Body)
		}
		h := tc.Do("GET", "/coord/v1/monitoring/health", nil).MustStatus(t, 200)
		q, _ := h.JSON["quarantined"].([]any)
		if len(q) != 1 || q[0].(map[string]any)["streamPrefix"] != "orders" || q[0].(map[string]any)["entryId"] != bad || q[0].(map[string]any)["type"] != "group.teleported" {
			t.Errorf("health quarantined = %v, want orders by %s", h.JSON["quarantined"], bad)
		}
		groups := tc.Do("GET", "/coord/v1/monitoring/groups", nil).MustStatus(t, 200)
		if strings.Contains(string(groups.Body), `"orders"`) || !strings.Contains(string(groups.Body), `"payments"`) {
			t.Errorf("monitoring groups list %s, want payments and not the quarantined orders", groups.Body)
		}
	}
	check(t, tc)
	// A decision on payments after the bad entry (and its snapshot, which
	// holds the quarantine).
	createGroup(t, tc, "payments", "audit", 2)

	// Before and after a restart.
	_ = tc.Main.Close()
	tc = startCoordinator(t, rs, opts)
	check(t, tc)

	// The obvious repair: XDEL and a restart. The deleted entry is a gap, not
	// a trim; the snapshot holding the quarantine is passed over for a fold
	// from zero, so orders is served again.
	_ = tc.Main.Close()
	if err := rdb.XDel(ctx, stream, bad).Err(); err != nil {
		t.Fatal(err)
	}
	tc = startCoordinator(t, rs, opts)
	if r := tc.Do("GET", "/coord/v1/streams/orders/groups/billing/producer-routing", nil); r.Status != 200 || apiInt(t, r.JSON, "shardCount") != 2 {
		t.Fatalf("orders routing after the XDEL and a restart: HTTP %d %s", r.Status, r.Body)
	}
	r := tc.DoAs("", "", "GET", "/readyz", nil)
	if r.Status != 200 || r.JSON["quarantinedPrefixes"] != nil {
		t.Errorf("/readyz after the repair: HTTP %d %s, want READY with nothing quarantined", r.Status, r.Body)
	}
	tc.Do("GET", "/coord/v1/streams/payments/groups/audit", nil).MustStatus(t, 200)
	beatOK(t, tc, "payments", "ledger", "p1", epoch, mv, owned)
	beatOK(t, tc, "orders", "billing", "o1", 0, 0, nil)
}

// TestIntegrationXDELOfTheLastEntry (reproduction: an XDEL taken for a trim
// point). With the log's last entry deleted by hand, a restart serves the
// log as it is (the deleted group is gone, although the snapshot written at
// shutdown was taken at its entry) and goes on appending after the gap.
func TestIntegrationXDELOfTheLastEntry(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	stream := fmt.Sprintf("coordinator:events:xdel:%d", time.Now().UnixNano())
	opts := func(m *Main) { m.LogStream = stream }
	tc := startCoordinator(t, rs, opts)
	createGroup(t, tc, "xa", "g", 2)
	createGroup(t, tc, "xb", "g", 2)
	_ = tc.Main.Close()
	last, err := rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil || len(last) != 1 {
		t.Fatal(err)
	}
	if err := rdb.XDel(ctx, stream, last[0].ID).Err(); err != nil {
		t.Fatal(err)
	}
	tc = startCoordinator(t, rs, opts)
	tc.Do("GET", "/coord/v1/streams/xa/groups/g", nil).MustStatus(t, 200)
	if r := tc.Do("GET", "/coord/v1/streams/xb/groups/g", nil); r.Status != 404 {
		t.Fatalf("the group whose entry was deleted: HTTP %d %s, want 404 (the state is the log's)", r.Status, r.Body)
	}
	createGroup(t, tc, "xc", "g", 2)
	_ = tc.Main.Close()
	tc = startCoordinator(t, rs, opts)
	tc.Do("GET", "/coord/v1/streams/xc/groups/g", nil).MustStatus(t, 200)
}

var (
	replayOnce sync.Once
	replayPath string
	replayErr  error
)

// replayBinary builds cmd/replay once per test run (without the race
// detector: the memory-limit test runs it under ulimit -v).
func replayBinary(t *testing.T) string {
	t.Helper()
	replayOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rsc-replay")
		if err != nil {
			replayErr = err
			return
		}
		replayPath = filepath.Join(dir, "replay")
		out, err := exec.Command("go", "build", "-o", replayPath, "github.com/rscoord/rsc/cmd/replay").CombinedOutput()
		if err != nil {
			replayErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if replayErr != nil {
		t.Fatal(replayErr)
	}
	return replayPath
}

// replayRun is one run of the replay binary.
type replayRun struct {
	code           int
	stdout, stderr string
}

// runReplay runs the replay binary against rs and stream (under ulimit -v
// kb when kb > 0) and returns its exit status and output.
func runReplay(t *testing.T, rs *redistest.Server, stream string, kb int, args ...string) replayRun {
	t.Helper()
	full := append([]string{"--redis", rs.URL(), "--log-stream", stream}, args...)
	cmd := exec.Command(replayBinary(t), full...)
	if kb > 0 {
		cmd = exec.Command("sh", append([]string{"-c", fmt.Sprintf(`ulimit -v %d && exec "$0" "$@"`, kb), replayBinary(t)}, full...)...)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return replayRun{code: code, stdout: out.String(), stderr: errOut.String()}
}

func mustReplay(t *testing.T, rs *redistest.Server, stream string, want int, args ...string) replayRun {
	t.Helper()
	r := runReplay(t, rs, stream, 0, args...)
	if r.code != want {
		t.Fatalf("replay %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
	return r
}

// memoryLimitKB is the address space the memory-limit test gives each process:
// enough for the coordinator and replay, far below the 16 GiB a shard count of
// 2,147,483,647 asked for.
const memoryLimitKB = 2 << 20

// TestIntegrationPoisonShardCountUnderMemoryLimit (reproduction: a
// well-formed stream.adopted with shardCount 2,147,483,647 made the fold ask
// for a 16 GiB slice, "fatal error: out of memory" at every start, and in
// replay verify too). Under a 2 GiB address-space limit the coordinator comes
// up READY with the entry's prefix quarantined and the other prefix served,
// and replay verify names the entry.
func TestIntegrationPoisonShardCountUnderMemoryLimit(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	rdb := rs.Client(t)
	stream := fmt.Sprintf("coordinator:events:poison:%d", time.Now().UnixNano())
	tc := startCoordinator(t, rs, func(m *Main) { m.LogStream = stream })
	createGroup(t, tc, "payments", "ledger", 2)
	_ = tc.Main.Close()
	bad := xadd(t, rdb, stream, rawLogEntry(t, "stream.adopted", "orders", "", map[string]any{"shardCount": 2147483647, "requestedBy": "ops", "reason": "poison"}))

	port := freePort(t)
	cmd := exec.Command("sh", "-c", fmt.Sprintf(`ulimit -v %d && exec "$0" "$@"`, memoryLimitKB), coordinatorBinary(t),
		"--listen", fmt.Sprintf("127.0.0.1:%d", port), "--redis", rs.URL(), "--log-stream", stream)
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("coordinator logs:\n%s", logs.String())
		}
	})
	proc := &testCoordinator{t: t, URL: fmt.Sprintf("http://127.0.0.1:%d", port), Redis: rs}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the coordinator exited under the memory limit: %v", err)
		default:
		}
		if r, err := proc.TryDoAs("", "", "GET", "/readyz", nil); err == nil && r.Status == 200 {
			if r.JSON["quarantinedPrefixes"] != float64(1) {
				t.Fatalf("/readyz %s, want one quarantined prefix", r.Body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the coordinator was not READY in 20s under the memory limit")
		}
		time.Sleep(50 * time.Millisecond)
	}
	wantCorrupt(t, "orders routing", proc.Do("GET", "/coord/v1/streams/orders/producer-routing", nil), bad)
	proc.Do("GET", "/coord/v1/streams/payments/groups/ledger/producer-routing", nil).MustStatus(t, 200)
	if !strings.Contains(logs.String(), bad) {
		t.Errorf("the coordinator's log does not name %s", bad)
	}

	v := runReplay(t, rs, stream, memoryLimitKB, "verify", "--no-snapshot", "-o", "json")
	if v.code != 1 {
		t.Fatalf("replay verify under the memory limit: exit %d, want 1 (a quarantining entry)\n%s\n%s", v.code, v.stdout, v.stderr)
	}
	var res struct {
		Quarantining []struct{ ID, StreamPrefix, Type, Reason string } `json:"quarantining"`
	}
	if err := json.Unmarshal([]byte(v.stdout), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Quarantining) != 1 || res.Quarantining[0].ID != bad || res.Quarantining[0].StreamPrefix != "orders" || !strings.Contains(res.Quarantining[0].Reason, "2147483647") {
		t.Fatalf("verify names %+v, want %s quarantining orders for its shard count", res.Quarantining, bad)
	}
}
