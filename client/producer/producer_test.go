package producer_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
)

const (
	prefix = "orders"
	group  = "billing"
)

// fakeCoordinator serves producer-routing from a routing the test changes.
type fakeCoordinator struct {
	srv     *httptest.Server
	fetches atomic.Int64

	mu      sync.Mutex
	routing client.Routing
	fail    bool   // answer 503
	auth    string // last Authorization header
	// ordering is the Ordering of the routings set makes ("" like a
	// coordinator that predates ordered groups).
	ordering string
	// previous are the PreviousLayouts of the routings set makes; since is
	// the version at which the current layout became current (0: 1).
	previous []client.RoutingLayout
	since    int64
	// hold, when set, makes every answer wait until it is closed.
	hold chan struct{}
}

func newFakeCoordinator(t testing.TB, version int64, shards int) *fakeCoordinator {
	t.Helper()
	f := &fakeCoordinator{}
	f.set(version, shards)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.fetches.Add(1)
		f.mu.Lock()
		f.auth = r.Header.Get("Authorization")
		hold := f.hold
		f.mu.Unlock()
		if hold != nil {
			<-hold
		}
		f.mu.Lock()
		fail, rt := f.fail, f.routing
		f.mu.Unlock()
		if r.URL.Path != client.GroupPath(prefix, group)+"/producer-routing" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if fail {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"status":"SERVICE_UNAVAILABLE","errorCode":"COORDINATOR_TERMINATING","message":"down"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(rt)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// set makes the coordinator answer a routing of that version and shard count.
func (f *fakeCoordinator) set(version int64, shards int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rt := client.Routing{StreamPrefix: prefix, ConsumerGroup: group, MetadataVersion: version, ShardCount: shards,
		StreamKeyPattern: routing.KeyPattern(prefix), Shards: []client.RoutingShard{}, Ordering: f.ordering,
		PreviousLayouts: f.previous}
	if len(f.previous) > 0 {
		rt.LayoutWindowMs = time.Hour.Milliseconds()
	}
	for i := 0; i < shards; i++ {
		key := routing.StreamKey(prefix, i)
		rs := client.RoutingShard{ShardIndex: i, StreamKey: key, RedisSlot: routing.Slot(key)}
		if f.ordering != "" {
			rs.FenceKey = routing.FenceKey(key)
		}
		rt.Shards = append(rt.Shards, rs)
	}
	f.routing = rt
}

// setOrdered is set with an ordering (KEY or NONE), fence keys included.
func (f *fakeCoordinator) setOrdered(version int64, shards int, ordering string) {
	f.mu.Lock()
	f.ordering = ordering
	f.mu.Unlock()
	f.set(version, shards)
}

func (f *fakeCoordinator) setFail(fail bool) {
	f.mu.Lock()
	f.fail = fail
	f.mu.Unlock()
}

// mustStreams creates the shard streams 0..n-1 (as the coordinator's
// provisioning would), so that XADD NOMKSTREAM finds them.
func mustStreams(t *testing.T, rdb redis.UniversalClient, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		err := rdb.XGroupCreateMkStream(context.Background(), routing.StreamKey(prefix, i), group, "$").Err()
		if err != nil && err.Error() != "BUSYGROUP Consumer Group name already exists" {
			t.Fatal(err)
		}
	}
}

type fixture struct {
	coord *fakeCoordinator
	rdb   *redis.Client
}

func setup(t *testing.T, version int64, shards, streams int) fixture {
	t.Helper()
	rs := redistest.StartProcess(t)
	rdb := rs.Client(t)
	mustStreams(t, rdb, streams)
	return fixture{coord: newFakeCoordinator(t, version, shards), rdb: rdb}
}

func (fx fixture) producer(t *testing.T, mutate func(*producer.Config)) *producer.Producer {
	t.Helper()
	cfg := producer.Config{
		Coordinator: client.New(fx.coord.srv.URL, client.BasicAuth{Username: "reader", Password: "pw"}),
		Redis:       fx.rdb, StreamPrefix: prefix, ConsumerGroup: group,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	p, err := producer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func fields(i int) map[string]any { return map[string]any{"n": strconv.Itoa(i)} }

func TestPublishRoutesWithRouteV1(t *testing.T) {
	fx := setup(t, 3, 4, 4)
	p := fx.producer(t, nil)
	ctx := context.Background()
	for _, key := range []string{"order-123", "", "a", "hello", "café", "user:42"} {
		res, err := p.Publish(ctx, key, map[string]any{"payload": key})
		if err != nil {
			t.Fatalf("publish %q: %v", key, err)
		}
		want, _ := routing.RouteKey(key, 4)
		if res.ShardIndex != want || res.StreamKey != routing.StreamKey(prefix, want) {
			t.Fatalf("key %q went to %s (shard %d), want shard %d", key, res.StreamKey, res.ShardIndex, want)
		}
		if res.MetadataVersion != 3 || res.Attempts != 1 || res.ID == "" {
			t.Fatalf("result %+v", res)
		}
		msgs, err := fx.rdb.XRange(ctx, res.StreamKey, res.ID, res.ID).Result()
		if err != nil || len(msgs) != 1 || msgs[0].Values["payload"] != key {
			t.Fatalf("entry %s of %s: %v %v", res.ID, res.StreamKey, msgs, err)
		}
	}
	// "order-123" with 4 shards is shard 1 (CONTRACT §4.3).
	if res, _ := p.Publish(ctx, "order-123", fields(0)); res.ShardIndex != 1 {
		t.Fatalf("order-123 → shard %d, want 1", res.ShardIndex)
	}
	if got := fx.coord.auth; got != (client.BasicAuth{Username: "reader", Password: "pw"}).AuthorizationHeader() {
		t.Fatalf("Authorization %q", got)
	}
}

func TestPublishNeedsFields(t *testing.T) {
	fx := setup(t, 1, 1, 1)
	p := fx.producer(t, nil)
	if _, err := p.Publish(context.Background(), "k", nil); !errors.Is(err, producer.ErrNoFields) {
		t.Fatalf("err %v, want ErrNoFields", err)
	}
}

func TestRoutingCachedForTTLThenRefreshed(t *testing.T) {
	fx := setup(t, 1, 2, 2)
	p := fx.producer(t, func(c *producer.Config) { c.RefreshInterval = 150 * time.Millisecond })
	ctx := context.Background()
	for i := 0; i < 20; i++ {
		if _, err := p.Publish(ctx, strconv.Itoa(i), fields(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := fx.coord.fetches.Load(); n != 1 {
		t.Fatalf("%d routing fetches within the TTL, want 1", n)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := p.Publish(ctx, "x", fields(0)); err != nil {
		t.Fatal(err)
	}
	if n := fx.coord.fetches.Load(); n != 2 {
		t.Fatalf("%d routing fetches after the TTL, want 2", n)
	}
}

func TestConcurrentFirstUseFetchesOnce(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	p := fx.producer(t, nil)
	var wg sync.WaitGroup
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Publish(context.Background(), strconv.Itoa(i), fields(i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := fx.coord.fetches.Load(); n != 1 {
		t.Fatalf("%d routing fetches for 32 concurrent first publishes, want 1", n)
	}
}

func TestRoutingReplacedOnlyByNewerVersion(t *testing.T) {
	fx := setup(t, 5, 4, 8)
	p := fx.producer(t, func(c *producer.Config) { c.RefreshInterval = 50 * time.Millisecond })
	ctx := context.Background()
	if _, err := p.Publish(ctx, "k", fields(0)); err != nil {
		t.Fatal(err)
	}
	// An older version with another layout is not adopted.
	fx.coord.set(4, 8)
	time.Sleep(80 * time.Millisecond)
	res, err := p.Publish(ctx, "k", fields(1))
	if err != nil {
		t.Fatal(err)
	}
	if res.MetadataVersion != 5 {
		t.Fatalf("published with version %d after the coordinator answered an older one, want 5", res.MetadataVersion)
	}
	if rt, _ := p.Routing(ctx); rt.ShardCount != 4 {
		t.Fatalf("shard count %d, want the cached 4", rt.ShardCount)
	}
	// A newer one is.
	fx.coord.set(6, 8)
	time.Sleep(80 * time.Millisecond)
	res, err = p.Publish(ctx, "order-123", fields(2))
	if err != nil {
		t.Fatal(err)
	}
	if res.MetadataVersion != 6 || res.ShardIndex != 5 { // order-123 with 8 shards is 5
		t.Fatalf("result %+v, want version 6 and shard 5", res)
	}
}

func TestRoutingKeptWithinLeaseThenPublishFails(t *testing.T) {
	fx := setup(t, 1, 2, 2)
	p := fx.producer(t, func(c *producer.Config) {
		c.RefreshInterval = 50 * time.Millisecond
		c.Lease = 400 * time.Millisecond
	})
	ctx := context.Background()
	if _, err := p.Publish(ctx, "k", fields(0)); err != nil {
		t.Fatal(err)
	}
	fx.coord.setFail(true)
	time.Sleep(100 * time.Millisecond) // past the TTL, within the lease
	if _, err := p.Publish(ctx, "k", fields(1)); err != nil {
		t.Fatalf("publish within the lease while the coordinator is down: %v", err)
	}
	if err := p.Refresh(ctx); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Refresh: %v, want the coordinator's 503", err)
	}
	time.Sleep(400 * time.Millisecond) // past the lease
	_, err := p.Publish(ctx, "k", fields(2))
	if !errors.Is(err, producer.ErrRoutingLeaseExpired) {
		t.Fatalf("publish after the lease: %v, want ErrRoutingLeaseExpired", err)
	}
	t.Logf("error after the lease: %v", err)
	fx.coord.setFail(false)
	time.Sleep(50 * time.Millisecond) // past the refresh back-off
	if _, err := p.Publish(ctx, "k", fields(3)); err != nil {
		t.Fatalf("publish once the coordinator is back: %v", err)
	}
}

func TestRoutingUnavailableAtStart(t *testing.T) {
	fx := setup(t, 1, 2, 2)
	fx.coord.setFail(true)
	p := fx.producer(t, nil)
	_, err := p.Publish(context.Background(), "k", fields(0))
	if !errors.Is(err, producer.ErrRoutingUnavailable) || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("err %v, want ErrRoutingUnavailable wrapping the 503", err)
	}
}

func TestInvalidRoutingRejected(t *testing.T) {
	fx := setup(t, 1, 2, 2)
	fx.coord.mu.Lock()
	fx.coord.routing.ConsumerGroup = "someone-else"
	fx.coord.mu.Unlock()
	p := fx.producer(t, nil)
	_, err := p.Publish(context.Background(), "k", fields(0))
	if !errors.Is(err, producer.ErrInvalidRouting) {
		t.Fatalf("err %v, want ErrInvalidRouting", err)
	}
}

func TestNoShardsIsTyped(t *testing.T) {
	fx := setup(t, 7, 0, 0)
	p := fx.producer(t, nil)
	_, err := p.Publish(context.Background(), "k", fields(0))
	var ns *producer.NoShardsError
	if !errors.As(err, &ns) || !errors.Is(err, producer.ErrNoShards) || ns.MetadataVersion != 7 {
		t.Fatalf("err %v, want a *NoShardsError of version 7", err)
	}
	_, err = p.PublishBatch(context.Background(), []producer.Message{{PartitionKey: "k", Fields: fields(0)}})
	if !errors.Is(err, producer.ErrNoShards) {
		t.Fatalf("batch err %v, want ErrNoShards", err)
	}
}

// keyOnRetiredShard returns a partition key that routes to a shard >= from
// with n shards, and to a shard < from with from shards.
func keyOnRetiredShard(t *testing.T, n, from int) string {
	for i := 0; i < 1000; i++ {
		k := "key-" + strconv.Itoa(i)
		if s, _ := routing.RouteKey(k, n); s >= from {
			return k
		}
	}
	t.Fatal("no key found")
	return ""
}

func TestNilXAddRefreshesAndRetriesOnce(t *testing.T) {
	// The cached routing still has 8 shards, but a scale-in retired 4..7: their
	// streams are gone, and the coordinator now answers 4 shards.
	fx := setup(t, 1, 8, 4)
	p := fx.producer(t, nil)
	ctx := context.Background()
	if _, err := p.Routing(ctx); err != nil {
		t.Fatal(err)
	}
	fx.coord.set(2, 4)
	key := keyOnRetiredShard(t, 8, 4)
	res, err := p.Publish(ctx, key, fields(1))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := routing.RouteKey(key, 4)
	if res.Attempts != 2 || res.MetadataVersion != 2 || res.ShardIndex != want {
		t.Fatalf("result %+v, want attempt 2 on version 2 shard %d", res, want)
	}
	if n := fx.coord.fetches.Load(); n != 2 {
		t.Fatalf("%d routing fetches, want 2", n)
	}
	if exists, _ := fx.rdb.Exists(ctx, routing.StreamKey(prefix, 5)).Result(); exists != 0 {
		t.Fatal("NOMKSTREAM must not recreate a retired shard stream")
	}
}

func TestRetryIsBounded(t *testing.T) {
	fx := setup(t, 1, 8, 4)
	ctx := context.Background()
	key := keyOnRetiredShard(t, 8, 4)

	single := fx.producer(t, func(c *producer.Config) { c.MaxAttempts = 1 })
	_, err := single.Publish(ctx, key, fields(1))
	if !errors.Is(err, producer.ErrStreamMissing) {
		t.Fatalf("err %v, want ErrStreamMissing", err)
	}
	if n := fx.coord.fetches.Load(); n != 1 {
		t.Fatalf("MaxAttempts 1 fetched routing %d times, want 1", n)
	}
	// With the default two attempts and a coordinator that still answers 8
	// shards, the publish fails after one refresh and one retry.
	def := fx.producer(t, nil)
	_, err = def.Publish(ctx, key, fields(2))
	if !errors.Is(err, producer.ErrStreamMissing) {
		t.Fatalf("err %v, want ErrStreamMissing", err)
	}
	if st := def.Stats(); st.Retries != 1 || st.RoutingFetches != 2 {
		t.Fatalf("stats %+v, want 1 retry and 2 fetches", st)
	}
}

func TestPublishBatchGroupsByShardAndKeepsOrder(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	p := fx.producer(t, func(c *producer.Config) { c.EventIDField = "eventId" })
	ctx := context.Background()
	msgs := make([]producer.Message, 200)
	for i := range msgs {
		msgs[i] = producer.Message{PartitionKey: "k" + strconv.Itoa(i%37), Fields: fields(i)}
	}
	res, err := p.PublishBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	perShard := map[string][]string{}
	for i, r := range res {
		want, _ := routing.RouteKey(msgs[i].PartitionKey, 4)
		if r.Err != nil || r.ShardIndex != want || r.ID == "" || r.EventID == "" {
			t.Fatalf("result %d: %+v, want shard %d", i, r, want)
		}
		perShard[r.StreamKey] = append(perShard[r.StreamKey], msgs[i].Fields["n"].(string))
	}
	for key, want := range perShard {
		entries, err := fx.rdb.XRange(ctx, key, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != len(want) {
			t.Fatalf("%s has %d entries, want %d", key, len(entries), len(want))
		}
		for j, e := range entries {
			if e.Values["n"] != want[j] {
				t.Fatalf("%s entry %d is message %v, want %s: a shard's messages must keep input order", key, j, e.Values["n"], want[j])
			}
			if e.Values["eventId"] == "" {
				t.Fatalf("%s entry %d has no eventId", key, j)
			}
		}
	}
	if n := fx.coord.fetches.Load(); n != 1 {
		t.Fatalf("%d routing fetches, want 1", n)
	}
}

func TestPublishBatchRetriesOnlyFailed(t *testing.T) {
	fx := setup(t, 1, 8, 4)
	p := fx.producer(t, func(c *producer.Config) { c.EventIDField = "eventId" })
	ctx := context.Background()
	if _, err := p.Routing(ctx); err != nil {
		t.Fatal(err)
	}
	fx.coord.set(2, 4)
	msgs := make([]producer.Message, 40)
	for i := range msgs {
		msgs[i] = producer.Message{PartitionKey: "b" + strconv.Itoa(i), Fields: fields(i)}
	}
	res, err := p.PublishBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	retried := 0
	total := int64(0)
	for i, r := range res {
		if r.Attempts == 2 {
			retried++
			want, _ := routing.RouteKey(msgs[i].PartitionKey, 4)
			if r.MetadataVersion != 2 || r.ShardIndex != want {
				t.Fatalf("retried result %+v, want version 2 shard %d", r, want)
			}
		}
	}
	for i := 0; i < 4; i++ {
		n, _ := fx.rdb.XLen(ctx, routing.StreamKey(prefix, i)).Result()
		total += n
	}
	if retried == 0 || total != int64(len(msgs)) {
		t.Fatalf("%d retried, %d entries written, want some retried and exactly %d written", retried, total, len(msgs))
	}
}

func TestEventIDSurvivesRetry(t *testing.T) {
	fx := setup(t, 1, 8, 4)
	p := fx.producer(t, func(c *producer.Config) { c.EventIDField = "eventId" })
	ctx := context.Background()
	if _, err := p.Routing(ctx); err != nil {
		t.Fatal(err)
	}
	fx.coord.set(2, 4)
	res, err := p.Publish(ctx, keyOnRetiredShard(t, 8, 4), fields(1))
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := fx.rdb.XRange(ctx, res.StreamKey, res.ID, res.ID).Result()
	if res.Attempts != 2 || len(entries) != 1 || entries[0].Values["eventId"] != res.EventID || res.EventID == "" {
		t.Fatalf("result %+v, entry %v: the retry must carry the first attempt's event id", res, entries)
	}
	own, err := p.Publish(ctx, "k", map[string]any{"eventId": "mine", "x": "1"})
	if err != nil || own.EventID != "mine" {
		t.Fatalf("caller's event id: %+v %v", own, err)
	}
}

func TestBearerToken(t *testing.T) {
	fx := setup(t, 1, 1, 1)
	p := fx.producer(t, func(c *producer.Config) {
		c.Coordinator = client.New(fx.coord.srv.URL, client.BearerToken("tok"))
	})
	if _, err := p.Publish(context.Background(), "k", fields(0)); err != nil {
		t.Fatal(err)
	}
	if fx.coord.auth != "Bearer tok" {
		t.Fatalf("Authorization %q", fx.coord.auth)
	}
}

func TestNewValidates(t *testing.T) {
	for name, cfg := range map[string]producer.Config{
		"no coordinator": {Redis: redis.NewClient(&redis.Options{}), StreamPrefix: "p", ConsumerGroup: "g"},
		"braces":         {Coordinator: client.New("http://x", nil), Redis: redis.NewClient(&redis.Options{}), StreamPrefix: "p{1}", ConsumerGroup: "g"},
		"blank group":    {Coordinator: client.New("http://x", nil), Redis: redis.NewClient(&redis.Options{}), StreamPrefix: "p", ConsumerGroup: " "},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := producer.New(cfg); err == nil {
				t.Fatal("want an error")
			}
		})
	}
}
