package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rscoord/rsc/internal/procs"
)

// process is a child process the demo started and must stop.
type process = procs.Process

func startProcess(name string, cmd *exec.Cmd) (*process, error) {
	p, err := procs.Start(cmd, nil)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return p, nil
}

// startRedis runs a throwaway redis-server (no persistence) on a free port.
func startRedis(ctx context.Context, dir string) (*process, string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, "", errors.New("redis-server is not installed: run `make demo` (it installs it with apt-get), or `apt-get install -y redis-server`, or pass --redis URL")
	}
	port, err := procs.FreePort()
	if err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--protected-mode", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	p, err := startProcess("redis-server", cmd)
	if err != nil {
		return nil, "", err
	}
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	if err := procs.WaitPing(ctx, "127.0.0.1:"+strconv.Itoa(port), 10*time.Second, p.Done()); err != nil {
		p.Stop(time.Second)
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		return nil, "", fmt.Errorf("redis-server did not start:\n%s", log)
	}
	return p, url, nil
}

// goCommand returns the go tool, or "" when there is none.
func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if st, err := os.Stat("/usr/local/go/bin/go"); err == nil && !st.IsDir() {
		return "/usr/local/go/bin/go"
	}
	return ""
}

// findBinary returns path if it is a file, else the binary called name beside
// this program (as in the container image), else "".
func findBinary(path, name string) string {
	candidates := []string{path}
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), name))
	}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if st, err := os.Stat(c); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return c
		}
	}
	return ""
}

// ensureBinary finds the binary (see findBinary), else builds pkg into dir.
func ensureBinary(path, name, pkg, dir string) (string, bool, error) {
	if bin := findBinary(path, name); bin != "" {
		return bin, false, nil
	}
	goBin := goCommand()
	if goBin == "" {
		return "", false, fmt.Errorf("no %s binary (%s) and no go tool to build %s", name, path, pkg)
	}
	out := filepath.Join(dir, name)
	build := exec.Command(goBin, "build", "-o", out, pkg)
	if msg, err := build.CombinedOutput(); err != nil {
		return "", false, fmt.Errorf("go build %s: %v\n%s", pkg, err, msg)
	}
	return out, true, nil
}

// coordinatorTimings are the coordinator's flags: short, so the demo's
// handovers and drains take seconds, not minutes.
var coordinatorTimings = []string{"--member-lease", "3s", "--heartbeat-interval", "300ms", "--tick-interval", "200ms", "--rebalance-timeout", "15s"}

// startCoordinator runs the coordinator binary and waits for /readyz.
func startCoordinator(ctx context.Context, bin, redisURL, logStream, logPath string) (*process, string, error) {
	port, err := procs.FreePort()
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	args := append([]string{"--listen", addr, "--redis", redisURL, "--log-stream", logStream, "--log-level", "info"}, coordinatorTimings...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := startProcess("coordinator", cmd)
	if err != nil {
		return nil, "", err
	}
	base := "http://" + addr
	if err := procs.WaitReadyz(ctx, base, 20*time.Second, p.Done()); err != nil {
		p.Stop(time.Second)
		return nil, "", fmt.Errorf("coordinator did not become ready:\n%s", procs.Tail(logPath, 20))
	}
	return p, base, nil
}
