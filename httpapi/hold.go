package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/rscoord/rsc/wire"
)

// Held heartbeats over HTTP (commands/hold.go). A member asks for its
// heartbeat to be held with the header X-Rsc-Hold-Ms: the longest it may
// wait for news, in milliseconds (the coordinator holds it for at most
// --max-heartbeat-hold and half the member lease). The answer says how it
// went in X-Rsc-Hold (commands.HoldOutcome: answered, woken, elapsed,
// limit, released, off). The reference's clients never send the header and
// get every answer at once, as before.
//
// A --ha follower forwards a held heartbeat to the leader like any write
// (forward.go), waiting for the leader's answer as long as the hold may
// last, so a heartbeat is held by the leader only. Server.Close answers
// every held heartbeat at once before it waits for the requests in flight.
const (
	headerHold        = wire.HeaderHold
	headerHoldOutcome = wire.HeaderHoldOutcome
)

// statusClientClosed is what a held heartbeat whose caller went away is
// recorded with (rsc_http_requests_total); nobody reads it.
const statusClientClosed = 499

// MaxHoldHeader is the largest X-Rsc-Hold-Ms accepted; a larger value is a
// 400 (the coordinator's own maximum clamps what is accepted).
const MaxHoldHeader = 10 * time.Minute

// holdOf reads X-Rsc-Hold-Ms: the hold asked for (0: none), or a problem
// with the header's value.
func holdOf(r *http.Request) (time.Duration, string) {
	v := r.Header.Get(headerHold)
	if v == "" {
		return 0, ""
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms < 0 || ms > MaxHoldHeader.Milliseconds() {
		return 0, "header " + headerHold + ": must be a whole number of milliseconds from 0 to " + strconv.FormatInt(MaxHoldHeader.Milliseconds(), 10)
	}
	return time.Duration(ms) * time.Millisecond, ""
}

// holdDeadline is the context a follower forwards a held heartbeat under:
// the leader may hold it for as long as it asks, and then answer within the
// usual forwarding timeout.
func holdDeadline(r *http.Request) (context.Context, context.CancelFunc, bool) {
	d, problem := holdOf(r)
	if d <= 0 || problem != "" {
		return r.Context(), func() {}, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), d+ForwardResponseHeaderTimeout)
	return ctx, cancel, true
}

// heldAwareTransport sends held heartbeats through a transport without a
// response-header timeout (their context bounds them, holdDeadline) and
// every other forwarded request through the plain one.
type heldAwareTransport struct {
	plain, held http.RoundTripper
}

func (t heldAwareTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get(headerHold) != "" {
		return t.held.RoundTrip(r)
	}
	return t.plain.RoundTrip(r)
}
