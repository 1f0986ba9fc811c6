package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/httpapi/guard"
	"github.com/rscoord/rsc/wire"
)

// Every error body goes through writeError: a *commands.Error is answered by
// its kind (statusOf: HTTP status and status name) and its errorCode. The
// decisions' sentinels are commands' (commands/errors.go); the few refusals
// only the HTTP layer makes are below.

// Kinds only the HTTP layer produces (commands' kinds are positive).
const (
	kindMethodNotAllowed commands.Kind = -1                         // 405
	kindBodyTooLarge     commands.Kind = -2                         // 413
	kindUnsupportedMedia               = guard.KindUnsupportedMedia // 415 (-3)
	kindHeaderTooLarge   commands.Kind = -4                         // 431
	kindInternal         commands.Kind = -5                         // 500
)

// statusOf is the one table from error kind to HTTP status and status name.
var statusOf = map[commands.Kind]struct {
	code int
	name string
}{
	commands.KindInvalid:     {http.StatusBadRequest, "BAD_REQUEST"},
	commands.KindForbidden:   {http.StatusForbidden, "FORBIDDEN"},
	commands.KindNotFound:    {http.StatusNotFound, "NOT_FOUND"},
	kindMethodNotAllowed:     {http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED"},
	commands.KindConflict:    {http.StatusConflict, "CONFLICT"},
	kindBodyTooLarge:         {http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE"},
	kindUnsupportedMedia:     {http.StatusUnsupportedMediaType, "UNSUPPORTED_MEDIA_TYPE"},
	commands.KindNotAllowed:  {http.StatusUnprocessableEntity, "UNPROCESSABLE_ENTITY"},
	commands.KindRateLimited: {http.StatusTooManyRequests, "TOO_MANY_REQUESTS"},
	kindHeaderTooLarge:       {http.StatusRequestHeaderFieldsTooLarge, "REQUEST_HEADER_FIELDS_TOO_LARGE"},
	kindInternal:             {http.StatusInternalServerError, "INTERNAL_SERVER_ERROR"},
	commands.KindUnavailable: {http.StatusServiceUnavailable, "SERVICE_UNAVAILABLE"},
}

// Refusals of the HTTP layer. Handlers answer the ones a request makes
// specific with WithMessage; the ones that fail on Redis carry the cause
// (WithCause), which only the log shows. errBadCredentials never reaches
// writeError: authentication answers it itself.
var (
	// errNoRoute: no route serves the path (with any method).
	errNoRoute = &commands.Error{Kind: commands.KindNotFound, Code: "NOT_FOUND", Message: "No route"}
	// errMethodNotAllowed: a route serves the path, not with this method.
	errMethodNotAllowed = &commands.Error{Kind: kindMethodNotAllowed, Code: "METHOD_NOT_ALLOWED", Message: "Method not allowed"}
	// errBodyTooLarge and errHeaderTooLarge: the request exceeds limits.go.
	errBodyTooLarge   = &commands.Error{Kind: kindBodyTooLarge, Code: commands.ErrInvalid.Code, Message: fmt.Sprintf("request body larger than %d bytes", MaxBodyBytes)}
	errHeaderTooLarge = &commands.Error{Kind: kindHeaderTooLarge, Code: commands.ErrInvalid.Code, Message: fmt.Sprintf("request headers larger than %d bytes", MaxHeaderBytes)}
	// errRedisUnavailable: Redis failed a read of shard streams (monitoring).
	errRedisUnavailable = &commands.Error{Kind: commands.KindUnavailable, Code: "REDIS_UNAVAILABLE", Message: "Redis is unavailable"}
	// errLogUnavailable: the event log (or the history index) cannot be read.
	errLogUnavailable = commands.ErrUnavailable.WithMessage("The event log cannot be read")
	// errReadBudget: a messages page would read more than MaxEntriesPerRequest entries.
	errReadBudget = commands.ErrInvalid.WithMessage("this page would read more than " + strconv.Itoa(MaxEntriesPerRequest) + " entries from Redis; select one shard, or page from the start with cursors")
	// errTooManyReplays: MaxConcurrentReplays replays are running.
	errTooManyReplays = commands.ErrRateLimited.WithMessage("Too many replays in progress (at most " + strconv.Itoa(MaxConcurrentReplays) + "); retry")
	// errTooManyMessageReads: MaxConcurrentMessageReads messages pages are being read.
	errTooManyMessageReads = commands.ErrRateLimited.WithMessage("Too many messages pages being read (at most " + strconv.Itoa(MaxConcurrentMessageReads) + " at once); retry")
	// errCancelled: the request ended (its caller went away) before its answer.
	errCancelled = commands.ErrTerminating.WithMessage("request cancelled")
	// errInternal: anything that is not a *commands.Error (a bug, or an error
	// nobody classified); the log has it.
	errInternal = &commands.Error{Kind: kindInternal, Code: "INTERNAL_ERROR", Message: "Internal server error"}
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// streamsUnavailable is the answer when Redis fails a shard stream read.
func streamsUnavailable(err error) error { return errRedisUnavailable.WithCause(err) }

// logUnavailable is the answer when the event log cannot be read.
func logUnavailable(err error) error { return errLogUnavailable.WithCause(err) }

// writeError answers err with the contract's error body. What the caller sees
// is public's choice; the status follows the kind (statusOf).
func (h *kit) writeError(w http.ResponseWriter, r *http.Request, err error) {
	ce := h.public(r, err)
	st, ok := statusOf[ce.Kind]
	if !ok {
		st = statusOf[kindInternal]
	}
	if ce.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(guard.RetryAfterSeconds(ce.RetryAfter)))
	}
	writeJSON(w, st.code, wire.ErrorResponse{Status: st.name, ErrorCode: ce.Code, Message: ce.Message, Timestamp: time.Now().UTC(), Path: r.URL.Path})
}

// public is what the caller may see of err. A failure behind a refusal (a
// Redis error naming addresses or ACL users) and an error nobody classified
// are logged with the request's id, and the caller gets a generic message
// naming that id; an error that is the end of the request's own context is
// COORDINATOR_TERMINATING; a body beyond MaxBodyBytes is 413.
func (h *kit) public(r *http.Request, err error) *commands.Error {
	seeLog := "; see the coordinator log for request " + requestIDOf(r)
	var ce *commands.Error
	var mbe *http.MaxBytesError
	switch ended := r.Context().Err(); {
	case ended != nil && errors.Is(err, ended):
		return errCancelled
	case errors.As(err, &mbe):
		return errBodyTooLarge
	case !errors.As(err, &ce):
		log := h.logFor(r)
		log.Error().Err(err).Str("path", r.URL.Path).Msg("internal error")
		return errInternal.WithMessage(errInternal.Message + seeLog)
	case ce.Cause != nil:
		log := h.logFor(r)
		log.Warn().Err(ce.Cause).Str("path", r.URL.Path).Str("errorCode", ce.Code).Msg(ce.Message)
		return ce.WithMessage(ce.Message + seeLog)
	}
	return ce
}

// badRequest answers 400 INVALID_REQUEST with a message that says what was wrong.
func (h *kit) badRequest(w http.ResponseWriter, r *http.Request, msg string) {
	h.writeError(w, r, commands.ErrInvalid.WithMessage(msg))
}
