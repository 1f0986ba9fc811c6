package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
)

// TestIntegrationCheckEngineDurability: the maxmemory-policy and persistence
// the coordinator reads from INFO (on one server, with CONFIG renamed away,
// and on every master of a cluster). Any policy but noeviction evicts the
// coordinator's keys; a volatile-* policy only once one of them has a time
// to live (a stranger's key with one does not count).
func TestIntegrationCheckEngineDurability(t *testing.T) {
	ctx := context.Background()
	logKey := "durability:events"
	keys := func(context.Context) ([]string, error) { return []string{logKey, logKey + ":snapshot"}, nil }
	check := func(t *testing.T, rdb redis.UniversalClient) redisstore.Durability {
		t.Helper()
		d, err := redisstore.CheckDurability(ctx, rdb, logKey, keys)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	t.Run("one server", func(t *testing.T) {
		srv := redistest.StartProcess(t)
		rdb := srv.Client(t)
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: logKey, Values: []any{"e", "x"}}).Err(); err != nil {
			t.Fatal(err)
		}
		if d := check(t, rdb); d.Evicts || d.Policy != "noeviction" || d.Persistence != redisstore.PersistenceOff {
			t.Fatalf("default test server: %+v, want noeviction, persistence off", d)
		}
		for _, p := range []string{"allkeys-lru", "allkeys-lfu", "allkeys-random"} {
			rdb.ConfigSet(ctx, "maxmemory-policy", p)
			if d := check(t, rdb); !d.Evicts || d.Policy != p || !strings.Contains(d.Why, "maxmemory-policy "+p) {
				t.Fatalf("%s: %+v, want it to evict, naming maxmemory-policy", p, d)
			}
		}
		rdb.ConfigSet(ctx, "maxmemory-policy", "volatile-lru")
		if d := check(t, rdb); d.Evicts {
			t.Fatalf("volatile-lru without any TTL: %+v, want safe", d)
		}
		rdb.Set(ctx, "stranger", "x", time.Hour)
		if d := check(t, rdb); d.Evicts {
			t.Fatalf("volatile-lru with a stranger's TTL: %+v, want safe", d)
		}
		rdb.Expire(ctx, logKey, time.Hour)
		if d := check(t, rdb); !d.Evicts || !strings.Contains(d.Why, logKey) {
			t.Fatalf("volatile-lru with a TTL on the log: %+v, want it to evict, naming the key", d)
		}
		rdb.Persist(ctx, logKey)
		rdb.ConfigSet(ctx, "appendonly", "yes")
		rdb.ConfigSet(ctx, "save", "3600 1")
		if d := check(t, rdb); d.Evicts || d.Persistence != redisstore.PersistenceBoth {
			t.Fatalf("AOF and save points: %+v, want aof+rdb", d)
		}
	})

	t.Run("CONFIG renamed away", func(t *testing.T) {
		srv := redistest.StartProcess(t, redistest.WithArgs("--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", ""))
		d := check(t, srv.Client(t))
		if !d.Evicts || d.Policy != "allkeys-lru" || d.Persistence != redisstore.PersistenceUnknown {
			t.Fatalf("%+v, want allkeys-lru read from INFO, persistence unknown", d)
		}
	})

	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3, 0)
		rdb := cl.Client(t)
		if d := check(t, rdb); d.Evicts || d.Node != cl.MasterFor(t, logKey) {
			t.Fatalf("%+v, want safe, reading the log's master %s", d, cl.MasterFor(t, logKey))
		}
		// One master of three evicts: its keys may be the coordinator's.
		var other string
		for _, m := range cl.Masters(t) {
			if m != cl.MasterFor(t, logKey) {
				other = m
			}
		}
		node := redis.NewClient(&redis.Options{Addr: other})
		defer node.Close()
		if err := node.ConfigSet(ctx, "maxmemory-policy", "allkeys-lfu").Err(); err != nil {
			t.Fatal(err)
		}
		if d := check(t, rdb); !d.Evicts || d.Node != other || d.Policy != "allkeys-lfu" {
			t.Fatalf("%+v, want allkeys-lfu on %s", d, other)
		}
	})
}
