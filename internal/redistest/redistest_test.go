package redistest_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
)

// exercise pings the server, writes a key, restarts the server and checks
// that it answers again at the address it reports (and that data is gone or
// kept, as the server's persistence setting says).
func exercise(t *testing.T, s *redistest.Server, containerKind, persistent bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if !strings.HasPrefix(s.URL(), "redis://"+s.Addr()+"/0") {
		t.Fatalf("URL() = %q, want redis://%s/0", s.URL(), s.Addr())
	}
	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", s.URL(), err)
	}
	if opt.Addr != s.Addr() {
		t.Fatalf("ParseURL(URL()).Addr = %q, want %q", opt.Addr, s.Addr())
	}

	c := s.Client(t)
	if got, err := c.Ping(ctx).Result(); err != nil || got != "PONG" {
		t.Fatalf("PING = %q, %v; want PONG", got, err)
	}
	if err := c.Set(ctx, "redistest:key", "value", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got, err := c.Get(ctx, "redistest:key").Result(); err != nil || got != "value" {
		t.Fatalf("GET = %q, %v; want value", got, err)
	}

	before := s.Addr()
	s.Restart(t)
	t.Logf("address before restart %s, after %s", before, s.Addr())

	// The same client reconnects (its pool's old connections are dead, so
	// allow a retry or two).
	var pingErr error
	for range 5 {
		if pingErr = c.Ping(ctx).Err(); pingErr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if pingErr != nil {
		t.Fatalf("PING after restart: %v", pingErr)
	}
	// A fresh client on the reported address works too.
	fresh := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer fresh.Close()
	if err := fresh.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING on fresh client at %s after restart: %v", s.Addr(), err)
	}

	got, err := fresh.Get(ctx, "redistest:key").Result()
	switch {
	case persistent && (err != nil || got != "value"):
		t.Fatalf("GET after restart of a persistent server = %q, %v; want value", got, err)
	case !persistent && !errors.Is(err, redis.Nil):
		t.Fatalf("GET after restart of a non-persistent server = %q, %v; want redis.Nil", got, err)
	}

	// Stop and Start by hand.
	s.Stop(t)
	s.Stop(t) // no-op
	if conn, err := net.DialTimeout("tcp", s.Addr(), time.Second); err == nil {
		conn.Close()
		if !containerKind {
			// Docker's port proxy may accept even with nothing behind it;
			// a process that is gone cannot.
			t.Fatalf("connect to stopped server at %s succeeded", s.Addr())
		}
	}
	s.Start(t)
	s.Start(t) // no-op
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Stop+Start: %v", err)
	}
}

func TestIntegrationContainer(t *testing.T) {
	s := redistest.Start(t)
	exercise(t, s, true, false)
}

func TestIntegrationContainerPersistent(t *testing.T) {
	s := redistest.Start(t, redistest.WithArgs("--appendonly", "yes"))
	exercise(t, s, true, true)
}

func TestProcess(t *testing.T) {
	s := redistest.StartProcess(t)
	exercise(t, s, false, false)
}

func TestProcessPersistent(t *testing.T) {
	s := redistest.StartProcess(t, redistest.WithArgs("--appendonly", "yes"))
	exercise(t, s, false, true)
}

func TestProcessesAreIndependent(t *testing.T) {
	ctx := context.Background()
	a := redistest.StartProcess(t)
	b := redistest.StartProcess(t)
	if a.Addr() == b.Addr() {
		t.Fatalf("two servers share address %s", a.Addr())
	}
	if err := a.Client(t).Set(ctx, "k", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := b.Client(t).Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k on b = %v, want redis.Nil", err)
	}
}
