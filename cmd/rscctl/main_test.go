package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/rscoord/rsc/wire"
)

// isolate keeps the developer's environment and saved token out of a test.
func isolate(t *testing.T) {
	t.Helper()
	for _, k := range []string{"RSC_URL", "RSC_USER", "RSC_PASSWORD", "RSC_TOKEN"} {
		t.Setenv(k, "")
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
}

// request is what the fake coordinator saw.
type request struct {
	Method, RawPath, Query, Auth, RequestID string
	Body                                    map[string]any
}

// fakeCoordinator answers canned JSON in the contract's shapes, keyed by
// "METHOD raw-path" (the path as sent, still percent-encoded).
type fakeCoordinator struct {
	t      *testing.T
	mu     sync.Mutex
	routes map[string]func(r *http.Request) (int, string)
	seen   []request
	srv    *httptest.Server
}

func newFake(t *testing.T) *fakeCoordinator {
	t.Helper()
	f := &fakeCoordinator{t: t, routes: map[string]func(r *http.Request) (int, string){}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeCoordinator) handle(method, rawPath string, fn func(r *http.Request) (int, string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes[method+" "+rawPath] = fn
}

func (f *fakeCoordinator) reply(method, rawPath string, status int, body string) {
	f.handle(method, rawPath, func(*http.Request) (int, string) { return status, body })
}

func (f *fakeCoordinator) serve(w http.ResponseWriter, r *http.Request) {
	raw, _, _ := strings.Cut(r.RequestURI, "?")
	req := request{Method: r.Method, RawPath: raw, Query: r.URL.RawQuery, Auth: r.Header.Get("Authorization"), RequestID: r.Header.Get("X-Request-Id")}
	data, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(data))
	if len(data) > 0 {
		if err := json.Unmarshal(data, &req.Body); err != nil {
			f.t.Errorf("%s %s: body is not a JSON object: %s", r.Method, raw, data)
		}
	}
	f.mu.Lock()
	f.seen = append(f.seen, req)
	fn := f.routes[r.Method+" "+raw]
	f.mu.Unlock()
	if fn == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"status":"NOT_FOUND","errorCode":"NOT_FOUND","message":"no route for %s %s"}`, r.Method, raw)
		return
	}
	status, body := fn(r)
	if body != "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	io.WriteString(w, body)
}

func (f *fakeCoordinator) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.seen...)
}

// rscctl runs the command line against the fake and returns exit status and output.
func (f *fakeCoordinator) rscctl(args ...string) (int, string, string) {
	return runArgs(append([]string{"--url", f.srv.URL}, args...)...)
}

func runArgs(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

const reshardingJSON = `{"reshardingId":"reshard-1","fromShardCount":4,"toShardCount":2,"state":%q,"createdAt":"2026-01-02T03:04:05Z","updatedAt":"2026-01-02T03:04:06Z",
 "kind":"SCALE_IN","phase":%q,"requestedBy":"alice","reason":"quiet","stateHistory":[],"provisioning":{"provisionedShards":2,"totalShards":2,"state":"COMPLETE"},
 "removedShards":[{"shardIndex":2},{"shardIndex":3}],
 "drain":[{"shard":{"shardIndex":2},"streamKey":"orders:2","exists":true,"redisPending":%s,"redisLag":%s,"groups":[],"owners":%s,"memberReportedPending":null,"memberReportedLastAckedId":null,"drained":%v,"evidenceSource":"log"},
          {"shard":{"shardIndex":3},"streamKey":"orders:3","exists":false,"redisPending":0,"redisLag":0,"groups":[],"owners":[],"memberReportedPending":null,"memberReportedLastAckedId":null,"drained":true,"evidenceSource":"log"}],
 "drainProven":false,"revokeProgress":{"holding":%s,"remaining":%d,"started":%v},"rollback":{"eligible":true,"reason":"scale-in not retired yet","policy":"metadata"},"retirement":null}`

func reshardingBody(state, phase string, pending, lag string, owners string, drained bool, holding string, remaining int) string {
	return fmt.Sprintf(reshardingJSON, state, phase, pending, lag, owners, drained, holding, remaining, remaining > 0 || drained)
}

const groupsJSON = `{"groups":[
 {"streamPrefix":"orders","consumerGroup":"billing","state":"STABLE","groupEpoch":7,"assignmentEpoch":7,"metadataVersion":9,"shardCount":4,"assignableShardCount":4,
  "activeMigration":null,"activeReshardingPhase":null,"targetAssignmentSummary":{"m1":2,"m2":2},"currentAssignmentSummary":{"m1":2,"m2":2},"createdAt":"2026-01-02T03:04:05Z","updatedAt":"2026-01-02T03:04:05Z"},
 {"streamPrefix":"payments","consumerGroup":"ledger","state":"RECONCILING","groupEpoch":3,"assignmentEpoch":3,"metadataVersion":4,"shardCount":2,"assignableShardCount":4,
  "activeMigration":` + `{"reshardingId":"reshard-9","fromShardCount":4,"toShardCount":2,"state":"ACTIVE","phase":"converging","kind":"SCALE_IN"}` + `,"activeReshardingPhase":"converging","targetAssignmentSummary":{"m1":2},"currentAssignmentSummary":{"m1":4},"createdAt":"2026-01-02T03:04:05Z","updatedAt":"2026-01-02T03:04:05Z"}]}`

func TestGroupsTableAndJSON(t *testing.T) {
	isolate(t)
	f := newFake(t)
	f.reply("GET", "/coord/v1/monitoring/groups", 200, groupsJSON)

	code, out, errOut := f.rscctl("groups")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want header and 2 rows:\n%s", out)
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "PREFIX GROUP STATE SHARDS EPOCH MV MEMBERS ACTIVE-RESHARDING" {
		t.Errorf("header = %q", lines[0])
	}
	if got := strings.Join(strings.Fields(lines[1]), " "); got != "orders billing STABLE 4 7 9 2 -" {
		t.Errorf("row 1 = %q", got)
	}
	wantContains(t, "row 2", lines[2], "payments", "ledger", "RECONCILING", "2 (4 assigned)", "reshard-9 4->2 ACTIVE/converging")
	if r := f.requests()[0]; r.Auth != "Basic YWRtaW46cGFzc3dvcmQ=" {
		t.Errorf("default credentials: Authorization = %q, want Basic admin:password", r.Auth)
	}

	code, out, _ = f.rscctl("-o", "json", "groups")
	if code != exitOK {
		t.Fatalf("json: exit %d", code)
	}
	var got, want any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("-o json is not JSON: %v\n%s", err, out)
	}
	_ = json.Unmarshal([]byte(groupsJSON), &want)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("-o json changed the answer:\n%s", out)
	}
}

func TestGroupDetails(t *testing.T) {
	isolate(t)
	f := newFake(t)
	body := `{"streamPrefix":"orders","consumerGroup":"billing","state":"RECONCILING","groupEpoch":3,"assignmentEpoch":3,"metadataVersion":4,"shardCount":2,"assignableShardCount":4,
	 "activeMigration":` + reshardingBody("ACTIVE", "converging", "null", "null", `["m1"]`, false, `{"m1":[{"shardIndex":2}]}`, 1) + `,"activeReshardingPhase":"converging",
	 "targetAssignmentSummary":{"m1":2,"m2":0},"currentAssignmentSummary":{"m1":4},"createdAt":"2026-01-02T03:04:05Z","updatedAt":"2026-01-02T03:04:07Z"}`
	f.reply("GET", "/coord/v1/streams/orders/groups/billing", 200, body)
	code, out, errOut := f.rscctl("group", "orders", "billing")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	wantContains(t, "group", out, "orders / billing", "RECONCILING", "2 (4 assigned)", "METADATA VERSION", "reshard-1: 4 -> 2 shards (SCALE_IN), state ACTIVE, phase converging",
		"by alice", "ROLLBACK ELIGIBLE", "MEMBER", "TARGET", "CURRENT")
	if !regexpMatch(`m1\s+2\s+4`, out) || !regexpMatch(`m2\s+0\s+0`, out) {
		t.Errorf("member summary rows wrong:\n%s", out)
	}
}

func TestMembersTable(t *testing.T) {
	isolate(t)
	f := newFake(t)
	f.reply("GET", "/coord/v1/monitoring/streams/orders/groups/billing/members", 200, `{"members":[
	 {"memberId":"m1","memberName":"m1","state":"ACTIVE","memberEpoch":5,"metadataVersion":9,"runtimeMaxConcurrency":1,"activeConsumerWorkers":0,
	  "currentAssignment":[{"shardIndex":0},{"shardIndex":1},{"shardIndex":2},{"shardIndex":3},{"shardIndex":6}],"grantedAssignment":[{"shardIndex":0},{"shardIndex":1}],
	  "targetAssignment":[{"shardIndex":0},{"shardIndex":1}],"revoking":[{"shardIndex":2},{"shardIndex":3}],"lastHeartbeatAt":"2026-01-02T03:04:05Z",
	  "memberLeaseExpiresAt":"2026-01-02T03:04:20Z","rebalanceTimeoutMs":60000,"rebalanceDeadlineAt":null,"shardProgress":[],"joinedAt":"2026-01-02T03:00:00Z"},
	 {"memberId":"m2","memberName":"m2","state":"EXPIRED","memberEpoch":3,"metadataVersion":8,"runtimeMaxConcurrency":1,"activeConsumerWorkers":0,
	  "currentAssignment":[],"grantedAssignment":[],"targetAssignment":[],"revoking":[],"lastHeartbeatAt":"2026-01-02T03:00:05Z",
	  "memberLeaseExpiresAt":"2026-01-02T03:00:20Z","rebalanceTimeoutMs":60000,"rebalanceDeadlineAt":null,"shardProgress":[],"joinedAt":"2026-01-02T03:00:00Z"}]}`)
	code, out, errOut := f.rscctl("members", "orders", "billing")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Join(strings.Fields(lines[0]), " "); got != "MEMBER STATE EPOCH CURRENT GRANTED TARGET REVOKING LEASE-EXPIRES" {
		t.Errorf("header = %q", got)
	}
	if got := strings.Join(strings.Fields(lines[1]), " "); got != "m1 ACTIVE 5 0-3,6 0,1 0,1 2,3 2026-01-02T03:04:20Z" {
		t.Errorf("row m1 = %q", got)
	}
	if got := strings.Join(strings.Fields(lines[2]), " "); got != "m2 EXPIRED 3 - - - - 2026-01-02T03:00:20Z" {
		t.Errorf("row m2 = %q", got)
	}
}

func TestRoutingAndMigrations(t *testing.T) {
	isolate(t)
	f := newFake(t)
	f.reply("GET", "/coord/v1/streams/orders/groups/billing/producer-routing", 200, `{"streamPrefix":"orders","consumerGroup":"billing","metadataVersion":9,"shardCount":2,
	 "streamKeyPattern":"orders:{shardIndex}","shards":[{"shardIndex":0,"streamKey":"orders:0","redisSlot":8578},{"shardIndex":1,"streamKey":"orders:1","redisSlot":12707}]}`)
	f.reply("GET", "/coord/v1/streams/orders/groups/billing/migrations", 200, `{"migrations":[`+reshardingBody("DEPRECATED", "done", "0", "0", "[]", true, "{}", 0)+`,
	 {"reshardingId":"reshard-2","fromShardCount":2,"toShardCount":6,"state":"ACTIVE","phase":"converging","kind":"SCALE_OUT","requestedBy":"bob","createdAt":"2026-01-03T00:00:00Z","updatedAt":"2026-01-03T00:00:01Z"}],
	 "activeReshardingId":"reshard-2"}`)
	code, out, errOut := f.rscctl("routing", "orders", "billing")
	if code != exitOK {
		t.Fatalf("routing: exit %d: %s", code, errOut)
	}
	wantContains(t, "routing", out, "2 shards, metadata version 9", "orders:{shardIndex}", "SHARD", "STREAM-KEY", "SLOT", "orders:1")
	if !regexpMatch(`(?m)^1\s+orders:1\s+12707$`, out) {
		t.Errorf("routing row:\n%s", out)
	}
	code, out, errOut = f.rscctl("migrations", "orders", "billing")
	if code != exitOK {
		t.Fatalf("migrations: exit %d: %s", code, errOut)
	}
	if !regexpMatch(`(?m)^reshard-1\s+-\s+SCALE_IN\s+4\s+2\s+DEPRECATED\s+done\s+alice`, out) || !regexpMatch(`(?m)^reshard-2\s+\*\s+SCALE_OUT\s+2\s+6\s+ACTIVE\s+converging\s+bob`, out) {
		t.Errorf("migrations table:\n%s", out)
	}
}

func TestHistory(t *testing.T) {
	isolate(t)
	f := newFake(t)
	ev := func(id, typ, payload string) string {
		return fmt.Sprintf(`{"id":%q,"type":%q,"time":"2026-01-02T03:04:05.5Z","actor":"alice","requestId":"req-%s","streamPrefix":"orders","consumerGroup":"billing","payload":%s}`, id, typ, id, payload)
	}
	f.handle("GET", "/coord/v1/monitoring/streams/orders/groups/billing/events", func(r *http.Request) (int, string) {
		switch r.URL.Query().Get("after") {
		case "":
			return 200, `{"events":[` + ev("1-0", "group.created", `{"ShardCount":4,"Provisioned":true,"RequestedBy":"alice","Reason":""}`) + `,` +
				ev("2-0", "member.joined", `{"MemberID":"m1","Name":"m1","MaxConcurrency":1}`) + `],"nextAfter":"2-0"}`
		case "2-0":
			return 200, `{"events":[` + ev("3-0", "resharding.preparing", `{"ReshardingID":"reshard-1","FromShardCount":4,"ToShardCount":2,"RequestedBy":"alice","Reason":"quiet down"}`) + `],"nextAfter":null}`
		}
		return 400, `{"status":"BAD_REQUEST","errorCode":"INVALID_REQUEST","message":"after: bad"}`
	})

	code, out, errOut := f.rscctl("history", "orders", "billing", "--limit", "2")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Join(strings.Fields(lines[0]), " "); got != "ID TIME TYPE ACTOR REQUEST-ID SUMMARY" {
		t.Errorf("header = %q", got)
	}
	if got := strings.Join(strings.Fields(lines[1]), " "); got != "1-0 2026-01-02T03:04:05.500Z group.created alice req-1-0 shardCount=4 provisioned=true requestedBy=alice" {
		t.Errorf("row 1 = %q", got)
	}
	if len(lines) != 3 {
		t.Errorf("--limit 2 printed %d rows", len(lines)-1)
	}
	wantContains(t, "stderr", errOut, "--after 2-0")
	if q := f.requests()[0].Query; q != "limit=2" {
		t.Errorf("query = %q", q)
	}

	// A type filter pages through the log until it has enough matches.
	code, out, errOut = f.rscctl("history", "orders", "billing", "--type", "resharding.*,group.deleted")
	if code != exitOK {
		t.Fatalf("filtered: exit %d: %s", code, errOut)
	}
	wantContains(t, "filtered", out, "resharding.preparing", `reason="quiet down"`, "reshardingID=reshard-1")
	if strings.Contains(out, "group.created") || strings.Contains(out, "member.joined") {
		t.Errorf("filter let other types through:\n%s", out)
	}

	code, out, _ = f.rscctl("-o", "json", "history", "orders", "billing", "--after", "2-0")
	if code != exitOK {
		t.Fatalf("json: exit %d", code)
	}
	var page struct {
		Events []struct {
			ID string `json:"id"`
		} `json:"events"`
		NextAfter *string `json:"nextAfter"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil || len(page.Events) != 1 || page.Events[0].ID != "3-0" || page.NextAfter != nil {
		t.Errorf("json history = %s (%v)", out, err)
	}
}

func TestCreateSendsRequest(t *testing.T) {
	isolate(t)
	f := newFake(t)
	f.reply("POST", "/coord/v1/streams/orders/groups/billing", 201, `{"streamPrefix":"orders","consumerGroup":"billing","state":"EMPTY","groupEpoch":1,"assignmentEpoch":1,
	 "metadataVersion":1,"shardCount":8,"assignableShardCount":8,"activeMigration":null,"activeReshardingPhase":null,"targetAssignmentSummary":{},"currentAssignmentSummary":{},
	 "createdAt":"2026-01-02T03:04:05Z","updatedAt":"2026-01-02T03:04:05Z"}`)
	code, out, errOut := f.rscctl("create", "orders", "billing", "--shards", "8", "--requested-by", "alice", "--reason", "new team", "--user", "ops", "--password", "s3cret")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	wantContains(t, "create", out, "created orders / billing with 8 shards")
	r := f.requests()[0]
	if r.Body["initialShardCount"] != 8.0 || r.Body["requestedBy"] != "alice" || r.Body["reason"] != "new team" {
		t.Errorf("body = %v", r.Body)
	}
	if r.Auth != "Basic b3BzOnMzY3JldA==" {
		t.Errorf("Authorization = %q, want Basic ops:s3cret", r.Auth)
	}
	if !strings.HasPrefix(r.RequestID, "rscctl-") {
		t.Errorf("X-Request-Id = %q", r.RequestID)
	}
	// Without --shards the coordinator's default applies: the field is left out.
	f.rscctl("create", "orders", "billing")
	if r := f.requests()[1]; r.Body["initialShardCount"] != nil || r.Body["requestedBy"] == "" {
		t.Errorf("default create body = %v", r.Body)
	}
}

// TestPathParametersArePercentEncoded: names with "/", space, "%" and "?" reach
// the server as single segments that decode back to what was typed.
func TestPathParametersArePercentEncoded(t *testing.T) {
	isolate(t)
	f := newFake(t)
	prefix, group, id := "eu/orders", "team a%?", "reshard/1"
	code, _, _ := f.rscctl("group", prefix, group)
	if code != exitRefused {
		t.Fatalf("exit %d, want %d from the fake's 404", code, exitRefused)
	}
	f.rscctl("rollback", prefix, group, id)
	f.rscctl("history", prefix, group)
	reqs := f.requests()
	if len(reqs) != 3 {
		t.Fatalf("requests: %v", reqs)
	}
	if want := "/coord/v1/streams/eu%2Forders/groups/team%20a%25%3F"; reqs[0].RawPath != want {
		t.Errorf("raw path = %q, want %q", reqs[0].RawPath, want)
	}
	for _, r := range reqs {
		segs := strings.Split(strings.TrimPrefix(r.RawPath, "/"), "/")
		var decoded []string
		for _, s := range segs {
			d, err := url.PathUnescape(s)
			if err != nil {
				t.Fatalf("%s: %v", r.RawPath, err)
			}
			decoded = append(decoded, d)
		}
		got := strings.Join(decoded, "|")
		if !strings.Contains(got, "|"+prefix+"|groups|"+group) {
			t.Errorf("%s %s decodes to %q", r.Method, r.RawPath, got)
		}
		if r.Method == "POST" && !strings.Contains(got, "|migrations|"+id+"|rollback") {
			t.Errorf("rollback path %s decodes to %q", r.RawPath, got)
		}
	}
}

func TestExitCodes(t *testing.T) {
	isolate(t)
	f := newFake(t)
	f.reply("GET", "/coord/v1/monitoring/groups", 401, "")
	f.reply("GET", "/coord/v1/streams/orders/groups/billing", 404, `{"status":"NOT_FOUND","errorCode":"GROUP_NOT_FOUND","message":"Group not found","timestamp":"2026-01-02T03:04:05Z","path":"/x"}`)
	f.reply("POST", "/coord/v1/streams/orders/groups/billing/scale", 409, `{"status":"CONFLICT","errorCode":"ACTIVE_MIGRATION_EXISTS","message":"Group already has an active migration: reshard-1"}`)
	f.reply("GET", "/coord/v1/streams/orders/groups/billing/producer-routing", 503, `{"status":"SERVICE_UNAVAILABLE","errorCode":"COORDINATOR_TERMINATING","message":"Coordinator is terminating"}`)
	f.reply("GET", "/coord/v1/streams/orders/groups/billing/migrations", 200, `<html>proxy</html>`)

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()

	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  []string
	}{
		{"unauthorized", []string{"groups", "--password", "wrong"}, exitRefused, []string{"HTTP 401", "authentication failed", "user admin"}},
		{"not found", []string{"group", "orders", "billing"}, exitRefused, []string{"GROUP_NOT_FOUND", "Group not found"}},
		{"conflict", []string{"scale", "orders", "billing", "2"}, exitRefused, []string{"ACTIVE_MIGRATION_EXISTS", "reshard-1"}},
		{"server failure", []string{"routing", "orders", "billing"}, exitUnavailable, []string{"HTTP 503", "COORDINATOR_TERMINATING"}},
		{"not the coordinator", []string{"migrations", "orders", "billing"}, exitUnavailable, []string{"unexpected answer"}},
		{"unreachable", []string{"--url", closed.URL, "groups"}, exitUnavailable, []string{"cannot reach the coordinator"}},
		{"unknown command", []string{"frobnicate"}, exitUsage, []string{`unknown command "frobnicate"`}},
		{"no command", nil, exitUsage, []string{"usage: rscctl"}},
		{"missing argument", []string{"group", "orders"}, exitUsage, []string{"want 2 argument(s)"}},
		{"extra argument", []string{"groups", "extra"}, exitUsage, []string{"want 0 argument(s)"}},
		{"unknown flag", []string{"groups", "--bogus"}, exitUsage, []string{"flag provided but not defined: -bogus"}},
		{"bad output", []string{"-o", "yaml", "groups"}, exitUsage, []string{"-o must be table or json"}},
		{"bad target", []string{"scale", "orders", "billing", "many"}, exitUsage, []string{`target "many"`}},
		{"bad url", []string{"--url", "ftp://x", "groups"}, exitUsage, []string{"--url"}},
		{"bad policy", []string{"rollback", "orders", "billing", "r1", "--policy", "undo"}, exitUsage, []string{"--policy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.name != "unreachable" {
				args = append([]string{"--url", f.srv.URL}, args...)
			}
			code, _, errOut := runArgs(args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, errOut)
			}
			wantContains(t, "stderr", errOut, tc.msg...)
		})
	}
}

func TestHelp(t *testing.T) {
	isolate(t)
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		code, out, _ := runArgs(args...)
		if code != exitOK {
			t.Errorf("%v: exit %d", args, code)
		}
		wantContains(t, "help", out, "exit status:", "1    the coordinator refused", "3    the coordinator cannot be reached", "4    scale --wait: timed out", "5    scale --wait: the resharding ended ROLLED_BACK")
	}
	code, out, _ := runArgs("help", "scale")
	if code != exitOK {
		t.Errorf("help scale: exit %d", code)
	}
	wantContains(t, "help scale", out, "--wait", "--timeout", "--reason")
	code, out, _ = runArgs("history", "-h")
	if code != exitOK {
		t.Errorf("history -h: exit %d", code)
	}
	wantContains(t, "history -h", out, "--after", "--limit", "--type")
}

// waitFake serves a scale-in whose resharding moves one step per poll through
// states; members converge on the second poll.
func waitFake(t *testing.T, states [][2]string) (*fakeCoordinator, *int) {
	f := newFake(t)
	var mu sync.Mutex
	polls := 0
	f.reply("POST", "/coord/v1/streams/orders/groups/billing/scale", 202, reshardingBody("ACTIVE", "converging", "null", "null", `["m1"]`, false, `{"m1":[{"shardIndex":2}]}`, 1))
	f.handle("GET", "/coord/v1/streams/orders/groups/billing/migrations/reshard-1", func(*http.Request) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		i := polls
		if i >= len(states) {
			i = len(states) - 1
		}
		polls++
		st := states[i]
		switch st[0] {
		case "ACTIVE":
			return 200, reshardingBody("ACTIVE", st[1], "null", "null", `["m1"]`, false, `{"m1":[{"shardIndex":2}]}`, 1)
		case "DRAINING":
			return 200, reshardingBody("DRAINING", st[1], "3", "10", `["m1"]`, false, `{"m1":[{"shardIndex":2}]}`, 1)
		}
		return 200, reshardingBody(st[0], st[1], "0", "0", "[]", true, "{}", 0)
	})
	f.handle("GET", "/coord/v1/monitoring/streams/orders/groups/billing/members", func(*http.Request) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		m1 := `[{"shardIndex":0},{"shardIndex":2}]`
		if polls > 1 {
			m1 = `[{"shardIndex":0}]`
		}
		return 200, `{"members":[{"memberId":"m1","state":"ACTIVE","memberEpoch":4,"currentAssignment":` + m1 + `},{"memberId":"m2","state":"ACTIVE","memberEpoch":4,"currentAssignment":[{"shardIndex":1}]}]}`
	})
	f.reply("GET", "/coord/v1/monitoring/streams/orders/groups/billing/assignments", 200,
		`{"targetAssignment":{"m1":[{"shardIndex":0}],"m2":[{"shardIndex":1}]},"currentAssignments":{},"grantedAssignments":{},"revokeProgress":{},"pendingAssignments":{},"invariantViolations":[]}`)
	return f, &polls
}

func TestScaleWaitProgressesToDeprecated(t *testing.T) {
	isolate(t)
	f, polls := waitFake(t, [][2]string{{"ACTIVE", "converging"}, {"ACTIVE", "converging"}, {"DRAINING", "draining"}, {"DEPRECATED", "done"}})
	code, out, errOut := f.rscctl("scale", "orders", "billing", "2", "--wait", "--interval", "20ms", "--timeout", "20s", "--reason", "quiet")
	if code != exitOK {
		t.Fatalf("exit %d: %s\n%s", code, errOut, out)
	}
	if *polls != 4 {
		t.Errorf("polled %d times, want 4", *polls)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// Not a terminal: one line per change (the repeated second poll is not printed twice).
	if len(lines) != 5 {
		t.Fatalf("want 4 progress lines and a summary:\n%s", out)
	}
	wantContains(t, "poll 1", lines[0], "ACTIVE phase=converging members=1/2 (waiting for [m1])", "[orders:2 pending=? lag=? owners=[m1] draining]", "revoke=1 shard(s) still held: m1=2")
	wantContains(t, "poll 2", lines[1], "ACTIVE phase=converging members=2/2")
	wantContains(t, "poll 3", lines[2], "DRAINING phase=draining", "[orders:2 pending=3 lag=10 owners=[m1] draining]", "[orders:3 pending=0 lag=0 owners=none drained]")
	wantContains(t, "poll 4", lines[3], "DEPRECATED phase=done", "revoke=done")
	wantContains(t, "summary", lines[4], "resharding reshard-1 completed: DEPRECATED, 2 shards")
	if strings.Contains(out, "\x1b[") {
		t.Error("ANSI escapes written to a non-terminal")
	}
	if r := f.requests()[0]; r.Body["targetShardCount"] != 2.0 || r.Body["reason"] != "quiet" {
		t.Errorf("scale body = %v", r.Body)
	}
}

func TestScaleWaitTimesOut(t *testing.T) {
	isolate(t)
	f, _ := waitFake(t, [][2]string{{"ACTIVE", "converging"}})
	code, out, errOut := f.rscctl("scale", "orders", "billing", "2", "--wait", "--interval", "20ms", "--timeout", "150ms")
	if code != exitTimeout {
		t.Fatalf("exit %d, want %d: %s\n%s", code, exitTimeout, errOut, out)
	}
	wantContains(t, "stderr", errOut, "timed out after 150ms", "still ACTIVE")
}

func TestScaleWaitRolledBack(t *testing.T) {
	isolate(t)
	f, _ := waitFake(t, [][2]string{{"ACTIVE", "converging"}, {"ROLLED_BACK", "done"}})
	code, out, errOut := f.rscctl("scale", "orders", "billing", "2", "--wait", "--interval", "20ms", "--timeout", "20s")
	if code != exitRolledBack {
		t.Fatalf("exit %d, want %d: %s\n%s", code, exitRolledBack, errOut, out)
	}
	wantContains(t, "output", out, "was rolled back: ROLLED_BACK, 4 shards")
}

func TestScaleWaitJSON(t *testing.T) {
	isolate(t)
	f, _ := waitFake(t, [][2]string{{"DRAINING", "draining"}, {"DEPRECATED", "done"}})
	code, out, errOut := f.rscctl("-o", "json", "scale", "orders", "billing", "2", "--wait", "--interval", "20ms")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var m struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(out), &m); err != nil || m.State != "DEPRECATED" {
		t.Errorf("stdout should be the final resharding as JSON: %v\n%s", err, out)
	}
	wantContains(t, "stderr", errOut, "DRAINING phase=draining")
}

func TestRedrawOnTerminal(t *testing.T) {
	var buf bytes.Buffer
	w := &waiter{a: &app{stdout: &buf}}
	w.redraw([]string{"a", "b", "c"})
	w.redraw([]string{"d", "e"})
	if got, want := buf.String(), "a\nb\nc\n\x1b[3A\x1b[Jd\ne\n"; got != want {
		t.Errorf("redraw wrote %q, want %q", got, want)
	}
}

func TestLoginSaveAndToken(t *testing.T) {
	isolate(t)
	f := newFake(t)
	f.handle("POST", "/coord/v1/auth/login", func(r *http.Request) (int, string) {
		var body map[string]string
		_ = json.NewDecoder(r.Body).Decode(&body)
		if body["username"] == "" && r.Header.Get("Authorization") == "Bearer tok-1" {
			return 200, `{"accessToken":"tok-2","tokenType":"Bearer","expiresAt":"2026-01-09T03:04:05Z","expiresInSeconds":604800,"roles":["READ"]}`
		}
		if body["username"] != "admin" || body["password"] != "password" {
			return 401, `{"timestamp":"2026-01-02T03:04:05Z","status":401,"error":"Unauthorized","path":"/coord/v1/auth/login"}`
		}
		return 200, `{"accessToken":"tok-1","tokenType":"Bearer","expiresAt":"2026-01-09T03:04:05Z","expiresInSeconds":604800,"roles":["ADMIN","MEMBER","MONITOR","READ","WRITE"]}`
	})
	f.reply("GET", "/coord/v1/monitoring/groups", 200, `{"groups":[]}`)

	code, _, errOut := f.rscctl("login", "--password", "nope")
	if code != exitRefused {
		t.Errorf("bad login: exit %d", code)
	}
	wantContains(t, "bad login", errOut, "HTTP 401", "authentication failed")

	code, out, errOut := f.rscctl("login", "--save")
	if code != exitOK {
		t.Fatalf("login: exit %d: %s", code, errOut)
	}
	if out != "tok-1\n" {
		t.Errorf("login printed %q, want just the token", out)
	}
	path := filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "rscctl", "token")
	data, err := os.ReadFile(path)
	if err != nil || strings.TrimSpace(string(data)) != "tok-1" {
		t.Fatalf("saved token: %q, %v", data, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v, want 0600", fi.Mode().Perm())
	}

	// Later calls without credentials use the saved token ...
	f.rscctl("groups")
	// ... explicit credentials win over it ...
	f.rscctl("groups", "--user", "admin", "--password", "password")
	// ... and --token wins over both.
	f.rscctl("groups", "--token", "given", "--user", "x")
	reqs := f.requests()
	n := len(reqs)
	if got := reqs[n-3].Auth; got != "Bearer tok-1" {
		t.Errorf("with a saved token: Authorization %q", got)
	}
	if got := reqs[n-2].Auth; !strings.HasPrefix(got, "Basic ") {
		t.Errorf("with --user: Authorization %q", got)
	}
	if got := reqs[n-1].Auth; got != "Bearer given" {
		t.Errorf("with --token: Authorization %q", got)
	}

	// A token buys a fresh one; -o json prints the whole answer.
	t.Setenv("RSC_TOKEN", "tok-1")
	code, out, errOut = f.rscctl("-o", "json", "login")
	if code != exitOK {
		t.Fatalf("token login: exit %d: %s", code, errOut)
	}
	wantContains(t, "json login", out, `"accessToken": "tok-2"`, `"roles"`)
}

func TestReplayPassesThrough(t *testing.T) {
	isolate(t)
	dir := t.TempDir()
	script := "#!/bin/sh\necho \"replay got: $*\"\nexit 3\n"
	if err := os.WriteFile(filepath.Join(dir, "replay"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	old := executable
	t.Cleanup(func() { executable = old })

	// Next to rscctl's own binary.
	executable = func() (string, error) { return filepath.Join(dir, "rscctl"), nil }
	t.Setenv("PATH", t.TempDir())
	code, out, _ := runArgs("replay", "state", "--stream-prefix", "orders", "--url", "ignored")
	if code != 3 {
		t.Errorf("exit %d, want replay's own 3", code)
	}
	if strings.TrimSpace(out) != "replay got: state --stream-prefix orders --url ignored" {
		t.Errorf("replay output %q", out)
	}

	// On PATH.
	executable = func() (string, error) { return filepath.Join(t.TempDir(), "rscctl"), nil }
	t.Setenv("PATH", dir)
	if code, out, _ := runArgs("replay", "verify"); code != 3 || !strings.Contains(out, "replay got: verify") {
		t.Errorf("from PATH: exit %d, output %q", code, out)
	}

	// Nowhere.
	t.Setenv("PATH", t.TempDir())
	code, _, errOut := runArgs("replay", "verify")
	if code != exitNoReplay {
		t.Errorf("no replay: exit %d, want %d", code, exitNoReplay)
	}
	wantContains(t, "stderr", errOut, "no replay binary", "go build")
}

func TestFlagsAnywhere(t *testing.T) {
	isolate(t)
	f := newFake(t)
	f.reply("GET", "/coord/v1/monitoring/groups", 200, `{"groups":[]}`)
	// Global flags after the command, command flags between arguments.
	if code, _, errOut := runArgs("groups", "--url", f.srv.URL, "-o", "json"); code != exitOK {
		t.Errorf("globals after the command: exit %d: %s", code, errOut)
	}
	t.Setenv("RSC_URL", f.srv.URL)
	if code, out, errOut := runArgs("groups"); code != exitOK || !strings.Contains(out, "PREFIX") {
		t.Errorf("RSC_URL: exit %d: %s %s", code, out, errOut)
	}
	f.reply("POST", "/coord/v1/streams/orders/groups/billing/scale", 202, reshardingBody("ACTIVE", "converging", "null", "null", "[]", false, "{}", 0))
	if code, out, errOut := runArgs("scale", "orders", "--reason", "r", "billing", "2"); code != exitOK || !strings.Contains(out, "resharding reshard-1 started") {
		t.Errorf("interspersed flags: exit %d: %s %s", code, out, errOut)
	}
}

func TestShardList(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, "-"},
		{[]int{3}, "3"},
		{[]int{0, 1}, "0,1"},
		{[]int{5, 0, 1, 2, 3}, "0-3,5"},
		{[]int{0, 2, 4, 5, 6, 9, 10}, "0,2,4-6,9,10"},
	} {
		var refs []wire.ShardRef
		for _, i := range tc.in {
			refs = append(refs, wire.ShardRef{ShardIndex: i})
		}
		if got := shardList(refs); got != tc.want {
			t.Errorf("shardList(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }

// TestLogRestore: rscctl log restore sends who and why to the restore route
// and prints what was restored; --reason is required; the coordinator's
// refusal (the log is not lost) is exit 1 with its errorCode.
func TestLogRestore(t *testing.T) {
	isolate(t)
	f := newFake(t)
	f.reply("POST", "/coord/v1/log/restore", 200, `{"eventId":"1800000000000-0","restoredFrom":"1700000000000-4","logLastId":"1700000000000-1","cause":"ENTRIES_LOST","lostEntries":3,"atLeast":false}`)
	code, out, errOut := f.rscctl("log", "restore", "--requested-by", "alice", "--reason", "failover lost the tail")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	wantContains(t, "log restore", out, "a failover lost 3 entries", "from the state at 1700000000000-4", "log.restored 1800000000000-0")
	if r := f.requests()[0]; r.Body["requestedBy"] != "alice" || r.Body["reason"] != "failover lost the tail" {
		t.Errorf("body = %v", r.Body)
	}
	if code, _, errOut := f.rscctl("log", "restore"); code != exitUsage || !strings.Contains(errOut, "--reason") {
		t.Errorf("without --reason: exit %d, %s", code, errOut)
	}
	f.reply("POST", "/coord/v1/log/restore", 409, `{"status":"CONFLICT","errorCode":"LOG_NOT_LOST","message":"The event log holds this coordinator's state: there is nothing to restore"}`)
	if code, _, errOut := f.rscctl("log", "restore", "--reason", "again"); code != exitRefused || !strings.Contains(errOut, "LOG_NOT_LOST") {
		t.Errorf("refused: exit %d, %s", code, errOut)
	}
}

// TestDrainTextNamesTheGroupsItWaitsFor: a drain row that waits for
// consumer groups says which (a typo'd group nobody reads, say).
func TestDrainTextNamesTheGroupsItWaitsFor(t *testing.T) {
	lag := int64(5)
	row := wire.ShardDrainRow{StreamKey: "orders:2", RedisPending: new(int64), RedisLag: &lag, Owners: []string{}, WaitingFor: []string{"orders-consumr"}}
	wantContains(t, "drain row", drainText(row), "orders:2 pending=0 lag=5 owners=none draining, waiting for consumer groups [orders-consumr]")
	row.WaitingFor, row.Drained = []string{}, true
	wantContains(t, "drained row", drainText(row), "owners=none drained")
}
