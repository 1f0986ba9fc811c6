package client

import (
	"errors"
	"syscall"
)

// Refused reports whether err is a call's failure because every
// coordinator endpoint refused the connection: nothing listens there, so no
// coordinator received the call (nor holds any of the caller's heartbeats).
func Refused(err error) bool {
	var ee *endpointsError
	if errors.As(err, &ee) {
		for _, e := range ee.errs {
			if !errors.Is(e, syscall.ECONNREFUSED) {
				return false
			}
		}
		return len(ee.errs) > 0
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// Unanswered reports whether err is a call's failure in which a coordinator
// may have received the call without answering it: an attempt failed after
// connecting (a reset, a timeout, the caller's own cancel), not with an
// answer (*APIError) or a refused connection.
func Unanswered(err error) bool {
	errs := []error{err}
	var ee *endpointsError
	if errors.As(err, &ee) {
		errs = ee.errs
	}
	for _, e := range errs {
		var api *APIError
		if !errors.As(e, &api) && !errors.Is(e, syscall.ECONNREFUSED) {
			return true
		}
	}
	return false
}
