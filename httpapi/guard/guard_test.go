package guard_test

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/httpapi/guard"
)

// The guard's middleware composed alone, as the server composes them
// (Authenticate, then Authorize) in front of a handler that records the
// principal it sees: what a route asks for is the Access the server decided
// from the matched route and method, never the path.

type stand struct {
	g    *guard.Guard
	seen *guard.Principal
	ran  bool
}

func newStand(t *testing.T) *stand {
	t.Helper()
	now := time.Unix(1_900_000_000, 0)
	st := &stand{}
	st.g = guard.New(guard.Config{
		Auth: guard.AuthConfig{TokenSecret: "test secret", Users: []guard.User{
			{Username: "admin", Password: "a", Roles: []string{guard.RoleAdmin}},
			{Username: "reader", Password: "r", Roles: []string{guard.RoleRead}},
			{Username: "orders", Password: "o", Roles: []string{guard.RoleWrite}, Prefixes: []string{"orders"}},
		}},
		Now: func() time.Time { return now },
		WriteError: func(w http.ResponseWriter, r *http.Request, err error) {
			var ce *commands.Error
			if !errors.As(err, &ce) {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			switch ce.Kind {
			case commands.KindRateLimited:
				w.WriteHeader(http.StatusTooManyRequests)
			case commands.KindForbidden:
				w.WriteHeader(http.StatusForbidden)
			default:
				w.WriteHeader(http.StatusBadRequest)
			}
		},
	})
	return st
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// serve runs one request on a route that asks for access, naming vars.
func (st *stand) serve(access guard.Access, vars map[string]string, auth string, header ...string) *httptest.ResponseRecorder {
	st.seen, st.ran = nil, false
	r := httptest.NewRequest(http.MethodGet, "/anything", nil)
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	r = guard.With(r, &guard.Request{Route: guard.Route{Template: "/t", Served: true, Vars: vars}, Access: access})
	h := st.g.Authenticate(st.g.Authorize(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st.seen, st.ran = guard.PrincipalOf(r), true
	})))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestAuthorizeByAccess(t *testing.T) {
	st := newStand(t)
	read := guard.Access{Role: guard.RoleRead, API: true}
	write := guard.Access{Role: guard.RoleWrite, API: true}

	if w := st.serve(read, nil, ""); w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") != `Basic realm="redis-stream-coordinator"` || st.ran {
		t.Errorf("no credentials on a READ route: HTTP %d, challenge %q, handler ran %v; want 401 Basic, not run", w.Code, w.Header().Get("WWW-Authenticate"), st.ran)
	}
	if w := st.serve(read, nil, "", "Sec-Fetch-Mode", "cors"); w.Code != http.StatusUnauthorized || w.Header().Get("WWW-Authenticate") != `Bearer realm="redis-stream-coordinator"` {
		t.Errorf("a browser without credentials: HTTP %d, challenge %q; want 401 Bearer", w.Code, w.Header().Get("WWW-Authenticate"))
	}
	if w := st.serve(write, nil, basic("reader", "r")); w.Code != http.StatusForbidden || st.ran {
		t.Errorf("READ user on a WRITE route: HTTP %d, handler ran %v; want 403, not run", w.Code, st.ran)
	}
	if w := st.serve(read, nil, basic("reader", "r")); w.Code != http.StatusOK || st.seen.Name() != "reader" {
		t.Errorf("READ user on a READ route: HTTP %d, principal %q; want 200 as reader", w.Code, st.seen.Name())
	}
	// Scope: the route's {streamPrefix}, percent-encoded as matched.
	if w := st.serve(write, map[string]string{"streamPrefix": "payments"}, basic("orders", "o")); w.Code != http.StatusForbidden || st.ran {
		t.Errorf("a prefix outside the scope: HTTP %d, handler ran %v; want 403, not run", w.Code, st.ran)
	}
	if w := st.serve(write, map[string]string{"streamPrefix": "%6Frders"}, basic("orders", "o")); w.Code != http.StatusOK || st.seen.Name() != "orders" {
		t.Errorf("the scope's prefix, percent-encoded: HTTP %d, principal %q; want 200 as orders", w.Code, st.seen.Name())
	}
	// A route that shows every tenant: no scoped principal, no anonymous one.
	whole := guard.Access{Role: guard.RoleRead, WholeView: true}
	if w := st.serve(whole, nil, basic("orders", "o")); w.Code != http.StatusForbidden {
		t.Errorf("a scoped principal on a whole view: HTTP %d, want 403", w.Code)
	}
	if w := st.serve(whole, nil, basic("admin", "a")); w.Code != http.StatusOK {
		t.Errorf("an unscoped principal on a whole view: HTTP %d, want 200", w.Code)
	}
}

// TestPublicRoutesReadNoCredentials: a public route never looks at the
// Authorization header (failures there spend no throttle bucket), unless
// its Access asks to identify the caller anyway (the heartbeat's).
func TestPublicRoutesReadNoCredentials(t *testing.T) {
	st := newStand(t)
	public := guard.Access{}
	for i := 0; i < 50; i++ {
		if w := st.serve(public, nil, basic("admin", "wrong")); w.Code != http.StatusOK || st.seen != nil {
			t.Fatalf("public route, bad password #%d: HTTP %d, principal %v; want 200, anonymous", i+1, w.Code, st.seen)
		}
	}
	if w := st.serve(guard.Access{Role: guard.RoleRead}, nil, basic("admin", "a")); w.Code != http.StatusOK {
		t.Fatalf("after 50 bad passwords sent to a public route: HTTP %d, want 200 (nothing spent)", w.Code)
	}
	if w := st.serve(guard.Access{Identify: true}, nil, basic("reader", "r")); w.Code != http.StatusOK || st.seen.Name() != "reader" {
		t.Errorf("a public route that identifies: HTTP %d, principal %q; want 200 as reader", w.Code, st.seen.Name())
	}
	if w := st.serve(guard.Access{Identify: true}, nil, ""); w.Code != http.StatusOK || st.seen != nil {
		t.Errorf("a public route that identifies, anonymous: HTTP %d, principal %v; want 200, anonymous", w.Code, st.seen)
	}
}

// TestThrottleWinsOverUnauthorized: once a user failed too often from an
// address, its next password check is 429 with Retry-After, the right
// password included, before any role is looked at; the limit is the
// burst (10 failures answered 401, the 11th request 429).
func TestThrottleWinsOverUnauthorized(t *testing.T) {
	st := newStand(t)
	read := guard.Access{Role: guard.RoleRead}
	for i := 0; i < 10; i++ {
		if w := st.serve(read, nil, basic("reader", "wrong")); w.Code != http.StatusUnauthorized {
			t.Fatalf("failure #%d: HTTP %d, want 401", i+1, w.Code)
		}
	}
	w := st.serve(read, nil, basic("reader", "r"))
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || st.ran {
		t.Fatalf("after 10 failures, the right password: HTTP %d, Retry-After %q, handler ran %v; want 429 with Retry-After, not run", w.Code, w.Header().Get("Retry-After"), st.ran)
	}
	// Another user from the same address still gets its password checked.
	if w := st.serve(read, nil, basic("admin", "a")); w.Code != http.StatusOK {
		t.Errorf("another user from the address: HTTP %d, want 200", w.Code)
	}
}
