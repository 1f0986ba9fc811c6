package faultproxy_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/faultproxy"
	"github.com/rscoord/rsc/internal/redistest"
)

// through returns a client of the server behind a new proxy, with the given
// protocol and retries (-1: none), and a direct client of the server.
func through(t *testing.T, protocol, retries int) (*faultproxy.Proxy, *redis.Client, *redis.Client) {
	t.Helper()
	srv := redistest.StartProcess(t)
	direct := srv.Client(t)
	p := faultproxy.Start(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), Protocol: protocol, MaxRetries: retries, ReadTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = c.Close() })
	return p, c, direct
}

func TestForwardsBothProtocols(t *testing.T) {
	for _, protocol := range []int{2, 3} {
		t.Run("RESP"+strconv.Itoa(protocol), func(t *testing.T) {
			p, c, _ := through(t, protocol, -1)
			ctx := context.Background()
			if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
				t.Fatalf("GET: %q, %v", v, err)
			}
			// Aggregates of every kind the server sends: arrays, maps (HGETALL
			// in RESP3), nulls, doubles, a big pipeline.
			if err := c.HSet(ctx, "h", "a", "1", "b", "2").Err(); err != nil {
				t.Fatal(err)
			}
			if m, err := c.HGetAll(ctx, "h").Result(); err != nil || len(m) != 2 || m["b"] != "2" {
				t.Fatalf("HGETALL: %v, %v", m, err)
			}
			if err := c.Get(ctx, "missing").Err(); !errors.Is(err, redis.Nil) {
				t.Fatalf("GET missing: %v", err)
			}
			if err := c.ZAdd(ctx, "z", redis.Z{Score: 1.5, Member: "m"}).Err(); err != nil {
				t.Fatal(err)
			}
			if s, err := c.ZScore(ctx, "z", "m").Result(); err != nil || s != 1.5 {
				t.Fatalf("ZSCORE: %v, %v", s, err)
			}
			pipe := c.Pipeline()
			cmds := make([]*redis.IntCmd, 500)
			for i := range cmds {
				cmds[i] = pipe.Incr(ctx, "n")
			}
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatal(err)
			}
			for i, cmd := range cmds {
				if cmd.Val() != int64(i+1) {
					t.Fatalf("reply %d: %d", i, cmd.Val())
				}
			}
			if st := p.Stats(); st.Dropped != 0 || st.Commands < 505 || st.Replies < 505 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// A dropped reply was executed: without retries the client gets an error and
// the write happened; with go-redis's default retries (3) the command ran
// twice and the client saw success — the duplicate idempotent writes prevent.
func TestDropNextAfterExecution(t *testing.T) {
	p, c, direct := through(t, 3, -1)
	ctx := context.Background()
	p.DropNext(1, "incr")
	if err := c.Incr(ctx, "n").Err(); err == nil {
		t.Fatal("the dropped reply reached the client")
	}
	if v := direct.Get(ctx, "n").Val(); v != "1" {
		t.Fatalf("n = %q after the dropped INCR, want 1 (executed once)", v)
	}
	if st := p.Stats(); st.Dropped != 1 || st.Cuts != 1 || p.PendingDrops() != 0 {
		t.Fatalf("stats %+v, pending %d", st, p.PendingDrops())
	}
	// Only the named command: a GET passes, the next INCR's reply is lost.
	p.DropNext(1, "INCR")
	if v, err := c.Get(ctx, "n").Result(); err != nil || v != "1" {
		t.Fatalf("GET: %q, %v", v, err)
	}
	retrying := redis.NewClient(&redis.Options{Addr: p.Addr()}) // MaxRetries 3
	defer retrying.Close()
	v, err := retrying.Incr(ctx, "n").Result()
	if err != nil || v != 3 {
		t.Fatalf("INCR with retries: %d, %v; want 3 (the lost first run and the retry)", v, err)
	}
}

// In a pipeline, the dropped command and the ones sent before it ran; the
// client learns of none of them (go-redis fails the whole pipeline).
func TestDropInsidePipeline(t *testing.T) {
	p, c, direct := through(t, 3, -1)
	ctx := context.Background()
	pipe := c.Pipeline()
	pipe.Set(ctx, "a", "1", 0)
	pipe.Set(ctx, "b", "1", 0)
	incr := pipe.Incr(ctx, "c")
	p.DropNext(1, "INCR")
	if _, err := pipe.Exec(ctx); err == nil || incr.Err() == nil {
		t.Fatalf("pipeline: %v, INCR %v", err, incr.Err())
	}
	if n := direct.Exists(ctx, "a", "b").Val(); n != 2 || direct.Get(ctx, "c").Val() != "1" || p.Stats().Dropped != 1 {
		t.Fatalf("%d of a, b; c = %q; stats %+v", n, direct.Get(ctx, "c").Val(), p.Stats())
	}
}

func TestStallKeepsTheConnectionSilent(t *testing.T) {
	srv := redistest.StartProcess(t)
	p := faultproxy.Start(t, srv.Addr())
	p.SetMode(faultproxy.Stall)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.DropNext(1, "INCR")
	err := c.Incr(ctx, "n").Err()
	var ne interface{ Timeout() bool }
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("INCR on a stalled connection: %v, want a read timeout", err)
	}
	if v := srv.Client(t).Get(ctx, "n").Val(); v != "1" {
		t.Fatalf("n = %q, want 1", v)
	}
	if st := p.Stats(); st.Cuts != 0 || st.Dropped != 1 {
		t.Fatalf("stats %+v: a stall cuts nothing", st)
	}
}

// Random drops are seeded: the same seed drops the same commands of the same
// sequence; every command still runs once.
func TestDropRandomIsSeeded(t *testing.T) {
	run := func() []int {
		p, c, direct := through(t, 3, -1)
		ctx := context.Background()
		p.DropRandom(0.25, 42, "INCR")
		var lost []int
		for i := 0; i < 200; i++ {
			if err := c.Incr(ctx, "n").Err(); err != nil {
				lost = append(lost, i)
			}
		}
		if v := direct.Get(ctx, "n").Val(); v != "200" {
			t.Fatalf("n = %q, want 200: every command ran once", v)
		}
		if st := p.Stats(); st.Dropped != int64(len(lost)) {
			t.Fatalf("stats %+v, %d errors", st, len(lost))
		}
		return lost
	}
	a, b := run(), run()
	if len(a) < 20 || len(a) > 80 {
		t.Fatalf("%d of 200 replies dropped at a share of 0.25", len(a))
	}
	if len(a) != len(b) {
		t.Fatalf("seed 42 dropped %v, then %v", a, b)
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 42 dropped %v, then %v", a, b)
		}
	}
}

func TestCutClosesEveryConnection(t *testing.T) {
	p, c, _ := through(t, 3, -1)
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	raw, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if _, err := raw.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := raw.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
		t.Fatalf("inline PING: %q, %v", buf[:n], err)
	}
	p.Cut()
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := raw.Read(buf); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the cut: %q, %v; want EOF", buf[:n], err)
	}
	// The client's pool notices and connects again.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Cuts != 2 || st.Connections != 3 {
		t.Fatalf("stats %+v: want 2 cuts, 3 connections", st)
	}
}
