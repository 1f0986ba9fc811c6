package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/procs"
	"github.com/rscoord/rsc/redisstore"
)

// Timings of a test cluster. A short node timeout makes a failover take a
// couple of seconds instead of the default's fifteen or more.
const (
	clusterNodeTimeout = 1000 * time.Millisecond
	clusterTimeout     = 60 * time.Second
	failoverTimeout    = 30 * time.Second
)

// Cluster is a Redis Cluster of local redis-server processes on loopback
// ports (see [StartCluster]). Its methods are safe for concurrent use.
type Cluster struct {
	mu    sync.Mutex
	nodes []*Server // every node started, in start order; killed ones stay
	dead  map[string]bool
}

// StartCluster starts masters*(1+replicasPerMaster) redis-server processes
// with cluster mode on (each with its own data directory and nodes.conf from
// tb.TempDir, on free loopback ports), joins them with `redis-cli --cluster
// create`, and returns once every node reports cluster_state:ok, knows every
// other node, and every replica's link to its master is up. Slots are spread
// evenly over the masters. The processes are stopped by tb.Cleanup. Without
// redis-server or redis-cli on PATH the test is skipped (or failed, see the
// package comment).
func StartCluster(tb testing.TB, masters, replicasPerMaster int) *Cluster {
	tb.Helper()
	if masters < 3 {
		tb.Fatalf("redistest: a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	if replicasPerMaster < 0 {
		tb.Fatalf("redistest: replicasPerMaster %d < 0", replicasPerMaster)
	}
	cli, err := Binary("redis-cli")
	if err != nil {
		unavailable(tb, "%v", err)
	}
	if _, err := Binary("redis-server"); err != nil {
		unavailable(tb, "%v", err)
	}
	c := &Cluster{dead: map[string]bool{}}
	total := masters * (1 + replicasPerMaster)
	for range total {
		bus, err := procs.FreePort()
		if err != nil {
			tb.Fatalf("redistest: pick a free cluster bus port: %v", err)
		}
		c.nodes = append(c.nodes, StartProcess(tb, WithArgs(
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", // relative to the node's own --dir
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", strconv.Itoa(int(clusterNodeTimeout/time.Millisecond)),
			// Fail over whatever the replica's data age: a test kills masters on purpose.
			"--cluster-replica-validity-factor", "0",
			"--repl-diskless-sync-delay", "0",
		)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	args := []string{"--cluster", "create"}
	args = append(args, c.Seeds()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.waitHealthy(ctx, total, ""); err != nil {
		tb.Fatalf("redistest: cluster of %d nodes did not form: %v", total, err)
	}
	return c
}

// Seeds returns the addresses (host:port) of the nodes still running.
func (c *Cluster) Seeds() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, n := range c.nodes {
		if !c.dead[n.Addr()] {
			out = append(out, n.Addr())
		}
	}
	return out
}

// URL returns the cluster as a redis+cluster:// URL of the running nodes'
// addresses, comma-separated (the form redisstore.NewClient and the
// coordinator's --redis accept).
func (c *Cluster) URL() string {
	return "redis+cluster://" + strings.Join(c.Seeds(), ",")
}

// Client returns a cluster client seeded with every running node, closed by
// tb.Cleanup. It re-reads the slot map every second: go-redis does not re-read
// it when a master stops answering, only on MOVED/ASK and every
// ClusterStateReloadInterval (60 s by default; redis/go-redis#3979), so with
// the default a client keeps calling a crashed master for up to a minute
// after its replica took over.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Seeds(), ClusterStateReloadInterval: time.Second})
	tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Masters returns the addresses of the masters serving slots, as a running
// node sees them.
func (c *Cluster) Masters(tb testing.TB) []string {
	tb.Helper()
	slots := c.mustSlots(tb)
	seen := map[string]bool{}
	var out []string
	for _, s := range slots {
		if len(s.Nodes) > 0 && !seen[s.Nodes[0].Addr] {
			seen[s.Nodes[0].Addr] = true
			out = append(out, s.Nodes[0].Addr)
		}
	}
	return out
}

// MasterFor returns the address of the master serving key's hash slot.
func (c *Cluster) MasterFor(tb testing.TB, key string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var slot int64
	err := c.onAnyNode(ctx, func(n *redis.Client) (err error) {
		slot, err = n.ClusterKeySlot(ctx, key).Result()
		return err
	})
	if err != nil {
		tb.Fatalf("redistest: CLUSTER KEYSLOT %s: %v", key, err)
	}
	for _, s := range c.mustSlots(tb) {
		if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr
		}
	}
	tb.Fatalf("redistest: no master serves slot %d of %s", slot, key)
	return ""
}

// Failover simulates the crash of the master at masterAddr and waits until
// one of its replicas has taken over: every running node reports
// cluster_state:ok and no longer maps a slot to masterAddr. It returns the
// promoted replica's address.
//
// Before the kill -9, it pauses writes on the master (CLIENT PAUSE WRITE) and
// waits until a replica has received everything the master wrote, so no write
// the master acknowledged is lost: Redis replicates asynchronously, and a
// master that really crashes can take its last acknowledged writes with it.
// That loss is Redis's guarantee (WAIT and min-replicas-to-write narrow it),
// not something the code under test could prevent, so tests leave it out.
func (c *Cluster) Failover(tb testing.TB, masterAddr string) string {
	tb.Helper()
	return c.failover(tb, masterAddr, true)
}

// Crash is [Cluster.Failover] without the pause: the master at masterAddr is
// killed -9 as it is, so whatever its replicas had not received yet is lost
// when one of them takes over. Replicas frozen with [Server.Freeze] (which
// have received nothing since) are given in thaw: they go on right after the
// kill, in time to be promoted. It returns the promoted replica's address.
func (c *Cluster) Crash(tb testing.TB, masterAddr string, thaw ...*Server) string {
	tb.Helper()
	return c.failover(tb, masterAddr, false, thaw...)
}

// Restart starts the node at addr that [Cluster.Failover] or [Cluster.Crash]
// killed again, with its data directory and nodes.conf: it rejoins the
// cluster as a replica of the node that took its slots (empty: test servers
// keep no data). It returns once the cluster is healthy with it.
func (c *Cluster) Restart(tb testing.TB, addr string) {
	tb.Helper()
	c.mu.Lock()
	var n *Server
	for _, s := range c.nodes {
		if s.Addr() == addr && c.dead[addr] {
			n = s
		}
	}
	c.mu.Unlock()
	if n == nil {
		tb.Fatalf("redistest: %s is not a killed node of the cluster", addr)
	}
	n.Start(tb)
	c.mu.Lock()
	delete(c.dead, addr)
	running := len(c.nodes) - len(c.dead)
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout)
	defer cancel()
	if err := c.waitHealthy(ctx, running, ""); err != nil {
		tb.Fatalf("redistest: the cluster did not take %s back: %v", addr, err)
	}
}

// Node returns the running node at addr (nil if there is none).
func (c *Cluster) Node(addr string) *Server { return c.node(addr) }

// ReplicasOf returns the addresses of the replicas of the master at addr, as
// it reports them.
func (c *Cluster) ReplicasOf(tb testing.TB, masterAddr string) []string {
	tb.Helper()
	m := adminClient(masterAddr)
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := m.Info(ctx, "replication").Result()
	if err != nil {
		tb.Fatalf("redistest: INFO replication of %s: %v", masterAddr, err)
	}
	return replicaAddrs(info)
}

func (c *Cluster) failover(tb testing.TB, masterAddr string, sync bool, thaw ...*Server) string {
	tb.Helper()
	victim := c.node(masterAddr)
	if victim == nil {
		tb.Fatalf("redistest: %s is not a running node of the cluster", masterAddr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), failoverTimeout)
	defer cancel()
	m := adminClient(masterAddr)
	defer m.Close()
	info, err := m.Info(ctx, "replication").Result()
	if err != nil {
		tb.Fatalf("redistest: INFO replication of %s: %v", masterAddr, err)
	}
	if infoField(info, "role") != "master" {
		tb.Fatalf("redistest: %s is not a master:\n%s", masterAddr, info)
	}
	replicas := replicaAddrs(info)
	for _, r := range thaw { // held up: the master no longer lists them
		if !slices.Contains(replicas, r.Addr()) {
			replicas = append(replicas, r.Addr())
		}
	}
	if len(replicas) == 0 {
		tb.Fatalf("redistest: master %s has no replica to promote", masterAddr)
	}
	if sync {
		// Long enough to outlast the sync below; the kill ends it anyway.
		if err := m.Do(ctx, "CLIENT", "PAUSE", int64(failoverTimeout/time.Millisecond), "WRITE").Err(); err != nil {
			tb.Fatalf("redistest: CLIENT PAUSE on %s: %v", masterAddr, err)
		}
		if err := waitReplicaCaughtUp(ctx, m, replicas); err != nil {
			tb.Fatalf("redistest: replicas of %s did not catch up: %v", masterAddr, err)
		}
	}
	if err := victim.kill9(); err != nil {
		tb.Fatalf("redistest: kill -9 %s: %v", masterAddr, err)
	}
	for _, r := range thaw {
		r.Thaw(tb)
	}
	c.mu.Lock()
	c.dead[masterAddr] = true
	running := len(c.nodes) - len(c.dead)
	c.mu.Unlock()
	if err := c.waitHealthy(ctx, running, masterAddr); err != nil {
		tb.Fatalf("redistest: no replica of %s took over: %v", masterAddr, err)
	}
	for _, r := range replicas {
		rc := adminClient(r)
		info, err := rc.Info(ctx, "replication").Result()
		_ = rc.Close()
		if err == nil && infoField(info, "role") == "master" {
			return r
		}
	}
	tb.Fatalf("redistest: none of %v reports role:master after the failover of %s", replicas, masterAddr)
	return ""
}

func (c *Cluster) node(addr string) *Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead[addr] {
		return nil
	}
	for _, n := range c.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

func (c *Cluster) mustSlots(tb testing.TB) []redis.ClusterSlot {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var slots []redis.ClusterSlot
	err := c.onAnyNode(ctx, func(n *redis.Client) (err error) {
		slots, err = n.ClusterSlots(ctx).Result()
		return err
	})
	if err != nil {
		tb.Fatalf("redistest: CLUSTER SLOTS: %v", err)
	}
	return slots
}

// onAnyNode runs f on the running nodes in turn until it succeeds once.
func (c *Cluster) onAnyNode(ctx context.Context, f func(*redis.Client) error) error {
	var errs []error
	for _, addr := range c.Seeds() {
		n := adminClient(addr)
		err := f(n)
		_ = n.Close()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
		if ctx.Err() != nil {
			break
		}
	}
	return errors.Join(errs...)
}

// waitHealthy waits until every running node reports cluster_state:ok, knows
// want nodes that are not failed, maps every slot to a master other than
// gone, and, if it is a replica, has its link to its master up.
func (c *Cluster) waitHealthy(ctx context.Context, want int, gone string) error {
	return pollUntil(ctx, func() error { return c.healthy(ctx, want, gone) })
}

// pollUntil calls check every 100 ms until it returns nil, or ctx ends (its
// last error joined with ctx's).
func pollUntil(ctx context.Context, check func() error) error {
	for {
		last := check()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) healthy(ctx context.Context, want int, gone string) error {
	for _, addr := range c.Seeds() {
		if err := nodeHealthy(ctx, addr, want, gone); err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
	}
	return nil
}

func nodeHealthy(ctx context.Context, addr string, want int, gone string) error {
	n := adminClient(addr)
	defer n.Close()
	info, err := n.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if st := infoField(info, "cluster_state"); st != "ok" {
		return fmt.Errorf("cluster_state:%s", st)
	}
	nodes, err := n.ClusterNodes(ctx).Result()
	if err != nil {
		return err
	}
	alive := 0
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || strings.Contains(f[2], "fail") || strings.Contains(f[2], "handshake") || strings.Contains(f[2], "noaddr") {
			continue
		}
		alive++
	}
	if alive != want {
		return fmt.Errorf("knows %d live nodes, want %d", alive, want)
	}
	slots, err := n.ClusterSlots(ctx).Result()
	if err != nil {
		return err
	}
	covered := 0
	for _, s := range slots {
		if len(s.Nodes) == 0 || s.Nodes[0].Addr == gone {
			return fmt.Errorf("slots %d-%d still served by %s", s.Start, s.End, gone)
		}
		covered += s.End - s.Start + 1
	}
	if covered != 16384 {
		return fmt.Errorf("%d of 16384 slots served", covered)
	}
	rep, err := n.Info(ctx, "replication").Result()
	if err != nil {
		return err
	}
	if infoField(rep, "role") == "slave" && infoField(rep, "master_link_status") != "up" {
		return fmt.Errorf("replica link to %s:%s is %s", infoField(rep, "master_host"), infoField(rep, "master_port"), infoField(rep, "master_link_status"))
	}
	return nil
}

// waitReplicaCaughtUp waits until one replica's replication offset reaches
// the (write-paused) master's.
func waitReplicaCaughtUp(ctx context.Context, master *redis.Client, replicas []string) error {
	return waitReplicaCaughtUpTLS(ctx, master, replicas, nil)
}

// waitReplicaCaughtUpTLS is waitReplicaCaughtUp with replicas reached over
// TLS with tc (nil: plain).
func waitReplicaCaughtUpTLS(ctx context.Context, master *redis.Client, replicas []string, tc *tls.Config) error {
	var last error
	for {
		info, err := master.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		want := infoField(info, "master_repl_offset")
		for _, r := range replicas {
			rc := adminClientTLS(r, tc)
			rinfo, err := rc.Info(ctx, "replication").Result()
			_ = rc.Close()
			if err != nil {
				last = err
				continue
			}
			got := infoField(rinfo, "slave_repl_offset")
			if got == want && infoField(rinfo, "master_link_status") == "up" {
				return nil
			}
			last = fmt.Errorf("replica %s at offset %s, master at %s", r, got, want)
		}
		select {
		case <-ctx.Done():
			return errors.Join(last, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// replicaAddrs reads the slaveN:ip=...,port=... lines of a master's INFO replication.
func replicaAddrs(info string) []string {
	var out []string
	for _, line := range strings.Split(info, "\n") {
		name, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "slave") || name == "slave_read_repl_offset" {
			continue
		}
		if _, err := strconv.Atoi(strings.TrimPrefix(name, "slave")); err != nil {
			continue
		}
		var ip, port string
		for _, kv := range strings.Split(val, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				ip = v
			case "port":
				port = v
			}
		}
		if ip != "" && port != "" {
			out = append(out, net.JoinHostPort(ip, port))
		}
	}
	return out
}

// infoField returns a field of an INFO (or CLUSTER INFO) reply.
var infoField = redisstore.InfoField

// adminClient is a one-connection client for cluster administration.
func adminClient(addr string) *redis.Client { return adminClientTLS(addr, nil) }

func adminClientTLS(addr string, tc *tls.Config) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second,
		MaxRetries: -1, PoolSize: 1, DisableIdentity: true, TLSConfig: tc,
	})
}

// kill9 kills a process-kind server with SIGKILL (a crash: no shutdown, no
// final write) and waits for it to exit. The server stays stopped.
func (s *Server) kill9() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("not a running redis-server process")
	}
	cmd, exited := s.cmd, s.exited
	s.cmd, s.running = nil, false
	if err := cmd.Process.Kill(); err != nil {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("pid %d did not exit after SIGKILL", cmd.Process.Pid)
	}
}
