package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
)

// TestIntegrationRedisStallDoesNotBlockReads holds Redis (DEBUG SLEEP, then
// CLIENT PAUSE) while a member join, a scale-out to 1,024 shards and the drain
// checks of a scale-in are in flight, and checks that steady heartbeats and
// every read the projection can answer (routing, the group, its members, its
// reshardings) keep answering meanwhile. Before the decider stopped holding
// the projection's lock across its append, and before the Redis work of
// decisions moved out of the writer, each of them waited for the stall (1.42 s
// worst case for a 1.5 s one). The bound is a third of the stall: whatever the
// machine's load, a read that waited for Redis takes the whole stall.
func TestIntegrationRedisStallDoesNotBlockReads(t *testing.T) {
	rs := redistest.StartProcess(t, redistest.WithArgs("--enable-debug-command", "yes"))
	tc := startCoordinator(t, rs, func(m *Main) {
		m.TickInterval = 100 * time.Millisecond
		m.MemberLease = time.Minute
	})
	rdb := apiRedis(t, tc)
	ctx := context.Background()

	// A group with a steady member, and a group in a scale-in whose removed
	// shards hold unread entries (the reconciler reads their drain evidence
	// every tick).
	apiCreate(t, tc, "steady", "g", 4).apiWant(t, 201)
	epoch, mv, owned := apiJoinSteady(t, tc, "steady", "g", "reader")
	apiCreate(t, tc, "draining", "g", 4).apiWant(t, 201)
	for i := 0; i < 5; i++ {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "draining:3", Values: map[string]any{"n": i}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	apiScale(t, tc, "draining", "g", 2).apiWant(t, 202)
	eventually(t, 10*time.Second, "the scale-in drains (no member: straight to the drain checks)", func() bool {
		m := apiDo(t, tc, "GET", apiGroupPath("draining", "g"), nil).apiWant(t, 200).JSON
		am, _ := m["activeMigration"].(map[string]any)
		return am != nil && am["state"] == "DRAINING"
	})
	apiCreate(t, tc, "big-0", "g", 2).apiWant(t, 201)
	apiCreate(t, tc, "big-1", "g", 2).apiWant(t, 201)

	// settle makes the reader's heartbeat steady again (a join in the previous
	// round moved some of its shards): it reports what it is assigned until
	// the answer changes nothing.
	settle := func() map[string]any {
		for i := 0; i < 20; i++ {
			hb := apiBeat(t, tc, "steady", "g", apiHBBody{Member: "reader", Epoch: epoch, MV: mv, Owned: owned})
			if hb.Status == "OK" && hb.MemberEpoch == epoch && hb.MetadataVersion == mv && fmt.Sprint(hb.Assigned) == fmt.Sprint(owned) && len(hb.Pending) == 0 {
				return apiHBBody{Member: "reader", Epoch: epoch, MV: mv, Owned: owned}.toMap()
			}
			epoch, mv, owned = hb.MemberEpoch, hb.MetadataVersion, hb.Assigned
		}
		t.Fatal("the reader does not settle")
		return nil
	}
	steady := settle()
	reads := []struct {
		name, method, path string
		body               any
	}{
		{"steady heartbeat", "POST", apiHBPath("steady", "g", "reader"), nil},
		{"producer routing", "GET", apiGroupPath("steady", "g", "producer-routing"), nil},
		{"group", "GET", apiGroupPath("steady", "g"), nil},
		{"members", "GET", apiMonPath("steady", "g", "members"), nil},
		{"reshardings", "GET", apiGroupPath("draining", "g", "migrations"), nil},
	}

	for n, stall := range []struct {
		name string
		hold func() error
	}{
		{"DEBUG SLEEP 1.5", func() error { return rdb.Do(ctx, "DEBUG", "SLEEP", "1.5").Err() }},
		{"CLIENT PAUSE 1500 ALL", func() error {
			if err := rdb.Do(ctx, "CLIENT", "PAUSE", "1500", "ALL").Err(); err != nil {
				return err
			}
			time.Sleep(1500 * time.Millisecond) // the pause runs on Redis's clock
			return nil
		}},
	} {
		if n > 0 {
			steady = settle()
		}
		reads[0].body = steady
		t.Run(stall.name, func(t *testing.T) {
			const stallFor = 1500 * time.Millisecond
			var (
				mu      sync.Mutex
				latency = map[string][]time.Duration{}
				wg      sync.WaitGroup
			)
			stalled := make(chan struct{})
			done := make(chan struct{})
			// Readers: each read every 20 ms while Redis is held.
			for _, rd := range reads {
				rd := rd
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-stalled
					for {
						select {
						case <-done:
							return
						default:
						}
						start := time.Now()
						r, err := tc.TryDoAs("admin", "password", rd.method, rd.path, rd.body)
						d := time.Since(start)
						if err != nil || r.Status != 200 {
							t.Errorf("%s during the stall: %v %d %s", rd.name, err, r.Status, r.Body)
							return
						}
						mu.Lock()
						latency[rd.name] = append(latency[rd.name], d)
						mu.Unlock()
						time.Sleep(20 * time.Millisecond) // paces the readers
					}
				}()
			}
			// Redis is held; a join and a scale-out to 1,024 shards start.
			holdErr := make(chan error, 1)
			go func() { holdErr <- stall.hold() }()
			time.Sleep(50 * time.Millisecond) // let the hold reach Redis first
			close(stalled)
			writes := make(chan string, 2)
			member := fmt.Sprintf("joiner-%d", time.Now().UnixNano())
			go func() {
				r, err := tc.TryDoAs("admin", "password", "POST", apiHBPath("steady", "g", member), apiHBBody{Member: member}.toMap())
				writes <- fmt.Sprintf("join: %v %d", err, r.Status)
			}()
			go func() {
				r, err := tc.TryDoAs("admin", "password", "POST", apiGroupPath(fmt.Sprintf("big-%d", n), "g", "scale"), map[string]any{"targetShardCount": 1024, "requestedBy": "ops", "reason": "peak"})
				writes <- fmt.Sprintf("scale: %v %d", err, r.Status)
			}()
			if err := <-holdErr; err != nil {
				t.Fatalf("hold Redis: %v", err)
			}
			time.Sleep(200 * time.Millisecond) // the readers keep measuring a moment after the stall
			close(done)
			wg.Wait()
			for i := 0; i < 2; i++ {
				select {
				case w := <-writes:
					t.Logf("after the stall: %s", w)
				case <-time.After(30 * time.Second):
					t.Fatal("a write did not finish after the stall")
				}
			}
			for _, rd := range reads {
				ds := latency[rd.name]
				if len(ds) == 0 {
					t.Fatalf("%s: no answer during the stall", rd.name)
				}
				sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
				worst := ds[len(ds)-1]
				t.Logf("%s: %d answers during a %s stall, worst %s", rd.name, len(ds), stallFor, worst)
				if worst > stallFor/3 {
					t.Errorf("%s waited %s during a %s Redis stall: it waited for Redis", rd.name, worst, stallFor)
				}
			}
		})
	}
	// The writes held by the stalls completed.
	for _, p := range []string{"big-0", "big-1"} {
		if g := apiGroup(t, tc, p, "g"); g["shardCount"] != 1024.0 {
			t.Errorf("the scale-out of %s to 1024 did not complete: shardCount %v", p, g["shardCount"])
		}
	}
}
