package guard

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
)

// Config configures the guard.
type Config struct {
	Auth  AuthConfig
	Hosts HostPolicy
	// Now is the clock of authentication (token expiry, failed-login
	// throttling); time.Now when nil. Tests move it.
	Now func() time.Time
	Log zerolog.Logger
	// WriteError answers an error with the contract's error body (the
	// server's one table of error kinds).
	WriteError func(w http.ResponseWriter, r *http.Request, err error)
	// Position is the last log entry this replica's projection holds: the
	// answer to a forwarded write names it, and a follower waits for the
	// leader's before it relays an answer (forward.go).
	Position func() string
}

// Guard holds the security state of one server: the user table, the
// failed-login throttle, the rate of refusal log lines, and the secrets of
// tokens and assertions. Its middleware are composed once by the server.
type Guard struct {
	auth       *authenticator
	hosts      HostPolicy
	log        zerolog.Logger
	writeError func(http.ResponseWriter, *http.Request, error)
	position   func() string
	refusals   everySecond // rate of the refused-request log lines
}

// New builds a guard.
func New(cfg Config) *Guard {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Guard{auth: newAuthenticator(cfg.Auth, cfg.Now), hosts: cfg.Hosts, log: cfg.Log, writeError: cfg.WriteError, position: cfg.Position}
}

// SetUsers replaces the configured users (a reloaded users file): from the
// next request on, passwords are checked against them and a bearer token is
// accepted only while its user exists, with the roles the user still holds.
// An empty list lets nobody in.
func (g *Guard) SetUsers(users []User) { g.auth.setUsers(users) }

// Authenticate finds who the request is: for a request a --ha follower
// forwarded to a route of the API, the principal its assertion names (403
// FORWARDED_REQUEST_REFUSED without a valid one); otherwise, on a route
// that asks for a role or reads credentials anyway, the caller's
// Authorization header. Public routes read no credentials (a bad password
// sent to /healthz spends nobody's bucket). A password check refused after
// too many failures is 429 with Retry-After, before any role is looked at.
func (g *Guard) Authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := Of(r)
		switch {
		case info.Access.API && forwarded(r):
			p, ok := g.acceptForwarded(w, r)
			if !ok {
				return
			}
			info.Principal = p
			if info.Access.Stamp {
				// The follower holds the answer until it folded this far.
				w = &stampWriter{ResponseWriter: w, position: g.position}
			}
		case info.Access.Role != "" || info.Access.Identify:
			p, err := g.auth.authenticate(r, ClientAddr(r))
			if g.Throttled(w, r, err) {
				return
			}
			info.Principal = p
		}
		next.ServeHTTP(w, r)
	})
}

// Authorize refuses a request whose principal lacks the role the route asks
// for (the contract's bodiless 401 without one, an empty 403 with too few
// roles), then one that names a stream prefix or consumer group outside its
// scope, or that shows every tenant to a scoped principal (empty 403).
func (g *Guard) Authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := Of(r)
		p, required := info.Principal, info.Access.Role
		if required != "" {
			switch {
			case p == nil:
				g.logRefusal(r, required, p, "no valid credentials")
				unauthorized(w, r)
				return
			case !p.Grants(required):
				g.logRefusal(r, required, p, "missing role")
				w.WriteHeader(http.StatusForbidden)
				return
			}
		}
		if !routeInScope(p, info.Route) || (info.Access.WholeView && (p == nil || p.Prefixes != nil || p.Groups != nil)) {
			g.logRefusal(r, required, p, "stream prefix or consumer group outside the principal's scope")
			w.WriteHeader(http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Unscoped refuses a principal scoped to stream prefixes (empty 403): for a
// route whose handler changes every tenant's state at once.
func (g *Guard) Unscoped(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := PrincipalOf(r); p.Scoped() {
			g.logRefusal(r, Of(r).Access.Role, p, "a principal scoped to stream prefixes cannot restore the whole log")
			w.WriteHeader(http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// routeInScope reports whether the prefix the matched route names (if any)
// is in p's scope, and the consumer group it names (if any) among p's
// groups. A name that does not percent-decode is out of every scope (its
// handler would refuse it anyway).
func routeInScope(p *Principal, m Route) bool {
	if p != nil && p.Groups != nil {
		if raw, ok := m.Vars["consumerGroup"]; ok {
			group, err := url.PathUnescape(raw)
			if err != nil || !p.CoversGroup(group) {
				return false
			}
		}
	}
	if !p.Scoped() {
		return true
	}
	raw, ok := m.Vars["streamPrefix"]
	if !ok {
		return true
	}
	prefix, err := url.PathUnescape(raw)
	return err == nil && p.Covers(prefix)
}

// Visible reports whether r's principal may see the groups of prefix (list
// and aggregate routes filter with it).
func Visible(r *http.Request, prefix string) bool { return PrincipalOf(r).Covers(prefix) }

// NamedPrefix answers 403 (empty body, as Authorize's refusal) when a query
// parameter names a prefix outside r's principal's scope; false means it
// answered. An empty or blank prefix names none.
func (g *Guard) NamedPrefix(w http.ResponseWriter, r *http.Request, prefix string) bool {
	if blank(prefix) || Visible(r, prefix) {
		return true
	}
	g.logRefusal(r, "", PrincipalOf(r), "stream prefix outside the principal's scope")
	w.WriteHeader(http.StatusForbidden)
	return false
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }

// Token is a bearer token issued at login.
type Token struct {
	Token     string
	ExpiresAt time.Time
	// TTL is the seconds it has to live.
	TTL   int64
	Roles []string
}

// Login issues a token for a user name and password, or, when user is "",
// for the credentials of r's own Authorization header (a valid token buys a
// fresh one that expires no later than it does). Password checks are
// throttled: the error is then one Throttled answers; otherwise it is
// ErrBadCredentials.
func (g *Guard) Login(r *http.Request, user, password string) (Token, error) {
	var p *Principal
	var err error
	if user != "" {
		p, err = g.auth.checkPassword(user, password, ClientAddr(r), proofOf(r))
	} else {
		p, err = g.auth.authenticate(r, ClientAddr(r)) // login is public: Authenticate read no credentials
	}
	if err != nil || p == nil {
		return Token{}, errors.Join(ErrBadCredentials, err)
	}
	now := g.auth.now()
	tok, exp, err := g.auth.issueToken(p, now)
	if err != nil {
		return Token{}, err
	}
	ttl := int64(g.auth.cfg.TokenTTL.Seconds())
	if left := exp.Unix() - now.Unix(); left < ttl {
		ttl = max(left, 0) // an exchanged token, capped by the one presented
	}
	return Token{Token: tok, ExpiresAt: exp, TTL: ttl, Roles: p.Roles}, nil
}

// Throttled answers a password check refused after too many failures (429
// with Retry-After) and reports whether err was one. It is logged at most
// once a second per reason, with the user name (cut) and the address, so
// that an attack on an account shows in the log.
func (g *Guard) Throttled(w http.ResponseWriter, r *http.Request, err error) bool {
	var te *throttledError
	if !errors.As(err, &te) {
		return false
	}
	if g.refusals.allow("throttle|"+te.reason, time.Now()) {
		log := g.logFor(r)
		log.Warn().Str("reason", te.reason).Str("user", truncateText(te.user, 64)).Str("client", ClientAddr(r)).Dur("retryAfter", te.wait).
			Msg("password checks throttled after failed logins (logged at most once a second per reason)")
	}
	w.Header().Set("Retry-After", strconv.Itoa(RetryAfterSeconds(te.wait)))
	g.writeError(w, r, errTooManyLogins.WithMessage("Too many failed logins "+te.reason+"; retry later"))
	return true
}

// errTooManyLogins: password checks for this user or address are throttled.
var errTooManyLogins = commands.ErrRateLimited.WithMessage("Too many failed logins for this user or from this address; retry later")

// logRefusal logs a request refused by authentication or authorization, at
// most once a second per route and reason: a member whose credentials expired
// or are missing (its client may give up silently) shows in the log.
func (g *Guard) logRefusal(r *http.Request, required string, p *Principal, why string) {
	route := Of(r).Route.Label()
	if !g.refusals.allow(route+"|"+why, time.Now()) {
		return
	}
	log := g.logFor(r)
	ev := log.Warn().Str("route", route).Str("method", r.Method).Str("required", required).Str("remote", r.RemoteAddr).Str("client", ClientAddr(r))
	if p != nil {
		ev = ev.Str("principal", p.Username)
	}
	ev.Msg("request refused: " + why + " (logged at most once a second per route)")
}

func (g *Guard) logFor(r *http.Request) zerolog.Logger { return Logger(g.log, r) }

// Logger is log with r's id, route and method.
func Logger(log zerolog.Logger, r *http.Request) zerolog.Logger {
	info := Of(r)
	return log.With().Str("requestId", info.ID).Str("route", info.Route.Label()).Str("method", r.Method).Logger()
}

// everySecond lets one event per key through per second (bounded keys).
type everySecond struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (e *everySecond) allow(key string, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last == nil || len(e.last) > 1024 {
		e.last = map[string]time.Time{}
	}
	if now.Sub(e.last[key]) < time.Second {
		return false
	}
	e.last[key] = now
	return true
}
