package httpapi

import (
	"net/http"
	"time"

	"github.com/rscoord/rsc/httpapi/guard"
	"github.com/rscoord/rsc/wire"
)

// Held heartbeats over HTTP (commands/hold.go). A member asks for its
// heartbeat to be held with the header X-Rsc-Hold-Ms: the longest it may
// wait for news, in milliseconds (the coordinator holds it for at most
// --max-heartbeat-hold and half the member lease). The answer says how it
// went in X-Rsc-Hold (coordinator.HoldOutcome: answered, woken, elapsed,
// limit, released, off). The reference's clients never send the header and
// get every answer at once, as before.
//
// A --ha follower forwards a held heartbeat to the leader like any write
// (guard/forward.go), waiting for the leader's answer as long as the hold may
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
const MaxHoldHeader = guard.MaxHoldHeader

// holdOf reads X-Rsc-Hold-Ms: the hold asked for (0: none), or a problem
// with the header's value.
func holdOf(r *http.Request) (time.Duration, string) { return guard.HoldOf(r) }
