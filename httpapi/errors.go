package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/wire"
)

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
	commands.KindForbidden:   {http.StatusForbidden, "FORBIDDEN"},
	commands.KindUnavailable: {http.StatusServiceUnavailable, "SERVICE_UNAVAILABLE"},
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// unavailableError is a read that Redis (or the event log on it) failed. Its
// detail (addresses, NOAUTH, internals) is for the coordinator's log; the
// caller gets public, a 503 whose message also names the request id to look
// for there.
type unavailableError struct {
	public *commands.Error
	err    error
}

func (e *unavailableError) Error() string { return e.public.Message + ": " + e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// streamsUnavailable is the answer when Redis fails a shard stream read.
func streamsUnavailable(err error) error {
	return &unavailableError{&commands.Error{Kind: commands.KindUnavailable, Code: "REDIS_UNAVAILABLE", Message: "Redis is unavailable"}, err}
}

// logUnavailable is the answer when the event log cannot be read.
func logUnavailable(err error) error {
	return &unavailableError{withMessage(commands.ErrUnavailable, "The event log cannot be read"), err}
}

// writeError answers with the contract's error shape. Unknown errors and
// failures of Redis are logged with context and shown as a generic message
// that names the request id.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var ue *unavailableError
	if errors.As(err, &ue) && !errors.Is(err, r.Context().Err()) {
		log := s.logFor(r)
		log.Warn().Err(ue.err).Str("path", r.URL.Path).Msg(ue.public.Message)
		err = withMessage(ue.public, ue.public.Message+"; see the coordinator log for request "+requestIDOf(r))
	}
	var ce *commands.Error
	if errors.As(err, &ce) && ce.Cause != nil {
		// A decision that failed on Redis: the cause is for the log only.
		log := s.logFor(r)
		log.Warn().Err(ce.Cause).Str("path", r.URL.Path).Str("errorCode", ce.Code).Msg(ce.Message)
		ce = &commands.Error{Kind: ce.Kind, Code: ce.Code, Message: ce.Message + "; see the coordinator log for request " + requestIDOf(r)}
	}
	if ce != nil {
		ks := kindStatus[ce.Kind]
		if ks.code == 0 {
			ks.code, ks.name = http.StatusInternalServerError, "INTERNAL_SERVER_ERROR"
		}
		writeJSON(w, ks.code, wire.ErrorResponse{Status: ks.name, ErrorCode: ce.Code, Message: ce.Message, Timestamp: time.Now().UTC(), Path: r.URL.Path})
		return
	}
	if errors.Is(err, r.Context().Err()) && r.Context().Err() != nil {
		writeJSON(w, http.StatusServiceUnavailable, wire.ErrorResponse{Status: "SERVICE_UNAVAILABLE", ErrorCode: "COORDINATOR_TERMINATING", Message: "request cancelled", Timestamp: time.Now().UTC(), Path: r.URL.Path})
		return
	}
	log := s.logFor(r)
	log.Error().Err(err).Str("path", r.URL.Path).Msg("internal error")
	writeJSON(w, http.StatusInternalServerError, wire.ErrorResponse{Status: "INTERNAL_SERVER_ERROR", ErrorCode: "INTERNAL_ERROR",
		Message: "Internal server error; see the coordinator log for request " + requestIDOf(r), Timestamp: time.Now().UTC(), Path: r.URL.Path})
}

func (s *Server) badRequest(w http.ResponseWriter, r *http.Request, msg string) {
	writeJSON(w, http.StatusBadRequest, wire.ErrorResponse{Status: "BAD_REQUEST", ErrorCode: "INVALID_REQUEST", Message: msg, Timestamp: time.Now().UTC(), Path: r.URL.Path})
}
