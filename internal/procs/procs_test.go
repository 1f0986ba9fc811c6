package procs

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func TestTailKeepsTheLastLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var data []byte
	for i := 1; i <= 5; i++ {
		data = append(data, strconv.Itoa(i)+"\n"...)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Tail(path, 2); got != "4\n5" {
		t.Errorf("Tail(2) = %q, want %q", got, "4\n5")
	}
	if got := Tail(path, 9); got != "1\n2\n3\n4\n5" {
		t.Errorf("Tail(9) = %q, want every line", got)
	}
	if got := Tail(filepath.Join(t.TempDir(), "missing"), 2); got != "" {
		t.Errorf("Tail of a missing file = %q, want empty", got)
	}
}

func TestFreePortCanBeListenedOn(t *testing.T) {
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("listen on the free port %d: %v", port, err)
	}
	l.Close()
}

func TestPollWaitsForReady(t *testing.T) {
	var calls atomic.Int32
	err := Poll(context.Background(), 5*time.Second, nil, func(context.Context) error {
		if calls.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls.Load() != 3 {
		t.Fatalf("Poll = %v after %d calls, want nil after 3", err, calls.Load())
	}
}

func TestPollGivesUp(t *testing.T) {
	notYet := errors.New("not yet")
	never := func(context.Context) error { return notYet }
	if err := Poll(context.Background(), 0, nil, never); !errors.Is(err, notYet) {
		t.Errorf("after the timeout: %v, want the last error", err)
	}
	exited := make(chan struct{})
	close(exited)
	if err := Poll(context.Background(), time.Hour, exited, never); !errors.Is(err, ErrExited) {
		t.Errorf("exited: %v, want ErrExited", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Poll(ctx, time.Hour, nil, never); !errors.Is(err, context.Canceled) || !errors.Is(err, notYet) {
		t.Errorf("ctx done: %v, want context.Canceled and the last error", err)
	}
}

func TestWaitReadyzWantsOK(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" || !ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	if err := WaitReadyz(context.Background(), srv.URL, 50*time.Millisecond, nil); err == nil {
		t.Fatal("503: want an error")
	}
	ready.Store(true)
	if err := WaitReadyz(context.Background(), srv.URL, 5*time.Second, nil); err != nil {
		t.Fatalf("200: %v", err)
	}
}

func TestProcessStopAndExited(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	p, err := Start(exec.Command(sleep, "60"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Exited() {
		t.Fatal("exited at once")
	}
	p.Stop(5 * time.Second)
	if !p.Exited() {
		t.Fatal("still running after Stop")
	}
	if p.Cmd.ProcessState.Sys() == nil {
		t.Fatal("not reaped")
	}
	p.Stop(time.Second) // a stopped process is left alone
	var nilProc *Process
	nilProc.Stop(time.Second)
}

func TestStartDrainsBeforeReaping(t *testing.T) {
	cmd := exec.Command("sh", "-c", "echo one; echo two")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var read []byte
	p, err := Start(cmd, func() {
		buf := make([]byte, 64)
		for {
			n, err := out.Read(buf)
			read = append(read, buf[:n]...)
			if err != nil {
				return
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if string(read) != "one\ntwo\n" {
		t.Fatalf("drained %q", read)
	}
}

func TestUntilSignalExitCodes(t *testing.T) {
	if code := UntilSignal("test", func(ctx context.Context) error { return ctx.Err() }); code != 0 {
		t.Errorf("nil error: exit code %d, want 0", code)
	}
	if code := UntilSignal("test", func(context.Context) error { return errors.New("boom") }); code != 1 {
		t.Errorf("an error: exit code %d, want 1", code)
	}
}

func TestOutputKeepsTheFirstBytes(t *testing.T) {
	out := &Output{Max: 5}
	for _, p := range []string{"abc", "def", "ghi"} {
		if n, err := out.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v: want every byte taken", p, n, err)
		}
	}
	if got := out.String(); got != "abcde" {
		t.Fatalf("kept %q, want the first 5 bytes %q", got, "abcde")
	}
}
