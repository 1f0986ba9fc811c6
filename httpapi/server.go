package httpapi

import (
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

// MaxBodyBytes bounds every request body.
const MaxBodyBytes = 1 << 20

// Config configures the server.
type Config struct {
	Addr string
	Auth AuthConfig
	// RateLimitPerMinute limits admin mutations per principal:prefix:group (0: off).
	RateLimitPerMinute int
	Logger             zerolog.Logger
	// Observe, if set, is called after every request (metrics).
	Observe func(route, method string, status int, elapsed time.Duration)
	// Extra routes (metrics, console) registered by cmd.
	Mount func(r *mux.Router)
}

// Server owns the router and the listener.
type Server struct {
	cfg     Config
	c       *commands.Coordinator
	streams StreamReader
	auth    *authenticator
	router  *mux.Router
	log     zerolog.Logger
	limiter *rateLimiter
	fwd     forwarder

	ln   net.Listener
	srv  *http.Server
	done chan struct{}
	mu   sync.Mutex
}

// NewServer builds the server; streams may be nil (offsets and messages then answer 503).
func NewServer(cfg Config, c *commands.Coordinator, streams StreamReader) *Server {
	s := &Server{cfg: cfg, c: c, streams: streams, auth: newAuthenticator(cfg.Auth), log: cfg.Logger, router: mux.NewRouter().UseEncodedPath().SkipClean(true)}
	if cfg.RateLimitPerMinute != 0 {
		s.limiter = newRateLimiter(cfg.RateLimitPerMinute)
	}
	s.router.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, ErrorResponse{Status: "NOT_FOUND", ErrorCode: "NOT_FOUND", Message: "no route for " + r.Method + " " + r.URL.Path, Timestamp: time.Now().UTC(), Path: r.URL.Path})
	})
	s.router.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusMethodNotAllowed, ErrorResponse{Status: "METHOD_NOT_ALLOWED", ErrorCode: "METHOD_NOT_ALLOWED", Message: "method " + r.Method + " not allowed on " + r.URL.Path, Timestamp: time.Now().UTC(), Path: r.URL.Path})
	})
	s.registerHealthRoutes()
	s.registerAuthRoutes()
	s.registerGroupRoutes()
	s.registerMemberRoutes()
	s.registerMonitoringRoutes()
	s.registerAuditRoutes()
	s.registerOpenAPIRoute()
	s.registerConsoleRoutes()
	if cfg.Mount != nil {
		cfg.Mount(s.router)
	}
	return s
}

// Router exposes the router (tests walk it).
func (s *Server) Router() *mux.Router { return s.router }

// ServeHTTP runs the middleware chain: body limit, authentication, routing.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(rec, r.Body, MaxBodyBytes)
	}
	route := "unmatched"
	var match mux.RouteMatch
	if s.router.Match(r, &match) && match.Route != nil {
		if tpl, err := match.Route.GetPathTemplate(); err == nil {
			route = tpl
		}
	}
	defer func() {
		if s.cfg.Observe != nil {
			s.cfg.Observe(route, r.Method, rec.status, time.Since(start))
		}
	}()
	required := s.auth.requiredRole(r)
	p, err := s.auth.authenticate(r)
	if required != "" {
		if err != nil || p == nil {
			unauthorized(rec)
			return
		}
		if !p.grants(required) {
			rec.WriteHeader(http.StatusForbidden)
			return
		}
	}
	if p != nil {
		r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
	}
	if s.forward(rec, r, route) {
		return
	}
	s.router.ServeHTTP(rec, r)
}

type principalKey struct{}

func principalOf(r *http.Request) *principal {
	p, _ := r.Context().Value(principalKey{}).(*principal)
	return p
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
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.done = make(chan struct{})
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

// Close stops accepting connections and waits for requests in flight.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	srv := s.srv
	s.mu.Unlock()
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
	g, found := s.c.State().Group(k)
	if !found {
		s.writeError(w, r, commands.ErrGroupNotFound)
		return nil, false
	}
	return g, true
}

// decodeBody reads a JSON body into v. Unknown fields are ignored (as the
// reference does); malformed JSON and wrong types are a 400 that says what was wrong.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, v any, required bool) bool {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeJSON(w, http.StatusRequestEntityTooLarge, ErrorResponse{Status: "PAYLOAD_TOO_LARGE", ErrorCode: "INVALID_REQUEST", Message: fmt.Sprintf("request body larger than %d bytes", MaxBodyBytes), Timestamp: time.Now().UTC(), Path: r.URL.Path})
			return false
		}
		s.badRequest(w, r, "cannot read request body")
		return false
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		if required {
			s.badRequest(w, r, "Required request body is missing")
			return false
		}
		return true
	}
	if err := json.Unmarshal(data, v); err != nil {
		s.badRequest(w, r, "malformed JSON request body: "+describeJSONError(err))
		return false
	}
	return true
}

func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("%s: cannot use JSON %s as %s", te.Field, te.Value, te.Type)
		}
		return fmt.Sprintf("cannot use JSON %s as %s", te.Value, te.Type)
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
