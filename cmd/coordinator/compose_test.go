package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// composeImage is the tag the test builds, so a developer's rsc-coordinator:local
// is left alone.
const composeImage = "rsc-coordinator:compose-test"

// TestIntegrationCompose builds the image with docker/build-image.sh, starts
// docker-compose.yml (Redis and the coordinator) on a free loopback port, waits
// for /readyz, creates a group over HTTP and reads it back from /metrics.
//
// It runs when RSC_COMPOSE_TEST=1, RSC_REQUIRE_DOCKER=1 (make test) or CI is set,
// and then fails, rather than skips, when Docker or Compose is missing.
func TestIntegrationCompose(t *testing.T) {
	port := composeFreePort(t)
	st := startCompose(t, "docker-compose.yml", composeImage, "rsccompose", fmt.Sprintf("RSC_PORT=%d", port))
	run, dc, lap, compose := st.run, st.dc, st.lap, st.compose

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	composeWaitHTTP(t, base+"/readyz", 45*time.Second)
	lap("wait for /readyz")

	code, body := composeRequest(t, "POST", base+"/coord/v1/streams/orders/groups/oc", `{"initialShardCount": 4, "requestedBy": "compose-test"}`, true)
	if code != http.StatusCreated {
		t.Fatalf("create group: status %d, want 201; body %s", code, body)
	}
	code, body = composeRequest(t, "GET", base+"/metrics", "", false)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d; body %s", code, composeTail(body))
	}
	for _, want := range []string{`rsc_group_shard_count{consumer_group="oc",stream_prefix="orders"} 4`, "rsc_ready 1"} {
		if !bytes.Contains(body, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	id := strings.TrimSpace(string(run(30*time.Second, compose[0], dc("ps", "-q", "coordinator")...)))
	if user := strings.TrimSpace(string(run(30*time.Second, "docker", "inspect", "-f", "{{.Config.User}}", id))); user != "65532" {
		t.Errorf("coordinator container runs as user %q, want 65532", user)
	}
	lap("create group, /metrics")
}

// composeStack is one Compose project of a test: the image it built, the
// environment, and a cleanup that brings it down (with logs on failure).
type composeStack struct {
	t            *testing.T
	compose      []string // the Compose command
	root, file   string
	project      string
	env          []string
	start, phase time.Time
}

// startCompose checks Docker and Compose (failing, not skipping, when the
// environment asks for the test: composeRequired), builds the coordinator image
// with docker/build-image.sh as image, and brings file up under a unique
// project named after prefix; env adds variables (ports).
func startCompose(t *testing.T, file, image, prefix string, env ...string) *composeStack {
	t.Helper()
	if !composeRequired() {
		t.Skipf("builds an image and runs %s: set RSC_COMPOSE_TEST=1 to run it (make test and CI do)", file)
	}
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Fatalf("%s needs a running Docker daemon (bash .ci/setup.sh starts one): docker info: %v\n%s", t.Name(), err, composeTail(out))
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	redisImage := os.Getenv("RSC_REDIS_IMAGE")
	if redisImage == "" {
		redisImage = "rsc-redis:7"
	}
	st := &composeStack{t: t, compose: composeCommand(t), root: root, file: file,
		project: fmt.Sprintf("%s%d", prefix, time.Now().UnixNano()%1_000_000_000), start: time.Now()}
	st.phase = st.start
	st.env = append(append(os.Environ(),
		"RSC_REDIS_IMAGE="+redisImage, "RSC_COORDINATOR_IMAGE="+image,
		"RSC_BIND=127.0.0.1", "RSC_ADMIN_USER=admin", "RSC_ADMIN_PASSWORD=password"), env...)

	st.run(5*time.Minute, "bash", "docker/build-image.sh")
	t.Cleanup(func() { _ = exec.Command("docker", "image", "rm", image).Run() })
	st.lap("build image")
	t.Cleanup(func() {
		if t.Failed() {
			cmd := exec.Command(st.compose[0], st.dc("logs", "--no-color", "--tail", "50")...)
			cmd.Dir, cmd.Env = st.root, st.env
			out, _ := cmd.CombinedOutput()
			t.Logf("compose logs:\n%s", out)
		}
		down := time.Now()
		cmd := exec.Command(st.compose[0], st.dc("down", "-v", "--remove-orphans", "-t", "5")...)
		cmd.Dir, cmd.Env = st.root, st.env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("compose down: %v\n%s", err, composeTail(out))
		}
		t.Logf("%-28s %6.1fs (total %.1fs)", "compose down -v", time.Since(down).Seconds(), time.Since(st.start).Seconds())
	})
	// up returns once every service it waits on has started.
	st.run(3*time.Minute, st.compose[0], st.dc("up", "-d", "--no-build")...)
	st.lap("compose up -d")
	return st
}

// run runs a command in the repository root with the stack's environment.
func (st *composeStack) run(timeout time.Duration, name string, args ...string) []byte {
	st.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = st.root, st.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		st.t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, composeTail(out))
	}
	return out
}

// dc is the Compose arguments (after the command) for this project and file.
func (st *composeStack) dc(args ...string) []string {
	return append(append(st.compose[1:len(st.compose):len(st.compose)], "-p", st.project, "-f", filepath.Join(st.root, st.file)), args...)
}

// lap logs how long the step since the last lap took.
func (st *composeStack) lap(what string) {
	st.t.Helper()
	st.t.Logf("%-28s %6.1fs", what, time.Since(st.phase).Seconds())
	st.phase = time.Now()
}

// composeRequired reports whether the environment asks for the compose test.
func composeRequired() bool {
	for _, name := range []string{"RSC_COMPOSE_TEST", "RSC_REQUIRE_DOCKER", "CI"} {
		if v := os.Getenv(name); v != "" && v != "0" && v != "false" {
			return true
		}
	}
	return false
}

// composeCommand returns the Compose command: the docker compose plugin when it
// is installed, else the standalone docker-compose (Debian's package).
func composeCommand(t *testing.T) []string {
	t.Helper()
	if exec.Command("docker", "compose", "version").Run() == nil {
		return []string{"docker", "compose"}
	}
	if path, err := exec.LookPath("docker-compose"); err == nil {
		return []string{path}
	}
	t.Fatal("TestIntegrationCompose needs Docker Compose: neither `docker compose` nor `docker-compose` works here; install one (Debian: apt-get install docker-compose)")
	return nil
}

func composeFreePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// composeWaitHTTP polls url until it answers 200.
func composeWaitHTTP(t *testing.T, url string, timeout time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 within %s (last: %s)", url, timeout, last)
}

// composeRequest sends body (JSON, may be empty) with Basic admin:password when auth.
func composeRequest(t *testing.T, method, url, body string, auth bool) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth {
		req.SetBasicAuth("admin", "password")
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// composeTail keeps the end of long command output.
func composeTail(b []byte) []byte {
	const n = 4000
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
