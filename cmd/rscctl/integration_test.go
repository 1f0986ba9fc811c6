package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rscoord/rsc/internal/redistest"
)

// TestIntegrationRscctl drives a real coordinator binary (built from
// ./cmd/coordinator) against a real Redis through run().
func TestIntegrationRscctl(t *testing.T) {
	isolate(t)
	rs := redistest.StartProcess(t)
	base := startCoordinatorBinary(t, rs.URL())
	rscctl := func(args ...string) (int, string, string) {
		t.Helper()
		return runArgs(append([]string{"--url", base}, args...)...)
	}
	mustRun := func(args ...string) string {
		t.Helper()
		code, out, errOut := rscctl(args...)
		if code != exitOK {
			t.Fatalf("rscctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
		}
		return out
	}
	// A group name with "/" only works if path parameters are percent-encoded.
	const prefix, group = "orders", "team/billing"

	out := mustRun("create", prefix, group, "--shards", "2", "--requested-by", "alice", "--reason", "integration")
	wantContains(t, "create", out, "created orders / team/billing with 2 shards")

	out = mustRun("groups")
	if !regexpMatch(`(?m)^orders\s+team/billing\s+EMPTY\s+2\s+1\s+1\s+0\s+-$`, out) {
		t.Errorf("groups table:\n%s", out)
	}

	out = mustRun("-o", "json", "group", prefix, group)
	var g struct {
		ShardCount int `json:"shardCount"`
	}
	if err := json.Unmarshal([]byte(out), &g); err != nil || g.ShardCount != 2 {
		t.Errorf("group -o json: %v\n%s", err, out)
	}

	// No members: a scale-out completes at the next maintenance tick or two.
	out = mustRun("scale", prefix, group, "4", "--wait", "--timeout", "30s", "--interval", "100ms", "--reason", "more room")
	wantContains(t, "scale --wait", out, "completed: DEPRECATED, 4 shards")

	out = mustRun("routing", prefix, group)
	wantContains(t, "routing", out, "4 shards", "orders:3", "previous layouts within 1h0m0s")
	if !regexpMatch(`(?m)^1\s+2\s+2\s+\d{4}-\d\d-\d\dT`, out) {
		t.Errorf("routing lists the 2-shard layout (since version 1, fence 2):\n%s", out)
	}

	out = mustRun("migrations", prefix, group)
	if !regexpMatch(`(?m)^reshard-\S+\s+-\s+SCALE_OUT\s+2\s+4\s+DEPRECATED`, out) {
		t.Errorf("migrations table:\n%s", out)
	}

	out = mustRun("history", prefix, group)
	wantContains(t, "history", out, "group.created", "resharding.preparing", "alice", `reason=integration`)
	if !regexpMatch(`(?m)^\S+\s+\S+\s+group\.created\s+admin\s+rscctl-[0-9a-f]{12}\s`, out) {
		t.Errorf("history should show the request id rscctl sent:\n%s", out)
	}
	out = mustRun("history", prefix, group, "--type", "resharding.*")
	if strings.Contains(out, "group.created") || !strings.Contains(out, "resharding.") {
		t.Errorf("history --type resharding.*:\n%s", out)
	}

	out = mustRun("members", prefix, group)
	wantContains(t, "members", out, "no members")

	// Refusals are exit 1 with the coordinator's errorCode.
	code, _, errOut := rscctl("scale", prefix, group, "4")
	if code != exitRefused || !strings.Contains(errOut, "SHARD_COUNT_UNCHANGED") {
		t.Errorf("scale to the same count: exit %d: %s", code, errOut)
	}
	code, _, errOut = rscctl("group", prefix, "nope")
	if code != exitRefused || !strings.Contains(errOut, "GROUP_NOT_FOUND") {
		t.Errorf("unknown group: exit %d: %s", code, errOut)
	}
	code, _, errOut = rscctl("groups", "--password", "wrong")
	if code != exitRefused || !strings.Contains(errOut, "HTTP 401") {
		t.Errorf("bad password: exit %d: %s", code, errOut)
	}

	// Ordering: a new ordered group, a switch, a refused value.
	out = mustRun("create", "sorted", "ordered", "--shards", "2", "--ordering", "KEY")
	wantContains(t, "create --ordering KEY", out, "ordering KEY")
	out = mustRun("group", "sorted", "ordered")
	if !regexpMatch(`(?m)^ORDERING\s+KEY$`, out) {
		t.Errorf("group of an ordered group:\n%s", out)
	}
	out = mustRun("ordering", "sorted", "ordered", "NONE", "--reason", "not needed")
	wantContains(t, "ordering NONE", out, "ordering NONE")
	code, _, errOut = rscctl("ordering", "sorted", "ordered", "FIFO")
	if code != exitRefused || !strings.Contains(errOut, "INVALID_REQUEST") {
		t.Errorf("ordering FIFO: exit %d: %s", code, errOut)
	}

	// Autoscaling: set, show, off.
	out = mustRun("autoscale", "sorted", "ordered", "--min", "2", "--max", "8", "--target", "500", "--window", "30", "--dry-run", "--reason", "try it")
	wantContains(t, "autoscale set", out, "on (dry run", "2..8 shards, target 500 entries/s per shard, max lag none, window 30s, cooldowns out 60s / in 300s, step x2")
	out = mustRun("autoscale", "sorted", "ordered")
	wantContains(t, "autoscale show", out, "AUTOSCALING", "dry run")
	out = mustRun("autoscale", "sorted", "ordered", "--off")
	if !regexpMatch(`(?m)^AUTOSCALING\s+off$`, out) {
		t.Errorf("autoscale --off:\n%s", out)
	}
	code, _, errOut = rscctl("autoscale", "sorted", "ordered", "--min", "0", "--max", "8", "--target", "5")
	if code != exitRefused || !strings.Contains(errOut, "minShards") {
		t.Errorf("autoscale --min 0: exit %d: %s", code, errOut)
	}
	code, _, _ = rscctl("autoscale", "sorted", "ordered", "--min", "2")
	if code != exitUsage {
		t.Errorf("autoscale --min alone: exit %d, want %d", code, exitUsage)
	}

	// Streams: create (no consumer group), its routing, a scale without
	// groups, adopt of streams another system made, the list.
	out = mustRun("stream", "create", "events", "--shards", "3", "--reason", "launch")
	wantContains(t, "stream create", out, "created stream events with 3 shards (metadata version 1)")
	code, _, errOut = rscctl("stream", "create", "events", "--shards", "3")
	if code != exitRefused || !strings.Contains(errOut, "STREAM_PREFIX_ALREADY_EXISTS") {
		t.Errorf("stream create again: exit %d: %s", code, errOut)
	}
	out = mustRun("stream", "routing", "events")
	wantContains(t, "stream routing", out, "stream events: 3 shards, metadata version 1", "events:2")
	out = mustRun("stream", "scale", "events", "5")
	wantContains(t, "stream scale", out, "stream events scaled to 5 shards (no consumer group")
	out = mustRun("-o", "json", "stream", "routing", "events")
	var rt struct {
		ShardCount      int   `json:"shardCount"`
		MetadataVersion int64 `json:"metadataVersion"`
	}
	if err := json.Unmarshal([]byte(out), &rt); err != nil || rt.ShardCount != 5 || rt.MetadataVersion != 2 {
		t.Errorf("stream routing -o json after the scale: %v\n%s", err, out)
	}
	code, _, errOut = rscctl("stream", "adopt", "theirs", "--shards", "2")
	if code != exitRefused || !strings.Contains(errOut, "theirs:0") {
		t.Errorf("adopt of streams that do not exist: exit %d: %s", code, errOut)
	}
	out = mustRun("stream", "scale", prefix, "2", "--reason", "fewer")
	wantContains(t, "stream scale with groups", out, "scale to 2 shards started", "team/billing")
	out = mustRun("streams")
	if !regexpMatch(`(?m)^events\s+5\s+2\s+CREATED\s+-$`, out) || !regexpMatch(`(?m)^orders\s+2\s+`, out) {
		t.Errorf("streams table:\n%s", out)
	}
	if code, _, _ := rscctl("stream", "frobnicate", "x"); code != exitUsage {
		t.Errorf("stream frobnicate: exit %d, want %d", code, exitUsage)
	}

	// The runbook of a lost log (docs/operations.md): Redis loses the log
	// (FLUSHALL); the coordinator keeps its state, refuses writes (LOG_LOST,
	// exit 3) and says so on /readyz; rscctl log restore writes it back.
	if err := rs.Client(t).FlushAll(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = rscctl("create", "after", "flush", "--shards", "1")
	if code != exitUnavailable || !strings.Contains(errOut, "LOG_LOST") {
		t.Errorf("create after FLUSHALL: exit %d: %s", code, errOut)
	}
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var ready struct{ Status string }
	_ = json.NewDecoder(resp.Body).Decode(&ready)
	resp.Body.Close()
	if resp.StatusCode != 503 || ready.Status != "LOG_LOST" {
		t.Errorf("/readyz after FLUSHALL: %d %s, want 503 LOG_LOST", resp.StatusCode, ready.Status)
	}
	out = mustRun("group", prefix, group)
	wantContains(t, "group while the log is lost", out, "team/billing")
	out = mustRun("log", "restore", "--reason", "FLUSHALL in the runbook test")
	wantContains(t, "log restore", out, "restored the event log (it was gone)")
	out = mustRun("create", "restored", "g", "--shards", "1")
	wantContains(t, "create after the restore", out, "created restored / g")
	code, _, errOut = rscctl("log", "restore", "--reason", "again")
	if code != exitRefused || !strings.Contains(errOut, "LOG_NOT_LOST") {
		t.Errorf("a second restore: exit %d: %s", code, errOut)
	}

	// A saved token serves later calls.
	mustRun("login", "--save")
	mustRun("groups")
}

// startCoordinatorBinary builds ./cmd/coordinator and runs it on a free port;
// it returns the base URL once /readyz answers 200.
func startCoordinatorBinary(t *testing.T, redisURL string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	gomod, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		t.Fatalf("go env GOMOD: %q, %v", gomod, err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	bin := filepath.Join(t.TempDir(), "coordinator")
	build := exec.Command(goBin, "build", "-o", bin, "./cmd/coordinator")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/coordinator: %v\n%s", err, out)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	logs := &syncBuffer{}
	cmd := exec.Command(bin, "--listen", addr, "--redis", redisURL, "--tick-interval", "100ms",
		"--log-stream", fmt.Sprintf("rscctl-test:%d", time.Now().UnixNano()), "--log-level", "warn",
		"--admin-user", "admin", "--admin-password", "password")
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("coordinator output:\n%s", logs.String())
		}
	})

	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatalf("coordinator exited at start:\n%s", logs.String())
		default:
		}
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("coordinator not ready in 30s:\n%s", logs.String())
	return ""
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 1<<20 {
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
