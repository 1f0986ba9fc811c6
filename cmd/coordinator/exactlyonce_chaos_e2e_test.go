package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/cmd/soak/chaos"
	"github.com/rscoord/rsc/internal/faultproxy"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
)

// TestIntegrationExactlyOnceChaos: idempotent producers of a plain and of
// an ordered group publish through a proxy that loses 5% of the replies of
// the publish scripts and of the cross-layout reads after Redis ran them
// and cuts every connection at each layout change, while the group is
// scaled 4 -> 8 -> 3 -> 6 -> 4 through the admin API. The coordinator is the
// real binary on one address and log: killed with SIGKILL (no lease
// release, no final snapshot, requests in flight cut) a seeded 0-60 ms
// after the second and the fourth scale request were accepted, while that
// resharding is under way (the log names the state it was in), stopped
// gracefully (SIGTERM) after the third, and started again each time.
// Producer processes restart and re-publish what they did not see
// acknowledged (and a few ids they did); a last producer without faults
// publishes what was never acknowledged.
//
// Every key belongs to one producer goroutine, which numbers the key's
// messages (field "n", kept by every retry of the event id) and publishes a
// key's next message only once the previous one was acknowledged, so a
// key's publish order is its numbering across producer restarts and
// retries. The plain group is read by a raw reader that acknowledges
// everything (so scale-ins drain); the ordered group is consumed by the
// SDK's member runtime (client/member), which honours the barriers, with
// its handlers held from shortly before each scale request until shortly
// after it was accepted, so every shard has a backlog at the cutover (the
// same run against a plain group consumed this way shows inversions).
//
// Every event id has exactly one stream entry (distinct stream key and entry
// id among everything the consumers saw), every acknowledgement names it,
// nothing is lost; the plain reader saw every entry once; the ordered
// group's members handled every key's messages, first deliveries counted, in
// publish order (0 inversions; a redelivery is not one). Seed:
// RSC_CHAOS_SEED.
//
// Serial (see parallel): it signals coordinator processes.
func TestIntegrationExactlyOnceChaos(t *testing.T) {
	seed := int64(1)
	if v := os.Getenv("RSC_CHAOS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("RSC_CHAOS_SEED: %v", err)
		}
	}
	t.Logf("seed %d", seed)
	for _, ordering := range []string{"NONE", "KEY"} {
		t.Run(ordering, func(t *testing.T) { exactlyOnceChaos(t, seed, ordering) })
	}
}

// keyOrder records, per partition key, the sequence numbers of first
// deliveries and counts those that came after a higher one of their key.
type keyOrder struct {
	top        map[string]int // key -> highest sequence first-delivered + 1
	inversions int
	examples   []string
}

func (o *keyOrder) first(key string, seq int, at string) {
	if top := o.top[key]; seq < top-1 {
		o.inversions++
		if len(o.examples) < 5 {
			o.examples = append(o.examples, fmt.Sprintf("%s: message %d (%s) first delivered after message %d", key, seq, at, top-1))
		}
		return
	}
	o.top[key] = seq + 1
}

func exactlyOnceChaos(t *testing.T, seed int64, ordering string) {
	rs := redistest.StartProcess(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	proc := &chaos.CoordinatorProcess{
		Bin: coordinatorBinary(t), RedisURL: rs.URL(), LogStream: fmt.Sprintf("coordinator:events:chaos:%d", time.Now().UnixNano()),
		Addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), LogPath: filepath.Join(t.TempDir(), "coordinator.log"),
		// Removed shards' streams are kept: every entry stays countable.
		Args: append(slices.Clone(chaos.CoordinatorTimings), "--keep-retired-streams"),
	}
	if err := proc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proc.Stop()
		if t.Failed() {
			t.Logf("coordinator log (tail):\n%s", proc.Tail(60))
		}
	})
	restart := func(how string, halt func()) {
		t.Helper()
		halt()
		time.Sleep(100 * time.Millisecond) // producers and members run on what they cached meanwhile
		if err := proc.Start(ctx); err != nil {
			t.Fatalf("start after the %s: %v", how, err)
		}
	}
	tc := &testCoordinator{t: t, URL: proc.URL(), Redis: rs}
	const prefix, group, span = "chaos", "g", 8
	tc.Do("POST", fmt.Sprintf("/coord/v1/streams/%s/groups/%s", prefix, group),
		map[string]any{"initialShardCount": 4, "requestedBy": "test", "ordering": ordering}).MustStatus(t, 201)
	rdb := rs.Client(t)
	for _, src := range []string{producer.PublishScript, producer.DedupPublishScript} {
		if err := rdb.ScriptLoad(ctx, src).Err(); err != nil {
			t.Fatal(err)
		}
	}
	px := faultproxy.Start(t, rdb.Options().Addr)
	prdb := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: 3})
	t.Cleanup(func() { _ = prdb.Close() })
	px.DropRandom(0.05, seed, "EVALSHA", "EVAL", "HGET", "MGET")
	coord := client.New(proc.URL(), client.BasicAuth{Username: "admin", Password: "password"})

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
	var all []*producer.Producer
	// The window outlasts the whole run (about 15 s alone, past a minute
	// under -race on a loaded machine): a re-publish after the window is a
	// new entry by design, which this test would count as a duplicate.
	newProducer := func() *producer.Producer {
		p, err := producer.New(producer.Config{Coordinator: coord, Redis: prdb, StreamPrefix: prefix, ConsumerGroup: group,
			EventIDField: eventIDField, DedupWindow: 30 * time.Minute, MaxAttempts: 3, StaleTimeout: 20 * time.Second,
			RefreshInterval: 200 * time.Millisecond, Lease: time.Minute})
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		all = append(all, p)
		mu.Unlock()
		return p
	}

	// What the consumers saw: every delivery, and the order of first
	// deliveries per key.
	var seenMu sync.Mutex
	seen := map[string][]string{} // event id -> "stream/id" of each delivery
	order := &keyOrder{top: map[string]int{}}
	deliveries := 0
	record := func(streamKey, entryID string, values map[string]any) {
		id, _ := values[eventIDField].(string)
		key, _ := values["k"].(string)
		seq, err := strconv.Atoi(fmt.Sprint(values["n"]))
		at := streamKey + "/" + entryID
		seenMu.Lock()
		defer seenMu.Unlock()
		if err != nil {
			t.Errorf("entry %s has no sequence number: %v", at, values)
		}
		deliveries++
		if len(seen[id]) == 0 {
			order.first(key, seq, at)
		}
		seen[id] = append(seen[id], at)
	}
	seenCount := func() int {
		seenMu.Lock()
		defer seenMu.Unlock()
		return len(seen)
	}

	// The plain group's reader: every shard, read and acknowledged.
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
				for _, m := range st.Messages {
					record(key, m.ID, m.Values)
					ids = append(ids, m.ID)
				}
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
	var rt *member.Runtime
	// The members' handlers wait while held (around each layout change), so
	// every shard has a backlog at the cutover: without barriers, a key's
	// first messages on its new shard would be handled before its last ones
	// on the old shard.
	var holdMu sync.Mutex
	var held chan struct{}
	hold := func() {
		holdMu.Lock()
		defer holdMu.Unlock()
		if held == nil {
			held = make(chan struct{})
		}
	}
	release := func() {
		holdMu.Lock()
		defer holdMu.Unlock()
		if held != nil {
			close(held)
			held = nil
		}
	}
	if ordering == "KEY" {
		// The ordered group's members: the SDK's runtime, which holds a
		// key's entries on its new shard until its old shard's entries up to
		// the cutover are acknowledged.
		var err error
		rt, err = member.Start(ctx, member.Config{
			Coordinator: coord, Redis: rdb, StreamPrefix: prefix, ConsumerGroup: group,
			MemberIDBase: "m", Concurrency: 2, Block: 100 * time.Millisecond,
			HoldHeartbeatInterval: 100 * time.Millisecond, ClaimMinIdle: time.Second, RetryBackoff: time.Second,
		}, func(ctx context.Context, m member.Message) error {
			holdMu.Lock()
			wait := held
			holdMu.Unlock()
			if wait != nil {
				select {
				case <-wait:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			record(m.StreamKey, m.ID, m.Values)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		defer release() // before the runtime's close, if the test fails while held
	} else {
		readerWG.Add(1)
		go func() {
			defer readerWG.Done()
			for !stop.Load() {
				if readPass() == 0 {
					time.Sleep(5 * time.Millisecond)
				}
			}
		}()
	}

	const procs, keysPerProc = 3, 12
	type message struct {
		key string
		seq int
	}
	var published atomic.Int64
	var wg sync.WaitGroup
	leftovers := make([][]string, procs)
	messages := make([]map[string]message, procs) // event id -> its key and sequence
	var producing atomic.Bool
	producing.Store(true)
	for w := 0; w < procs; w++ {
		messages[w] = map[string]message{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			p := newProducer()
			keys := make([]string, keysPerProc)
			for i := range keys {
				keys[i] = fmt.Sprintf("w%d-key-%d", w, i)
			}
			next := map[string]int{}       // key -> its next sequence number
			blocked := map[string]string{} // key -> its event id never acknowledged yet
			everAcked := map[string]bool{}
			var unacked, done []string
			fields := func(id string) map[string]any {
				m := messages[w][id]
				return map[string]any{eventIDField: id, "k": m.key, "n": m.seq}
			}
			acknowledged := func(res producer.Result, id string) {
				ack(res)
				done = append(done, id)
				everAcked[id] = true
				if k := messages[w][id].key; blocked[k] == id {
					delete(blocked, k)
				}
			}
			failed := func(id string) {
				unacked = append(unacked, id)
				if !everAcked[id] { // a failed re-publish of an acknowledged id blocks nothing: its entry exists
					blocked[messages[w][id].key] = id
				}
			}
			publish := func(ids []string) {
				if rng.IntN(2) == 0 {
					for _, id := range ids {
						res, err := p.Publish(ctx, messages[w][id].key, fields(id))
						if err != nil {
							failed(id)
							continue
						}
						acknowledged(res, id)
					}
					return
				}
				msgs := make([]producer.Message, len(ids))
				for i, id := range ids {
					msgs[i] = producer.Message{PartitionKey: messages[w][id].key, Fields: fields(id)}
				}
				res, _ := p.PublishBatch(ctx, msgs)
				for i, r := range res {
					if r.Err != nil {
						failed(ids[i])
						continue
					}
					acknowledged(r, ids[i])
				}
			}
			for n := 0; producing.Load(); {
				// New messages only for keys whose last message was
				// acknowledged, one per key: a key's publish order is its
				// numbering.
				var free []string
				for _, k := range keys {
					if _, ok := blocked[k]; !ok {
						free = append(free, k)
					}
				}
				rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
				ids := make([]string, 0, 16)
				for _, k := range free[:min(len(free), 1+rng.IntN(16))] {
					id := fmt.Sprintf("w%d-%d", w, n)
					n++
					messages[w][id] = message{key: k, seq: next[k]}
					next[k]++
					ids = append(ids, id)
				}
				if len(ids) > 0 {
					published.Add(int64(len(ids)))
					publish(ids)
				}
				if rng.IntN(8) == 0 || len(blocked) == len(keys) { // the process restarts
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
	// coordinator killed during the second and the fourth, stopped after the
	// third.
	krng := rand.New(rand.NewPCG(uint64(seed), 1<<32))
	for i, target := range []int{8, 3, 6, 4} {
		time.Sleep(100 * time.Millisecond)
		if rt != nil {
			hold()
		}
		time.Sleep(100 * time.Millisecond)
		px.Cut()
		id := scale(t, tc, prefix, group, target)
		if i == 1 || i == 3 {
			time.Sleep(time.Duration(krng.IntN(60)) * time.Millisecond)
			state := tc.migration(prefix, group, id)["state"]
			restart("kill", proc.Kill)
			t.Logf("change %d: coordinator killed (SIGKILL) with the resharding %v, started again", i+1, state)
		}
		if rt != nil {
			time.Sleep(150 * time.Millisecond) // the key's new messages reach its new shard
			release()
		}
		waitState(t, tc, prefix, group, id, "DEPRECATED", 60*time.Second)
		t.Logf("change %d: %d shards (%d event ids so far)", i+1, target, published.Load())
		if i == 2 {
			restart("stop", proc.Stop)
			t.Logf("change %d: coordinator stopped (SIGTERM) and started again", i+1)
		}
	}
	time.Sleep(200 * time.Millisecond)
	producing.Store(false)
	wg.Wait()

	// A last process, without faults, publishes what was never acknowledged
	// (per key at most one message never acknowledged: the key's last) and
	// the re-publishes of acknowledged ids that failed.
	px.DropRandom(0, 0)
	last := newProducer()
	for w, ids := range leftovers {
		for _, id := range ids {
			m := messages[w][id]
			res, err := last.Publish(ctx, m.key, map[string]any{eventIDField: id, "k": m.key, "n": m.seq})
			if err != nil {
				t.Fatal(err)
			}
			ack(res)
		}
	}
	total := int(published.Load())
	if rt != nil {
		eventually(t, 60*time.Second, "the members to handle every event id", func() bool { return seenCount() >= total })
		if err := rt.Close(); err != nil {
			t.Errorf("member runtime close: %v", err)
		}
	} else {
		stop.Store(true)
		readerWG.Wait()
		for readPass() > 0 {
		}
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
	seenMu.Lock()
	defer seenMu.Unlock()
	for id, at := range seen {
		// The plain reader reads each entry once; the members may be given
		// one again (a claim), never another entry of the same event id.
		if len(at) == 0 || (len(at) > 1 && rt == nil) {
			t.Fatalf("the reader saw event %s as %v, its entry is %s", id, at, entries[id])
		}
		for _, a := range at {
			if a != entries[id] {
				t.Fatalf("the consumers saw event %s as %v, its entry is %s", id, at, entries[id])
			}
		}
	}
	if len(seen) != total {
		t.Fatalf("the consumers saw %d event ids, want %d", len(seen), total)
	}
	if rt != nil && order.inversions != 0 {
		t.Fatalf("ordered group: %d messages first delivered after a later message of their key:\n%s", order.inversions, strings.Join(order.examples, "\n"))
	}
	// The members held entries back (barriers, newer routing): the order
	// above was kept by the barriers, not by an absence of backlogs.
	if rt != nil && rt.Stats().Holds == 0 {
		t.Fatalf("ordered group: the members never held an entry back (%+v): no cutover met a backlog", rt.Stats())
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
	t.Logf("%s: %d event ids over %d keys, %d entries, %d deliveries, %d per-key inversions, proxy %+v, producers %+v",
		strings.ToLower(ordering), total, len(order.top), len(entries), deliveries, order.inversions, px.Stats(), sum)
	if rt != nil {
		t.Logf("members %+v", rt.Stats())
	}
}
