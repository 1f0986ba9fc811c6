package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
)

// End-to-end tests of the Grafana endpoints (contract §2.10) against a real
// Redis. Helper names start with "gf".

const gfBase = "/coord/v1/monitoring/grafana"

// gfPath builds a Grafana route with query parameters given as name, value
// pairs (a value may be blank; a parameter not given is missing).
func gfPath(route string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Add(kv[i], kv[i+1])
	}
	if len(q) == 0 {
		return gfBase + route
	}
	return gfBase + route + "?" + q.Encode()
}

// gfRows GETs a Grafana route as admin and decodes its top-level JSON array.
func gfRows(tb testing.TB, tc *testCoordinator, path string) []map[string]any {
	tb.Helper()
	r := apiDo(tb, tc, "GET", path, nil).apiWant(tb, 200)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		tb.Fatalf("GET %s: Content-Type %q", path, ct)
	}
	var rows []map[string]any
	if err := json.Unmarshal(r.Body, &rows); err != nil || rows == nil {
		tb.Fatalf("GET %s: not a top-level JSON array (%v): %s", path, err, r.Body)
	}
	return rows
}

// gfCol lists one column of rows as strings (fmt of the JSON value).
func gfCol(rows []map[string]any, col string) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = fmt.Sprint(r[col])
	}
	return out
}

// gfWantTypes checks every row has exactly these columns, of these JSON types
// ("string", "number", "bool", "string|null", "number|null").
func gfWantTypes(tb testing.TB, what string, rows []map[string]any, cols map[string]string) {
	tb.Helper()
	for i, row := range rows {
		for col, want := range cols {
			v, ok := row[col]
			if !ok {
				tb.Errorf("%s row %d: missing %q", what, i, col)
				continue
			}
			got := "null"
			switch v.(type) {
			case string:
				got = "string"
			case float64:
				got = "number"
			case bool:
				got = "bool"
			case nil:
			default:
				got = fmt.Sprintf("%T", v)
			}
			if got != want && !(strings.HasSuffix(want, "|null") && (got == "null" || got == strings.TrimSuffix(want, "|null"))) {
				tb.Errorf("%s row %d: %s is %s (%v), want %s", what, i, col, got, v, want)
			}
		}
		if len(row) != len(cols) {
			tb.Errorf("%s row %d: columns %v, want exactly %d", what, i, apiKeysOf(row), len(cols))
		}
	}
}

var gfShardCols = map[string]string{
	"streamPrefix": "string", "consumerGroup": "string", "shardCount": "number", "shardIndex": "number",
	"shardLabel": "string", "streamKey": "string", "redisSlot": "number", "redisNodeEndpoint": "string|null",
	"redisNodeId": "string|null", "redisSlotRangeStart": "number|null", "redisSlotRangeEnd": "number|null",
	"streamLength": "number", "firstRecordId": "string|null", "lastRecordId": "string|null",
	"lastGeneratedId": "string|null", "groupLastDeliveredId": "string|null", "consumerLastDeliveredId": "string|null",
	"consumerLastAckedId": "string|null", "pendingCount": "number", "lag": "number|null", "lagKnown": "bool",
	"producedPerSecond": "number|null", "consumedPerSecond": "number|null", "memoryUsageBytes": "number|null",
	"memoryUsageKnown": "bool", "targetOwnerMemberIds": "string", "currentOwnerMemberIds": "string",
	"ownerState": "string", "ownerMemberIds": "string",
	"lagSeconds": "number|null", "oldestUndeliveredId": "string|null", "oldestPendingSeconds": "number|null",
	"oldestPendingId": "string|null", "redisTimeMs": "number|null", "lagStatus": "string",
}

var gfGroupCols = map[string]string{
	"streamPrefix": "string", "consumerGroup": "string", "state": "string", "groupEpoch": "number",
	"assignmentEpoch": "number", "metadataVersion": "number", "shardCount": "number", "activeMembers": "number",
	"totalMembers": "number", "currentShards": "number", "targetShards": "number", "assignedShardRatio": "string",
	"revokingShards": "number", "totalStreamLength": "number", "totalPendingCount": "number", "totalLag": "number|null",
	"producedPerSecond": "number|null", "consumedPerSecond": "number|null", "totalMemoryUsageBytes": "number",
	"memoryUsageKnown": "bool", "lagSeconds": "number|null", "oldestPendingSeconds": "number|null", "lagStatus": "string",
}

var gfMessageCols = map[string]string{
	"streamPrefix": "string", "consumerGroup": "string", "shardIndex": "number", "shardSelector": "string",
	"shardLabel": "string", "streamKey": "string", "recordId": "string", "payload": "string|null",
	"fieldsJson": "string", "pageDirection": "string", "pageLimit": "number", "pageNextCursor": "string|null",
	"pageTotalMessages": "number", "recordTimestampMs": "number|null", "recordTime": "string|null",
	"fieldsTruncated": "bool", "pageTruncated": "bool",
}

// gfRequiredParamErrors checks that a route with required streamPrefix and
// consumerGroup answers [] when either is blank, 400 when either is missing and
// 404 for an unknown group.
func gfRequiredParamErrors(t *testing.T, tc *testCoordinator, route, prefix, group string, blankIsEmpty bool) {
	t.Helper()
	if blankIsEmpty {
		for _, q := range [][]string{
			{"streamPrefix", "", "consumerGroup", group},
			{"streamPrefix", prefix, "consumerGroup", ""},
			{"streamPrefix", " ", "consumerGroup", " "},
		} {
			if rows := gfRows(t, tc, gfPath(route, q...)); len(rows) != 0 {
				t.Errorf("%s %v: %v, want []", route, q, rows)
			}
		}
	}
	for _, q := range [][]string{{"streamPrefix", prefix}, {"consumerGroup", group}, nil} {
		r := apiDo(t, tc, "GET", gfPath(route, q...), nil).apiWantError(t, 400, "INVALID_REQUEST")
		if !strings.Contains(r.apiMsg(), "Required request parameter") {
			t.Errorf("%s %v: message %q", route, q, r.apiMsg())
		}
	}
	apiDo(t, tc, "GET", gfPath(route, "streamPrefix", prefix, "consumerGroup", "nope"), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
	apiDo(t, tc, "GET", gfPath(route, "streamPrefix", "bad{x}", "consumerGroup", group), nil).apiWantError(t, 400, "INVALID_REQUEST")
}

// gfGroupRows returns the rows of /groups by "<prefix>/<group>".
func gfGroupRows(tb testing.TB, tc *testCoordinator) map[string]map[string]any {
	tb.Helper()
	out := map[string]map[string]any{}
	for _, r := range gfRows(tb, tc, gfPath("/groups")) {
		out[fmt.Sprintf("%v/%v", r["streamPrefix"], r["consumerGroup"])] = r
	}
	return out
}

// TestIntegrationGrafanaRoutes covers options, groups, members, shards and
// assignments rows on groups in known states, and the READ role.
func TestIntegrationGrafanaRoutes(t *testing.T) {
	parallel(t)
	users := apiUsersFile(t, []map[string]any{
		{"username": "admin", "password": "password", "roles": []string{"ADMIN"}},
		{"username": "reader", "password": "r-pw", "roles": []string{"READ"}},
		{"username": "member", "password": "m-pw", "roles": []string{"MEMBER"}},
	})
	// The Redis columns come from the offsets cache: refreshed here only
	// when the test says so (gfRefresh), besides a group's first read.
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) { m.UsersFile = users; m.MetricsInterval = time.Hour })
	ctx := context.Background()
	rdb := apiRedis(t, tc)
	workers := []string{"streamPrefix", "gf", "consumerGroup", "workers"}

	// gf/workers (4 shards): A reads all four; B joins and is targeted at 2 and 3
	// (transitioning: A still reads them); then A releases 3 and drains 2.
	// gf/audit has no members. alpha/g has a member that was granted its only
	// shard and never reported it.
	apiCreate(t, tc, "gf", "workers", 4)
	apiCreate(t, tc, "gf", "audit", 4) // a group of gf's stream takes its shard count
	apiCreate(t, tc, "alpha", "g", 1)
	a := apiBeat(t, tc, "gf", "workers", apiHBBody{Member: "A"})
	a = apiBeat(t, tc, "gf", "workers", apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: a.Assigned})
	if !equalInts(a.Assigned, []int{0, 1, 2, 3}) {
		t.Fatalf("A: %s", a.Body)
	}
	b := apiBeat(t, tc, "gf", "workers", apiHBBody{Member: "B"})
	if !equalInts(b.Pending, []int{2, 3}) {
		t.Fatalf("B: %s", b.Body)
	}
	transitioning := gfRows(t, tc, gfPath("/shards", workers...))
	a = apiBeat(t, tc, "gf", "workers", apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: []int{0, 1, 2, 3}})
	a = apiBeat(t, tc, "gf", "workers", apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: a.Assigned, Revoking: []map[string]any{
		{"shard": map[string]any{"shardIndex": 2}, "state": "DRAINING", "inFlight": 1},
	}})
	if !equalInts(a.Assigned, []int{0, 1}) {
		t.Fatalf("A after B joined: %s", a.Body)
	}
	apiBeat(t, tc, "alpha", "g", apiHBBody{Member: "solo"})
	for i := 0; i < 3; i++ {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "gf:0", Values: []string{"payload", fmt.Sprint(i)}})
	}
	gfRefresh(t, tc)

	t.Run("READ role on every route", func(t *testing.T) {
		reader, member := apiBasic("reader", "r-pw"), apiBasic("member", "m-pw")
		for _, p := range []string{
			gfPath("/groups"), gfPath("/options/streams"), gfPath("/options/consumer-groups"),
			gfPath("/options/shards", workers...), gfPath("/members", workers...), gfPath("/shards", workers...),
			gfPath("/assignments", workers...), gfPath("/messages", workers...),
		} {
			apiWantUnauthorized(t, apiSend(t, tc, apiNoAuth, "GET", p, nil, nil), "anonymous "+p)
			apiWantForbidden(t, apiSend(t, tc, member, "GET", p, nil, nil), "MEMBER "+p)
			apiSend(t, tc, reader, "GET", p, nil, nil).apiWant(t, 200)
		}
	})

	t.Run("options/streams: distinct prefixes, sorted", func(t *testing.T) {
		r := apiDo(t, tc, "GET", gfPath("/options/streams"), nil).apiWant(t, 200)
		apiJSONEqual(t, r.Body, `[{"__text":"alpha","__value":"alpha"},{"__text":"gf","__value":"gf"}]`)
	})

	t.Run("options/consumer-groups", func(t *testing.T) {
		all := `[{"__text":"alpha / g","__value":"g"},{"__text":"gf / audit","__value":"audit"},{"__text":"gf / workers","__value":"workers"}]`
		for _, c := range []struct {
			name string
			q    []string
			want string
		}{
			{"no filter", nil, all},
			{"blank filter", []string{"streamPrefix", ""}, all},
			{"one stream", []string{"streamPrefix", "gf"}, `[{"__text":"gf / audit","__value":"audit"},{"__text":"gf / workers","__value":"workers"}]`},
			{"unknown stream", []string{"streamPrefix", "nope"}, `[]`},
		} {
			t.Run(c.name, func(t *testing.T) {
				apiJSONEqual(t, apiDo(t, tc, "GET", gfPath("/options/consumer-groups", c.q...), nil).apiWant(t, 200).Body, c.want)
			})
		}
	})

	t.Run("options/shards", func(t *testing.T) {
		apiJSONEqual(t, apiDo(t, tc, "GET", gfPath("/options/shards", workers...), nil).apiWant(t, 200).Body,
			`[{"__text":":0","__value":"0"},{"__text":":1","__value":"1"},{"__text":":2","__value":"2"},{"__text":":3","__value":"3"}]`)
		gfRequiredParamErrors(t, tc, "/options/shards", "gf", "workers", true)
	})

	t.Run("members: one row per member, as the members endpoint", func(t *testing.T) {
		rows := gfRows(t, tc, gfPath("/members", workers...))
		gfWantTypes(t, "member", rows, map[string]string{
			"streamPrefix": "string", "consumerGroup": "string", "memberId": "string", "memberName": "string",
			"state": "string", "memberEpoch": "number", "metadataVersion": "number", "currentShardCount": "number",
			"revokingShardCount": "number", "runtimeMaxConcurrency": "number", "activeConsumerWorkers": "number",
			"lastHeartbeatAt": "string", "memberLeaseExpiresAt": "string",
		})
		mon := apiArr(t, apiDo(t, tc, "GET", apiMonPath("gf", "workers", "members"), nil).apiWant(t, 200).JSON, "members")
		if fmt.Sprint(gfCol(rows, "memberId")) != "[A B]" || len(mon) != 2 {
			t.Fatalf("rows %v, monitoring members %d", rows, len(mon))
		}
		for i, row := range rows {
			m := mon[i].(map[string]any)
			for _, f := range []string{"memberId", "memberName", "state", "memberEpoch", "metadataVersion", "runtimeMaxConcurrency", "activeConsumerWorkers", "lastHeartbeatAt", "memberLeaseExpiresAt"} {
				if row[f] != m[f] {
					t.Errorf("%v %s: %v, members endpoint %v", row["memberId"], f, row[f], m[f])
				}
			}
			if row["currentShardCount"] != float64(len(m["currentAssignment"].([]any))) || row["revokingShardCount"] != float64(len(m["revoking"].([]any))) {
				t.Errorf("%v counts: %v", row["memberId"], row)
			}
			if row["streamPrefix"] != "gf" || row["consumerGroup"] != "workers" {
				t.Errorf("row %v", row)
			}
			if _, err := time.Parse(time.RFC3339Nano, row["lastHeartbeatAt"].(string)); err != nil {
				t.Errorf("lastHeartbeatAt: %v", err)
			}
		}
		if rows[0]["currentShardCount"] != 2.0 || rows[0]["revokingShardCount"] != 1.0 || rows[1]["currentShardCount"] != 0.0 || rows[0]["state"] != "ACTIVE" {
			t.Errorf("A then B: %v", rows)
		}
		gfRequiredParamErrors(t, tc, "/members", "gf", "workers", true)
	})

	t.Run("assignments: target, current and revoking owners per shard", func(t *testing.T) {
		r := apiDo(t, tc, "GET", gfPath("/assignments", workers...), nil).apiWant(t, 200)
		apiJSONEqual(t, r.Body, `[
			{"streamPrefix":"gf","consumerGroup":"workers","shardIndex":0,"targetOwners":"A","currentOwners":"A","revokingOwners":""},
			{"streamPrefix":"gf","consumerGroup":"workers","shardIndex":1,"targetOwners":"A","currentOwners":"A","revokingOwners":""},
			{"streamPrefix":"gf","consumerGroup":"workers","shardIndex":2,"targetOwners":"B","currentOwners":"","revokingOwners":"A"},
			{"streamPrefix":"gf","consumerGroup":"workers","shardIndex":3,"targetOwners":"B","currentOwners":"","revokingOwners":""}]`)
		apiJSONEqual(t, apiDo(t, tc, "GET", gfPath("/assignments", "streamPrefix", "gf", "consumerGroup", "audit"), nil).apiWant(t, 200).Body, `[
			{"streamPrefix":"gf","consumerGroup":"audit","shardIndex":0,"targetOwners":"","currentOwners":"","revokingOwners":""},
			{"streamPrefix":"gf","consumerGroup":"audit","shardIndex":1,"targetOwners":"","currentOwners":"","revokingOwners":""},
			{"streamPrefix":"gf","consumerGroup":"audit","shardIndex":2,"targetOwners":"","currentOwners":"","revokingOwners":""},
			{"streamPrefix":"gf","consumerGroup":"audit","shardIndex":3,"targetOwners":"","currentOwners":"","revokingOwners":""}]`)
		gfRequiredParamErrors(t, tc, "/assignments", "gf", "workers", true)
	})

	t.Run("shards: owners and ownerState", func(t *testing.T) {
		type owners struct{ target, current, state, holders string }
		for _, c := range []struct {
			name string
			rows []map[string]any
			want []owners
		}{
			{"B joined, A still reads everything", transitioning, []owners{
				{"A", "A", "CURRENT", "A"}, {"A", "A", "CURRENT", "A"}, {"B", "A", "TRANSITIONING", "A"}, {"B", "A", "TRANSITIONING", "A"}}},
			{"A released 3 and drains 2", gfRows(t, tc, gfPath("/shards", workers...)), []owners{
				{"A", "A", "CURRENT", "A"}, {"A", "A", "CURRENT", "A"}, {"B", "", "PENDING_ACK", "A"}, {"B", "", "PENDING_ACK", ""}}},
			{"no members", gfRows(t, tc, gfPath("/shards", "streamPrefix", "gf", "consumerGroup", "audit")), []owners{
				{"", "", "UNASSIGNED", ""}, {"", "", "UNASSIGNED", ""}, {"", "", "UNASSIGNED", ""}, {"", "", "UNASSIGNED", ""}}},
			{"granted, never reported", gfRows(t, tc, gfPath("/shards", "streamPrefix", "alpha", "consumerGroup", "g")), []owners{
				{"solo", "", "PENDING_ACK", "solo"}}},
		} {
			t.Run(c.name, func(t *testing.T) {
				gfWantTypes(t, "shard", c.rows, gfShardCols)
				if len(c.rows) != len(c.want) {
					t.Fatalf("%d rows, want %d: %v", len(c.rows), len(c.want), c.rows)
				}
				for i, row := range c.rows {
					got := owners{row["targetOwnerMemberIds"].(string), row["currentOwnerMemberIds"].(string), row["ownerState"].(string), row["ownerMemberIds"].(string)}
					if got != c.want[i] || row["shardIndex"] != float64(i) || row["shardLabel"] != fmt.Sprintf(":%d", i) {
						t.Errorf("shard %d: owners %+v, want %+v (row %v)", i, got, c.want[i], row)
					}
				}
			})
		}
	})

	t.Run("shards: Redis columns match the offsets endpoint", func(t *testing.T) {
		rows := gfRows(t, tc, gfPath("/shards", workers...))
		offs := apiArr(t, apiDo(t, tc, "GET", apiMonPath("gf", "workers", "offsets"), nil).apiWant(t, 200).JSON, "shards")
		for i, row := range rows {
			o := offs[i].(map[string]any)
			for _, f := range []string{"streamKey", "redisSlot", "redisNodeEndpoint", "redisNodeId", "redisSlotRangeStart", "redisSlotRangeEnd", "streamLength", "firstRecordId", "lastRecordId", "lastGeneratedId", "groupLastDeliveredId", "consumerLastDeliveredId", "consumerLastAckedId", "pendingCount", "lag", "memoryUsageBytes"} {
				if fmt.Sprint(row[f]) != fmt.Sprint(o[f]) {
					t.Errorf("shard %d %s: %v, offsets %v", i, f, row[f], o[f])
				}
			}
			if row["shardCount"] != 4.0 || row["streamKey"] != fmt.Sprintf("gf:%d", i) || row["lagKnown"] != true || row["memoryUsageKnown"] != true {
				t.Errorf("shard %d: %v", i, row)
			}
		}
		if rows[0]["streamLength"] != 3.0 || rows[0]["lag"] != 3.0 || rows[0]["lastRecordId"] == nil {
			t.Errorf("gf:0 after 3 XADDs: %v", rows[0])
		}
	})

	t.Run("shards: blank parameters are wildcards", func(t *testing.T) {
		for _, c := range []struct {
			name string
			q    []string
			want string // "<prefix>/<group>:<shard>" per row
		}{
			{"both blank: every group", []string{"streamPrefix", "", "consumerGroup", ""}, "[alpha/g:0 gf/audit:0 gf/audit:1 gf/audit:2 gf/audit:3 gf/workers:0 gf/workers:1 gf/workers:2 gf/workers:3]"},
			{"stream only", []string{"streamPrefix", "gf", "consumerGroup", ""}, "[gf/audit:0 gf/audit:1 gf/audit:2 gf/audit:3 gf/workers:0 gf/workers:1 gf/workers:2 gf/workers:3]"},
			{"group only", []string{"streamPrefix", " ", "consumerGroup", "g"}, "[alpha/g:0]"},
			{"no match", []string{"streamPrefix", "nope", "consumerGroup", ""}, "[]"},
			{"both set", workers, "[gf/workers:0 gf/workers:1 gf/workers:2 gf/workers:3]"},
		} {
			t.Run(c.name, func(t *testing.T) {
				var got []string
				for _, r := range gfRows(t, tc, gfPath("/shards", c.q...)) {
					got = append(got, fmt.Sprintf("%v/%v:%v", r["streamPrefix"], r["consumerGroup"], r["shardIndex"]))
				}
				if fmt.Sprint(got) != c.want && !(got == nil && c.want == "[]") {
					t.Errorf("rows %v, want %s", got, c.want)
				}
			})
		}
		gfRequiredParamErrors(t, tc, "/shards", "gf", "workers", false)
	})

	t.Run("groups: one row per group, sorted", func(t *testing.T) {
		rows := gfRows(t, tc, gfPath("/groups"))
		gfWantTypes(t, "group", rows, gfGroupCols)
		var keys []string
		for _, r := range rows {
			keys = append(keys, fmt.Sprintf("%v/%v", r["streamPrefix"], r["consumerGroup"]))
		}
		if fmt.Sprint(keys) != "[alpha/g gf/audit gf/workers]" {
			t.Fatalf("groups %v", keys)
		}
		byKey := gfGroupRows(t, tc)
		for _, c := range []struct {
			key  string
			want map[string]any
		}{
			{"gf/workers", map[string]any{"state": "RECONCILING", "shardCount": 4.0, "activeMembers": 2.0, "totalMembers": 2.0,
				"currentShards": 2.0, "targetShards": 4.0, "assignedShardRatio": "2 / 4", "revokingShards": 1.0,
				"totalStreamLength": 3.0, "totalPendingCount": 0.0, "totalLag": 3.0, "memoryUsageKnown": true}},
			{"gf/audit", map[string]any{"state": "EMPTY", "shardCount": 4.0, "activeMembers": 0.0, "totalMembers": 0.0,
				"currentShards": 0.0, "targetShards": 0.0, "assignedShardRatio": "0 / 4", "revokingShards": 0.0, "totalLag": 3.0}},
			{"alpha/g", map[string]any{"state": "RECONCILING", "activeMembers": 1.0, "currentShards": 0.0, "targetShards": 1.0,
				"assignedShardRatio": "0 / 1", "totalStreamLength": 0.0, "totalLag": 0.0}},
		} {
			row := byKey[c.key]
			for f, want := range c.want {
				if row[f] != want {
					t.Errorf("%s %s: %v, want %v", c.key, f, row[f], want)
				}
			}
			prefix, group, _ := strings.Cut(c.key, "/")
			g := apiDo(t, tc, "GET", apiMonPath(prefix, group), nil).apiWant(t, 200).JSON
			for _, f := range []string{"state", "groupEpoch", "assignmentEpoch", "metadataVersion", "shardCount"} {
				if row[f] != g[f] {
					t.Errorf("%s %s: %v, group endpoint %v", c.key, f, row[f], g[f])
				}
			}
			if mem, _ := row["totalMemoryUsageBytes"].(float64); mem <= 0 {
				t.Errorf("%s totalMemoryUsageBytes %v", c.key, row["totalMemoryUsageBytes"])
			}
		}
	})
}

// gfRefresh runs a refresh pass of the coordinator's offsets cache, as its
// background loop does every --metrics-interval.
func gfRefresh(tb testing.TB, tc *testCoordinator) {
	tb.Helper()
	tc.Main.server.RefreshOffsets(context.Background())
}

// gfRate reads a rate column: nil, or a number with at most 2 decimals.
func gfRate(tb testing.TB, row map[string]any, col string) *float64 {
	tb.Helper()
	switch v := row[col].(type) {
	case nil:
		return nil
	case float64:
		if math.Abs(v*100-math.Round(v*100)) > 1e-6 || v < 0 {
			tb.Errorf("%s = %v: not a non-negative rate rounded to 2 decimals", col, v)
		}
		return &v
	default:
		tb.Fatalf("%s = %#v, want a number or null", col, row[col])
		return nil
	}
}

// TestIntegrationGrafanaRates: rates are null on a stream's first read by
// the offsets cache, numeric afterwards (between two reads of the cache, not
// two scrapes: scraping again changes nothing); consumed follows the group's
// lag and is null when Redis cannot tell the lag.
func TestIntegrationGrafanaRates(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) { m.MetricsInterval = time.Hour })
	ctx := context.Background()
	rdb := apiRedis(t, tc)
	apiCreate(t, tc, "rate", "g", 2)
	shards := func(t *testing.T) (s0, s1 map[string]any) {
		t.Helper()
		rows := gfRows(t, tc, gfPath("/shards", "streamPrefix", "rate", "consumerGroup", "g"))
		if len(rows) != 2 {
			t.Fatalf("rows %v", rows)
		}
		return rows[0], rows[1]
	}
	type want struct{ produced, consumed string } // "null", "0" or ">0"
	check := func(t *testing.T, row map[string]any, w want) {
		t.Helper()
		for col, wv := range map[string]string{"producedPerSecond": w.produced, "consumedPerSecond": w.consumed} {
			v := gfRate(t, row, col)
			got := "null"
			switch {
			case v == nil:
			case *v == 0:
				got = "0"
			default:
				got = ">0"
			}
			if got != wv {
				t.Errorf("%v %s = %v, want %s (row %v)", row["streamKey"], col, row[col], wv, row)
			}
		}
	}

	s0, s1 := shards(t)
	check(t, s0, want{"null", "null"})
	check(t, s1, want{"null", "null"})

	for i := 0; i < 5; i++ {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "rate:0", Values: []string{"payload", fmt.Sprint(i)}})
	}
	s0, s1 = shards(t)
	check(t, s0, want{"null", "null"}) // no new read: a scrape changes nothing
	if s0["streamLength"] != 0.0 {
		t.Errorf("a scrape read Redis: %v", s0)
	}
	gfRefresh(t, tc)
	s0, s1 = shards(t)
	check(t, s0, want{">0", "0"}) // produced 5, lag grew by 5: nothing consumed
	check(t, s1, want{"0", "0"})

	// A consumer reads rate:0 to its end; rate:1 gets a hole the group has not
	// read past, so Redis cannot tell its lag.
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"rate:0", ">"}, Count: 5, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, rdb.XAdd(ctx, &redis.XAddArgs{Stream: "rate:1", Values: []string{"payload", fmt.Sprint(i)}}).Val())
	}
	rdb.XDel(ctx, "rate:1", ids[1])
	gfRefresh(t, tc)
	s0, s1 = shards(t)
	check(t, s0, want{"0", ">0"})
	check(t, s1, want{">0", "null"})
	if s1["lag"] != nil || s1["lagKnown"] != false || s0["lag"] != 0.0 || s0["lagKnown"] != true || s0["pendingCount"] != 5.0 {
		t.Errorf("lag columns: rate:0 %v, rate:1 %v", s0, s1)
	}

	// The group reads past the hole: the lag is known again, but consumed needs
	// two observations with a known lag.
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{"rate:1", ">"}, Count: 5, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	gfRefresh(t, tc)
	_, s1 = shards(t)
	check(t, s1, want{"0", "null"})
	gfRefresh(t, tc)
	_, s1 = shards(t)
	check(t, s1, want{"0", "0"})

	// Group rows share the reads; a group never read has none yet.
	apiCreate(t, tc, "fresh", "g", 1)
	rows := gfGroupRows(t, tc)
	check(t, rows["fresh/g"], want{"null", "null"})
	if gfRate(t, rows["rate/g"], "producedPerSecond") == nil || gfRate(t, rows["rate/g"], "consumedPerSecond") == nil {
		t.Errorf("rate/g: %v", rows["rate/g"])
	}
	if rows["rate/g"]["totalLag"] != 0.0 || rows["rate/g"]["totalPendingCount"] != 7.0 {
		t.Errorf("rate/g totals: %v", rows["rate/g"])
	}
	gfRefresh(t, tc)
	check(t, gfGroupRows(t, tc)["fresh/g"], want{"0", "0"})
}

// TestIntegrationGrafanaMessages pages one shard and all shards merged, with
// record id cursors, merged cursors, tail cursors and recordId search.
func TestIntegrationGrafanaMessages(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	ctx := context.Background()
	rdb := apiRedis(t, tc)
	apiCreate(t, tc, "msg", "g", 3)
	// Record i (0..11) is <1000+i>-0 on shard i%3; shards 0 and 2 both have
	// 5000-0 (ties are ordered by shard index); shard 1's 6000-0 has no payload.
	var forward []string // "<shard>/<id>" in merged FORWARD order
	add := func(shard int, id string, fields ...string) {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: fmt.Sprintf("msg:%d", shard), ID: id, Values: fields}).Err(); err != nil {
			t.Fatal(err)
		}
		forward = append(forward, fmt.Sprintf("%d/%s", shard, id))
	}
	for i := 0; i < 12; i++ {
		add(i%3, fmt.Sprintf("%d-0", 1000+i), "payload", fmt.Sprintf("p-%d", i))
	}
	add(0, "5000-0", "payload", "tie-0")
	add(2, "5000-0", "payload", "tie-2")
	add(1, "6000-0", "other", "x")
	backward := append([]string{"1/6000-0", "0/5000-0", "2/5000-0"}, reversed(forward[:12])...)
	g := []string{"streamPrefix", "msg", "consumerGroup", "g"}
	q := func(kv ...string) string { return gfPath("/messages", append(append([]string{}, g...), kv...)...) }
	recs := func(rows []map[string]any) []string {
		out := []string{}
		for _, r := range rows {
			out = append(out, fmt.Sprintf("%v/%v", r["shardIndex"], r["recordId"]))
		}
		return out
	}
	next := func(t *testing.T, rows []map[string]any) string {
		t.Helper()
		if len(rows) == 0 {
			return ""
		}
		c, _ := rows[0]["pageNextCursor"].(string)
		for _, r := range rows {
			if r["pageNextCursor"] != rows[0]["pageNextCursor"] {
				t.Fatalf("rows of one page disagree on pageNextCursor: %v", rows)
			}
		}
		return c
	}

	t.Run("defaults: shard 0, BACKWARD, 25", func(t *testing.T) {
		for _, path := range []string{q(), q("shardIndex", "")} {
			rows := gfRows(t, tc, path)
			gfWantTypes(t, "message", rows, gfMessageCols)
			if fmt.Sprint(recs(rows)) != "[0/5000-0 0/1009-0 0/1006-0 0/1003-0 0/1000-0]" {
				t.Fatalf("%s: %v", path, recs(rows))
			}
			r := rows[0]
			for f, want := range map[string]any{"streamPrefix": "msg", "consumerGroup": "g", "shardSelector": "0", "shardLabel": ":0",
				"streamKey": "msg:0", "payload": "tie-0", "fieldsJson": `{"payload":"tie-0"}`, "pageDirection": "BACKWARD",
				"pageLimit": 25.0, "pageNextCursor": nil, "pageTotalMessages": 5.0, "recordTimestampMs": 5000.0, "recordTime": "1970-01-01T00:00:05Z"} {
				if r[f] != want {
					t.Errorf("%s = %#v, want %#v", f, r[f], want)
				}
			}
		}
	})

	t.Run("one shard, paged by record id cursors", func(t *testing.T) {
		for _, c := range []struct {
			direction string
			pages     []string
			cursors   []string
		}{
			{"FORWARD", []string{"[1/1001-0 1/1004-0]", "[1/1007-0 1/1010-0]", "[1/6000-0]"}, []string{"1004-0", "1010-0", ""}},
			{"backward", []string{"[1/6000-0 1/1010-0]", "[1/1007-0 1/1004-0]", "[1/1001-0]"}, []string{"1010-0", "1004-0", ""}},
		} {
			t.Run(c.direction, func(t *testing.T) {
				cursor := ""
				for i, want := range c.pages {
					rows := gfRows(t, tc, q("shardIndex", "1", "direction", c.direction, "limit", "2", "cursor", cursor))
					if fmt.Sprint(recs(rows)) != want || next(t, rows) != c.cursors[i] {
						t.Fatalf("page %d: %v next %q, want %s next %q", i, recs(rows), next(t, rows), want, c.cursors[i])
					}
					if rows[0]["pageDirection"] != strings.ToUpper(c.direction) || rows[0]["shardSelector"] != "1" || rows[0]["pageTotalMessages"] != 5.0 {
						t.Errorf("row %v", rows[0])
					}
					cursor = c.cursors[i]
				}
			})
		}
		rows := gfRows(t, tc, q("shardIndex", "1", "direction", "FORWARD"))
		last := rows[len(rows)-1]
		if last["recordId"] != "6000-0" || last["payload"] != nil || last["fieldsJson"] != `{"other":"x"}` {
			t.Errorf("record without payload: %v", last)
		}
	})

	t.Run("all shards merged by id, paged by all: cursors", func(t *testing.T) {
		cursorRE := regexp.MustCompile(`^all:\d+=\d+-\d+(,\d+=\d+-\d+)*$`)
		for _, c := range []struct {
			direction   string
			want        []string
			firstCursor string
		}{
			{"FORWARD", forward, "all:0=1003-0,1=1001-0,2=1002-0"},
			{"BACKWARD", backward, "all:0=5000-0,1=6000-0,2=1011-0"},
		} {
			t.Run(c.direction, func(t *testing.T) {
				var got []string
				cursor := ""
				for page := 0; ; page++ {
					rows := gfRows(t, tc, q("shardIndex", "all", "direction", c.direction, "limit", "4", "cursor", cursor))
					gfWantTypes(t, "message", rows, gfMessageCols)
					if len(rows) > 4 || page > 10 {
						t.Fatalf("page %d: %v", page, recs(rows))
					}
					got = append(got, recs(rows)...)
					cursor = next(t, rows)
					if page == 0 && cursor != c.firstCursor {
						t.Errorf("first cursor %q, want %q", cursor, c.firstCursor)
					}
					for _, r := range rows {
						if r["shardSelector"] != "all" || r["pageTotalMessages"] != 15.0 || r["pageLimit"] != 4.0 || r["streamKey"] != fmt.Sprintf("msg:%v", r["shardIndex"]) {
							t.Errorf("row %v", r)
						}
					}
					if cursor == "" {
						break
					}
					if !cursorRE.MatchString(cursor) {
						t.Fatalf("cursor %q is not all:<i>=<id>,...", cursor)
					}
				}
				if fmt.Sprint(got) != fmt.Sprint(c.want) {
					t.Fatalf("merged %s:\n got %v\nwant %v", c.direction, got, c.want)
				}
			})
		}
		for _, sel := range []string{"ALL", ".*", "__all", "$__all"} {
			rows := gfRows(t, tc, q("shardIndex", sel, "direction", "FORWARD", "limit", "4"))
			if fmt.Sprint(recs(rows)) != fmt.Sprint(forward[:4]) || rows[0]["shardSelector"] != sel {
				t.Errorf("shardIndex=%s: %v (selector %v)", sel, recs(rows), rows[0]["shardSelector"])
			}
		}
	})

	t.Run("tail cursors", func(t *testing.T) {
		for _, c := range []struct {
			name, shard, direction, limit, cursor string
			want                                  string
			next                                  string
		}{
			{"last page of a shard", "0", "FORWARD", "2", "__rsc_last__", "[0/5000-0]", ""},
			{"one before the last", "0", "FORWARD", "2", "__rsc_tail__:1", "[0/1006-0 0/1009-0]", "__rsc_tail__:0"},
			{"tail 0 is the last", "0", "FORWARD", "2", "__rsc_tail__:0", "[0/5000-0]", ""},
			{"beyond the first page", "0", "FORWARD", "2", "__rsc_tail__:99", "[0/1000-0 0/1003-0]", "__rsc_tail__:1"},
			{"backward last page", "0", "BACKWARD", "2", "__rsc_last__", "[0/1000-0]", ""},
			{"all shards, last page", "all", "BACKWARD", "4", "__rsc_last__", "[2/1002-0 1/1001-0 0/1000-0]", ""},
			{"all shards, one before", "all", "BACKWARD", "4", "__rsc_tail__:1", "[0/1006-0 2/1005-0 1/1004-0 0/1003-0]", "__rsc_tail__:0"},
			{"all shards forward, last page", "all", "FORWARD", "4", "__rsc_last__", "[0/5000-0 2/5000-0 1/6000-0]", ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				rows := gfRows(t, tc, q("shardIndex", c.shard, "direction", c.direction, "limit", c.limit, "cursor", c.cursor))
				if fmt.Sprint(recs(rows)) != c.want || next(t, rows) != c.next {
					t.Fatalf("%v next %q, want %s next %q", recs(rows), next(t, rows), c.want, c.next)
				}
			})
		}
	})

	t.Run("recordId searches every shard", func(t *testing.T) {
		for _, c := range []struct {
			name string
			kv   []string
			want string
		}{
			{"on two shards", []string{"recordId", "5000-0"}, "[0/5000-0 2/5000-0]"},
			{"shardIndex and cursor are ignored", []string{"recordId", " 1004-0 ", "shardIndex", "2", "cursor", "all:0=9-0"}, "[1/1004-0]"},
			{"no such id", []string{"recordId", "1004-1"}, "[]"},
			{"0-0", []string{"recordId", "0-0"}, "[]"},
		} {
			t.Run(c.name, func(t *testing.T) {
				rows := gfRows(t, tc, q(c.kv...))
				if fmt.Sprint(recs(rows)) != c.want {
					t.Fatalf("%v, want %s", recs(rows), c.want)
				}
				for _, r := range rows {
					if r["shardSelector"] != "all" || r["pageNextCursor"] != nil || r["pageTotalMessages"] != 15.0 {
						t.Errorf("row %v", r)
					}
				}
			})
		}
		apiDo(t, tc, "GET", q("recordId", "nope"), nil).apiWantError(t, 400, "INVALID_REQUEST")
	})

	t.Run("limit is clamped to 1..1000, and to 2000 entries read over the shards", func(t *testing.T) {
		for _, c := range []struct {
			limit     string
			pageLimit float64
			rows      int
		}{{"0", 1, 1}, {"-3", 1, 1}, {"5000", 2000/3 - 1, 15}, {"1000", 2000/3 - 1, 15}, {"600", 600, 15}} {
			rows := gfRows(t, tc, q("shardIndex", "all", "limit", c.limit))
			if len(rows) != c.rows || rows[0]["pageLimit"] != c.pageLimit {
				t.Errorf("limit=%s: %d rows, pageLimit %v", c.limit, len(rows), rows[0]["pageLimit"])
			}
		}
	})

	t.Run("bad parameters", func(t *testing.T) {
		for _, c := range []struct{ name, k, v, msg string }{
			{"shard past the end", "shardIndex", "3", "shardIndex must be between 0 and 2"},
			{"negative shard", "shardIndex", "-1", "shardIndex must be between 0 and 2"},
			{"shard not a number", "shardIndex", "x", "shardIndex must be between 0 and 2"},
			{"direction", "direction", "SIDEWAYS", "direction"},
			{"limit", "limit", "many", "limit"},
			{"cursor", "cursor", "not-an-id", "msg:0"},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := apiDo(t, tc, "GET", q(c.k, c.v), nil).apiWantError(t, 400, "INVALID_REQUEST")
				if !strings.Contains(r.apiMsg(), c.msg) {
					t.Errorf("message %q, want it to mention %q", r.apiMsg(), c.msg)
				}
			})
		}
		gfRequiredParamErrors(t, tc, "/messages", "msg", "g", true)
	})

	t.Run("an empty shard", func(t *testing.T) {
		apiCreate(t, tc, "empty", "g", 1)
		if rows := gfRows(t, tc, gfPath("/messages", "streamPrefix", "empty", "consumerGroup", "g", "shardIndex", "all")); len(rows) != 0 {
			t.Fatalf("rows %v", rows)
		}
	})

	for i, n := range []int64{5, 5, 5} {
		if got := rdb.XLen(ctx, fmt.Sprintf("msg:%d", i)).Val(); got != n {
			t.Fatalf("reading messages changed msg:%d: XLEN %d", i, got)
		}
	}
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i := range s {
		out[len(s)-1-i] = s[i]
	}
	return out
}
