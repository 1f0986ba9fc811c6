package httpapi

import (
	"net/http"
	"strings"

	"github.com/gorilla/mux"
)

// Who may call what is decided from the route a request matched (its path
// template) and its method, never from the path text: a group named
// "heartbeat" of a prefix named "members" is just a group.

// Route templates the access rules name.
const (
	apiRoot         = "/coord/v1"
	loginRoute      = apiRoot + "/auth/login"
	monitoringRoot  = apiRoot + "/monitoring"
	heartbeatRoute  = groupPath + "/members/{memberId}/heartbeat"
	logRestoreRoute = apiRoot + "/log/restore"
	unknownAPIRoute = apiRoot + "/" // the catch-all: a 404 under the API
	// metricsRoute is where cmd mounts the metrics (Config.Mount).
	metricsRoute = "/metrics"
)

// HeartbeatRoute is the heartbeat route's template, as RouteTemplate gives it.
const HeartbeatRoute = heartbeatRoute

// routeMatch is what a request resolved to: the template of the route that
// serves it, or of the API's catch-all (unknownAPIRoute) when its path is
// under /coord/v1 but no route serves it with this method (a 404 or a 405);
// "" otherwise.
type routeMatch struct {
	template string
	served   bool // a route of the router serves it
	// handler (with the router's middleware) and vars are the match of a
	// served route: ServeHTTP calls the handler rather than matching again.
	handler http.Handler
	vars    map[string]string
}

// label is the route's metrics label.
func (m routeMatch) label() string {
	if !m.served {
		return "unmatched"
	}
	return m.template
}

// resolve matches r against the router, then against the catch-all.
func (s *Server) resolve(r *http.Request) routeMatch {
	var m mux.RouteMatch
	if s.router.Match(r, &m) && m.Route != nil && m.MatchErr == nil {
		if tpl, err := m.Route.GetPathTemplate(); err == nil {
			return routeMatch{template: tpl, served: true, handler: m.Handler, vars: m.Vars}
		}
	}
	if s.catchAll.Match(r, &m) && m.Route != nil {
		if tpl, err := m.Route.GetPathTemplate(); err == nil {
			return routeMatch{template: tpl}
		}
	}
	return routeMatch{}
}

func underAPI(tpl string) bool { return tpl == apiRoot || strings.HasPrefix(tpl, apiRoot+"/") }

func isMutation(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// requiredRole is the role a request needs; "" means public. The contract's
// table (§1.3), applied to route templates:
//
//   - POST on the heartbeat route: MEMBER, or public when anonymous members
//     are allowed;
//   - POST /coord/v1/auth/login: public;
//   - POST /coord/v1/log/restore: ADMIN (it writes every tenant's state);
//   - GET /metrics: READ with --metrics-auth (AuthConfig.MetricsAuth), and
//     only for a principal without a scope (wholeView), else public;
//   - every other route outside /coord/v1 (probes, the console): public;
//   - routes under /coord/v1/monitoring: READ;
//   - other /coord/v1 routes: WRITE for POST, PUT, PATCH and DELETE, else READ.
//
// A request no route serves gets the last rule when it matches the API's
// catch-all (an unknown path under /coord/v1, or a known one with another
// method), so that a caller without credentials learns nothing, not even which
// routes exist; elsewhere it is a public 404 or 405.
func (a *authenticator) requiredRole(m routeMatch, method string) string {
	if m.served && m.template == metricsRoute && a.cfg.MetricsAuth {
		return RoleRead
	}
	if !underAPI(m.template) {
		return ""
	}
	if m.served {
		switch {
		case m.template == heartbeatRoute && method == http.MethodPost:
			if a.cfg.AuthenticateMemberAPI {
				return RoleMember
			}
			return ""
		case m.template == loginRoute && method == http.MethodPost:
			return ""
		case m.template == logRestoreRoute && method == http.MethodPost:
			return RoleAdmin
		case m.template == monitoringRoot || strings.HasPrefix(m.template, monitoringRoot+"/"):
			return RoleRead
		}
	}
	if isMutation(method) {
		return RoleWrite
	}
	return RoleRead
}

// wholeView reports whether p may call a route that shows every tenant at
// once (GET /metrics under --metrics-auth): a principal with a scope of
// prefixes or groups may not.
func (a *authenticator) wholeView(p *principal, m routeMatch) bool {
	if !m.served || m.template != metricsRoute || !a.cfg.MetricsAuth {
		return true
	}
	return p != nil && p.Prefixes == nil && p.Groups == nil
}

// newCatchAll is the route of every path under /coord/v1 that no route of
// the router serves. It is kept out of the router, which answers those
// requests (404, or 405 when another method is served), so that it only
// decides who may learn that.
func newCatchAll() *mux.Router {
	r := mux.NewRouter().UseEncodedPath().SkipClean(true)
	nothing := http.NotFoundHandler()
	r.PathPrefix(unknownAPIRoute).Handler(nothing)
	r.Path(apiRoot).Handler(nothing)
	return r
}
