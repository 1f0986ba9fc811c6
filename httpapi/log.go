package httpapi

import (
	"net/http"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/httpapi/guard"
	"github.com/rscoord/rsc/wire"
)

// The event log itself: restoring it from the state the coordinator holds
// after Redis lost it (commands/guard.go).

// logAPI serves the restore of a lost log.
type logAPI struct {
	kit
	dec   Commands
	limit *guard.RateLimiter
}

func (s *Server) registerLogRoutes(h *logAPI) {
	// The state restored is every tenant's: a scoped principal may not.
	s.router.Handle(logRestoreRoute, s.guard.Unscoped(http.HandlerFunc(h.handleRestoreLog))).Methods(http.MethodPost)
}

// handleRestoreLog serves POST /coord/v1/log/restore (ADMIN, unscoped): while
// the coordinator is LOG_LOST, it writes the state it holds back to the log
// (a snapshot and a log.restored entry) and decides again. A follower
// forwards it to the leader, which restores from its own state.
func (h *logAPI) handleRestoreLog(w http.ResponseWriter, r *http.Request) {
	var req wire.LogRestoreRequest
	if !h.admit(h.limit, w, r, &req, true) {
		return
	}
	res, err := h.dec.RestoreLog(r.Context(), meta(r), coordinator.RestoreLogInput{RequestedBy: req.RequestedBy, Reason: req.Reason})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.LogRestoreResponse{EventID: res.EventID, RestoredFrom: res.RestoredFrom, LogLastID: res.LogLastID,
		Cause: res.Cause, LostEntries: res.LostEntries, AtLeast: res.AtLeast})
}
