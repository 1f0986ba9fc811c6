package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/httpapi/guard"
	"github.com/rscoord/rsc/wire"
)

// healthAPI serves the probes.
type healthAPI struct {
	kit
	lead Leadership
	// readiness is Config.Readiness.
	readiness func() *commands.Error
}

func (s *Server) registerHealthRoutes(h *healthAPI) {
	s.router.HandleFunc("/healthz", handleHealthz).Methods(http.MethodGet, http.MethodHead)
	s.router.HandleFunc("/readyz", h.handleReadyz).Methods(http.MethodGet, http.MethodHead)
}

// handleHealthz serves GET /healthz: the process is up (no auth).
func handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, wire.Liveness{Status: "UP"})
}

// handleReadyz serves GET /readyz: 200 once the log is loaded and appends work;
// 503 while loading, while Redis is unreachable, while shutting down, with
// status METADATA_CORRUPT (errorCode, message) while the log holds an entry
// whose envelope this build cannot read, with status LOG_LOST (and logLost)
// while the log no longer holds what this coordinator applied, and NOT_READY
// with an errorCode while Redis may evict the log or the kept token secret
// differs (no auth). The redis field says what the last check of Redis read
// (eviction policy, persistence). Prefixes quarantined by an entry of theirs
// are counted (quarantinedPrefixes).
// A follower is ready too: it serves reads and forwards writes.
func (h *healthAPI) handleReadyz(w http.ResponseWriter, r *http.Request) {
	resp := wire.Readiness{Status: "READY", LastEventID: h.read.State().LastID()}
	resp.Role, resp.Leader, resp.LeaderURL = leadershipOf(h.lead)
	if rs, ok := h.read.RedisSafety(); ok {
		resp.Redis = &wire.RedisDurability{MaxmemoryPolicy: rs.Policy, Node: rs.Node, Evicts: rs.Evicts, EvictionAllowed: rs.Allowed,
			Persistence: rs.Persistence, CheckedAt: rs.CheckedAt.UTC()}
	}
	if err := h.read.Corrupt(); err != nil {
		ce := h.public(r, err)
		resp.Status, resp.ErrorCode, resp.Message = "METADATA_CORRUPT", ce.Code, ce.Message
		writeJSON(w, http.StatusServiceUnavailable, resp)
		return
	}
	if l := h.read.LogLoss(); l != nil {
		resp.Status, resp.ErrorCode, resp.Message = "LOG_LOST", commands.ErrLogLost.Code, l.Message()
		resp.LogLost = &wire.LogLoss{Cause: l.Cause, ProjectionLastID: l.ProjectionLastID, LogLastID: l.LogLastID, LogLength: l.LogLength,
			LostEntries: l.LostEntries, AtLeast: l.AtLeast, Since: l.Since.UTC(), RestoredAt: l.RestoredAt, RestoredFrom: l.RestoredFrom, LongerThanRestore: l.Longer}
		writeJSON(w, http.StatusServiceUnavailable, resp)
		return
	}
	if err := h.read.Refusal(); err != nil {
		ce := h.public(r, err)
		resp.Status, resp.ErrorCode, resp.Message = "NOT_READY", ce.Code, ce.Message
		writeJSON(w, http.StatusServiceUnavailable, resp)
		return
	}
	if !h.read.Ready() {
		resp.Status = "NOT_READY"
		writeJSON(w, http.StatusServiceUnavailable, resp)
		return
	}
	if h.readiness != nil {
		if ce := h.readiness(); ce != nil {
			resp.Status, resp.ErrorCode, resp.Message = "NOT_READY", ce.Code, ce.Message
			writeJSON(w, http.StatusServiceUnavailable, resp)
			return
		}
	}
	// A quarantined prefix does not make the coordinator unready: every
	// other prefix is served. /readyz is public: it counts them, the
	// authenticated health names them.
	resp.QuarantinedPrefixes = h.read.State().NumQuarantined()
	writeJSON(w, http.StatusOK, resp)
}

// leadershipOf is a replica's role and the leader it knows.
func leadershipOf(lead Leadership) (role, leader, leaderURL string) {
	l := lead.Leader()
	id, _, _ := strings.Cut(l.Holder, "#")
	return lead.Role(), id, l.URL
}

// authAPI serves logins: the guard checks the credentials and issues the
// tokens.
type authAPI struct {
	kit
	guard *guard.Guard
}

func (s *Server) registerAuthRoutes(h *authAPI) {
	s.router.HandleFunc(loginRoute, h.handleLogin).Methods(http.MethodPost)
}

// handleLogin serves POST /coord/v1/auth/login: credentials from the body, or
// the request's own Authorization header (a valid token buys a fresh one that
// expires no later than it does). Password checks are throttled: a user from
// an address, or an address, that failed too often gets 429 until its bucket
// refills.
func (h *authAPI) handleLogin(w http.ResponseWriter, r *http.Request) {
	var req wire.LoginRequest
	if !h.decodeBody(w, r, &req, false) {
		return
	}
	tok, err := h.guard.Login(r, req.Username, req.Password)
	if h.guard.Throttled(w, r, err) {
		return
	}
	if err != nil {
		loginFailed(w, r)
		return
	}
	writeJSON(w, http.StatusOK, wire.LoginResponse{AccessToken: tok.Token, TokenType: "Bearer", ExpiresAt: tok.ExpiresAt.UTC(), ExpiresInSeconds: tok.TTL, Roles: tok.Roles})
}

// loginFailed is the reference's 401 for a failed login (Spring's error body).
func loginFailed(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusUnauthorized, wire.LoginError{Timestamp: time.Now().UTC(), Status: http.StatusUnauthorized, Error: "Unauthorized", Path: r.URL.Path})
}
