package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/internal/redisurl"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/wire"
)

// A log that survives a primary failover. Redis replicates asynchronously: a
// primary that dies right after acknowledging an append can take it along,
// and a replica promoted in its place has a log that is behind what the
// coordinator applied and answered. These tests kill the primary holding the
// log (Redis Sentinel, and a Redis Cluster master with its replica) at
// awkward moments and check three things: without --log-replicas, the
// coordinator keeps the state it answered from (LOG_LOST, ENTRIES_LOST: never
// folding on from a log that lacks its entries, never reloading the log's
// shorter state) until it is restored, and then serves the replay of the
// log; with --log-replicas, that no decision it answered with a 2xx is
// missing from the log, and the state it serves is the replay of the log.

// failoverTopology is a Redis deployment whose log primary a test can crash.
type failoverTopology interface {
	url() string
	// sync waits until the log primary's replicas have everything it wrote.
	sync(t *testing.T)
	// holdUp holds up the replication links of the log primary's replicas:
	// nothing it writes from now on reaches them.
	holdUp(t *testing.T)
	// crash kills the log primary (no sync), lets held-up replicas go, and
	// waits until one of them was promoted.
	crash(t *testing.T)
	// restore gives the new primary a replica again (the old primary,
	// restarted), so that --log-replicas 1 can be met.
	restore(t *testing.T)
}

type sentinelTopology struct {
	ss   *redistest.SentinelSet
	held []*redistest.Server
	dead *redistest.Server
}

func newSentinelTopology(t *testing.T) failoverTopology {
	return &sentinelTopology{ss: redistest.StartSentinel(t, 1, 3)}
}

func (s *sentinelTopology) url() string { return s.ss.URL() }
func (s *sentinelTopology) sync(t *testing.T) {
	waitReplicasWriting(t, s.ss.Primary(t).Client(t), "test:sync", len(s.ss.Replicas(t)))
}
func (s *sentinelTopology) holdUp(t *testing.T) {
	s.held = s.ss.Replicas(t)
	redistest.HoldUpReplicas(t, s.ss.Primary(t), s.held...)
}
func (s *sentinelTopology) crash(t *testing.T) {
	s.dead = s.ss.Primary(t)
	s.ss.KillPrimary(t, false, s.held...)
}
func (s *sentinelTopology) restore(t *testing.T) { s.ss.Restart(t, s.dead) }

type clusterTopology struct {
	cl      *redistest.Cluster
	logKey  string
	master  string
	replica *redistest.Server
}

func newClusterTopology(logKey string) func(t *testing.T) failoverTopology {
	return func(t *testing.T) failoverTopology {
		return &clusterTopology{cl: redistest.StartCluster(t, 3, 1), logKey: logKey}
	}
}

func (c *clusterTopology) url() string { return c.cl.URL() }
func (c *clusterTopology) sync(t *testing.T) {
	m := c.cl.MasterFor(t, c.logKey)
	rdb := redis.NewClient(&redis.Options{Addr: m})
	defer rdb.Close()
	key, err := redisstore.SameSlotKey(c.logKey, "test-sync")
	if err != nil {
		t.Fatal(err)
	}
	waitReplicasWriting(t, rdb, key, len(c.cl.ReplicasOf(t, m)))
}
func (c *clusterTopology) holdUp(t *testing.T) {
	c.master = c.cl.MasterFor(t, c.logKey)
	replicas := c.cl.ReplicasOf(t, c.master)
	if len(replicas) != 1 {
		t.Fatalf("master %s has replicas %v, want one", c.master, replicas)
	}
	c.replica = c.cl.Node(replicas[0])
	redistest.HoldUpReplicas(t, c.cl.Node(c.master), c.replica)
}
func (c *clusterTopology) crash(t *testing.T) {
	if c.replica == nil { // not held up
		c.master = c.cl.MasterFor(t, c.logKey)
		c.cl.Crash(t, c.master)
		return
	}
	c.cl.Crash(t, c.master, c.replica)
}
func (c *clusterTopology) restore(t *testing.T) { c.cl.Restart(t, c.master) }

// waitReplicasWriting waits until n replicas of the server behind rdb have
// what it wrote so far: WAIT after a write (of key) on this connection covers
// every write before it.
func waitReplicasWriting(t *testing.T, rdb *redis.Client, key string, n int) {
	t.Helper()
	ctx := context.Background()
	conn := rdb.Conn()
	defer conn.Close()
	if err := conn.Set(ctx, key, time.Now().String(), 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := conn.Wait(ctx, n, 20*time.Second).Result()
	if err != nil || got < int64(n) {
		t.Fatalf("WAIT %d: %d, %v", n, got, err)
	}
}

// startOnURL runs the coordinator in-process on the Redis redisURL names.
func startOnURL(t *testing.T, redisURL string, args ...string) *testCoordinator {
	t.Helper()
	m := NewMain()
	m.Stderr = io.Discard
	if os.Getenv("RSC_TEST_LOGS") != "" {
		m.Stderr = os.Stderr
	}
	if err := m.ParseFlags(append([]string{"--listen", "127.0.0.1:0", "--redis", redisURL}, args...)); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	tc := &testCoordinator{t: t, Main: m, URL: m.URL()}
	tc.waitReady()
	return tc
}

// tryCreate creates group g of prefix "fo" and returns the HTTP status (0 on
// a transport error).
func tryCreate(tc *testCoordinator, g string) int {
	r, err := tc.TryDoAs("admin", "password", "POST", "/coord/v1/streams/fo/groups/"+g, map[string]any{"initialShardCount": 2, "requestedBy": "test"})
	if err != nil {
		return 0
	}
	return r.Status
}

// replayGroups folds the log as Redis holds it now (a fresh client) and
// returns the encoded state and its group names. A restore in the log is
// folded from, from its snapshot.
func replayGroups(t *testing.T, redisURL, logKey string) ([]byte, []string, error) {
	t.Helper()
	rdb, err := redisurl.New(redisURL, redisurl.TLSFiles{})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	log := redisstore.NewLog(rdb, logKey)
	st := projection.New()
	_, err = projection.Fold(ctx, log, st, projection.FoldOptions{})
	var re *projection.RestoredError
	if errors.As(err, &re) {
		snap, lerr := redisstore.NewSnapshotStore(rdb, logKey).LoadAt(ctx, re.ID)
		if lerr != nil {
			return nil, nil, lerr
		}
		if st, err = projection.Restore(snap); err != nil {
			return nil, nil, err
		}
		_, err = projection.Fold(ctx, log, st, projection.FoldOptions{})
	}
	if err != nil {
		return nil, nil, err
	}
	data, err := st.Capture().Encode()
	return data, names(st), err
}

func names(st *projection.State) []string {
	var out []string
	for _, g := range st.Groups() {
		out = append(out, g.Key.ConsumerGroup)
	}
	sort.Strings(out)
	return out
}

// waitServedIsReplay waits until the coordinator serves exactly the replay of
// the log, and returns the log's groups.
func waitServedIsReplay(t *testing.T, tc *testCoordinator, redisURL, logKey string) map[string]bool {
	t.Helper()
	var served, logged []string
	var lastErr error
	deadline := time.Now().Add(30 * time.Second)
	for {
		replayed, groups, err := replayGroups(t, redisURL, logKey)
		st := tc.Main.Coordinator().State()
		mine, cerr := st.Capture().Encode()
		if err == nil && cerr == nil && bytes.Equal(mine, replayed) {
			out := map[string]bool{}
			for _, g := range groups {
				out[g] = true
			}
			return out
		}
		served, logged, lastErr = names(st), groups, err
		if time.Now().After(deadline) {
			t.Fatalf("the coordinator serves groups %v (at %s), the log replays to %v (%v)", served, st.LastID(), logged, lastErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestIntegrationLogFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: Sentinel sets and Redis Clusters")
	}
	for _, topo := range []struct {
		name  string
		start func(t *testing.T, logKey string) failoverTopology
	}{
		{"sentinel", func(t *testing.T, _ string) failoverTopology { return newSentinelTopology(t) }},
		{"cluster", func(t *testing.T, logKey string) failoverTopology { return newClusterTopology(logKey)(t) }},
	} {
		t.Run(topo.name, func(t *testing.T) {
			// The replica's link held up, five creates, the primary
			// killed, the replica promoted: the log lost them, the
			// coordinator kept them and the restore writes them back.
			t.Run("without --log-replicas the log loses the answered creates, the coordinator keeps them", func(t *testing.T) {
				heldUpCreates(t, topo.start, false)
			})
			t.Run("with --log-replicas 1 none answered is lost", func(t *testing.T) {
				heldUpCreates(t, topo.start, true)
			})
			t.Run("with --log-replicas 1 a kill amid creates loses none answered", func(t *testing.T) {
				killAmidCreates(t, topo.start)
			})
		})
	}
}

func replicaFlags(on bool) []string {
	if !on {
		return nil
	}
	return []string{"--log-replicas", "1", "--log-replicas-timeout", "500ms"}
}

func heldUpCreates(t *testing.T, start func(*testing.T, string) failoverTopology, replicas bool) {
	logKey := fmt.Sprintf("coordinator:events:%d", time.Now().UnixNano())
	topo := start(t, logKey)
	tc := startOnURL(t, topo.url(), append([]string{"--log-stream", logKey}, replicaFlags(replicas)...)...)
	for i := 1; i <= 3; i++ {
		if st := tryCreate(tc, fmt.Sprintf("before-%d", i)); st != 201 {
			t.Fatalf("create before-%d: %d", i, st)
		}
	}
	topo.sync(t)
	topo.holdUp(t)
	answered := map[string]int{}
	for i := 1; i <= 5; i++ {
		g := fmt.Sprintf("held-%d", i)
		answered[g] = tryCreate(tc, g)
	}
	topo.crash(t)
	if replicas {
		topo.restore(t)
	} else {
		lostAndRestored(t, tc, answered)
	}
	// The first decision after the failover: retried while the client finds
	// the new primary (503), then decided on the log as it is. A 409 says an
	// attempt answered 503 took effect after all (its entry was on the new
	// primary, only the WAIT for its replica timed out).
	seen := map[int]int{}
	deadline := time.Now().Add(failoverAnswerWait)
	for st := tryCreate(tc, "after"); st != 201 && st != 409; st = tryCreate(tc, "after") {
		seen[st]++
		if time.Now().After(deadline) {
			t.Fatalf("no create answered 201 within %v after the failover; answers by status: %v", failoverAnswerWait, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
	inLog := waitServedIsReplay(t, tc, topo.url(), logKey)
	for _, g := range []string{"before-1", "before-2", "before-3", "after"} {
		if !inLog[g] {
			t.Errorf("%s (answered 201) is missing from the log", g)
		}
	}
	acked := 0
	for g, st := range answered {
		ok := st >= 200 && st < 300
		if ok {
			acked++
		}
		switch {
		case !replicas && ok && !inLog[g]:
			t.Errorf("%s (answered 201, lost by the failover) is not in the restored log", g)
		case replicas && ok:
			// 503 as a rule; a request the client gave up on (0) is no
			// answer either (a frozen cluster node can hold a slot map
			// refresh up to the read timeout).
			t.Errorf("with --log-replicas 1, %s was answered %d while the replica was held up (in the log after the failover: %v), want 503", g, st, inLog[g])
		}
	}
	if !replicas && acked == 0 {
		t.Errorf("without --log-replicas no held-up create was answered 201 (%v): the primary acknowledges alone", answered)
	}
	t.Logf("held-up creates answered %v; the log holds %v after the failover", answered, keys(inLog))
}

// lostAndRestored: the failover lost entries the coordinator applied (the
// creates answered 201 while the replica was held up). It keeps serving them
// (LOG_LOST, ENTRIES_LOST, counting what was lost) and refuses decisions
// until it is restored; the restore writes them back.
func lostAndRestored(t *testing.T, tc *testCoordinator, answered map[string]int) {
	t.Helper()
	acked := 0
	for _, st := range answered {
		if st == 201 {
			acked++
		}
	}
	var r wire.Readiness
	deadline := time.Now().Add(failoverAnswerWait)
	for {
		// A decision finds the loss at once (its append conflicts); the
		// guard within --redis-check-interval otherwise.
		tryCreate(tc, "during")
		resp, err := http.Get(tc.URL + "/readyz")
		if err == nil {
			r = wire.Readiness{}
			_ = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
			if r.Status == "LOG_LOST" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not LOG_LOST within %v after the failover: %+v", failoverAnswerWait, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.LogLost == nil || r.LogLost.Cause != "ENTRIES_LOST" || r.LogLost.LostEntries < int64(acked) {
		t.Fatalf("/readyz %+v: want ENTRIES_LOST counting at least the %d creates answered 201", r.LogLost, acked)
	}
	if st := tryCreate(tc, "refused"); st != 503 {
		t.Fatalf("a create while LOG_LOST: %d, want 503", st)
	}
	for g, st := range answered {
		if st != 201 {
			continue
		}
		if got := tc.Do("GET", "/coord/v1/streams/fo/groups/"+g, nil); got.Status != 200 {
			t.Fatalf("%s (answered 201, lost by the failover) is not served while LOG_LOST: %d", g, got.Status)
		}
	}
	tc.Do("POST", "/coord/v1/log/restore", map[string]any{"requestedBy": "test", "reason": "the failover lost entries"}).MustStatus(t, 200)
}

// failoverAnswerWait bounds the wait for a decision after the log's primary
// was killed: the failover itself, which redistest gives 90 s on a loaded
// machine (Sentinel's TILT mode alone can take 30 s), and the client's
// finding the new primary.
const failoverAnswerWait = 120 * time.Second

// killAmidCreates kills the log's primary without syncing while creates
// keep coming: every create answered 2xx is in the log afterwards.
func killAmidCreates(t *testing.T, start func(*testing.T, string) failoverTopology) {
	logKey := fmt.Sprintf("coordinator:events:%d", time.Now().UnixNano())
	topo := start(t, logKey)
	// Three creators without pause make hundreds of groups a second once the
	// new primary has its replica again, and a failover on a loaded machine
	// can take long enough for them to reach --max-groups (1024 by default)
	// and the admin rate limit (and the admin's quotas) before the wait below
	// looks: every create is then refused (409 GROUP_LIMIT_REACHED,
	// PRINCIPAL_GROUP_QUOTA_EXCEEDED, 429) and none is answered 201. None of
	// these limits is what this test is about.
	limits := []string{"--max-groups", "1000000", "--rate-limit-per-minute", "0", "--max-groups-per-principal", "0", "--max-groups-per-prefix", "0",
		"--max-shards-per-principal", "0", "--max-shards-per-prefix", "0"}
	tc := startOnURL(t, topo.url(), append(append([]string{"--log-stream", logKey}, replicaFlags(true)...), limits...)...)
	var mu sync.Mutex
	answered := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				g := fmt.Sprintf("w%d-%d", w, i)
				st := tryCreate(tc, g)
				mu.Lock()
				answered[g] = st
				mu.Unlock()
			}
		}()
	}
	count := func(status int) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, s := range answered {
			if s == status {
				n++
			}
		}
		return n
	}
	eventually(t, 20*time.Second, "creates answered before the kill", func() bool { return count(201) >= 10 })
	topo.crash(t)
	topo.restore(t)
	statuses := func() map[int]int {
		mu.Lock()
		defer mu.Unlock()
		out := map[int]int{}
		for _, s := range answered {
			out[s]++
		}
		return out
	}
	deadline := time.Now().Add(failoverAnswerWait)
	for {
		before := count(201)
		time.Sleep(200 * time.Millisecond)
		if count(201) > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no create answered 201 within %v after the failover; answers by status so far: %v", failoverAnswerWait, statuses())
		}
	}
	close(stop)
	wg.Wait()
	inLog := waitServedIsReplay(t, tc, topo.url(), logKey)
	var lost []string
	for g, st := range answered {
		if st >= 200 && st < 300 && !inLog[g] {
			lost = append(lost, g)
		}
	}
	t.Logf("creates answered by status %v; %d groups in the log", statuses(), len(inLog))
	if len(lost) > 0 {
		sort.Strings(lost)
		t.Fatalf("%d creates answered 201 are missing from the log after the failover: %s", len(lost), strings.Join(lost, " "))
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
