package httpapi

import (
	"context"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
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
// last tick. The handlers that show it reach it through leaderMemory only,
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

// forwarder keeps one reverse proxy per leader URL.
type forwarder struct {
	mu       sync.Mutex
	proxies  map[string]*httputil.ReverseProxy
	lastWarn map[string]time.Time // per leader URL: a dead leader fails every request
}

// warnable reports whether a forwarding failure to leaderURL should be logged:
// once a second at most.
func (f *forwarder) warnable(leaderURL string) bool {
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

// isWrite reports whether a request changes state and so must reach the leader.
func isWrite(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return strings.HasPrefix(r.URL.Path, "/coord/v1/") && r.URL.Path != "/coord/v1/auth/login"
}

// forwardWrite relays a write to the leader when this replica follows; false
// means the request is this replica's to serve.
func (s *Server) forwardWrite(w http.ResponseWriter, r *http.Request) bool {
	if !isWrite(r) || s.lead.Role() != coordinator.RoleFollower {
		return false
	}
	leader := s.lead.LeaderNow(r.Context())
	if forwarded(r) || leader.URL == "" || leader.Self {
		w.Header().Set("Retry-After", "1")
		s.writeError(w, r, commands.ErrNotLeader)
		return true
	}
	s.relay(w, r, leader.URL)
	return true
}

// leaderMemory is how a handler reaches what the leader holds in memory. On a
// follower that knows another leader, it relays the request to the leader and
// returns false: the leader answered (or, when it did not, this replica served
// the request again from its own memory). Otherwise it returns the runtime to
// read: this replica's, which is the leader's, a standalone one's, or a
// follower's own when the request was forwarded to it or the leader is unknown
// or did not answer.
func (s *Server) leaderMemory(w http.ResponseWriter, r *http.Request) (Runtime, bool) {
	if fallback, _ := r.Context().Value(localFallbackKey{}).(bool); fallback || s.lead.Role() != coordinator.RoleFollower || forwarded(r) {
		return s.rt, true
	}
	leader := s.lead.LeaderNow(r.Context())
	if leader.URL == "" || leader.Self {
		return s.rt, true
	}
	s.relay(w, r.WithContext(context.WithValue(r.Context(), localFallbackKey{}, true)), leader.URL)
	return nil, false
}

// relay forwards r to the leader at leaderURL and copies its answer. The
// caller's Authorization header stays here: the leader gets a principal
// assertion for this request instead (assertion.go), so a leader URL that is
// not a replica learns no secret.
func (s *Server) relay(w http.ResponseWriter, r *http.Request, leaderURL string) {
	proxy, err := s.fwd.proxy(leaderURL, s)
	if err != nil || s.auth.assertionKey() == nil {
		w.Header().Set("Retry-After", "1")
		s.writeError(w, r, commands.ErrNotLeader)
		return
	}
	body, err := readBody(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	claim := assertion{V: assertionVersion, Client: clientAddr(r), Body: bodyDigest(body), By: s.read.Config().CoordinatorID, Prefixes: nil}
	if p := principalOf(r); p != nil {
		claim.User, claim.Roles, claim.Prefixes, claim.Groups = p.Username, p.Roles, p.Prefixes, p.Groups
	}
	r.Header.Set(headerForwardedBy, s.read.Config().CoordinatorID)
	if ctx, cancel, held := holdDeadline(r); held {
		defer cancel()
		r = r.WithContext(ctx)
	}
	// The leader serves the request under this replica's id (it is valid) and
	// answers with it: one id in both logs and in the answer.
	r.Header.Set(headerRequestID, requestIDOf(r))
	w.Header().Del(headerRequestID)
	proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimKey{}, claim)))
}

// claimKey carries the assertion relay prepared to the proxy's Rewrite, which
// binds it to the outgoing request and signs it.
type claimKey struct{}

// signOutgoing replaces the outgoing request's credentials with a signed
// assertion bound to it.
func (s *Server) signOutgoing(pr *httputil.ProxyRequest) {
	h := pr.Out.Header
	h.Del("Authorization")
	h.Del("Cookie")
	h.Del(headerAssertion)
	claim, ok := pr.In.Context().Value(claimKey{}).(assertion)
	if !ok {
		return // nothing to vouch for: the leader refuses the request
	}
	claim.Expires = s.auth.now().Add(ForwardAssertionTTL).UnixMilli()
	claim.Method, claim.URI = pr.Out.Method, pr.Out.URL.RequestURI()
	if tok, err := s.auth.signAssertion(claim); err == nil {
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

func (f *forwarder) proxy(leaderURL string, s *Server) (*httputil.ReverseProxy, error) {
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
			s.signOutgoing(pr)
		},
		Transport: heldAwareTransport{plain: forwardTransport(ForwardResponseHeaderTimeout), held: forwardTransport(0)},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set(headerForwardedTo, leaderName)
			if pos := resp.Header.Get(headerLogPosition); pos != "" && resp.Request != nil {
				if !s.awaitPosition(resp.Request.Context(), pos) && f.warnable(leaderName+" position") {
					log := s.logFor(resp.Request)
					log.Warn().Str("leader", leaderName).Str("position", pos).Str("at", s.read.State().LastID()).
						Msg("relayed a forwarded write's answer before this replica folded the leader's position (logged once a second)")
				}
			}
			if resp.Header.Get(headerRequestID) == "" && resp.Request != nil {
				resp.Header.Set(headerRequestID, resp.Request.Header.Get(headerRequestID))
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.Header().Set(headerRequestID, requestIDOf(r))
			if fallback, _ := r.Context().Value(localFallbackKey{}).(bool); fallback {
				w.Header().Set("X-Rsc-Leader-Unreachable", leaderName)
				s.router.ServeHTTP(w, r)
				return
			}
			if f.warnable(leaderName) {
				log := s.logFor(r)
				log.Warn().Err(err).Str("leader", leaderName).Str("path", r.URL.Path).Msg("forward to the leader failed (logged once a second)")
			}
			w.Header().Set("Retry-After", "1")
			s.writeError(w, r, commands.ErrNotLeader.WithMessage(
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
func (s *Server) awaitPosition(ctx context.Context, pos string) bool {
	if _, err := events.ParseID(pos); err != nil {
		return true
	}
	deadline := time.NewTimer(ForwardCatchUpWait)
	defer deadline.Stop()
	for pause := time.Millisecond; ; pause = min(2*pause, 16*time.Millisecond) {
		if cmp, err := events.CompareIDs(s.read.State().LastID(), pos); err != nil || cmp >= 0 {
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
