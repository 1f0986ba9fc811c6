package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Config configures the server.
type Config struct {
	Addr string
	Auth AuthConfig
	// Hosts is which Host headers are answered (browser.go).
	Hosts HostPolicy
	// RateLimitPerMinute limits admin mutations per principal (0: off).
	RateLimitPerMinute int
	Logger             zerolog.Logger
	// Observe, if set, is called after every request (metrics).
	Observe func(route, method string, status int, elapsed time.Duration)
	// Extra routes (metrics, console) registered by cmd.
	Mount func(r *mux.Router)
	// OffsetsRefresh is how often the cache of Redis's view of shard streams
	// is refreshed (offsetcache.go; DefaultOffsetsRefresh when 0).
	OffsetsRefresh time.Duration
	// Now is the clock of authentication (token expiry, failed-login
	// throttling); time.Now when nil. Tests move it.
	Now func() time.Time
	// StateAt, if set, replaces the coordinator's StateAt in the replay
	// endpoint (tests hold a replay in flight with it).
	StateAt func(ctx context.Context, until string) (*projection.State, error)
	// LayoutWindow is how far back producer routing answers list the
	// previous layouts (previousLayouts, layoutWindowMs); 0 lists none.
	LayoutWindow time.Duration
	// Readiness, if set, is asked by /readyz after the coordinator's own
	// checks: an error makes this replica NOT_READY (503) with its errorCode
	// and message (cmd's checks of what lives outside the coordinator, such
	// as the token secret kept in Redis).
	Readiness func() *commands.Error
}

// Server owns the router and the listener.
type Server struct {
	cfg     Config
	dec     Commands
	read    Reader
	rt      Runtime // only through leaderMemory
	lead    Leadership
	streams StreamReader
	auth    *authenticator
	router  *mux.Router
	// catchAll holds the API's catch-all route (access.go).
	catchAll *mux.Router
	log      zerolog.Logger
	limiter  *rateLimiter
	fwd      forwarder
	offsets  *offsetCache
	replays  chan struct{} // a slot per replay in flight
	messages chan struct{} // a slot per messages page in flight
	refusals everySecond   // rate of the refused-request log lines
	stateAt  func(ctx context.Context, until string) (*projection.State, error)

	// releasing is closed when Close begins: held heartbeats are answered
	// at once (hold.go).
	releasing   chan struct{}
	releaseOnce sync.Once

	ln         net.Listener
	srv        *http.Server
	done       chan struct{}
	stopOffset context.CancelFunc
	mu         sync.Mutex
}

// NewServer builds the server over a coordinator's parts (PartsOf);
// streams may be nil (offsets and messages then answer 503).
func NewServer(cfg Config, parts Parts, streams StreamReader) *Server {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, dec: parts.Commands, read: parts.Reader, rt: parts.Runtime, lead: parts.Leadership, streams: streams, auth: newAuthenticator(cfg.Auth, cfg.Now), log: cfg.Logger,
		router: mux.NewRouter().UseEncodedPath().SkipClean(true), catchAll: newCatchAll(), replays: make(chan struct{}, MaxConcurrentReplays),
		messages: make(chan struct{}, MaxConcurrentMessageReads), stateAt: cfg.StateAt, releasing: make(chan struct{})}
	if s.stateAt == nil {
		s.stateAt = parts.Reader.StateAt
	}
	if streams != nil {
		s.offsets = newOffsetCache(streams, parts.Reader.State, cfg.OffsetsRefresh, cfg.Logger)
	}
	if cfg.RateLimitPerMinute != 0 {
		s.limiter = newRateLimiter(cfg.RateLimitPerMinute)
	}
	s.router.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errNoRoute.WithMessage("no route for "+r.Method+" "+r.URL.Path))
	})
	s.router.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allow := s.allowedMethods(r); allow != "" {
			w.Header().Set("Allow", allow) // RFC 9110 §15.5.6
		}
		s.writeError(w, r, errMethodNotAllowed.WithMessage("method "+r.Method+" not allowed on "+r.URL.Path))
	})
	// The heartbeat route first: the router tries routes in order, and
	// heartbeats are most of the traffic (no other route matches its paths).
	s.registerMemberRoutes()
	s.registerHealthRoutes()
	s.registerAuthRoutes()
	s.registerGroupRoutes()
	s.registerAutoscalingRoutes()
	s.registerMonitoringRoutes()
	s.registerAuditRoutes()
	s.registerLogRoutes()
	s.registerOpenAPIRoute()
	s.registerConsoleRoutes()
	if cfg.Mount != nil {
		cfg.Mount(s.router)
	}
	return s
}

// SetUsers replaces the configured users (a reloaded users file): from the
// next request on, passwords are checked against them and a bearer token is
// accepted only while its user exists, with the roles the user still holds.
// An empty list lets nobody in.
func (s *Server) SetUsers(users []User) { s.auth.setUsers(users) }

// Router exposes the router (tests walk it).
func (s *Server) Router() *mux.Router { return s.router }

// ServeHTTP runs the middleware chain: request id, header limits, body
// limit, the Host policy, cross-site mutations, authentication (the caller's
// credentials, or a follower's assertion) and authorization by route (role,
// then prefix scope), the content type of mutations, forwarding, routing.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	match := s.resolve(r)
	r = withRequestInfo(r, requestInfo{id: requestID(r), route: match.label()})
	rec.Header().Set(headerRequestID, requestIDOf(r))
	defer func() {
		if s.cfg.Observe != nil {
			s.cfg.Observe(match.label(), r.Method, rec.status, time.Since(start))
		}
	}()
	if headerBytes(r) > MaxHeaderBytes {
		s.writeError(rec, r, errHeaderTooLarge)
		return
	}
	if h := badTraceHeader(r); h != "" {
		s.badRequest(rec, r, fmt.Sprintf("header %s: must be at most %d bytes without control characters", h, MaxTraceHeaderBytes))
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(rec, r.Body, MaxBodyBytes)
	}
	if !s.cfg.Hosts.hostAllowed(r) {
		s.logRefusal(r, match.label(), "", nil, "Host not allowed")
		s.writeError(rec, r, errHostNotAllowed)
		return
	}
	mutation := isMutation(r.Method) && underAPI(match.template)
	if mutation && s.cfg.Hosts.crossSite(r) {
		s.logRefusal(r, match.label(), "", nil, "cross-site mutation")
		s.writeError(rec, r, errCrossSite)
		return
	}
	required := s.auth.requiredRole(match, r.Method)
	var p *principal
	var err error
	switch {
	case underAPI(match.template) && forwarded(r):
		var ok bool
		if r, p, ok = s.acceptForwarded(rec, r); !ok {
			return
		}
		if isWrite(r) && match.template != heartbeatRoute {
			// The follower holds the answer until it folded this far.
			rec.stamp = func(h http.Header) { h.Set(headerLogPosition, s.read.State().LastID()) }
		}
	case required != "" || match.template == heartbeatRoute:
		// Public routes read no credentials (a bad password sent to /healthz
		// spends nobody's bucket), except the heartbeat's: a member that
		// joined with credentials stays bound to them.
		p, err = s.auth.authenticate(r, clientAddr(r))
	}
	var te *throttledError
	if errors.As(err, &te) {
		s.tooManyFailures(rec, r, te)
		return
	}
	if required != "" {
		switch {
		case err != nil || p == nil:
			s.logRefusal(r, match.label(), required, p, "no valid credentials")
			unauthorized(rec, r)
			return
		case !p.grants(required):
			s.logRefusal(r, match.label(), required, p, "missing role")
			rec.WriteHeader(http.StatusForbidden)
			return
		}
	}
	if !routeInScope(p, match) || !s.auth.wholeView(p, match) {
		s.logRefusal(r, match.label(), required, p, "stream prefix or consumer group outside the principal's scope")
		rec.WriteHeader(http.StatusForbidden)
		return
	}
	if mutation && contentTypeProblem(r) {
		s.writeError(rec, r, errUnsupportedMedia)
		return
	}
	r = r.WithContext(context.WithValue(r.Context(), principalKey{}, authOutcome{p, err}))
	if s.forwardWrite(rec, r) {
		return
	}
	if underAPI(match.template) && match.template != loginRoute {
		// The state cannot be built without guessing: every API route
		// refuses until the log decodes again (docs/operations.md, Runbook).
		if err := s.read.Corrupt(); err != nil {
			s.writeError(rec, r, err)
			return
		}
		// An entry of one prefix cannot be read: every route of that
		// prefix refuses, naming it; the others are served.
		if err := s.quarantined(match); err != nil {
			s.writeError(rec, r, err)
			return
		}
	}
	if match.handler != nil {
		// The route resolve matched, with the router's middleware: matching
		// again in the router would cost as much once more.
		match.handler.ServeHTTP(rec, mux.SetURLVars(r, match.vars))
		return
	}
	s.router.ServeHTTP(rec, r)
}

// authOutcome is what the Authorization header proved: a principal, or why not.
type authOutcome struct {
	p   *principal
	err error
}

type principalKey struct{}

func principalOf(r *http.Request) *principal {
	return authOf(r).p
}

func authOf(r *http.Request) authOutcome {
	o, _ := r.Context().Value(principalKey{}).(authOutcome)
	return o
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	// stamp, if set, adds headers computed when the answer starts (after the
	// handler decided): the log position of a forwarded write.
	stamp func(http.Header)
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
		s.stampHeaders()
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if !s.wrote {
		s.wrote = true
		s.stampHeaders()
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) stampHeaders() {
	if s.stamp != nil {
		s.stamp(s.ResponseWriter.Header())
		s.stamp = nil
	}
}

// Open listens on the configured address (":0" picks a free port) and serves.
func (s *Server) Open() error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.Addr, err)
	}
	s.mu.Lock()
	s.ln = ln
	s.srv = &http.Server{Handler: s, MaxHeaderBytes: MaxHeaderBytes, ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout: ReadTimeout, WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout, ConnContext: s.ConnContext}
	s.done = make(chan struct{})
	if s.offsets != nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.stopOffset = cancel
		go s.offsets.run(ctx)
	}
	s.mu.Unlock()
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Msg("http server")
		}
	}()
	return nil
}

// URL is the base URL of the running server.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	addr := s.ln.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return fmt.Sprintf("http://%s", net.JoinHostPort(host, fmt.Sprint(addr.Port)))
}

// Close stops accepting connections, answers the held heartbeats at once
// and waits for the requests in flight.
func (s *Server) Close(ctx context.Context) error {
	s.releaseOnce.Do(func() { close(s.releasing) })
	s.mu.Lock()
	srv, stop := s.srv, s.stopOffset
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	<-s.done
	return err
}

// pathVar returns a percent-decoded path parameter.
func pathVar(r *http.Request, name string) (string, error) {
	raw := mux.Vars(r)[name]
	v, err := url.PathUnescape(raw)
	if err != nil {
		return "", fmt.Errorf("path parameter %s: invalid percent-encoding", name)
	}
	return v, nil
}

// allowedMethods lists the methods a route serves r's path with, for a 405's
// Allow header.
func (s *Server) allowedMethods(r *http.Request) string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := *r
		probe.Method = m
		var match mux.RouteMatch
		if s.router.Match(&probe, &match) && match.MatchErr == nil && match.Route != nil {
			allow = append(allow, m)
		}
	}
	return strings.Join(allow, ", ")
}

func (s *Server) groupKey(w http.ResponseWriter, r *http.Request) (projection.GroupKey, bool) {
	p, err := pathVar(r, "streamPrefix")
	if err != nil {
		s.badRequest(w, r, err.Error())
		return projection.GroupKey{}, false
	}
	g, err := pathVar(r, "consumerGroup")
	if err != nil {
		s.badRequest(w, r, err.Error())
		return projection.GroupKey{}, false
	}
	k := projection.GroupKey{StreamPrefix: p, ConsumerGroup: g}
	if err := commands.ValidateKey(k); err != nil {
		s.writeError(w, r, err)
		return k, false
	}
	return k, true
}

// loadGroup resolves the path's group (a copy of it); false means it answered.
func (s *Server) loadGroup(w http.ResponseWriter, r *http.Request) (*projection.Group, bool) {
	k, ok := s.groupKey(w, r)
	if !ok {
		return nil, false
	}
	return s.findGroup(w, r, k)
}

// findGroup looks a valid key up (a copy of the group); false means it answered 404.
func (s *Server) findGroup(w http.ResponseWriter, r *http.Request, k projection.GroupKey) (*projection.Group, bool) {
	g, found := s.read.State().Group(k)
	if !found {
		s.writeError(w, r, commands.ErrGroupNotFound)
		return nil, false
	}
	return g, true
}

// decodeBody reads a JSON body into v. Unknown fields are ignored (as the
// reference does); malformed JSON, wrong types, a key given twice in one
// object and a key that differs from the contract's only by case
// (strictjson.go) are a 400 that says what was wrong.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any, required bool) bool {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.writeError(w, r, errBodyTooLarge)
			return false
		}
		s.badRequest(w, r, "cannot read request body")
		return false
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if required {
			s.badRequest(w, r, "Required request body is missing")
			return false
		}
		return true
	}
	if err := checkKeys(data, v); err != nil {
		s.badRequest(w, r, "malformed JSON request body: "+err.Error())
		return false
	}
	if err := json.Unmarshal(data, v); err != nil {
		s.badRequest(w, r, "malformed JSON request body: "+describeJSONError(err))
		return false
	}
	return true
}

// maxEchoBytes bounds the input an error message quotes.
const maxEchoBytes = 64

func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// Value holds the input for a number ("number 1111…"): a 500 kB
		// number came back whole in the message.
		value := te.Value
		if len(value) > maxEchoBytes {
			value = strings.ToValidUTF8(value[:maxEchoBytes], "") + "…"
		}
		if te.Field != "" {
			return fmt.Sprintf("%s: cannot use JSON %s as %s", te.Field, value, te.Type)
		}
		return fmt.Sprintf("cannot use JSON %s as %s", value, te.Type)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v at offset %d", se, se.Offset)
	}
	return err.Error()
}

// meta is the audit identity of a request.
func meta(r *http.Request) events.Meta {
	m := events.Meta{}
	for _, h := range []string{"X-Request-Id", "X-Correlation-Id", "X-Amzn-Trace-Id"} {
		if v := r.Header.Get(h); v != "" {
			m.RequestID = v
			break
		}
	}
	if p := principalOf(r); p != nil {
		m.Actor = p.Username
	}
	return m
}

// logRefusal logs a request refused by authentication or authorization, at
// most once a second per route and reason: a member whose credentials expired
// or are missing (its client may give up silently) shows in the log.
func (s *Server) logRefusal(r *http.Request, route, required string, p *principal, why string) {
	if !s.refusals.allow(route+"|"+why, time.Now()) {
		return
	}
	log := s.logFor(r)
	ev := log.Warn().Str("route", route).Str("method", r.Method).Str("required", required).Str("remote", r.RemoteAddr).Str("client", clientAddr(r))
	if p != nil {
		ev = ev.Str("principal", p.Username)
	}
	ev.Msg("request refused: " + why + " (logged at most once a second per route)")
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
