package redistest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
)

// A 3-master, 3-replica cluster forms, spreads keys over every master, and
// survives the kill -9 of a master: a replica takes over with every write the
// old master acknowledged, and the same client keeps working.
func TestClusterFailover(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	if got := len(c.Seeds()); got != 6 {
		t.Fatalf("Seeds() = %d addresses, want 6", got)
	}
	if want := "redis+cluster://" + strings.Join(c.Seeds(), ","); c.URL() != want {
		t.Fatalf("URL() = %q, want %q", c.URL(), want)
	}
	masters := c.Masters(t)
	if len(masters) != 3 {
		t.Fatalf("Masters() = %v, want 3", masters)
	}

	cc := c.Client(t)
	byMaster := map[string][]string{}
	for i := range 60 {
		key := fmt.Sprintf("k:%d", i)
		if err := cc.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", key, err)
		}
		m := c.MasterFor(t, key)
		if !slices.Contains(masters, m) {
			t.Fatalf("MasterFor(%s) = %s, not one of %v", key, m, masters)
		}
		byMaster[m] = append(byMaster[m], key)
	}
	if len(byMaster) != 3 {
		t.Fatalf("60 keys landed on %d masters, want 3", len(byMaster))
	}
	// Each key is on the node MasterFor names.
	for m, keys := range byMaster {
		n := redis.NewClient(&redis.Options{Addr: m})
		for _, k := range keys {
			if got, err := n.Exists(ctx, k).Result(); err != nil || got != 1 {
				t.Fatalf("EXISTS %s on %s = %d, %v; want 1", k, m, got, err)
			}
		}
		n.Close()
	}

	victim := masters[0]
	promoted := c.Failover(t, victim)
	t.Logf("killed master %s, promoted %s", victim, promoted)
	if promoted == victim || slices.Contains(c.Seeds(), victim) {
		t.Fatalf("after the failover: promoted %s, seeds %v", promoted, c.Seeds())
	}
	after := c.Masters(t)
	if len(after) != 3 || slices.Contains(after, victim) || !slices.Contains(after, promoted) {
		t.Fatalf("masters after the failover = %v; want 3 with %s, without %s", after, promoted, victim)
	}
	for _, key := range byMaster[victim] {
		if m := c.MasterFor(t, key); m != promoted {
			t.Fatalf("MasterFor(%s) = %s after the failover, want %s", key, m, promoted)
		}
	}
	// The client that knew the old master follows the new one.
	var lastErr error
	ok := false
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if lastErr = cc.Set(ctx, byMaster[victim][0], "new", 0).Err(); lastErr == nil {
			ok = true
			break
		}
	}
	if !ok {
		t.Fatalf("SET after the failover: %v", lastErr)
	}
	for i := range 60 {
		key := fmt.Sprintf("k:%d", i)
		got, err := cc.Get(ctx, key).Result()
		if err != nil {
			t.Fatalf("GET %s after the failover: %v", key, err)
		}
		if want := fmt.Sprint(i); key != byMaster[victim][0] && got != want {
			t.Fatalf("GET %s = %q, want %q", key, got, want)
		}
	}
}
