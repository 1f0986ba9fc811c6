package producer_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/internal/faultproxy"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
)

// proxiedCluster is a cluster client whose connections to every node go
// through a faultproxy of that node (created on first dial).
type proxiedCluster struct {
	t       *testing.T
	mu      sync.Mutex
	proxies map[string]*faultproxy.Proxy
}

func (pc *proxiedCluster) proxy(addr string) *faultproxy.Proxy {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	px := pc.proxies[addr]
	if px == nil {
		var err error
		if px, err = faultproxy.Listen(addr); err != nil {
			pc.t.Error(err)
			return nil
		}
		pc.t.Cleanup(px.Close)
		pc.proxies[addr] = px
	}
	return px
}

func (pc *proxiedCluster) each(f func(*faultproxy.Proxy)) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, px := range pc.proxies {
		f(px)
	}
}

// client returns a cluster client through the proxies; retries -1 turns off
// go-redis's retries of a command whose reply was lost (the cluster client
// retries those up to MaxRedirects times, each node client MaxRetries).
func (pc *proxiedCluster) client(cl *redistest.Cluster, retries int) *redis.ClusterClient {
	redirects := 3
	if retries < 0 {
		redirects = -1
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Seeds(), MaxRetries: retries, MaxRedirects: redirects, ClusterStateReloadInterval: time.Second,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			if px := pc.proxy(addr); px != nil {
				addr = px.Addr()
			}
			return d.DialContext(ctx, network, addr)
		}})
	pc.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// On a Redis Cluster: records live in their stream's slot; lost replies on
// every master leave one entry per event id; after 4 → 6, a fresh producer
// finds an event id on its old shard, on another master than its new one.
func TestIdempotentPublishOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	direct := cl.Client(t)
	ctx := context.Background()
	for _, src := range []string{producer.PublishScript, producer.DedupPublishScript} {
		if err := direct.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.ScriptLoad(ctx, src).Err() }); err != nil {
			t.Fatal(err)
		}
	}
	coord := newFakeCoordinator(t, 1, 4)
	mustStreams(t, direct, 4)
	pc := &proxiedCluster{t: t, proxies: map[string]*faultproxy.Proxy{}}
	rdb := pc.client(cl, 3)
	newProducer := func(r redis.UniversalClient, attempts int) *producer.Producer {
		p, err := producer.New(producer.Config{Coordinator: client.New(coord.srv.URL, nil), Redis: r, StreamPrefix: prefix, ConsumerGroup: group,
			EventIDField: eventField, DedupWindow: time.Minute, MaxAttempts: attempts})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := newProducer(rdb, 5)
	if _, err := p.Routing(ctx); err != nil {
		t.Fatal(err)
	}
	// Connect to every master once, so every proxy exists, then drop.
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	pc.each(func(px *faultproxy.Proxy) { px.DropRandom(0.2, 11, "EVALSHA", "EVAL") })
	const rounds, size = 20, 32
	answered := map[string]string{}
	for round := 0; round < rounds; round++ {
		msgs := make([]producer.Message, size)
		for i := range msgs {
			msgs[i] = producer.Message{PartitionKey: "c" + strconv.Itoa(i), Fields: map[string]any{eventField: "c" + strconv.Itoa(round) + "-" + strconv.Itoa(i)}}
		}
		res, err := p.PublishBatch(ctx, msgs)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for _, r := range res {
			answered[r.EventID] = r.StreamKey + "/" + r.ID
			rec := producer.DedupKey(r.StreamKey, r.EventID)
			if routing.Slot(rec) != routing.Slot(r.StreamKey) {
				t.Fatalf("record %s outside the slot of %s", rec, r.StreamKey)
			}
		}
	}
	var dropped int64
	pc.each(func(px *faultproxy.Proxy) { px.DropRandom(0, 0); dropped += px.Stats().Dropped })
	seen := map[string]bool{}
	for s := 0; s < 4; s++ {
		key := routing.StreamKey(prefix, s)
		for _, e := range direct.XRange(ctx, key, "-", "+").Val() {
			id := e.Values[eventField].(string)
			if seen[id] {
				t.Fatalf("event %s written twice", id)
			}
			seen[id] = true
			if answered[id] != key+"/"+e.ID {
				t.Fatalf("event %s: answered %s, entry %s/%s", id, answered[id], key, e.ID)
			}
			if got := direct.Get(ctx, producer.DedupKey(key, id)).Val(); got != e.ID {
				t.Fatalf("record of %s: %q, want %s", id, got, e.ID)
			}
		}
	}
	if len(seen) != rounds*size || dropped == 0 {
		t.Fatalf("%d event ids written, want %d; %d replies dropped", len(seen), rounds*size, dropped)
	}

	// The reply of E lost under 4 shards; 4 → 6 (powers of two keep these
	// stream keys' old and new shards on one master); a fresh producer.
	masters := make([]string, 6)
	for s := range masters {
		masters[s] = cl.MasterFor(t, routing.StreamKey(prefix, s))
	}
	key, from, to := "", 0, 0
	for i := 0; key == "" && i < 10_000; i++ {
		k := "x" + strconv.Itoa(i)
		a, _ := routing.RouteKey(k, 4)
		b, _ := routing.RouteKey(k, 6)
		if a != b && masters[a] != masters[b] {
			key, from, to = k, a, b
		}
	}
	if key == "" {
		t.Fatalf("no key moves between masters in 4 -> 6 (shards on %v)", masters)
	}
	once := newProducer(pc.client(cl, -1), 1)
	pc.each(func(px *faultproxy.Proxy) { px.DropNext(1, "EVALSHA", "EVAL") })
	if _, err := once.Publish(ctx, key, map[string]any{eventField: "E"}); err == nil {
		var st []string
		pc.each(func(px *faultproxy.Proxy) {
			st = append(st, fmt.Sprintf("%s %+v pending %d", px.Upstream(), px.Stats(), px.PendingDrops()))
		})
		t.Fatalf("the lost reply reached the producer: %v", st)
	}
	pc.each(func(px *faultproxy.Proxy) { px.DropNext(0) })
	reshardOn(t, coord, direct, 2, 6)
	fresh := newProducer(rdb, 2)
	res, err := fresh.Publish(ctx, key, map[string]any{eventField: "E"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Duplicate || res.ShardIndex != from {
		t.Fatalf("%+v: want the original on shard %d (the key routes to %d now)", res, from, to)
	}
	var entries []string
	for s := 0; s < 6; s++ {
		for _, e := range direct.XRange(ctx, routing.StreamKey(prefix, s), "-", "+").Val() {
			if e.Values[eventField] == "E" {
				entries = append(entries, routing.StreamKey(prefix, s))
			}
		}
	}
	if len(entries) != 1 || !strings.HasSuffix(entries[0], ":"+strconv.Itoa(from)) {
		t.Fatalf("E is in %v, want once in shard %d", entries, from)
	}
}
