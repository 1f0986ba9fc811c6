// Package redistest gives tests a throwaway Redis server.
//
// Two kinds of server share one API ([Server]):
//
//   - [Start] runs Redis in a Docker container through testcontainers-go.
//     The image comes from the environment variable RSC_REDIS_IMAGE; when it
//     is unset, the local image "rsc-redis:7" (built by .ci/setup.sh from the
//     machine's own redis-server) is used if present, and "redis:7" otherwise.
//   - [StartProcess] runs a local redis-server process on a free loopback
//     port, for tests that must not depend on Docker.
//
// Both are stopped and removed by tb.Cleanup. Both start Redis with
// `--save "" --appendonly no`, so data does not survive [Server.Restart];
// pass [WithArgs]("--appendonly", "yes") for a server that keeps its data
// across restarts (the data directory is kept for the server's lifetime).
//
// When Docker (or, for StartProcess, the redis-server binary) is missing, the
// test is skipped with a message, unless the environment says it must run:
// RSC_REQUIRE_DOCKER=1 or CI set (any non-empty value but "false" and "0")
// turn the skip into a failure. [Start] also skips in testing.Short mode;
// [StartProcess] does not, as it is cheap.
//
// The engine under test. The engine matrix (make test-engines, .ci/engines.sh)
// runs the same tests on several Redis and Valkey versions: RSC_REDIS_IMAGE
// names the engine's image for [Start], and RSC_REDIS_BIN_DIR a directory
// holding its redis-server, redis-cli and redis-sentinel for [StartProcess],
// [StartCluster] and [StartSentinel] (without it they come from PATH; with it
// a program missing there fails the test rather than run another engine).
// RSC_REDIS_ENGINE names the engine in test output ([Engine]).
//
// The Makefile at the repository root exports RSC_REDIS_IMAGE,
// TESTCONTAINERS_RYUK_DISABLED and TESTCONTAINERS_HOST_OVERRIDE; when they are
// unset, [Start] sets TESTCONTAINERS_RYUK_DISABLED=true and
// TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1 in the process environment before
// its first use of testcontainers, because no image registry is reachable to
// pull the Ryuk image.
package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/rscoord/rsc/internal/procs"
)

const (
	// DefaultImage is the image used when RSC_REDIS_IMAGE is unset and the
	// local image [LocalImage] does not exist.
	DefaultImage = "redis:7"
	// LocalImage is the image .ci/setup.sh builds from the machine's own
	// redis-server; preferred over DefaultImage when RSC_REDIS_IMAGE is unset.
	LocalImage = "rsc-redis:7"

	redisPort      = "6379/tcp"
	startTimeout   = 60 * time.Second
	stopTimeout    = 10 * time.Second
	readyTimeout   = 30 * time.Second
	portAttempts   = 3
	maxOutputBytes = 64 << 10
)

// Option changes how a server is started.
type Option func(*config)

type config struct {
	args []string
	// engine: run this engine's programs rather than the engine under test
	// (OnEngine).
	engine string
	tls    *TLSCerts
	// tlsClients: the server requires a client certificate.
	tlsClients bool
}

// WithArgs appends command-line arguments for redis-server, after the
// defaults (`--save "" --appendonly no`), so they can override them.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// OnEngine runs a process ([StartProcess]) of the named engine of the engine
// matrix (.ci/engines.sh: "redis86"), whichever engine is under test: for
// tests of what only that engine has. Its programs are those .ci/engines.sh
// build left in $RSC_ENGINE_CACHE/<engine>/bin (default
// ~/.cache/rsc-engines); when they are missing the test is skipped, or fails
// as for a missing redis-server (RSC_REQUIRE_DOCKER=1 or CI). The engine
// under test's own name runs the engine under test.
func OnEngine(name string) Option {
	return func(c *config) { c.engine = name }
}

// engineBinary is program of engine: the engine under test's (Binary), or
// that of another engine of the matrix from the engines' cache.
func engineBinary(engine, program string) (string, error) {
	if engine == "" || engine == Engine() {
		return Binary(program)
	}
	cache := os.Getenv("RSC_ENGINE_CACHE")
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("engine %s: no cache directory: %v", engine, err)
		}
		cache = filepath.Join(dir, "rsc-engines")
	}
	p := filepath.Join(cache, engine, "bin", program)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("engine %s is not built (%s is missing; run bash .ci/engines.sh build %s)", engine, p, engine)
	}
	return p, nil
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		o(&c)
	}
	return c
}

// Server is a running (or stopped) throwaway Redis server.
// Its methods are safe for concurrent use.
type Server struct {
	mu      sync.Mutex
	addr    string // host:port; kept while stopped
	running bool

	// Container kind.
	ctr *tcredis.RedisContainer

	// Process kind.
	bin    string
	port   int
	dir    string
	args   []string
	cmd    *exec.Cmd
	exited chan struct{}
	output *procs.Output
	// conf, when set, is a config file written before every start and passed
	// first (a sentinel's, which Sentinel rewrites as it learns).
	conf       func(port int) string
	tls        *TLSCerts // TLS only (--port 0 --tls-port)
	tlsClients bool
}

// Addr returns the server's host:port. For a container, it is the host port
// Docker mapped to 6379. [Start] pins that host port, so it normally stays
// the same across [Server.Restart], but Docker may hand out another one
// (for instance if the port was taken while the container was stopped):
// Addr always returns the port in use after the latest start, so read it
// again after a restart rather than caching it.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URL returns the server's address as redis://host:port/0 (rediss:// for a
// TLS server). Like [Server.Addr], read it again after a restart.
func (s *Server) URL() string {
	if s.tls != nil {
		return "rediss://" + s.Addr() + "/0"
	}
	return "redis://" + s.Addr() + "/0"
}

// Client returns a go-redis client for the server, closed by tb.Cleanup.
// It dials [Server.Addr] afresh on every new connection, so it follows the
// server across restarts even if the port changes.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	var d net.Dialer
	tc := s.clientTLS()
	c := redis.NewClient(&redis.Options{
		Addr: s.Addr(),
		DB:   0,
		Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, s.Addr())
			if err != nil || tc == nil {
				return conn, err
			}
			return tlsClient(ctx, conn, tc)
		},
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Restart stops the server and starts it again (the same container, or a new
// process on the same port and data directory), then waits until it answers
// PING. Unless the server was started with persistence (see [WithArgs]),
// its data is lost.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop(tb)
	s.Start(tb)
}

// Stop stops the server; [Server.Start] starts it again. Stopping a stopped
// server does nothing.
func (s *Server) Stop(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return
	}
	var err error
	if s.ctr != nil {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout+30*time.Second)
		defer cancel()
		timeout := stopTimeout
		err = s.ctr.Stop(ctx, &timeout)
	} else {
		err = s.stopProcessLocked()
	}
	if err != nil {
		tb.Fatalf("redistest: stop redis: %v", err)
	}
	s.running = false
}

// Start starts a stopped server again and waits until it answers PING.
// Starting a running server does nothing.
func (s *Server) Start(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return
	}
	var err error
	if s.ctr != nil {
		err = s.startContainerLocked()
	} else {
		err = s.startProcessLocked()
	}
	if err != nil {
		tb.Fatalf("redistest: start redis again: %v", err)
	}
	s.running = true
}

// ---------------------------------------------------------------------------
// Environment.

// required reports whether a missing Docker or redis-server must fail the
// test instead of skipping it.
func required() bool {
	return truthy(os.Getenv("RSC_REQUIRE_DOCKER")) || truthy(os.Getenv("CI"))
}

func truthy(v string) bool {
	v = strings.TrimSpace(strings.ToLower(v))
	return v != "" && v != "0" && v != "false" && v != "no"
}

// unavailable skips the test, or fails it when the environment requires it.
func unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if required() {
		tb.Fatalf("redistest: %s (required because RSC_REQUIRE_DOCKER=1 or CI is set; run .ci/setup.sh)", msg)
	}
	tb.Skipf("redistest: skipping: %s (set RSC_REQUIRE_DOCKER=1 to fail instead; .ci/setup.sh installs it)", msg)
}

// Binary returns the path of a Redis program (redis-server, redis-cli or
// redis-sentinel): the engine's, from RSC_REDIS_BIN_DIR, when it is set, else
// the one on PATH.
func Binary(name string) (string, error) {
	if dir := os.Getenv("RSC_REDIS_BIN_DIR"); dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s of the engine %s is missing (RSC_REDIS_BIN_DIR=%s; .ci/engines.sh build): %v", name, Engine(), dir, err)
		}
		return p, nil
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is not installed: %v", name, err)
	}
	return p, nil
}

// Engine names the engine under test: RSC_REDIS_ENGINE, or "host" (the
// machine's own redis-server, and RSC_REDIS_IMAGE for containers).
func Engine() string {
	if e := os.Getenv("RSC_REDIS_ENGINE"); e != "" {
		return e
	}
	return "host"
}

var envOnce sync.Once

func setTestcontainersDefaults() {
	envOnce.Do(func() {
		for k, v := range map[string]string{
			"TESTCONTAINERS_RYUK_DISABLED": "true",
			"TESTCONTAINERS_HOST_OVERRIDE": "127.0.0.1",
		} {
			if _, ok := os.LookupEnv(k); !ok {
				_ = os.Setenv(k, v)
			}
		}
	})
}

// ---------------------------------------------------------------------------
// Container kind.

// Start starts Redis in a Docker container and returns it once it answers
// PING. The container is removed by tb.Cleanup. See the package comment for
// the image, and for when the test is skipped rather than failed.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	if testing.Short() {
		tb.Skip("redistest: skipping Redis container test in -short mode")
	}
	cfg := newConfig(opts)
	setTestcontainersDefaults()

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	provider, err := dockerProvider(tb)
	if err != nil {
		unavailable(tb, "docker is not available: %v", err)
	}
	defer provider.Close()
	if err := provider.Health(ctx); err != nil {
		unavailable(tb, "docker daemon is not reachable: %v", err)
	}
	// Health closes the provider's client; it is re-created lazily.

	img, imgLocal := chooseImage(ctx, provider)

	s := &Server{}
	var lastErr error
	for attempt := 0; attempt < portAttempts; attempt++ {
		port, err := procs.FreePort()
		if err != nil {
			tb.Fatalf("redistest: pick a free port: %v", err)
		}
		ctr, err := runContainer(ctx, tb, img, port, cfg.args)
		if ctr != nil {
			// Register removal even when the start failed half way.
			tb.Cleanup(func() {
				if err := testcontainers.TerminateContainer(ctr); err != nil {
					tb.Logf("redistest: remove redis container: %v", err)
				}
			})
		}
		if err == nil {
			s.ctr = ctr
			break
		}
		lastErr = err
		if !isPortInUse(err) {
			break
		}
	}
	if s.ctr == nil {
		if !imgLocal {
			unavailable(tb, "image %q is not present locally and could not be started (pulled): %v", img, lastErr)
		}
		tb.Fatalf("redistest: start redis container from %q: %v", img, lastErr)
	}
	if err := s.refreshAddrLocked(ctx); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	if err := waitPing(ctx, s.addr); err != nil {
		tb.Fatalf("redistest: redis container at %s: %v", s.addr, err)
	}
	s.running = true
	return s
}

func dockerProvider(tb testing.TB) (p *testcontainers.DockerProvider, err error) {
	defer func() {
		// testcontainers panics in some no-docker setups.
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return testcontainers.NewDockerProvider(testcontainers.WithLogger(tclog.TestLogger(tb)))
}

// chooseImage returns the image to run and whether it is present locally.
func chooseImage(ctx context.Context, p *testcontainers.DockerProvider) (string, bool) {
	present := func(img string) bool {
		_, err := p.Client().ImageInspect(ctx, img)
		return err == nil
	}
	if img := os.Getenv("RSC_REDIS_IMAGE"); img != "" {
		return img, present(img)
	}
	if present(LocalImage) {
		return LocalImage, true
	}
	return DefaultImage, present(DefaultImage)
}

func runContainer(ctx context.Context, tb testing.TB, img string, hostPort int, args []string) (*tcredis.RedisContainer, error) {
	cmd := append([]string{"--save", "", "--appendonly", "no"}, args...)
	return tcredis.Run(ctx, img,
		testcontainers.WithLogger(tclog.TestLogger(tb)),
		testcontainers.WithCmdArgs(cmd...),
		// Pin the host port so that it survives a restart of the container,
		// and bind it to loopback only.
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			if hc.PortBindings == nil {
				hc.PortBindings = network.PortMap{}
			}
			hc.PortBindings[network.MustParsePort(redisPort)] = []network.PortBinding{{
				HostIP:   netip.MustParseAddr("127.0.0.1"),
				HostPort: strconv.Itoa(hostPort),
			}}
		}),
		// Images built by .ci/setup.sh have no shell, so skip the in-container
		// port check; waitPing checks readiness from outside.
		testcontainers.WithWaitStrategy(
			wait.ForListeningPort(redisPort).SkipInternalCheck().WithStartupTimeout(startTimeout),
			wait.ForLog("Ready to accept connections").WithStartupTimeout(startTimeout),
		),
	)
}

func isPortInUse(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "port is already allocated") ||
		strings.Contains(msg, "address already in use")
}

func (s *Server) startContainerLocked() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.ctr.Start(ctx); err != nil {
		return err
	}
	if err := s.refreshAddrLocked(ctx); err != nil {
		return err
	}
	return waitPing(ctx, s.addr)
}

func (s *Server) refreshAddrLocked(ctx context.Context) error {
	host, err := s.ctr.Host(ctx)
	if err != nil {
		return fmt.Errorf("container host: %w", err)
	}
	port, err := s.ctr.MappedPort(ctx, redisPort)
	if err != nil {
		return fmt.Errorf("container mapped port: %w", err)
	}
	s.addr = net.JoinHostPort(host, port.Port())
	return nil
}

// ---------------------------------------------------------------------------
// Process kind.

// StartProcess starts a local redis-server process on a free loopback port,
// with `--save "" --appendonly no` and a data directory from tb.TempDir, and
// returns it once it answers PING. The process is stopped by tb.Cleanup.
// [Server.Restart] starts a new process on the same port and directory.
// If redis-server is not on PATH, the test is skipped (or failed, see the
// package comment).
func StartProcess(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	cfg := newConfig(opts)
	return startProcess(tb, "redis-server", nil, cfg)
}

// startProcess starts program (redis-server, or redis-sentinel with conf) on
// a free port.
func startProcess(tb testing.TB, program string, conf func(port int) string, cfg config) *Server {
	tb.Helper()
	bin, err := engineBinary(cfg.engine, program)
	if err != nil {
		unavailable(tb, "%v", err)
	}
	s := &Server{bin: bin, dir: tb.TempDir(), args: cfg.args, conf: conf, tls: cfg.tls, tlsClients: cfg.tlsClients}
	tb.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if err := s.stopProcessLocked(); err != nil {
			tb.Logf("redistest: stop redis-server: %v", err)
		}
		s.running = false
	})

	var lastErr error
	for attempt := 0; attempt < portAttempts; attempt++ {
		s.port, err = procs.FreePort()
		if err != nil {
			tb.Fatalf("redistest: pick a free port: %v", err)
		}
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
		s.mu.Lock()
		lastErr = s.startProcessLocked()
		s.mu.Unlock()
		if lastErr == nil {
			s.running = true
			return s
		}
		if !isPortInUse(lastErr) && !strings.Contains(lastErr.Error(), "Address already in use") {
			break
		}
	}
	tb.Fatalf("redistest: start redis-server: %v", lastErr)
	return nil
}

func (s *Server) startProcessLocked() error {
	var args []string
	if s.conf != nil {
		path := filepath.Join(s.dir, "server.conf")
		if err := os.WriteFile(path, []byte(s.conf(s.port)), 0o600); err != nil {
			return err
		}
		args = append(args, path)
	}
	if s.tls != nil {
		args = append(args, "--port", "0", "--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", s.tls.ServerCert, "--tls-key-file", s.tls.ServerKey,
			"--tls-ca-cert-file", s.tls.CA, "--tls-auth-clients", map[bool]string{true: "yes", false: "no"}[s.tlsClients],
			"--tls-replication", "yes")
	} else {
		args = append(args, "--port", strconv.Itoa(s.port))
	}
	args = append(args,
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", s.dir,
		"--logfile", "",
		"--save", "",
		"--appendonly", "no",
	)
	args = append(args, s.args...)
	cmd := exec.Command(s.bin, args...)
	out := &procs.Output{Max: maxOutputBytes}
	cmd.Stdout = out
	cmd.Stderr = out
	// Own process group, so a Ctrl-C on go test does not hit it first and
	// a stop can signal it alone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %s: %w", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited, s.output = cmd, exited, out

	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- waitPingTLS(ctx, s.addr, s.clientTLS()) }()
	select {
	case err := <-ready:
		if err != nil {
			_ = s.stopProcessLocked()
			return fmt.Errorf("redis-server on %s: %w; output:\n%s", s.addr, err, out.String())
		}
		return nil
	case <-exited:
		cancel()
		<-ready
		s.cmd = nil
		return fmt.Errorf("redis-server on %s exited at start (%v); output:\n%s", s.addr, cmd.ProcessState, out.String())
	}
}

// stopProcessLocked sends SIGTERM, then SIGKILL after stopTimeout, and waits
// for the process to exit.
func (s *Server) stopProcessLocked() error {
	if s.cmd == nil {
		return nil
	}
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	select {
	case <-exited:
		return nil
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Process.Signal(syscall.SIGCONT) // a frozen server (Freeze) acts on SIGTERM only then
	select {
	case <-exited:
		return nil
	case <-time.After(stopTimeout):
	}
	_ = cmd.Process.Kill()
	select {
	case <-exited:
		return fmt.Errorf("redis-server on %s ignored SIGTERM for %v and was killed", s.addr, stopTimeout)
	case <-time.After(stopTimeout):
		return fmt.Errorf("redis-server on %s (pid %d) did not exit after SIGKILL", s.addr, cmd.Process.Pid)
	}
}

// ---------------------------------------------------------------------------
// Helpers.

// waitPing polls addr with PING until Redis answers PONG or ctx is done.
// A bare TCP connect is not enough: Docker's port proxy accepts connections
// before Redis listens, and Redis answers LOADING while it reads its data.
func waitPing(ctx context.Context, addr string) error { return waitPingTLS(ctx, addr, nil) }

// waitPingTLS is waitPing over TLS with tc (nil: plain).
func waitPingTLS(ctx context.Context, addr string, tc *tls.Config) error {
	c := redis.NewClient(&redis.Options{
		Addr:            addr,
		DialTimeout:     time.Second,
		ReadTimeout:     time.Second,
		WriteTimeout:    time.Second,
		MaxRetries:      -1,
		PoolSize:        1,
		DisableIdentity: true,
		TLSConfig:       tc,
	})
	defer c.Close()
	var d net.Dialer
	var err error
	for {
		// Dial first: go-redis logs every failed dial of its pool.
		var conn net.Conn
		if conn, err = d.DialContext(ctx, "tcp", addr); err == nil {
			_ = conn.Close()
			err = c.Ping(ctx).Err()
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no PONG before deadline: %w", errors.Join(err, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
