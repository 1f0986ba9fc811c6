package metrics

import (
	"errors"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/wire"
)

// HeartbeatAnswered counts one heartbeat the coordinator answered
// (rsc_heartbeats_total): by its protocol status, or, when it was refused
// with an error, by the errorCode the caller gets. cmd/coordinator calls it
// from a wrapper of the coordinator's Commands, where the answer is still a
// value: every protocol outcome is HTTP 200, so the HTTP status does not
// tell them apart.
func (m *Metrics) HeartbeatAnswered(resp *wire.HeartbeatResponse, err error) {
	m.heartbeats.WithLabelValues(heartbeatLabel(resp, err)).Inc()
}

// heartbeatLabel is the status of an answer or the errorCode of a refusal;
// "UNKNOWN" when neither is one of the contract's words.
func heartbeatLabel(resp *wire.HeartbeatResponse, err error) string {
	label := "INTERNAL_ERROR"
	var ce *commands.Error
	switch {
	case err == nil && resp != nil:
		label = resp.Status
	case errors.As(err, &ce):
		label = ce.Code
	}
	if !boundedLabel(label) {
		return "UNKNOWN"
	}
	return label
}

// boundedLabel accepts the contract's status words (upper case and underscores)
// so that a surprising value cannot mint unbounded label values.
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
