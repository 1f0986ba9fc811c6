package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/httpapi/guard"
)

// Every request has an id: the caller's X-Request-Id when it is a plain token,
// otherwise one made here. It is echoed as X-Request-Id, logged with every
// error, and named in the messages of errors whose detail only the log holds.

const headerRequestID = "X-Request-Id"

// traceHeaders are recorded in the audit log (meta): each is bounded.
var traceHeaders = []string{headerRequestID, "X-Correlation-Id", "X-Amzn-Trace-Id"}

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

// RouteTemplate is the template of the route the server matched r to, for
// the handlers and middleware it runs ("" when no route serves r).
func RouteTemplate(r *http.Request) string {
	if m := guard.Of(r).Route; m.Served {
		return m.Template
	}
	return ""
}

// requestIDOf is the request's id ("" outside ServeHTTP).
func requestIDOf(r *http.Request) string { return guard.RequestID(r) }

// logFor is the server's logger with the request's id, route and method.
func (h *kit) logFor(r *http.Request) zerolog.Logger { return guard.Logger(h.log, r) }

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
