package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
)

// TestIntegrationTwoCoordinatorsOneLog runs two coordinators on one log under
// concurrent heartbeats and scale requests sent to both: their appends
// conflict (asserted: without a conflict nothing raced), compare-and-append
// keeps one linear history in which a group never has two active reshardings
// (checked after every event of the log), both end with the same state, equal
// to a fresh fold, and no shard is ever owned twice.
func TestIntegrationTwoCoordinatorsOneLog(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	stream := fmt.Sprintf("coordinator:events:two:%d", time.Now().UnixNano())
	same := func(m *Main) { fastTimings(m); m.LogStream = stream; m.MemberLease = 10 * time.Second }
	a := startCoordinator(t, rs, same)
	b := startCoordinator(t, rs, same)
	rdb := rs.Client(t)
	createGroup(t, a, "two", "g", 4)
	eventually(t, 5*time.Second, "b sees the group", func() bool {
		return b.Do("GET", "/coord/v1/streams/two/groups/g", nil).Status == 200
	})

	// Members alternate between the two coordinators.
	var members []*simMember
	for i := 0; i < 4; i++ {
		tc := a
		if i%2 == 1 {
			tc = b
		}
		m := newSimMember(tc, "two", "g", fmt.Sprintf("m%d", i), rdb, false)
		m.start(50 * time.Millisecond)
		defer m.stop()
		members = append(members, m)
	}
	// Concurrent scale requests on both: exactly one active resharding at a time.
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for w := 0; w < 2; w++ {
		tc := []*testCoordinator{a, b}[w]
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			for i := 0; i < 15; i++ {
				r, err := tc.TryDoAs("admin", "password", "POST", "/coord/v1/streams/two/groups/g/scale",
					map[string]any{"targetShardCount": 2 + rng.Intn(6), "requestedBy": "t", "reason": "load"})
				if err == nil {
					mu.Lock()
					codes[r.Status]++
					mu.Unlock()
				}
				time.Sleep(time.Duration(rng.Intn(150)) * time.Millisecond) // paces the load
			}
		}(int64(w))
	}
	// Sample the members' ownership while the scales run (an observation
	// window: nothing may ever be owned twice).
	stop := time.Now().Add(4 * time.Second)
	for time.Now().Before(stop) {
		noOverlap(t, members...)
		time.Sleep(10 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("scale answers by status: %v; conflicts seen: a=%d b=%d", codes, a.Main.Coordinator().Conflicts(), b.Main.Coordinator().Conflicts())
	// The test is about two writers racing for the log: it proves nothing
	// unless they did. They usually have by now; if not, both append at once
	// (each creates a group) until one's compare-and-append loses.
	n := 0
	eventually(t, 20*time.Second, "a compare-and-append conflict between the two coordinators", func() bool {
		if a.Main.Coordinator().Conflicts()+b.Main.Coordinator().Conflicts() > 0 {
			return true
		}
		var race sync.WaitGroup
		for _, tc := range []*testCoordinator{a, b} {
			n++
			race.Add(1)
			go func(tc *testCoordinator, group string) {
				defer race.Done()
				_, _ = tc.TryDoAs("admin", "password", "POST", "/coord/v1/streams/two-race/groups/"+group, map[string]any{"initialShardCount": 1, "requestedBy": "t"})
			}(tc, fmt.Sprintf("g%d", n))
		}
		race.Wait()
		return false
	})
	if codes[202] == 0 {
		t.Fatalf("no scale request succeeded: %v", codes)
	}
	for code := range codes {
		if code != 202 && code != 409 && code != 422 {
			t.Fatalf("unexpected status %d among scale answers %v", code, codes)
		}
	}
	// Both projections converge on the log's state, and no group of the log
	// ever had two active reshardings.
	log := redisstore.NewLog(rdb, stream)
	eventually(t, 10*time.Second, "both coordinators equal a fresh fold", func() bool {
		fresh := foldCheckingReshardings(t, context.Background(), log)
		want, _ := fresh.Encode()
		ga, _ := a.Main.Coordinator().State().Encode()
		gb, _ := b.Main.Coordinator().State().Encode()
		return bytes.Equal(want, ga) && bytes.Equal(want, gb)
	})
	g, _ := a.Main.Coordinator().State().Group(projection.GroupKey{StreamPrefix: "two", ConsumerGroup: "g"})
	if v := projection.ViewAssignments(g).InvariantViolations; len(v) > 0 {
		for _, s := range v {
			if bytes.Contains([]byte(s), []byte("held by more than one")) {
				t.Fatalf("invariant: %v", v)
			}
		}
	}
}
