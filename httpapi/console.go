package httpapi

import (
	"embed"
	"io/fs"
	"net/http"
)

// consoleFiles is the operator console: a static page that logs in through
// /coord/v1/auth/login, reads the monitoring API and sends the admin API's
// writes (each after a confirm step) with the bearer token it gets. It is
// plain HTML, CSS and JavaScript, embedded as written (no build step).
//
//go:embed console
var consoleFiles embed.FS

// consoleCSP allows the page to load only its own files and to talk only to
// this server: the console renders operator-supplied names (prefixes, member
// ids, reasons), so an injected script must have nowhere to run or report to.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// registerConsoleRoutes serves the console. The files are public: the page
// holds no data, it asks for credentials and the API checks them.
func (s *Server) registerConsoleRoutes() {
	sub, err := fs.Sub(consoleFiles, "console")
	if err != nil {
		panic("httpapi: embedded console: " + err.Error()) // the embed pattern above guarantees the directory
	}
	files := http.StripPrefix("/console/", http.FileServerFS(sub))
	s.router.HandleFunc("/console", handleConsoleRedirect).Methods(http.MethodGet, http.MethodHead)
	s.router.PathPrefix("/console/").Handler(consoleHeaders(files)).Methods(http.MethodGet, http.MethodHead)
}

// handleConsoleRedirect serves GET /console: the page lives at /console/ so
// that its relative asset links resolve under it.
func handleConsoleRedirect(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/console/", http.StatusMovedPermanently)
}

// consoleHeaders serves GET /console/{file}. Embedded files carry no
// modification time, so caches are told to revalidate: a new binary must not
// run against an old app.js.
func consoleHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", consoleCSP)
		h.Set("Referrer-Policy", "no-referrer")
		next.ServeHTTP(w, r)
	})
}
