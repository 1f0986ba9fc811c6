package metrics

import (
	"encoding/json"
	"net/http"

	"github.com/rscoord/rsc/httpapi"
)

// maxCapturedBody bounds what is kept of a heartbeat answer to read its status.
const maxCapturedBody = 64 << 10

func isHeartbeatRoute(r *http.Request) bool {
	return httpapi.RouteTemplate(r) == httpapi.HeartbeatRoute
}

// countHeartbeats reads the status out of each answer of next as it is written.
// The protocol status is in the body (every protocol outcome is HTTP 200), and
// httpapi's Observe hook sees only the HTTP status, hence this tee.
func (m *Metrics) countHeartbeats(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tee := &bodyTee{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(tee, r)
		m.heartbeats.WithLabelValues(heartbeatStatus(tee.status, tee.body)).Inc()
	})
}

// heartbeatStatus is the label of one answer: the protocol status of a 200, the
// errorCode of an error answer, "UNKNOWN" when the body says neither.
func heartbeatStatus(code int, body []byte) string {
	var v struct {
		Status    any    `json:"status"`
		ErrorCode string `json:"errorCode"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "UNKNOWN"
	}
	label := v.ErrorCode
	if code == http.StatusOK {
		label, _ = v.Status.(string)
	}
	if !boundedLabel(label) {
		return "UNKNOWN"
	}
	return label
}

// boundedLabel accepts the contract's status words (upper case and underscores)
// so that a surprising body cannot mint unbounded label values.
func boundedLabel(s string) bool {
	if s == "" || len(s) > 40 {
		return false
	}
	for _, c := range s {
		if (c < 'A' || c > 'Z') && c != '_' {
			return false
		}
	}
	return true
}

// bodyTee passes an answer through and keeps its status and the first
// maxCapturedBody bytes of its body.
type bodyTee struct {
	http.ResponseWriter
	status int
	wrote  bool
	body   []byte
}

func (t *bodyTee) WriteHeader(code int) {
	if !t.wrote {
		t.status, t.wrote = code, true
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *bodyTee) Write(b []byte) (int, error) {
	t.wrote = true
	if room := maxCapturedBody - len(t.body); room > 0 {
		t.body = append(t.body, b[:min(room, len(b))]...)
	}
	return t.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (t *bodyTee) Unwrap() http.ResponseWriter { return t.ResponseWriter }
