package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestIntegrationReadmeWalkthrough runs the README's walk-through as a reader
// would: its shell block, on a fresh Redis and a coordinator it builds itself.
// Only the ports change (6379 and 8080 may be taken here), it runs in a
// folder of its own (go builds from the checkout, into that folder), and the
// one placeholder, <event id>, is given a real id. Every curl fails the run on an
// HTTP error (--fail-with-body), so a command the README shows that no longer
// works fails this test.
func TestIntegrationReadmeWalkthrough(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binaries and runs the walk-through")
	}
	for _, tool := range []string{"bash", "curl", "redis-server", "redis-cli", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the walk-through needs %s on PATH: %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := walkthroughBlock(t, string(readme))

	redisPort, httpPort := freePort(t), freePort(t)
	tmp := t.TempDir()
	script := strings.NewReplacer(
		"6379", fmt.Sprint(redisPort),
		"8080", fmt.Sprint(httpPort),
		// The built binaries go to a temporary folder, not the checkout's bin/.
		"go build -o bin/", "go build -C "+root+" -o "+tmp+"/bin/",
		"go run ./cmd/", "go run -C "+root+" ./cmd/",
		"./bin/", tmp+"/bin/",
		"<event id>", `'"$EVENT_ID"'`,
	).Replace(block)
	// The first event of the group's history stands in for <event id>.
	script = strings.Replace(script, "\ncurl -s $A 'localhost:"+fmt.Sprint(httpPort)+"/coord/v1/monitoring/streams/orders/groups/orders-consumer/replay",
		"\nEVENT_ID=$(command curl -s $A 'localhost:"+fmt.Sprint(httpPort)+"/coord/v1/monitoring/streams/orders/groups/orders-consumer/events?limit=1' | grep -o '\"id\":\"[^\"]*\"' | head -n1 | cut -d'\"' -f4)\n"+
			"test -n \"$EVENT_ID\"\n"+
			"curl -s $A 'localhost:"+fmt.Sprint(httpPort)+"/coord/v1/monitoring/streams/orders/groups/orders-consumer/replay", 1)
	if !strings.Contains(script, "EVENT_ID=$(") {
		t.Fatal("the walk-through no longer replays a group at an event id: update this test with it")
	}
	// It runs in a folder of its own, so that what Redis writes there goes
	// with it; go builds and runs in the checkout (-C).
	prelude := `set -euo pipefail
# Every curl of the walk-through fails on an HTTP error, and waits for a
# coordinator that is still starting.
curl() { command curl --fail-with-body --retry 600 --retry-connrefused --retry-delay 1 --retry-max-time 600 "$@"; echo; }
`
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", prelude+script)
	cmd.Env = append(os.Environ(), "RSC_REDIS=")
	cmd.Dir = tmp
	// Its own process group, so the coordinator it leaves in the background
	// goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t.Cleanup(func() {
		_ = exec.Command("redis-cli", "-p", fmt.Sprint(redisPort), "shutdown", "nosave").Run()
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})
	// The coordinator left in the background holds the output open: Wait
	// stops reading it shortly after the script itself ended.
	cmd.WaitDelay = 2 * time.Second
	err = cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success() {
		err = nil
	}
	if err != nil {
		t.Fatalf("the README's walk-through failed: %v\nscript:\n%s\noutput:\n%s", err, script, out.String())
	}
	got := out.String()
	for _, want := range []string{`"status":"READY"`, `"streamPrefix":"orders"`, `"shardCount":8`, `"requestedBy":"alice"`} {
		if !strings.Contains(got, want) {
			t.Errorf("the walk-through's output lacks %s:\n%s", want, got)
		}
	}
}

// walkthroughBlock is the first sh block under the README's walk-through heading.
func walkthroughBlock(t *testing.T, readme string) string {
	t.Helper()
	i := strings.Index(readme, "## A walk-through with curl")
	if i < 0 {
		t.Fatal("README.md has no section \"A walk-through with curl\"")
	}
	m := regexp.MustCompile("(?s)```sh\n(.*?)```").FindStringSubmatch(readme[i:])
	if m == nil {
		t.Fatal("the walk-through has no sh block")
	}
	return m[1]
}
