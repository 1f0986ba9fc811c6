package coordinator

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// lifecycle is the state every part checks before it acts: loaded (ready),
// the last log operation succeeded (healthy), shutting down (closing, stop).
type lifecycle struct {
	// ctx ends at Close (cancel); stop is its Done channel. The leader's
	// loops run under ctx, so Close does not wait for a pass over every
	// group to finish.
	ctx     context.Context
	cancel  context.CancelFunc
	stop    <-chan struct{}
	ready   atomic.Bool
	healthy atomic.Bool
	closing atomic.Bool
	// corrupt is set while the log or the snapshot start-up depends on
	// cannot be decoded (nil: it can).
	corrupt atomic.Pointer[commands.Error]
	// lost is set while the log no longer holds what the projection
	// applied, evicting while Redis may evict the log (guard.go); safety
	// is the guard's last reading of Redis; the losses found, by cause.
	lost          atomic.Pointer[LogLoss]
	evicting      atomic.Pointer[commands.Error]
	safety        atomic.Pointer[RedisSafety]
	lossesGone    atomic.Int64
	lossesEntries atomic.Int64
}

// markCorrupt records that the state cannot be built without guessing: err
// names what could not be decoded (an *events.DecodeError names the
// entry). It reports whether err was such an error.
func (l *lifecycle) markCorrupt(err error) bool {
	var de *events.DecodeError
	if !errors.As(err, &de) {
		return false
	}
	l.corrupt.Store(commands.WithMsg(commands.ErrMetadataCorrupt, "%s: log entry %s cannot be decoded (%v); nothing is answered from a state built around it (docs/operations.md, Runbook: a corrupt log)", commands.ErrMetadataCorrupt.Message, de.ID, de.Err))
	return true
}

// refusal is why decisions that would append are refused now (nil: they
// are not): a lost log, or a Redis that may evict it.
func (l *lifecycle) refusal() error {
	if loss := l.lost.Load(); loss != nil {
		return commands.WithMsg(commands.ErrLogLost, "%s", loss.Message())
	}
	if e := l.evicting.Load(); e != nil {
		return e
	}
	return nil
}

// quarantineError is COORDINATOR_METADATA_CORRUPT for a quarantined prefix.
func quarantineError(q projection.Quarantine) *commands.Error {
	return commands.WithMsg(commands.ErrMetadataCorrupt, "%s: stream prefix %q is quarantined: log entry %s (type %q) cannot be read (%s); every other prefix is served (docs/operations.md, Runbook: a corrupt log)",
		commands.ErrMetadataCorrupt.Message, q.StreamPrefix, q.EntryID, q.Type, q.Reason)
}

// noteQuarantines logs the quarantines of st when it holds more than known.
func noteQuarantines(logger zerolog.Logger, st *projection.State, known int) {
	if st.NumQuarantined() <= known {
		return
	}
	for _, q := range st.Quarantines() {
		logger.Error().Str("streamPrefix", q.StreamPrefix).Str("entry", q.EntryID).Str("type", q.Type).Str("reason", q.Reason).Int64("skipped", q.Skipped).
			Msg("stream prefix quarantined: a log entry of it cannot be read; the prefix answers 409 COORDINATOR_METADATA_CORRUPT naming the entry, every other prefix is served (docs/operations.md, Runbook: a corrupt log)")
	}
}
