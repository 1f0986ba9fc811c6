package httpapi_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/rscoord/rsc/httpapi"
)

// TestAdminRateLimitComesLast: the rate of admin mutations per principal is
// spent only by a request that got past every other check: a caller without
// credentials is 401, a malformed body 400, a body that is not JSON 415, even
// with the budget spent, and none of them spends it. With a limit of 1 a
// minute, the first valid mutation is served and the second is 429.
func TestAdminRateLimitComesLast(t *testing.T) {
	admin := basic("admin", "password")
	group := "/coord/v1/streams/orders/groups/"
	valid := `{"initialShardCount":1,"requestedBy":"test"}`
	// The budget is a fixed window of one minute: a run that straddles two
	// windows proves nothing and runs again.
	for attempt := 0; attempt < 3; attempt++ {
		srv := newSecServer(t, httpapi.Config{RateLimitPerMinute: 1}, nil)
		window := time.Now().Truncate(time.Minute)
		srv.call(t, http.MethodPost, group+"g1", admin, `{"initialShardCount":`, nil).want(t, http.StatusBadRequest, "malformed body, budget unspent")
		srv.call(t, http.MethodPost, group+"g1", admin, valid, nil).want(t, http.StatusCreated, "first mutation (the limit)")
		srv.call(t, http.MethodPost, group+"g2", admin, valid, nil).wantThrottled(t, "second mutation (limit+1)", 1, 60)
		srv.call(t, http.MethodPost, group+"g3", "", valid, nil).want(t, http.StatusUnauthorized, "no credentials, budget spent")
		srv.call(t, http.MethodPost, group+"g3", admin, `{"initialShardCount":`, nil).want(t, http.StatusBadRequest, "malformed body, budget spent")
		srv.call(t, http.MethodPost, group+"g3", admin, valid, map[string]string{"Content-Type": "text/plain"}).want(t, http.StatusUnsupportedMediaType, "not JSON, budget spent")
		if time.Now().Truncate(time.Minute).Equal(window) {
			return
		}
	}
	t.Fatal("three runs straddled a minute boundary")
}
