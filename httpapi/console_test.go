package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi"
)

// newConsoleServer is the API over an empty in-memory log. The coordinator is
// neither loaded nor run: static files and authentication do not reach it.
func newConsoleServer() *httpapi.Server {
	coord := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop()}, events.NewMemLog(), nil, nil, nil)
	return httpapi.NewServer(httpapi.Config{Logger: zerolog.Nop()}, httpapi.PartsOf(coord), nil)
}

// consoleGet sends a GET without credentials.
func consoleGet(srv http.Handler, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

func TestConsoleServesStaticFilesWithoutAuth(t *testing.T) {
	srv := newConsoleServer()
	cases := []struct {
		name        string
		path        string
		status      int
		contentType string // prefix
		body        string // substring
	}{
		{"page", "/console/", http.StatusOK, "text/html", `<script src="app.js"`},
		{"script", "/console/app.js", http.StatusOK, "text/javascript", "/coord/v1/auth/login"},
		{"stylesheet", "/console/style.css", http.StatusOK, "text/css", ":root"},
		{"unknown asset", "/console/nope.js", http.StatusNotFound, "", ""},
		{"unknown nested asset", "/console/static/app.js", http.StatusNotFound, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := consoleGet(srv, tc.path)
			if rec.Code != tc.status {
				t.Fatalf("GET %s: status %d, want %d; body %q", tc.path, rec.Code, tc.status, rec.Body.String())
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, tc.contentType) {
				t.Errorf("GET %s: Content-Type %q, want %s…", tc.path, ct, tc.contentType)
			}
			if !strings.Contains(rec.Body.String(), tc.body) {
				t.Errorf("GET %s: body lacks %q", tc.path, tc.body)
			}
			if tc.status == http.StatusOK {
				if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
					t.Errorf("GET %s: X-Content-Type-Options %q, want nosniff", tc.path, got)
				}
				if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") {
					t.Errorf("GET %s: Content-Security-Policy %q does not restrict scripts to the console's own", tc.path, csp)
				}
			}
		})
	}
}

func TestConsoleRedirectsToTrailingSlash(t *testing.T) {
	rec := consoleGet(newConsoleServer(), "/console")
	if rec.Code != http.StatusMovedPermanently {
		t.Fatalf("GET /console: status %d, want 301", rec.Code)
	}
	if loc := rec.Header().Get("Location"); loc != "/console/" {
		t.Fatalf("GET /console: Location %q, want /console/", loc)
	}
}

// TestConsolePageReferencesOnlyItsOwnFiles: every src/href of index.html is
// served, and none leaves the server (no CDN; the CSP would block it anyway).
func TestConsolePageReferencesOnlyItsOwnFiles(t *testing.T) {
	srv := newConsoleServer()
	page := consoleGet(srv, "/console/").Body.String()
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(page, -1)
	if len(refs) < 2 {
		t.Fatalf("index.html references %d files, want at least app.js and style.css", len(refs))
	}
	for _, m := range refs {
		ref := m[1]
		if strings.HasPrefix(ref, "#") {
			continue
		}
		if strings.Contains(ref, "//") || strings.Contains(ref, ":") {
			t.Errorf("index.html references %q outside the console", ref)
			continue
		}
		if rec := consoleGet(srv, "/console/"+ref); rec.Code != http.StatusOK {
			t.Errorf("index.html references %q: GET answers %d", ref, rec.Code)
		}
	}
}

// TestConsoleDoesNotOpenTheAPI: the console being public must not make the data
// it shows public.
func TestConsoleDoesNotOpenTheAPI(t *testing.T) {
	rec := consoleGet(newConsoleServer(), "/coord/v1/monitoring/groups")
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("GET /coord/v1/monitoring/groups without credentials: status %d, want 401", rec.Code)
	}
}
