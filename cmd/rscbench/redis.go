package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/procs"
	"github.com/rscoord/rsc/redisstore"
)

// redisProcess is a throwaway redis-server on a free loopback port:
// `redis-server --port <free> --save "" --appendonly no`, bound to 127.0.0.1 and
// working in a temporary directory that is removed with it.
type redisProcess struct {
	addr string
	dir  string
	proc *procs.Process
	out  *procs.Output // the server's output, for an error message
}

func startRedis(ctx context.Context) (*redisProcess, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server is not installed (install it, or pass --redis URL): %w", err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		p, err := startRedisOnce(ctx, bin)
		if err == nil {
			return p, nil
		}
		lastErr = err
		if !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	return nil, lastErr
}

func startRedisOnce(ctx context.Context, bin string) (*redisProcess, error) {
	port, err := procs.FreePort()
	if err != nil {
		return nil, fmt.Errorf("pick a free port: %w", err)
	}
	dir, err := os.MkdirTemp("", "rscbench-redis-")
	if err != nil {
		return nil, err
	}
	p := &redisProcess{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir, out: &procs.Output{Max: 64 << 10}}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--bind", "127.0.0.1", "--dir", dir, "--logfile", "")
	cmd.Stdout, cmd.Stderr = p.out, p.out
	// Own process group: a Ctrl-C reaches rscbench, which stops the server itself.
	if p.proc, err = procs.Start(cmd, nil); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	if err := procs.WaitPing(ctx, p.addr, 10*time.Second, p.proc.Done()); err != nil {
		p.Stop()
		if errors.Is(err, procs.ErrExited) {
			return nil, fmt.Errorf("redis-server on %s exited: %s", p.addr, strings.TrimSpace(p.out.String()))
		}
		return nil, fmt.Errorf("redis-server on %s does not answer PING: %w", p.addr, err)
	}
	return p, nil
}

// URL is the server's redis:// URL.
func (p *redisProcess) URL() string { return "redis://" + p.addr + "/0" }

// Stop terminates the server (SIGTERM, then SIGKILL) and removes its directory.
func (p *redisProcess) Stop() {
	p.proc.Stop(5 * time.Second)
	os.RemoveAll(p.dir)
}

// store is the Redis a run writes to. Every key it creates is under a per-run
// namespace and removed by cleanup, so --redis may name a shared server.
type store struct {
	rdb     *redis.Client
	proc    *redisProcess // nil with --redis
	version string
	url     string // the server's URL (member processes connect to it)
	ns      string // key namespace, "rscbench:<run>"
	prefix  string // stream-prefix namespace, "rscbench-<run>"
	keys    []string
	logs    []*redisstore.Log
}

func openStore(ctx context.Context, url string) (*store, error) {
	s := &store{}
	if url == "" {
		p, err := startRedis(ctx)
		if err != nil {
			return nil, err
		}
		s.proc, url = p, p.URL()
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		s.close(ctx)
		return nil, fmt.Errorf("--redis: %w", err)
	}
	s.url = url
	s.rdb = redis.NewClient(opts)
	info, err := s.rdb.Info(ctx, "server").Result()
	if err != nil {
		s.close(ctx)
		return nil, fmt.Errorf("connect to redis: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			s.version = v
		}
	}
	var run [4]byte
	_, _ = rand.Read(run[:])
	s.ns = "rscbench:" + hex.EncodeToString(run[:])
	s.prefix = "rscbench-" + hex.EncodeToString(run[:])
	return s, nil
}

func (s *store) source() string {
	if s.proc != nil {
		return "throwaway redis-server " + s.proc.addr
	}
	return "--redis"
}

// key returns a namespaced key and remembers it for cleanup.
func (s *store) key(name string) string {
	k := s.ns + ":" + name
	s.track(k)
	return k
}

func (s *store) track(keys ...string) { s.keys = append(s.keys, keys...) }

// trackLog remembers a log whose history index and trim record must go
// with it.
func (s *store) trackLog(l *redisstore.Log) {
	s.logs = append(s.logs, l)
	s.track(l.TrimKey())
}

// indexKeys lists the history index keys of every tracked log.
func (s *store) indexKeys(ctx context.Context) []string {
	var out []string
	for _, l := range s.logs {
		if keys, err := l.IndexKeys(ctx); err == nil {
			out = append(out, keys...)
		}
	}
	return out
}

// drop removes keys now (UNLINK frees large streams in the background).
func (s *store) drop(ctx context.Context, keys ...string) error {
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		if err := s.rdb.Unlink(ctx, keys[:n]...).Err(); err != nil {
			return fmt.Errorf("unlink %d keys: %w", n, err)
		}
		keys = keys[n:]
	}
	return nil
}

// close removes every key the run created and stops the throwaway server.
func (s *store) close(ctx context.Context) error {
	var err error
	if s.rdb != nil {
		if s.proc == nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			err = s.drop(cctx, append(s.keys, s.indexKeys(cctx)...)...)
			cancel()
		}
		err = errors.Join(err, s.rdb.Close())
	}
	if s.proc != nil {
		s.proc.Stop()
	}
	return err
}
