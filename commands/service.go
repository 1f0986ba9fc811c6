package commands

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Service is the commands callers send (httpapi.Commands): the operator's
// admin commands (admin.go, resharding.go, ordering.go, autoscale.go) and the
// members' heartbeats (heartbeat.go). Each validates its request, gathers
// the evidence its decision needs (through the reconciler, outside the
// writer), submits the decision and answers with what it decided.
type Service struct {
	serviceDeps
}

// serviceDeps is what the Service is built from.
type serviceDeps struct {
	rules    rules
	state    *projection.State
	dec      *decider
	rec      *reconciler
	locks    *prefixLocks
	table    *runtimeTable
	evidence *evidenceTable
	lead     interface{ IsLeader() bool }
	life     *lifecycle
	now      func() time.Time
	logger   zerolog.Logger
}

func newService(deps serviceDeps) *Service { return &Service{serviceDeps: deps} }

// admin runs an operator command (its evidence gathering and decisions) and
// records a refusal in the audit log.
func admin[T any](ctx context.Context, s *Service, meta events.Meta, k projection.GroupKey, command, requestedBy string, do func(meta events.Meta) (T, error)) (T, error) {
	if meta.Actor == "" {
		meta.Actor = truncate(requestedBy, MaxTextBytes)
	}
	if err := s.canDecide(); err != nil {
		var zero T
		return zero, err
	}
	v, err := do(meta)
	var ce *Error
	if err != nil && errors.As(err, &ce) && ce.Kind != KindUnavailable {
		s.recordRejection(ctx, meta, k, command, requestedBy, ce)
	}
	return v, err
}

// recordRejection appends command.rejected; best effort: the caller's answer is
// the refusal either way.
func (s *Service) recordRejection(ctx context.Context, meta events.Meta, k projection.GroupKey, command, requestedBy string, ce *Error) {
	if ValidateKey(k) != nil {
		k = projection.GroupKey{}
	}
	_, err := submit(ctx, s.dec, meta, func(t *tx) (struct{}, error) {
		t.emit(k, &events.CommandRejected{Command: command, ErrorCode: ce.Code, Message: truncate(ce.Message, 4*MaxTextBytes), RequestedBy: truncate(requestedBy, MaxTextBytes)})
		return struct{}{}, nil
	})
	if err != nil {
		s.logger.Warn().Err(err).Str("command", command).Msg("could not record rejected command")
	}
}

// peek runs a read-only check against the committed state, as a decision
// would see it, without the writer: a command refused by the state it would
// find is refused before anything touches Redis. The decision checks again.
func (s *Service) peek(check func(t *tx) error) error {
	s.state.RLock()
	defer s.state.RUnlock()
	now := s.now()
	b := newBatch(s.state, s.table, now)
	return check(&tx{b: b, rt: b.rt, rules: s.rules, now: now, log: s.logger})
}

// canDecide refuses a command before its side effects when this coordinator
// could not decide it anyway.
func (s *Service) canDecide() error {
	switch {
	case s.life.closing.Load():
		return ErrTerminating
	case !s.life.ready.Load():
		return withMsg(ErrUnavailable, "coordinator is still loading the event log")
	case !s.lead.IsLeader():
		return ErrNotLeader
	}
	return nil
}
