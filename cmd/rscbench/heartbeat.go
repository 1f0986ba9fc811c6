package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// Leases and rebalance timeouts long enough that a slow convergence round on a
// small machine never expires or fences a member: neither is on the steady path.
const (
	benchLease            = 5 * time.Minute
	benchRebalanceTimeout = 5 * time.Minute
	maxConvergeRounds     = 60
)

// runHeartbeat measures steady heartbeats through the real HTTP server (a
// coordinator.Coordinator on a redisstore.Log in real Redis) against a bare
// net/http JSON handler served and driven the same way.
func (b *bench) runHeartbeat(ctx context.Context, rep *Report) error {
	o := b.o
	coord, rlog, done, err := b.runRedisCoordinator(ctx, "hb-events", coordinator.Config{
		MemberLease: benchLease, RebalanceTimeout: benchRebalanceTimeout,
		MaxShardCount: max(1024, o.shards), Logger: zerolog.Nop(),
		// One principal (the benchmark's) creates every group and runs every
		// member: the per-principal and per-prefix quotas and churn budgets
		// would refuse the defaults' 100 groups of 128 shards and 10,000
		// joins; they are not what this measures.
		MaxGroupsPerPrincipal: -1, MaxShardsPerPrincipal: -1, MaxMembersPerPrincipal: -1,
		MaxGroupsPerPrefix: -1, MaxShardsPerPrefix: -1,
		MemberChurnPerMinute: -1, PrincipalChurnPerMinute: -1,
	})
	if err != nil {
		return err
	}
	defer done()

	b.logf("heartbeat: creating %d groups of %d shards", o.groups, o.shards)
	var members []*member
	for gi := 0; gi < o.groups; gi++ {
		prefix := fmt.Sprintf("%s-g%03d", b.st.prefix, gi)
		for s := 0; s < o.shards; s++ {
			b.st.track(routing.StreamKey(prefix, s))
		}
		if err := createGroup(ctx, coord, projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: "workers"}, o.shards, "benchmark"); err != nil {
			return err
		}
		n := o.members / o.groups
		if gi < o.members%o.groups {
			n++
		}
		for i := 0; i < n; i++ {
			members = append(members, &member{id: fmt.Sprintf("member-%05d", len(members)), prefix: prefix, group: "workers"})
		}
	}

	srv, err := serveAPI(coord)
	if err != nil {
		return err
	}
	defer srv.Close(context.WithoutCancel(ctx))
	base, err := openBareServer()
	if err != nil {
		return err
	}
	defer base.Close()
	realClient, baseClient := newHTTPClient(o.concurrency), newHTTPClient(o.concurrency)
	defer realClient.CloseIdleConnections()
	defer baseClient.CloseIdleConnections()

	// Join every member, then heartbeat in rounds until a round finds every member
	// steady and appends nothing.
	b.logf("heartbeat: joining and converging %d members", len(members))
	convStart := time.Now()
	lenBefore, err := rlog.Len(ctx)
	if err != nil {
		return err
	}
	rounds, heartbeats := 0, 0
	for {
		before, err := rlog.Len(ctx)
		if err != nil {
			return err
		}
		err = parallel(ctx, o.concurrency, len(members), func(_, i int) error {
			m := members[i]
			req := m.request(false)
			body, err := json.Marshal(req)
			if err != nil {
				return err
			}
			var resp wire.HeartbeatResponse
			if _, err := post(ctx, realClient, srv.URL()+m.path(), body, &resp); err != nil {
				return err
			}
			return m.adopt(req, &resp)
		})
		if err != nil {
			return fmt.Errorf("converge round %d: %w", rounds, err)
		}
		rounds++
		heartbeats += len(members)
		after, err := rlog.Len(ctx)
		if err != nil {
			return err
		}
		steady := 0
		for _, m := range members {
			if m.steady {
				steady++
			}
		}
		if steady == len(members) && after == before {
			break
		}
		if rounds >= maxConvergeRounds {
			return fmt.Errorf("members did not converge in %d rounds (%d of %d steady, %d events in the last round)", rounds, steady, len(members), after-before)
		}
	}
	convTime := time.Since(convStart)
	lenConverged, err := rlog.Len(ctx)
	if err != nil {
		return err
	}
	fenced := 0
	for _, m := range members {
		fenced += m.fenced
	}
	if err := checkBalanced(coord, members); err != nil {
		return err
	}

	// The steady phase: the same requests, alternating passes against the bare
	// handler and the coordinator.
	bodies := make([][]byte, len(members))
	for i, m := range members {
		if bodies[i], err = json.Marshal(m.request(false)); err != nil {
			return err
		}
	}
	b.logf("heartbeat: warming up the baseline")
	if _, err := steadyPass(ctx, baseClient, base.URL, members, bodies, 0, min(o.requests, 4*o.concurrency+len(members)/10), o.concurrency); err != nil {
		return fmt.Errorf("baseline warm-up: %w", err)
	}
	var realRes, baseRes passResult
	perPass := o.requests / o.passes
	xlenBefore, err := rlog.Len(ctx)
	if err != nil {
		return err
	}
	for p := 0; p < o.passes; p++ {
		count := perPass
		if p == o.passes-1 {
			count = o.requests - perPass*(o.passes-1)
		}
		start := p * perPass
		b.logf("heartbeat: pass %d/%d, %d requests each", p+1, o.passes, count)
		runtime.GC()
		r, err := steadyPass(ctx, baseClient, base.URL, members, bodies, start, count, o.concurrency)
		if err != nil {
			return fmt.Errorf("baseline pass: %w", err)
		}
		baseRes.add(r)
		runtime.GC()
		r, err = steadyPass(ctx, realClient, srv.URL(), members, bodies, start, count, o.concurrency)
		if err != nil {
			return fmt.Errorf("coordinator pass: %w", err)
		}
		realRes.add(r)
	}
	xlenAfter, err := rlog.Len(ctx)
	if err != nil {
		return err
	}
	appendedPerHB := float64(xlenAfter-xlenBefore) / float64(realRes.n)

	s := rep.section("heartbeat.steady", "steady heartbeats through httpapi + commands (redisstore.Log) vs a bare net/http JSON handler, same requests, same clients")
	s.param("members", len(members))
	s.param("groups", o.groups)
	s.param("shardsPerGroup", o.shards)
	s.param("concurrency", o.concurrency)
	s.param("requests", realRes.n)
	s.param("passes", o.passes)
	s.param("requestBytesAvg", avgLen(bodies))
	s.param("responseBytesAvg", fmt.Sprintf("%.0f coordinator, %.0f bare", realRes.avgBytes(), baseRes.avgBytes()))
	s.param("lease", benchLease)
	comparePasses(s, "bare handler", &baseRes, "coordinator", &realRes)
	s.info("events appended per steady heartbeat", appendedPerHB, "events")
	s.info("answers not OK-and-unchanged in the steady phase", float64(realRes.unsteady), "answers")
	s.info("join+converge rounds", float64(rounds), "rounds")
	s.info("join+converge time", ms(convTime), "ms")
	s.info("join+converge heartbeats", float64(heartbeats), "heartbeats")
	s.info("join+converge events appended", float64(lenConverged-lenBefore), "events")
	s.info("fenced/unknown answers while converging", float64(fenced), "answers")
	if xlenAfter != xlenBefore || realRes.unsteady > 0 {
		return fmt.Errorf("the steady phase is not steady: %d events appended over %d heartbeats, %d answers changed something", xlenAfter-xlenBefore, realRes.n, realRes.unsteady)
	}
	if err := b.runForwarded(ctx, rep, rlog, srv.URL(), members, bodies); err != nil {
		return err
	}
	return b.runStall(ctx, rep, srv.URL(), members, bodies)
}

// fixedLeader is a leader lease always held by the benchmark's coordinator:
// the follower it is given forwards to that coordinator's URL.
type fixedLeader struct{ url string }

func (f fixedLeader) info() coordinator.LeaderInfo {
	return coordinator.LeaderInfo{Holder: "rscbench-leader", URL: f.url, Token: 1}
}
func (f fixedLeader) Acquire(context.Context, time.Duration) (coordinator.LeaderInfo, error) {
	return f.info(), nil
}
func (f fixedLeader) Renew(context.Context, time.Duration) (bool, error)     { return false, nil }
func (f fixedLeader) Release(context.Context) error                          { return nil }
func (f fixedLeader) Leader(context.Context) (coordinator.LeaderInfo, error) { return f.info(), nil }

// runForwarded measures the same steady heartbeats sent to a follower (--ha),
// which forwards them to the leader, against the same heartbeats sent to the
// leader directly, in alternating passes.
func (b *bench) runForwarded(ctx context.Context, rep *Report, rlog *redisstore.Log, leaderURL string, members []*member, bodies [][]byte) error {
	o := b.o
	follower, err := runCoordinator(ctx, coordinator.Config{MemberLease: benchLease, RebalanceTimeout: benchRebalanceTimeout,
		MaxShardCount: max(1024, o.shards), Logger: zerolog.Nop(), CoordinatorID: "rscbench-follower",
		Lease: fixedLeader{url: leaderURL}, LeaseTTL: benchLease}, rlog, nil, nil, nil)
	if err != nil {
		return err
	}
	defer follower.Close()
	if follower.Role() != coordinator.RoleFollower {
		return fmt.Errorf("the follower reports role %s", follower.Role())
	}
	fsrv, err := serveAPI(follower)
	if err != nil {
		return err
	}
	defer fsrv.Close(context.WithoutCancel(ctx))
	direct, via := newHTTPClient(o.concurrency), newHTTPClient(o.concurrency)
	defer direct.CloseIdleConnections()
	defer via.CloseIdleConnections()
	requests := max(o.requests/4, o.passes)
	b.logf("heartbeat: %d steady heartbeats through a follower and as many to the leader directly", requests)
	if _, err := steadyPass(ctx, via, fsrv.URL(), members, bodies, 0, min(requests, 4*o.concurrency), o.concurrency); err != nil {
		return fmt.Errorf("follower warm-up: %w", err)
	}
	var directRes, viaRes passResult
	perPass := requests / o.passes
	for p := 0; p < o.passes; p++ {
		count := perPass
		if p == o.passes-1 {
			count = requests - perPass*(o.passes-1)
		}
		runtime.GC()
		r, err := steadyPass(ctx, direct, leaderURL, members, bodies, p*perPass, count, o.concurrency)
		if err != nil {
			return fmt.Errorf("leader pass: %w", err)
		}
		directRes.add(r)
		runtime.GC()
		r, err = steadyPass(ctx, via, fsrv.URL(), members, bodies, p*perPass, count, o.concurrency)
		if err != nil {
			return fmt.Errorf("follower pass: %w", err)
		}
		viaRes.add(r)
	}
	s := rep.section("heartbeat.forwarded", "steady heartbeats sent to a --ha follower (forwarded to the leader over HTTP) vs sent to the leader directly, same requests, same clients")
	s.param("members", len(members))
	s.param("concurrency", o.concurrency)
	s.param("requests", viaRes.n)
	comparePasses(s, "leader direct", &directRes, "through a follower", &viaRes)
	if viaRes.unsteady > 0 {
		return fmt.Errorf("%d forwarded answers were not steady", viaRes.unsteady)
	}
	return nil
}

// comparePasses reports res against the baseline base: throughput, p50 and
// p99, each named after its side ("<name> throughput", ...).
func comparePasses(s *Section, baseName string, base *passResult, name string, res *passResult) {
	s.baseline(baseName+" throughput", passRate(*base), "req/s")
	s.measured(name+" throughput", passRate(*res), "req/s", baseName+" throughput")
	for _, p := range []struct {
		label string
		q     float64
	}{{"p50", 0.50}, {"p99", 0.99}} {
		s.baseline(baseName+" "+p.label, ms(base.percentile(p.q)), "ms")
		s.measured(name+" "+p.label, ms(res.percentile(p.q)), "ms", baseName+" "+p.label)
	}
}

// checkBalanced verifies the converged state: every group STABLE and every
// member owning exactly its target.
func checkBalanced(coord *coordinator.Coordinator, members []*member) error {
	byGroup := map[projection.GroupKey][]*member{}
	for _, m := range members {
		k := projection.GroupKey{StreamPrefix: m.prefix, ConsumerGroup: m.group}
		byGroup[k] = append(byGroup[k], m)
	}
	for k, ms := range byGroup {
		g, ok := coord.State().Group(k)
		if !ok {
			return fmt.Errorf("group %s/%s is missing", k.StreamPrefix, k.ConsumerGroup)
		}
		if st := g.State(); st != "STABLE" {
			return fmt.Errorf("group %s/%s is %s after convergence", k.StreamPrefix, k.ConsumerGroup, st)
		}
		for _, m := range ms {
			if !slices.Equal(m.owned, g.Target(m.id)) {
				return fmt.Errorf("member %s owns %v, target %v", m.id, m.owned, g.Target(m.id))
			}
		}
	}
	return nil
}

// passResult is what a steady pass measured.
type passResult struct {
	n        int
	elapsed  time.Duration
	lat      []time.Duration
	bytes    int64
	unsteady int
}

func (p *passResult) add(o passResult) {
	p.n += o.n
	p.elapsed += o.elapsed
	p.lat = append(p.lat, o.lat...)
	p.bytes += o.bytes
	p.unsteady += o.unsteady
}

func (p *passResult) avgBytes() float64 { return float64(p.bytes) / float64(max(p.n, 1)) }

func (p *passResult) percentile(q float64) time.Duration { return percentile(p.lat, q) }

// percentile is the q-quantile of lat (0 when it is empty).
func percentile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func passRate(p passResult) float64 { return rate(p.n, p.elapsed) }

func avgLen(bodies [][]byte) int {
	total := 0
	for _, b := range bodies {
		total += len(b)
	}
	return total / max(len(bodies), 1)
}

// steadyPass sends count steady heartbeats (members in turn, starting at start)
// from c goroutines and records each one's latency.
func steadyPass(ctx context.Context, client *http.Client, baseURL string, members []*member, bodies [][]byte, start, count, c int) (passResult, error) {
	lats := make([][]time.Duration, c)
	var respBytes atomic.Int64
	var unsteady atomic.Int64
	t0 := time.Now()
	err := parallel(ctx, c, count, func(w, j int) error {
		i := (start + j) % len(members)
		m := members[i]
		var resp wire.HeartbeatResponse
		t := time.Now()
		n, err := post(ctx, client, baseURL+m.path(), bodies[i], &resp)
		lats[w] = append(lats[w], time.Since(t))
		if err != nil {
			return err
		}
		respBytes.Add(int64(n))
		if resp.Status != wire.StatusOK || resp.MemberEpoch != m.epoch || len(resp.Assignment.AssignedShards) != len(m.owned) || len(resp.Assignment.PendingShards) != 0 {
			unsteady.Add(1)
		}
		return nil
	})
	res := passResult{n: count, elapsed: time.Since(t0), bytes: respBytes.Load(), unsteady: int(unsteady.Load())}
	for _, l := range lats {
		res.lat = append(res.lat, l...)
	}
	return res, err
}

// parallel runs fn(worker, i) for i in [0, n) on c goroutines; the first error
// stops the others.
func parallel(ctx context.Context, c, n int, fn func(w, i int) error) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	var failed atomic.Bool
	for w := 0; w < c; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() && ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(w, i); err != nil {
					once.Do(func() { first = err })
					failed.Store(true)
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

func newHTTPClient(conns int) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			Proxy: nil, MaxIdleConns: conns * 2, MaxIdleConnsPerHost: conns * 2, IdleConnTimeout: time.Minute,
			DialContext: (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		},
	}
}

// benchAuth is the coordinator's default: heartbeats need the MEMBER role,
// which the default admin holds; every heartbeat sends its credentials, as
// members do. The replicas share a cluster secret, as --ha replicas do: a
// follower forwards a signed principal assertion to the leader.
var benchAuth = httpapi.AuthConfig{AuthenticateMemberAPI: true, ClusterSecret: "rscbench-cluster-secret"}

// post sends one heartbeat and decodes the answer; it returns the body size.
func post(ctx context.Context, client *http.Client, url string, body []byte, into *wire.HeartbeatResponse) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.SetBasicAuth("admin", "password")
	res, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	data, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return 0, err
	}
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST %s: HTTP %d: %s", url, res.StatusCode, bytes.TrimSpace(data))
	}
	if err := json.Unmarshal(data, into); err != nil {
		return 0, fmt.Errorf("POST %s: decode answer: %w", url, err)
	}
	return len(data), nil
}

// bareServer is the baseline: net/http with a JSON handler on the same route
// that decodes the same request struct and answers a response of the same shape
// and size (the member's epoch and the shards it reports), and nothing else.
type bareServer struct {
	URL string
	srv *http.Server
	ln  net.Listener
}

func openBareServer() (*bareServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /coord/v1/streams/{streamPrefix}/groups/{consumerGroup}/members/{memberId}/heartbeat", bareHeartbeat)
	s := &bareServer{URL: "http://" + ln.Addr().String(), ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *bareServer) Close() error {
	err := s.srv.Close()
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func bareHeartbeat(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, httpapi.MaxBodyBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var req wire.HeartbeatRequest
	if err := json.Unmarshal(data, &req); err != nil || req.MemberEpoch == nil || req.MetadataVersion == nil {
		http.Error(w, "malformed heartbeat", http.StatusBadRequest)
		return
	}
	assigned := make([]wire.ShardRef, 0, len(req.OwnedShards))
	for _, s := range req.OwnedShards {
		assigned = append(assigned, wire.ShardRef{ShardIndex: s.ShardIndex})
	}
	resp := wire.HeartbeatResponse{
		ResponseTo: req.RequestID, Status: wire.StatusOK, MemberID: r.PathValue("memberId"), MemberEpoch: *req.MemberEpoch,
		HeartbeatIntervalMs: 3000, RebalanceTimeoutMs: benchRebalanceTimeout.Milliseconds(),
		GroupEpoch: *req.MemberEpoch, AssignmentEpoch: *req.MemberEpoch, MetadataVersion: *req.MetadataVersion,
		Assignment: wire.HeartbeatAssignment{AssignedShards: assigned, PendingShards: []wire.ShardRef{}, MetadataVersion: *req.MetadataVersion},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}
