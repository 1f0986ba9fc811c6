package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
)

// Secure defaults and their escape hatches, tokens under a users file, and
// what the transport shows when Redis fails (issue "Trust nothing on the wire").

// TestSecureDefaultFlags: members authenticate, the port is on the loopback,
// and the default password is refused where other hosts can reach it.
func TestSecureDefaultFlags(t *testing.T) {
	parse := func(args ...string) (*Main, error) {
		m := NewMain()
		m.Stderr = &apiSyncBuffer{}
		return m, m.ParseFlags(args)
	}
	m, err := parse()
	if err != nil {
		t.Fatal(err)
	}
	if m.Listen != "127.0.0.1:8080" || !m.memberAuth() || m.TokenTTL != 7*24*time.Hour || m.InsecureDefaultCredentials {
		t.Fatalf("defaults: listen %q, member auth %v, token TTL %v, insecure %v", m.Listen, m.memberAuth(), m.TokenTTL, m.InsecureDefaultCredentials)
	}
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		ok   bool
	}{
		{"every interface, default password", []string{"--listen", "0.0.0.0:0"}, nil, false},
		{"empty host, default password", []string{"--listen", ":0"}, nil, false},
		{"IPv6 any, default password", []string{"--listen", "[::]:0"}, nil, false},
		{"a LAN address, default password", []string{"--listen", "10.1.2.3:0"}, nil, false},
		{"a host name, default password", []string{"--listen", "coordinator.example:0"}, nil, false},
		{"from the environment", nil, map[string]string{"RSC_LISTEN": ":0"}, false},
		{"with --insecure-default-credentials", []string{"--listen", "0.0.0.0:0", "--insecure-default-credentials"}, nil, true},
		{"with RSC_INSECURE_DEFAULT_CREDENTIALS", []string{"--listen", ":0"}, map[string]string{"RSC_INSECURE_DEFAULT_CREDENTIALS": "true"}, true},
		{"loopback, default password", []string{"--listen", "127.0.0.1:0"}, nil, true},
		{"IPv6 loopback", []string{"--listen", "[::1]:0"}, nil, true},
		{"localhost", []string{"--listen", "localhost:0"}, nil, true},
		{"every interface, an empty password (the default)", []string{"--listen", "0.0.0.0:0", "--admin-password", ""}, nil, false},
		{"an empty RSC_ADMIN_PASSWORD", []string{"--listen", "0.0.0.0:0"}, map[string]string{"RSC_ADMIN_PASSWORD": ""}, false},
		{"every interface, another password", []string{"--listen", "0.0.0.0:0", "--admin-password", "s3cret"}, nil, true},
		{"every interface, a users file", []string{"--listen", "0.0.0.0:0", "--users-file", "/dev/null"}, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			_, err := parse(c.args...)
			if c.ok != (err == nil) {
				t.Fatalf("ParseFlags(%q): %v", c.args, err)
			}
			if err != nil {
				for _, flag := range []string{"--listen", "--admin-password", "--users-file", "--insecure-default-credentials"} {
					if !strings.Contains(err.Error(), flag) {
						t.Errorf("the refusal does not name %s: %v", flag, err)
					}
				}
			}
		})
	}
	t.Run("Run refuses too", func(t *testing.T) {
		m, err := parse("--redis", "redis://127.0.0.1:1/0")
		if err != nil {
			t.Fatal(err)
		}
		m.Listen = "0.0.0.0:0"
		if err := m.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "--insecure-default-credentials") {
			_ = m.Close()
			t.Fatalf("Run on 0.0.0.0 with the default password: %v", err)
		}
	})
	t.Run("anonymous members", func(t *testing.T) {
		for _, args := range [][]string{{"--allow-anonymous-members"}, {"--authenticate-member-api=false"}} {
			m, err := parse(args...)
			if err != nil || m.memberAuth() {
				t.Errorf("%q: member auth %v, %v; want off", args, m.memberAuth(), err)
			}
		}
		t.Setenv("RSC_ALLOW_ANONYMOUS_MEMBERS", "1")
		if m, err := parse(); err != nil || m.memberAuth() {
			t.Errorf("RSC_ALLOW_ANONYMOUS_MEMBERS=1: member auth %v, %v; want off", m.memberAuth(), err)
		}
		if _, err := parse("--authenticate-member-api=true"); err == nil || !strings.Contains(err.Error(), "--allow-anonymous-members") {
			t.Errorf("--authenticate-member-api=true with --allow-anonymous-members: %v, want a refusal", err)
		}
	})
	if _, err := parse("--token-ttl", "0s"); err == nil {
		t.Error("--token-ttl 0s accepted")
	}
}

// TestIntegrationEscapeHatchesWarn: the escape hatches work and say so.
func TestIntegrationEscapeHatchesWarn(t *testing.T) {
	parallel(t)
	logs := &apiSyncBuffer{}
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.Listen = "0.0.0.0:0"
		m.InsecureDefaultCredentials = true
		m.AllowAnonymousMembers = true
		m.Stderr = logs
	})
	apiCreate(t, tc, "orders", "oc", 2)
	if hb := apiHeartbeat(t, tc, apiNoAuth, "orders", "oc", "m1", apiHBBody{Member: "m1"}.toMap()); hb.Status != "OK" {
		t.Fatalf("anonymous heartbeat: %s", hb.Body)
	}
	out := logs.String()
	for _, want := range []string{"anyone who can reach the port can heartbeat as any member id", "INSECURE: --insecure-default-credentials"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log does not warn %q", want)
		}
	}
}

// TestIntegrationMembersAuthenticateByDefault: a heartbeat without credentials
// is a 401 that changes nothing.
func TestIntegrationMembersAuthenticateByDefault(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	apiCreate(t, tc, "orders", "oc", 2)
	before := apiLogLen(t, tc, apiRedis(t, tc))
	apiWantUnauthorized(t, apiSend(t, tc, apiNoAuth, "POST", apiHBPath("orders", "oc", "m1"), apiHBBody{Member: "m1"}.toMap(), nil), "anonymous heartbeat")
	if after := apiLogLen(t, tc, apiRedis(t, tc)); after != before {
		t.Fatalf("a refused heartbeat appended %d events", after-before)
	}
	if hb := apiHeartbeat(t, tc, apiMember, "orders", "oc", "m1", apiHBBody{Member: "m1"}.toMap()); hb.Status != "OK" {
		t.Fatalf("heartbeat with the MEMBER role: %s", hb.Body)
	}
}

// apiSign signs a token the way the contract does (§1.3), with any secret:
// the coordinator refuses that format.
func apiSign(secret, user string, exp time.Time, roles string) string {
	p64 := base64.RawURLEncoding.EncodeToString([]byte("v1\n" + user + "\n" + strconv.FormatInt(exp.Unix(), 10) + "\n" + roles))
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(p64))
	return p64 + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// apiSignUser signs a token the way the coordinator does: with the user's
// key, derived from the secret, the name and a hash of the password, and an
// issue time.
func apiSignUser(secret, user, password string, iat, exp time.Time, roles string) string {
	pw := sha256.Sum256([]byte(password))
	km := hmac.New(sha256.New, []byte(secret))
	km.Write([]byte("rsc token key\x00" + user + "\x00"))
	km.Write(pw[:])
	payload := "v2\n" + user + "\n" + strconv.FormatInt(exp.Unix(), 10) + "\n" + roles + "\n" + strconv.FormatInt(iat.Unix(), 10)
	p64 := base64.RawURLEncoding.EncodeToString([]byte(payload))
	mac := hmac.New(sha256.New, km.Sum(nil))
	mac.Write([]byte(p64))
	return p64 + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// apiWriteUsers replaces a users file's content at once (no reader sees half of it).
func apiWriteUsers(t *testing.T, path string, users []map[string]any) {
	t.Helper()
	data, err := json.Marshal(users)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationUsersFileTokens: under --users-file, tokens are signed with a
// random secret kept in Redis (shared by replicas), so one signed with the
// default admin's derived secret is refused; the file is reloaded when it
// changes and on SIGHUP, removing a user revokes its tokens and removing a
// role takes it away; a broken file keeps the users loaded before.
func TestIntegrationUsersFileTokens(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	alice := map[string]any{"username": "alice", "password": "a-pw", "roles": []string{"READ", "WRITE"}}
	bob := map[string]any{"username": "bob", "password": "b-pw", "roles": []string{"ADMIN"}}
	users := apiUsersFile(t, []map[string]any{alice, bob})
	logs := &apiSyncBuffer{}
	tc := startCoordinator(t, rs, func(m *Main) {
		m.UsersFile = users
		m.usersPoll = 50 * time.Millisecond
		m.Stderr = logs
	})
	createAs := func(auth apiAuth, group string) apiResp {
		return apiSend(t, tc, auth, "POST", apiGroupPath("orders", group), map[string]any{"initialShardCount": 1, "requestedBy": "x"}, nil)
	}
	login := apiSend(t, tc, apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "alice", "password": "a-pw"}, nil).apiWant(t, 200)
	aliceTok := apiAuth("Bearer " + login.JSON["accessToken"].(string))
	createAs(aliceTok, "g1").apiWant(t, 201)

	t.Run("a token signed with the default admin's derived secret is refused", func(t *testing.T) {
		for _, user := range []string{"admin", "bob", "alice"} {
			forged := apiSign("admin:password:redis-stream-coordinator-token", user, time.Now().Add(time.Hour), "ADMIN")
			apiWantUnauthorized(t, createAs(apiAuth("Bearer "+forged), "forged-"+user), "forged token for "+user)
		}
	})
	t.Run("the secret is kept in Redis, where every replica finds it", func(t *testing.T) {
		key, _ := redisstore.TokenSecretKey(tc.Main.LogStream)
		secret := apiRedis(t, tc).Get(t.Context(), key).Val()
		if len(secret) < 40 {
			t.Fatalf("%s holds %q, want a random secret", key, secret)
		}
		if strings.Contains(logs.String(), secret) {
			t.Fatal("the token secret appears in the log")
		}
		replica, err := redisstore.TokenSecret(t.Context(), apiRedis(t, tc), tc.Main.LogStream)
		if err != nil || replica != secret {
			t.Fatalf("another replica would sign with %q (%v), want %q", replica, err, secret)
		}
		// Whoever reads the secret still cannot sign for a user without its password.
		bare := apiSign(secret, "bob", time.Now().Add(time.Hour), "ADMIN")
		apiWantUnauthorized(t, apiSend(t, tc, apiAuth("Bearer "+bare), "GET", apiGroupPath("orders", "g1"), nil, nil), "signed with the bare secret")
		signed := apiSignUser(secret, "bob", "b-pw", time.Now(), time.Now().Add(time.Hour), "ADMIN")
		apiSend(t, tc, apiAuth("Bearer "+signed), "GET", apiGroupPath("orders", "g1"), nil, nil).apiWant(t, 200)
	})
	t.Run("a demoted user's token loses WRITE", func(t *testing.T) {
		alice["roles"] = []string{"READ"}
		apiWriteUsers(t, users, []map[string]any{alice, bob})
		apiEventually(t, 5*time.Second, "the users file to be reloaded", func() (bool, string) {
			r := createAs(aliceTok, "g2")
			return r.Status == 403, strconv.Itoa(r.Status)
		})
		apiSend(t, tc, aliceTok, "GET", apiGroupPath("orders", "g1"), nil, nil).apiWant(t, 200)
	})
	t.Run("a broken file keeps the users loaded before", func(t *testing.T) {
		if err := os.WriteFile(users, []byte(`[{"username": "mallory", "password": "x", "roles": ["ADMIN"]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		apiEventually(t, 5*time.Second, "the reload error in the log", func() (bool, string) {
			return strings.Contains(logs.String(), "users file not reloaded"), ""
		})
		apiSend(t, tc, apiBasic("bob", "b-pw"), "GET", apiGroupPath("orders", "g1"), nil, nil).apiWant(t, 200)
		apiWantUnauthorized(t, apiSend(t, tc, apiBasic("mallory", "x"), "GET", apiGroupPath("orders", "g1"), nil, nil), "mallory")
	})
	t.Run("a removed user's token is refused", func(t *testing.T) {
		apiWriteUsers(t, users, []map[string]any{bob})
		apiEventually(t, 5*time.Second, "alice's token to be refused", func() (bool, string) {
			r := apiSend(t, tc, aliceTok, "GET", apiGroupPath("orders", "g1"), nil, nil)
			return r.Status == 401, strconv.Itoa(r.Status)
		})
		apiWantUnauthorized(t, apiSend(t, tc, aliceTok, "GET", apiGroupPath("orders", "g1"), nil, nil), "removed alice's token")
		r := apiSend(t, tc, aliceTok, "POST", "/coord/v1/auth/login", nil, nil)
		if r.Status != 401 {
			t.Fatalf("removed alice exchanges her token: HTTP %d", r.Status)
		}
	})
}

// TestIntegrationUsersFileSIGHUP: SIGHUP reloads the users file at once.
func TestIntegrationUsersFileSIGHUP(t *testing.T) {
	bob := map[string]any{"username": "bob", "password": "b-pw", "roles": []string{"ADMIN"}}
	users := apiUsersFile(t, []map[string]any{bob})
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.UsersFile = users
		m.usersPoll = time.Hour // only the signal can make it reload
	})
	carol := map[string]any{"username": "carol", "password": "c-pw", "roles": []string{"READ"}}
	apiWriteUsers(t, users, []map[string]any{bob, carol})
	apiWantUnauthorized(t, apiSend(t, tc, apiBasic("carol", "c-pw"), "GET", "/coord/v1/monitoring/groups", nil, nil), "carol before SIGHUP")
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	apiEventually(t, 5*time.Second, "carol to log in", func() (bool, string) {
		r := apiSend(t, tc, apiBasic("carol", "c-pw"), "GET", "/coord/v1/monitoring/groups", nil, nil)
		return r.Status == 200, strconv.Itoa(r.Status)
	})
}

// TestIntegrationRefreshedTokenExpiry: a token bought with a token expires
// when the first one does.
func TestIntegrationRefreshedTokenExpiry(t *testing.T) {
	parallel(t)
	clock := &apiManualClock{t: time.Now()}
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.TokenTTL = time.Hour
		m.clock = clock.Now
	})
	l := apiSend(t, tc, apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "admin", "password": "password"}, nil).apiWant(t, 200)
	first, _ := time.Parse(time.RFC3339, l.JSON["expiresAt"].(string))
	if l.JSON["expiresInSeconds"] != 3600.0 {
		t.Fatalf("--token-ttl 1h: expiresInSeconds %v", l.JSON["expiresInSeconds"])
	}
	tok := l.JSON["accessToken"].(string)
	for i := 0; i < 3; i++ {
		clock.Add(15 * time.Minute)
		r := apiSend(t, tc, apiAuth("Bearer "+tok), "POST", "/coord/v1/auth/login", nil, nil).apiWant(t, 200)
		exp, _ := time.Parse(time.RFC3339, r.JSON["expiresAt"].(string))
		if exp.After(first) {
			t.Fatalf("refresh %d expires at %v, after the original %v", i, exp, first)
		}
		tok = r.JSON["accessToken"].(string)
	}
	clock.Add(16 * time.Minute)
	apiWantUnauthorized(t, apiSend(t, tc, apiAuth("Bearer "+tok), "GET", "/coord/v1/monitoring/session", nil, nil), "a refreshed token past the original's expiry")
}

// TestIntegrationLoginThrottle: the 11th failed password for a user is a 429
// that does not check the password; the bucket refills.
func TestIntegrationLoginThrottle(t *testing.T) {
	parallel(t)
	clock := &apiManualClock{t: time.Now()}
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) { m.clock = clock.Now })
	for i := 0; i < 10; i++ {
		apiWantUnauthorized(t, apiSend(t, tc, apiBasic("admin", "guess"+strconv.Itoa(i)), "GET", "/coord/v1/monitoring/groups", nil, nil), "wrong password")
	}
	r := apiSend(t, tc, apiAdmin, "GET", "/coord/v1/monitoring/groups", nil, nil).apiWantError(t, 429, "RATE_LIMIT_EXCEEDED")
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || s < 1 || s > 6 {
		t.Fatalf("Retry-After %q", r.Header.Get("Retry-After"))
	}
	apiSend(t, tc, apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "admin", "password": "password"}, nil).apiWantError(t, 429, "RATE_LIMIT_EXCEEDED")
	clock.Add(6 * time.Second)
	apiSend(t, tc, apiAdmin, "GET", "/coord/v1/monitoring/groups", nil, nil).apiWant(t, 200)
}

// TestIntegrationRedisErrorsDoNotLeak: with Redis stopped, stream and log
// reads answer 503 without Redis's address or error text; a bad cursor is
// still a 400, decided before Redis is asked.
func TestIntegrationRedisErrorsDoNotLeak(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, nil)
	apiCreate(t, tc, "orders", "oc", 2)
	apiDo(t, tc, "GET", apiMonPath("orders", "oc", "offsets"), nil).apiWant(t, 200)
	_, port, _ := net.SplitHostPort(rs.Addr())
	rs.Stop(t)
	// The offsets cache notices at its next pass (every --metrics-interval).
	tc.Main.server.RefreshOffsets(t.Context())
	gf := "/coord/v1/monitoring/grafana/messages?streamPrefix=orders&consumerGroup=oc"
	for _, c := range []struct{ path, code string }{
		{apiMonPath("orders", "oc", "offsets"), "REDIS_UNAVAILABLE"},
		{apiMonPath("orders", "oc", "shards", "0", "messages"), "REDIS_UNAVAILABLE"},
		{gf + "&shardIndex=all", "REDIS_UNAVAILABLE"},
		{gf + "&shardIndex=1&cursor=__rsc_last__", "REDIS_UNAVAILABLE"},
		{"/coord/v1/monitoring/events", "COORDINATOR_STATE_MUTEX_UNAVAILABLE"},
	} {
		r := apiSend(t, tc, apiAdmin, "GET", c.path, nil, map[string]string{"X-Request-Id": "trace-7"}).apiWantError(t, 503, c.code)
		body := strings.ToLower(string(r.Body))
		for _, leak := range []string{rs.Addr(), ":" + port, "dial", "refused", "127.0.0.1"} {
			if strings.Contains(body, leak) {
				t.Errorf("%s: the answer shows %q: %s", c.path, leak, r.Body)
			}
		}
		if !strings.Contains(r.apiMsg(), "trace-7") || r.Header.Get("X-Request-Id") != "trace-7" {
			t.Errorf("%s: the answer does not name request trace-7: %s", c.path, r.Body)
		}
	}
	// Decisions that fail on Redis (provisioning, the append) do not show it either.
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{apiGroupPath("orders", "new"), map[string]any{"initialShardCount": 2, "requestedBy": "alice"}},
		{apiGroupPath("orders", "oc", "scale"), map[string]any{"targetShardCount": 3, "requestedBy": "alice", "reason": "r"}},
	} {
		r := apiSend(t, tc, apiAdmin, "POST", c.path, c.body, map[string]string{"X-Request-Id": "trace-8"})
		if r.Status != 503 {
			t.Errorf("%s with Redis down: HTTP %d, want 503: %s", c.path, r.Status, r.Body)
		}
		body := strings.ToLower(string(r.Body))
		for _, leak := range []string{rs.Addr(), ":" + port, "dial", "refused", "127.0.0.1"} {
			if strings.Contains(body, leak) {
				t.Errorf("%s: the answer shows %q: %s", c.path, leak, r.Body)
			}
		}
	}
	for _, p := range []string{
		apiMonPath("orders", "oc", "shards", "0", "messages") + "?cursor=nope",
		gf + "&shardIndex=0&cursor=1-2-3",
	} {
		apiDo(t, tc, "GET", p, nil).apiWantError(t, 400, "INVALID_REQUEST")
	}
}

// TestIntegrationHeaderLimit: request headers beyond 32 KiB are a 431.
func TestIntegrationHeaderLimit(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	for pad, want := range map[int]int{32<<10 - 512: 200, 32 << 10: 431, 64 << 10: 431} {
		req, _ := http.NewRequest("GET", tc.URL+"/readyz", nil)
		req.Header.Set("X-Pad", strings.Repeat("p", pad))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%d bytes of header: %v", pad, err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%d bytes of header: HTTP %d, want %d", pad, resp.StatusCode, want)
		}
	}
}
