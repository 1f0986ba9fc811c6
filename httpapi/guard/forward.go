package guard

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/wire"
)

// With several replicas on one log, only the leader decides. A follower serves
// every read from its own projection (it tails the log) and forwards every
// write (POST, PUT, PATCH or DELETE under /coord/v1, heartbeats included, login
// excepted) to the leader named in the lease, so clients may talk to any
// replica. The follower authenticates the caller itself and forwards a signed
// principal assertion in place of its credentials (assertion.go). The leader
// answers; the follower relays the answer unchanged, with X-Rsc-Forwarded-To
// naming the leader. A forwarded request is never forwarded again: a replica
// that receives one without leading answers 503.
//
// A few reads show what only the leader holds in memory (Runtime): members'
// leases, last heartbeats and reported progress, and the drain evidence of its
// last tick. The handlers that show it ask Forwarder.ToLeader first,
// which on a follower forwards the request to the leader instead, and serves
// it from the follower's own memory (with X-Rsc-Leader-Unreachable) when the
// leader does not answer.

// Headers of forwarding.
const (
	headerForwardedBy = "X-Rsc-Forwarded-By" // the follower that forwarded the request
	headerForwardedTo = "X-Rsc-Forwarded-To" // on the answer: the leader that served it
	// On the leader's answer to a forwarded write (heartbeats excepted): the
	// last log entry its projection held when it answered. The follower
	// relays the answer once its own projection holds that entry
	// (awaitPosition), so whoever wrote through a follower reads the write
	// back from it.
	headerLogPosition = "X-Rsc-Log-Position"
)

// Forwarding to the leader (--ha): a leader that does not accept, handshake or
// answer in time fails the request with 503 and Retry-After instead of holding
// the follower's goroutine and the caller's connection.
const (
	ForwardDialTimeout           = 2 * time.Second
	ForwardTLSHandshakeTimeout   = 5 * time.Second
	ForwardResponseHeaderTimeout = 15 * time.Second
	// ForwardCatchUpWait bounds how long a follower holds a forwarded write's
	// answer until its own projection reached the leader's position at the
	// answer (X-Rsc-Log-Position), so that a read sent to it next reflects
	// the write; past it the answer is relayed anyway.
	ForwardCatchUpWait = 2 * time.Second
)

// Leadership is what forwarding asks of this replica's place among --ha
// replicas.
type Leadership interface {
	// Role is coordinator.RoleStandalone, RoleLeader or RoleFollower.
	Role() string
	// LeaderNow is the leader as the lease store names it now.
	LeaderNow(ctx context.Context) coordinator.LeaderInfo
}

// Forwarder relays what only the leader may serve: writes (its Writes
// middleware) and the reads of the leader's memory (ToLeader). It keeps one
// reverse proxy per leader URL.
type Forwarder struct {
	g    *Guard
	lead Leadership
	// self is this replica's id (X-Rsc-Forwarded-By, the assertion's By).
	self     func() string
	position func() string // Config.Position

	mu       sync.Mutex
	proxies  map[string]*httputil.ReverseProxy
	lastWarn map[string]time.Time // per leader URL: a dead leader fails every request
}

// NewForwarder builds the forwarder of a replica whose place is lead and
// whose id self names.
func (g *Guard) NewForwarder(lead Leadership, self func() string) *Forwarder {
	return &Forwarder{g: g, lead: lead, self: self, position: g.position}
}

// warnable reports whether a forwarding failure to leaderURL should be logged:
// once a second at most.
func (f *Forwarder) warnable(leaderURL string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lastWarn == nil {
		f.lastWarn = map[string]time.Time{}
	}
	if time.Since(f.lastWarn[leaderURL]) < time.Second {
		return false
	}
	f.lastWarn[leaderURL] = time.Now()
	return true
}

// localFallbackKey marks a read relayed to the leader for its memory: when
// the leader does not answer, this replica serves it from its own.
type localFallbackKey struct{}

// IsWrite reports whether a method changes state (on a route of the API
// other than login, such a request must reach the leader).
func IsWrite(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}

// Writes relays a write (Access.Write) to the leader when this replica
// follows; a replica that follows no other leader, or that was forwarded
// the request, answers 503 NOT_LEADER with Retry-After.
func (f *Forwarder) Writes(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Of(r).Access.Write || f.lead.Role() != coordinator.RoleFollower {
			next.ServeHTTP(w, r)
			return
		}
		leader := f.lead.LeaderNow(r.Context())
		if forwarded(r) || leader.URL == "" || leader.Self {
			w.Header().Set("Retry-After", "1")
			f.g.writeError(w, r, commands.ErrNotLeader)
			return
		}
		f.relay(w, r, leader.URL)
	})
}

// ToLeader is how a handler reaches what the leader holds in memory. On a
// follower that knows another leader, it relays the request to the leader and
// returns true: the leader answered (or, when it did not, this replica served
// the request again from its own memory). Otherwise it returns false and the
// handler reads this replica's memory: the leader's, a standalone one's, or a
// follower's own when the request was forwarded to it or the leader is unknown
// or did not answer.
func (f *Forwarder) ToLeader(w http.ResponseWriter, r *http.Request) bool {
	if fallback, _ := r.Context().Value(localFallbackKey{}).(bool); fallback || f.lead.Role() != coordinator.RoleFollower || forwarded(r) {
		return false
	}
	leader := f.lead.LeaderNow(r.Context())
	if leader.URL == "" || leader.Self {
		return false
	}
	f.relay(w, r.WithContext(context.WithValue(r.Context(), localFallbackKey{}, true)), leader.URL)
	return true
}

// relay forwards r to the leader at leaderURL and copies its answer. The
// caller's Authorization header stays here: the leader gets a principal
// assertion for this request instead (assertion.go), so a leader URL that is
// not a replica learns no secret.
func (f *Forwarder) relay(w http.ResponseWriter, r *http.Request, leaderURL string) {
	proxy, err := f.proxy(leaderURL)
	if err != nil || f.g.auth.assertionKey() == nil {
		w.Header().Set("Retry-After", "1")
		f.g.writeError(w, r, commands.ErrNotLeader)
		return
	}
	body, err := readBody(r)
	if err != nil {
		f.g.writeError(w, r, err)
		return
	}
	self := f.self()
	claim := assertion{V: assertionVersion, Client: ClientAddr(r), Body: bodyDigest(body), By: self, Prefixes: nil}
	if p := PrincipalOf(r); p != nil {
		claim.User, claim.Roles, claim.Prefixes, claim.Groups = p.Username, p.Roles, p.Prefixes, p.Groups
	}
	r.Header.Set(headerForwardedBy, self)
	if ctx, cancel, held := holdDeadline(r); held {
		defer cancel()
		r = r.WithContext(ctx)
	}
	// The leader serves the request under this replica's id (it is valid) and
	// answers with it: one id in both logs and in the answer.
	r.Header.Set(headerRequestID, RequestID(r))
	w.Header().Del(headerRequestID)
	proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimKey{}, claim)))
}

// claimKey carries the assertion relay prepared to the proxy's Rewrite, which
// binds it to the outgoing request and signs it.
type claimKey struct{}

// signOutgoing replaces the outgoing request's credentials with a signed
// assertion bound to it.
func (f *Forwarder) signOutgoing(pr *httputil.ProxyRequest) {
	h := pr.Out.Header
	h.Del("Authorization")
	h.Del("Cookie")
	h.Del(headerAssertion)
	claim, ok := pr.In.Context().Value(claimKey{}).(assertion)
	if !ok {
		return // nothing to vouch for: the leader refuses the request
	}
	claim.Expires = f.g.auth.now().Add(ForwardAssertionTTL).UnixMilli()
	claim.Method, claim.URI = pr.Out.Method, pr.Out.URL.RequestURI()
	if tok, err := f.g.auth.signAssertion(claim); err == nil {
		h.Set(headerAssertion, tok)
	}
}

// forwardTransport is the transport requests are forwarded to the leader
// with; responseHeader 0: no timeout of its own (held heartbeats, which
// their context bounds).
func forwardTransport(responseHeader time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: ForwardDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   ForwardTLSHandshakeTimeout,
		ResponseHeaderTimeout: responseHeader,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       30 * time.Second,
	}
}

func (f *Forwarder) proxy(leaderURL string) (*httputil.ReverseProxy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.proxies[leaderURL]; p != nil {
		return p, nil
	}
	target, err := url.Parse(leaderURL)
	if err != nil {
		return nil, err
	}
	leaderName := leaderURL
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			f.signOutgoing(pr)
		},
		Transport: heldAwareTransport{plain: forwardTransport(ForwardResponseHeaderTimeout), held: forwardTransport(0)},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set(headerForwardedTo, leaderName)
			if pos := resp.Header.Get(headerLogPosition); pos != "" && resp.Request != nil {
				if !f.awaitPosition(resp.Request.Context(), pos) && f.warnable(leaderName+" position") {
					log := f.g.logFor(resp.Request)
					log.Warn().Str("leader", leaderName).Str("position", pos).Str("at", f.position()).
						Msg("relayed a forwarded write's answer before this replica folded the leader's position (logged once a second)")
				}
			}
			if resp.Header.Get(headerRequestID) == "" && resp.Request != nil {
				resp.Header.Set(headerRequestID, resp.Request.Header.Get(headerRequestID))
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.Header().Set(headerRequestID, RequestID(r))
			if fallback, _ := r.Context().Value(localFallbackKey{}).(bool); fallback {
				w.Header().Set("X-Rsc-Leader-Unreachable", leaderName)
				// The matched route's own handler, without the middleware
				// that already ran.
				mux.CurrentRoute(r).GetHandler().ServeHTTP(w, r)
				return
			}
			if f.warnable(leaderName) {
				log := f.g.logFor(r)
				log.Warn().Err(err).Str("leader", leaderName).Str("path", r.URL.Path).Msg("forward to the leader failed (logged once a second)")
			}
			w.Header().Set("Retry-After", "1")
			f.g.writeError(w, r, commands.ErrNotLeader.WithMessage(
				"This coordinator replica does not hold the leader lease and the leader at "+leaderName+" did not answer; retry"))
		},
	}
	if f.proxies == nil {
		f.proxies = map[string]*httputil.ReverseProxy{}
	}
	f.proxies[leaderURL] = p
	return p, nil
}

// awaitPosition waits until this replica's projection holds the log entry pos
// names, at most ForwardCatchUpWait and while ctx lasts; false when it did
// not get there. An unreadable position is not waited for. The follower's
// tail folds new entries within milliseconds, so the wait polls, backing off
// from 1 to 16 ms.
func (f *Forwarder) awaitPosition(ctx context.Context, pos string) bool {
	if _, err := events.ParseID(pos); err != nil {
		return true
	}
	deadline := time.NewTimer(ForwardCatchUpWait)
	defer deadline.Stop()
	for pause := time.Millisecond; ; pause = min(2*pause, 16*time.Millisecond) {
		if cmp, err := events.CompareIDs(f.position(), pos); err != nil || cmp >= 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-time.After(pause):
		}
	}
}

// stampWriter names this replica's log position on the answer to a
// forwarded write (headerLogPosition), computed when the answer starts
// (after the handler decided).
type stampWriter struct {
	http.ResponseWriter
	position func() string
	stamped  bool
}

func (s *stampWriter) stamp() {
	if !s.stamped {
		s.stamped = true
		s.ResponseWriter.Header().Set(headerLogPosition, s.position())
	}
}

func (s *stampWriter) WriteHeader(code int) {
	s.stamp()
	s.ResponseWriter.WriteHeader(code)
}

func (s *stampWriter) Write(b []byte) (int, error) {
	s.stamp()
	return s.ResponseWriter.Write(b)
}

// headerRequestID is the request id's header.
const headerRequestID = "X-Request-Id"

// MaxHoldHeader is the largest X-Rsc-Hold-Ms accepted; a larger value is a
// 400 (the coordinator's own maximum clamps what is accepted).
const MaxHoldHeader = 10 * time.Minute

// HoldOf reads X-Rsc-Hold-Ms: the hold asked for (0: none), or a problem
// with the header's value.
func HoldOf(r *http.Request) (time.Duration, string) {
	v := r.Header.Get(wire.HeaderHold)
	if v == "" {
		return 0, ""
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 || ms > MaxHoldHeader.Milliseconds() {
		return 0, "header " + wire.HeaderHold + ": must be a whole number of milliseconds from 0 to " + strconv.FormatInt(MaxHoldHeader.Milliseconds(), 10)
	}
	return time.Duration(ms) * time.Millisecond, ""
}

// holdDeadline is the context a follower forwards a held heartbeat under:
// the leader may hold it for as long as it asks, and then answer within the
// usual forwarding timeout.
func holdDeadline(r *http.Request) (context.Context, context.CancelFunc, bool) {
	d, problem := HoldOf(r)
	if d <= 0 || problem != "" {
		return r.Context(), func() {}, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), d+ForwardResponseHeaderTimeout)
	return ctx, cancel, true
}

// heldAwareTransport sends held heartbeats through a transport without a
// response-header timeout (their context bounds them, holdDeadline) and
// every other forwarded request through the plain one.
type heldAwareTransport struct {
	plain, held http.RoundTripper
}

func (t heldAwareTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get(wire.HeaderHold) != "" {
		return t.held.RoundTrip(r)
	}
	return t.plain.RoundTrip(r)
}
