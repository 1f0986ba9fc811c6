package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
)

// End-to-end tests of the wire contract (CONTRACT.md §1, §2, §3.2-§3.4, §5.4 and the
// deviations in resharding-routing-admin-api.txt): the real Main on port 0 against a
// real Redis. Paths, fields, status codes and errorCodes must match exactly.

var apiReshardingID = regexp.MustCompile(`^reshard-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// groupResponseFields are the contract's GroupResponse fields (§2.4).
var groupResponseFields = []string{
	"streamPrefix", "consumerGroup", "state", "groupEpoch", "assignmentEpoch", "metadataVersion",
	"shardCount", "activeMigration", "targetAssignmentSummary", "currentAssignmentSummary",
}

// migrationFields are the contract's Migration fields (§5.1) plus the monitoring the
// design asks for (requestedBy, reason, state history, provisioning, rollback).
var migrationFields = []string{
	"reshardingId", "fromShardCount", "toShardCount", "state", "createdAt", "updatedAt",
	"requestedBy", "reason", "stateHistory", "provisioning", "rollback",
}

func TestIntegrationAPICreateGroup(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)

	t.Run("compat create answers 201 GroupResponse", func(t *testing.T) {
		r := apiDo(t, tc, "POST", apiGroupPath("orders", "oc"), map[string]any{"initialShardCount": 4, "requestedBy": "alice", "reason": "launch"}).apiWant(t, 201)
		apiHasKeys(t, "GroupResponse", r.JSON, groupResponseFields...)
		want := map[string]any{"streamPrefix": "orders", "consumerGroup": "oc", "state": "EMPTY", "groupEpoch": 1.0, "assignmentEpoch": 1.0, "metadataVersion": 1.0, "shardCount": 4.0, "activeMigration": nil}
		for k, v := range want {
			if r.JSON[k] != v {
				t.Errorf("%s = %#v, want %#v", k, r.JSON[k], v)
			}
		}
		if len(apiObj(t, r.JSON, "targetAssignmentSummary")) != 0 || len(apiObj(t, r.JSON, "currentAssignmentSummary")) != 0 {
			t.Errorf("summaries of a fresh group must be empty objects: %s", r.Body)
		}
	})

	t.Run("stream-level create answers 201 StreamCreateResponse and creates no group", func(t *testing.T) {
		r := apiDo(t, tc, "POST", "/coord/v1/streams/payments", map[string]any{"initialShardCount": 3, "requestedBy": "alice"}).apiWant(t, 201)
		apiJSONEqual(t, r.Body, `{"streamPrefix":"payments","shardCount":3,"metadataVersion":1}`)
		apiDo(t, tc, "GET", apiGroupPath("payments", "payments"), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
		st := apiDo(t, tc, "GET", "/coord/v1/streams/payments", nil).apiWant(t, 200)
		if st.JSON["hasMetadata"] != true || st.JSON["shardCount"] != 3.0 || st.JSON["origin"] != "CREATED" || len(apiArr(t, st.JSON, "consumerGroups")) != 0 {
			t.Fatalf("the created stream: %s", st.Body)
		}
	})

	t.Run("default shard count is 12", func(t *testing.T) {
		r := apiDo(t, tc, "POST", apiGroupPath("dflt", "g"), map[string]any{"requestedBy": "alice"}).apiWant(t, 201)
		if r.JSON["shardCount"] != 12.0 {
			t.Errorf("compat create without initialShardCount: shardCount %v, want 12", r.JSON["shardCount"])
		}
		r = apiDo(t, tc, "POST", "/coord/v1/streams/dflt2", map[string]any{"initialShardCount": nil, "requestedBy": "alice"}).apiWant(t, 201)
		if r.JSON["shardCount"] != 12.0 {
			t.Errorf("stream create with initialShardCount null: shardCount %v, want 12", r.JSON["shardCount"])
		}
	})

	cases := []struct {
		name        string
		body        any // nil: no body; string/[]byte: raw
		wantStatus  int
		wantShards  float64
		msgContains string
	}{
		{name: "shard count 1", body: map[string]any{"initialShardCount": 1, "requestedBy": "a"}, wantStatus: 201, wantShards: 1},
		{name: "shard count 1024", body: map[string]any{"initialShardCount": 1024, "requestedBy": "a"}, wantStatus: 201, wantShards: 1024},
		{name: "shard count 0", body: map[string]any{"initialShardCount": 0, "requestedBy": "a"}, wantStatus: 400, msgContains: "initialShardCount"},
		{name: "shard count -1", body: map[string]any{"initialShardCount": -1, "requestedBy": "a"}, wantStatus: 400, msgContains: "initialShardCount"},
		{name: "shard count 1025", body: map[string]any{"initialShardCount": 1025, "requestedBy": "a"}, wantStatus: 400, msgContains: "initialShardCount"},
		{name: "requestedBy empty", body: map[string]any{"initialShardCount": 2, "requestedBy": ""}, wantStatus: 400, msgContains: "requestedBy"},
		{name: "requestedBy blank", body: map[string]any{"initialShardCount": 2, "requestedBy": "   "}, wantStatus: 400, msgContains: "requestedBy"},
		{name: "requestedBy missing", body: map[string]any{"initialShardCount": 2}, wantStatus: 400, msgContains: "requestedBy"},
		{name: "malformed JSON", body: `{"initialShardCount": 2, "requestedBy": "a"`, wantStatus: 400},
		{name: "wrong type", body: `{"initialShardCount":"x","requestedBy":"a"}`, wantStatus: 400, msgContains: "initialShardCount"},
		{name: "huge number", body: `{"initialShardCount":1e30,"requestedBy":"a"}`, wantStatus: 400, msgContains: "initialShardCount"},
		{name: "fractional number", body: `{"initialShardCount":2.5,"requestedBy":"a"}`, wantStatus: 400, msgContains: "initialShardCount"},
		{name: "body is an array", body: `[1,2]`, wantStatus: 400},
		{name: "missing body", body: nil, wantStatus: 400},
	}
	for i, c := range cases {
		for _, level := range []string{"compat", "stream"} {
			t.Run(level+" "+c.name, func(t *testing.T) {
				path := apiGroupPath(fmt.Sprintf("bounds%d", i), "g")
				if level == "stream" {
					path = fmt.Sprintf("/coord/v1/streams/sbounds%d", i)
				}
				r := apiDo(t, tc, "POST", path, c.body)
				if c.wantStatus == 201 {
					r.apiWant(t, 201)
					if r.JSON["shardCount"] != c.wantShards {
						t.Fatalf("shardCount %v, want %v", r.JSON["shardCount"], c.wantShards)
					}
					return
				}
				r.apiWantError(t, c.wantStatus, "INVALID_REQUEST")
				if !strings.Contains(r.apiMsg(), c.msgContains) {
					t.Fatalf("message %q does not say what was wrong (want %q)", r.apiMsg(), c.msgContains)
				}
			})
		}
	}

	t.Run("duplicate group is 409 GROUP_ALREADY_EXISTS", func(t *testing.T) {
		apiCreate(t, tc, "dup", "g", 2)
		apiDo(t, tc, "POST", apiGroupPath("dup", "g"), map[string]any{"initialShardCount": 2, "requestedBy": "a"}).apiWantError(t, 409, "GROUP_ALREADY_EXISTS")
		// A different count does not make it a different group.
		apiDo(t, tc, "POST", apiGroupPath("dup", "g"), map[string]any{"initialShardCount": 5, "requestedBy": "a"}).apiWantError(t, 409, "GROUP_ALREADY_EXISTS")
	})

	t.Run("stream-level create of a managed prefix is 409 STREAM_PREFIX_ALREADY_EXISTS", func(t *testing.T) {
		apiCreate(t, tc, "managed", "other", 2)
		r := apiDo(t, tc, "POST", "/coord/v1/streams/managed", map[string]any{"initialShardCount": 2, "requestedBy": "a"}).apiWantError(t, 409, "STREAM_PREFIX_ALREADY_EXISTS")
		if !strings.Contains(r.apiMsg(), "managed") {
			t.Errorf("message should name the prefix: %q", r.apiMsg())
		}
		apiDo(t, tc, "POST", "/coord/v1/streams/payments", map[string]any{"requestedBy": "a"}).apiWantError(t, 409, "STREAM_PREFIX_ALREADY_EXISTS")
		// A group of the created stream takes its shard count; another
		// explicit count is refused.
		r = apiDo(t, tc, "POST", apiGroupPath("payments", "ledger"), map[string]any{"initialShardCount": 2, "requestedBy": "a"}).apiWantError(t, 400, "INVALID_REQUEST")
		if !strings.Contains(r.apiMsg(), "Group shard count must match stream shard count 3 for 'payments'") {
			t.Errorf("message %q", r.apiMsg())
		}
		g := apiDo(t, tc, "POST", apiGroupPath("payments", "ledger"), map[string]any{"requestedBy": "a"}).apiWant(t, 201)
		if g.JSON["shardCount"] != 3.0 || g.JSON["metadataVersion"] != 1.0 {
			t.Errorf("a group of the stream: %s", g.Body)
		}
		apiDo(t, tc, "POST", "/coord/v1/streams/payments", map[string]any{"requestedBy": "a"}).apiWantError(t, 409, "STREAM_PREFIX_ALREADY_EXISTS")
	})

	badNames := []struct {
		name, value, msg string
	}{
		{"open brace", "a{b", "brace"},
		{"close brace", "a}b", "brace"},
		{"hash tag", "{x}", "brace"},
		{"star", "a*", "*"},
		{"question mark", "a?", "?"},
		{"space", "a b", ""},
		{"tab", "a\tb", ""},
		{"control char", "a\x01", ""},
		{"DEL", "a\x7f", ""},
		{"newline", "a\nb", ""},
		{"blank", " ", "blank"},
		{"invalid UTF-8", "a\xffb", "UTF-8"},
		{"truncated UTF-8", "a\xe2\x82", "UTF-8"},
	}
	for _, b := range badNames {
		t.Run("prefix "+b.name+" is 400", func(t *testing.T) {
			r := apiDo(t, tc, "POST", apiGroupPath(b.value, "g"), map[string]any{"initialShardCount": 2, "requestedBy": "a"}).apiWantError(t, 400, "INVALID_REQUEST")
			if !strings.Contains(r.apiMsg(), "streamPrefix") || !strings.Contains(r.apiMsg(), b.msg) {
				t.Errorf("compat create: message %q should name streamPrefix and %q", r.apiMsg(), b.msg)
			}
			r = apiDo(t, tc, "POST", "/coord/v1/streams/"+apiEsc(b.value), map[string]any{"initialShardCount": 2, "requestedBy": "a"}).apiWantError(t, 400, "INVALID_REQUEST")
			if !strings.Contains(r.apiMsg(), "streamPrefix") {
				t.Errorf("stream create: message %q should name streamPrefix", r.apiMsg())
			}
		})
		t.Run("group "+b.name+" is 400", func(t *testing.T) {
			r := apiDo(t, tc, "POST", apiGroupPath("goodprefix", b.value), map[string]any{"initialShardCount": 2, "requestedBy": "a"}).apiWantError(t, 400, "INVALID_REQUEST")
			if !strings.Contains(r.apiMsg(), "consumerGroup") {
				t.Errorf("message %q should name consumerGroup", r.apiMsg())
			}
		})
	}

	// Python's quote("") is "": a blank parameter arrives as an empty segment.
	for _, path := range []string{apiGroupPath("", "g"), apiGroupPath("orders", "")} {
		t.Run("empty segment "+path+" is 400 or 404, not a redirect", func(t *testing.T) {
			r := apiSendNoRedirect(t, tc, apiAdmin, "POST", path, map[string]any{"initialShardCount": 2, "requestedBy": "a"})
			if r.Status >= 300 && r.Status < 400 {
				t.Fatalf("HTTP %d to %q: the router redirects a POST to another route instead of answering 400 (must not be blank) or 404", r.Status, r.Header.Get("Location"))
			}
			if r.Status == 404 {
				r.apiWantError(t, 404, "NOT_FOUND")
				return
			}
			r.apiWantError(t, 400, "INVALID_REQUEST")
		})
	}

	t.Run("percent-encoded slash stays in one segment", func(t *testing.T) {
		r := apiDo(t, tc, "POST", "/coord/v1/streams/slash/groups/a%2Fb", map[string]any{"initialShardCount": 2, "requestedBy": "a"}).apiWant(t, 201)
		if r.JSON["consumerGroup"] != "a/b" {
			t.Fatalf("consumerGroup %v, want a/b", r.JSON["consumerGroup"])
		}
		g := apiDo(t, tc, "GET", "/coord/v1/streams/slash/groups/a%2Fb", nil).apiWant(t, 200)
		if g.JSON["consumerGroup"] != "a/b" || g.JSON["streamPrefix"] != "slash" {
			t.Fatalf("GET a%%2Fb: %s", g.Body)
		}
		rt := apiDo(t, tc, "GET", "/coord/v1/streams/slash/groups/a%2Fb/producer-routing", nil).apiWant(t, 200)
		if rt.JSON["consumerGroup"] != "a/b" {
			t.Fatalf("routing of a%%2Fb: %s", rt.Body)
		}
		// "a" alone is another group, which does not exist.
		apiDo(t, tc, "GET", "/coord/v1/streams/slash/groups/a", nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
		groups, err := apiRedis(t, tc).XInfoGroups(context.Background(), "slash:0").Result()
		if err != nil || len(groups) != 1 || groups[0].Name != "a/b" {
			t.Fatalf("XINFO GROUPS slash:0 = %v, %v; want the consumer group a/b", groups, err)
		}
	})

	t.Run("other encoded characters are decoded", func(t *testing.T) {
		r := apiDo(t, tc, "POST", apiGroupPath("svc:orders", "billing.v2"), map[string]any{"initialShardCount": 2, "requestedBy": "a"}).apiWant(t, 201)
		if r.JSON["streamPrefix"] != "svc:orders" {
			t.Fatalf("streamPrefix %v", r.JSON["streamPrefix"])
		}
		if rt := apiRouting(t, tc, "svc:orders", "billing.v2"); rt["streamKeyPattern"] != "svc:orders:{shardIndex}" {
			t.Fatalf("streamKeyPattern %v", rt["streamKeyPattern"])
		}
	})
}

func TestIntegrationAPIProvisioning(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	rdb := apiRedis(t, tc)
	ctx := context.Background()

	wantGroups := func(t *testing.T, key string, names ...string) {
		t.Helper()
		groups, err := rdb.XInfoGroups(ctx, key).Result()
		if err != nil {
			t.Fatalf("XINFO GROUPS %s: %v", key, err)
		}
		got := map[string]redis.XInfoGroup{}
		for _, g := range groups {
			got[g.Name] = g
		}
		for _, n := range names {
			g, ok := got[n]
			if !ok {
				t.Fatalf("%s has no consumer group %q: %+v", key, n, groups)
			}
			if g.Lag != 0 || g.Pending != 0 {
				t.Errorf("%s group %s: lag %d pending %d, want 0 and 0", key, n, g.Lag, g.Pending)
			}
		}
		if len(groups) != len(names) {
			t.Errorf("%s has groups %+v, want exactly %v", key, groups, names)
		}
	}

	t.Run("create provisions every shard stream with the consumer group", func(t *testing.T) {
		apiCreate(t, tc, "prov", "g", 4)
		for i := 0; i < 4; i++ {
			key := fmt.Sprintf("prov:%d", i)
			if typ := rdb.Type(ctx, key).Val(); typ != "stream" {
				t.Fatalf("%s has type %q, want stream", key, typ)
			}
			wantGroups(t, key, "g")
		}
		if n := rdb.Exists(ctx, "prov:4", "prov").Val(); n != 0 {
			t.Fatalf("keys beyond the shard count were created")
		}
	})

	t.Run("second group of a prefix adds its consumer group", func(t *testing.T) {
		apiCreate(t, tc, "prov", "g2", 4)
		for i := 0; i < 4; i++ {
			wantGroups(t, fmt.Sprintf("prov:%d", i), "g", "g2")
		}
	})

	t.Run("stream-level create provisions empty shard streams without a consumer group", func(t *testing.T) {
		apiDo(t, tc, "POST", "/coord/v1/streams/sprov", map[string]any{"initialShardCount": 3, "requestedBy": "a"}).apiWant(t, 201)
		for i := 0; i < 3; i++ {
			wantGroups(t, fmt.Sprintf("sprov:%d", i))
			if n := rdb.XLen(ctx, fmt.Sprintf("sprov:%d", i)).Val(); n != 0 {
				t.Errorf("sprov:%d holds %d entries, want none", i, n)
			}
		}
		if n := rdb.Exists(ctx, "sprov:3", "sprov").Val(); n != 0 {
			t.Fatalf("keys beyond the shard count were created")
		}
	})

	t.Run("existing shard key makes the first group 409", func(t *testing.T) {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "hand:1", Values: []string{"payload", "by hand"}})
		r := apiDo(t, tc, "POST", apiGroupPath("hand", "g"), map[string]any{"initialShardCount": 4, "requestedBy": "a"}).apiWantError(t, 409, "STREAM_PREFIX_ALREADY_EXISTS")
		if !strings.Contains(r.apiMsg(), "hand:1") {
			t.Errorf("message should list the existing key hand:1: %q", r.apiMsg())
		}
		apiDo(t, tc, "GET", apiGroupPath("hand", "g"), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
		if rdb.Exists(ctx, "hand:0").Val() != 0 {
			t.Errorf("a refused create must not provision hand:0")
		}
		apiDo(t, tc, "POST", "/coord/v1/streams/hand", map[string]any{"initialShardCount": 4, "requestedBy": "a"}).apiWantError(t, 409, "STREAM_PREFIX_ALREADY_EXISTS")
	})

	// A refused command must not make a prefix count as "ours": only a group that
	// existed can have left streams behind.
	for _, c := range []struct {
		name    string
		refused func(prefix string)
	}{
		{"after a refused create", func(p string) {
			apiDo(t, tc, "POST", apiGroupPath(p, "g"), map[string]any{"initialShardCount": 4, "requestedBy": "a"}).apiWantError(t, 409, "STREAM_PREFIX_ALREADY_EXISTS")
		}},
		{"after a refused invalid create", func(p string) {
			apiDo(t, tc, "POST", apiGroupPath(p, "other"), map[string]any{"initialShardCount": 0, "requestedBy": "a"}).apiWantError(t, 400, "INVALID_REQUEST")
		}},
		{"after a refused stream scale", func(p string) {
			apiDo(t, tc, "POST", "/coord/v1/streams/"+p+"/scale", map[string]any{"targetShardCount": 4, "requestedBy": "a", "reason": "r"}).apiWantError(t, 404, "STREAM_NOT_FOUND")
		}},
	} {
		t.Run("existing shard key still blocks "+c.name, func(t *testing.T) {
			prefix := "stranger" + strings.ReplaceAll(c.name, " ", "-")
			rdb.XAdd(ctx, &redis.XAddArgs{Stream: prefix + ":0", Values: []string{"payload", "not ours"}})
			c.refused(prefix)
			apiDo(t, tc, "POST", apiGroupPath(prefix, "g"), map[string]any{"initialShardCount": 4, "requestedBy": "a"}).apiWantError(t, 409, "STREAM_PREFIX_ALREADY_EXISTS")
			apiDo(t, tc, "POST", "/coord/v1/streams/"+prefix, map[string]any{"initialShardCount": 4, "requestedBy": "a"}).apiWantError(t, 409, "STREAM_PREFIX_ALREADY_EXISTS")
		})
	}

	t.Run("existing bare prefix key makes the first group 409", func(t *testing.T) {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "bare", Values: []string{"payload", "x"}})
		apiDo(t, tc, "POST", apiGroupPath("bare", "g"), map[string]any{"initialShardCount": 2, "requestedBy": "a"}).apiWantError(t, 409, "STREAM_PREFIX_ALREADY_EXISTS")
	})

	t.Run("a key beyond the requested count does not block", func(t *testing.T) {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: "beyond:5", Values: []string{"payload", "x"}})
		apiCreate(t, tc, "beyond", "g", 4)
	})
}

func TestIntegrationAPIGetListDelete(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	apiCreate(t, tc, "orders", "oc", 4)
	apiCreate(t, tc, "orders", "empty", 4)

	t.Run("get unknown group is 404 GROUP_NOT_FOUND", func(t *testing.T) {
		apiDo(t, tc, "GET", apiGroupPath("orders", "nope"), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
		apiDo(t, tc, "GET", apiGroupPath("nope", "oc"), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
		apiDo(t, tc, "GET", apiMonPath("orders", "nope"), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
	})

	t.Run("state goes EMPTY, RECONCILING, STABLE", func(t *testing.T) {
		if s := apiGroup(t, tc, "orders", "oc")["state"]; s != "EMPTY" {
			t.Fatalf("state %v, want EMPTY", s)
		}
		j := apiBeat(t, tc, "orders", "oc", apiHBBody{Member: "A"})
		g := apiGroup(t, tc, "orders", "oc")
		if g["state"] != "RECONCILING" {
			t.Fatalf("joined member owns nothing yet: state %v, want RECONCILING", g["state"])
		}
		apiBeat(t, tc, "orders", "oc", apiHBBody{Member: "A", Epoch: j.MemberEpoch, MV: j.MetadataVersion, Owned: j.Assigned})
		g = apiGroup(t, tc, "orders", "oc")
		apiHasKeys(t, "GroupResponse", g, groupResponseFields...)
		if g["state"] != "STABLE" || g["activeMigration"] != nil {
			t.Fatalf("converged group: %v", g)
		}
		if g["groupEpoch"] != 2.0 || g["assignmentEpoch"] != 2.0 || g["metadataVersion"] != 2.0 || g["shardCount"] != 4.0 {
			t.Errorf("epochs after one join: %v", g)
		}
		if got := apiObj(t, g, "targetAssignmentSummary"); len(got) != 1 || got["A"] != 4.0 {
			t.Errorf("targetAssignmentSummary %v, want {A:4}", got)
		}
		if got := apiObj(t, g, "currentAssignmentSummary"); len(got) != 1 || got["A"] != 4.0 {
			t.Errorf("currentAssignmentSummary %v, want {A:4}", got)
		}
		mon := apiDo(t, tc, "GET", apiMonPath("orders", "oc"), nil).apiWant(t, 200).JSON
		if mon["state"] != "STABLE" || mon["groupEpoch"] != g["groupEpoch"] {
			t.Errorf("monitoring twin differs: %v", mon)
		}
	})

	t.Run("list groups", func(t *testing.T) {
		r := apiDo(t, tc, "GET", "/coord/v1/monitoring/groups", nil).apiWant(t, 200)
		seen := map[string]bool{}
		for _, e := range apiArr(t, r.JSON, "groups") {
			g := e.(map[string]any)
			apiHasKeys(t, "listed GroupResponse", g, groupResponseFields...)
			seen[g["streamPrefix"].(string)+"/"+g["consumerGroup"].(string)] = true
		}
		if !seen["orders/oc"] || !seen["orders/empty"] || len(seen) != 2 {
			t.Fatalf("groups %v, want orders/oc and orders/empty", seen)
		}
	})

	deletes := []struct {
		name   string
		group  string
		body   any
		status int
		code   string
		msg    string
	}{
		{"no body", "oc", nil, 400, "INVALID_REQUEST", ""},
		{"empty object", "oc", map[string]any{}, 400, "INVALID_REQUEST", "requestedBy"},
		{"reason missing", "oc", map[string]any{"requestedBy": "ops"}, 400, "INVALID_REQUEST", "reason"},
		{"reason blank", "oc", map[string]any{"requestedBy": "ops", "reason": " "}, 400, "INVALID_REQUEST", "reason"},
		{"requestedBy missing", "oc", map[string]any{"reason": "r"}, 400, "INVALID_REQUEST", "requestedBy"},
		{"malformed", "oc", `{"requestedBy":`, 400, "INVALID_REQUEST", ""},
		{"unknown group", "nope", map[string]any{"requestedBy": "ops", "reason": "r"}, 404, "GROUP_NOT_FOUND", ""},
		{"live member", "oc", map[string]any{"requestedBy": "ops", "reason": "r"}, 409, "GROUP_HAS_ACTIVE_MEMBERS", ""},
		{"live member, force false", "oc", map[string]any{"requestedBy": "ops", "reason": "r", "force": false}, 409, "GROUP_HAS_ACTIVE_MEMBERS", ""},
	}
	for _, d := range deletes {
		t.Run("delete "+d.name, func(t *testing.T) {
			r := apiDo(t, tc, "DELETE", apiGroupPath("orders", d.group), d.body).apiWantError(t, d.status, d.code)
			if !strings.Contains(r.apiMsg(), d.msg) {
				t.Errorf("message %q should mention %q", r.apiMsg(), d.msg)
			}
		})
	}

	t.Run("delete with force returns the snapshot", func(t *testing.T) {
		r := apiDo(t, tc, "DELETE", apiGroupPath("orders", "oc"), map[string]any{"requestedBy": "ops", "reason": "r", "force": true}).apiWant(t, 200)
		apiHasKeys(t, "deleted GroupResponse", r.JSON, groupResponseFields...)
		if r.JSON["consumerGroup"] != "oc" || r.JSON["state"] != "STABLE" || r.JSON["shardCount"] != 4.0 {
			t.Errorf("snapshot before deletion: %s", r.Body)
		}
		apiDo(t, tc, "GET", apiGroupPath("orders", "oc"), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
		apiDo(t, tc, "GET", apiGroupPath("orders", "oc", "producer-routing"), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
		apiDo(t, tc, "DELETE", apiGroupPath("orders", "oc"), map[string]any{"requestedBy": "ops", "reason": "r", "force": true}).apiWantError(t, 404, "GROUP_NOT_FOUND")
		// A deleted member gets UNKNOWN_MEMBER_ID, not a 404.
		hb := apiBeat(t, tc, "orders", "oc", apiHBBody{Member: "A", Epoch: 2, MV: 2, Owned: []int{0, 1, 2, 3}})
		if hb.Status != "UNKNOWN_MEMBER_ID" {
			t.Errorf("heartbeat to a deleted group: %s", hb.Body)
		}
	})

	t.Run("delete without members needs no force", func(t *testing.T) {
		r := apiDo(t, tc, "DELETE", apiGroupPath("orders", "empty"), map[string]any{"requestedBy": "ops", "reason": "r"}).apiWant(t, 200)
		if r.JSON["state"] != "EMPTY" {
			t.Errorf("snapshot: %s", r.Body)
		}
		apiDo(t, tc, "GET", apiGroupPath("orders", "empty"), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
		// The stream keys and Redis consumer groups stay (§2.5).
		if apiRedis(t, tc).Exists(context.Background(), "orders:0").Val() != 1 {
			t.Errorf("delete must leave the shard streams in place")
		}
	})
}

func TestIntegrationAPIProducerRouting(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	apiCreate(t, tc, "orders", "orders-consumer", 4)
	r := apiDo(t, tc, "GET", apiGroupPath("orders", "orders-consumer", "producer-routing"), nil).apiWant(t, 200)
	apiJSONEqual(t, r.Body, `{
		"streamPrefix": "orders", "consumerGroup": "orders-consumer", "metadataVersion": 1, "shardCount": 4,
		"streamKeyPattern": "orders:{shardIndex}",
		"shards": [
			{"shardIndex": 0, "streamKey": "orders:0", "redisSlot": 8578, "fenceKey": "{orders:0}:fence"},
			{"shardIndex": 1, "streamKey": "orders:1", "redisSlot": 12707, "fenceKey": "{orders:1}:fence"},
			{"shardIndex": 2, "streamKey": "orders:2", "redisSlot": 448, "fenceKey": "{orders:2}:fence"},
			{"shardIndex": 3, "streamKey": "orders:3", "redisSlot": 4577, "fenceKey": "{orders:3}:fence"}
		],
		"ordering": "NONE", "layoutWindowMs": 3600000}`)
	apiDo(t, tc, "GET", apiGroupPath("orders", "nope", "producer-routing"), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
	if r := apiSend(t, tc, apiNoAuth, "GET", apiGroupPath("orders", "orders-consumer", "producer-routing"), nil, nil); r.Status != 401 {
		t.Fatalf("producer routing without credentials: HTTP %d, want 401 (needs READ)", r.Status)
	}

	apiCreate(t, tc, "create-order", "g", 8)
	want := []float64{9192, 13257, 938, 5003, 9068, 13133, 814, 4879}
	for i, s := range apiArr(t, apiRouting(t, tc, "create-order", "g"), "shards") {
		if got := s.(map[string]any)["redisSlot"]; got != want[i] {
			t.Errorf("create-order:%d slot %v, want %v", i, got, want[i])
		}
	}
}

func TestIntegrationAPIScale(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	rdb := apiRedis(t, tc)
	ctx := context.Background()
	apiCreate(t, tc, "orders", "oc", 4)
	epoch, mv, _ := apiJoinSteady(t, tc, "orders", "oc", "A")
	mvBefore := apiInt(t, apiRouting(t, tc, "orders", "oc"), "metadataVersion")

	invalid := []struct {
		name   string
		body   any
		status int
		code   string
		msg    string
	}{
		{"target -1", map[string]any{"targetShardCount": -1, "requestedBy": "a", "reason": "r"}, 400, "INVALID_REQUEST", "targetShardCount"},
		{"target 1025", map[string]any{"targetShardCount": 1025, "requestedBy": "a", "reason": "r"}, 400, "INVALID_REQUEST", "targetShardCount"},
		{"target missing", map[string]any{"requestedBy": "a", "reason": "r"}, 400, "INVALID_REQUEST", "targetShardCount"},
		{"target null", map[string]any{"targetShardCount": nil, "requestedBy": "a", "reason": "r"}, 400, "INVALID_REQUEST", "targetShardCount"},
		{"target string", `{"targetShardCount":"8","requestedBy":"a","reason":"r"}`, 400, "INVALID_REQUEST", "targetShardCount"},
		{"requestedBy blank", map[string]any{"targetShardCount": 8, "requestedBy": " ", "reason": "r"}, 400, "INVALID_REQUEST", "requestedBy"},
		{"reason missing", map[string]any{"targetShardCount": 8, "requestedBy": "a"}, 400, "INVALID_REQUEST", "reason"},
		{"no body", nil, 400, "INVALID_REQUEST", ""},
		{"malformed", `{"targetShardCount":8,`, 400, "INVALID_REQUEST", ""},
		{"equal count", map[string]any{"targetShardCount": 4, "requestedBy": "a", "reason": "r"}, 422, "SHARD_COUNT_UNCHANGED", ""},
	}
	for _, c := range invalid {
		t.Run("group scale "+c.name, func(t *testing.T) {
			r := apiDo(t, tc, "POST", apiGroupPath("orders", "oc", "scale"), c.body).apiWantError(t, c.status, c.code)
			if !strings.Contains(r.apiMsg(), c.msg) {
				t.Errorf("message %q should mention %q", r.apiMsg(), c.msg)
			}
		})
		t.Run("stream scale "+c.name, func(t *testing.T) {
			r := apiDo(t, tc, "POST", "/coord/v1/streams/orders/scale", c.body).apiWantError(t, c.status, c.code)
			if !strings.Contains(r.apiMsg(), c.msg) {
				t.Errorf("message %q should mention %q", r.apiMsg(), c.msg)
			}
		})
	}
	t.Run("unknown group and stream", func(t *testing.T) {
		apiScale(t, tc, "orders", "nope", 8).apiWantError(t, 404, "GROUP_NOT_FOUND")
		r := apiDo(t, tc, "POST", "/coord/v1/streams/nostream/scale", map[string]any{"targetShardCount": 8, "requestedBy": "a", "reason": "r"}).apiWantError(t, 404, "STREAM_NOT_FOUND")
		if !strings.Contains(r.apiMsg(), "nostream") {
			t.Errorf("message should name the prefix: %q", r.apiMsg())
		}
	})
	if g := apiGroup(t, tc, "orders", "oc"); g["shardCount"] != 4.0 || g["activeMigration"] != nil {
		t.Fatalf("refused scales changed the group: %v", g)
	}

	var id string
	t.Run("scale out answers 202 Migration", func(t *testing.T) {
		r := apiDo(t, tc, "POST", apiGroupPath("orders", "oc", "scale"), map[string]any{"targetShardCount": 8, "requestedBy": "alice", "reason": "black friday", "deprecatedAfter": "2030-01-01T00:00:00Z"}).apiWant(t, 202)
		apiHasKeys(t, "Migration", r.JSON, migrationFields...)
		id, _ = r.JSON["reshardingId"].(string)
		if !apiReshardingID.MatchString(id) {
			t.Errorf("reshardingId %q is not reshard-<uuid>", id)
		}
		if r.JSON["fromShardCount"] != 4.0 || r.JSON["toShardCount"] != 8.0 || r.JSON["state"] != "ACTIVE" {
			t.Errorf("migration %s", r.Body)
		}
		if r.JSON["requestedBy"] != "alice" || r.JSON["reason"] != "black friday" {
			t.Errorf("requestedBy/reason not kept: %s", r.Body)
		}
		for _, f := range []string{"createdAt", "updatedAt"} {
			if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r.JSON[f])); err != nil {
				t.Errorf("%s %v is not ISO-8601: %v", f, r.JSON[f], err)
			}
		}
		if len(apiArr(t, r.JSON, "stateHistory")) == 0 {
			t.Errorf("stateHistory is empty: %s", r.Body)
		}
		apiObj(t, r.JSON, "provisioning")
		apiObj(t, r.JSON, "rollback")
	})
	if id == "" {
		t.FailNow()
	}

	t.Run("routing switches at once and metadataVersion grows", func(t *testing.T) {
		rt := apiRouting(t, tc, "orders", "oc")
		if rt["shardCount"] != 8.0 || len(apiArr(t, rt, "shards")) != 8 {
			t.Fatalf("routing after scale: %v", rt)
		}
		if mvNow := apiInt(t, rt, "metadataVersion"); mvNow <= mvBefore {
			t.Fatalf("metadataVersion %d did not grow from %d", mvNow, mvBefore)
		}
		g := apiGroup(t, tc, "orders", "oc")
		am, _ := g["activeMigration"].(map[string]any)
		if g["shardCount"] != 8.0 || am == nil || am["reshardingId"] != id {
			t.Fatalf("group after scale: %v", g)
		}
		for i := 4; i < 8; i++ {
			groups, err := rdb.XInfoGroups(ctx, fmt.Sprintf("orders:%d", i)).Result()
			if err != nil || len(groups) != 1 || groups[0].Name != "oc" {
				t.Fatalf("orders:%d not provisioned: %v %v", i, groups, err)
			}
		}
	})

	// A keeps heartbeating with its old set: alive, but the scale-out never converges.
	hb := apiBeat(t, tc, "orders", "oc", apiHBBody{Member: "A", Epoch: epoch, MV: mv, Owned: []int{0, 1, 2, 3}})
	if hb.Status != "OK" || !equalInts(hb.Assigned, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("A after scale-out: %s", hb.Body)
	}
	epoch, mv = hb.MemberEpoch, hb.MetadataVersion
	hb = apiBeat(t, tc, "orders", "oc", apiHBBody{Member: "A", Epoch: epoch, MV: mv, Owned: []int{0, 1, 2, 3}})
	if hb.Status != "OK" {
		t.Fatalf("A steady on its old set: %s", hb.Body)
	}

	t.Run("second scale while one is active is 409 ACTIVE_MIGRATION_EXISTS", func(t *testing.T) {
		apiScale(t, tc, "orders", "oc", 12).apiWantError(t, 409, "ACTIVE_MIGRATION_EXISTS")
		apiScale(t, tc, "orders", "oc", 8).apiWantError(t, 409, "ACTIVE_MIGRATION_EXISTS")
		apiScale(t, tc, "orders", "oc", 4).apiWantError(t, 409, "ACTIVE_MIGRATION_EXISTS")
		apiDo(t, tc, "POST", "/coord/v1/streams/orders/scale", map[string]any{"targetShardCount": 12, "requestedBy": "a", "reason": "r"}).apiWantError(t, 409, "ACTIVE_MIGRATION_EXISTS")
		if g := apiGroup(t, tc, "orders", "oc"); g["shardCount"] != 8.0 {
			t.Fatalf("a refused scale changed the count: %v", g["shardCount"])
		}
	})

	t.Run("migrations list and get", func(t *testing.T) {
		for _, path := range []string{apiGroupPath("orders", "oc", "migrations"), apiMonPath("orders", "oc", "migrations")} {
			r := apiDo(t, tc, "GET", path, nil).apiWant(t, 200)
			ms := apiArr(t, r.JSON, "migrations")
			if len(ms) != 1 || ms[0].(map[string]any)["reshardingId"] != id || r.JSON["activeReshardingId"] != id {
				t.Fatalf("GET %s: %s", path, r.Body)
			}
		}
		for _, path := range []string{apiGroupPath("orders", "oc", "migrations", id), apiMonPath("orders", "oc", "migrations", id)} {
			r := apiDo(t, tc, "GET", path, nil).apiWant(t, 200)
			apiHasKeys(t, "Migration", r.JSON, migrationFields...)
			if r.JSON["reshardingId"] != id || r.JSON["state"] != "ACTIVE" {
				t.Fatalf("GET %s: %s", path, r.Body)
			}
		}
		apiDo(t, tc, "GET", apiGroupPath("orders", "oc", "migrations", "reshard-nope"), nil).apiWantError(t, 404, "MIGRATION_NOT_FOUND")
		apiDo(t, tc, "GET", apiGroupPath("orders", "oc", "migrations", "noop"), nil).apiWantError(t, 404, "MIGRATION_NOT_FOUND")
		apiDo(t, tc, "GET", apiGroupPath("orders", "nope", "migrations", id), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
		apiDo(t, tc, "GET", apiGroupPath("orders", "nope", "migrations"), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
	})

	t.Run("converging completes the scale-out; list is sorted by createdAt", func(t *testing.T) {
		owned := []int{0, 1, 2, 3, 4, 5, 6, 7}
		apiEventually(t, 20*time.Second, "scale-out DEPRECATED", func() (bool, string) {
			hb := apiBeat(t, tc, "orders", "oc", apiHBBody{Member: "A", Epoch: epoch, MV: mv, Owned: owned})
			epoch, mv = hb.MemberEpoch, hb.MetadataVersion
			m := apiDo(t, tc, "GET", apiGroupPath("orders", "oc", "migrations", id), nil).apiWant(t, 200)
			return m.JSON["state"] == "DEPRECATED", string(m.Body)
		})
		// A second resharding (scale-in) to have two in the list.
		r := apiScale(t, tc, "orders", "oc", 6).apiWant(t, 202)
		id2, _ := r.JSON["reshardingId"].(string)
		if id2 == id || !apiReshardingID.MatchString(id2) {
			t.Fatalf("second reshardingId %q", id2)
		}
		if rt := apiRouting(t, tc, "orders", "oc"); rt["shardCount"] != 6.0 {
			t.Fatalf("scale-in routing: shardCount %v, want 6 at once", rt["shardCount"])
		}
		l := apiDo(t, tc, "GET", apiGroupPath("orders", "oc", "migrations"), nil).apiWant(t, 200)
		ms := apiArr(t, l.JSON, "migrations")
		if len(ms) != 2 || ms[0].(map[string]any)["reshardingId"] != id || ms[1].(map[string]any)["reshardingId"] != id2 || l.JSON["activeReshardingId"] != id2 {
			t.Fatalf("migrations: %s", l.Body)
		}
		t0, _ := time.Parse(time.RFC3339Nano, ms[0].(map[string]any)["createdAt"].(string))
		t1, _ := time.Parse(time.RFC3339Nano, ms[1].(map[string]any)["createdAt"].(string))
		if t1.Before(t0) {
			t.Fatalf("migrations not sorted by createdAt: %s", l.Body)
		}
	})

	t.Run("stream-level scale", func(t *testing.T) {
		apiDo(t, tc, "POST", "/coord/v1/streams/pay", map[string]any{"initialShardCount": 2, "requestedBy": "a"}).apiWant(t, 201)
		apiCreate(t, tc, "pay", "audit", 2)
		apiCreate(t, tc, "pay", "pay", 2)
		apiDo(t, tc, "POST", "/coord/v1/streams/pay/scale", map[string]any{"targetShardCount": 2, "requestedBy": "a", "reason": "r"}).apiWantError(t, 422, "SHARD_COUNT_UNCHANGED")
		r := apiDo(t, tc, "POST", "/coord/v1/streams/pay/scale", map[string]any{"targetShardCount": 3, "requestedBy": "a", "reason": "r"}).apiWant(t, 202)
		apiHasKeys(t, "StreamScaleResponse", r.JSON, "streamPrefix", "targetShardCount", "affectedConsumerGroups", "migrations")
		if r.JSON["streamPrefix"] != "pay" || r.JSON["targetShardCount"] != 3.0 {
			t.Fatalf("stream scale: %s", r.Body)
		}
		if got := fmt.Sprint(r.JSON["affectedConsumerGroups"]); got != "[audit pay]" {
			t.Fatalf("affectedConsumerGroups %s, want [audit pay] (sorted)", got)
		}
		for _, m := range apiArr(t, r.JSON, "migrations") {
			mm := m.(map[string]any)
			apiHasKeys(t, "Migration", mm, migrationFields...)
			if !apiReshardingID.MatchString(fmt.Sprint(mm["reshardingId"])) || mm["fromShardCount"] != 2.0 || mm["toShardCount"] != 3.0 {
				t.Errorf("migration %v", mm)
			}
		}
		for _, g := range []string{"pay", "audit"} {
			if rt := apiRouting(t, tc, "pay", g); rt["shardCount"] != 3.0 {
				t.Errorf("routing of pay/%s: %v", g, rt["shardCount"])
			}
		}
	})
}

func TestIntegrationAPIRollback(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	rdb := apiRedis(t, tc)
	ctx := context.Background()
	apiCreate(t, tc, "rb", "g", 4)
	epoch, mv, _ := apiJoinSteady(t, tc, "rb", "g", "A")
	// A stays alive on its old set so every scale-out stays ACTIVE.
	keepAlive := func() {
		hb := apiBeat(t, tc, "rb", "g", apiHBBody{Member: "A", Epoch: epoch, MV: mv, Owned: []int{0, 1, 2, 3}})
		if hb.Status != "OK" {
			t.Fatalf("A: %s", hb.Body)
		}
		epoch, mv = hb.MemberEpoch, hb.MetadataVersion
	}
	id := apiScale(t, tc, "rb", "g", 8).apiWant(t, 202).JSON["reshardingId"].(string)
	keepAlive()

	rbPath := apiGroupPath("rb", "g", "migrations", id, "rollback")
	invalid := []struct {
		name   string
		path   string
		body   any
		status int
		code   string
		msg    string
	}{
		{"no body", rbPath, nil, 400, "INVALID_REQUEST", ""},
		{"empty object", rbPath, map[string]any{}, 400, "INVALID_REQUEST", "requestedBy"},
		{"reason missing", rbPath, map[string]any{"requestedBy": "ops"}, 400, "INVALID_REQUEST", "reason"},
		{"requestedBy missing", rbPath, map[string]any{"reason": "r"}, 400, "INVALID_REQUEST", "requestedBy"},
		{"unknown policy", rbPath, map[string]any{"requestedBy": "ops", "reason": "r", "policy": "yolo"}, 400, "INVALID_REQUEST", "policy"},
		{"unknown group", apiGroupPath("rb", "nope", "migrations", id, "rollback"), map[string]any{"requestedBy": "ops", "reason": "r"}, 404, "GROUP_NOT_FOUND", ""},
		{"unknown migration", apiGroupPath("rb", "g", "migrations", "reshard-nope", "rollback"), map[string]any{"requestedBy": "ops", "reason": "r"}, 404, "MIGRATION_NOT_FOUND", ""},
	}
	for _, c := range invalid {
		t.Run(c.name, func(t *testing.T) {
			r := apiDo(t, tc, "POST", c.path, c.body).apiWantError(t, c.status, c.code)
			if !strings.Contains(r.apiMsg(), c.msg) {
				t.Errorf("message %q should mention %q", r.apiMsg(), c.msg)
			}
		})
	}
	if g := apiGroup(t, tc, "rb", "g"); g["shardCount"] != 8.0 {
		t.Fatalf("refused rollbacks changed the group: %v", g)
	}

	t.Run("scale-out without entries on new shards rolls back", func(t *testing.T) {
		r := apiRollback(t, tc, "rb", "g", id, "").apiWant(t, 202)
		if r.JSON["reshardingId"] != id || r.JSON["state"] != "ROLLED_BACK" || r.JSON["fromShardCount"] != 4.0 || r.JSON["toShardCount"] != 8.0 {
			t.Fatalf("rollback: %s", r.Body)
		}
		rt := apiRouting(t, tc, "rb", "g")
		if rt["shardCount"] != 4.0 || len(apiArr(t, rt, "shards")) != 4 {
			t.Fatalf("routing after rollback: %v", rt)
		}
		g := apiGroup(t, tc, "rb", "g")
		if g["activeMigration"] != nil || g["shardCount"] != 4.0 {
			t.Fatalf("group after rollback: %v", g)
		}
		l := apiDo(t, tc, "GET", apiGroupPath("rb", "g", "migrations"), nil).apiWant(t, 200)
		if l.JSON["activeReshardingId"] != nil {
			t.Fatalf("activeReshardingId after rollback: %s", l.Body)
		}
		again := apiRollback(t, tc, "rb", "g", id, "").apiWant(t, 202)
		if again.JSON["state"] != "ROLLED_BACK" || again.JSON["reshardingId"] != id {
			t.Fatalf("second rollback is not an idempotent echo: %s", again.Body)
		}
		hb := apiBeat(t, tc, "rb", "g", apiHBBody{Member: "A", Epoch: epoch, MV: mv, Owned: []int{0, 1, 2, 3}})
		if hb.Status != "OK" || !equalInts(hb.Assigned, []int{0, 1, 2, 3}) {
			t.Fatalf("A after rollback: %s", hb.Body)
		}
		epoch, mv = hb.MemberEpoch, hb.MetadataVersion
	})

	t.Run("entries on a new shard need the drain policy", func(t *testing.T) {
		id2 := apiScale(t, tc, "rb", "g", 8).apiWant(t, 202).JSON["reshardingId"].(string)
		keepAlive()
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "rb:5", Values: []string{"payload", "landed on a new shard"}}).Err(); err != nil {
			t.Fatal(err)
		}
		r := apiRollback(t, tc, "rb", "g", id2, "").apiWantError(t, 422, "ROLLBACK_NOT_ALLOWED")
		if !strings.Contains(r.apiMsg(), "rb:5") {
			t.Errorf("message should name the shard key rb:5: %q", r.apiMsg())
		}
		m := apiDo(t, tc, "GET", apiGroupPath("rb", "g", "migrations", id2), nil).apiWant(t, 200)
		if rbInfo := apiObj(t, m.JSON, "rollback"); rbInfo["eligible"] != false {
			t.Errorf("rollback eligibility should say no: %v", rbInfo)
		}
		if g := apiGroup(t, tc, "rb", "g"); g["shardCount"] != 8.0 {
			t.Fatalf("refused rollback changed the group: %v", g["shardCount"])
		}
		d := apiRollback(t, tc, "rb", "g", id2, "drain").apiWant(t, 202)
		if d.JSON["state"] != "ROLLING_BACK" || d.JSON["reshardingId"] != id2 {
			t.Fatalf("drain rollback: %s", d.Body)
		}
		if rt := apiRouting(t, tc, "rb", "g"); rt["shardCount"] != 4.0 {
			t.Fatalf("routing during ROLLING_BACK: shardCount %v, want 4", rt["shardCount"])
		}
		for _, policy := range []string{"drain", ""} {
			again := apiRollback(t, tc, "rb", "g", id2, policy).apiWant(t, 202)
			if s := again.JSON["state"]; s != "ROLLING_BACK" && s != "ROLLED_BACK" {
				t.Fatalf("repeated rollback (policy %q): %s", policy, again.Body)
			}
		}
	})

	t.Run("completed resharding cannot be rolled back", func(t *testing.T) {
		apiCreate(t, tc, "rc", "g", 2)
		e, v, _ := apiJoinSteady(t, tc, "rc", "g", "B")
		id3 := apiScale(t, tc, "rc", "g", 3).apiWant(t, 202).JSON["reshardingId"].(string)
		owned := []int{0, 1}
		apiEventually(t, 20*time.Second, "scale-out DEPRECATED", func() (bool, string) {
			hb := apiBeat(t, tc, "rc", "g", apiHBBody{Member: "B", Epoch: e, MV: v, Owned: owned})
			e, v, owned = hb.MemberEpoch, hb.MetadataVersion, hb.Assigned
			m := apiDo(t, tc, "GET", apiGroupPath("rc", "g", "migrations", id3), nil).apiWant(t, 200)
			return m.JSON["state"] == "DEPRECATED", string(m.Body)
		})
		apiRollback(t, tc, "rc", "g", id3, "").apiWantError(t, 422, "ROLLBACK_NOT_ALLOWED")
		apiRollback(t, tc, "rc", "g", id3, "drain").apiWantError(t, 422, "ROLLBACK_NOT_ALLOWED")
		if rt := apiRouting(t, tc, "rc", "g"); rt["shardCount"] != 3.0 {
			t.Fatalf("refused rollback changed routing: %v", rt["shardCount"])
		}
	})
}

// apiCheckRejected checks the REJECTED response shape of §3.2.
func apiCheckRejected(t *testing.T, hb apiHB, status string, epoch int64, member string) {
	t.Helper()
	if hb.Status != status || hb.MemberEpoch != epoch || hb.GroupEpoch != 0 || hb.AssignmentEpoch != 0 || hb.MetadataVersion != 0 ||
		len(hb.Assigned) != 0 || len(hb.Pending) != 0 || hb.JSON["memberId"] != member {
		t.Fatalf("want REJECTED(%s) with memberEpoch %d and zero G/AE/MV: %s", status, epoch, hb.Body)
	}
	if a := hb.JSON["assignment"].(map[string]any); a["metadataVersion"] != 0.0 {
		t.Fatalf("rejected assignment.metadataVersion: %s", hb.Body)
	}
}

func TestIntegrationAPIHeartbeatProtocol(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	apiCreate(t, tc, "hb", "g", 4)
	body := func(mut func(m map[string]any)) map[string]any {
		m := apiHBBody{Member: "m1", RequestID: "req-fixed-1"}.toMap()
		if mut != nil {
			mut(m)
		}
		return m
	}

	rejected := []struct {
		name   string
		group  string
		path   string
		body   map[string]any
		status string
		epoch  int64
	}{
		// (A first heartbeat for a missing group of a stream with metadata
		// registers it: TestIntegrationGroupsRegisterOnFirstHeartbeat.)
		{"unknown group of a prefix without metadata", "nostream/g", "m1", body(nil), "UNKNOWN_MEMBER_ID", 0},
		{"unknown group, epoch 7", "nogroup", "m1", body(func(m map[string]any) { m["memberEpoch"] = 7 }), "UNKNOWN_MEMBER_ID", 7},
		{"protocolVersion 2", "g", "m1", body(func(m map[string]any) { m["protocolVersion"] = 2 }), "UNSUPPORTED_PROTOCOL", 0},
		{"memberId differs from path", "g", "m2", body(nil), "INVALID_REQUEST", 0},
		{"epoch -2", "g", "m1", body(func(m map[string]any) { m["memberEpoch"] = -2 }), "INVALID_REQUEST", -2},
		{"unknown member epoch 5", "g", "m1", body(func(m map[string]any) { m["memberEpoch"] = 5 }), "UNKNOWN_MEMBER_ID", 5},
		{"unknown member epoch -1", "g", "m1", body(func(m map[string]any) { m["memberEpoch"] = -1 }), "UNKNOWN_MEMBER_ID", -1},
	}
	for _, c := range rejected {
		t.Run(c.name, func(t *testing.T) {
			prefix, group := "hb", c.group
			if p, g, ok := strings.Cut(c.group, "/"); ok {
				prefix, group = p, g
			}
			hb := apiHeartbeat(t, tc, apiMember, prefix, group, c.path, c.body)
			apiCheckRejected(t, hb, c.status, c.epoch, c.path)
			if hb.JSON["responseTo"] != "req-fixed-1" || hb.JSON["heartbeatIntervalMs"] != 3000.0 || hb.JSON["rebalanceTimeoutMs"] != 60000.0 {
				t.Fatalf("responseTo/interval/timeout: %s", hb.Body)
			}
		})
	}

	bad := []struct {
		name string
		body any
	}{
		{"protocolVersion 0", body(func(m map[string]any) { m["protocolVersion"] = 0 })},
		{"protocolVersion -1", body(func(m map[string]any) { m["protocolVersion"] = -1 })},
		{"requestId blank", body(func(m map[string]any) { m["requestId"] = " " })},
		{"memberId blank", body(func(m map[string]any) { m["memberId"] = "" })},
		{"memberEpoch missing", body(func(m map[string]any) { delete(m, "memberEpoch") })},
		{"metadataVersion missing", body(func(m map[string]any) { delete(m, "metadataVersion") })},
		{"runtimeMaxConcurrency 0", body(func(m map[string]any) {
			m["runtimeConsumerCapacity"] = map[string]any{"runtimeMaxConcurrency": 0, "availableConcurrency": 0}
		})},
		{"availableConcurrency -1", body(func(m map[string]any) {
			m["runtimeConsumerCapacity"] = map[string]any{"runtimeMaxConcurrency": 1, "availableConcurrency": -1}
		})},
		{"ownedShards as plain ints", body(func(m map[string]any) { m["ownedShards"] = []int{0, 1} })},
		{"unknown revoke state", body(func(m map[string]any) {
			m["revokingShards"] = []any{map[string]any{"shard": map[string]any{"shardIndex": 0}, "state": "BOGUS", "inFlight": 0}}
		})},
		{"malformed JSON", `{"protocolVersion":1,`},
		{"memberEpoch string", `{"protocolVersion":1,"requestId":"r","memberId":"m1","memberEpoch":"0","metadataVersion":0,"runtimeConsumerCapacity":{"runtimeMaxConcurrency":1,"availableConcurrency":1}}`},
		{"no body", nil},
	}
	for _, c := range bad {
		t.Run(c.name+" is HTTP 400", func(t *testing.T) {
			apiSend(t, tc, apiMember, "POST", apiHBPath("hb", "g", "m1"), c.body, nil).apiWantError(t, 400, "INVALID_REQUEST")
		})
	}
	if g := apiGroup(t, tc, "hb", "g"); g["groupEpoch"] != 1.0 || len(apiObj(t, g, "targetAssignmentSummary")) != 0 {
		t.Fatalf("refused heartbeats changed the group: %v", g)
	}

	// 0.3.5 clients may leave out protocolVersion (1) and
	// runtimeConsumerCapacity ({1, 1}).
	t.Run("protocolVersion and runtimeConsumerCapacity missing take their defaults", func(t *testing.T) {
		apiCreate(t, tc, "hbdefault", "g", 2)
		hb := apiHeartbeat(t, tc, apiMember, "hbdefault", "g", "m1", body(func(m map[string]any) {
			delete(m, "protocolVersion")
			delete(m, "runtimeConsumerCapacity")
		}))
		if hb.Status != "OK" || len(hb.Assigned) != 2 {
			t.Fatalf("a join without protocolVersion and runtimeConsumerCapacity: %s", hb.Body)
		}
		m := apiDo(t, tc, "GET", apiMonPath("hbdefault", "g", "members"), nil).apiWant(t, 200)
		if ms := apiArr(t, m.JSON, "members"); len(ms) != 1 || fmt.Sprint(ms[0].(map[string]any)["runtimeMaxConcurrency"]) != "1" {
			t.Fatalf("members %s, want m1 with capacity 1", m.Body)
		}
	})

	// The worked example of §3.1, then the fencing rules of §3.2 step 7-8.
	steps := []struct {
		name         string
		b            apiHBBody
		wantStatus   string
		wantEpoch    int64
		wantG        int64
		wantAssigned []int
		wantPending  []int
	}{
		{"A joins", apiHBBody{Member: "A"}, "OK", 2, 2, []int{0, 1, 2, 3}, nil},
		{"A steady", apiHBBody{Member: "A", Epoch: 2, MV: 2, Owned: []int{0, 1, 2, 3}}, "OK", 2, 2, []int{0, 1, 2, 3}, nil},
		{"A higher epoch than issued", apiHBBody{Member: "A", Epoch: 99, MV: 2, Owned: []int{0, 1, 2, 3}}, "INVALID_REQUEST", 99, 0, nil, nil},
		{"B joins", apiHBBody{Member: "B"}, "OK", 3, 3, nil, []int{2, 3}},
		{"A learns of B", apiHBBody{Member: "A", Epoch: 2, MV: 2, Owned: []int{0, 1, 2, 3}}, "OK", 3, 3, []int{0, 1}, nil},
		{"A stale epoch", apiHBBody{Member: "A", Epoch: 2, MV: 3, Owned: []int{0, 1}}, "FENCED_MEMBER_EPOCH", 3, 3, nil, nil},
		{"A releases 2,3", apiHBBody{Member: "A", Epoch: 3, MV: 3, Owned: []int{0, 1}}, "OK", 3, 3, []int{0, 1}, nil},
		{"B gets 2,3", apiHBBody{Member: "B", Epoch: 3, MV: 3}, "OK", 3, 3, []int{2, 3}, nil},
		{"B owns 2,3", apiHBBody{Member: "B", Epoch: 3, MV: 3, Owned: []int{2, 3}}, "OK", 3, 3, []int{2, 3}, nil},
		{"B rejoin with epoch 0 while owning", apiHBBody{Member: "B"}, "INVALID_REQUEST", 0, 0, nil, nil},
	}
	for _, s := range steps {
		hb := apiBeat(t, tc, "hb", "g", s.b)
		if hb.Status != s.wantStatus || hb.MemberEpoch != s.wantEpoch || hb.GroupEpoch != s.wantG || !equalInts(hb.Assigned, s.wantAssigned) || !equalInts(hb.Pending, s.wantPending) {
			t.Fatalf("%s: got %s; want %s epoch %d G %d assigned %v pending %v", s.name, hb.Body, s.wantStatus, s.wantEpoch, s.wantG, s.wantAssigned, s.wantPending)
		}
		if s.wantStatus == "OK" && (hb.AssignmentEpoch != hb.GroupEpoch || hb.JSON["assignment"].(map[string]any)["metadataVersion"] != hb.JSON["metadataVersion"]) {
			t.Fatalf("%s: AE or assignment.metadataVersion: %s", s.name, hb.Body)
		}
	}
	if g := apiGroup(t, tc, "hb", "g"); g["state"] != "STABLE" {
		t.Fatalf("state %v, want STABLE", g["state"])
	}
	// Every answer the coordinator gave is counted by its protocol status
	// (the steps above: 7 OK, 1 FENCED_MEMBER_EPOCH; the join with the
	// defaults one more OK).
	metrics := string(apiSend(t, tc, apiNoAuth, "GET", "/metrics", nil, nil).apiWant(t, 200).Body)
	for _, want := range []string{`rsc_heartbeats_total{status="OK"} 8`, `rsc_heartbeats_total{status="FENCED_MEMBER_EPOCH"} 1`, `rsc_heartbeats_total{status="UNSUPPORTED_PROTOCOL"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(metrics, "rsc_heartbeats_total"))
		}
	}

	t.Run("reporting a shard not assigned fences, rejoin works", func(t *testing.T) {
		hb := apiBeat(t, tc, "hb", "g", apiHBBody{Member: "A", Epoch: 3, MV: 3, Owned: []int{0, 1, 2}})
		if hb.Status != "FENCED_MEMBER_EPOCH" || len(hb.Assigned) != 0 || hb.GroupEpoch != 4 || hb.MemberEpoch < 4 {
			t.Fatalf("A reporting B's shard: %s", hb.Body)
		}
		members := apiDo(t, tc, "GET", apiMonPath("hb", "g", "members"), nil).apiWant(t, 200)
		if !strings.Contains(string(members.Body), `"FENCED"`) {
			t.Fatalf("A is not FENCED in monitoring: %s", members.Body)
		}
		again := apiBeat(t, tc, "hb", "g", apiHBBody{Member: "A", Epoch: hb.MemberEpoch, MV: hb.MetadataVersion, Owned: []int{0, 1}})
		if again.Status != "FENCED_MEMBER_EPOCH" {
			t.Fatalf("fenced member heartbeating on: %s", again.Body)
		}
		re := apiBeat(t, tc, "hb", "g", apiHBBody{Member: "A", MV: hb.MetadataVersion})
		if re.Status != "OK" || re.MemberEpoch <= hb.GroupEpoch || re.GroupEpoch != hb.GroupEpoch+1 {
			t.Fatalf("rejoin with epoch 0: %s", re.Body)
		}
		if len(re.Assigned)+len(re.Pending) != 2 {
			t.Fatalf("rejoined A should get half of the shards (assigned or pending): %s", re.Body)
		}
	})
}

// TestIntegrationAPIHeartbeatLeave: a graceful leave (-1) answers OK with
// memberEpoch -1, and the leaver's shards stay pending for the other member until
// its revoke report says REVOKED with nothing in flight.
func TestIntegrationAPIHeartbeatLeave(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	apiCreate(t, tc, "lv", "g", 4)
	a := apiBeat(t, tc, "lv", "g", apiHBBody{Member: "A"})
	a = apiBeat(t, tc, "lv", "g", apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: a.Assigned})
	b := apiBeat(t, tc, "lv", "g", apiHBBody{Member: "B"})
	a = apiBeat(t, tc, "lv", "g", apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: []int{0, 1, 2, 3}})
	a = apiBeat(t, tc, "lv", "g", apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: a.Assigned})
	b = apiBeat(t, tc, "lv", "g", apiHBBody{Member: "B", Epoch: b.MemberEpoch, MV: b.MetadataVersion})
	b = apiBeat(t, tc, "lv", "g", apiHBBody{Member: "B", Epoch: b.MemberEpoch, MV: b.MetadataVersion, Owned: b.Assigned})
	if !equalInts(a.Assigned, []int{0, 1}) || !equalInts(b.Assigned, []int{2, 3}) || apiGroup(t, tc, "lv", "g")["state"] != "STABLE" {
		t.Fatalf("setup: A %s B %s", a.Body, b.Body)
	}

	// Spring-style leave: shard 2 still has a handler in flight, 3 is done.
	leave := apiBeat(t, tc, "lv", "g", apiHBBody{Member: "B", Epoch: -1, MV: b.MetadataVersion, Owned: []int{2, 3}, Revoking: []map[string]any{
		{"shard": map[string]any{"shardIndex": 2}, "state": "DRAINING", "inFlight": 1},
		{"shard": map[string]any{"shardIndex": 3}, "state": "REVOKED", "inFlight": 0, "ackedAt": time.Now().UTC().Format(time.RFC3339Nano)},
	}})
	if leave.Status != "OK" || leave.MemberEpoch != -1 || len(leave.Assigned) != 0 || len(leave.Pending) != 0 {
		t.Fatalf("leave: %s", leave.Body)
	}
	for i := 0; i < 2; i++ { // repeatable
		a = apiBeat(t, tc, "lv", "g", apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: a.Assigned})
		if a.Status != "OK" || !equalInts(a.Assigned, []int{0, 1, 3}) || !equalInts(a.Pending, []int{2}) {
			t.Fatalf("A while B drains shard 2: %s", a.Body)
		}
	}
	if g := apiGroup(t, tc, "lv", "g"); g["state"] != "RECONCILING" {
		t.Fatalf("state while the leaver drains: %v", g["state"])
	}
	members := apiDo(t, tc, "GET", apiMonPath("lv", "g", "members"), nil).apiWant(t, 200)
	for _, m := range apiArr(t, members.JSON, "members") {
		mm := m.(map[string]any)
		if mm["memberId"] == "B" && (mm["state"] != "LEAVING" || !equalInts(apiShards(t, mm["revoking"]), []int{2})) {
			t.Fatalf("B while draining: %v", mm)
		}
	}
	// Still draining: a repeated DRAINING report keeps it blocked.
	leave = apiBeat(t, tc, "lv", "g", apiHBBody{Member: "B", Epoch: -1, MV: b.MetadataVersion, Revoking: []map[string]any{
		{"shard": map[string]any{"shardIndex": 2}, "state": "DRAINING", "inFlight": 1},
	}})
	if leave.Status != "OK" || leave.MemberEpoch != -1 {
		t.Fatalf("second leave: %s", leave.Body)
	}
	a = apiBeat(t, tc, "lv", "g", apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: a.Assigned})
	if !equalInts(a.Pending, []int{2}) {
		t.Fatalf("A while B still drains: %s", a.Body)
	}
	leave = apiBeat(t, tc, "lv", "g", apiHBBody{Member: "B", Epoch: -1, MV: b.MetadataVersion, Revoking: []map[string]any{
		{"shard": map[string]any{"shardIndex": 2}, "state": "REVOKED", "inFlight": 0},
	}})
	if leave.Status != "OK" || leave.MemberEpoch != -1 {
		t.Fatalf("final leave: %s", leave.Body)
	}
	a = apiBeat(t, tc, "lv", "g", apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: a.Assigned})
	if !equalInts(a.Assigned, []int{0, 1, 2, 3}) || len(a.Pending) != 0 {
		t.Fatalf("A after B released 2: %s", a.Body)
	}
	apiBeat(t, tc, "lv", "g", apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: a.Assigned})
	if g := apiGroup(t, tc, "lv", "g"); g["state"] != "STABLE" {
		t.Fatalf("state after the leave: %v", g["state"])
	}
}

// apiSimMember is a client model: Python (never reports revokes; stops listing a
// dropped shard at once) or Spring (reports DRAINING with a handler in flight,
// then REVOKED once; leaves gracefully on shutdown).
type apiSimMember struct {
	id       string
	spring   bool
	epoch    int64
	mv       int64
	owned    []int
	draining []int // Spring: dropped shards with a handler still in flight
	revoked  []int // Spring: drained shards to report REVOKED once
	leaving  int   // Spring shutdown: 1 = first leave (one shard in flight), 2 = final leave
	gone     bool
}

func apiRevokeReports(draining, revoked []int) []map[string]any {
	out := []map[string]any{}
	for _, s := range draining {
		out = append(out, map[string]any{"shard": map[string]any{"shardIndex": s}, "state": "DRAINING", "inFlight": 1})
	}
	for _, s := range revoked {
		out = append(out, map[string]any{"shard": map[string]any{"shardIndex": s}, "state": "REVOKED", "inFlight": 0, "ackedAt": time.Now().UTC().Format(time.RFC3339Nano)})
	}
	return out
}

func apiUnion(a, b []int) []int {
	seen := map[int]bool{}
	var out []int
	for _, s := range append(append([]int{}, a...), b...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return apiSorted(out)
}

func apiMinus(a, b []int) []int {
	var out []int
	for _, s := range a {
		if !containsIntAPI(b, s) {
			out = append(out, s)
		}
	}
	return apiSorted(out)
}

func containsIntAPI(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// next builds the member's heartbeat and the shards that heartbeat lists as held.
func (m *apiSimMember) next() (apiHBBody, []int) {
	b := apiHBBody{Member: m.id, Epoch: m.epoch, MV: m.mv, Owned: m.owned}
	if !m.spring {
		return b, m.owned
	}
	switch m.leaving {
	case 1:
		// Shutdown: the first owned shard still has a handler in flight.
		inFlight := apiUnion(m.draining, m.owned[:1])
		done := apiMinus(apiUnion(m.owned, m.revoked), inFlight)
		b.Epoch, b.Revoking = -1, apiRevokeReports(inFlight, done)
		m.draining, m.revoked, m.owned = inFlight, nil, nil
		return b, inFlight
	case 2:
		b.Epoch, b.Owned, b.Revoking = -1, nil, apiRevokeReports(nil, apiUnion(m.draining, m.revoked))
		m.draining, m.revoked = nil, nil
		return b, nil
	}
	b.Revoking = apiRevokeReports(m.draining, m.revoked)
	listed := apiUnion(m.owned, m.draining)
	// Drains finish by the next heartbeat; REVOKED is reported once.
	m.revoked, m.draining = m.draining, nil
	return b, listed
}

// adopt applies an OK answer the way the client does.
func (m *apiSimMember) adopt(hb apiHB) {
	m.epoch, m.mv = hb.MemberEpoch, hb.MetadataVersion
	if !m.spring {
		m.owned = apiSorted(hb.Assigned)
		return
	}
	dropped := apiMinus(m.owned, hb.Assigned)
	m.draining = apiUnion(m.draining, dropped)
	m.draining = apiMinus(m.draining, hb.Assigned)
	m.revoked = apiMinus(m.revoked, hb.Assigned)
	m.owned = apiSorted(hb.Assigned)
}

// TestIntegrationAPIPythonAndSpringMembers runs Python-style and Spring-style members
// side by side through joins, a graceful Spring leave and another join. Each phase
// must converge to a balanced STABLE group, and no heartbeat may ever grant a shard
// that another member's last heartbeat still listed.
func TestIntegrationAPIPythonAndSpringMembers(t *testing.T) {
	parallel(t)
	// Each client authenticates as it does by default, with a principal of
	// its own: Python with the bearer token from /auth/login, Spring with
	// Basic credentials on every call.
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.UsersFile = apiUsersFile(t, []map[string]any{
			{"username": "admin", "password": "password", "roles": []string{"ADMIN"}},
			{"username": "py-svc", "password": "py-pw", "roles": []string{"MEMBER", "READ"}},
			{"username": "spring-svc", "password": "sp-pw", "roles": []string{"MEMBER", "READ"}},
		})
		m.TokenSecret = "py-and-spring"
	})
	const shards = 12
	apiCreate(t, tc, "sim", "g", shards)
	login := apiSend(t, tc, apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "py-svc", "password": "py-pw"}, nil).apiWant(t, 200)
	pyAuth := apiAuth("Bearer " + login.JSON["accessToken"].(string))
	springAuth := apiBasic("spring-svc", "sp-pw")
	rng := rand.New(rand.NewSource(7))
	members := map[string]*apiSimMember{}
	listed := map[string][]int{} // what each member's last heartbeat listed as held
	pendingSeen := map[int]bool{}

	beat := func(m *apiSimMember) {
		t.Helper()
		b, l := m.next()
		auth := pyAuth
		if m.spring {
			auth = springAuth
		}
		hb := apiHeartbeat(t, tc, auth, "sim", "g", b.Member, b.toMap())
		if hb.Status != "OK" {
			t.Fatalf("%s: status %s: %s", m.id, hb.Status, hb.Body)
		}
		listed[m.id] = l
		for _, s := range hb.Assigned {
			for other, held := range listed {
				if other != m.id && containsIntAPI(held, s) {
					t.Errorf("shard %d granted to %s while %s's last heartbeat still listed it (%v)", s, m.id, other, held)
				}
			}
		}
		for _, s := range hb.Pending {
			pendingSeen[s] = true
		}
		if b.Epoch == -1 {
			if hb.MemberEpoch != -1 {
				t.Fatalf("%s leave answered memberEpoch %d", m.id, hb.MemberEpoch)
			}
			m.leaving++
			if m.leaving > 2 {
				m.gone = true
				delete(listed, m.id)
			}
			return
		}
		m.adopt(hb)
	}
	round := func() {
		t.Helper()
		var ids []string
		for id, m := range members {
			if !m.gone {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
		for _, id := range ids {
			beat(members[id])
		}
	}
	converged := func(want int) (bool, string) {
		g := apiGroup(t, tc, "sim", "g")
		target, current := apiObj(t, g, "targetAssignmentSummary"), apiObj(t, g, "currentAssignmentSummary")
		if g["state"] != "STABLE" || len(target) != want || fmt.Sprint(target) != fmt.Sprint(current) {
			return false, fmt.Sprint(g)
		}
		lo, hi, sum := shards, 0, 0
		for _, v := range target {
			n := int(v.(float64))
			sum += n
			lo, hi = min(lo, n), max(hi, n)
		}
		held := map[int]string{}
		for id, m := range members {
			if m.gone {
				continue
			}
			if len(m.draining)+len(m.revoked) > 0 {
				return false, id + " still revoking"
			}
			for _, s := range m.owned {
				if prev, dup := held[s]; dup {
					t.Fatalf("shard %d owned by %s and %s", s, prev, id)
				}
				held[s] = id
			}
		}
		return sum == shards && hi-lo <= 1 && len(held) == shards, fmt.Sprint(g)
	}
	converge := func(want int) {
		t.Helper()
		for i := 0; i < 60; i++ {
			round()
			if ok, _ := converged(want); ok {
				a := apiDo(t, tc, "GET", apiMonPath("sim", "g", "assignments"), nil).apiWant(t, 200)
				if v := apiArr(t, a.JSON, "invariantViolations"); len(v) != 0 {
					t.Fatalf("invariant violations in a stable group: %v", v)
				}
				return
			}
		}
		_, obs := converged(want)
		t.Fatalf("did not converge to %d balanced members: %s", want, obs)
	}

	// Phase 1: two Python and two Spring members join one per round.
	for _, j := range []struct {
		id     string
		spring bool
	}{{"py-1", false}, {"sp-1", true}, {"py-2", false}, {"sp-2", true}} {
		members[j.id] = &apiSimMember{id: j.id, spring: j.spring}
		round()
	}
	converge(4)

	// Phase 2: sp-2 shuts down gracefully. Its in-flight shard stays pending for its
	// new owner until the final REVOKED report.
	sp2 := members["sp-2"]
	inFlight := sp2.owned[0]
	sp2.leaving = 1
	pendingSeen = map[int]bool{}
	beat(sp2) // first leave, shard in flight
	for _, id := range []string{"py-1", "py-2", "sp-1"} {
		beat(members[id]) // the new owner of the in-flight shard sees it pending
	}
	if !pendingSeen[inFlight] {
		t.Errorf("shard %d (in flight at sp-2's leave) was not reported pending to its new owner", inFlight)
	}
	round() // sp-2 sends its final leave (REVOKED) somewhere in this round
	if !sp2.gone {
		t.Fatalf("sp-2 did not finish leaving")
	}
	converge(3)

	// Phase 3: another Python member joins.
	members["py-3"] = &apiSimMember{id: "py-3"}
	converge(4)
}

// TestIntegrationAPISteadyHeartbeatAppendsNothing: a member that heartbeats
// steadily (same epoch, same shards, only its progress moves) appends nothing
// to the log, neither through its heartbeats nor through the maintenance ticks
// that run meanwhile: the heartbeats span at least two ticks.
func TestIntegrationAPISteadyHeartbeatAppendsNothing(t *testing.T) {
	parallel(t)
	const tick = 100 * time.Millisecond
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) { m.TickInterval = tick })
	rdb := apiRedis(t, tc)
	apiCreate(t, tc, "steady", "g", 4)
	epoch, mv, owned := apiJoinSteady(t, tc, "steady", "g", "A")
	xlen := apiLogLen(t, tc, rdb)
	events := len(apiAllEvents(t, tc, "/coord/v1/monitoring/events"))
	if int64(events) != xlen {
		t.Errorf("monitoring/events lists %d events, XLEN is %d", events, xlen)
	}
	// Heartbeat until at least three tick intervals have passed since XLEN was
	// read: the coordinator's ticker fires at least twice in that window.
	start := time.Now()
	beats := 0
	for ; beats < 10 || time.Since(start) < 3*tick; beats++ {
		hb := apiBeat(t, tc, "steady", "g", apiHBBody{Member: "A", Epoch: epoch, MV: mv, Owned: owned, Progress: []map[string]any{
			{"shard": map[string]any{"shardIndex": 0}, "streamKey": "steady:0", "lastAckedId": fmt.Sprintf("%d-0", beats+1), "pendingCount": beats},
		}})
		if hb.Status != "OK" || hb.MemberEpoch != epoch || !equalInts(hb.Assigned, owned) {
			t.Fatalf("steady heartbeat %d: %s", beats, hb.Body)
		}
		if n := apiLogLen(t, tc, rdb); n != xlen {
			t.Fatalf("after %d steady heartbeats over %s (tick %s) the log grew by %d events", beats+1, time.Since(start).Round(time.Millisecond), tick, n-xlen)
		}
	}
	t.Logf("%d steady heartbeats over %s (tick %s) appended nothing", beats, time.Since(start).Round(time.Millisecond), tick)
	if after := apiLogLen(t, tc, rdb); after != xlen {
		t.Fatalf("%d steady heartbeats appended %d events", beats, after-xlen)
	}
	if after := len(apiAllEvents(t, tc, "/coord/v1/monitoring/events")); after != events {
		t.Fatalf("monitoring/events grew from %d to %d", events, after)
	}
}

func TestIntegrationAPIMonitoring(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	rdb := apiRedis(t, tc)
	ctx := context.Background()
	apiCreate(t, tc, "orders", "oc", 4)

	t.Run("health", func(t *testing.T) {
		r := apiDo(t, tc, "GET", "/coord/v1/monitoring/health", nil).apiWant(t, 200)
		for k, v := range map[string]any{"status": "UP", "coordinatorId": "local-coordinator", "redis": "UP", "loop": "UP"} {
			if r.JSON[k] != v {
				t.Errorf("%s = %v, want %v", k, r.JSON[k], v)
			}
		}
	})
	t.Run("session", func(t *testing.T) {
		r := apiDo(t, tc, "GET", "/coord/v1/monitoring/session", nil).apiWant(t, 200)
		apiJSONEqual(t, r.Body, `{"authenticated":true,"username":"admin","roles":["ADMIN","MEMBER","MONITOR","READ","WRITE"],"prefixes":null,"groups":null}`)
	})
	t.Run("compatibility", func(t *testing.T) {
		r := apiDo(t, tc, "GET", "/coord/v1/monitoring/compatibility", nil).apiWant(t, 200)
		apiJSONEqual(t, r.Body, `{
		  "currentCoordinationVersion": 1,
		  "supportedCoordinationVersions": { "min": 1, "max": 1 },
		  "coordinationVersions": [ {
		      "version": 1, "status": "ACTIVE",
		      "introducedIn":          { "major": 0, "minor": 1, "patch": 0, "qualifier": null, "version": "0.1.0" },
		      "deprecatedIn": null,
		      "minimumSupportedUntil": { "major": 1, "minor": 0, "patch": 0, "qualifier": null, "version": "1.0.0" },
		      "removedIn": null,
		      "timingDefaults": { "heartbeatInterval": "PT3S", "memberLeaseTtl": "PT15S", "rebalanceTimeout": "PT1M" } } ]
		}`)
	})
	t.Run("healthz and readyz need no auth", func(t *testing.T) {
		for _, p := range []string{"/healthz", "/readyz"} {
			apiSend(t, tc, apiNoAuth, "GET", p, nil, nil).apiWant(t, 200)
		}
	})

	// Two members, converged: A with capacity 4 (1 free), B with capacity 1.
	capA := map[string]any{"runtimeMaxConcurrency": 4, "availableConcurrency": 1}
	beatA := func(b apiHBBody) apiHB {
		m := b.toMap()
		m["runtimeConsumerCapacity"] = capA
		return apiHeartbeat(t, tc, apiMember, "orders", "oc", "A", m)
	}
	a := beatA(apiHBBody{Member: "A"})
	a = beatA(apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: a.Assigned})
	b := apiBeat(t, tc, "orders", "oc", apiHBBody{Member: "B"})
	a = beatA(apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: a.Assigned})
	a = beatA(apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: a.Assigned})
	b = apiBeat(t, tc, "orders", "oc", apiHBBody{Member: "B", Epoch: b.MemberEpoch, MV: b.MetadataVersion})
	b = apiBeat(t, tc, "orders", "oc", apiHBBody{Member: "B", Epoch: b.MemberEpoch, MV: b.MetadataVersion, Owned: b.Assigned})
	if !equalInts(a.Assigned, []int{0, 1}) || !equalInts(b.Assigned, []int{2, 3}) {
		t.Fatalf("setup: A %v B %v", a.Assigned, b.Assigned)
	}
	// A reports consumption progress on shard 0.
	now := time.Now().UTC().Format(time.RFC3339Nano)
	a = beatA(apiHBBody{Member: "A", Epoch: a.MemberEpoch, MV: a.MetadataVersion, Owned: a.Assigned, Progress: []map[string]any{
		{"shard": map[string]any{"shardIndex": 0}, "streamKey": "orders:0", "lastDeliveredId": "5-0", "lastAckedId": "4-0", "pendingCount": 2, "updatedAt": now},
	}})
	if a.Status != "OK" {
		t.Fatalf("progress heartbeat: %s", a.Body)
	}

	t.Run("members", func(t *testing.T) {
		r := apiDo(t, tc, "GET", apiMonPath("orders", "oc", "members"), nil).apiWant(t, 200)
		ms := apiArr(t, r.JSON, "members")
		if len(ms) != 2 || ms[0].(map[string]any)["memberId"] != "A" || ms[1].(map[string]any)["memberId"] != "B" {
			t.Fatalf("members not sorted by memberId: %s", r.Body)
		}
		m := ms[0].(map[string]any)
		apiHasKeys(t, "MemberMetadata", m, "memberId", "memberName", "state", "memberEpoch", "metadataVersion", "runtimeMaxConcurrency",
			"activeConsumerWorkers", "currentAssignment", "grantedAssignment", "revoking", "lastHeartbeatAt", "memberLeaseExpiresAt",
			"rebalanceTimeoutMs", "rebalanceDeadlineAt", "shardProgress")
		if mv, _ := m["metadataVersion"].(float64); mv < 1 {
			t.Errorf("A.metadataVersion %v", m["metadataVersion"])
		}
		for k, v := range map[string]any{"memberName": "A", "state": "ACTIVE", "memberEpoch": float64(a.MemberEpoch),
			"runtimeMaxConcurrency": 4.0, "activeConsumerWorkers": 3.0, "rebalanceTimeoutMs": 60000.0, "rebalanceDeadlineAt": nil} {
			if m[k] != v {
				t.Errorf("A.%s = %v, want %v", k, m[k], v)
			}
		}
		if !equalInts(apiShards(t, m["currentAssignment"]), []int{0, 1}) || !equalInts(apiShards(t, m["grantedAssignment"]), []int{0, 1}) || len(apiShards(t, m["revoking"])) != 0 {
			t.Errorf("A's sets: %v", m)
		}
		hbAt, err1 := time.Parse(time.RFC3339Nano, fmt.Sprint(m["lastHeartbeatAt"]))
		lease, err2 := time.Parse(time.RFC3339Nano, fmt.Sprint(m["memberLeaseExpiresAt"]))
		if err1 != nil || err2 != nil || lease.Sub(hbAt) != 15*time.Second {
			t.Errorf("lastHeartbeatAt %v memberLeaseExpiresAt %v: want ISO-8601, 15 s apart", m["lastHeartbeatAt"], m["memberLeaseExpiresAt"])
		}
		if p := apiArr(t, m, "shardProgress"); len(p) != 1 {
			t.Errorf("A.shardProgress: %v", p)
		}
	})
	t.Run("assignments", func(t *testing.T) {
		r := apiDo(t, tc, "GET", apiMonPath("orders", "oc", "assignments"), nil).apiWant(t, 200)
		apiHasKeys(t, "AssignmentsResponse", r.JSON, "targetAssignment", "currentAssignments", "revokeProgress", "invariantViolations")
		ta, ca := apiObj(t, r.JSON, "targetAssignment"), apiObj(t, r.JSON, "currentAssignments")
		if !equalInts(apiShards(t, ta["A"]), []int{0, 1}) || !equalInts(apiShards(t, ta["B"]), []int{2, 3}) ||
			!equalInts(apiShards(t, ca["A"]), []int{0, 1}) || !equalInts(apiShards(t, ca["B"]), []int{2, 3}) {
			t.Errorf("assignments: %s", r.Body)
		}
		if len(apiObj(t, r.JSON, "revokeProgress")) != 0 || len(apiArr(t, r.JSON, "invariantViolations")) != 0 {
			t.Errorf("stable group has revokes or violations: %s", r.Body)
		}
	})
	t.Run("consumption", func(t *testing.T) {
		r := apiDo(t, tc, "GET", apiMonPath("orders", "oc", "consumption"), nil).apiWant(t, 200)
		ps := apiArr(t, r.JSON, "progress")
		if len(ps) != 1 {
			t.Fatalf("progress: %s", r.Body)
		}
		p := ps[0].(map[string]any)
		for k, v := range map[string]any{"streamPrefix": "orders", "consumerGroup": "oc", "memberId": "A", "memberName": "A", "memberState": "ACTIVE",
			"streamKey": "orders:0", "lastDeliveredId": "5-0", "lastAckedId": "4-0", "pendingCount": 2.0} {
			if p[k] != v {
				t.Errorf("progress.%s = %v, want %v", k, p[k], v)
			}
		}
		if s := apiObj(t, p, "shard"); s["shardIndex"] != 0.0 {
			t.Errorf("progress.shard %v", s)
		}
		if p["updatedAt"] == nil {
			t.Errorf("progress.updatedAt is null")
		}
	})
	t.Run("offsets", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			rdb.XAdd(ctx, &redis.XAddArgs{Stream: "orders:1", Values: []string{"payload", fmt.Sprint(i)}})
		}
		// Deliver two of them to the group without acking: pending 2, lag 1.
		if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "oc", Consumer: "A", Streams: []string{"orders:1", ">"}, Count: 2}).Err(); err != nil {
			t.Fatal(err)
		}
		r := apiDo(t, tc, "GET", apiMonPath("orders", "oc", "offsets"), nil).apiWant(t, 200)
		apiHasKeys(t, "StreamShardOffsetsResponse", r.JSON, "streamPrefix", "consumerGroup", "shards", "totalStreamLength", "totalPendingCount", "totalLag", "totalMemoryUsageBytes", "memoryUsageKnown")
		shards := apiArr(t, r.JSON, "shards")
		if len(shards) != 4 {
			t.Fatalf("offsets shards: %s", r.Body)
		}
		slots := []float64{8578, 12707, 448, 4577}
		for i, s := range shards {
			o := s.(map[string]any)
			apiHasKeys(t, "StreamShardOffset", o, "streamPrefix", "consumerGroup", "shard", "streamKey", "redisSlot", "redisNodeEndpoint", "redisNodeId",
				"redisSlotRangeStart", "redisSlotRangeEnd", "streamLength", "firstRecordId", "lastRecordId", "lastGeneratedId", "groupLastDeliveredId",
				"consumerLastDeliveredId", "consumerLastAckedId", "pendingCount", "lag", "memoryUsageBytes", "ownerMemberIds")
			wantLen, wantPending, wantLag := 0.0, 0.0, 0.0
			if i == 1 {
				wantLen, wantPending, wantLag = 3, 2, 1
			}
			if o["streamKey"] != fmt.Sprintf("orders:%d", i) || o["redisSlot"] != slots[i] || o["streamLength"] != wantLen || o["pendingCount"] != wantPending || o["lag"] != wantLag {
				t.Errorf("shard %d: %v", i, o)
			}
			owner := "A"
			if i >= 2 {
				owner = "B"
			}
			if fmt.Sprint(o["ownerMemberIds"]) != "["+owner+"]" {
				t.Errorf("shard %d ownerMemberIds %v, want [%s]", i, o["ownerMemberIds"], owner)
			}
		}
		if r.JSON["totalStreamLength"] != 3.0 || r.JSON["totalPendingCount"] != 2.0 || r.JSON["totalLag"] != 1.0 {
			t.Errorf("totals: %s", r.Body)
		}
	})
	t.Run("unknown group is 404 on every monitoring path", func(t *testing.T) {
		for _, p := range []string{"", "/members", "/assignments", "/consumption", "/migrations", "/offsets", "/shards/0/messages", "/events", "/replay"} {
			apiDo(t, tc, "GET", apiMonPath("orders", "nope")+p, nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
		}
	})
}

func TestIntegrationAPIMessages(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	rdb := apiRedis(t, tc)
	ctx := context.Background()
	apiCreate(t, tc, "msgs", "g", 2)
	var ids []string
	for i := 0; i < 30; i++ {
		id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "msgs:0", Values: []string{"payload", fmt.Sprintf("p-%d", i), "n", fmt.Sprint(i)}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	rdb.XAdd(ctx, &redis.XAddArgs{Stream: "msgs:1", Values: []string{"other", "x"}})
	base := apiMonPath("msgs", "g", "shards")

	type page struct {
		StreamPrefix  string           `json:"streamPrefix"`
		ConsumerGroup string           `json:"consumerGroup"`
		Shard         map[string]any   `json:"shard"`
		StreamKey     string           `json:"streamKey"`
		Direction     string           `json:"direction"`
		Limit         int              `json:"limit"`
		Records       []map[string]any `json:"records"`
		NextCursor    *string          `json:"nextCursor"`
	}
	get := func(t *testing.T, path string) page {
		t.Helper()
		r := apiDo(t, tc, "GET", path, nil).apiWant(t, 200)
		apiHasKeys(t, "StreamMessagesPageResponse", r.JSON, "streamPrefix", "consumerGroup", "shard", "streamKey", "direction", "limit", "records", "nextCursor")
		var p page
		if err := json.Unmarshal(r.Body, &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	recIDs := func(p page) []string {
		var out []string
		for _, r := range p.Records {
			out = append(out, r["recordId"].(string))
		}
		return out
	}
	rev := func(s []string) []string {
		out := make([]string, len(s))
		for i := range s {
			out[len(s)-1-i] = s[i]
		}
		return out
	}

	t.Run("BACKWARD default, newest first, 25, paged by nextCursor", func(t *testing.T) {
		p := get(t, base+"/0/messages")
		if p.Direction != "BACKWARD" || p.Limit != 25 || p.StreamKey != "msgs:0" || p.StreamPrefix != "msgs" || p.ConsumerGroup != "g" || p.Shard["shardIndex"] != 0.0 {
			t.Fatalf("page: %+v", p)
		}
		if got := recIDs(p); fmt.Sprint(got) != fmt.Sprint(rev(ids[5:])) {
			t.Fatalf("records %v, want newest 25 first", got)
		}
		if p.NextCursor == nil || *p.NextCursor != ids[5] {
			t.Fatalf("nextCursor %v, want %s", p.NextCursor, ids[5])
		}
		r := p.Records[0]
		apiHasKeys(t, "record", r, "streamPrefix", "consumerGroup", "shard", "streamKey", "recordId", "fields", "payload", "recordTimestampMs", "recordTime")
		if r["payload"] != "p-29" || r["fields"].(map[string]any)["n"] != "29" || r["streamKey"] != "msgs:0" {
			t.Errorf("record: %v", r)
		}
		ms, _ := redisIDMillisAPI(ids[29])
		if r["recordTimestampMs"] != float64(ms) {
			t.Errorf("recordTimestampMs %v, want %d", r["recordTimestampMs"], ms)
		}
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(r["recordTime"])); err != nil {
			t.Errorf("recordTime %v: %v", r["recordTime"], err)
		}
		p2 := get(t, base+"/0/messages?cursor="+*p.NextCursor)
		if got := recIDs(p2); fmt.Sprint(got) != fmt.Sprint(rev(ids[:5])) || p2.NextCursor != nil {
			t.Fatalf("second page %v next %v", got, p2.NextCursor)
		}
	})
	t.Run("FORWARD pages oldest first", func(t *testing.T) {
		p := get(t, base+"/0/messages?direction=FORWARD&limit=10")
		if p.Direction != "FORWARD" || p.Limit != 10 || fmt.Sprint(recIDs(p)) != fmt.Sprint(ids[:10]) || p.NextCursor == nil || *p.NextCursor != ids[9] {
			t.Fatalf("forward page: %v next %v", recIDs(p), p.NextCursor)
		}
		p = get(t, base+"/0/messages?direction=FORWARD&limit=10&cursor="+*p.NextCursor)
		if fmt.Sprint(recIDs(p)) != fmt.Sprint(ids[10:20]) {
			t.Fatalf("forward page 2: %v", recIDs(p))
		}
		p = get(t, base+"/0/messages?direction=FORWARD&limit=10&cursor="+ids[19])
		if fmt.Sprint(recIDs(p)) != fmt.Sprint(ids[20:]) || p.NextCursor != nil {
			t.Fatalf("forward last page: %v next %v", recIDs(p), p.NextCursor)
		}
	})
	t.Run("limit is clamped to 1..1000", func(t *testing.T) {
		for q, want := range map[string]int{"5000": 1000, "1000": 1000, "0": 1, "-5": 1, "1": 1} {
			p := get(t, base+"/0/messages?limit="+q)
			wantRecs := min(want, 30)
			if p.Limit != want || len(p.Records) != wantRecs {
				t.Errorf("limit=%s: limit %d records %d, want %d and %d", q, p.Limit, len(p.Records), want, wantRecs)
			}
		}
	})
	t.Run("record without payload field", func(t *testing.T) {
		p := get(t, base+"/1/messages")
		if len(p.Records) != 1 || p.Records[0]["payload"] != nil || p.Records[0]["fields"].(map[string]any)["other"] != "x" {
			t.Fatalf("records: %v", p.Records)
		}
	})
	t.Run("empty shard", func(t *testing.T) {
		apiCreate(t, tc, "empty", "g", 1)
		p := get(t, apiMonPath("empty", "g", "shards", "0", "messages"))
		if p.Records == nil || len(p.Records) != 0 || p.NextCursor != nil {
			t.Fatalf("empty page: %+v", p)
		}
	})
	for _, bad := range []string{"2", "99", "-1", "x"} {
		t.Run("shardIndex "+bad+" is 400", func(t *testing.T) {
			r := apiDo(t, tc, "GET", base+"/"+bad+"/messages", nil).apiWantError(t, 400, "INVALID_REQUEST")
			if bad != "x" && !strings.Contains(r.apiMsg(), "shardIndex must be between 0 and 1") {
				t.Errorf("message %q", r.apiMsg())
			}
		})
	}
	t.Run("bad direction is 400", func(t *testing.T) {
		apiDo(t, tc, "GET", base+"/0/messages?direction=SIDEWAYS", nil).apiWantError(t, 400, "INVALID_REQUEST")
	})
	if n := apiRedis(t, tc).XLen(ctx, "msgs:0").Val(); n != 30 {
		t.Fatalf("reading messages changed the stream: XLEN %d", n)
	}
}

func redisIDMillisAPI(id string) (int64, bool) {
	var ms int64
	_, err := fmt.Sscanf(id, "%d-", &ms)
	return ms, err == nil
}

func TestIntegrationAPIAuditEventsAndReplay(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	apiCreate(t, tc, "au", "g", 4)
	apiDo(t, tc, "POST", apiGroupPath("au", "g"), map[string]any{"initialShardCount": 4, "requestedBy": "mallory"}).apiWantError(t, 409, "GROUP_ALREADY_EXISTS")
	apiDo(t, tc, "POST", apiGroupPath("au", "g2"), map[string]any{"initialShardCount": 0, "requestedBy": "mallory"}).apiWantError(t, 400, "INVALID_REQUEST")
	apiScale(t, tc, "au", "g", 8).apiWant(t, 202)
	// A scale-out without members completes in a decision of its own, which
	// may come after the answer: the pages below must not see it land between
	// them.
	eventually(t, 20*time.Second, "the scale-out completes", func() bool {
		return apiDo(t, tc, "GET", apiGroupPath("au", "g", "migrations"), nil).apiWant(t, 200).JSON["activeReshardingId"] == nil
	})

	groupEvents := apiAllEvents(t, tc, apiMonPath("au", "g", "events"))
	allEvents := apiAllEvents(t, tc, "/coord/v1/monitoring/events")
	if len(groupEvents) < 4 || groupEvents[0].Type != "group.created" {
		t.Fatalf("group events: %+v", groupEvents)
	}
	created := groupEvents[0]
	if v, _ := apiPayloadField(created.Payload, "shardCount"); v != 4.0 {
		t.Errorf("group.created payload: %v", created.Payload)
	}
	if created.StreamPrefix != "au" || created.ConsumerGroup != "g" {
		t.Errorf("group.created key: %+v", created)
	}

	t.Run("refused commands are in the audit log", func(t *testing.T) {
		find := func(evs []apiEvent, code string) *apiEvent {
			for i, e := range evs {
				if c, _ := apiPayloadField(e.Payload, "errorCode"); e.Type == "command.rejected" && c == code {
					return &evs[i]
				}
			}
			return nil
		}
		if e := find(groupEvents, "GROUP_ALREADY_EXISTS"); e == nil {
			t.Errorf("no command.rejected GROUP_ALREADY_EXISTS in the group's events")
		} else {
			if by, _ := apiPayloadField(e.Payload, "requestedBy"); by != "mallory" {
				t.Errorf("rejected event: %+v", e)
			}
			// The wire is camelCase everywhere (errorCode in every ErrorResponse).
			if _, ok := e.Payload["errorCode"]; !ok {
				t.Errorf("command.rejected payload has no \"errorCode\" field (field names are %v)", apiKeysOf(e.Payload))
			}
		}
		if e := find(allEvents, "INVALID_REQUEST"); e == nil || e.ConsumerGroup != "g2" {
			t.Errorf("no command.rejected INVALID_REQUEST for au/g2 in the global events: %+v", e)
		}
	})

	t.Run("paging by after and limit", func(t *testing.T) {
		for _, path := range []string{apiMonPath("au", "g", "events"), "/coord/v1/monitoring/events"} {
			full := apiAllEvents(t, tc, path)
			var paged []apiEvent
			after := ""
			for i := 0; i < 100; i++ {
				q := path + "?limit=2"
				if after != "" {
					q += "&after=" + after
				}
				r := apiDo(t, tc, "GET", q, nil).apiWant(t, 200)
				var pg struct {
					Events    []apiEvent `json:"events"`
					NextAfter *string    `json:"nextAfter"`
				}
				if err := json.Unmarshal(r.Body, &pg); err != nil {
					t.Fatal(err)
				}
				if len(pg.Events) > 2 {
					t.Fatalf("limit 2 returned %d events", len(pg.Events))
				}
				paged = append(paged, pg.Events...)
				if pg.NextAfter == nil {
					break
				}
				if *pg.NextAfter != pg.Events[len(pg.Events)-1].ID {
					t.Fatalf("nextAfter %s is not the last event's id", *pg.NextAfter)
				}
				after = *pg.NextAfter
			}
			if len(paged) != len(full) {
				t.Fatalf("%s: paging saw %d events, one page of 1000 %d", path, len(paged), len(full))
			}
			for i := range paged {
				if paged[i].ID != full[i].ID {
					t.Fatalf("%s: event %d differs: %s vs %s", path, i, paged[i].ID, full[i].ID)
				}
			}
		}
	})
	for _, q := range []string{"?after=garbage", "?limit=0", "?limit=1001", "?limit=x"} {
		t.Run("bad query "+q, func(t *testing.T) {
			apiDo(t, tc, "GET", "/coord/v1/monitoring/events"+q, nil).apiWantError(t, 400, "INVALID_REQUEST")
			apiDo(t, tc, "GET", apiMonPath("au", "g", "events")+q, nil).apiWantError(t, 400, "INVALID_REQUEST")
		})
	}

	t.Run("replay shows the group as it was", func(t *testing.T) {
		r := apiDo(t, tc, "GET", apiMonPath("au", "g", "replay")+"?until="+created.ID, nil).apiWant(t, 200)
		if r.JSON["shardCount"] != 4.0 || r.JSON["asOf"] != created.ID || r.JSON["activeMigration"] != nil || r.JSON["metadataVersion"] != 1.0 {
			t.Fatalf("replay until group.created: %s", r.Body)
		}
		r = apiDo(t, tc, "GET", apiMonPath("au", "g", "replay"), nil).apiWant(t, 200)
		if r.JSON["shardCount"] != 8.0 {
			t.Fatalf("replay now: shardCount %v", r.JSON["shardCount"])
		}
		apiDo(t, tc, "GET", apiMonPath("au", "g", "replay")+"?until=garbage", nil).apiWantError(t, 400, "INVALID_REQUEST")
		apiDo(t, tc, "GET", apiMonPath("au", "g", "replay")+"?until=1-0", nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
	})
}

// TestIntegrationAPIConcurrentCreate: 100 concurrent creates of one group give one
// 201, 99 × 409 and exactly one group.created event.
func TestIntegrationAPIConcurrentCreate(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	const n = 100
	var wg sync.WaitGroup
	statuses := make([]int, n)
	codes := make([]string, n)
	start := make(chan struct{})
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: n, MaxIdleConnsPerHost: n}}
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			req, _ := http.NewRequest("POST", tc.URL+apiGroupPath("race", "g"), strings.NewReader(`{"initialShardCount":3,"requestedBy":"racer"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", string(apiAdmin))
			resp, err := client.Do(req)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			defer resp.Body.Close()
			var body map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&body)
			statuses[i] = resp.StatusCode
			codes[i], _ = body["errorCode"].(string)
		}(i)
	}
	close(start)
	wg.Wait()
	created, conflicts := 0, 0
	for i := range statuses {
		switch {
		case statuses[i] == 201:
			created++
		case statuses[i] == 409 && codes[i] == "GROUP_ALREADY_EXISTS":
			conflicts++
		default:
			t.Errorf("request %d: HTTP %d %s", i, statuses[i], codes[i])
		}
	}
	if created != 1 || conflicts != n-1 {
		t.Fatalf("%d × 201 and %d × 409, want 1 and %d", created, conflicts, n-1)
	}
	count := 0
	for _, e := range apiAllEvents(t, tc, "/coord/v1/monitoring/events") {
		if e.Type == "group.created" && e.StreamPrefix == "race" && e.ConsumerGroup == "g" {
			count++
		}
	}
	if count != 1 {
		t.Fatalf("%d group.created events, want 1", count)
	}
}
