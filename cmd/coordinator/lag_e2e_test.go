package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
)

// lagRedisMs is Redis's clock in Unix ms.
func lagRedisMs(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now.UnixMilli()
}

// lagXAdd adds an entry with the id <ms>-0 and returns the id.
func lagXAdd(t *testing.T, rdb *redis.Client, key string, ms int64) string {
	t.Helper()
	id := fmt.Sprintf("%d-0", ms)
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: key, ID: id, Values: []any{"payload", "x"}}).Err(); err != nil {
		t.Fatalf("XADD %s %s: %v", key, id, err)
	}
	return id
}

// lagMetric is the value of one series of /metrics, or false when absent.
func lagMetric(t *testing.T, body, name string, labels ...string) (float64, bool) {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		sel, val, ok := strings.Cut(line[len(name):], "} ")
		if !ok {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(sel+",", l+",")
		}
		if match {
			v, err := strconv.ParseFloat(val, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return v, true
		}
	}
	return 0, false
}

// TestIntegrationLagSeconds: the lag in time of each shard and of the group,
// against entries whose ids are set explicitly (XADD key <ms>-0), so that each
// age is exact against the Redis clock the answer reports (redisTimeMs): the
// offsets endpoint, the Grafana rows and /metrics show the same values from
// the same read. A lag Redis cannot count (null, after XDEL) stays null while
// the lag in time is known; an id ahead of Redis's clock is 0 s old.
func TestIntegrationLagSeconds(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.MetricsInterval = time.Hour // one read, the test's
	})
	rdb := apiRedis(t, tc)
	ctx := context.Background()
	const prefix, group = "lagsec", "g"
	apiCreate(t, tc, prefix, group, 3)

	// Shard 0: entries 9, 4 and 1 s old; the group reads the first (pending)
	// and the second is deleted unread, so Redis cannot count the lag.
	// Shard 1 stays empty; shard 2 has an entry a minute ahead of Redis.
	t0 := lagRedisMs(t, rdb)
	first := lagXAdd(t, rdb, prefix+":0", t0-9000)
	deleted := lagXAdd(t, rdb, prefix+":0", t0-4000)
	next := lagXAdd(t, rdb, prefix+":0", t0-1000)
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{prefix + ":0", ">"}, Count: 1, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XDel(ctx, prefix+":0", deleted).Err(); err != nil {
		t.Fatal(err)
	}
	future := lagXAdd(t, rdb, prefix+":2", t0+60_000)
	gfRefresh(t, tc)
	tc.Main.metrics.Refresh(ctx)

	offs := apiDo(t, tc, "GET", apiMonPath(prefix, group, "offsets"), nil).apiWant(t, 200).JSON
	shards, _ := offs["shards"].([]any)
	if len(shards) != 3 {
		t.Fatalf("offsets: %v", offs)
	}
	row := func(i int) map[string]any { return shards[i].(map[string]any) }
	redisMs := func(i int) int64 {
		v, ok := row(i)["redisTimeMs"].(float64)
		if !ok || int64(v) < t0 {
			t.Fatalf("shard %d: redisTimeMs %v, want Redis's clock at the read (>= %d)", i, row(i)["redisTimeMs"], t0)
		}
		return int64(v)
	}
	age := func(i int, ms int64) float64 { return float64(redisMs(i)-ms) / 1000 }
	want := []map[string]any{
		{"lag": nil, "lagSeconds": age(0, t0-1000), "oldestUndeliveredId": next, "oldestPendingSeconds": age(0, t0-9000), "oldestPendingId": first, "pendingCount": 1.0},
		{"lag": 0.0, "lagSeconds": 0.0, "oldestUndeliveredId": nil, "oldestPendingSeconds": 0.0, "oldestPendingId": nil, "pendingCount": 0.0},
		{"lag": 1.0, "lagSeconds": 0.0, "oldestUndeliveredId": future, "oldestPendingSeconds": 0.0, "oldestPendingId": nil, "pendingCount": 0.0},
	}
	for i, w := range want {
		for k, v := range w {
			if row(i)[k] != v {
				t.Errorf("offsets shard %d: %s = %v, want %v", i, k, row(i)[k], v)
			}
		}
	}
	if offs["lagSeconds"] != age(0, t0-1000) || offs["oldestPendingSeconds"] != age(0, t0-9000) || offs["totalLag"] != nil {
		t.Errorf("offsets group: lagSeconds %v, oldestPendingSeconds %v, totalLag %v; want shard 0's and null", offs["lagSeconds"], offs["oldestPendingSeconds"], offs["totalLag"])
	}

	// The Grafana rows show the same read.
	for i, r := range gfRows(t, tc, gfPath("/shards", "streamPrefix", prefix, "consumerGroup", group)) {
		for _, k := range []string{"lag", "lagSeconds", "oldestUndeliveredId", "oldestPendingSeconds", "oldestPendingId", "redisTimeMs", "lagStatus"} {
			if r[k] != row(i)[k] {
				t.Errorf("grafana shard row %d: %s = %v, offsets %v", i, k, r[k], row(i)[k])
			}
		}
	}
	g := gfGroupRows(t, tc)[prefix+"/"+group]
	for _, k := range []string{"lagSeconds", "oldestPendingSeconds", "lagStatus"} {
		if g[k] != offs[k] {
			t.Errorf("grafana group row: %s = %v, offsets %v", k, g[k], offs[k])
		}
	}

	// /metrics shows the same read too.
	body := string(tc.Do("GET", "/metrics", nil).MustStatus(t, 200).Body)
	sel := func(i int) []string {
		return []string{`stream_prefix="` + prefix + `"`, `consumer_group="` + group + `"`, fmt.Sprintf(`shard="%d"`, i)}
	}
	for i := range want {
		for name, k := range map[string]string{"rsc_shard_lag_seconds": "lagSeconds", "rsc_shard_oldest_pending_seconds": "oldestPendingSeconds"} {
			if v, ok := lagMetric(t, body, name, sel(i)...); !ok || v != row(i)[k] {
				t.Errorf("%s shard %d = %v (%v), want %v:\n%s", name, i, v, ok, row(i)[k], grepLines(body, name))
			}
		}
	}
	if _, ok := lagMetric(t, body, "rsc_shard_lag_entries", sel(0)...); ok {
		t.Errorf("rsc_shard_lag_entries of shard 0 present, want absent (Redis cannot count it)")
	}
	if v, ok := lagMetric(t, body, "rsc_group_lag_status", sel(0)[:2]...); !ok || v != 0 {
		t.Errorf("rsc_group_lag_status = %v (%v), want 0 (OK: one read, nobody owns the shards yet but a STOP takes two):\n%s", v, ok, grepLines(body, "rsc_group_lag_status"))
	}
}

// TestIntegrationLagStatus: a group's status on real Redis, from the
// coordinator's own background reads (every 100 ms here): STOP while entries
// wait on a shard that no member holds, STALL once a member holds it and
// reads nothing for a whole window, OK once it has read and acknowledged
// everything. The offsets endpoint, the Grafana rows and /metrics agree.
func TestIntegrationLagStatus(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.MetricsInterval = 100 * time.Millisecond
	})
	rdb := apiRedis(t, tc)
	ctx := context.Background()
	const prefix, group = "lagst", "g"
	apiCreate(t, tc, prefix, group, 2)
	status := func() (string, []string) {
		offs := apiDo(t, tc, "GET", apiMonPath(prefix, group, "offsets"), nil).apiWant(t, 200).JSON
		var shards []string
		for _, s := range offs["shards"].([]any) {
			shards = append(shards, fmt.Sprint(s.(map[string]any)["lagStatus"]))
		}
		return fmt.Sprint(offs["lagStatus"]), shards
	}
	waitStatus := func(want string, shards ...string) {
		t.Helper()
		eventually(t, 20*time.Second, fmt.Sprintf("group status %s, shards %v", want, shards), func() bool {
			got, per := status()
			return got == want && strings.Join(per, ",") == strings.Join(shards, ",")
		})
		code := map[string]float64{"OK": 0, "WARN": 1, "STALL": 2, "STOP": 3}[want]
		eventually(t, 20*time.Second, "rsc_group_lag_status "+want, func() bool {
			v, ok := lagMetric(t, string(tc.Do("GET", "/metrics", nil).MustStatus(t, 200).Body), "rsc_group_lag_status", `stream_prefix="`+prefix+`"`, `consumer_group="`+group+`"`)
			return ok && v == code
		})
		eventually(t, 20*time.Second, "the Grafana group row "+want, func() bool {
			return gfGroupRows(t, tc)[prefix+"/"+group]["lagStatus"] == want
		})
	}

	// Entries on shard 0 and no member: nobody will read them.
	t0 := lagRedisMs(t, rdb)
	for i := int64(0); i < 3; i++ {
		lagXAdd(t, rdb, prefix+":0", t0-3000+i)
	}
	waitStatus("STOP", "STOP", "OK")

	// A member takes both shards and reads nothing.
	member := []*consoleMember{{id: "m1"}}
	consoleSettle(t, tc, prefix, group, member, "m1 to own both shards", func(map[string]any) bool { return len(member[0].owned) == 2 })
	waitStatus("STALL", "STALL", "OK")

	// It reads and acknowledges everything.
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "m1", Streams: []string{prefix + ":0", ">"}, Count: 10, Block: -1}).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res[0].Messages {
		if err := rdb.XAck(ctx, prefix+":0", group, m.ID).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitStatus("OK", "OK", "OK")
}
