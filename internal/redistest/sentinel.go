package redistest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Timings of a test Sentinel set: a primary that does not answer for
// sentinelDownAfter is down, and a failover that stalls is retried after
// twice sentinelFailoverTimeout. At 1 s a loaded machine (the engine matrix
// runs two engines' suites at once under -race) starved a just-promoted
// primary long enough for the sentinels to fail over again on their own,
// losing what it had acknowledged and not yet replicated (a CI run of
// TestIntegrationSentinelFailoverMidResharding on Valkey 8.1); 2 s costs a
// second per deliberate kill.
const (
	sentinelDownAfter       = 2000 * time.Millisecond
	sentinelFailoverTimeout = 3000 * time.Millisecond
	sentinelStartTimeout    = 30 * time.Second
	sentinelFailoverWait    = 90 * time.Second // a loaded machine can put sentinels in TILT mode for 30 s
)

// SentinelMaster is the name the test sentinels monitor the primary under.
const SentinelMaster = "rsc-primary"

// SentinelSet is a primary, its replicas and the sentinels that watch them,
// all local processes on loopback ports (see [StartSentinel]). Its methods
// are safe for concurrent use.
type SentinelSet struct {
	mu        sync.Mutex
	nodes     []*Server // primary first at start, then the replicas
	sentinels []*Server
	dead      map[*Server]bool
}

// StartSentinel starts a primary (with opts), replicas replicas of it and
// sentinels sentinels (quorum: a majority) that monitor it as
// [SentinelMaster], and returns once every replica's link is up and every
// sentinel knows the primary, every replica and the other sentinels. The
// processes are stopped by tb.Cleanup. Sentinels run redis-sentinel (see
// [Binary]). A primary started [WithTLS] makes its replicas and sentinels TLS
// too.
func StartSentinel(tb testing.TB, replicas, sentinels int, opts ...Option) *SentinelSet {
	tb.Helper()
	if sentinels < 1 {
		tb.Fatalf("redistest: a Sentinel set needs a sentinel, got %d", sentinels)
	}
	cfg := newConfig(opts)
	ss := &SentinelSet{dead: map[*Server]bool{}}
	primary := startProcess(tb, "redis-server", nil, cfg)
	ss.nodes = append(ss.nodes, primary)
	host, port := splitAddr(primary.Addr())
	for range replicas {
		rc := cfg
		rc.args = append(append([]string(nil), cfg.args...), "--replicaof", host, port, "--repl-diskless-sync-delay", "0")
		ss.nodes = append(ss.nodes, startProcess(tb, "redis-server", nil, rc))
	}
	ctx, cancel := context.WithTimeout(context.Background(), sentinelStartTimeout)
	defer cancel()
	for _, r := range ss.nodes[1:] {
		if err := waitLinkUp(ctx, r); err != nil {
			tb.Fatalf("redistest: replica %s of %s: %v", r.Addr(), primary.Addr(), err)
		}
	}
	quorum := sentinels/2 + 1
	for range sentinels {
		scfg := config{tls: cfg.tls, tlsClients: cfg.tlsClients}
		s := startProcess(tb, "redis-sentinel", func(int) string {
			var b strings.Builder
			fmt.Fprintf(&b, "sentinel monitor %s %s %s %d\n", SentinelMaster, host, port, quorum)
			fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", SentinelMaster, sentinelDownAfter.Milliseconds())
			fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", SentinelMaster, sentinelFailoverTimeout.Milliseconds())
			fmt.Fprintf(&b, "sentinel parallel-syncs %s 1\n", SentinelMaster)
			return b.String()
		}, scfg)
		ss.sentinels = append(ss.sentinels, s)
	}
	// A sentinel that has not heard of the others yet would fail over alone.
	if err := ss.waitSettled(ctx, primary.Addr()); err != nil {
		tb.Fatalf("redistest: sentinels did not settle on %s: %v", primary.Addr(), err)
	}
	return ss
}

// URL returns the set as a redis+sentinel:// URL of the sentinels and the
// master name (rediss+sentinel:// for a TLS set).
func (ss *SentinelSet) URL() string {
	var addrs []string
	scheme := "redis+sentinel"
	for _, s := range ss.sentinels {
		addrs = append(addrs, s.Addr())
		if s.tls != nil {
			scheme = "rediss+sentinel"
		}
	}
	return scheme + "://" + strings.Join(addrs, ",") + "/" + SentinelMaster
}

// Sentinels returns the sentinels.
func (ss *SentinelSet) Sentinels() []*Server { return ss.sentinels }

// Primary returns the node the sentinels name as the primary now.
func (ss *SentinelSet) Primary(tb testing.TB) *Server {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := ss.masterAddr(ctx, ss.sentinels[0])
	if err != nil {
		tb.Fatalf("redistest: ask a sentinel for the primary: %v", err)
	}
	n := ss.nodeAt(addr)
	if n == nil {
		tb.Fatalf("redistest: the sentinels name %s, which is no node of the set", addr)
	}
	return n
}

// Replicas returns the running nodes other than the primary now.
func (ss *SentinelSet) Replicas(tb testing.TB) []*Server {
	tb.Helper()
	p := ss.Primary(tb)
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var out []*Server
	for _, n := range ss.nodes {
		if n != p && !ss.dead[n] {
			out = append(out, n)
		}
	}
	return out
}

// KillPrimary crashes the primary (SIGKILL) and waits until the sentinels
// have promoted a replica, which it returns. With sync, writes are paused on
// the primary first until a replica has everything it wrote, so nothing it
// acknowledged is lost; without, whatever the replicas had not received is
// gone (as when a primary really crashes: Redis replicates asynchronously).
// Replicas frozen with [Server.Freeze] are given in thaw: they go on right
// after the kill, in time to be promoted. The killed node stays down unless
// restarted with [SentinelSet.Restart], which makes it a replica of the new
// primary.
func (ss *SentinelSet) KillPrimary(tb testing.TB, sync bool, thaw ...*Server) *Server {
	tb.Helper()
	old := ss.Primary(tb)
	ctx, cancel := context.WithTimeout(context.Background(), sentinelFailoverWait)
	defer cancel()
	if sync {
		m := old.adminClient()
		info, err := m.Info(ctx, "replication").Result()
		if err == nil {
			err = m.Do(ctx, "CLIENT", "PAUSE", int64(sentinelFailoverWait/time.Millisecond), "WRITE").Err()
		}
		if err == nil {
			err = waitReplicaCaughtUpTLS(ctx, m, replicaAddrs(info), old.clientTLS())
		}
		_ = m.Close()
		if err != nil {
			tb.Fatalf("redistest: sync the replicas of %s before the kill: %v", old.Addr(), err)
		}
	}
	if err := old.kill9(); err != nil {
		tb.Fatalf("redistest: kill -9 %s: %v", old.Addr(), err)
	}
	for _, r := range thaw {
		r.Thaw(tb)
	}
	ss.mu.Lock()
	ss.dead[old] = true
	ss.mu.Unlock()
	return ss.waitPromoted(ctx, tb, old)
}

// Restart starts a node that [SentinelSet.KillPrimary] killed again (empty:
// test servers keep no data) as a replica of the primary, and waits until its
// link is up. It sends the REPLICAOF the sentinels would send themselves: on a
// loaded machine a sentinel can sit in TILT mode for 30 s and send nothing.
func (ss *SentinelSet) Restart(tb testing.TB, n *Server) {
	tb.Helper()
	primary := ss.Primary(tb)
	n.Start(tb)
	ss.mu.Lock()
	delete(ss.dead, n)
	ss.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelFailoverWait)
	defer cancel()
	host, port := splitAddr(primary.Addr())
	c := n.adminClient()
	err := c.Do(ctx, "REPLICAOF", host, port).Err()
	_ = c.Close()
	if err != nil {
		tb.Fatalf("redistest: REPLICAOF %s on restarted %s: %v", primary.Addr(), n.Addr(), err)
	}
	if err := waitLinkUp(ctx, n); err != nil {
		tb.Fatalf("redistest: restarted %s did not become a replica: %v", n.Addr(), err)
	}
	if err := ss.waitSettledOnAny(ctx, tb, primary.Addr()); err != nil {
		tb.Fatalf("redistest: the sentinels did not take restarted %s back: %v\n%s", n.Addr(), err, ss.describe())
	}
}

// waitSettledOnAny waits until the set is at rest on primary, or on the node
// the sentinels moved to instead: with down-after-milliseconds of seconds,
// a loaded machine can make a primary that was just promoted look down to
// them, and they fail over again (to the node just restarted, once its link
// is up). The set then still has a primary and a replica, which is what a
// restart is for; the move is logged.
func (ss *SentinelSet) waitSettledOnAny(ctx context.Context, tb testing.TB, primary string) error {
	tb.Helper()
	var last error
	for {
		at := primary
		if a, err := ss.masterAddr(ctx, ss.sentinels[0]); err == nil && ss.nodeAt(a) != nil {
			at = a
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = ss.waitSettled(sctx, at)
		cancel()
		if last == nil {
			if at != primary {
				tb.Logf("redistest: the sentinels failed over again, from %s to %s, while a node restarted", primary, at)
			}
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(last, ctx.Err())
		}
	}
}

func (ss *SentinelSet) waitPromoted(ctx context.Context, tb testing.TB, old *Server) *Server {
	tb.Helper()
	var last error
	for {
		n, err := ss.promoted(ctx, old)
		if err == nil {
			// The sentinels may fail over again (the promoted replica was
			// frozen a moment ago, and looks down to one of them): settle on
			// n, or look again.
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = ss.waitSettled(sctx, n.Addr())
			cancel()
		}
		if err == nil {
			return n
		}
		last = err
		select {
		case <-ctx.Done():
			tb.Fatalf("redistest: no replica of %s was promoted: %v\n%s", old.Addr(), errors.Join(last, ctx.Err()), ss.describe())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// promoted returns the new primary once every sentinel names the same node,
// not old, and that node says it is a master.
func (ss *SentinelSet) promoted(ctx context.Context, old *Server) (*Server, error) {
	var addr string
	for _, s := range ss.sentinels {
		a, err := ss.masterAddr(ctx, s)
		if err != nil {
			return nil, err
		}
		if a == old.Addr() {
			return nil, fmt.Errorf("sentinel %s still names %s", s.Addr(), a)
		}
		if addr != "" && a != addr {
			return nil, fmt.Errorf("sentinels disagree: %s and %s", addr, a)
		}
		addr = a
	}
	n := ss.nodeAt(addr)
	if n == nil {
		return nil, fmt.Errorf("the sentinels name %s, no node of the set", addr)
	}
	c := n.adminClient()
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil, err
	}
	if infoField(info, "role") != "master" {
		return nil, fmt.Errorf("%s is still a %s", addr, infoField(info, "role"))
	}
	return n, nil
}

// describe is what the sentinels say about the replicas, and the end of
// their logs, for a failover that did not happen.
func (ss *SentinelSet) describe() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for _, s := range ss.sentinels {
		c := s.adminClient()
		res, err := c.Do(ctx, "SENTINEL", "REPLICAS", SentinelMaster).Result()
		_ = c.Close()
		fmt.Fprintf(&b, "sentinel %s: replicas %v (%v)\n", s.Addr(), res, err)
		if s.output != nil {
			out := s.output.String()
			if len(out) > 3000 {
				out = out[len(out)-3000:]
			}
			fmt.Fprintf(&b, "%s\n", out)
		}
	}
	return b.String()
}

func (ss *SentinelSet) masterAddr(ctx context.Context, s *Server) (string, error) {
	c := s.adminClient()
	defer c.Close()
	res, err := c.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster).StringSlice()
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", s.Addr(), err)
	}
	if len(res) != 2 {
		return "", fmt.Errorf("sentinel %s: master address %v", s.Addr(), res)
	}
	return res[0] + ":" + res[1], nil
}

// waitSettled waits until the set is at rest on primary: every sentinel
// names it, is not in a failover, knows the other sentinels, and sees every
// running replica up with its link to primary up. A failover started while a
// sentinel is still finishing the previous one can stall for good (that
// sentinel goes on naming the old primary), so each step waits for this.
func (ss *SentinelSet) waitSettled(ctx context.Context, primary string) error {
	return pollUntil(ctx, func() error {
		for _, s := range ss.sentinels {
			if err := ss.sentinelSettled(ctx, s, primary); err != nil {
				return err
			}
		}
		return nil
	})
}

func (ss *SentinelSet) sentinelSettled(ctx context.Context, s *Server, primary string) error {
	c := s.adminClient()
	defer c.Close()
	m, err := c.Do(ctx, "SENTINEL", "MASTER", SentinelMaster).Result()
	if err != nil {
		return fmt.Errorf("sentinel %s: %w", s.Addr(), err)
	}
	f := fields(m)
	if got := f["ip"] + ":" + f["port"]; got != primary {
		return fmt.Errorf("sentinel %s names %s", s.Addr(), got)
	}
	if strings.Contains(f["flags"], "down") || strings.Contains(f["flags"], "failover") {
		return fmt.Errorf("sentinel %s: primary flags %s", s.Addr(), f["flags"])
	}
	if n, _ := strconv.Atoi(f["num-other-sentinels"]); n != len(ss.sentinels)-1 {
		return fmt.Errorf("sentinel %s knows %d other sentinels, want %d", s.Addr(), n, len(ss.sentinels)-1)
	}
	res, err := c.Do(ctx, "SENTINEL", "REPLICAS", SentinelMaster).Result()
	if err != nil {
		return fmt.Errorf("sentinel %s: %w", s.Addr(), err)
	}
	list, _ := res.([]any)
	up := map[string]bool{}
	for _, r := range list {
		rf := fields(r)
		if !strings.Contains(rf["flags"], "down") && !strings.Contains(rf["flags"], "disconnected") &&
			rf["master-link-status"] == "ok" && rf["master-host"]+":"+rf["master-port"] == primary {
			up[rf["ip"]+":"+rf["port"]] = true
		}
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, n := range ss.nodes {
		if a := n.Addr(); a != primary && !ss.dead[n] && !up[a] {
			return fmt.Errorf("sentinel %s does not see replica %s up with its link to %s", s.Addr(), a, primary)
		}
	}
	return nil
}

// fields reads a Sentinel reply's field/value pairs (a map in RESP3, a flat
// array in RESP2).
func fields(v any) map[string]string {
	f := map[string]string{}
	switch m := v.(type) {
	case map[any]any:
		for k, v := range m {
			f[fmt.Sprint(k)] = fmt.Sprint(v)
		}
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			f[fmt.Sprint(m[i])] = fmt.Sprint(m[i+1])
		}
	}
	return f
}

func (ss *SentinelSet) nodeAt(addr string) *Server {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for _, n := range ss.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// waitLinkUp waits until the replica n reports master_link_status:up.
func waitLinkUp(ctx context.Context, n *Server) error {
	c := n.adminClient()
	defer c.Close()
	var last error
	for {
		info, err := c.Info(ctx, "replication").Result()
		switch {
		case err != nil:
			last = err
		case infoField(info, "role") != "slave":
			last = fmt.Errorf("role %s", infoField(info, "role"))
		case infoField(info, "master_link_status") != "up":
			last = fmt.Errorf("master_link_status %s", infoField(info, "master_link_status"))
		default:
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(last, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// adminClient is a one-connection client for the harness's own commands.
func (s *Server) adminClient() *redis.Client { return adminClientTLS(s.Addr(), s.clientTLS()) }

// Freeze stops a process-kind server in its tracks (SIGSTOP): it keeps its
// connections but answers nothing, reads nothing from its primary and
// acknowledges nothing, until [Server.Thaw]. A frozen replica is a replica
// whose link is held up.
func (s *Server) Freeze(tb testing.TB) { tb.Helper(); s.signal(tb, syscall.SIGSTOP) }

// HoldUpReplicas holds up the replication links of primary's replicas: it
// freezes each of them ([Server.Freeze]) and then has primary close its
// connections to its replicas (CLIENT KILL TYPE replica), so nothing primary
// writes from now on reaches them (a frozen process's socket would still
// receive it) until they are thawed and reconnect. Freeze every replica of
// primary, or the others receive the writes.
func HoldUpReplicas(tb testing.TB, primary *Server, replicas ...*Server) {
	tb.Helper()
	for _, r := range replicas {
		r.Freeze(tb)
	}
	c := primary.adminClient()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		tb.Fatalf("redistest: close the replica links of %s: %v", primary.Addr(), err)
	}
}

// Thaw lets a frozen server go on (SIGCONT).
func (s *Server) Thaw(tb testing.TB) { tb.Helper(); s.signal(tb, syscall.SIGCONT) }

// Kill crashes a process-kind server (SIGKILL: no shutdown, no final write)
// and waits for it to exit; [Server.Start] starts it again.
func (s *Server) Kill(tb testing.TB) {
	tb.Helper()
	if err := s.kill9(); err != nil {
		tb.Fatalf("redistest: kill -9 %s: %v", s.Addr(), err)
	}
}

func (s *Server) signal(tb testing.TB, sig syscall.Signal) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		tb.Fatalf("redistest: %s is not a running redis-server process", s.addr)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		tb.Fatalf("redistest: signal %v to %s: %v", sig, s.addr, err)
	}
}

func splitAddr(addr string) (host, port string) {
	i := strings.LastIndex(addr, ":")
	return addr[:i], addr[i+1:]
}
