package httpapi

import (
	"net/http"
	"strings"

	"github.com/gorilla/mux"

	"github.com/rscoord/rsc/httpapi/guard"
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

// access is the contract's table of who may call what (§1.3), applied to
// the route a request matched. Its resolve step is the first middleware of
// the chain: it finds the route (or the API's catch-all) and what it asks
// of the request, for the guard's middleware that follow.
type access struct {
	auth guard.AuthConfig
	// catchAll holds the API's catch-all route; login the login route's
	// path with any method.
	catchAll, login *mux.Router
}

func newAccess(auth guard.AuthConfig) *access {
	login := mux.NewRouter().UseEncodedPath().SkipClean(true)
	login.Path(loginRoute).Handler(http.NotFoundHandler())
	return &access{auth: auth, catchAll: newCatchAll(), login: login}
}

// resolve records the route r matched and what it asks for. A request no
// route serves (the router's 404 and 405) is matched against the API's
// catch-all.
func (a *access) resolve(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info := guard.Of(r)
		info.Route = a.route(r)
		info.Access = a.of(info.Route, r.Method)
		if info.Access.Write && !info.Route.Served && a.login.Match(r, &mux.RouteMatch{}) {
			// The login route's path with another method (a 405) is
			// answered here, as login is.
			info.Access.Write, info.Access.Stamp = false, false
		}
		next.ServeHTTP(w, r)
	})
}

// route is the route r resolved to: the template of the route that serves
// it, or of the API's catch-all (unknownAPIRoute) when its path is under
// /coord/v1 but no route serves it with this method (a 404 or a 405); ""
// otherwise.
func (a *access) route(r *http.Request) guard.Route {
	if route := mux.CurrentRoute(r); route != nil {
		if tpl, err := route.GetPathTemplate(); err == nil {
			return guard.Route{Template: tpl, Served: true, Vars: mux.Vars(r)}
		}
	}
	var m mux.RouteMatch
	if a.catchAll.Match(r, &m) && m.Route != nil {
		if tpl, err := m.Route.GetPathTemplate(); err == nil {
			return guard.Route{Template: tpl}
		}
	}
	return guard.Route{}
}

func underAPI(tpl string) bool { return tpl == apiRoot || strings.HasPrefix(tpl, apiRoot+"/") }

// of is what a request with method on route m must prove. The role it needs
// ("" means public):
//
//   - POST on the heartbeat route: MEMBER, or public when anonymous members
//     are allowed;
//   - POST /coord/v1/auth/login: public;
//   - POST /coord/v1/log/restore: ADMIN (it writes every tenant's state);
//   - GET /metrics: READ with --metrics-auth (AuthConfig.MetricsAuth), and
//     only for a principal without a scope (WholeView), else public;
//   - every other route outside /coord/v1 (probes, the console): public;
//   - routes under /coord/v1/monitoring: READ;
//   - other /coord/v1 routes: WRITE for POST, PUT, PATCH and DELETE, else READ.
//
// A request no route serves gets the last rule when it matches the API's
// catch-all (an unknown path under /coord/v1, or a known one with another
// method), so that a caller without credentials learns nothing, not even which
// routes exist; elsewhere it is a public 404 or 405.
//
// The heartbeat's route reads credentials even when public (a member that
// joined with credentials stays bound to them). Writes under /coord/v1
// (to the login route's path, with any method, and the API's root excepted:
// resolve) go to the leader, and the answer to one a follower forwarded,
// heartbeats excepted, names the log position.
func (a *access) of(m guard.Route, method string) guard.Access {
	api := underAPI(m.Template)
	write := api && guard.IsWrite(method) && m.Template != loginRoute && m.Template != apiRoot
	return guard.Access{
		Role:      a.role(m, method),
		API:       api,
		Identify:  m.Template == heartbeatRoute,
		WholeView: m.Served && m.Template == metricsRoute && a.auth.MetricsAuth,
		Write:     write,
		Stamp:     write && m.Template != heartbeatRoute,
	}
}

func (a *access) role(m guard.Route, method string) string {
	if m.Served && m.Template == metricsRoute && a.auth.MetricsAuth {
		return RoleRead
	}
	if !underAPI(m.Template) {
		return ""
	}
	if m.Served {
		switch {
		case m.Template == heartbeatRoute && method == http.MethodPost:
			if a.auth.AuthenticateMemberAPI {
				return RoleMember
			}
			return ""
		case m.Template == loginRoute && method == http.MethodPost:
			return ""
		case m.Template == logRestoreRoute && method == http.MethodPost:
			return RoleAdmin
		case m.Template == monitoringRoot || strings.HasPrefix(m.Template, monitoringRoot+"/"):
			return RoleRead
		}
	}
	if guard.IsMutation(method) {
		return RoleWrite
	}
	return RoleRead
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
