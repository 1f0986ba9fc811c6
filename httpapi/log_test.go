package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/rscoord/rsc/httpapi"
)

// The restore writes every tenant's state: it needs ADMIN, and an ADMIN
// scoped to some prefixes is refused (403, empty body) before anything is
// read; an unscoped ADMIN reaches the command (409 LOG_NOT_LOST here: the
// log holds the state).
func TestRestoreLogNeedsAnUnscopedAdmin(t *testing.T) {
	s, _ := newDocServer(t, httpapi.AuthConfig{Users: []httpapi.User{
		{Username: "root", Password: "r", Roles: []string{"ADMIN"}},
		{Username: "tenant", Password: "t", Roles: []string{"ADMIN"}, Prefixes: []string{"orders"}},
		{Username: "writer", Password: "w", Roles: []string{"WRITE"}},
	}})
	body := `{"requestedBy":"ops","reason":"test"}`
	for _, c := range []struct {
		user, pass string
		want       int
	}{{"writer", "w", http.StatusForbidden}, {"tenant", "t", http.StatusForbidden}, {"root", "r", http.StatusConflict}} {
		w := serveDoc(s, "POST", "/coord/v1/log/restore", c.user, c.pass, body)
		if w.Code != c.want {
			t.Fatalf("%s: HTTP %d %s, want %d", c.user, w.Code, w.Body, c.want)
		}
		if c.want == http.StatusForbidden && w.Body.Len() != 0 {
			t.Errorf("%s: 403 with a body %s", c.user, w.Body)
		}
		if c.want == http.StatusConflict {
			var e struct{ ErrorCode string }
			if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.ErrorCode != "LOG_NOT_LOST" {
				t.Errorf("root: %s, want LOG_NOT_LOST", w.Body)
			}
		}
	}
}
