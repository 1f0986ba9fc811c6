package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
)

// TestIDMPFlags: --idmp-duration defaults to --dedup-layout-window (whole
// seconds, at most 24 h; none with a 0 window), negative is off; 1s and 24h
// are accepted, 24h0m1s, 999ms and 1.5s refused; --idmp-maxsize 1 and 10000
// are accepted, 0 and 10001 refused, naming the flag.
func TestIDMPFlags(t *testing.T) {
	settings := func(args ...string) (redisstore.IDMPSettings, error) {
		m := NewMain()
		m.Stderr = &apiSyncBuffer{}
		err := m.ParseFlags(args)
		return m.idmpSettings(), err
	}
	for _, c := range []struct {
		args []string
		want redisstore.IDMPSettings
	}{
		{nil, redisstore.IDMPSettings{Duration: time.Hour, MaxSize: 10000}},
		{[]string{"--dedup-layout-window", "0"}, redisstore.IDMPSettings{}},
		{[]string{"--dedup-layout-window", "1500ms"}, redisstore.IDMPSettings{Duration: 2 * time.Second, MaxSize: 10000}},
		{[]string{"--dedup-layout-window", "168h"}, redisstore.IDMPSettings{Duration: 24 * time.Hour, MaxSize: 10000}},
		{[]string{"--idmp-duration", "-1s"}, redisstore.IDMPSettings{}},
		{[]string{"--idmp-duration", "1s", "--idmp-maxsize", "1"}, redisstore.IDMPSettings{Duration: time.Second, MaxSize: 1}},
		{[]string{"--idmp-duration", "24h", "--dedup-layout-window", "0"}, redisstore.IDMPSettings{Duration: 24 * time.Hour, MaxSize: 10000}},
	} {
		got, err := settings(c.args...)
		if err != nil || got != c.want {
			t.Errorf("%v: %+v, %v, want %+v", c.args, got, err, c.want)
		}
	}
	for _, c := range [][]string{
		{"--idmp-duration", "24h0m1s"}, {"--idmp-duration", "999ms"}, {"--idmp-duration", "1500ms"},
		{"--idmp-maxsize", "0"}, {"--idmp-maxsize", "10001"},
	} {
		if _, err := settings(c...); err == nil || !strings.Contains(err.Error(), c[0]) {
			t.Errorf("%v: %v, want an error naming %s", c, err, c[0])
		}
	}
}

// idmpOf reads a stream's IDMP-DURATION, IDMP-MAXSIZE and iids-tracked
// (XINFO STREAM, raw).
func idmpOf(t *testing.T, rdb *redis.Client, key string) [3]int64 {
	t.Helper()
	res, err := rdb.Do(context.Background(), "XINFO", "STREAM", key).Result()
	if err != nil {
		t.Fatalf("XINFO STREAM %s: %v", key, err)
	}
	f := map[string]any{}
	switch v := res.(type) {
	case map[any]any:
		for k, x := range v {
			f[fmt.Sprint(k)] = x
		}
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			f[fmt.Sprint(v[i])] = v[i+1]
		}
	}
	n := func(k string) int64 { x, _ := f[k].(int64); return x }
	return [3]int64{n("idmp-duration"), n("idmp-maxsize"), n("iids-tracked")}
}

// TestIntegrationCoordinatorSetsIDMPOnItsShards, on Redis 8.6: the shards
// of a created group, of its scale-out, of a stream without groups and of
// its scale get IDMP-DURATION (--dedup-layout-window's 1 h) and the
// --idmp-maxsize given; the scale-out leaves the live map of an old shard
// (iids-tracked unchanged, a duplicate still answered with the original);
// streams the coordinator adopted keep Redis' defaults, while the shards
// it adds to them get the settings; a lost shard stream the shard check
// recreates gets them again.
func TestIntegrationCoordinatorSetsIDMPOnItsShards(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t, redistest.OnEngine("redis86"))
	rdb := rs.Client(t)
	ctx := context.Background()
	for i := range 2 {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: fmt.Sprintf("ad:%d", i), Values: map[string]any{"before": i}})
	}
	tc := startCoordinator(t, rs, func(m *Main) {
		fastTimings(m)
		m.IDMPMaxSize, m.ShardCheckInterval = 5000, 200*time.Millisecond
	})
	want := [3]int64{3600, 5000, 0}
	check := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if got := idmpOf(t, rdb, k); got != want {
				t.Fatalf("%s: IDMP-DURATION, IDMP-MAXSIZE, iids-tracked %v, want %v", k, got, want)
			}
		}
	}
	createGroup(t, tc, "orders", "g", 4)
	check("orders:0", "orders:1", "orders:2", "orders:3")
	add := func(iid string) string {
		id, err := rdb.Do(ctx, "XADD", "orders:0", "IDMP", "p1", iid, "*", "f", "v").Text()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	first := add("e1")
	add("e2")
	add("e3")
	scale(t, tc, "orders", "g", 6)
	check("orders:4", "orders:5")
	want[2] = 3
	check("orders:0")
	if got := add("e1"); got != first {
		t.Fatalf("a duplicate after the scale-out got %s, want the original %s", got, first)
	}
	want[2] = 0

	tc.Do("POST", "/coord/v1/streams/bare", map[string]any{"initialShardCount": 2, "requestedBy": "test"}).MustStatus(t, 201)
	check("bare:0", "bare:1")
	tc.Do("POST", "/coord/v1/streams/bare/scale", map[string]any{"targetShardCount": 3, "requestedBy": "test", "reason": "e2e"}).MustStatus(t, 202)
	check("bare:2")

	tc.Do("POST", "/coord/v1/streams/ad/adopt", map[string]any{"shardCount": 2, "requestedBy": "ops"}).MustStatus(t, 201)
	createGroup(t, tc, "ad", "g", 2)
	scale(t, tc, "ad", "g", 3)
	check("ad:2")
	for _, k := range []string{"ad:0", "ad:1"} {
		if got := idmpOf(t, rdb, k); got != [3]int64{100, 100, 0} {
			t.Fatalf("adopted %s: %v, want Redis' defaults 100 100 untouched", k, got)
		}
	}

	// A shard stream Redis lost is recreated by the shard check with them.
	if err := rdb.Del(ctx, "orders:2").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "orders:2 recreated", func() bool { return rdb.Exists(ctx, "orders:2").Val() == 1 })
	check("orders:2")
}

// TestIntegrationCoordinatorIDMPOnTheEngineUnderTest: the coordinator
// provisions on the engine under test; on one without IDMP it never sends
// XCFGSET, on one with it the shards get the settings.
func TestIntegrationCoordinatorIDMPOnTheEngineUnderTest(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	has, err := redisstore.SupportsIDMP(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("engine %s: IDMP %v", redistest.Engine(), has)
	tc := startCoordinator(t, rs, fastTimings)
	createGroup(t, tc, "orders", "g", 2)
	scale(t, tc, "orders", "g", 3)
	tc.Do("POST", "/coord/v1/streams/bare", map[string]any{"initialShardCount": 2, "requestedBy": "test"}).MustStatus(t, 201)
	stats := rdb.Info(ctx, "commandstats").Val()
	if !has {
		if strings.Contains(stats, "cmdstat_xcfgset") {
			t.Fatalf("XCFGSET sent to a server without IDMP:\n%s", stats)
		}
		return
	}
	for _, k := range []string{"orders:0", "orders:1", "orders:2", "bare:0", "bare:1"} {
		if got := idmpOf(t, rdb, k); got != [3]int64{3600, 10000, 0} {
			t.Fatalf("%s: %v, want 3600 10000 0", k, got)
		}
	}
}
