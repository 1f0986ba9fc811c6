package guard

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/rscoord/rsc/commands"
)

// A browser visiting another site can be made to send requests to this
// server: a form posting text/plain, a fetch with credentials the browser
// cached, a page whose name was rebound to 127.0.0.1. The server refuses
// what only a browser tricked by another site would send:
//
//   - a mutation whose Origin is another origin, or whose Sec-Fetch-Site is
//     cross-site or same-site, is 403 CROSS_SITE_REQUEST (the console, served
//     from this origin, sends same-origin requests);
//   - a mutation with a body must say Content-Type: application/json (415
//     UNSUPPORTED_MEDIA_TYPE): a form cannot, and a cross-site fetch that
//     says so needs a CORS preflight this server never grants;
//   - when HostPolicy restricts hosts (on a loopback listen address, or with
//     --allowed-hosts), a Host header that is none of the allowed names is
//     403 HOST_NOT_ALLOWED on every route, the console's included: a page
//     whose DNS name was rebound to 127.0.0.1 reaches the port with its own
//     name as Host, and gets nothing;
//   - a 401 to a browser (a request with Sec-Fetch-* or Origin headers)
//     challenges with Bearer, not Basic: the browser then shows no password
//     dialog and so never caches Basic credentials that any site's form
//     could make it send. API clients get the contract's Basic challenge.

// HostPolicy says which Host headers the server answers.
type HostPolicy struct {
	// Restrict turns the check on (cmd: the listen address is loopback, or
	// Allowed is not empty).
	Restrict bool
	// Allowed are host names (or addresses) accepted besides loopback ones:
	// "localhost", names under ".localhost", and loopback IPs are always
	// accepted. A leading "." allows a domain and its subdomains.
	Allowed []string
}

// KindUnsupportedMedia is the kind of ErrUnsupportedMedia (415), which only
// the HTTP layer produces (commands' kinds are positive; httpapi's errors.go
// maps it to its status).
const KindUnsupportedMedia commands.Kind = -3

// Refusals of browser rules.
var (
	errHostNotAllowed   = &commands.Error{Kind: commands.KindForbidden, Code: "HOST_NOT_ALLOWED", Message: "This coordinator does not answer requests for this Host; add the name to --allowed-hosts if it is yours"}
	errCrossSite        = &commands.Error{Kind: commands.KindForbidden, Code: "CROSS_SITE_REQUEST", Message: "Mutations from another site are refused (Origin or Sec-Fetch-Site)"}
	ErrUnsupportedMedia = &commands.Error{Kind: KindUnsupportedMedia, Code: "UNSUPPORTED_MEDIA_TYPE", Message: "A request body must be sent with Content-Type: application/json"}
)

// hostAllowed reports whether the request's Host is one the policy allows.
func (h HostPolicy) hostAllowed(r *http.Request) bool {
	if !h.Restrict {
		return true
	}
	host := normalHost(r.Host)
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return h.named(host)
}

// named reports whether host is one of the Allowed names.
func (h HostPolicy) named(host string) bool {
	for _, a := range h.Allowed {
		a = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(a)), ".")
		switch {
		case a == "":
		case strings.HasPrefix(a, "."):
			if host == a[1:] || strings.HasSuffix(host, a) {
				return true
			}
		case host == a:
			return true
		}
	}
	return false
}

// normalHost is a Host header's name or address, lower case, without port,
// brackets or trailing dot.
func normalHost(hostport string) string {
	host := hostport
	if hn, _, err := net.SplitHostPort(hostport); err == nil {
		host = hn
	}
	return strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
}

// crossSite reports a request that a page of another site made the browser
// send: Sec-Fetch-Site says so, or Origin names another origin than the one
// the request was sent to (its Host, the X-Forwarded-Host of a reverse proxy
// in front, or an --allowed-hosts name). A browser never lets a page of
// another site set X-Forwarded-Host without a CORS preflight, which this
// server does not grant.
func (h HostPolicy) crossSite(r *http.Request) bool {
	switch strings.ToLower(r.Header.Get("Sec-Fetch-Site")) {
	case "cross-site", "same-site":
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return true // "null" (a sandboxed or file: page) or garbage
	}
	if strings.EqualFold(u.Host, r.Host) {
		return false
	}
	if fh := r.Header.Get("X-Forwarded-Host"); fh != "" && strings.EqualFold(u.Host, fh) {
		return false
	}
	return !h.named(normalHost(u.Host))
}

// hasBody reports a request that carries a body (or may: chunked).
func hasBody(r *http.Request) bool {
	return r.ContentLength > 0 || (r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody)
}

// jsonContent reports a Content-Type of application/json (parameters such
// as charset allowed).
func jsonContent(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// Hosts refuses a request whose Host the policy does not allow (403
// HOST_NOT_ALLOWED), on every route.
func (g *Guard) Hosts(next http.Handler) http.Handler {
	return g.refuseIf(next, func(r *http.Request) bool { return !g.hosts.hostAllowed(r) }, "Host not allowed", errHostNotAllowed)
}

// CrossSite refuses a mutation of the API that another site made a browser
// send (403 CROSS_SITE_REQUEST).
func (g *Guard) CrossSite(next http.Handler) http.Handler {
	return g.refuseIf(next, func(r *http.Request) bool { return apiMutation(r) && g.hosts.crossSite(r) }, "cross-site mutation", errCrossSite)
}

// refuseIf answers err, logged as refused for why, to the requests refused
// says so of, and passes the others to next.
func (g *Guard) refuseIf(next http.Handler, refused func(*http.Request) bool, why string, err error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refused(r) {
			g.logRefusal(r, "", nil, why)
			g.writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ContentType refuses a mutation of the API whose body is not JSON (415).
func (g *Guard) ContentType(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if apiMutation(r) && contentTypeProblem(r) {
			g.writeError(w, r, ErrUnsupportedMedia)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// apiMutation reports a POST, PUT, PATCH or DELETE on a route of the API.
func apiMutation(r *http.Request) bool {
	return Of(r).Access.API && IsMutation(r.Method)
}

// IsMutation reports a POST, PUT, PATCH or DELETE.
func IsMutation(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// contentTypeProblem: a mutation with a body, or one that names a content
// type, must name application/json.
func contentTypeProblem(r *http.Request) bool {
	if r.Header.Get("Content-Type") == "" && !hasBody(r) {
		return false
	}
	return !jsonContent(r)
}

// fromBrowser reports a request a browser sent (fetch metadata or Origin).
func fromBrowser(r *http.Request) bool {
	for _, h := range []string{"Sec-Fetch-Mode", "Sec-Fetch-Site", "Sec-Fetch-Dest", "Origin"} {
		if r.Header.Get(h) != "" {
			return true
		}
	}
	return false
}

// unauthorized is the contract's bodiless 401. A browser is challenged with
// Bearer, which it cannot answer by itself (no dialog, nothing cached).
func unauthorized(w http.ResponseWriter, r *http.Request) {
	scheme := "Basic"
	if fromBrowser(r) {
		scheme = "Bearer"
	}
	w.Header().Set("WWW-Authenticate", scheme+` realm="redis-stream-coordinator"`)
	w.WriteHeader(http.StatusUnauthorized)
}
