package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/internal/redistest"
)

// Security end-to-end tests (CONTRACT.md §1.2-§1.4): authentication on every route,
// roles, tokens, secrets in logs, body limits, rate limiting and key injection.

const apiRealm = `Basic realm="redis-stream-coordinator"`

// apiRoute is one registered route.
type apiRoute struct {
	Method, Template string
}

// apiWalkRoutes lists every route of the running server's router.
func apiWalkRoutes(t *testing.T, tc *testCoordinator) []apiRoute {
	t.Helper()
	var out []apiRoute
	err := tc.Main.server.Router().Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err := route.GetPathTemplate()
		if err != nil {
			return nil
		}
		methods, err := route.GetMethods()
		if err != nil {
			methods = []string{"GET"}
		}
		for _, m := range methods {
			out = append(out, apiRoute{m, tpl})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Template != out[j].Template {
			return out[i].Template < out[j].Template
		}
		return out[i].Method < out[j].Method
	})
	return out
}

// apiFill substitutes sample values for a route template's variables.
func apiFill(tpl string) string {
	r := strings.NewReplacer("{streamPrefix}", "orders", "{consumerGroup}", "oc", "{memberId}", "m1", "{reshardingId}", "reshard-x", "{shardIndex}", "0")
	return r.Replace(tpl)
}

// apiContractRoutes are the routes the contract and our design require.
var apiContractRoutes = []apiRoute{
	{"GET", "/healthz"}, {"GET", "/readyz"},
	{"POST", "/coord/v1/auth/login"},
	{"POST", "/coord/v1/streams/{streamPrefix}"},
	{"POST", "/coord/v1/streams/{streamPrefix}/scale"},
	{"POST", "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}"},
	{"GET", "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}"},
	{"DELETE", "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}"},
	{"GET", "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}/producer-routing"},
	{"POST", "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}/scale"},
	{"GET", "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}/migrations"},
	{"GET", "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}/migrations/{reshardingId}"},
	{"POST", "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}/migrations/{reshardingId}/rollback"},
	{"POST", "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}/members/{memberId}/heartbeat"},
	{"GET", "/coord/v1/monitoring/health"},
	{"GET", "/coord/v1/monitoring/session"},
	{"GET", "/coord/v1/monitoring/compatibility"},
	{"GET", "/coord/v1/monitoring/groups"},
	{"GET", "/coord/v1/monitoring/events"},
	{"GET", "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}"},
	{"GET", "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}/members"},
	{"GET", "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}/assignments"},
	{"GET", "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}/consumption"},
	{"GET", "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}/migrations"},
	{"GET", "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}/migrations/{reshardingId}"},
	{"GET", "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}/offsets"},
	{"GET", "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}/shards/{shardIndex}/messages"},
	{"GET", "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}/events"},
	{"GET", "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}/replay"},
}

const apiHeartbeatTemplate = "/coord/v1/streams/{streamPrefix}/groups/{consumerGroup}/members/{memberId}/heartbeat"

// apiWantUnauthorized: 401, empty body, the Basic challenge.
func apiWantUnauthorized(t *testing.T, r apiResp, what string) {
	t.Helper()
	if r.Status != 401 || len(r.Body) != 0 || r.Header.Get("WWW-Authenticate") != apiRealm {
		t.Errorf("%s: HTTP %d, WWW-Authenticate %q, body %q; want 401, %s, empty body", what, r.Status, r.Header.Get("WWW-Authenticate"), r.Body, apiRealm)
	}
}

// apiWantForbidden: 403 with an empty body.
func apiWantForbidden(t *testing.T, r apiResp, what string) {
	t.Helper()
	if r.Status != 403 || len(r.Body) != 0 {
		t.Errorf("%s: HTTP %d body %q; want 403 with an empty body", what, r.Status, r.Body)
	}
}

// apiRequiredRole is the contract's rule (§1.3) as our design applies it to a
// route template and method: "" is public.
func apiRequiredRole(rt apiRoute) string {
	mutation := rt.Method == "POST" || rt.Method == "PUT" || rt.Method == "PATCH" || rt.Method == "DELETE"
	switch {
	case rt.Method == "POST" && rt.Template == apiHeartbeatTemplate:
		return "MEMBER"
	case rt.Method == "POST" && rt.Template == "/coord/v1/auth/login":
		return ""
	case rt.Method == "POST" && rt.Template == "/coord/v1/log/restore":
		return "ADMIN"
	case rt.Template != "/coord/v1" && !strings.HasPrefix(rt.Template, "/coord/v1/"):
		return "" // probes, /metrics, the console
	case strings.HasPrefix(rt.Template, "/coord/v1/monitoring/"):
		return "READ"
	case mutation:
		return "WRITE"
	}
	return "READ"
}

// apiGrants is the role table (§1.3): which held roles grant a required one.
var apiGrants = map[string][]string{
	"READ":   {"READ", "WRITE", "MONITOR", "ADMIN"},
	"WRITE":  {"WRITE", "ADMIN"},
	"MEMBER": {"MEMBER", "ADMIN"},
	"ADMIN":  {"ADMIN"},
}

// apiNames are path values to fill templates with: sample ones, and hostile
// ones that look like the routes the old path-text rule looked for.
var apiNames = []struct{ prefix, group, member string }{
	{"orders", "oc", "m1"},
	{"members", "heartbeat", "heartbeat"},
	{"heartbeat", "members", "members"},
	{"auth", "login", "login"},
	{"metrics", "monitoring", "metrics"},
	{"monitoring", "members", "auth"},
}

// apiFillNamed fills a template with one set of names; the member id carries
// who sends it, so that no two principals heartbeat as the same member.
func apiFillNamed(tpl string, n int, who string) string {
	v := apiNames[n]
	r := strings.NewReplacer("{streamPrefix}", apiEsc(v.prefix), "{consumerGroup}", apiEsc(v.group), "{memberId}", apiEsc(v.member+"-"+who),
		"{reshardingId}", "reshard-"+v.member, "{shardIndex}", "0")
	return r.Replace(tpl)
}

// apiRouteBody is a body the route accepts (names n, sent by who).
func apiRouteBody(rt apiRoute, n int, who string) any {
	switch {
	case rt.Method == "GET" || rt.Method == "HEAD":
		return nil
	case rt.Template == apiHeartbeatTemplate:
		return apiHBBody{Member: apiNames[n].member + "-" + who}.toMap()
	}
	return map[string]any{"initialShardCount": 1, "targetShardCount": 2, "requestedBy": "x", "reason": "y", "force": true}
}

// apiManualClock is a settable clock for the coordinator's authentication.
type apiManualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *apiManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *apiManualClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// apiRoleUsers are one user per role.
var apiRoleUsers = []map[string]any{
	{"username": "reader", "password": "r-pw", "roles": []string{"READ"}},
	{"username": "writer", "password": "w-pw", "roles": []string{"WRITE"}},
	{"username": "member", "password": "m-pw", "roles": []string{"MEMBER"}},
	{"username": "monitor", "password": "mo-pw", "roles": []string{"MONITOR"}},
	{"username": "boss", "password": "b-pw", "roles": []string{"ADMIN"}},
}

// TestIntegrationAuthEveryRoute walks every route of the router and calls it,
// on sample names and on names that look like other routes (a prefix
// "members" with a group "heartbeat", "auth"/"login", "metrics",
// "monitoring"), without credentials, with bad ones, and as a user of each
// role: the required role is decided by the route, never by the path text.
// First every refused request, then a check that they changed nothing, then
// the users of each role.
func TestIntegrationAuthEveryRoute(t *testing.T) {
	parallel(t)
	clock := &apiManualClock{t: time.Now()}
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.UsersFile = apiUsersFile(t, apiRoleUsers)
		m.clock = clock.Now
	})
	boss := apiBasic("boss", "b-pw")
	apiSend(t, tc, boss, "POST", apiGroupPath("orders", "oc"), map[string]any{"initialShardCount": 2, "requestedBy": "setup"}, nil).apiWant(t, 201)
	routes := apiWalkRoutes(t, tc)

	registered := map[apiRoute]bool{}
	for _, r := range routes {
		registered[r] = true
	}
	for _, want := range apiContractRoutes {
		if !registered[want] {
			t.Errorf("route %s %s is not registered", want.Method, want.Template)
		}
	}
	// Paths no route serves: under /coord/v1 they need credentials before
	// they answer 404 or 405.
	unmatched := []struct {
		rt   apiRoute
		want int // with credentials of the right role
	}{
		{apiRoute{"GET", "/coord/v1/streams/members/groups/heartbeat/members/x"}, 404},
		{apiRoute{"POST", "/coord/v1/streams/members/groups/heartbeat/members/heartbeat"}, 404},
		{apiRoute{"POST", "/coord/v1/auth/login/members/m/heartbeat"}, 404},
		{apiRoute{"DELETE", "/coord/v1/auth/login"}, 405},
		{apiRoute{"GET", "/coord/v1/auth/login"}, 405},
		{apiRoute{"PUT", "/coord/v1/streams/members/groups/heartbeat"}, 405},
		{apiRoute{"GET", "/coord/v1/monitoring/nothing"}, 404},
		{apiRoute{"GET", "/coord/v1"}, 404},
	}
	wantUnmatchedRole := func(rt apiRoute) string {
		if rt.Method == "GET" {
			return "READ"
		}
		return "WRITE"
	}

	logBefore := apiLogLen(t, tc, apiRedis(t, tc))
	keysBefore := apiKeys(t, tc, apiRedis(t, tc))
	bad := map[string]apiAuth{
		"no credentials": apiNoAuth,
		"bad password":   apiBasic("boss", "wrong"),
		"unknown user":   apiBasic("nobody", "b-pw"),
		"bad bearer":     "Bearer not-a-token",
		"unknown scheme": "Digest abc",
		"default admin":  apiAdmin, // not a user once a users file is given
	}
	t.Run("refused", func(t *testing.T) {
		for _, rt := range routes {
			role := apiRequiredRole(rt)
			for n := range apiNames {
				path := apiFillNamed(rt.Template, n, "anon")
				if n > 0 && path == apiFillNamed(rt.Template, 0, "anon") {
					continue // no names in this template
				}
				body := apiRouteBody(rt, n, "anon")
				if role == "" {
					r := apiSendNoRedirect(t, tc, apiNoAuth, rt.Method, path, body)
					if rt.Template == "/coord/v1/auth/login" {
						// A failed login: the Spring default error body (§1.3), not the interceptor's.
						if r.Status != 401 || r.JSON == nil || r.JSON["status"] != 401.0 {
							t.Errorf("%s %s without credentials: HTTP %d body %s", rt.Method, path, r.Status, r.Body)
						}
					} else if r.Status == 401 || r.Status == 403 || r.Status >= 500 {
						t.Errorf("public %s %s: HTTP %d body %.300s", rt.Method, path, r.Status, r.Body)
					}
					continue
				}
				for name, auth := range bad {
					clock.Add(time.Minute) // refill the failed-login buckets: this test is not about them
					apiWantUnauthorized(t, apiSendNoRedirect(t, tc, auth, rt.Method, path, body), rt.Method+" "+path+" with "+name)
				}
			}
		}
		for _, u := range unmatched {
			for name, auth := range bad {
				clock.Add(time.Minute)
				apiWantUnauthorized(t, apiSendNoRedirect(t, tc, auth, u.rt.Method, u.rt.Template, map[string]any{"initialShardCount": 3, "requestedBy": "x"}), u.rt.Method+" "+u.rt.Template+" with "+name)
			}
		}
	})
	t.Run("refused requests changed nothing", func(t *testing.T) {
		rdb := apiRedis(t, tc)
		if after := apiLogLen(t, tc, rdb); after != logBefore {
			t.Errorf("the event log grew from %d to %d entries", logBefore, after)
		}
		if after := apiKeys(t, tc, rdb); strings.Join(after, " ") != strings.Join(keysBefore, " ") {
			t.Errorf("Redis keys changed:\nbefore %q\nafter  %q", keysBefore, after)
		}
		r := apiSend(t, tc, boss, "GET", "/coord/v1/monitoring/groups", nil, nil).apiWant(t, 200)
		if groups := apiArr(t, r.JSON, "groups"); len(groups) != 1 {
			t.Errorf("%d groups, want only orders/oc: %s", len(groups), r.Body)
		}
		apiSend(t, tc, boss, "GET", apiGroupPath("members", "heartbeat"), nil, nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
	})
	t.Run("roles", func(t *testing.T) {
		for _, u := range apiRoleUsers {
			name := u["username"].(string)
			held := u["roles"].([]string)[0]
			auth := apiBasic(name, u["password"].(string))
			grants := func(required string) bool { return required == "" || slices.Contains(apiGrants[required], held) }
			for _, rt := range routes {
				role := apiRequiredRole(rt)
				for n := range apiNames {
					path := apiFillNamed(rt.Template, n, name)
					if n > 0 && path == apiFillNamed(rt.Template, 0, name) {
						continue
					}
					r := apiSendNoRedirect(t, tc, auth, rt.Method, path, apiRouteBody(rt, n, name))
					authRefusal := r.Status == 401 || (r.Status == 403 && len(r.Body) == 0)
					switch {
					case grants(role) && authRefusal:
						t.Errorf("%s (%s) on %s %s (needs %q): HTTP %d", name, held, rt.Method, path, role, r.Status)
					case !grants(role):
						apiWantForbidden(t, r, fmt.Sprintf("%s (%s) on %s %s (needs %s)", name, held, rt.Method, path, role))
					}
				}
			}
			for _, um := range unmatched {
				r := apiSendNoRedirect(t, tc, auth, um.rt.Method, um.rt.Template, map[string]any{"requestedBy": "x"})
				if !grants(wantUnmatchedRole(um.rt)) {
					apiWantForbidden(t, r, name+" on "+um.rt.Method+" "+um.rt.Template)
				} else if r.Status != um.want {
					t.Errorf("%s on %s %s: HTTP %d, want %d", name, um.rt.Method, um.rt.Template, r.Status, um.want)
				}
			}
		}
	})
}

// apiSendNoRedirect is apiSend without following redirects.
func apiSendNoRedirect(t *testing.T, tc *testCoordinator, auth apiAuth, method, path string, body any) apiResp {
	t.Helper()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, tc.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", string(auth))
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	out := apiResp{Status: resp.StatusCode, Header: resp.Header, Body: data}
	_ = json.Unmarshal(data, &out.JSON)
	return out
}

// apiUsersFile writes a users file and returns its path.
func apiUsersFile(t *testing.T, users []map[string]any) string {
	t.Helper()
	data, err := json.Marshal(users)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "users.json")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestIntegrationAuthRoles(t *testing.T) {
	parallel(t)
	users := apiUsersFile(t, []map[string]any{
		{"username": "reader", "password": "r-pw", "roles": []string{"READ"}},
		{"username": "monitor", "password": "mo-pw", "roles": []string{"MONITOR"}},
		{"username": "member", "password": "m-pw", "roles": []string{"MEMBER"}},
		{"username": "writer", "password": "w-pw", "roles": []string{"WRITE"}},
		{"username": "boss", "password": "b-pw", "roles": []string{"ADMIN"}},
	})
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) { m.UsersFile = users })
	reader, monitor, member := apiBasic("reader", "r-pw"), apiBasic("monitor", "mo-pw"), apiBasic("member", "m-pw")
	writer, boss := apiBasic("writer", "w-pw"), apiBasic("boss", "b-pw")
	createBody := func() map[string]any { return map[string]any{"initialShardCount": 2, "requestedBy": "x"} }

	// The configured users replace the default admin.
	apiWantUnauthorized(t, apiSend(t, tc, apiAdmin, "GET", "/coord/v1/monitoring/groups", nil, nil), "default admin with a users file")

	apiSend(t, tc, writer, "POST", apiGroupPath("orders", "oc"), createBody(), nil).apiWant(t, 201)
	apiSend(t, tc, boss, "POST", apiGroupPath("bossy", "boss"), createBody(), nil).apiWant(t, 201)

	cases := []struct {
		name   string
		auth   apiAuth
		method string
		path   string
		body   any
		want   int // 0: 403 with empty body
	}{
		{"reader GET group", reader, "GET", apiGroupPath("orders", "oc"), nil, 200},
		{"reader GET routing", reader, "GET", apiGroupPath("orders", "oc", "producer-routing"), nil, 200},
		{"reader GET monitoring", reader, "GET", apiMonPath("orders", "oc", "members"), nil, 200},
		{"reader create", reader, "POST", apiGroupPath("orders", "r"), createBody(), 0},
		{"reader scale", reader, "POST", apiGroupPath("orders", "oc", "scale"), map[string]any{"targetShardCount": 3, "requestedBy": "x", "reason": "y"}, 0},
		{"reader stream scale", reader, "POST", "/coord/v1/streams/orders/scale", map[string]any{"targetShardCount": 3, "requestedBy": "x", "reason": "y"}, 0},
		{"reader delete", reader, "DELETE", apiGroupPath("orders", "oc"), map[string]any{"requestedBy": "x", "reason": "y"}, 0},
		{"reader heartbeat", reader, "POST", apiHBPath("orders", "oc", "m1"), apiHBBody{Member: "m1"}.toMap(), 0},
		{"monitor GET group", monitor, "GET", apiGroupPath("orders", "oc"), nil, 200},
		{"monitor create", monitor, "POST", apiGroupPath("orders", "mo"), createBody(), 0},
		{"member heartbeat", member, "POST", apiHBPath("orders", "oc", "m1"), apiHBBody{Member: "m1"}.toMap(), 200},
		{"member GET group", member, "GET", apiGroupPath("orders", "oc"), nil, 0},
		{"member GET routing", member, "GET", apiGroupPath("orders", "oc", "producer-routing"), nil, 0},
		{"member monitoring", member, "GET", "/coord/v1/monitoring/groups", nil, 0},
		{"member create", member, "POST", apiGroupPath("orders", "m"), createBody(), 0},
		{"writer GET group", writer, "GET", apiGroupPath("orders", "oc"), nil, 200},
		{"writer heartbeat", writer, "POST", apiHBPath("orders", "oc", "m2"), apiHBBody{Member: "m2"}.toMap(), 0},
		{"writer scale", writer, "POST", apiGroupPath("orders", "oc", "scale"), map[string]any{"targetShardCount": 3, "requestedBy": "x", "reason": "y"}, 202},
		{"boss heartbeat", boss, "POST", apiHBPath("orders", "oc", "m3"), apiHBBody{Member: "m3"}.toMap(), 200},
		{"boss scale", boss, "POST", apiGroupPath("bossy", "boss", "scale"), map[string]any{"targetShardCount": 3, "requestedBy": "x", "reason": "y"}, 202},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := apiSend(t, tc, c.auth, c.method, c.path, c.body, nil)
			if c.want == 0 {
				apiWantForbidden(t, r, c.name)
				return
			}
			r.apiWant(t, c.want)
		})
	}
	t.Run("heartbeat needs credentials by default", func(t *testing.T) {
		apiWantUnauthorized(t, apiSend(t, tc, apiNoAuth, "POST", apiHBPath("orders", "oc", "m1"), apiHBBody{Member: "m1"}.toMap(), nil), "heartbeat")
		apiWantUnauthorized(t, apiSend(t, tc, apiBasic("member", "bad"), "POST", apiHBPath("orders", "oc", "m1"), apiHBBody{Member: "m1"}.toMap(), nil), "heartbeat, bad password")
	})
	t.Run("refused requests changed nothing", func(t *testing.T) {
		r := apiSend(t, tc, reader, "GET", "/coord/v1/monitoring/groups", nil, nil).apiWant(t, 200)
		if n := len(apiArr(t, r.JSON, "groups")); n != 2 {
			t.Errorf("%d groups, want 2", n)
		}
	})
	t.Run("session and login show the user's roles", func(t *testing.T) {
		r := apiSend(t, tc, reader, "GET", "/coord/v1/monitoring/session", nil, nil).apiWant(t, 200)
		apiJSONEqual(t, r.Body, `{"authenticated":true,"username":"reader","roles":["READ"],"prefixes":null,"groups":null}`)
		l := apiSend(t, tc, apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "member", "password": "m-pw"}, nil).apiWant(t, 200)
		if got := apiArr(t, l.JSON, "roles"); len(got) != 1 || got[0] != "MEMBER" {
			t.Errorf("member roles %v", got)
		}
		tok := apiAuth("Bearer " + l.JSON["accessToken"].(string))
		apiSend(t, tc, tok, "POST", apiHBPath("orders", "oc", "m4"), apiHBBody{Member: "m4"}.toMap(), nil).apiWant(t, 200)
		apiWantForbidden(t, apiSend(t, tc, tok, "GET", apiGroupPath("orders", "oc"), nil, nil), "member token on an admin GET")
	})
}

func TestIntegrationAuthLoginAndTokens(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	before := time.Now()
	l := apiSend(t, tc, apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "admin", "password": "password"}, nil).apiWant(t, 200)
	apiHasKeys(t, "LoginResponse", l.JSON, "accessToken", "tokenType", "expiresAt", "expiresInSeconds", "roles")
	tok, _ := l.JSON["accessToken"].(string)
	if tok == "" || l.JSON["tokenType"] != "Bearer" || l.JSON["expiresInSeconds"] != 604800.0 {
		t.Fatalf("login: %s", l.Body)
	}
	if got, _ := json.Marshal(l.JSON["roles"]); string(got) != `["ADMIN","MEMBER","MONITOR","READ","WRITE"]` {
		t.Fatalf("roles %s", got)
	}
	exp, err := time.Parse(time.RFC3339Nano, l.JSON["expiresAt"].(string))
	if err != nil || exp.Before(before.Add(7*24*time.Hour-2*time.Second)) || exp.After(time.Now().Add(7*24*time.Hour+2*time.Second)) {
		t.Fatalf("expiresAt %v (%v), want now + 7 days", l.JSON["expiresAt"], err)
	}

	session := "/coord/v1/monitoring/session"
	for _, scheme := range []string{"Bearer ", "bearer ", "BEARER "} {
		r := apiSend(t, tc, apiAuth(scheme+tok), "GET", session, nil, nil).apiWant(t, 200)
		if r.JSON["username"] != "admin" {
			t.Errorf("%q token: session %s", scheme, r.Body)
		}
	}
	for _, scheme := range []string{"Basic ", "basic "} {
		apiSend(t, tc, apiAuth(scheme+base64.StdEncoding.EncodeToString([]byte("admin:password"))), "GET", session, nil, nil).apiWant(t, 200)
	}
	apiSend(t, tc, apiAuth("Bearer "+tok), "POST", apiGroupPath("orders", "oc"), map[string]any{"initialShardCount": 2, "requestedBy": "x"}, nil).apiWant(t, 201)

	tampered := tok[:len(tok)-2] + "AA"
	if tampered == tok {
		tampered = tok[:len(tok)-2] + "BB"
	}
	parts := strings.SplitN(tok, ".", 2)
	forged := base64.RawURLEncoding.EncodeToString([]byte("v1\nadmin\n99999999999\nADMIN")) + "." + parts[1]
	for name, auth := range map[string]apiAuth{
		"tampered signature": apiAuth("Bearer " + tampered),
		"forged payload":     apiAuth("Bearer " + forged),
		"garbage":            "Bearer abc",
		"three parts":        apiAuth("Bearer " + tok + ".x"),
		"empty bearer":       "Bearer ",
		"bad password":       apiBasic("admin", "passwordx"),
		"bad base64":         "Basic !!!",
		"no colon":           apiAuth("Basic " + base64.StdEncoding.EncodeToString([]byte("admin"))),
	} {
		apiWantUnauthorized(t, apiSend(t, tc, auth, "GET", session, nil, nil), name)
	}

	for name, c := range map[string]struct {
		auth apiAuth
		body any
	}{
		"bad password":         {apiNoAuth, map[string]any{"username": "admin", "password": "nope"}},
		"unknown user":         {apiNoAuth, map[string]any{"username": "eve", "password": "password"}},
		"no body, no header":   {apiNoAuth, nil},
		"bad Basic header":     {apiBasic("admin", "nope"), nil},
		"bad token exchange":   {"Bearer " + apiAuth(tampered), nil},
		"body wins over token": {apiAuth("Bearer " + tok), map[string]any{"username": "admin", "password": "nope"}},
	} {
		t.Run("login fails: "+name, func(t *testing.T) {
			r := apiSend(t, tc, c.auth, "POST", "/coord/v1/auth/login", c.body, nil)
			if r.Status != 401 {
				t.Fatalf("HTTP %d body %s", r.Status, r.Body)
			}
			if _, ok := r.JSON["accessToken"]; ok {
				t.Fatalf("a failed login returned a token: %s", r.Body)
			}
		})
	}
	t.Run("login with the request's own credentials", func(t *testing.T) {
		for name, auth := range map[string]apiAuth{"Basic": apiAdmin, "token exchange": apiAuth("Bearer " + tok)} {
			r := apiSend(t, tc, auth, "POST", "/coord/v1/auth/login", nil, nil).apiWant(t, 200)
			if r.JSON["accessToken"] == "" || r.JSON["tokenType"] != "Bearer" {
				t.Errorf("%s: %s", name, r.Body)
			}
		}
	})
}

// TestIntegrationSecretsStayOutOfLogs: the admin password (and the credentials
// derived from it) never appear in the coordinator's log output, even at debug
// level, nor in the event log.
func TestIntegrationSecretsStayOutOfLogs(t *testing.T) {
	parallel(t)
	const secret = "Zx9-unique-admin-S3cret"
	logs := &apiSyncBuffer{}
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.AdminPassword = secret
		m.LogLevel = "debug"
		m.Stderr = logs
		m.TickInterval = 100 * time.Millisecond
	})
	admin := apiBasic("admin", secret)
	l := apiSend(t, tc, apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "admin", "password": secret}, nil).apiWant(t, 200)
	tok := l.JSON["accessToken"].(string)
	bearer := apiAuth("Bearer " + tok)
	apiSend(t, tc, apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "admin", "password": secret + "x"}, nil)
	apiSend(t, tc, apiBasic("admin", secret+"x"), "GET", "/coord/v1/monitoring/groups", nil, nil)
	apiSend(t, tc, admin, "POST", apiGroupPath("orders", "oc"), map[string]any{"initialShardCount": 2, "requestedBy": "x"}, nil).apiWant(t, 201)
	apiSend(t, tc, bearer, "POST", apiGroupPath("orders", "oc"), map[string]any{"initialShardCount": 2, "requestedBy": "x"}, nil).apiWant(t, 409)
	apiSend(t, tc, admin, "POST", apiGroupPath("orders", "oc", "scale"), map[string]any{"targetShardCount": 3, "requestedBy": "x", "reason": "y"}, nil).apiWant(t, 202)
	apiSend(t, tc, bearer, "POST", apiGroupPath("orders", "bad{"), map[string]any{"requestedBy": "x"}, nil).apiWant(t, 400)
	apiSend(t, tc, admin, "GET", apiGroupPath("orders", "nope"), nil, nil).apiWant(t, 404)
	apiSend(t, tc, admin, "POST", apiHBPath("orders", "oc", "m1"), apiHBBody{Member: "m1"}.toMap(), nil).apiWant(t, 200)
	apiSend(t, tc, admin, "GET", apiMonPath("orders", "oc", "offsets"), nil, nil).apiWant(t, 200)
	apiSend(t, tc, admin, "DELETE", apiGroupPath("orders", "oc"), map[string]any{"requestedBy": "x", "reason": "y", "force": true}, nil).apiWant(t, 200)
	// Let a few maintenance ticks run (100ms each) on purpose: whatever they
	// log is part of the output searched below; no condition marks their end.
	time.Sleep(500 * time.Millisecond)

	out := logs.String()
	if !strings.Contains(out, `"level":"debug"`) && !strings.Contains(out, `"level":"info"`) {
		t.Fatalf("captured no log output: %q", out)
	}
	leaks := map[string]string{
		"admin password":      secret,
		"Basic credentials":   strings.TrimPrefix(string(admin), "Basic "),
		"bearer token":        tok,
		"token signature":     strings.SplitN(tok, ".", 2)[1],
		"derived HMAC secret": "admin:" + secret,
	}
	for what, s := range leaks {
		if strings.Contains(out, s) {
			t.Errorf("the %s appears in the coordinator's log output", what)
		}
	}
	entries, err := apiRedis(t, tc).XRange(context.Background(), tc.Main.LogStream, "-", "+").Result()
	if err != nil || len(entries) == 0 {
		t.Fatalf("read the event log: %d entries, %v", len(entries), err)
	}
	for _, e := range entries {
		for k, v := range e.Values {
			for what, s := range leaks {
				if strings.Contains(k, s) || strings.Contains(toStringAPI(v), s) {
					t.Errorf("the %s appears in event %s", what, e.ID)
				}
			}
		}
	}
}

func toStringAPI(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// TestIntegrationBodyLimit: a body of exactly httpapi.MaxBodyBytes is read
// (whatever the handler then thinks of it, it is not a 413), one byte more is
// refused with 413 and an error body, and neither changes anything.
func TestIntegrationBodyLimit(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	apiCreate(t, tc, "orders", "oc", 2)
	// bodyOf is a JSON object of exactly n bytes (a reason far over any limit
	// on its length, so that no request below is carried out).
	bodyOf := func(n int) string {
		const head, tail = `{"requestedBy":"a","reason":"`, `"}`
		b := head + strings.Repeat("x", n-len(head)-len(tail)) + tail
		if len(b) != n {
			t.Fatalf("body of %d bytes, want %d", len(b), n)
		}
		return b
	}
	limit, over := bodyOf(httpapi.MaxBodyBytes), bodyOf(httpapi.MaxBodyBytes+1)
	for _, c := range []struct{ method, path string }{
		{"POST", apiGroupPath("orders", "big")},
		{"POST", "/coord/v1/streams/big"},
		{"POST", apiGroupPath("orders", "oc", "scale")},
		{"POST", "/coord/v1/streams/orders/scale"},
		{"DELETE", apiGroupPath("orders", "oc")},
		{"POST", apiGroupPath("orders", "oc", "migrations", "reshard-x", "rollback")},
		{"POST", apiHBPath("orders", "oc", "m1")},
		{"POST", "/coord/v1/auth/login"},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			r := apiSend(t, tc, apiAdmin, c.method, c.path, limit, nil)
			if r.Status == http.StatusRequestEntityTooLarge || r.Status >= 500 {
				t.Errorf("a body of exactly %d bytes: HTTP %d body %.200s, want it read (not 413)", httpapi.MaxBodyBytes, r.Status, r.Body)
			}
			t.Logf("a body of exactly %d bytes: HTTP %d %.120s", httpapi.MaxBodyBytes, r.Status, r.Body)
			r = apiSend(t, tc, apiAdmin, c.method, c.path, over, nil)
			if r.Status != http.StatusRequestEntityTooLarge {
				t.Fatalf("a body of %d bytes: HTTP %d body %.200s, want 413", httpapi.MaxBodyBytes+1, r.Status, r.Body)
			}
			if code, _ := r.JSON["errorCode"].(string); code == "" {
				t.Fatalf("413 without an errorCode: %.200s", r.Body)
			}
		})
	}
	apiDo(t, tc, "GET", apiGroupPath("orders", "big"), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
	if g := apiGroup(t, tc, "orders", "oc"); g["shardCount"] != 2.0 {
		t.Fatalf("an oversized request changed the group: %v", g)
	}
}

// TestIntegrationRateLimit: admin mutations are limited per principal, over
// every group and prefix (the reference keyed principal:prefix:group, so a
// loop over made-up group names had a fresh budget per name); a refused
// mutation answers 429 with Retry-After and appends nothing; heartbeats and
// reads are not limited; another principal has its own budget. The limit is
// on by default.
func TestIntegrationRateLimit(t *testing.T) {
	users := apiUsersFile(t, []map[string]any{
		{"username": "admin", "password": "password", "roles": []string{"ADMIN"}},
		{"username": "other", "password": "o-pw", "roles": []string{"WRITE"}},
	})
	var defaults *Main
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		defaults = &Main{RateLimitPerMinute: m.RateLimitPerMinute}
		m.RateLimitPerMinute = 3
		m.UsersFile = users
	})
	if defaults.RateLimitPerMinute != DefaultRateLimitPerMinute || DefaultRateLimitPerMinute <= 0 {
		t.Fatalf("--rate-limit-per-minute defaults to %d", defaults.RateLimitPerMinute)
	}
	rdb := apiRedis(t, tc)
	apiAvoidMinuteEdge()
	body := map[string]any{"initialShardCount": 2, "requestedBy": "x"}
	apiDo(t, tc, "POST", apiGroupPath("rl", "g"), body).apiWant(t, 201)
	apiDo(t, tc, "POST", apiGroupPath("rl", "g"), body).apiWantError(t, 409, "GROUP_ALREADY_EXISTS")
	apiScale(t, tc, "rl", "made-up-1", 3).apiWantError(t, 404, "GROUP_NOT_FOUND")
	logLen := apiLogLen(t, tc, rdb)
	for i, path := range []string{apiGroupPath("rl", "made-up-2", "scale"), apiGroupPath("other-prefix", "g", "scale"), apiGroupPath("rl", "g", "scale")} {
		r := apiDo(t, tc, "POST", path, map[string]any{"targetShardCount": 3, "requestedBy": "x", "reason": "r"}).apiWantError(t, 429, "RATE_LIMIT_EXCEEDED")
		if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 60 {
			t.Fatalf("%d: Retry-After %q, want 1..60 seconds", i, r.Header.Get("Retry-After"))
		}
	}
	apiDo(t, tc, "POST", "/coord/v1/streams/rls", body).apiWantError(t, 429, "RATE_LIMIT_EXCEEDED")
	if got := apiLogLen(t, tc, rdb); got != logLen {
		t.Fatalf("rate-limited mutations appended %d entries", got-logLen)
	}
	// Heartbeats and reads are never limited.
	for i := 0; i < 5; i++ {
		apiSend(t, tc, apiMember, "POST", apiHBPath("rl", "g", "m1"), apiHBBody{Member: "m1", Epoch: 7}.toMap(), nil).apiWant(t, 200)
		apiDo(t, tc, "GET", apiGroupPath("rl", "g"), nil).apiWant(t, 200)
	}
	// Another principal has its own budget.
	apiSend(t, tc, apiBasic("other", "o-pw"), "POST", apiGroupPath("rl", "g2"), body, nil).apiWant(t, 201)
	if g := apiGroup(t, tc, "rl", "g"); g["shardCount"] != 2.0 {
		t.Fatalf("a rate-limited scale changed the group: %v", g["shardCount"])
	}
}

// TestIntegrationPathInjection: path parameters cannot inject Redis keys or patterns.
func TestIntegrationPathInjection(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	rdb := apiRedis(t, tc)
	apiCreate(t, tc, "orders", "oc", 2)
	keysBefore := apiKeys(t, tc, rdb)
	for _, bad := range []string{"a*", "*", "a b", "a\x01", "{x}", "a?", "[ab]", "orders:0\r\nFLUSHALL"} {
		t.Run(strconv.Quote(bad), func(t *testing.T) {
			create := map[string]any{"initialShardCount": 2, "requestedBy": "x"}
			scale := map[string]any{"targetShardCount": 3, "requestedBy": "x", "reason": "y"}
			apiDo(t, tc, "POST", apiGroupPath(bad, "g"), create).apiWantError(t, 400, "INVALID_REQUEST")
			apiDo(t, tc, "POST", apiGroupPath("orders", bad), create).apiWantError(t, 400, "INVALID_REQUEST")
			apiDo(t, tc, "POST", "/coord/v1/streams/"+apiEsc(bad), create).apiWantError(t, 400, "INVALID_REQUEST")
			apiDo(t, tc, "POST", "/coord/v1/streams/"+apiEsc(bad)+"/scale", scale).apiWantError(t, 400, "INVALID_REQUEST")
			apiDo(t, tc, "POST", apiGroupPath(bad, "g", "scale"), scale).apiWantError(t, 400, "INVALID_REQUEST")
			apiDo(t, tc, "GET", apiGroupPath(bad, "g", "producer-routing"), nil).apiWantError(t, 400, "INVALID_REQUEST")
			apiDo(t, tc, "GET", apiMonPath(bad, "g", "offsets"), nil).apiWantError(t, 400, "INVALID_REQUEST")
			apiDo(t, tc, "GET", apiMonPath(bad, "g", "shards", "0", "messages"), nil).apiWantError(t, 400, "INVALID_REQUEST")
			// A name no group can have is a 400 on the heartbeat route too.
			apiSend(t, tc, apiMember, "POST", apiHBPath(bad, "g", "m1"), apiHBBody{Member: "m1"}.toMap(), nil).apiWantError(t, 400, "INVALID_REQUEST")
		})
	}
	if after := apiKeys(t, tc, rdb); strings.Join(after, "\n") != strings.Join(keysBefore, "\n") {
		t.Fatalf("Redis keys changed:\nbefore %q\nafter  %q", keysBefore, after)
	}
	if n := rdb.DBSize(context.Background()).Val(); n == 0 {
		t.Fatalf("Redis is empty")
	}
}
