// Package procs holds what the repository's programs share about
// processes: a main that runs until SIGTERM or an interrupt, and, for those
// that start other programs (the demo, the soak and rscbench), a free
// loopback port, a child in its own process group that can be stopped,
// polling for readiness with a deadline, and the tail of a log file for an
// error message.
package procs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrExited is what the waits return when the process exited before it was ready.
var ErrExited = errors.New("process exited")

// pollEvery is the pause between two readiness checks.
const pollEvery = 20 * time.Millisecond

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Tail returns the last n lines of a file ("" when it cannot be read).
func Tail(path string, n int) string {
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

// Output keeps the first Max bytes written to it: a child's output, for an
// error message. It is safe for concurrent use.
type Output struct {
	Max int

	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Output) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.Max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// String is what was kept.
func (b *Output) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Process is a child started in its own process group, so that a Ctrl-C on
// the parent reaches only the parent, which then stops its children in order.
type Process struct {
	Cmd  *exec.Cmd
	done chan struct{}
}

// Start starts cmd in its own process group and reaps it when it exits.
// drain, if not nil, runs first in the goroutine that reaps it: it reads a
// pipe of cmd (StdoutPipe) to its end, which must happen before the reaping.
func Start(cmd *exec.Cmd, drain func()) (*Process, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{Cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		if drain != nil {
			drain()
		}
		_ = cmd.Wait()
	}()
	return p, nil
}

// Done is closed once the process has exited and was reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM, waits up to grace, then kills. A nil or exited
// process is left alone.
func (p *Process) Stop(grace time.Duration) {
	if p == nil || p.Exited() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Poll calls ready every 20ms until it returns nil. It gives up with
// ErrExited once exited is closed (a nil channel never is), and with the
// last error of ready once timeout has passed or ctx is done.
func Poll(ctx context.Context, timeout time.Duration, exited <-chan struct{}, ready func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return ErrExited
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(pollEvery):
		}
	}
}

// WaitReadyz polls GET base+"/readyz" (a coordinator) until it answers 200;
// see Poll.
func WaitReadyz(ctx context.Context, base string, timeout time.Duration, exited <-chan struct{}) error {
	hc := &http.Client{Timeout: time.Second}
	return Poll(ctx, timeout, exited, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /readyz: %s", resp.Status)
		}
		return nil
	})
}

// WaitPing polls the Redis server at addr with PING until it answers; see Poll.
func WaitPing(ctx context.Context, addr string, timeout time.Duration, exited <-chan struct{}) error {
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	return Poll(ctx, timeout, exited, func(ctx context.Context) error { return rdb.Ping(ctx).Err() })
}

// Main is a program's main: run gets the command line's arguments, stdout,
// stderr and a context that SIGTERM or an interrupt cancels (see
// WithSignals); the process exits with the code it returns.
func Main(run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	os.Exit(WithSignals(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Stdout, os.Stderr) }))
}

// WithSignals runs run with a context that SIGTERM or an interrupt cancels,
// and returns its exit code.
func WithSignals(run func(ctx context.Context) int) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx)
}

// UntilSignal is the body of a child program's main (see WithSignals): it
// returns 0 when run returns nil, else 1 after printing the error, after
// name, to stderr.
func UntilSignal(name string, run func(ctx context.Context) error) int {
	return WithSignals(func(ctx context.Context) int {
		if err := run(ctx); err != nil {
			fmt.Fprintln(os.Stderr, name+":", err)
			return 1
		}
		return 0
	})
}
