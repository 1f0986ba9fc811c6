package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// process is a child process the demo started and must stop.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

func startProcess(name string, cmd *exec.Cmd) (*process, error) {
	// Own process group: a Ctrl-C on the demo reaches the demo, which then
	// stops its children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// stop sends SIGTERM, waits up to grace, then kills.
func (p *process) stop(grace time.Duration) {
	if p == nil {
		return
	}
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis runs a throwaway redis-server (no persistence) on a free port.
func startRedis(ctx context.Context, dir string) (*process, string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, "", errors.New("redis-server is not installed: run `make demo` (it installs it with apt-get), or `apt-get install -y redis-server`, or pass --redis URL")
	}
	port, err := freePort()
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
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port)})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := rdb.Ping(ctx).Err(); err == nil {
			return p, url, nil
		}
		if p.exited() || time.Now().After(deadline) {
			p.stop(time.Second)
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return nil, "", fmt.Errorf("redis-server did not start:\n%s", log)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	port, err := freePort()
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
	deadline := time.Now().Add(20 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, base, nil
			}
		}
		if p.exited() || time.Now().After(deadline) || ctx.Err() != nil {
			p.stop(time.Second)
			return nil, "", fmt.Errorf("coordinator did not become ready:\n%s", tail(logPath, 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
