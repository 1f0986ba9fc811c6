package httpapi_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// Tests of the transport's defences: throttled logins, tokens that follow the
// user table, header and read limits, request ids and errors that do not leak.

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// secServer is a Server over an in-memory log, served by httptest. Its
// requests come from 127.0.0.1 unless from names another loopback address.
type secServer struct {
	*httptest.Server
	api  *httpapi.Server
	from string
}

// as is the server seen from another client address (127.0.0.0/8 is all
// loopback on Linux: a client may bind any of it).
func (s *secServer) as(addr string) *secServer {
	c := *s
	c.from = addr
	return &c
}

func (s *secServer) client() *http.Client {
	if s.from == "" {
		return http.DefaultClient
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(s.from)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
}

func newSecServer(t *testing.T, cfg httpapi.Config, streams httpapi.StreamReader) *secServer {
	t.Helper()
	c := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop()}, events.NewMemLog(), nil, nil, nil)
	if err := c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c.Run()
	t.Cleanup(c.Close)
	cfg.Logger = zerolog.Nop()
	api := httpapi.NewServer(cfg, httpapi.PartsOf(c), streams)
	srv := httptest.NewUnstartedServer(api)
	srv.Config.ConnContext = api.ConnContext
	srv.Start()
	t.Cleanup(srv.Close)
	return &secServer{Server: srv, api: api}
}

type answer struct {
	code   int
	header http.Header
	body   string
	json   map[string]any
}

func (s *secServer) call(t *testing.T, method, path, auth, body string, hdr map[string]string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := s.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{code: resp.StatusCode, header: resp.Header, body: string(b)}
	_ = json.Unmarshal(b, &a.json)
	return a
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func (a answer) want(t *testing.T, code int, what string) answer {
	t.Helper()
	if a.code != code {
		t.Fatalf("%s: HTTP %d, want %d; body %s", what, a.code, code, a.body)
	}
	return a
}

// wantThrottled: 429 RATE_LIMIT_EXCEEDED with Retry-After in [min, max] seconds.
func (a answer) wantThrottled(t *testing.T, what string, minS, maxS int) {
	t.Helper()
	a.want(t, http.StatusTooManyRequests, what)
	if a.json["errorCode"] != "RATE_LIMIT_EXCEEDED" || a.json["status"] != "TOO_MANY_REQUESTS" {
		t.Fatalf("%s: body %s, want the ErrorResponse of RATE_LIMIT_EXCEEDED", what, a.body)
	}
	if s, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || s < minS || s > maxS {
		t.Fatalf("%s: Retry-After %q, want %d..%d seconds", what, a.header.Get("Retry-After"), minS, maxS)
	}
}

// persistent is a client from addr that keeps one connection open.
func (s *secServer) persistent(addr string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}}
}

// TestFailedLoginsAreThrottled: failures spend the buckets of the address
// they come from, never a user's alone. From one address, a user gets 10
// failed password checks, then one every 6 s; the address 30, then one every
// 2 s; a refused check does not look at the password; bad bearer tokens spend
// the address's bucket. The same user from another address is never refused,
// and bad credentials sent to a public route spend nothing.
func TestFailedLoginsAreThrottled(t *testing.T) {
	clock := newFakeClock()
	users := []httpapi.User{
		{Username: "alice", Password: "a-pw", Roles: []string{"READ"}},
		{Username: "bob", Password: "b-pw", Roles: []string{"READ"}},
	}
	s := newSecServer(t, httpapi.Config{Now: clock.Now, Auth: httpapi.AuthConfig{Users: users, TokenSecret: "s"}}, nil)
	attacker, home := s.as("127.0.0.2"), s.as("127.0.0.3")
	const groups = "/coord/v1/monitoring/groups"
	login := func(from *secServer, user, pass string) answer {
		return from.call(t, "POST", "/coord/v1/auth/login", "", fmt.Sprintf(`{"username":%q,"password":%q}`, user, pass), nil)
	}

	for i := 1; i <= 10; i++ {
		if a := attacker.call(t, "GET", groups, basic("alice", "guess"+strconv.Itoa(i)), "", nil); a.code != 401 {
			t.Fatalf("wrong password %d: HTTP %d, want 401", i, a.code)
		}
	}
	attacker.call(t, "GET", groups, basic("alice", "guess11"), "", nil).wantThrottled(t, "11th wrong password", 1, 6)
	attacker.call(t, "GET", groups, basic("alice", "a-pw"), "", nil).wantThrottled(t, "the right password from the guessing address", 1, 6)
	login(attacker, "alice", "a-pw").wantThrottled(t, "login body from the guessing address", 1, 6)
	// Alice herself, from her own address, is not refused.
	home.call(t, "GET", groups, basic("alice", "a-pw"), "", nil).want(t, 200, "alice from her address")
	login(home, "alice", "a-pw").want(t, 200, "alice logs in from her address")

	// Another user from the guessing address is not affected...
	attacker.call(t, "GET", groups, basic("bob", "b-pw"), "", nil).want(t, 200, "bob")
	tok := login(attacker, "bob", "b-pw").want(t, 200, "bob logs in").json["accessToken"].(string)
	// ...until the address's bucket (30) is empty: 10 spent on alice, 20 more here.
	for i := 0; i < 20; i++ {
		user := "nobody" + strconv.Itoa(i/10) // 10 each: their own buckets stay usable
		if a := login(attacker, user, "x"); a.code != 401 {
			t.Fatalf("failure %d from the address: HTTP %d", i, a.code)
		}
	}
	attacker.call(t, "GET", groups, basic("bob", "b-pw"), "", nil).wantThrottled(t, "bob once the address's bucket is empty", 1, 2)
	login(attacker, "bob", "b-pw").wantThrottled(t, "bob's login once the address's bucket is empty", 1, 2)
	home.call(t, "GET", groups, basic("bob", "b-pw"), "", nil).want(t, 200, "bob from another address")
	// Tokens are not guessable: a valid one still works.
	attacker.call(t, "GET", groups, "Bearer "+tok, "", nil).want(t, 200, "bob's token")

	// Buckets refill.
	clock.Add(2 * time.Second)
	attacker.call(t, "GET", groups, basic("bob", "b-pw"), "", nil).want(t, 200, "bob 2 s later")
	attacker.call(t, "GET", groups, basic("alice", "a-pw"), "", nil).wantThrottled(t, "alice 2 s later", 1, 4)
	clock.Add(4 * time.Second)
	attacker.call(t, "GET", groups, basic("alice", "a-pw"), "", nil).want(t, 200, "alice 6 s later")

	// Bad bearer tokens spend the address's bucket.
	clock.Add(time.Minute)
	for i := 0; i < 30; i++ {
		if a := attacker.call(t, "GET", groups, "Bearer forged."+strconv.Itoa(i), "", nil); a.code != 401 {
			t.Fatalf("bad token %d: HTTP %d", i, a.code)
		}
	}
	attacker.call(t, "GET", groups, basic("bob", "b-pw"), "", nil).wantThrottled(t, "a password after 30 bad tokens", 1, 2)
	home.call(t, "GET", groups, basic("bob", "b-pw"), "", nil).want(t, 200, "bob from another address after 30 bad tokens")

	// Public routes read no credentials: bad ones there spend nothing.
	idle := s.as("127.0.0.4")
	for i := 0; i < 50; i++ {
		idle.call(t, "GET", "/healthz", basic("alice", "wrong"+strconv.Itoa(i)), "", nil).want(t, 200, "healthz with a bad password")
		idle.call(t, "GET", "/readyz", "Bearer forged", "", nil)
	}
	idle.call(t, "GET", groups, basic("alice", "a-pw"), "", nil).want(t, 200, "alice after 50 bad passwords to /healthz")
	// Load balancers probe with HEAD: the answer's status, no body.
	if a := idle.call(t, "HEAD", "/healthz", "", "", nil).want(t, 200, "HEAD /healthz"); a.body != "" {
		t.Errorf("HEAD /healthz has a body: %q", a.body)
	}
	if a := idle.call(t, "HEAD", "/readyz", "", "", nil); a.code == http.StatusMethodNotAllowed || a.body != "" {
		t.Errorf("HEAD /readyz: HTTP %d, body %q", a.code, a.body)
	}
}

// TestProvenConnectionIsNotThrottled: failures from the same address as a
// client (a shared host, a NAT) empty the address's bucket, but the client's
// open connection, on which its credentials already passed, keeps working.
func TestProvenConnectionIsNotThrottled(t *testing.T) {
	users := []httpapi.User{{Username: "mem1", Password: "m-pw", Roles: []string{"READ"}}}
	s := newSecServer(t, httpapi.Config{Auth: httpapi.AuthConfig{Users: users, TokenSecret: "s"}}, nil)
	const groups = "/coord/v1/monitoring/groups"
	member := s.persistent("127.0.0.5")
	get := func(c *http.Client, auth string) int {
		req, _ := http.NewRequest("GET", s.URL+groups, nil)
		req.Header.Set("Authorization", auth)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(member, basic("mem1", "m-pw")); code != 200 {
		t.Fatalf("member: HTTP %d", code)
	}
	neighbour := s.as("127.0.0.5")
	for i := 0; i < 40; i++ {
		neighbour.call(t, "GET", groups, basic("mem1", "guess"+strconv.Itoa(i)), "", nil)
	}
	neighbour.call(t, "GET", groups, basic("mem1", "m-pw"), "", nil).wantThrottled(t, "the right password on a new connection from the address", 1, 60)
	for i := 0; i < 3; i++ {
		if code := get(member, basic("mem1", "m-pw")); code != 200 {
			t.Fatalf("member on its proven connection: HTTP %d, want 200", code)
		}
	}
	if code := get(member, basic("mem1", "guess")); code != 429 {
		t.Fatalf("another password on the proven connection: HTTP %d, want 429", code)
	}
}

// signToken signs a token the way the contract does (§1.3): the reference's
// format with the bare secret, which the coordinator no longer accepts.
func signToken(secret, user string, exp time.Time, roles ...string) string {
	p64 := base64.RawURLEncoding.EncodeToString([]byte("v1\n" + user + "\n" + strconv.FormatInt(exp.Unix(), 10) + "\n" + strings.Join(roles, ",")))
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(p64))
	return p64 + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// signUserToken signs a token the way the coordinator does: with the user's
// own key (the secret, the name, a hash of the password) and an issue time.
func signUserToken(secret, user, password string, iat, exp time.Time, roles ...string) string {
	pw := sha256.Sum256([]byte(password))
	km := hmac.New(sha256.New, []byte(secret))
	km.Write([]byte("rsc token key\x00" + user + "\x00"))
	km.Write(pw[:])
	payload := "v2\n" + user + "\n" + strconv.FormatInt(exp.Unix(), 10) + "\n" + strings.Join(roles, ",") + "\n" + strconv.FormatInt(iat.Unix(), 10)
	p64 := base64.RawURLEncoding.EncodeToString([]byte(payload))
	mac := hmac.New(sha256.New, km.Sum(nil))
	mac.Write([]byte(p64))
	return p64 + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// TestTokensBoundToTheirRules: a token whose expiry is ten years out was
// accepted with a TTL of 7 days, and a password change left the old token
// valid (and it bought a fresh one). Now a token lives at most the current
// TTL after it was issued, only the user's current password's key verifies
// it, and the contract's format signed with the bare secret is refused.
func TestTokensBoundToTheirRules(t *testing.T) {
	clock := newFakeClock()
	const secret = "a-real-secret"
	users := []httpapi.User{{Username: "alice", Password: "a-pw", Roles: []string{"READ", "WRITE"}}}
	cfg := httpapi.Config{Now: clock.Now, Auth: httpapi.AuthConfig{Users: users, TokenSecret: secret, TokenTTL: 7 * 24 * time.Hour}}
	s := newSecServer(t, cfg, nil)
	const groups = "/coord/v1/monitoring/groups"
	now := clock.Now()

	s.call(t, "GET", groups, "Bearer "+signToken(secret, "alice", now.AddDate(10, 0, 0), "READ"), "", nil).want(t, 401, "the contract's format, bare secret, ten years")
	tenYears := "Bearer " + signUserToken(secret, "alice", "a-pw", now, now.AddDate(10, 0, 0), "READ")
	s.call(t, "GET", groups, tenYears, "", nil).want(t, 200, "ten years out, issued now")
	s.call(t, "GET", groups, "Bearer "+signUserToken(secret, "alice", "a-pw", now.Add(-8*24*time.Hour), now.AddDate(10, 0, 0), "READ"), "", nil).
		want(t, 401, "ten years out, issued more than the TTL ago")
	s.call(t, "GET", groups, "Bearer "+signUserToken(secret, "alice", "a-pw", now.Add(time.Hour), now.AddDate(10, 0, 0), "READ"), "", nil).
		want(t, 401, "issued in the future")
	clock.Add(7*24*time.Hour - time.Second)
	s.call(t, "GET", groups, tenYears, "", nil).want(t, 200, "ten years out, a second before issue + TTL")
	clock.Add(time.Second)
	s.call(t, "GET", groups, tenYears, "", nil).want(t, 401, "ten years out, at issue + TTL")
	s.call(t, "POST", "/coord/v1/auth/login", tenYears, "", nil).want(t, 401, "refresh at issue + TTL")

	// A shorter TTL (a restart with a new --token-ttl) shortens tokens already out.
	l := s.call(t, "POST", "/coord/v1/auth/login", "", `{"username":"alice","password":"a-pw"}`, nil).want(t, 200, "login")
	old := "Bearer " + l.json["accessToken"].(string)
	clock.Add(2 * time.Hour)
	s.call(t, "GET", groups, old, "", nil).want(t, 200, "a 2-hour-old token, TTL 7 days")
	short := cfg
	short.Auth.TokenTTL = time.Hour
	newSecServer(t, short, nil).call(t, "GET", groups, old, "", nil).want(t, 401, "a 2-hour-old token, TTL 1 hour")

	// A password change revokes every token minted before it, refreshes included.
	s.api.SetUsers([]httpapi.User{{Username: "alice", Password: "new-pw", Roles: []string{"READ", "WRITE"}}})
	s.call(t, "GET", groups, old, "", nil).want(t, 401, "a token minted before the password change")
	s.call(t, "POST", "/coord/v1/auth/login", old, "", nil).want(t, 401, "refreshing it")
	l = s.call(t, "POST", "/coord/v1/auth/login", "", `{"username":"alice","password":"new-pw"}`, nil).want(t, 200, "login with the new password")
	s.call(t, "GET", groups, "Bearer "+l.json["accessToken"].(string), "", nil).want(t, 200, "a token minted after it")
}

// TestTokensFollowTheUserTable: a token is only as good as its user's current
// entry: removing the user revokes it, removing a role takes the role away.
func TestTokensFollowTheUserTable(t *testing.T) {
	users := []httpapi.User{
		{Username: "alice", Password: "a-pw", Roles: []string{"READ", "WRITE"}},
		{Username: "admin", Password: "password", Roles: []string{"ADMIN"}},
	}
	s := newSecServer(t, httpapi.Config{Auth: httpapi.AuthConfig{Users: users, TokenSecret: "a-real-secret"}}, nil)
	create := func(auth, group string) answer {
		return s.call(t, "POST", "/coord/v1/streams/orders/groups/"+group, auth, `{"initialShardCount":1,"requestedBy":"t"}`, nil)
	}
	l := s.call(t, "POST", "/coord/v1/auth/login", "", `{"username":"alice","password":"a-pw"}`, nil).want(t, 200, "login")
	bearer := "Bearer " + l.json["accessToken"].(string)
	create(bearer, "g1").want(t, 201, "alice's token creates")

	t.Run("forged with the default admin's derived secret", func(t *testing.T) {
		forged := signToken("admin:password:redis-stream-coordinator-token", "admin", time.Now().Add(time.Hour), "ADMIN")
		if a := create("Bearer "+forged, "forged"); a.code != 401 {
			t.Fatalf("forged ADMIN token: HTTP %d, want 401", a.code)
		}
	})

	s.api.SetUsers([]httpapi.User{{Username: "alice", Password: "a-pw", Roles: []string{"READ"}}, users[1]})
	s.call(t, "GET", "/coord/v1/monitoring/groups", bearer, "", nil).want(t, 200, "demoted alice reads")
	if a := create(bearer, "g2"); a.code != 403 || a.body != "" {
		t.Fatalf("demoted alice's token creates: HTTP %d %s, want 403", a.code, a.body)
	}
	session := s.call(t, "GET", "/coord/v1/monitoring/session", bearer, "", nil).want(t, 200, "session")
	if fmt.Sprint(session.json["roles"]) != "[READ]" {
		t.Fatalf("session roles %v, want [READ]", session.json["roles"])
	}
	// Exchanging the token does not bring WRITE back.
	r := s.call(t, "POST", "/coord/v1/auth/login", bearer, "", nil).want(t, 200, "exchange")
	if fmt.Sprint(r.json["roles"]) != "[READ]" {
		t.Fatalf("exchanged token roles %v, want [READ]", r.json["roles"])
	}

	s.api.SetUsers(users[1:])
	if a := s.call(t, "GET", "/coord/v1/monitoring/groups", bearer, "", nil); a.code != 401 || a.header.Get("WWW-Authenticate") == "" {
		t.Fatalf("removed alice's token: HTTP %d, want 401 with the challenge", a.code)
	}
	s.call(t, "POST", "/coord/v1/auth/login", "", `{"username":"alice","password":"a-pw"}`, nil).want(t, 401, "removed alice logs in")

	s.api.SetUsers(nil)
	s.call(t, "GET", "/coord/v1/monitoring/groups", basic("admin", "password"), "", nil).want(t, 401, "an empty table lets nobody in")
}

// TestTokenKeepsWhatBothGrant: a token of a user whose roles changed keeps
// what both its roles and the user's current ones grant, whether or not both
// name the same role (a WRITE or ADMIN token of a user demoted to READ used
// to get 401, as if the user were gone).
func TestTokenKeepsWhatBothGrant(t *testing.T) {
	for _, c := range []struct {
		name          string
		before, after []string
		roles         string // session and exchanged token
		read, write   int
	}{
		{"WRITE demoted to READ", []string{"WRITE"}, []string{"READ"}, "[READ]", 200, 403},
		{"ADMIN demoted to READ", []string{"ADMIN"}, []string{"READ"}, "[READ]", 200, 403},
		{"MEMBER and WRITE demoted to READ", []string{"MEMBER", "WRITE"}, []string{"READ"}, "[READ]", 200, 403},
		{"ADMIN demoted to MEMBER and MONITOR", []string{"ADMIN"}, []string{"MEMBER", "MONITOR"}, "[MEMBER READ]", 200, 403},
		{"MONITOR renamed READ", []string{"MONITOR"}, []string{"READ"}, "[READ]", 200, 403},
		{"READ promoted to ADMIN stays READ", []string{"READ"}, []string{"ADMIN"}, "[READ]", 200, 403},
		{"ADMIN demoted to WRITE", []string{"ADMIN"}, []string{"WRITE"}, "[READ WRITE]", 200, 201},
		{"unchanged WRITE", []string{"WRITE"}, []string{"WRITE"}, "[WRITE]", 200, 201},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newSecServer(t, httpapi.Config{Auth: httpapi.AuthConfig{TokenSecret: "a-real-secret",
				Users: []httpapi.User{{Username: "carol", Password: "c-pw", Roles: c.before}}}}, nil)
			l := s.call(t, "POST", "/coord/v1/auth/login", "", `{"username":"carol","password":"c-pw"}`, nil).want(t, 200, "login")
			bearer := "Bearer " + l.json["accessToken"].(string)
			s.api.SetUsers([]httpapi.User{{Username: "carol", Password: "c-pw", Roles: c.after}})
			session := s.call(t, "GET", "/coord/v1/monitoring/session", bearer, "", nil).want(t, 200, "session")
			if fmt.Sprint(session.json["roles"]) != c.roles {
				t.Fatalf("session roles %v, want %s", session.json["roles"], c.roles)
			}
			s.call(t, "GET", "/coord/v1/monitoring/groups", bearer, "", nil).want(t, c.read, "read")
			s.call(t, "POST", "/coord/v1/streams/orders/groups/g1", bearer, `{"initialShardCount":1,"requestedBy":"t"}`, nil).want(t, c.write, "create")
			r := s.call(t, "POST", "/coord/v1/auth/login", bearer, "", nil).want(t, 200, "exchange")
			if fmt.Sprint(r.json["roles"]) != c.roles {
				t.Fatalf("exchanged token roles %v, want %s", r.json["roles"], c.roles)
			}
		})
	}
}

// TestRefreshedTokenNeverOutlivesTheOriginal: a token bought with a token
// expires when the first one does, however often it is refreshed.
func TestRefreshedTokenNeverOutlivesTheOriginal(t *testing.T) {
	clock := newFakeClock()
	s := newSecServer(t, httpapi.Config{Now: clock.Now, Auth: httpapi.AuthConfig{AdminPassword: "pw", TokenTTL: time.Hour}}, nil)
	first := s.call(t, "POST", "/coord/v1/auth/login", "", `{"username":"admin","password":"pw"}`, nil).want(t, 200, "login")
	exp, _ := time.Parse(time.RFC3339, first.json["expiresAt"].(string))
	if !exp.Equal(clock.Now().Add(time.Hour)) || first.json["expiresInSeconds"] != 3600.0 {
		t.Fatalf("password login: expiresAt %v, expiresInSeconds %v", exp, first.json["expiresInSeconds"])
	}
	tok := first.json["accessToken"].(string)
	for i := 0; i < 3; i++ {
		clock.Add(15 * time.Minute)
		r := s.call(t, "POST", "/coord/v1/auth/login", "Bearer "+tok, "", nil).want(t, 200, "refresh")
		got, _ := time.Parse(time.RFC3339, r.json["expiresAt"].(string))
		if !got.Equal(exp) {
			t.Fatalf("refresh %d: expiresAt %v, want the original %v", i, got, exp)
		}
		if left := exp.Sub(clock.Now()).Seconds(); r.json["expiresInSeconds"] != left {
			t.Fatalf("refresh %d: expiresInSeconds %v, want %v", i, r.json["expiresInSeconds"], left)
		}
		tok = r.json["accessToken"].(string)
	}
	clock.Add(15 * time.Minute)
	s.call(t, "POST", "/coord/v1/auth/login", "Bearer "+tok, "", nil).want(t, 401, "refresh at expiry")
	s.call(t, "GET", "/coord/v1/monitoring/groups", "Bearer "+tok, "", nil).want(t, 401, "expired token")
	// A password login starts a new chain.
	s.call(t, "POST", "/coord/v1/auth/login", "", `{"username":"admin","password":"pw"}`, nil).want(t, 200, "login again")
}

// TestHeaderLimit: 431 beyond MaxHeaderBytes, exactly at the boundary (and
// by net/http itself far beyond it).
func TestHeaderLimit(t *testing.T) {
	c := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop()}, events.NewMemLog(), nil, nil, nil)
	srv := httpapi.NewServer(httpapi.Config{Addr: "127.0.0.1:0", Logger: zerolog.Nop()}, httpapi.PartsOf(c), nil)
	if err := srv.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	get := func(pad int) int {
		req, _ := http.NewRequest("GET", srv.URL()+"/healthz", nil)
		req.Header.Set("X-Pad", strings.Repeat("p", pad))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// The rest of the request (line, Host, User-Agent, Accept-Encoding) is
	// well under 200 bytes.
	if code := get(httpapi.MaxHeaderBytes - 300); code != 200 {
		t.Errorf("headers just under %d bytes: HTTP %d, want 200", httpapi.MaxHeaderBytes, code)
	}
	if code := get(httpapi.MaxHeaderBytes); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("headers over %d bytes: HTTP %d, want 431", httpapi.MaxHeaderBytes, code)
	}
	if code := get(4 * httpapi.MaxHeaderBytes); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("headers of %d bytes: HTTP %d, want 431", 4*httpapi.MaxHeaderBytes, code)
	}
}

// TestRequestIDs: every answer carries X-Request-Id (the caller's when it is a
// plain token); trace headers are bounded.
func TestRequestIDs(t *testing.T) {
	s := newSecServer(t, httpapi.Config{}, nil)
	if id := s.call(t, "GET", "/healthz", "", "", map[string]string{"X-Request-Id": "abc-123"}).header.Get("X-Request-Id"); id != "abc-123" {
		t.Errorf("echoed %q, want abc-123", id)
	}
	for _, h := range []map[string]string{nil, {"X-Request-Id": "has space"}, {"X-Request-Id": "ünï"}} {
		a := s.call(t, "GET", "/coord/v1/monitoring/groups", "", "", h).want(t, 401, "no credentials")
		if id := a.header.Get("X-Request-Id"); len(id) != 16 || strings.Trim(id, "0123456789abcdef") != "" {
			t.Errorf("with %v: X-Request-Id %q, want a generated one", h, id)
		}
	}
	for _, name := range []string{"X-Request-Id", "X-Correlation-Id", "X-Amzn-Trace-Id"} {
		for what, v := range map[string]string{"129 bytes": strings.Repeat("x", 129), "a tab": "a\tb"} {
			a := s.call(t, "GET", "/healthz", "", "", map[string]string{name: v}).want(t, 400, name+" with "+what)
			if a.json["errorCode"] != "INVALID_REQUEST" || !strings.Contains(a.json["message"].(string), name) {
				t.Errorf("%s with %s: body %s", name, what, a.body)
			}
		}
		s.call(t, "GET", "/healthz", "", "", map[string]string{name: strings.Repeat("x", 128)}).want(t, 200, name+" of 128 bytes")
	}
}

// countingStreams is a StreamReader over streams of length entries each; it
// counts the entries a real one would read (a page plus one look-ahead).
type countingStreams struct {
	mu     sync.Mutex
	length int64
	read   int
	calls  int
	down   error
}

func (f *countingStreams) Offsets(_ context.Context, prefix, group string, shards []int) ([]wire.ShardOffset, error) {
	if f.down != nil {
		return nil, f.down
	}
	out := make([]wire.ShardOffset, len(shards))
	for i, idx := range shards {
		out[i] = wire.ShardOffset{StreamPrefix: prefix, ConsumerGroup: group, Shard: wire.ShardRef{ShardIndex: idx}, ShardStream: wire.ShardStream{StreamLength: f.length}, Exists: true}
	}
	return out, nil
}

func (f *countingStreams) Messages(_ context.Context, key string, q httpapi.MessagesQuery) (httpapi.StreamPage, error) {
	f.mu.Lock()
	f.calls++
	f.read += q.Limit
	if q.Peek {
		f.read++
	}
	f.mu.Unlock()
	if f.down != nil {
		return httpapi.StreamPage{}, f.down
	}
	n := min(int64(q.Limit), f.length)
	recs := make([]wire.StreamRecord, n)
	for i := range recs {
		id := int64(i + 1)
		if !q.Forward {
			id = f.length - int64(i)
		}
		recs[i] = wire.StreamRecord{StreamKey: key, RecordID: strconv.FormatInt(id, 10) + "-0"}
	}
	return httpapi.StreamPage{Records: recs, More: q.Peek && f.length > int64(q.Limit)}, nil
}

func (f *countingStreams) Ping(context.Context) error { return f.down }

func (f *countingStreams) reset() (read, calls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	read, calls = f.read, f.calls
	f.read, f.calls = 0, 0
	return read, calls
}

// TestMessagesReadAtMostTheCap: no messages request reads more than
// MaxEntriesPerRequest entries from Redis, whatever its shards, limit and cursor.
func TestMessagesReadAtMostTheCap(t *testing.T) {
	streams := &countingStreams{length: 1_000_000}
	s := newSecServer(t, httpapi.Config{}, streams)
	admin := basic("admin", "password")
	s.call(t, "POST", "/coord/v1/streams/big/groups/g", admin, `{"initialShardCount":64,"requestedBy":"t"}`, nil).want(t, 201, "create")
	s.call(t, "POST", "/coord/v1/streams/huge/groups/g", admin, `{"initialShardCount":1024,"requestedBy":"t"}`, nil).want(t, 201, "create")
	gf := func(prefix string, kv ...string) string {
		q := url.Values{"streamPrefix": {prefix}, "consumerGroup": {"g"}}
		for i := 0; i < len(kv); i += 2 {
			q.Set(kv[i], kv[i+1])
		}
		return "/coord/v1/monitoring/grafana/messages?" + q.Encode()
	}
	for _, c := range []struct {
		name, path string
		code       int
	}{
		{"all shards, limit 1000", gf("big", "shardIndex", "all", "limit", "1000"), 200},
		{"all shards, backward", gf("big", "shardIndex", "all", "limit", "1000", "direction", "BACKWARD"), 200},
		{"all shards, merged cursor", gf("big", "shardIndex", "all", "limit", "1000", "cursor", "all:0=5-0,63=7-0"), 200},
		{"all shards, last page", gf("big", "shardIndex", "all", "limit", "1000", "cursor", "__rsc_last__"), 200},
		{"all shards, deep tail", gf("big", "shardIndex", "all", "limit", "1000", "cursor", "__rsc_tail__:99999"), 400},
		{"one shard, deep tail", gf("big", "shardIndex", "3", "limit", "1000", "cursor", "__rsc_tail__:99999"), 400},
		{"one shard, one page back", gf("big", "shardIndex", "3", "limit", "500", "cursor", "__rsc_tail__:1"), 200},
		{"one shard, limit 1000", gf("big", "shardIndex", "3", "limit", "1000"), 200},
		{"record id on every shard", gf("big", "recordId", "5-0"), 200},
		{"1024 shards merged", gf("huge", "shardIndex", "all"), 400},
		{"monitoring messages", "/coord/v1/monitoring/streams/big/groups/g/shards/5/messages?limit=1000", 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := s.call(t, "GET", c.path, admin, "", nil).want(t, c.code, c.name)
			read, _ := streams.reset()
			if read > httpapi.MaxEntriesPerRequest {
				t.Fatalf("read %d entries, more than %d", read, httpapi.MaxEntriesPerRequest)
			}
			if c.code == 400 && (read != 0 || a.json["errorCode"] != "INVALID_REQUEST") {
				t.Fatalf("refused after reading %d entries: %s", read, a.body)
			}
		})
	}
	t.Run("a merged page says how many rows it holds", func(t *testing.T) {
		var rows []map[string]any
		a := s.call(t, "GET", gf("big", "shardIndex", "all", "limit", "1000"), admin, "", nil)
		if err := json.Unmarshal([]byte(a.body), &rows); err != nil || len(rows) == 0 {
			t.Fatalf("rows: %v %s", err, a.body)
		}
		per := float64(httpapi.MaxEntriesPerRequest/64 - 1)
		if len(rows) != int(per) || rows[0]["pageLimit"] != per || rows[0]["pageNextCursor"] == nil {
			t.Fatalf("%d rows, pageLimit %v, next %v; want %v rows and a cursor", len(rows), rows[0]["pageLimit"], rows[0]["pageNextCursor"], per)
		}
		streams.reset()
	})
	t.Run("bad cursors are refused before Redis is read", func(t *testing.T) {
		for _, p := range []string{
			gf("big", "shardIndex", "3", "cursor", "not-an-id"),
			gf("big", "shardIndex", "3", "cursor", "all:0=1-0"),
			gf("big", "shardIndex", "3", "cursor", "1-x"),
			gf("big", "shardIndex", "all", "cursor", "all:0=1-0,x"),
			gf("big", "shardIndex", "all", "cursor", "all:0=nope"),
			"/coord/v1/monitoring/streams/big/groups/g/shards/0/messages?cursor=%2B",
			"/coord/v1/monitoring/streams/big/groups/g/shards/0/messages?cursor=1-2-3",
		} {
			a := s.call(t, "GET", p, admin, "", nil).want(t, 400, p)
			if a.json["errorCode"] != "INVALID_REQUEST" || !strings.Contains(a.json["message"].(string), "cursor") {
				t.Errorf("%s: %s", p, a.body)
			}
			if _, calls := streams.reset(); calls != 0 {
				t.Errorf("%s: %d reads before the refusal", p, calls)
			}
		}
		for _, p := range []string{
			"/coord/v1/monitoring/streams/big/groups/g/shards/0/messages?cursor=1700000000000-3",
			"/coord/v1/monitoring/streams/big/groups/g/shards/0/messages?cursor=1700000000000",
			gf("big", "shardIndex", "all", "cursor", "5-0"),
		} {
			s.call(t, "GET", p, admin, "", nil).want(t, 200, p)
		}
		streams.reset()
	})
}

// TestRedisErrorsDoNotLeak: a failed Redis read is a 503 that names the
// request id, never Redis's own words.
func TestRedisErrorsDoNotLeak(t *testing.T) {
	streams := &countingStreams{length: 10}
	s := newSecServer(t, httpapi.Config{}, streams)
	admin := basic("admin", "password")
	s.call(t, "POST", "/coord/v1/streams/p/groups/g", admin, `{"initialShardCount":2,"requestedBy":"t"}`, nil).want(t, 201, "create")
	streams.down = errors.New("dial tcp 10.9.8.7:6379: connect: connection refused; NOAUTH Authentication required")
	for _, p := range []string{
		"/coord/v1/monitoring/streams/p/groups/g/shards/0/messages",
		"/coord/v1/monitoring/streams/p/groups/g/offsets",
		"/coord/v1/monitoring/grafana/messages?streamPrefix=p&consumerGroup=g&shardIndex=all",
		"/coord/v1/monitoring/grafana/shards?streamPrefix=p&consumerGroup=g",
	} {
		a := s.call(t, "GET", p, admin, "", map[string]string{"X-Request-Id": "req-42"}).want(t, 503, p)
		for _, leak := range []string{"10.9.8.7", "dial", "NOAUTH", "refused"} {
			if strings.Contains(a.body, leak) {
				t.Errorf("%s: the answer shows %q: %s", p, leak, a.body)
			}
		}
		if a.json["errorCode"] != "REDIS_UNAVAILABLE" || !strings.Contains(a.json["message"].(string), "req-42") {
			t.Errorf("%s: %s, want REDIS_UNAVAILABLE naming request req-42", p, a.body)
		}
	}
}

// TestReplaysAreBounded: at most MaxConcurrentReplays folds run at once.
func TestReplaysAreBounded(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 10)
	stateAt := func(ctx context.Context, until string) (*projection.State, error) {
		entered <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return projection.New(), nil
	}
	s := newSecServer(t, httpapi.Config{StateAt: stateAt}, nil)
	const replay = "/coord/v1/monitoring/streams/p/groups/g/replay?until=1-0"
	admin := basic("admin", "password")
	var wg sync.WaitGroup
	codes := make([]int, httpapi.MaxConcurrentReplays)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = s.call(t, "GET", replay, admin, "", nil).code
		}()
	}
	for range codes {
		<-entered
	}
	a := s.call(t, "GET", replay, admin, "", nil)
	a.wantThrottled(t, "a replay beyond the bound", 1, 1)
	close(release)
	wg.Wait()
	for i, c := range codes {
		if c != 404 { // the group did not exist at 1-0
			t.Errorf("replay %d: HTTP %d, want 404", i, c)
		}
	}
	a = s.call(t, "GET", replay, admin, "", nil).want(t, 404, "a replay after the others ended")
	if msg, _ := a.json["message"].(string); !strings.Contains(msg, "did not exist at 1-0") {
		t.Errorf("replay before the group: message %q, want it to name until=1-0", msg)
	}
	// The stream replay names the point it was asked at too (it said 0-0).
	a = s.call(t, "GET", "/coord/v1/monitoring/streams/p/replay?until=1-0", admin, "", nil).want(t, 404, "a stream replay before the stream")
	if msg, _ := a.json["message"].(string); !strings.Contains(msg, "at 1-0") {
		t.Errorf("stream replay before the stream: message %q, want it to name until=1-0", msg)
	}
}

// blockingStreams is countingStreams whose Messages waits for release once
// it said it entered.
type blockingStreams struct {
	countingStreams
	entered chan struct{}
	release chan struct{}
}

func (f *blockingStreams) Messages(ctx context.Context, key string, q httpapi.MessagesQuery) (httpapi.StreamPage, error) {
	f.entered <- struct{}{}
	select {
	case <-f.release:
	case <-ctx.Done():
	}
	return f.countingStreams.Messages(ctx, key, q)
}

// TestMessageReadsAreBounded: at most MaxConcurrentMessageReads messages
// pages, the monitoring route's and Grafana's together, are read at once
// (each may hold a few times the answer's 8 MiB; 32 at once over entries of
// 1 MiB grew the coordinator to 0.8 GB).
func TestMessageReadsAreBounded(t *testing.T) {
	streams := &blockingStreams{countingStreams: countingStreams{length: 10}, entered: make(chan struct{}, 16), release: make(chan struct{})}
	s := newSecServer(t, httpapi.Config{}, streams)
	admin := basic("admin", "password")
	s.call(t, "POST", "/coord/v1/streams/p/groups/g", admin, `{"initialShardCount":2,"requestedBy":"t"}`, nil).want(t, 201, "create")
	const page = "/coord/v1/monitoring/streams/p/groups/g/shards/1/messages?limit=5"
	const grafana = "/coord/v1/monitoring/grafana/messages?streamPrefix=p&consumerGroup=g&shardIndex=0&limit=5"
	var wg sync.WaitGroup
	codes := make([]int, httpapi.MaxConcurrentMessageReads)
	for i := range codes {
		path := page
		if i%2 == 1 {
			path = grafana
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = s.call(t, "GET", path, admin, "", nil).code
		}()
	}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(streams.release) }) }
	t.Cleanup(release)
	for range codes {
		<-streams.entered
	}
	beyond := func(path, what string) {
		done := make(chan answer, 1)
		go func() { done <- s.call(t, "GET", path, admin, "", nil) }()
		select {
		case a := <-done:
			a.wantThrottled(t, what, 1, 1)
		case <-time.After(10 * time.Second):
			t.Fatalf("%s was not refused: it waits for the others", what)
		}
	}
	beyond(page, "a messages page beyond the bound")
	beyond(grafana, "a Grafana messages page beyond the bound")
	release()
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("read %d: HTTP %d, want 200", i, c)
		}
	}
	s.call(t, "GET", page, admin, "", nil).want(t, 200, "a messages page after the others ended")
	s.call(t, "GET", grafana, admin, "", nil).want(t, 200, "a Grafana page after the others ended")
}

// TestAccessByRouteNotByName: names that look like routes are just names.
func TestAccessByRouteNotByName(t *testing.T) {
	s := newSecServer(t, httpapi.Config{Auth: httpapi.AuthConfig{AuthenticateMemberAPI: false}}, nil)
	admin := basic("admin", "password")
	for _, c := range []struct{ method, path string }{
		{"POST", "/coord/v1/streams/members/groups/heartbeat"},
		{"DELETE", "/coord/v1/streams/members/groups/heartbeat"},
		{"POST", "/coord/v1/streams/x/groups/members/scale"},
		{"GET", "/coord/v1/streams/members/groups/heartbeat/producer-routing"},
		{"POST", "/coord/v1/streams/auth/groups/login"},
		{"GET", "/coord/v1/nothing/here/members/m/heartbeat"},
		{"POST", "/coord/v1/auth/login/members/m/heartbeat"},
		{"DELETE", "/coord/v1/auth/login"},
		{"GET", "/coord/v1"},
	} {
		a := s.call(t, c.method, c.path, "", `{"initialShardCount":3,"requestedBy":"alice"}`, nil)
		if a.code != 401 || a.body != "" {
			t.Errorf("%s %s without credentials: HTTP %d %s, want 401", c.method, c.path, a.code, a.body)
		}
	}
	s.call(t, "GET", "/coord/v1/streams/members/groups/heartbeat", admin, "", nil).want(t, 404, "nothing was created")
	if a := s.call(t, "DELETE", "/coord/v1/auth/login", admin, "", nil).want(t, 405, "a known path with another method"); a.header.Get("Allow") != "POST" {
		t.Errorf("405 on /coord/v1/auth/login: Allow %q, want POST", a.header.Get("Allow"))
	}
	if a := s.call(t, "PUT", "/coord/v1/streams/orders/groups/g/scale", admin, "", nil).want(t, 405, "scale is POST"); a.header.Get("Allow") != "POST" {
		t.Errorf("405 on a group's scale: Allow %q, want POST", a.header.Get("Allow"))
	}
	s.call(t, "GET", "/coord/v1/nothing", admin, "", nil).want(t, 404, "an unknown API path")
	s.call(t, "GET", "/nothing", "", "", nil).want(t, 404, "an unknown path outside the API")
	// The real heartbeat route is public here (anonymous members allowed).
	hb := `{"protocolVersion":1,"requestId":"r","memberId":"m","memberEpoch":0,"metadataVersion":0,"runtimeConsumerCapacity":{"runtimeMaxConcurrency":1,"availableConcurrency":1}}`
	s.call(t, "POST", "/coord/v1/streams/members/groups/heartbeat/members/m/heartbeat", "", hb, nil).want(t, 200, "anonymous heartbeat")
}

// TestErrorsDoNotEchoHugeInput: a 100,000-digit targetShardCount came back
// whole in the 400's message; the message quotes at most 64 bytes of it.
func TestErrorsDoNotEchoHugeInput(t *testing.T) {
	s := newSecServer(t, httpapi.Config{}, nil)
	admin := basic("admin", "password")
	huge := strings.Repeat("9", 100_000)
	a := s.call(t, "POST", "/coord/v1/streams/orders/groups/g/scale", admin, `{"targetShardCount":`+huge+`,"requestedBy":"a","reason":"r"}`, nil).want(t, 400, "a huge number")
	msg, _ := a.json["message"].(string)
	if !strings.Contains(msg, "targetShardCount") || len(a.body) > 1024 {
		t.Fatalf("400 for a 100,000-digit number: %d bytes, message %.200q", len(a.body), msg)
	}
}
