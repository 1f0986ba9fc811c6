package client_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
)

// The integration tests and benchmarks run the real coordinator binary (built
// once per test binary) against a throwaway redis-server, with short timings.

// helperEnv makes the test binary run a member process instead of the tests
// (see runHelperMember): the crash test kills it with SIGKILL.
const helperEnv = "RSC_CLIENT_TEST_MEMBER"

var (
	buildOnce sync.Once
	binDir    string
	coordBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelperMember())
	}
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// coordinatorBinary builds cmd/coordinator once.
func coordinatorBinary(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "rsc-client-test-")
		if buildErr != nil {
			return
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		coordBin = filepath.Join(binDir, "coordinator")
		out, err := exec.Command(goBin, "build", "-o", coordBin, "github.com/rscoord/rsc/cmd/coordinator").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/coordinator: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return coordBin
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// cluster is a redis-server (or a Redis Cluster) and a coordinator process
// using it.
type cluster struct {
	tb    testing.TB
	URL   string
	Redis *redistest.Server // nil on a Redis Cluster
	RDB   *redis.Client     // nil on a Redis Cluster
	// KV is the Redis the shard streams live in, whichever kind.
	KV       redis.UniversalClient
	Admin    *client.Client
	redisURL string
	addr     string
	logPath  string
	logf     *os.File
	// args are flags given to the coordinator after the harness's own
	// (a flag given twice takes the later value).
	args []string

	mu   sync.Mutex
	proc *exec.Cmd // the coordinator process running now
	done chan struct{}
}

func startCluster(tb testing.TB) *cluster {
	tb.Helper()
	return startClusterWith(tb)
}

// startClusterWith is startCluster with more coordinator flags.
func startClusterWith(tb testing.TB, args ...string) *cluster {
	tb.Helper()
	rs := redistest.StartProcess(tb)
	rdb := rs.Client(tb)
	c := bootCluster(tb, rs.URL(), rdb, args...)
	c.Redis, c.RDB = rs, rdb
	return c
}

// bootCluster starts a coordinator on redisURL (a redis:// or
// redis+cluster:// URL) whose shard streams kv reaches, with more flags.
func bootCluster(tb testing.TB, redisURL string, kv redis.UniversalClient, args ...string) *cluster {
	tb.Helper()
	coordinatorBinary(tb)
	addr := "127.0.0.1:" + strconv.Itoa(freePort(tb))
	logPath := filepath.Join(tb.TempDir(), "coordinator.log")
	logf, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	c := &cluster{tb: tb, URL: "http://" + addr, KV: kv, redisURL: redisURL, addr: addr, logPath: logPath, logf: logf, args: args,
		Admin: client.New("http://"+addr, client.BasicAuth{Username: "admin", Password: "password"})}
	tb.Cleanup(func() {
		c.mu.Lock()
		cmd, done := c.proc, c.done
		c.mu.Unlock()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = logf.Close()
		if tb.Failed() {
			c.dumpLog()
		}
	})
	c.startCoordinator()
	return c
}

// startCoordinator runs the coordinator binary on c.addr and waits until it
// is ready.
func (c *cluster) startCoordinator() {
	c.tb.Helper()
	args := append([]string{"--listen", c.addr, "--redis", c.redisURL,
		"--member-lease", "3s", "--tick-interval", "200ms", "--heartbeat-interval", "500ms",
		"--rebalance-timeout", "20s", "--log-level", "info"}, c.args...)
	cmd := exec.Command(coordinatorBinary(c.tb), args...)
	cmd.Stdout, cmd.Stderr = c.logf, c.logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		c.tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.proc, c.done = cmd, done
	c.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(c.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			c.tb.Fatalf("coordinator not ready after 20s: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// restartCoordinator kills the coordinator (SIGKILL: no graceful stop) and
// starts it again on the same address, Redis and event log.
func (c *cluster) restartCoordinator() {
	c.tb.Helper()
	c.mu.Lock()
	cmd, done := c.proc, c.done
	c.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.tb.Fatal(err)
	}
	<-done
	fmt.Fprintf(c.logf, "--- test: coordinator killed (SIGKILL) and started again ---\n")
	c.startCoordinator()
}

func (c *cluster) dumpLog() {
	data, _ := os.ReadFile(c.logPath)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	c.tb.Logf("coordinator log (tail):\n%s", strings.Join(lines, "\n"))
}

// memberCreds hold the MEMBER role heartbeats need (the default admin holds every role).
var memberCreds = client.BasicAuth{Username: "admin", Password: "password"}

// Member is a coordinator client with credentials that hold the MEMBER role.
func (c *cluster) Member() *client.Client { return client.New(c.URL, memberCreds) }

// Reader is a coordinator client with the READ role's credentials (admin here).
func (c *cluster) Reader() *client.Client {
	return client.New(c.URL, client.BasicAuth{Username: "admin", Password: "password"})
}

func (c *cluster) createGroup(prefix, group string, shards int) {
	c.tb.Helper()
	if _, err := c.Admin.CreateGroup(context.Background(), prefix, group, shards, "test"); err != nil {
		c.tb.Fatal(err)
	}
}

// scale reshards and waits until the resharding is DEPRECATED and, for a
// scale-in, the removed shard streams are retired.
func (c *cluster) scale(prefix, group string, from, to int, refresh func()) {
	c.tb.Helper()
	ctx := context.Background()
	m, err := c.Admin.Scale(ctx, prefix, group, to, "test", fmt.Sprintf("test %d -> %d", from, to))
	if err != nil {
		c.tb.Fatal(err)
	}
	if refresh != nil {
		refresh()
	}
	c.waitFor(30*time.Second, fmt.Sprintf("resharding %s (%d -> %d) DEPRECATED", m.ReshardingID, from, to), func() bool {
		got, err := c.Admin.Migration(ctx, prefix, group, m.ReshardingID)
		return err == nil && got.State == "DEPRECATED"
	})
	for i := to; i < from; i++ {
		key := routing.StreamKey(prefix, i)
		c.waitFor(10*time.Second, key+" retired", func() bool {
			n, err := c.KV.Exists(ctx, key).Result()
			return err == nil && n == 0
		})
	}
}

func (c *cluster) waitFor(timeout time.Duration, what string, cond func() bool) {
	c.tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			c.tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitStable waits until the group is STABLE with exactly these live members
// reading every shard, and returns who reads what.
func (c *cluster) waitStable(prefix, group string, members ...string) map[string][]int {
	c.tb.Helper()
	ctx := context.Background()
	var current map[string][]int
	c.waitFor(30*time.Second, fmt.Sprintf("group STABLE with members %v", members), func() bool {
		g, err := c.Admin.Group(ctx, prefix, group)
		if err != nil || g.State != "STABLE" || len(g.TargetAssignmentSummary) != len(members) {
			return false
		}
		for _, m := range members {
			if _, ok := g.TargetAssignmentSummary[m]; !ok {
				return false
			}
		}
		a, err := c.Admin.Assignments(ctx, prefix, group)
		if err != nil {
			return false
		}
		current = map[string][]int{}
		total := 0
		for _, m := range members {
			current[m] = client.Indexes(a.CurrentAssignments[m])
			total += len(current[m])
		}
		return total == g.ShardCount
	})
	return current
}

// memberState returns a member's state as the coordinator sees it.
func (c *cluster) memberState(prefix, group, id string) string {
	ms, err := c.Admin.Members(context.Background(), prefix, group)
	if err != nil {
		return ""
	}
	for _, m := range ms {
		if m.MemberID == id {
			return m.State
		}
	}
	return ""
}

// pendingOn returns the Redis group's pending count per consumer on a shard.
func (c *cluster) pendingOn(key, group string) (int64, map[string]int64) {
	p, err := c.KV.XPending(context.Background(), key, group).Result()
	if err != nil {
		return 0, nil
	}
	return p.Count, p.Consumers
}

// recordingHandler records each message's event id in a Redis set (which
// survives a killed process) and counts per member; sleep slows it down.
func recordingHandler(rdb *redis.Client, consumedKey string, sleep time.Duration) member.Handler {
	return func(ctx context.Context, m member.Message) error {
		if sleep > 0 {
			time.Sleep(sleep)
		}
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.SAdd(ctx, consumedKey, m.Field("eventId"))
			p.HIncrBy(ctx, consumedKey+":by-member", m.MemberID, 1)
			return nil
		})
		return err
	}
}

// loadGenerator publishes batches in the background until stopped, and
// remembers every event id it published.
type loadGenerator struct {
	p      *producer.Producer
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	ids    []string
	errs   []error
	nextID int
}

func startLoad(tb testing.TB, p *producer.Producer, batch int, every time.Duration) *loadGenerator {
	g := &loadGenerator{p: p, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-t.C:
			}
			msgs := make([]producer.Message, batch)
			for i := range msgs {
				g.nextID++
				msgs[i] = producer.Message{PartitionKey: "key-" + strconv.Itoa(g.nextID%997), Fields: map[string]any{"n": strconv.Itoa(g.nextID)}}
			}
			res, err := p.PublishBatch(context.Background(), msgs)
			g.mu.Lock()
			for _, r := range res {
				if r.Err == nil {
					g.ids = append(g.ids, r.EventID)
				}
			}
			if err != nil {
				g.errs = append(g.errs, err)
			}
			g.mu.Unlock()
		}
	}()
	return g
}

// halt stops publishing and returns the published ids and publish errors.
func (g *loadGenerator) halt() ([]string, []error) {
	close(g.stop)
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.ids...), append([]error(nil), g.errs...)
}

// missing returns the published ids not in the consumed set.
func missing(tb testing.TB, rdb *redis.Client, consumedKey string, ids []string) []string {
	tb.Helper()
	var out []string
	for start := 0; start < len(ids); start += 1000 {
		chunk := ids[start:min(start+1000, len(ids))]
		members := make([]any, len(chunk))
		for i, id := range chunk {
			members[i] = id
		}
		found, err := rdb.SMIsMember(context.Background(), consumedKey, members...).Result()
		if err != nil {
			tb.Fatal(err)
		}
		for i, ok := range found {
			if !ok {
				out = append(out, chunk[i])
			}
		}
	}
	return out
}

// runHelperMember is a member process for the crash tests, configured by
// environment variables; it runs until killed. Its handler records event ids
// (recordingHandler), or with RSC_T_CHECK each key's sequence numbers
// (seqChecker).
func runHelperMember() int {
	conc, _ := strconv.Atoi(os.Getenv("RSC_T_CONCURRENCY"))
	sleep, _ := time.ParseDuration(os.Getenv("RSC_T_SLEEP"))
	retry, err := time.ParseDuration(os.Getenv("RSC_T_RETRY"))
	if err != nil {
		retry = time.Second
	}
	opts, err := redis.ParseURL(os.Getenv("RSC_T_REDIS"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rdb := redis.NewClient(opts)
	cfg := member.Config{
		Coordinator: client.New(os.Getenv("RSC_T_COORDINATOR"), memberCreds), Redis: rdb,
		StreamPrefix: os.Getenv("RSC_T_PREFIX"), ConsumerGroup: os.Getenv("RSC_T_GROUP"),
		MemberIDBase: os.Getenv("RSC_T_BASE"), Concurrency: conc, MemberLease: 2500 * time.Millisecond,
		Block: 100 * time.Millisecond, ClaimMinIdle: time.Second, RetryBackoff: retry,
		PlainHeartbeats: os.Getenv("RSC_T_PLAIN") == "1",
	}
	h := recordingHandler(rdb, os.Getenv("RSC_T_CONSUMED"), sleep)
	if name := os.Getenv("RSC_T_CHECK"); name != "" {
		h = newSeqChecker(rdb, name).handler(sleep)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := member.Listen(ctx, cfg, h); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// startHelperMember runs runHelperMember in a child process.
func startHelperMember(tb testing.TB, c *cluster, prefix, group, base string, concurrency int, sleep time.Duration, consumedKey string) *exec.Cmd {
	tb.Helper()
	return startHelper(tb, c, prefix, group, base, concurrency, sleep, "RSC_T_CONSUMED="+consumedKey)
}

// startCheckedMember runs runHelperMember in a child process whose handler
// is the seqChecker called check.
func startCheckedMember(tb testing.TB, c *cluster, prefix, group, base string, concurrency int, sleep, retry time.Duration, check string, env ...string) *exec.Cmd {
	tb.Helper()
	return startHelper(tb, c, prefix, group, base, concurrency, sleep, append([]string{"RSC_T_CHECK=" + check, "RSC_T_RETRY=" + retry.String()}, env...)...)
}

func startHelper(tb testing.TB, c *cluster, prefix, group, base string, concurrency int, sleep time.Duration, env ...string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1",
		"RSC_T_COORDINATOR="+c.URL, "RSC_T_REDIS="+c.Redis.URL(), "RSC_T_PREFIX="+prefix, "RSC_T_GROUP="+group,
		"RSC_T_BASE="+base, "RSC_T_CONCURRENCY="+strconv.Itoa(concurrency), "RSC_T_SLEEP="+sleep.String())
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}
