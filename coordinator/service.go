package coordinator

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// Service is the commands callers send (httpapi.Commands): the operator's
// admin commands (admin.go, resharding.go, ordering.go, autoscale.go) and the
// members' heartbeats (heartbeat.go, hold.go: answered by its heartbeats part). Each validates its request, gathers
// the evidence its decision needs (through the reconciler, outside the
// writer), submits the decision and answers with what it decided.
type Service struct {
	serviceDeps
}

// serviceDeps is what the Service is built from.
type serviceDeps struct {
	rules    commands.Rules
	state    *projection.State
	dec      writer
	rec      *reconciler
	locks    *prefixLocks
	evidence *evidenceTable
	lead     interface{ IsLeader() bool }
	life     *lifecycle
	// now is the wall-clock time decisions record, timers the reading
	// leases, deadlines and budgets are measured against (Clock).
	now    func() time.Time
	timers func() time.Time
	logger zerolog.Logger
	// rejections bounds the refusals recorded per principal.
	rejections *rejectionLog
	// committed peeks at the committed state before a decision.
	committed committedState
	// beats answers the members' heartbeats (heartbeat.go, hold.go).
	beats *heartbeats
	// restore restores the log from the projection (in the writer;
	// logGuard.restoreLog).
	restore func(ctx context.Context, meta events.Meta, in RestoreLogInput, now time.Time) (RestoreResult, error)
}

func newService(deps serviceDeps) *Service { return &Service{serviceDeps: deps} }

// admin runs an operator command (its evidence gathering and decisions) and
// records a refusal in the audit log.
func admin[T any](ctx context.Context, s *Service, meta events.Meta, k projection.GroupKey, command, requestedBy string, do func(meta events.Meta) (T, error)) (T, error) {
	principal := meta.Actor // the authenticated caller ("" for none)
	if meta.Actor == "" {
		meta.Actor = commands.Truncate(requestedBy, commands.MaxTextBytes)
	}
	if err := s.canDecide(); err != nil {
		var zero T
		return zero, err
	}
	v, err := do(meta)
	var ce *commands.Error
	if err != nil && errors.As(err, &ce) && ce.Kind != commands.KindUnavailable {
		s.recordRejection(ctx, meta, principal, k, command, requestedBy, ce)
	}
	return v, err
}

// recordRejection appends command.rejected, within the principal's budget
// (the record counts the refusals left out since the last one); best effort:
// the caller's answer is the refusal either way. A refusal naming a group that
// does not exist is recorded as such (NoGroup): it reaches no group's history
// index, so made-up names create no key.
func (s *Service) recordRejection(ctx context.Context, meta events.Meta, principal string, k projection.GroupKey, command, requestedBy string, ce *commands.Error) {
	record, suppressed := s.rejections.take(principal, s.timers())
	if !record {
		return
	}
	_, err := submit(ctx, s.dec, meta, func(t *commands.Tx) (struct{}, error) {
		commands.RecordRejection(t, k, command, requestedBy, ce, suppressed)
		return struct{}{}, nil
	})
	s.rejections.done(principal, suppressed, err == nil)
	if err != nil {
		s.logger.Warn().Err(err).Str("command", command).Msg("could not record rejected command")
	}
}

// rejectionLog is what each principal has left of its budget of recorded
// refusals, and how many of its refusals were left out since its last
// record. Its keys are principals (bounded by the users file; "" for callers
// without one).
type rejectionLog struct {
	mu   sync.Mutex
	b    commands.Budget
	left map[string]*rejections
}

type rejections struct {
	bucket     commands.Bucket
	suppressed int64
}

func newRejectionLog(b commands.Budget) *rejectionLog {
	return &rejectionLog{b: b, left: map[string]*rejections{}}
}

// take reports whether the principal's refusal is recorded now and how many
// of its refusals the record carries as left out; a refusal not recorded is
// counted.
func (l *rejectionLog) take(principal string, now time.Time) (bool, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.left[principal]
	if r == nil {
		r = &rejections{bucket: commands.Bucket{Tokens: l.b.Burst, At: now}}
		l.left[principal] = r
	}
	if !l.b.On() {
		return true, r.suppressed
	}
	next, ok, _ := l.b.Take(&r.bucket, now)
	r.bucket = next
	if !ok {
		r.suppressed++
		return false, 0
	}
	return true, r.suppressed
}

// done settles a record that carried suppressed: once it landed they are
// told; a record that failed counts as left out itself.
func (l *rejectionLog) done(principal string, suppressed int64, landed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.left[principal]
	if landed {
		r.suppressed -= suppressed
	} else {
		r.suppressed++
	}
}

// canDecide refuses a command before its side effects when this coordinator
// could not decide it anyway.
func (s *Service) canDecide() error {
	switch {
	case s.life.closing.Load():
		return commands.ErrTerminating
	case !s.life.ready.Load():
		return commands.WithMsg(commands.ErrUnavailable, "coordinator is still loading the event log")
	case !s.lead.IsLeader():
		return commands.ErrNotLeader
	}
	return s.life.refusal()
}

// Heartbeat runs the member protocol: join, leave, fencing, ownership validation,
// revoke before assign. A heartbeat that changes nothing is answered from the
// projection without touching the log. principal is the authenticated user that
// sent it ("" when the member API is anonymous): a member id is bound to the
// principal that joined it, and a heartbeat for it from anyone else is refused
// (ErrMemberPrincipal, HTTP 403) before it can release or claim anything.
//
// A first heartbeat (epoch 0) for a group that does not exist, on a stream
// with metadata, registers the group: its consumer group is provisioned on
// every shard of the stream (at the stream's end, outside the writer; a
// failure is 503 and records nothing), then one decision records
// group.created with the stream's layout and joins the member.
func (s *Service) Heartbeat(ctx context.Context, k projection.GroupKey, pathID, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatResponse, error) {
	return s.beats.beat(ctx, k, pathID, principal, req)
}

// HeldHeartbeat is Heartbeat for a member that asked to be held (hold.go).
// It returns the answer, how it was reached, and the error of a
// heartbeat that failed (none answers HoldDropped).
func (s *Service) HeldHeartbeat(ctx context.Context, k projection.GroupKey, id, principal string, req *wire.HeartbeatRequest, h HoldRequest) (*wire.HeartbeatResponse, HoldOutcome, error) {
	return s.beats.held(ctx, k, id, principal, req, h)
}

// HeldHeartbeats is the number of heartbeats held now.
func (s *Service) HeldHeartbeats() int { return int(s.beats.holds.total.Load()) }
