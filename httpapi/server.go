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
	"github.com/rscoord/rsc/httpapi/guard"
	"github.com/rscoord/rsc/projection"
)

// Config configures the server.
type Config struct {
	Addr string
	Auth AuthConfig
	// Hosts is which Host headers are answered (guard/browser.go).
	Hosts HostPolicy
	// RateLimitPerMinute limits admin mutations per principal (0: off).
	RateLimitPerMinute int
	Logger             zerolog.Logger
	// Observe, if set, is called after every request (metrics).
	Observe func(route, method string, status int, elapsed time.Duration)
	// Extra routes (metrics, console) registered by cmd. They are served
	// behind the server's middleware like its own; Mount adds routes only
	// (the router's one middleware is the server's chain, which ends in the
	// matched route's own handler).
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

// Server owns the router and the listener. NewServer gives each resource's
// handlers (memberAPI, groupAPI, ...) the parts they use, and composes the
// middleware (security is package guard's) once with the router.
type Server struct {
	cfg Config
	// kit answers the server's own refusals (404, 405, the bounds of a
	// request, a log it cannot read) as the handlers answer theirs.
	kit    kit
	read   Reader
	router *mux.Router
	log    zerolog.Logger
	// guard authenticates and authorizes (its middleware run before every
	// handler); fwd relays what only the leader serves; limit is the rate
	// of admin mutations per principal (nil: unlimited).
	guard   *guard.Guard
	fwd     *guard.Forwarder
	limit   *guard.RateLimiter
	offsets *offsetCache

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
	s := &Server{cfg: cfg, read: parts.Reader, log: cfg.Logger, router: mux.NewRouter().UseEncodedPath().SkipClean(true), releasing: make(chan struct{})}
	stateAt := cfg.StateAt
	if stateAt == nil {
		stateAt = parts.Reader.StateAt
	}
	s.kit = kit{log: cfg.Logger, read: parts.Reader}
	if streams != nil {
		s.offsets = newOffsetCache(streams, parts.Reader.State, cfg.OffsetsRefresh, cfg.Logger)
	}
	s.guard = guard.New(guard.Config{Auth: cfg.Auth, Hosts: cfg.Hosts, Now: cfg.Now, Log: cfg.Logger, WriteError: s.kit.writeError,
		Position: func() string { return parts.Reader.State().LastID() }})
	s.fwd = s.guard.NewForwarder(parts.Leadership, func() string { return parts.Reader.Config().CoordinatorID })
	s.limit = guard.NewRateLimiter(cfg.RateLimitPerMinute, s.kit.writeError)

	// The middleware, in order: the route and what it asks for, the bounds
	// of a request, the Host policy and cross-site mutations, who the caller
	// is (credentials, or a follower's assertion) and what it may call (role,
	// then scope), the content type of mutations, forwarding to the leader,
	// and a log this replica can read. The router runs them for the route it
	// matched; its 404 and 405 answers go through them too, so that a caller
	// without credentials learns nothing of the API.
	//
	// The chain is composed once, here, and ends in the handler of the route
	// the router matched: the router's own per-request wrapping (one
	// closure per middleware per request) would cost every heartbeat nine
	// allocations more.
	chain := []mux.MiddlewareFunc{newAccess(cfg.Auth).resolve, s.bounded, s.guard.Hosts, s.guard.CrossSite,
		s.guard.Authenticate, s.guard.Authorize, s.guard.ContentType, s.fwd.Writes, s.readable}
	secured := through(chain, http.HandlerFunc(serveRoute))
	s.router.Use(func(http.Handler) http.Handler { return secured })
	s.router.NotFoundHandler = through(chain, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.kit.writeError(w, r, errNoRoute.WithMessage("no route for "+r.Method+" "+r.URL.Path))
	}))
	s.router.MethodNotAllowedHandler = through(chain, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if allow := s.allowedMethods(r); allow != "" {
			w.Header().Set("Allow", allow) // RFC 9110 §15.5.6
		}
		s.kit.writeError(w, r, errMethodNotAllowed.WithMessage("method "+r.Method+" not allowed on "+r.URL.Path))
	}))
	// Each resource's handlers get the parts they use. The heartbeat route
	// first: the router tries routes in order, and heartbeats are most of
	// the traffic (no other route matches its paths).
	k, dec, rt, lead := s.kit, parts.Commands, parts.Runtime, parts.Leadership
	s.registerMemberRoutes(&memberAPI{kit: k, dec: dec, releasing: s.releasing})
	s.registerHealthRoutes(&healthAPI{kit: k, lead: lead, readiness: cfg.Readiness})
	s.registerAuthRoutes(&authAPI{kit: k, guard: s.guard})
	history := &historyAPI{kit: k, replays: make(chan struct{}, MaxConcurrentReplays), stateAt: stateAt}
	s.registerStreamRoutes(&streamAPI{kit: k, dec: dec, limit: s.limit, layoutWindow: cfg.LayoutWindow}, history)
	groups := &groupAPI{kit: k, dec: dec, rt: rt, fwd: s.fwd, limit: s.limit, layoutWindow: cfg.LayoutWindow}
	s.registerGroupRoutes(groups)
	s.registerAutoscalingRoutes(&autoscalingAPI{kit: k, dec: dec, rt: rt, fwd: s.fwd, limit: s.limit})
	s.registerMonitoringRoutes(&monitoringAPI{kit: k, rt: rt, fwd: s.fwd, lead: lead, streams: streams, offsets: s.offsets,
		messages: make(chan struct{}, MaxConcurrentMessageReads)}, groups)
	s.registerAuditRoutes(history)
	s.registerLogRoutes(&logAPI{kit: k, dec: dec, limit: s.limit})
	s.registerOpenAPIRoute()
	s.registerConsoleRoutes()
	if cfg.Mount != nil {
		cfg.Mount(s.router)
	}
	return s
}

// serveRoute is the end of the middleware chain: the matched route's own
// handler (the router's only middleware is the chain, so it is the handler
// the router would have called).
func serveRoute(w http.ResponseWriter, r *http.Request) {
	mux.CurrentRoute(r).GetHandler().ServeHTTP(w, r)
}

// through is h behind the middleware chain, first to last.
func through(chain []mux.MiddlewareFunc, h http.Handler) http.Handler {
	for i := len(chain) - 1; i >= 0; i-- {
		h = chain[i](h)
	}
	return h
}

// SetUsers replaces the configured users (a reloaded users file): from the
// next request on, passwords are checked against them and a bearer token is
// accepted only while its user exists, with the roles the user still holds.
// An empty list lets nobody in.
func (s *Server) SetUsers(users []User) { s.guard.SetUsers(users) }

// Router exposes the router (tests walk it).
func (s *Server) Router() *mux.Router { return s.router }

// ConnContext is the http.Server ConnContext the server needs (Open sets
// it; set it too when serving the Server with an http.Server of your own):
// every connection gets its own record of the credentials it proved.
func (s *Server) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return guard.ConnContext(ctx, c)
}

// ServeHTTP gives the request its id, serves it through the router (which
// runs the middleware chain, NewServer) and records it (Config.Observe).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	info := &guard.Request{ID: requestID(r)}
	r = guard.With(r, info)
	rec.Header().Set(headerRequestID, info.ID)
	if s.cfg.Observe != nil {
		defer func() { s.cfg.Observe(info.Route.Label(), r.Method, rec.status, time.Since(start)) }()
	}
	s.router.ServeHTTP(rec, r)
}

// bounded refuses a request whose headers exceed their bounds (431, or 400
// for a trace header) and bounds its body (limits.go).
func (s *Server) bounded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headerBytes(r) > MaxHeaderBytes {
			s.kit.writeError(w, r, errHeaderTooLarge)
			return
		}
		if h := badTraceHeader(r); h != "" {
			s.kit.badRequest(w, r, fmt.Sprintf("header %s: must be at most %d bytes without control characters", h, MaxTraceHeaderBytes))
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		}
		next.ServeHTTP(w, r)
	})
}

// readable refuses every route of the API (login excepted) while the state
// cannot be built without guessing (the log does not decode:
// docs/operations.md, Runbook), and every route naming a stream prefix
// whose entries cannot be read, naming it; the others are served.
func (s *Server) readable(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if m := guard.Of(r).Route; underAPI(m.Template) && m.Template != loginRoute {
			if err := s.read.Corrupt(); err != nil {
				s.kit.writeError(w, r, err)
				return
			}
			if err := quarantined(s.read, m); err != nil {
				s.kit.writeError(w, r, err)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// quarantined is COORDINATOR_METADATA_CORRUPT when the route names a stream
// prefix ({streamPrefix}) that is quarantined; nil otherwise.
func quarantined(read Reader, m guard.Route) error {
	raw, ok := m.Vars["streamPrefix"]
	if !ok {
		return nil
	}
	prefix, err := url.PathUnescape(raw)
	if err != nil {
		return nil // the handler refuses the name
	}
	return read.Quarantined(prefix)
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
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

// kit is what every handler answers with: the one table of error kinds
// (errors.go), strict request bodies, and the group or stream prefix its path
// names, looked up in this replica's projection.
type kit struct {
	log  zerolog.Logger
	read Reader
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

func (h *kit) groupKey(w http.ResponseWriter, r *http.Request) (projection.GroupKey, bool) {
	p, ok := h.pathPrefix(w, r)
	if !ok {
		return projection.GroupKey{}, false
	}
	g, err := pathVar(r, "consumerGroup")
	if err != nil {
		h.badRequest(w, r, err.Error())
		return projection.GroupKey{}, false
	}
	k := projection.GroupKey{StreamPrefix: p, ConsumerGroup: g}
	if err := commands.ValidateKey(k); err != nil {
		h.writeError(w, r, err)
		return k, false
	}
	return k, true
}

// loadGroup resolves the path's group (a copy of it); false means it answered.
func (h *kit) loadGroup(w http.ResponseWriter, r *http.Request) (*projection.Group, bool) {
	k, ok := h.groupKey(w, r)
	if !ok {
		return nil, false
	}
	return h.findGroup(w, r, k)
}

// findGroup looks a valid key up (a copy of the group); false means it answered 404.
func (h *kit) findGroup(w http.ResponseWriter, r *http.Request, k projection.GroupKey) (*projection.Group, bool) {
	g, found := h.read.State().Group(k)
	if !found {
		h.writeError(w, r, commands.ErrGroupNotFound)
		return nil, false
	}
	return g, true
}

// leaderGroup resolves the path's group on the leader: a follower relays the
// request to it (false: fwd or loadGroup answered).
func (h *kit) leaderGroup(fwd *guard.Forwarder, w http.ResponseWriter, r *http.Request) (*projection.Group, bool) {
	if fwd.ToLeader(w, r) {
		return nil, false
	}
	return h.loadGroup(w, r)
}

// admit decodes a mutation's body into v, then applies the rate limit
// (false: it answered).
func (h *kit) admit(limit *guard.RateLimiter, w http.ResponseWriter, r *http.Request, v any, required bool) bool {
	return h.decodeBody(w, r, v, required) && limit.Allow(w, r)
}

// decodeBody reads a JSON body into v. Unknown fields are ignored (as the
// reference does); malformed JSON, wrong types, a key given twice in one
// object and a key that differs from the contract's only by case
// (strictjson.go) are a 400 that says what was wrong.
func (h *kit) decodeBody(w http.ResponseWriter, r *http.Request, v any, required bool) bool {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			h.writeError(w, r, errBodyTooLarge)
			return false
		}
		h.badRequest(w, r, "cannot read request body")
		return false
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if required {
			h.badRequest(w, r, "Required request body is missing")
			return false
		}
		return true
	}
	if err := checkKeys(data, v); err != nil {
		h.badRequest(w, r, "malformed JSON request body: "+err.Error())
		return false
	}
	if err := json.Unmarshal(data, v); err != nil {
		h.badRequest(w, r, "malformed JSON request body: "+describeJSONError(err))
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
	if p := guard.PrincipalOf(r); p != nil {
		m.Actor = p.Username
	}
	return m
}
