package client

import (
	"errors"
	"fmt"
	"net/http"
)

// Sentinel errors. An *APIError matches them with errors.Is by its errorCode
// or HTTP status.
var (
	// ErrGroupNotFound: the coordinator knows no such {streamPrefix, consumerGroup}
	// (404 GROUP_NOT_FOUND).
	ErrGroupNotFound = errors.New("coordinator: group not found")
	// ErrUnauthorized: the call had no or wrong credentials (401), or lacked
	// the role it needs (403).
	ErrUnauthorized = errors.New("coordinator: not authorized")
	// ErrUnavailable: the coordinator answered 503 (terminating, Redis down,
	// provisioning failed); retrying later may succeed.
	ErrUnavailable = errors.New("coordinator: unavailable")
	// ErrBadAnswer: a 2xx answer that is not the JSON the call expects (a
	// proxy's page, another service on the port).
	ErrBadAnswer = errors.New("decode answer")
)

// APIError is a non-2xx answer of the coordinator.
type APIError struct {
	Method     string
	Path       string
	StatusCode int
	// ErrorCode and Message come from the contract's error body, when there is one.
	ErrorCode string
	Message   string
	// Body is the raw answer.
	Body string
}

func (e *APIError) Error() string {
	msg := fmt.Sprintf("%s %s: HTTP %d", e.Method, e.Path, e.StatusCode)
	if e.ErrorCode != "" {
		msg += " " + e.ErrorCode
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// Is matches the package's sentinel errors.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrGroupNotFound:
		return e.ErrorCode == "GROUP_NOT_FOUND"
	case ErrUnauthorized:
		return e.StatusCode == http.StatusUnauthorized || e.StatusCode == http.StatusForbidden
	case ErrUnavailable:
		return e.StatusCode == http.StatusServiceUnavailable
	}
	return false
}
