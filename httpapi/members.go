package httpapi

import (
	"net/http"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/httpapi/guard"

	"github.com/rscoord/rsc/wire"
)

// memberAPI serves the members' heartbeats.
type memberAPI struct {
	kit
	dec Commands
	// releasing is closed when the server closes: held heartbeats are
	// answered at once.
	releasing <-chan struct{}
}

func (s *Server) registerMemberRoutes(h *memberAPI) {
	s.router.HandleFunc(heartbeatRoute, h.handleHeartbeat).Methods(http.MethodPost)
}

// handleHeartbeat serves POST .../groups/{consumerGroup}/members/{memberId}/heartbeat.
// Every protocol outcome is HTTP 200 with a status; a malformed body, or a
// prefix or group name no group can have, is a 400 naming the field. With
// X-Rsc-Hold-Ms the heartbeat may be held until its answer changes (hold.go).
func (h *memberAPI) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	p, err1 := pathVar(r, "streamPrefix")
	g, err2 := pathVar(r, "consumerGroup")
	id, err3 := pathVar(r, "memberId")
	if err1 != nil || err2 != nil || err3 != nil {
		h.badRequest(w, r, "invalid percent-encoding in path")
		return
	}
	if err := commands.ValidateKey(groupKeyOf(p, g)); err != nil {
		// UNKNOWN_MEMBER_ID would send the member to rejoin, forever.
		h.writeError(w, r, err)
		return
	}
	var req wire.HeartbeatRequest
	if !h.decodeBody(w, r, &req, true) {
		return
	}
	principal := ""
	if pr := guard.PrincipalOf(r); pr != nil {
		principal = pr.Username
	}
	hold, problem := holdOf(r)
	if problem != "" {
		h.badRequest(w, r, problem)
		return
	}
	var resp *wire.HeartbeatResponse
	var err error
	if hold > 0 {
		var why coordinator.HoldOutcome
		resp, why, err = h.dec.HeldHeartbeat(r.Context(), groupKeyOf(p, g), id, principal, &req, coordinator.HoldRequest{Bound: hold, Release: h.releasing})
		if why == coordinator.HoldDropped {
			// Nobody to answer; the status is for the access log and
			// metrics only (nginx's "client closed request").
			w.WriteHeader(statusClientClosed)
			return
		}
		w.Header().Set(headerHoldOutcome, string(why))
	} else {
		resp, err = h.dec.Heartbeat(r.Context(), groupKeyOf(p, g), id, principal, &req)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}
