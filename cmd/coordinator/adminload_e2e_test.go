package main

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
)

// TestIntegrationConcurrentAdminLoad fires hundreds of parallel create, scale and
// rollback requests at the same and different groups: every conflict has exactly
// one winner, the others get 409/422, and the log tells one consistent story.
func TestIntegrationConcurrentAdminLoad(t *testing.T) {
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	const groups, requests = 4, 400
	var mu sync.Mutex
	createWins := map[string]int{}
	codes := map[string]map[int]int{"create": {}, "scale": {}, "rollback": {}}
	var wg sync.WaitGroup
	for i := 0; i < requests; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(i)))
			g := fmt.Sprintf("g%d", rng.Intn(groups))
			path := "/coord/v1/streams/load/groups/" + g
			var kind string
			var r apiResponse
			var err error
			switch rng.Intn(3) {
			case 0:
				kind = "create"
				r, err = tc.TryDoAs("admin", "password", "POST", path, map[string]any{"initialShardCount": 4, "requestedBy": "load"})
			case 1:
				kind = "scale"
				r, err = tc.TryDoAs("admin", "password", "POST", path+"/scale", map[string]any{"targetShardCount": 1 + rng.Intn(8), "requestedBy": "load", "reason": "load"})
			default:
				kind = "rollback"
				m, err2 := tc.TryDoAs("admin", "password", "GET", path+"/migrations", nil)
				if err2 != nil || m.Status != 200 || m.JSON["activeReshardingId"] == nil {
					return
				}
				r, err = tc.TryDoAs("admin", "password", "POST", path+"/migrations/"+m.JSON["activeReshardingId"].(string)+"/rollback", map[string]any{"requestedBy": "load", "reason": "load"})
			}
			if err != nil {
				t.Errorf("%s: %v", kind, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			codes[kind][r.Status]++
			if kind == "create" && r.Status == 201 {
				createWins[g]++
			}
		}(i)
	}
	wg.Wait()
	t.Logf("answers: %v", codes)
	allowed := map[string][]int{"create": {201, 409}, "scale": {202, 404, 409, 422}, "rollback": {202, 409, 422}}
	for kind, byCode := range codes {
		for code := range byCode {
			ok := false
			for _, a := range allowed[kind] {
				ok = ok || a == code
			}
			if !ok {
				t.Errorf("%s answered %d", kind, code)
			}
		}
	}
	for g, n := range createWins {
		if n != 1 {
			t.Errorf("group %s created %d times", g, n)
		}
	}
	// The log: one group.created per group, never two active reshardings at once.
	ctx := context.Background()
	log := redisstore.NewLog(rs.Client(t), tc.Main.LogStream)
	entries, err := log.Read(ctx, events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}
	created := map[string]int{}
	active := map[string]string{}
	for _, e := range entries {
		rec, err := events.Decode(e.ID, e.Data)
		if err != nil {
			t.Fatal(err)
		}
		g := rec.ConsumerGroup
		switch ev := rec.Event.(type) {
		case *events.GroupCreated:
			created[g]++
		case *events.ReshardingPreparing:
			if active[g] != "" {
				t.Fatalf("%s: resharding %s started while %s was active", g, ev.ReshardingID, active[g])
			}
			active[g] = ev.ReshardingID
		case *events.ReshardingCompleted:
			delete(active, g)
		case *events.ReshardingRolledBack:
			if ev.State == projection.RolledBack {
				delete(active, g)
			}
		}
	}
	for g, n := range created {
		if n != 1 {
			t.Fatalf("log has %d group.created for %s", n, g)
		}
	}
	// Ticks may still append (completions): compare once the log is quiet.
	eventually(t, 10*time.Second, "served state equals a fresh fold of the log", func() bool {
		fresh := projection.New()
		if _, err := projection.Fold(ctx, log, fresh, projection.FoldOptions{}); err != nil {
			t.Fatal(err)
		}
		want, _ := fresh.Encode()
		got, _ := tc.Main.Coordinator().State().Encode()
		return string(want) == string(got)
	})
}
