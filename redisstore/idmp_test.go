package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
)

// mustStreamInfo reads XINFO STREAM key's integer fields with a raw command.
func mustStreamInfo(tb testing.TB, rdb redis.UniversalClient, key string) map[string]int64 {
	tb.Helper()
	res, err := rdb.Do(context.Background(), "XINFO", "STREAM", key).Result()
	if err != nil {
		tb.Fatalf("XINFO STREAM %s: %v", key, err)
	}
	out := map[string]int64{}
	add := func(k, v any) {
		if n, ok := v.(int64); ok {
			out[fmt.Sprint(k)] = n
		}
	}
	switch t := res.(type) {
	case map[any]any:
		for k, v := range t {
			add(k, v)
		}
	case []any:
		for i := 0; i+1 < len(t); i += 2 {
			add(t[i], t[i+1])
		}
	default:
		tb.Fatalf("XINFO STREAM %s: unexpected reply %T", key, res)
	}
	return out
}

// mustIDMPAdd is XADD key IDMP pid iid * f v; it returns the entry's id (the
// original one for a duplicate).
func mustIDMPAdd(tb testing.TB, rdb redis.UniversalClient, key, pid, iid string) string {
	tb.Helper()
	id, err := rdb.Do(context.Background(), "XADD", key, "IDMP", pid, iid, "*", "f", "v").Text()
	if err != nil {
		tb.Fatalf("XADD %s IDMP %s %s: %v", key, pid, iid, err)
	}
	return id
}

// startRedis86 is a Redis 8.6 server (the matrix's redis86 engine).
func startRedis86(tb testing.TB) *redis.Client {
	tb.Helper()
	return redistest.StartProcess(tb, redistest.OnEngine("redis86")).Client(tb)
}

func TestIDMPSettingsChecked(t *testing.T) {
	for _, c := range []struct {
		s  redisstore.IDMPSettings
		ok bool
	}{
		{redisstore.IDMPSettings{}, true},
		{redisstore.IDMPSettings{Duration: time.Second, MaxSize: 1}, true},
		{redisstore.IDMPSettings{Duration: 86400 * time.Second, MaxSize: 10000}, true},
		{redisstore.IDMPSettings{Duration: 86401 * time.Second, MaxSize: 10000}, false},
		{redisstore.IDMPSettings{Duration: 86400 * time.Second, MaxSize: 10001}, false},
		{redisstore.IDMPSettings{Duration: time.Second, MaxSize: 0}, false},
		{redisstore.IDMPSettings{Duration: 1500 * time.Millisecond, MaxSize: 10}, false},
		{redisstore.IDMPSettings{Duration: 999 * time.Millisecond, MaxSize: 10}, false},
	} {
		if err := c.s.Check(); (err == nil) != c.ok {
			t.Errorf("%+v: Check() = %v, want ok %v", c.s, err, c.ok)
		}
		if err := redisstore.NewShards(nil).SetIDMP(c.s); (err == nil) != c.ok {
			t.Errorf("%+v: SetIDMP = %v, want ok %v", c.s, err, c.ok)
		}
	}
}

// On Redis 8.6 the shard streams of a provisioned group and of its
// scale-out get the settings; provisioning again leaves a live map as it
// is (no XCFGSET with the same values), and new settings are not forced
// onto a stream whose map holds ids (XCFGSET would clear it) but reach the
// others. A missing stream is not created, another type's key not touched.
func TestIntegrationIDMPSettingsOnShards(t *testing.T) {
	ctx := context.Background()
	rdb := startRedis86(t)
	sh := redisstore.NewShards(rdb)
	if has, err := sh.DetectIDMP(ctx); err != nil || !has {
		t.Fatalf("DetectIDMP on Redis 8.6: %v, %v", has, err)
	}
	if err := sh.SetIDMP(redisstore.IDMPSettings{Duration: time.Hour, MaxSize: 10000}); err != nil {
		t.Fatal(err)
	}
	const prefix, group = "orders", "g"
	settingsOf := func(key string) (int64, int64, int64) {
		f := mustStreamInfo(t, rdb, key)
		return f["idmp-duration"], f["idmp-maxsize"], f["iids-tracked"]
	}
	provision := func(to int, want ...string) error {
		t.Helper()
		if _, err := sh.Provision(ctx, prefix, group, 0, to); err != nil {
			t.Fatal(err)
		}
		set, err := sh.ConfigureIDMP(ctx, prefix, shardsUpTo(to))
		if want == nil {
			want = []string{}
		}
		if set == nil {
			set = []string{}
		}
		if !slices.Equal(set, want) {
			t.Fatalf("ConfigureIDMP of shards 0..%d set %v, want %v", to-1, set, want)
		}
		return err
	}
	if err := provision(4, "orders:0", "orders:1", "orders:2", "orders:3"); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if d, m, _ := settingsOf(fmt.Sprintf("orders:%d", i)); d != 3600 || m != 10000 {
			t.Fatalf("orders:%d: IDMP-DURATION %d IDMP-MAXSIZE %d, want 3600 10000", i, d, m)
		}
	}

	// Producers use shard 0's map.
	first := mustIDMPAdd(t, rdb, "orders:0", "p1", "e0")
	for i := 1; i < 5; i++ {
		mustIDMPAdd(t, rdb, "orders:0", "p1", fmt.Sprintf("e%d", i))
	}
	if _, _, n := settingsOf("orders:0"); n != 5 {
		t.Fatalf("iids-tracked %d after 5 adds, want 5", n)
	}
	// Provisioning again (a repeated request, a restart) sets nothing.
	if err := provision(4); err != nil {
		t.Fatal(err)
	}
	// A scale-out 4 -> 6: the new shards get the settings, the map stays.
	if err := provision(6, "orders:4", "orders:5"); err != nil {
		t.Fatal(err)
	}
	if d, m, n := settingsOf("orders:0"); d != 3600 || m != 10000 || n != 5 {
		t.Fatalf("orders:0 after re-provisioning: %d %d, iids-tracked %d, want 3600 10000 and 5", d, m, n)
	}
	if got := mustIDMPAdd(t, rdb, "orders:0", "p1", "e0"); got != first {
		t.Fatalf("a duplicate after re-provisioning got %s, want the original %s", got, first)
	}
	for _, k := range []string{"orders:4", "orders:5"} {
		if d, m, _ := settingsOf(k); d != 3600 || m != 10000 {
			t.Fatalf("%s after the scale-out: %d %d, want 3600 10000", k, d, m)
		}
	}

	// New settings: a live map keeps its settings (and ids), the rest change.
	if err := sh.SetIDMP(redisstore.IDMPSettings{Duration: 86400 * time.Second, MaxSize: 500}); err != nil {
		t.Fatal(err)
	}
	err := provision(6, "orders:1", "orders:2", "orders:3", "orders:4", "orders:5")
	if !errors.Is(err, redisstore.ErrIDMPMapLive) || !strings.Contains(err.Error(), "orders:0") {
		t.Fatalf("new settings over a live map: %v, want ErrIDMPMapLive naming orders:0", err)
	}
	if d, m, n := settingsOf("orders:0"); d != 3600 || m != 10000 || n != 5 {
		t.Fatalf("live orders:0 after new settings: %d %d, iids-tracked %d, want 3600 10000 and 5 (untouched)", d, m, n)
	}
	if d, m, _ := settingsOf("orders:1"); d != 86400 || m != 500 {
		t.Fatalf("orders:1 after new settings: %d %d, want 86400 500", d, m)
	}

	// A missing stream is not created; a key of another type is left.
	if err := rdb.Set(ctx, "orders:7", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if set, err := sh.ConfigureIDMP(ctx, prefix, []int{6, 7}); err != nil || len(set) != 0 {
		t.Fatalf("ConfigureIDMP of a missing stream and a string: %v, %v, want nothing set", set, err)
	}
	if n := rdb.Exists(ctx, "orders:6").Val(); n != 0 {
		t.Fatal("ConfigureIDMP created orders:6")
	}
	if v := rdb.Get(ctx, "orders:7").Val(); v != "x" {
		t.Fatalf("orders:7 is %q, want x", v)
	}
}

// On the engine under test: IDMP is found exactly where the server is
// Redis 8.6 or later (the matrix's redis86 fails here without it), and on
// a server without it ConfigureIDMP sends nothing but the probe.
func TestIntegrationIDMPOnlyWhereTheServerHasIt(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartProcess(t).Client(t)
	rep, err := redisstore.CheckEngine(ctx, rdb, "log", 0)
	if err != nil {
		t.Fatal(err)
	}
	e := rep.Engines[0]
	want := e.Name == "redis" && atLeast(e.Version, 8, 6)
	if v := os.Getenv("RSC_REDIS_VERSION"); v != "" && e.Name == "redis" && atLeast(v, 8, 6) {
		want = true // the matrix says this engine is 8.6: it must have IDMP
	}
	sh := redisstore.NewShards(rdb)
	has, err := sh.DetectIDMP(ctx)
	t.Logf("engine %s: %s %s, IDMP %v", redistest.Engine(), e.Name, e.Version, has)
	if err != nil || has != want {
		t.Fatalf("DetectIDMP on %s %s: %v, %v, want %v", e.Name, e.Version, has, err, want)
	}
	if err := sh.SetIDMP(redisstore.IDMPSettings{Duration: time.Minute, MaxSize: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.Provision(ctx, "orders", "g", 0, 3); err != nil {
		t.Fatal(err)
	}
	// A fresh Shards probes in ConfigureIDMP itself.
	sh = redisstore.NewShards(rdb)
	if err := sh.SetIDMP(redisstore.IDMPSettings{Duration: time.Minute, MaxSize: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	set, err := sh.ConfigureIDMP(ctx, "orders", []int{0, 1, 2})
	if err != nil {
		t.Fatal(err)
	}
	stats := rdb.Info(ctx, "commandstats").Val()
	if has {
		if len(set) != 3 {
			t.Fatalf("ConfigureIDMP on %s %s set %v, want the 3 shards", e.Name, e.Version, set)
		}
		return
	}
	if len(set) != 0 {
		t.Fatalf("ConfigureIDMP without IDMP set %v", set)
	}
	for _, line := range strings.Split(stats, "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch name {
		case "", "# Commandstats", "cmdstat_command|info", "cmdstat_config|resetstat":
		default:
			t.Errorf("ConfigureIDMP on a server without IDMP sent more than the probe: %s", line)
		}
	}
}

// atLeast reports whether the dotted version v is major.minor or later.
func atLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

func shardsUpTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// On a Redis Cluster of the engine under test: IDMP is found when every
// master has it (Redis 8.6), and then the settings reach shard streams on
// every master; without it nothing is set.
func TestIntegrationIDMPOnCluster(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustClusterClient(t, 3, 0)
	var want atomic.Bool // every master is Redis 8.6 or later (they are alike)
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		rep, err := redisstore.CheckEngine(ctx, c, "log", 0)
		if err == nil {
			want.Store(rep.Engines[0].Name == "redis" && atLeast(rep.Engines[0].Version, 8, 6))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sh := redisstore.NewShards(rdb)
	has, err := sh.DetectIDMP(ctx)
	t.Logf("engine %s: IDMP %v", redistest.Engine(), has)
	if err != nil || has != want.Load() {
		t.Fatalf("DetectIDMP on the cluster: %v, %v, want %v", has, err, want.Load())
	}
	if err := sh.SetIDMP(redisstore.IDMPSettings{Duration: 90 * time.Second, MaxSize: 900}); err != nil {
		t.Fatal(err)
	}
	const n = 12 // spread over the three masters' slots
	if _, err := sh.Provision(ctx, "orders", "g", 0, n); err != nil {
		t.Fatal(err)
	}
	set, err := sh.ConfigureIDMP(ctx, "orders", shardsUpTo(n))
	if err != nil {
		t.Fatal(err)
	}
	if !has {
		if len(set) != 0 {
			t.Fatalf("set %v without IDMP", set)
		}
		return
	}
	if len(set) != n {
		t.Fatalf("set %v, want the %d shards", set, n)
	}
	nodes := map[string]bool{}
	for i := range n {
		key := fmt.Sprintf("orders:%d", i)
		if f := mustStreamInfo(t, rdb, key); f["idmp-duration"] != 90 || f["idmp-maxsize"] != 900 {
			t.Fatalf("%s: %v, want IDMP-DURATION 90 IDMP-MAXSIZE 900", key, f)
		}
		m, err := rdb.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		nodes[m.Options().Addr] = true
	}
	if len(nodes) < 2 {
		t.Fatalf("the shards are on %d master(s): the test does not cover a cluster", len(nodes))
	}
}
