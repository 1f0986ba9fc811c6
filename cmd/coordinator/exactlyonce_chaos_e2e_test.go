package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/internal/faultproxy"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
)

// TestIntegrationExactlyOnceChaos: idempotent producers of a plain and of
// an ordered group publish through a proxy that loses 5% of the replies of
// the publish scripts and of the cross-layout reads after Redis ran them
// and cuts every connection at each layout change, while the group is
// scaled 4 -> 8 -> 3 -> 6 -> 4 through the admin API and the coordinator is
// stopped and started again (same log, same address) twice; producer
// processes restart and re-publish what they did not see acknowledged (and
// a few ids they did); a reader acknowledges everything (so scale-ins
// drain) and records what it saw; a last producer without faults publishes
// what was never acknowledged. Every event id has exactly one stream entry
// (distinct stream key and entry id among everything the reader saw), every
// acknowledgement names it, and nothing is lost. Seed: RSC_CHAOS_SEED.
func TestIntegrationExactlyOnceChaos(t *testing.T) {
	parallel(t)
	seed := int64(1)
	if v := os.Getenv("RSC_CHAOS_SEED"); v != "" {
		seed, _ = strconv.ParseInt(v, 10, 64)
	}
	t.Logf("seed %d", seed)
	for _, ordering := range []string{"NONE", "KEY"} {
		t.Run(ordering, func(t *testing.T) { exactlyOnceChaos(t, seed, ordering) })
	}
}

func exactlyOnceChaos(t *testing.T, seed int64, ordering string) {
	rs := redistest.StartProcess(t)
	stream := fmt.Sprintf("coordinator:events:chaos:%d", time.Now().UnixNano())
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	start := func() *testCoordinator {
		return startCoordinator(t, rs, func(m *Main) {
			fastTimings(m)
			m.LogStream, m.Listen, m.KeepRetiredStreams = stream, listen, true // kept: every entry stays countable
		})
	}
	tc := start()
	const prefix, group, span = "chaos", "g", 8
	tc.Do("POST", fmt.Sprintf("/coord/v1/streams/%s/groups/%s", prefix, group),
		map[string]any{"initialShardCount": 4, "requestedBy": "test", "ordering": ordering}).MustStatus(t, 201)
	rdb := rs.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, src := range []string{producer.PublishScript, producer.DedupPublishScript} {
		if err := rdb.ScriptLoad(ctx, src).Err(); err != nil {
			t.Fatal(err)
		}
	}
	px := faultproxy.Start(t, rdb.Options().Addr)
	prdb := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: 3})
	t.Cleanup(func() { _ = prdb.Close() })
	px.DropRandom(0.05, seed, "EVALSHA", "EVAL", "HGET", "MGET")
	coord := client.New("http://"+listen, client.BasicAuth{Username: "admin", Password: "password"})

	var mu sync.Mutex
	acked := map[string]string{} // event id -> "stream/id" answered
	ack := func(res producer.Result) {
		mu.Lock()
		defer mu.Unlock()
		at := res.StreamKey + "/" + res.ID
		if prev, ok := acked[res.EventID]; ok && prev != at {
			t.Errorf("event %s acknowledged as %s, then as %s", res.EventID, prev, at)
		}
		acked[res.EventID] = at
	}
	keyOf := func(id string) string { return "key-" + strconv.Itoa(len(id)*7+int(id[len(id)-1])) }
	var all []*producer.Producer
	newProducer := func() *producer.Producer {
		p, err := producer.New(producer.Config{Coordinator: coord, Redis: prdb, StreamPrefix: prefix, ConsumerGroup: group,
			EventIDField: eventIDField, DedupWindow: time.Minute, MaxAttempts: 3, StaleTimeout: 20 * time.Second,
			RefreshInterval: 200 * time.Millisecond, Lease: time.Minute})
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		all = append(all, p)
		mu.Unlock()
		return p
	}

	// The reader: every shard, read and acknowledged, what it saw recorded.
	var seenMu sync.Mutex
	seen := map[string][]string{} // event id -> "stream/id" of each delivery
	readPass := func() int {
		n := 0
		for s := 0; s < span; s++ {
			key := routing.StreamKey(prefix, s)
			res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "reader", Streams: []string{key, ">"}, Count: 500, Block: -1}).Result()
			if err != nil {
				continue // not provisioned (yet), or empty
			}
			for _, st := range res {
				ids := make([]string, 0, len(st.Messages))
				seenMu.Lock()
				for _, m := range st.Messages {
					id, _ := m.Values[eventIDField].(string)
					seen[id] = append(seen[id], key+"/"+m.ID)
					ids = append(ids, m.ID)
				}
				seenMu.Unlock()
				if len(ids) > 0 {
					rdb.XAck(ctx, key, group, ids...)
					n += len(ids)
				}
			}
		}
		return n
	}
	var stop atomic.Bool
	var readerWG sync.WaitGroup
	readerWG.Add(1)
	go func() {
		defer readerWG.Done()
		for !stop.Load() {
			if readPass() == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()

	const procs = 3
	var published atomic.Int64
	var wg sync.WaitGroup
	leftovers := make([][]string, procs)
	var producing atomic.Bool
	producing.Store(true)
	for w := 0; w < procs; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			p := newProducer()
			var unacked, done []string
			publish := func(ids []string) {
				if rng.IntN(2) == 0 {
					for _, id := range ids {
						res, err := p.Publish(ctx, keyOf(id), map[string]any{eventIDField: id})
						if err != nil {
							unacked = append(unacked, id)
							continue
						}
						ack(res)
						done = append(done, id)
					}
					return
				}
				msgs := make([]producer.Message, len(ids))
				for i, id := range ids {
					msgs[i] = producer.Message{PartitionKey: keyOf(id), Fields: map[string]any{eventIDField: id}}
				}
				res, _ := p.PublishBatch(ctx, msgs)
				for i, r := range res {
					if r.Err != nil {
						unacked = append(unacked, ids[i])
						continue
					}
					ack(r)
					done = append(done, ids[i])
				}
			}
			for n := 0; producing.Load(); {
				size := 1 + rng.IntN(16)
				ids := make([]string, 0, size)
				for ; len(ids) < size; n++ {
					ids = append(ids, fmt.Sprintf("w%d-%d", w, n))
				}
				published.Add(int64(len(ids)))
				publish(ids)
				if rng.IntN(8) == 0 { // the process restarts
					p = newProducer()
					again := unacked
					unacked = nil
					for i := 0; i < 3 && len(done) > 0; i++ {
						again = append(again, done[rng.IntN(len(done))])
					}
					publish(again)
				}
				time.Sleep(2 * time.Millisecond)
			}
			leftovers[w] = unacked
		}()
	}

	// Four layout changes, each after a cut of every connection; the
	// coordinator stopped and started again after the second and the third.
	for i, target := range []int{8, 3, 6, 4} {
		time.Sleep(200 * time.Millisecond)
		px.Cut()
		id := scale(t, tc, prefix, group, target)
		waitState(t, tc, prefix, group, id, "DEPRECATED", 60*time.Second)
		t.Logf("change %d: %d shards (%d event ids so far)", i+1, target, published.Load())
		if i == 1 || i == 2 {
			if err := tc.Main.Close(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // producers run on their cached routing meanwhile
			tc = start()
		}
	}
	time.Sleep(200 * time.Millisecond)
	producing.Store(false)
	wg.Wait()

	// A last process, without faults, publishes what was never acknowledged.
	px.DropRandom(0, 0)
	last := newProducer()
	for _, ids := range leftovers {
		for _, id := range ids {
			res, err := last.Publish(ctx, keyOf(id), map[string]any{eventIDField: id})
			if err != nil {
				t.Fatal(err)
			}
			ack(res)
		}
	}
	stop.Store(true)
	readerWG.Wait()
	for readPass() > 0 {
	}

	entries := map[string]string{}
	for s := 0; s < span; s++ {
		key := routing.StreamKey(prefix, s)
		for _, e := range rdb.XRange(ctx, key, "-", "+").Val() {
			id, _ := e.Values[eventIDField].(string)
			if prev, ok := entries[id]; ok {
				t.Fatalf("event %s written twice: %s and %s/%s", id, prev, key, e.ID)
			}
			entries[id] = key + "/" + e.ID
		}
	}
	total := int(published.Load())
	if len(entries) != total {
		t.Fatalf("%d event ids in the streams, want %d", len(entries), total)
	}
	for id, at := range acked {
		if entries[id] != at {
			t.Fatalf("event %s acknowledged as %s, its entry is %s", id, at, entries[id])
		}
	}
	if len(acked) != total {
		t.Fatalf("%d event ids acknowledged, want %d", len(acked), total)
	}
	for id, at := range seen {
		if len(at) != 1 || at[0] != entries[id] {
			t.Fatalf("the reader saw event %s as %v, its entry is %s", id, at, entries[id])
		}
	}
	if len(seen) != total {
		t.Fatalf("the reader saw %d event ids, want %d", len(seen), total)
	}
	var sum producer.Stats
	for _, p := range all {
		st := p.Stats()
		sum.LayoutChecks += st.LayoutChecks
		sum.UnfencedChecks += st.UnfencedChecks
		sum.Duplicates += st.Duplicates
		sum.StaleRetries += st.StaleRetries
	}
	// Every check of an old layout's shard found its fence raised: none
	// relied on luck.
	if sum.UnfencedChecks != 0 || sum.LayoutChecks == 0 {
		t.Fatalf("producers' checks across layouts: %+v", sum)
	}
	t.Logf("%s: %d event ids, %d entries, proxy %+v, producers %+v", strings.ToLower(ordering), total, len(entries), px.Stats(), sum)
}
