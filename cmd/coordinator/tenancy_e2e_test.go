package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
)

// Many tenants, one coordinator (#19): the attacks that worked, as the
// issue tells them, against the real program and a real Redis.

// tenSend sends a request to base from the loopback address from (any of
// 127.0.0.0/8 on Linux; "" for the default), on a fresh connection.
func tenSend(tb testing.TB, base, from string, auth apiAuth, method, path string, body any, hdr map[string]string) apiResp {
	tb.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			tb.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		tb.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth != "" {
		req.Header.Set("Authorization", string(auth))
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	if from != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(from)}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	out := apiResp{Status: resp.StatusCode, Header: resp.Header, Body: data}
	_ = json.Unmarshal(data, &out.JSON)
	return out
}

// tenLogLen is the log's length.
func tenLogLen(tb testing.TB, tc *testCoordinator) int64 {
	tb.Helper()
	return apiLogLen(tb, tc, apiRedis(tb, tc))
}

// TestIntegrationScopedPrincipals: any MEMBER principal could join any group
// (another service filled a group to its member cap) and any WRITE principal
// could scale or delete any group, or park a group on another team's prefix.
// Now a user with "prefixes" has its roles only on those prefixes: every
// route naming another prefix is the empty-body 403 and changes nothing, and
// the lists show only its prefixes. A user without "prefixes" covers all.
func TestIntegrationScopedPrincipals(t *testing.T) {
	parallel(t)
	users := apiUsersFile(t, []map[string]any{
		{"username": "admin", "password": "password", "roles": []string{"ADMIN"}},
		{"username": "orders-svc", "password": "o-pw", "roles": []string{"WRITE", "MEMBER"}, "prefixes": []string{"orders", "pay-*"}},
		{"username": "other-svc", "password": "x-pw", "roles": []string{"WRITE", "MEMBER"}, "prefixes": []string{"other"}},
	})
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) { m.UsersFile = users; m.usersPoll = 50 * time.Millisecond })
	apiCreate(t, tc, "orders", "oc", 4)
	apiCreate(t, tc, "other", "g", 1)
	orders, other := apiBasic("orders-svc", "o-pw"), apiBasic("other-svc", "x-pw")
	as := func(auth apiAuth, method, path string, body any) apiResp {
		return apiSend(t, tc, auth, method, path, body, nil)
	}
	forbidden := func(r apiResp, what string) {
		t.Helper()
		apiWantForbidden(t, r, what)
	}

	before := tenLogLen(t, tc)
	t.Run("another prefix is 403 on every route and changes nothing", func(t *testing.T) {
		for i := 0; i < 20; i++ {
			id := fmt.Sprintf("squatter-%d", i)
			forbidden(as(other, "POST", apiHBPath("orders", "oc", id), apiHBBody{Member: id}.toMap()), "join")
		}
		scale := map[string]any{"targetShardCount": 1, "requestedBy": "x", "reason": "r"}
		create := map[string]any{"initialShardCount": 1, "requestedBy": "x"}
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{"POST", apiGroupPath("orders", "oc", "scale"), scale},
			{"DELETE", apiGroupPath("orders", "oc"), map[string]any{"requestedBy": "x", "reason": "r", "force": true}},
			{"POST", apiGroupPath("orders", "parked"), create}, // a sibling that would hold every scale-in's drain
			{"POST", "/coord/v1/streams/orders", create},
			{"POST", "/coord/v1/streams/orders/scale", scale},
			{"POST", "/coord/v1/streams/%6Frders/scale", scale}, // percent-encoded: still "orders"
			{"PUT", apiGroupPath("orders", "oc", "autoscaling"), map[string]any{"enabled": true}},
			{"GET", apiGroupPath("orders", "oc"), nil},
			{"GET", apiGroupPath("orders", "oc", "producer-routing"), nil},
			{"GET", apiMonPath("orders", "oc", "members"), nil},
			{"GET", apiMonPath("orders", "oc", "events"), nil},
			{"GET", apiMonPath("orders", "oc", "replay"), nil},
			{"GET", apiMonPath("orders", "oc", "shards", "0", "messages"), nil},
			{"GET", gfPath("/shards", "streamPrefix", "orders", "consumerGroup", "oc"), nil},
			{"GET", gfPath("/messages", "streamPrefix", "orders", "consumerGroup", "oc"), nil},
			{"GET", gfPath("/options/consumer-groups", "streamPrefix", "orders"), nil},
			{"POST", apiGroupPath("payments", "x"), create}, // "pay-*" does not cover "payments"
		} {
			who := other
			if strings.Contains(c.path, "payments") {
				who = orders
			}
			forbidden(as(who, c.method, c.path, c.body), c.method+" "+c.path)
		}
		if got := tenLogLen(t, tc); got != before {
			t.Fatalf("refused requests appended %d log entries", got-before)
		}
		if ms := apiArr(t, apiDo(t, tc, "GET", apiMonPath("orders", "oc", "members"), nil).apiWant(t, 200).JSON, "members"); len(ms) != 0 {
			t.Fatalf("orders/oc has members %v", ms)
		}
	})

	t.Run("its own prefixes work", func(t *testing.T) {
		hb := apiHeartbeat(t, tc, orders, "orders", "oc", "o1", apiHBBody{Member: "o1"}.toMap())
		if len(hb.Assigned) != 4 {
			t.Fatalf("orders-svc's member: %s", hb.Body)
		}
		as(orders, "POST", apiGroupPath("pay-eu", "g"), map[string]any{"initialShardCount": 1, "requestedBy": "x"}).apiWant(t, 201)
		as(other, "POST", apiGroupPath("other", "g2"), map[string]any{"initialShardCount": 1, "requestedBy": "x"}).apiWant(t, 201)
	})

	t.Run("lists show only its prefixes", func(t *testing.T) {
		prefixesOf := func(rows []any, key string) map[string]bool {
			out := map[string]bool{}
			for _, r := range rows {
				out[r.(map[string]any)[key].(string)] = true
			}
			return out
		}
		groups := apiArr(t, as(other, "GET", "/coord/v1/monitoring/groups", nil).apiWant(t, 200).JSON, "groups")
		if p := prefixesOf(groups, "streamPrefix"); len(p) != 1 || !p["other"] {
			t.Fatalf("other-svc's groups: %v", p)
		}
		evs := apiArr(t, as(other, "GET", "/coord/v1/monitoring/events?limit=1000", nil).apiWant(t, 200).JSON, "events")
		if p := prefixesOf(evs, "streamPrefix"); len(p) != 1 || !p["other"] || len(evs) < 2 {
			t.Fatalf("other-svc's events: %d, prefixes %v", len(evs), p)
		}
		for _, route := range []string{gfPath("/groups"), gfPath("/shards", "streamPrefix", "", "consumerGroup", ""), gfPath("/options/consumer-groups")} {
			var rows []map[string]any
			r := as(other, "GET", route, nil).apiWant(t, 200)
			if err := json.Unmarshal(r.Body, &rows); err != nil {
				t.Fatal(err)
			}
			for _, row := range rows {
				if p, ok := row["streamPrefix"]; ok && p != "other" {
					t.Fatalf("%s shows %v to other-svc", route, row)
				}
				if txt, ok := row["__text"].(string); ok && !strings.HasPrefix(txt, "other ") {
					t.Fatalf("%s shows %v to other-svc", route, row)
				}
			}
			if len(rows) == 0 {
				t.Fatalf("%s shows other-svc nothing", route)
			}
		}
		apiJSONEqual(t, as(other, "GET", gfPath("/options/streams"), nil).apiWant(t, 200).Body, `[{"__text":"other","__value":"other"}]`)
		s := as(orders, "GET", "/coord/v1/monitoring/session", nil).apiWant(t, 200)
		apiJSONEqual(t, s.Body, `{"authenticated":true,"username":"orders-svc","roles":["MEMBER","WRITE"],"prefixes":["orders","pay-*"],"groups":null}`)
		if n := len(apiArr(t, apiDo(t, tc, "GET", "/coord/v1/monitoring/groups", nil).apiWant(t, 200).JSON, "groups")); n != 4 {
			t.Fatalf("the unscoped admin sees %d groups, want 4", n)
		}
	})

	t.Run("a token's scope is the user's current one", func(t *testing.T) {
		l := as(apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "orders-svc", "password": "o-pw"}).apiWant(t, 200)
		tok := apiAuth("Bearer " + l.JSON["accessToken"].(string))
		as(tok, "GET", apiGroupPath("orders", "oc"), nil).apiWant(t, 200)
		apiWriteUsers(t, users, []map[string]any{
			{"username": "admin", "password": "password", "roles": []string{"ADMIN"}},
			{"username": "orders-svc", "password": "o-pw", "roles": []string{"WRITE", "MEMBER"}, "prefixes": []string{"pay-*"}},
		})
		apiEventually(t, 5*time.Second, "the narrower scope to apply to the token", func() (bool, string) {
			r := as(tok, "GET", apiGroupPath("orders", "oc"), nil)
			return r.Status == 403 && len(r.Body) == 0, fmt.Sprint(r.Status)
		})
		as(tok, "GET", apiGroupPath("pay-eu", "g"), nil).apiWant(t, 200)
	})

	t.Run("a users file with a bad scope is refused", func(t *testing.T) {
		for _, prefixes := range [][]string{{}, {"pa*y"}, {"*orders"}} {
			f := apiUsersFile(t, []map[string]any{{"username": "u", "password": "p", "roles": []string{"READ"}, "prefixes": prefixes}})
			if _, _, err := readUsers(f); err == nil || !strings.Contains(err.Error(), "prefixes") {
				t.Errorf("prefixes %q: %v", prefixes, err)
			}
		}
	})
}

// TestIntegrationLoginLockoutProof: ten `curl -u mem1:wrongN .../healthz`
// from a client without credentials filled mem1's failed-login bucket, and
// the real mem1 then got 429 on heartbeats and on login while its member
// expired holding its shards. Now public routes read no credentials, and
// failures count per (user, client address) and per address: a guesser, even
// one that keeps failing on API routes, throttles only itself. Throttling is
// logged, at most once a second per reason.
func TestIntegrationLoginLockoutProof(t *testing.T) {
	parallel(t)
	users := apiUsersFile(t, []map[string]any{
		{"username": "admin", "password": "password", "roles": []string{"ADMIN"}},
		{"username": "mem1", "password": "m-pw", "roles": []string{"MEMBER", "READ"}},
	})
	logs := &apiSyncBuffer{}
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) { m.UsersFile = users; m.Stderr = logs })
	apiCreate(t, tc, "lock", "g", 2)
	const attacker, member = "127.0.0.2", "127.0.0.3"
	mem1 := apiBasic("mem1", "m-pw")
	for i := 0; i < 50; i++ {
		tenSend(t, tc.URL, attacker, apiBasic("mem1", fmt.Sprintf("wrong%d", i)), "GET", "/healthz", nil, nil).apiWant(t, 200)
	}
	hb := apiHBBody{Member: "m1"}.toMap()
	tenSend(t, tc.URL, attacker, mem1, "POST", apiHBPath("lock", "g", "m1"), hb, nil).apiWant(t, 200)

	// The guesser now fails on API routes too, until it is throttled.
	throttled := 0
	for i := 0; i < 40; i++ {
		r := tenSend(t, tc.URL, attacker, apiBasic("mem1", fmt.Sprintf("guess%d", i)), "POST", apiHBPath("lock", "g", "m1"), hb, nil)
		if r.Status == 429 {
			throttled++
		}
	}
	if throttled == 0 {
		t.Fatal("40 wrong passwords from one address were never throttled")
	}
	// mem1 from its own address is never refused: heartbeats and login.
	for i := 0; i < 5; i++ {
		tenSend(t, tc.URL, member, mem1, "POST", apiHBPath("lock", "g", "m1"), hb, nil).apiWant(t, 200)
	}
	tenSend(t, tc.URL, member, apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "mem1", "password": "m-pw"}, nil).apiWant(t, 200)
	tenSend(t, tc.URL, attacker, apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "mem1", "password": "m-pw"}, nil).apiWantError(t, 429, "RATE_LIMIT_EXCEEDED")
	apiEventually(t, 5*time.Second, "the throttling to be logged", func() (bool, string) {
		return strings.Contains(logs.String(), "password checks throttled"), ""
	})
	if n := strings.Count(logs.String(), "password checks throttled"); n > 10 {
		t.Fatalf("throttling logged %d times in a few seconds: not rate-limited", n)
	}
	if line := grepLines(logs.String(), "password checks throttled"); !strings.Contains(line, attacker) || !strings.Contains(line, "mem1") {
		t.Fatalf("the throttling line does not name the client and user: %s", line)
	}
}

// TestIntegrationBrowserSafeMutations: a scale with Content-Type text/plain,
// Origin https://evil.example and Sec-Fetch-Site cross-site was accepted
// (202); API 401s asked browsers for Basic credentials they then cache; with
// the default credentials on loopback a request for Host
// rebind.attacker.example was served. Now cross-site mutations are 403, a
// body must be JSON (415), a Host that is not loopback or allowed gets
// nothing on any route, and browsers are challenged with Bearer. API clients
// see the contract's Basic challenge, and the same-origin console works.
func TestIntegrationBrowserSafeMutations(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) { m.AllowedHosts = "coord.internal,.corp.example" })
	apiCreate(t, tc, "web", "g", 2)
	before := tenLogLen(t, tc)
	scale := apiGroupPath("web", "g", "scale")
	body := `{"targetShardCount":3,"requestedBy":"x","reason":"r"}`
	send := func(hdr map[string]string) apiResp {
		return tenSend(t, tc.URL, "", apiAdmin, "POST", scale, body, hdr)
	}
	host := strings.TrimPrefix(tc.URL, "http://")
	send(map[string]string{"Content-Type": "text/plain", "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}).apiWantError(t, 403, "CROSS_SITE_REQUEST")
	send(map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"}).apiWantError(t, 403, "CROSS_SITE_REQUEST")
	send(map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site"}).apiWantError(t, 403, "CROSS_SITE_REQUEST")
	send(map[string]string{"Content-Type": "application/json", "Origin": "null"}).apiWantError(t, 403, "CROSS_SITE_REQUEST")
	send(map[string]string{"Content-Type": "text/plain"}).apiWantError(t, 415, "UNSUPPORTED_MEDIA_TYPE")
	send(map[string]string{"Content-Type": "application/x-www-form-urlencoded"}).apiWantError(t, 415, "UNSUPPORTED_MEDIA_TYPE")
	send(map[string]string{"Content-Type": ""}).apiWantError(t, 415, "UNSUPPORTED_MEDIA_TYPE")
	for _, h := range []string{"rebind.attacker.example", "rebind.attacker.example:" + strings.Split(host, ":")[1], "10.1.2.3"} {
		for _, path := range []string{"/coord/v1/monitoring/groups", "/console/", "/healthz", "/metrics"} {
			tenSend(t, tc.URL, "", apiAdmin, "GET", path, nil, map[string]string{"Host": h}).apiWantError(t, 403, "HOST_NOT_ALLOWED")
		}
		tenSend(t, tc.URL, "", apiAdmin, "POST", scale, body, map[string]string{"Host": h}).apiWantError(t, 403, "HOST_NOT_ALLOWED")
	}
	if got := tenLogLen(t, tc); got != before {
		t.Fatalf("refused mutations appended %d log entries", got-before)
	}
	for _, h := range []string{host, "localhost", "[::1]:1", "coord.internal", "a.corp.example"} {
		tenSend(t, tc.URL, "", apiAdmin, "GET", "/coord/v1/monitoring/groups", nil, map[string]string{"Host": h}).apiWant(t, 200)
	}
	// The same origin, as the console sends it, with JSON.
	send(map[string]string{"Origin": tc.URL, "Sec-Fetch-Site": "same-origin"}).apiWant(t, 202)

	apiWantUnauthorized(t, tenSend(t, tc.URL, "", apiNoAuth, "GET", "/coord/v1/monitoring/groups", nil, nil), "curl")
	for _, hdr := range []map[string]string{{"Sec-Fetch-Mode": "navigate"}, {"Sec-Fetch-Site": "none", "Sec-Fetch-Dest": "document"}, {"Origin": tc.URL}} {
		r := tenSend(t, tc.URL, "", apiNoAuth, "GET", "/coord/v1/monitoring/groups", nil, hdr)
		if r.Status != 401 || len(r.Body) != 0 || strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Basic") || r.Header.Get("WWW-Authenticate") == "" {
			t.Fatalf("browser %v: HTTP %d, WWW-Authenticate %q, want 401 without a Basic challenge", hdr, r.Status, r.Header.Get("WWW-Authenticate"))
		}
	}
}

// TestIntegrationTokensBoundToTheirRules: a token whose expiry was ten years
// out was accepted with --token-ttl 7 days (anyone who reads the secret in
// Redis could mint one), and a password change left old tokens valid, able
// to buy fresh ones. Now a token lives at most the current TTL after it was
// issued, and only the user's current password's key verifies it.
func TestIntegrationTokensBoundToTheirRules(t *testing.T) {
	parallel(t)
	alice := map[string]any{"username": "alice", "password": "a-pw", "roles": []string{"READ"}}
	users := apiUsersFile(t, []map[string]any{alice})
	clock := &apiManualClock{t: time.Now()}
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.UsersFile, m.usersPoll, m.clock = users, 50*time.Millisecond, clock.Now
	})
	key, _ := redisstore.TokenSecretKey(tc.Main.LogStream)
	secret := apiRedis(t, tc).Get(context.Background(), key).Val()
	const path = "/coord/v1/monitoring/groups"
	now := clock.Now()
	tenYears := now.AddDate(10, 0, 0)
	apiWantUnauthorized(t, apiSend(t, tc, apiAuth("Bearer "+apiSign(secret, "alice", tenYears, "READ")), "GET", path, nil, nil), "ten years, the secret from Redis")
	apiWantUnauthorized(t, apiSend(t, tc, apiAuth("Bearer "+apiSignUser(secret, "alice", "a-pw", now.AddDate(0, 0, -8), tenYears, "READ")), "GET", path, nil, nil), "ten years, issued 8 days ago")
	long := apiAuth("Bearer " + apiSignUser(secret, "alice", "a-pw", now, tenYears, "READ"))
	apiSend(t, tc, long, "GET", path, nil, nil).apiWant(t, 200)
	clock.Add(httpapi.DefaultTokenTTL)
	apiWantUnauthorized(t, apiSend(t, tc, long, "GET", path, nil, nil), "ten years, issued a TTL ago")

	l := apiSend(t, tc, apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "alice", "password": "a-pw"}, nil).apiWant(t, 200)
	tok := apiAuth("Bearer " + l.JSON["accessToken"].(string))
	apiSend(t, tc, tok, "GET", path, nil, nil).apiWant(t, 200)
	alice["password"] = "new-pw"
	apiWriteUsers(t, users, []map[string]any{alice})
	apiEventually(t, 5*time.Second, "the password change to revoke the token", func() (bool, string) {
		r := apiSend(t, tc, tok, "GET", path, nil, nil)
		return r.Status == 401, fmt.Sprint(r.Status)
	})
	apiSend(t, tc, tok, "POST", "/coord/v1/auth/login", nil, nil).apiWant(t, 401)
	apiSend(t, tc, apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "alice", "password": "new-pw"}, nil).apiWant(t, 200)
}

// capture records what a fake leader receives.
type capture struct {
	mu   sync.Mutex
	reqs []*http.Request
	body [][]byte
}

func (c *capture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.reqs = append(c.reqs, r.Clone(context.Background()))
	c.body = append(c.body, b)
	c.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

func (c *capture) all() ([]*http.Request, [][]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*http.Request{}, c.reqs...), append([][]byte{}, c.body...)
}

// TestIntegrationForwardingCarriesNoSecrets: whoever could write the lease
// hash (HSET {log}:leader url http://...) received every forwarded request
// with the user's Authorization: Basic. Now a follower authenticates the
// caller itself and forwards a signed principal assertion instead: the fake
// leader gets no Authorization header, and an assertion the real leader
// accepts for no other request and, after a few seconds, for none.
// Failures through a follower count against the real client: 30 bad tokens
// from one client did block every password request through that follower.
func TestIntegrationForwardingCarriesNoSecrets(t *testing.T) {
	h, rdb := startHA(t, 2, "--allow-anonymous-members")
	leader := h.waitLeader(20 * time.Second)
	follower := 1 - leader
	lu, fu := h.replicas[leader].URL(), h.replicas[follower].URL()
	tenSend(t, lu, "", apiAdmin, "POST", apiGroupPath("fwd", "g"), map[string]any{"initialShardCount": 2, "requestedBy": "x"}, nil).apiWant(t, 201)

	t.Run("failures through a follower count against the client", func(t *testing.T) {
		hb := apiHBBody{Member: "m1"}.toMap()
		for i := 0; i < 40; i++ {
			tenSend(t, fu, "127.0.0.2", apiAuth(fmt.Sprintf("Bearer bad.%d", i)), "POST", apiHBPath("fwd", "g", "m1"), hb, nil)
		}
		tenSend(t, fu, "127.0.0.3", apiAdmin, "POST", apiGroupPath("fwd", "g", "scale"), map[string]any{"targetShardCount": 3, "requestedBy": "x", "reason": "r"}, nil).apiWant(t, 202)
		tenSend(t, fu, "127.0.0.2", apiAdmin, "POST", apiGroupPath("fwd", "g", "scale"), map[string]any{"targetShardCount": 4, "requestedBy": "x", "reason": "r"}, nil).apiWantError(t, 429, "RATE_LIMIT_EXCEEDED")
	})

	fake := &capture{}
	fs := httptest.NewServer(fake)
	defer fs.Close()
	if err := rdb.HSet(context.Background(), "{"+h.log+"}:leader", "url", fs.URL).Err(); err != nil {
		t.Fatal(err)
	}
	apiEventually(t, 10*time.Second, "the follower to take the fake URL for the leader's", func() (bool, string) {
		r, err := readyz(fu)
		return err == nil && r.LeaderURL == fs.URL, r.LeaderURL
	})
	const scale = "/coord/v1/streams/fwd/groups/g/scale"
	body := `{"targetShardCount":1,"requestedBy":"x","reason":"r"}`
	tenSend(t, fu, "", apiAdmin, "POST", scale, body, nil).apiWant(t, 202)
	reqs, bodies := fake.all()
	if len(reqs) == 0 {
		t.Fatal("the fake leader received nothing")
	}
	var got *http.Request
	for i, r := range reqs {
		if auth := r.Header.Get("Authorization"); auth != "" {
			t.Fatalf("the fake leader received Authorization %q", auth)
		}
		if strings.Contains(string(bodies[i]), "password") {
			t.Fatalf("the fake leader received a body with a password: %s", bodies[i])
		}
		if r.URL.Path == scale {
			got = r
		}
	}
	assertion := got.Header.Get("X-Rsc-Principal-Assertion")
	if assertion == "" {
		t.Fatalf("the forwarded request carries no assertion: %v", got.Header)
	}
	replay := func(method, path, body string) apiResp {
		return tenSend(t, lu, "", apiNoAuth, method, path, body, map[string]string{"X-Rsc-Principal-Assertion": assertion, "X-Rsc-Forwarded-By": "replica-x"})
	}
	replay("DELETE", apiGroupPath("fwd", "g"), `{"requestedBy":"x","reason":"r","force":true}`).apiWantError(t, 403, "FORWARDED_REQUEST_REFUSED")
	replay("POST", apiGroupPath("fwd", "other"), `{"initialShardCount":1,"requestedBy":"x"}`).apiWantError(t, 403, "FORWARDED_REQUEST_REFUSED")
	replay("POST", scale, `{"targetShardCount":9,"requestedBy":"x","reason":"r"}`).apiWantError(t, 403, "FORWARDED_REQUEST_REFUSED")
	// The very request, replayed at once, is what the assertion vouches for
	// (for ForwardAssertionTTL); then nothing.
	if r := replay("POST", scale, body); r.Status == 403 {
		t.Fatalf("the very request within its assertion's life: %d %s", r.Status, r.Body)
	}
	apiEventually(t, 15*time.Second, "the captured assertion to expire", func() (bool, string) {
		r := replay("POST", scale, body)
		return r.Status == 403 && r.JSON["errorCode"] == "FORWARDED_REQUEST_REFUSED", fmt.Sprint(r.Status)
	})
}

// TestHostPolicyFlags: the Host check is on with a loopback --listen or
// --allowed-hosts, allows the host of --advertise-url (replicas forward under
// it), and --allowed-hosts refuses what is not a host.
func TestHostPolicyFlags(t *testing.T) {
	for _, c := range []struct {
		m        Main
		restrict bool
		allowed  string
	}{
		{Main{Listen: "127.0.0.1:8080"}, true, "[]"},
		{Main{Listen: ":8080"}, false, "[]"},
		{Main{Listen: ":8080", AllowedHosts: "coord.example, .corp.example"}, true, "[coord.example .corp.example]"},
		{Main{Listen: "127.0.0.1:8081", AdvertiseURL: "http://replica-1.internal:8081"}, true, "[replica-1.internal]"},
	} {
		p := c.m.hostPolicy()
		if p.Restrict != c.restrict || fmt.Sprint(p.Allowed) != c.allowed {
			t.Errorf("%+v: %+v, want restrict %v allowed %s", c.m, p, c.restrict, c.allowed)
		}
	}
	for _, bad := range []string{"http://coord.example", "coord.example:8080", "coord.example/x", "*.example", "."} {
		if err := checkAllowedHosts(bad); err == nil {
			t.Errorf("--allowed-hosts %q accepted", bad)
		}
	}
	for _, good := range []string{"coord.example", ".corp.example", "10.0.0.1", "::1", "a,b"} {
		if err := checkAllowedHosts(good); err != nil {
			t.Errorf("--allowed-hosts %q: %v", good, err)
		}
	}
}
