package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rscoord/rsc/internal/procs"
)

// CoordinatorTimings are the coordinator flags of the scenario: short leases and
// ticks so handovers take a fraction of a second, and frequent snapshots so a
// restart restores a snapshot and folds a tail.
var CoordinatorTimings = []string{
	"--member-lease", "2s", "--tick-interval", "100ms", "--heartbeat-interval", "200ms", "--rebalance-timeout", "5s",
	"--snapshot-every", "25", "--snapshot-min-interval", "-1s", "--metrics-interval", "-1s",
}

// CoordinatorProcess is the coordinator binary run as a child process on a fixed
// address and log stream, so that a restart serves the same URL from the same log.
type CoordinatorProcess struct {
	Bin       string
	RedisURL  string
	LogStream string
	Addr      string   // host:port
	Args      []string // extra flags (default CoordinatorTimings)
	LogPath   string   // every incarnation appends here

	mu         sync.Mutex
	proc       *procs.Process // nil while none runs
	starts     int
	crashAfter string // armed for the next start
	armed      string // armed in the running process
}

// ArmCrash makes the next start run with the --crash-after-event hook: that
// process exits with status 137 right after appending an event of this type.
func (c *CoordinatorProcess) ArmCrash(eventType string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.crashAfter = eventType
}

// Exited reports whether the running coordinator process exited by itself,
// with its exit status and the crash hook it was armed with ("" if none).
// Kill, Stop or Start clear it.
func (c *CoordinatorProcess) Exited() (exited bool, status string, armed string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil || !c.proc.Exited() {
		return false, "", ""
	}
	proc, hook := c.proc, c.armed
	c.proc, c.armed = nil, ""
	return true, proc.Cmd.ProcessState.String(), hook
}

// Process is what a Round kills and restarts: one Coordinator, or a
// ReplicaSet of them on one log.
type Process interface {
	URL() string // base URL (a ReplicaSet: every replica's, comma-separated)
	Start(ctx context.Context) error
	Kill()
	ArmCrash(eventType string)
	Exited() (exited bool, status string, armed string)
	Tail(n int) string // the last lines of its log(s)
	Stream() string    // the event log's key
}

// Tail is the last n lines of the coordinator's log file.
func (c *CoordinatorProcess) Tail(n int) string { return procs.Tail(c.LogPath, n) }

// Stream is the event log's key.
func (c *CoordinatorProcess) Stream() string { return c.LogStream }

// URL is the coordinator's base URL.
func (c *CoordinatorProcess) URL() string { return "http://" + c.Addr }

// Running reports whether a coordinator process is up.
func (c *CoordinatorProcess) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc != nil
}

// Start starts the coordinator (if it is not running) and waits until /readyz is 200.
func (c *CoordinatorProcess) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil && !c.proc.Exited() { // exited by itself: start it again
		return nil
	}
	logf, err := os.OpenFile(c.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	c.starts++
	fmt.Fprintf(logf, "----- chaos: coordinator start #%d at %s\n", c.starts, time.Now().Format(time.RFC3339Nano))
	args := append([]string{"--listen", c.Addr, "--redis", c.RedisURL, "--log-stream", c.LogStream, "--coordinator-id", "chaos-" + strconv.Itoa(c.starts)}, c.args()...)
	if c.crashAfter != "" {
		args = append(args, "--crash-after-event", c.crashAfter)
		fmt.Fprintf(logf, "----- chaos: armed to crash after %s\n", c.crashAfter)
	}
	c.armed, c.crashAfter = c.crashAfter, ""
	cmd := exec.Command(c.Bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	proc, err := procs.Start(cmd, nil)
	_ = logf.Close() // the child holds its own copy
	if err != nil {
		return fmt.Errorf("start coordinator: %w", err)
	}
	c.proc = proc
	err = procs.WaitReadyz(ctx, c.URL(), 30*time.Second, proc.Done())
	switch {
	case errors.Is(err, procs.ErrExited):
		c.proc = nil
		return fmt.Errorf("coordinator exited at start (%v):\n%s", cmd.ProcessState, procs.Tail(c.LogPath, 20))
	case err != nil:
		return fmt.Errorf("coordinator not ready after 30s:\n%s", procs.Tail(c.LogPath, 20))
	}
	return nil
}

func (c *CoordinatorProcess) args() []string {
	if c.Args != nil {
		return c.Args
	}
	return CoordinatorTimings
}

// Kill sends SIGKILL and waits for the process to be gone.
func (c *CoordinatorProcess) Kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return
	}
	c.proc.Kill()
	c.proc, c.armed = nil, ""
}

// Signal sends sig to the running process (SIGSTOP and SIGCONT pause and
// resume it); false when none runs.
func (c *CoordinatorProcess) Signal(sig syscall.Signal) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return false
	}
	return c.proc.Cmd.Process.Signal(sig) == nil
}

// Stop sends SIGTERM (snapshot and exit), then SIGKILL after 10s.
func (c *CoordinatorProcess) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return
	}
	c.proc.Stop(10 * time.Second)
	c.proc, c.armed = nil, ""
}

// RedisServer is a redis-server child process with AOF on, restartable on the
// same port and data directory (cmd/soak; tests use internal/redistest).
type RedisServer struct {
	Bin  string
	Dir  string
	Port int

	mu   sync.Mutex
	proc *procs.Process // nil while stopped
}

// StartRedis starts redis-server --appendonly yes on a free loopback port.
func StartRedis(dir string) (*RedisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server is not installed (apt-get install -y redis-server)")
	}
	port, err := procs.FreePort()
	if err != nil {
		return nil, err
	}
	r := &RedisServer{Bin: bin, Dir: dir, Port: port}
	return r, r.start()
}

// Addr is host:port.
func (r *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

// URL is redis://host:port/0.
func (r *RedisServer) URL() string { return "redis://" + r.Addr() + "/0" }

func (r *RedisServer) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	cmd := exec.Command(r.Bin, "--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--daemonize", "no", "--dir", r.Dir, "--logfile", filepath.Join(r.Dir, "redis.log"),
		"--save", "", "--appendonly", "yes", "--appendfsync", "everysec")
	proc, err := procs.Start(cmd, nil)
	if err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	r.proc = proc
	err = procs.WaitPing(context.Background(), r.Addr(), 30*time.Second, proc.Done())
	switch {
	case errors.Is(err, procs.ErrExited):
		r.proc = nil
		return fmt.Errorf("redis-server exited at start:\n%s", procs.Tail(filepath.Join(r.Dir, "redis.log"), 20))
	case err != nil:
		return fmt.Errorf("redis-server did not answer PING in 30s:\n%s", procs.Tail(filepath.Join(r.Dir, "redis.log"), 20))
	}
	return nil
}

// Restart stops Redis with SIGTERM (it fsyncs the AOF) and starts it again on
// the same port and directory.
func (r *RedisServer) Restart() error {
	r.Stop()
	return r.start()
}

// Stop sends SIGTERM and waits (SIGKILL after 10s).
func (r *RedisServer) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return
	}
	r.proc.Stop(10 * time.Second)
	r.proc = nil
}
