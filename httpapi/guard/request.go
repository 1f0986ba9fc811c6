package guard

import (
	"context"
	"net/http"
)

// Route is the route a request resolved to: the template of the route that
// serves it, or of the API's catch-all when its path is under the API but no
// route serves it with this method (a 404 or a 405); "" otherwise.
type Route struct {
	Template string
	// Served: a route of the router serves the request.
	Served bool
	// Vars are the matched route's path variables (percent-encoded).
	Vars map[string]string
}

// Label is the route's metrics label.
func (m Route) Label() string {
	if !m.Served {
		return "unmatched"
	}
	return m.Template
}

// Access is what the matched route and the method ask of a request, as the
// server's access table (httpapi's access.go) decided it.
type Access struct {
	// Role is the role required ("" public).
	Role string
	// API: the route is under the API (/coord/v1): its mutations are checked
	// for cross-site origins and content type, and only there is a forwarded
	// request's assertion accepted.
	API bool
	// Identify: a public route that reads credentials anyway (a member that
	// joined with credentials stays bound to them).
	Identify bool
	// WholeView: the route shows every tenant at once, so only a principal
	// without a scope may call it.
	WholeView bool
	// Write: a follower relays the request to the leader (forward.go).
	Write bool
	// Stamp: the answer to a forwarded write names the log position, for
	// the follower to wait for.
	Stamp bool
}

// Request is what the middleware learnt about a request. It is made once
// per request (With) and filled in as the chain runs, on the request's
// goroutine, before any handler sees it.
type Request struct {
	// ID is the request's id (X-Request-Id).
	ID string
	// Route and Access are the matched route and what it asks for.
	Route  Route
	Access Access
	// Client is the client's address as a --ha follower asserted it for a
	// request it forwarded ("" otherwise: the TCP peer is the client).
	Client string
	// Principal is who the request proved to be (nil: anonymous).
	Principal *Principal
}

type requestKey struct{}

// With returns r carrying info.
func With(r *http.Request, info *Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), requestKey{}, info))
}

// Of is what the middleware learnt about r (an empty Request outside the
// chain).
func Of(r *http.Request) *Request {
	if v, _ := r.Context().Value(requestKey{}).(*Request); v != nil {
		return v
	}
	return &Request{}
}

// PrincipalOf is who r proved to be (nil: anonymous).
func PrincipalOf(r *http.Request) *Principal { return Of(r).Principal }

// RequestID is r's id ("" outside the chain).
func RequestID(r *http.Request) string { return Of(r).ID }
