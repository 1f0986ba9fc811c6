package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/rscoord/rsc/commands"
)

// ErrorResponse is the contract's error body.
type ErrorResponse struct {
	Status    string `json:"status"`
	ErrorCode string `json:"errorCode"`
	Message   string `json:"message"`
	// Timestamp and Path are extras a human reading the body appreciates.
	Timestamp time.Time `json:"timestamp"`
	Path      string    `json:"path"`
}

// kindStatus is the one table from error kind to HTTP status and status name.
var kindStatus = map[commands.Kind]struct {
	code int
	name string
}{
	commands.KindInvalid:     {http.StatusBadRequest, "BAD_REQUEST"},
	commands.KindNotFound:    {http.StatusNotFound, "NOT_FOUND"},
	commands.KindConflict:    {http.StatusConflict, "CONFLICT"},
	commands.KindNotAllowed:  {http.StatusUnprocessableEntity, "UNPROCESSABLE_ENTITY"},
	commands.KindRateLimited: {http.StatusTooManyRequests, "TOO_MANY_REQUESTS"},
	commands.KindUnavailable: {http.StatusServiceUnavailable, "SERVICE_UNAVAILABLE"},
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// writeError answers with the contract's error shape. Unknown errors are logged
// with context and shown as a generic message.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ce *commands.Error
	if errors.As(err, &ce) {
		ks := kindStatus[ce.Kind]
		if ks.code == 0 {
			ks.code, ks.name = http.StatusInternalServerError, "INTERNAL_SERVER_ERROR"
		}
		writeJSON(w, ks.code, ErrorResponse{Status: ks.name, ErrorCode: ce.Code, Message: ce.Message, Timestamp: time.Now().UTC(), Path: r.URL.Path})
		return
	}
	if errors.Is(err, r.Context().Err()) && r.Context().Err() != nil {
		writeJSON(w, http.StatusServiceUnavailable, ErrorResponse{Status: "SERVICE_UNAVAILABLE", ErrorCode: "COORDINATOR_TERMINATING", Message: "request cancelled", Timestamp: time.Now().UTC(), Path: r.URL.Path})
		return
	}
	s.log.Error().Err(err).Str("path", r.URL.Path).Str("method", r.Method).Msg("internal error")
	writeJSON(w, http.StatusInternalServerError, ErrorResponse{Status: "INTERNAL_SERVER_ERROR", ErrorCode: "INTERNAL_ERROR", Message: "Internal server error", Timestamp: time.Now().UTC(), Path: r.URL.Path})
}

func (s *Server) badRequest(w http.ResponseWriter, r *http.Request, msg string) {
	writeJSON(w, http.StatusBadRequest, ErrorResponse{Status: "BAD_REQUEST", ErrorCode: "INVALID_REQUEST", Message: msg, Timestamp: time.Now().UTC(), Path: r.URL.Path})
}
