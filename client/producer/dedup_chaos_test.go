package producer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/routing"
)

// TestIdempotentPublishChaos: three producer processes publish event ids
// with Publish, PublishBatch and Async through a proxy that loses 5% of the
// replies after Redis ran the command (scripts and the layout checks' reads)
// and cuts every connection now and then, while the layout changes four
// times (4 → 8 → 3 → 6 → 4, fences raised as the coordinator does). Each
// process is replaced now and then by a fresh Producer that publishes again
// what its predecessor did not see acknowledged, and some of what it did.
// In the end every event id has exactly one entry, and every
// acknowledgement names it. RSC_CHAOS_SEED picks the seed.
func TestIdempotentPublishChaos(t *testing.T) { idempotentChaos(t, false) }

// TestDedupMixedNativeAndRecordsChaos is the chaos test with every other
// Producer on the records path (NoNativeDedup) and the others on the native
// path where Redis has it: producers of both kinds, as during an upgrade of
// the servers, publish the same event ids; still one entry each.
func TestDedupMixedNativeAndRecordsChaos(t *testing.T) { idempotentChaos(t, true) }

func idempotentChaos(t *testing.T, mixed bool) {
	seed := int64(1)
	if v := os.Getenv("RSC_CHAOS_SEED"); v != "" {
		seed, _ = strconv.ParseInt(v, 10, 64)
	}
	t.Logf("seed %d", seed)
	fx := setup(t, 1, 4, 8)
	px, rdb := fx.through(t, 3)
	px.DropRandom(0.05, seed, "EVALSHA", "EVAL", "HGET", "MGET")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	acked := map[string]string{} // event id -> "stream/id" answered
	ack := func(t *testing.T, res producer.Result) {
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
		mu.Lock()
		records := mixed && len(all)%2 == 1
		mu.Unlock()
		p := fx.producer(t, dedup(time.Minute, func(c *producer.Config) {
			c.Redis, c.MaxAttempts, c.StaleTimeout, c.NoNativeDedup = rdb, 3, 10*time.Second, records
		}))
		mu.Lock()
		all = append(all, p)
		mu.Unlock()
		return p
	}

	const procs, perProc = 3, 600
	var wg sync.WaitGroup
	leftovers := make([][]string, procs)
	for w := 0; w < procs; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			p := newProducer()
			var unacked, done []string
			publish := func(ids []string) {
				switch rng.IntN(3) {
				case 0:
					for _, id := range ids {
						res, err := p.Publish(ctx, keyOf(id), map[string]any{eventField: id})
						if err != nil {
							unacked = append(unacked, id)
							continue
						}
						ack(t, res)
						done = append(done, id)
					}
				case 1:
					msgs := make([]producer.Message, len(ids))
					for i, id := range ids {
						msgs[i] = producer.Message{PartitionKey: keyOf(id), Fields: map[string]any{eventField: id}}
					}
					res, _ := p.PublishBatch(ctx, msgs)
					for i, r := range res {
						if r.Err != nil {
							unacked = append(unacked, ids[i])
							continue
						}
						ack(t, r)
						done = append(done, ids[i])
					}
				default:
					a := p.Async(producer.AsyncConfig{MaxBatch: 16})
					fs := make([]*producer.Future, len(ids))
					for i, id := range ids {
						fs[i], _ = a.Publish(ctx, keyOf(id), map[string]any{eventField: id})
					}
					_ = a.Close(ctx)
					for i, f := range fs {
						res, err := f.Wait(ctx)
						if err != nil {
							unacked = append(unacked, ids[i])
							continue
						}
						ack(t, res)
						done = append(done, ids[i])
					}
				}
			}
			for n := 0; n < perProc; {
				size := 1 + rng.IntN(20)
				ids := make([]string, 0, size)
				for ; len(ids) < size && n < perProc; n++ {
					ids = append(ids, fmt.Sprintf("w%d-%d", w, n))
				}
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
			}
			leftovers[w] = unacked
		}()
	}
	// Four layout changes and connection cuts while they publish.
	for i, c := range []struct {
		version int64
		shards  int
	}{{2, 8}, {3, 3}, {4, 6}, {5, 4}} {
		time.Sleep(150 * time.Millisecond)
		px.Cut()
		fx.reshard(t, c.version, c.shards)
		t.Logf("layout %d: %d shards", i+2, c.shards)
	}
	wg.Wait()
	// A last process, without faults, publishes what was never acknowledged.
	px.DropRandom(0, 0)
	last := newProducer()
	for _, ids := range leftovers {
		for _, id := range ids {
			res, err := last.Publish(ctx, keyOf(id), map[string]any{eventField: id})
			if err != nil {
				t.Fatal(err)
			}
			ack(t, res)
		}
	}
	entries := map[string]string{}
	for s := 0; s < 8; s++ {
		key := routing.StreamKey(prefix, s)
		for _, e := range fx.rdb.XRange(ctx, key, "-", "+").Val() {
			id, _ := e.Values[eventField].(string)
			if prev, ok := entries[id]; ok {
				t.Fatalf("event %s written twice: %s and %s/%s", id, prev, key, e.ID)
			}
			entries[id] = key + "/" + e.ID
		}
	}
	if len(entries) != procs*perProc {
		t.Fatalf("%d event ids in the streams, want %d", len(entries), procs*perProc)
	}
	for id, at := range acked {
		if entries[id] != at {
			t.Fatalf("event %s acknowledged as %s, its entry is %s", id, at, entries[id])
		}
	}
	var sum producer.Stats
	for _, p := range all {
		st := p.Stats()
		sum.Retries += st.Retries
		sum.StaleRetries += st.StaleRetries
		sum.Duplicates += st.Duplicates
		sum.LayoutChecks += st.LayoutChecks
		sum.UnfencedChecks += st.UnfencedChecks
	}
	t.Logf("proxy %+v; %d producers: %+v; %d acknowledged", px.Stats(), len(all), sum, len(acked))
	if sum.StaleRetries == 0 || sum.LayoutChecks == 0 || sum.Duplicates == 0 || px.Stats().Dropped == 0 {
		t.Fatalf("the run did not exercise fences, layout checks, duplicates and lost replies: %+v", sum)
	}
	if sum.UnfencedChecks != 0 {
		t.Fatalf("%d layout checks found no fence, but every change was fenced", sum.UnfencedChecks)
	}
	if mixed {
		native, records := 0, 0
		for _, p := range all {
			if p.Stats().NativeDedup {
				native++
			} else {
				records++
			}
		}
		idmp := serverHasIDMP(t, fx.rdb)
		t.Logf("%d producers on the native path, %d on records (IDMP: %v); IDMP ids added %d", native, records, idmp, iidsAdded(t, fx.rdb, 8))
		if records == 0 || idmp && (native == 0 || iidsAdded(t, fx.rdb, 8) == 0) {
			t.Fatal("the run did not mix producers on both paths")
		}
	}
}
