package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/rs/zerolog"
)

// Every request has an id: the caller's X-Request-Id when it is a plain token,
// otherwise one made here. It is echoed as X-Request-Id, logged with every
// error, and named in the messages of errors whose detail only the log holds.

const headerRequestID = "X-Request-Id"

// traceHeaders are recorded in the audit log (meta): each is bounded.
var traceHeaders = []string{headerRequestID, "X-Correlation-Id", "X-Amzn-Trace-Id"}

type requestKey struct{}

// requestInfo is what the middleware learnt about a request.
type requestInfo struct {
	id    string
	route string // metrics label of the matched route
	// client is the client's address as a --ha follower asserted it for a
	// request it forwarded ("" otherwise: the TCP peer is the client).
	client string
}

func infoOf(r *http.Request) requestInfo {
	v, _ := r.Context().Value(requestKey{}).(requestInfo)
	return v
}

// requestIDOf is the request's id ("" outside ServeHTTP).
func requestIDOf(r *http.Request) string { return infoOf(r).id }

// badTraceHeader names a trace header that is too long or holds control
// characters ("" when all are fine).
func badTraceHeader(r *http.Request) string {
	for _, h := range traceHeaders {
		for _, v := range r.Header.Values(h) {
			if len(v) > MaxTraceHeaderBytes {
				return h
			}
			for i := 0; i < len(v); i++ {
				if c := v[i]; c < 0x20 || c == 0x7f {
					return h
				}
			}
		}
	}
	return ""
}

// requestID is the caller's X-Request-Id when it is 1 to MaxTraceHeaderBytes
// bytes of printable ASCII without spaces, else a new random one.
func requestID(r *http.Request) string {
	if v := r.Header.Get(headerRequestID); v != "" && len(v) <= MaxTraceHeaderBytes && printableToken(v) {
		return v
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func printableToken(v string) bool {
	for i := 0; i < len(v); i++ {
		if v[i] <= ' ' || v[i] > '~' {
			return false
		}
	}
	return true
}

// withRequestInfo returns r carrying info.
// RouteTemplate is the template of the route the server matched r to, for
// the handlers and middleware it runs ("" when no route serves r). The
// server matches each request once and calls the route's handler itself, so
// mux.CurrentRoute does not know it.
func RouteTemplate(r *http.Request) string {
	if route := infoOf(r).route; route != "unmatched" {
		return route
	}
	return ""
}

func withRequestInfo(r *http.Request, info requestInfo) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), requestKey{}, info))
}

// logFor is the server's logger with the request's id, route and method.
func (s *Server) logFor(r *http.Request) zerolog.Logger {
	info := infoOf(r)
	return s.log.With().Str("requestId", info.id).Str("route", info.route).Str("method", r.Method).Logger()
}

// headerBytes is the size of the request line and headers as sent (near
// enough: net/http has already parsed them).
func headerBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.RequestURI) + 1 + len(r.Proto) + 2
	if r.Host != "" {
		n += len("Host: ") + len(r.Host) + 2
	}
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n + 2
}
