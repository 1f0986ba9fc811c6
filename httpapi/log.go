package httpapi

import (
	"net/http"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/wire"
)

// The event log itself: restoring it from the state the coordinator holds
// after Redis lost it (commands/guard.go).

func (s *Server) registerLogRoutes() {
	s.router.HandleFunc(logRestoreRoute, s.handleRestoreLog).Methods(http.MethodPost)
}

// handleRestoreLog serves POST /coord/v1/log/restore (ADMIN, unscoped): while
// the coordinator is LOG_LOST, it writes the state it holds back to the log
// (a snapshot and a log.restored entry) and decides again. A follower
// forwards it to the leader, which restores from its own state.
func (s *Server) handleRestoreLog(w http.ResponseWriter, r *http.Request) {
	if principalOf(r).scoped() {
		// The state restored is every tenant's.
		s.logRefusal(r, logRestoreRoute, RoleAdmin, principalOf(r), "a principal scoped to stream prefixes cannot restore the whole log")
		w.WriteHeader(http.StatusForbidden)
		return
	}
	var req wire.LogRestoreRequest
	if !s.decodeBody(w, r, &req, true) {
		return
	}
	if !s.allow(w, r) {
		return
	}
	res, err := s.dec.RestoreLog(r.Context(), meta(r), coordinator.RestoreLogInput{RequestedBy: req.RequestedBy, Reason: req.Reason})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.LogRestoreResponse{EventID: res.EventID, RestoredFrom: res.RestoredFrom, LogLastID: res.LogLastID,
		Cause: res.Cause, LostEntries: res.LostEntries, AtLeast: res.AtLeast})
}
