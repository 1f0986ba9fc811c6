package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// RestoreLog writes the state this coordinator holds back to a log that lost
// it (LOG_LOST; guard.go): the state as the snapshot taken at a log.restored
// entry, then that entry, which names who, why and the position restored.
// Then it decides again from that state. Only the leader restores (a
// follower forwards the request); a log that holds the state is not
// restored (ErrLogNotLost), nor one Redis may evict (ErrEvictionPolicy).
func (s *Service) RestoreLog(ctx context.Context, meta events.Meta, in RestoreLogInput) (RestoreResult, error) {
	if problems := commands.CheckAudit(in.RequestedBy, in.Reason, true); len(problems) > 0 {
		return RestoreResult{}, commands.Invalid(problems)
	}
	switch {
	case s.life.closing.Load():
		return RestoreResult{}, commands.ErrTerminating
	case !s.life.ready.Load():
		return RestoreResult{}, commands.WithMsg(commands.ErrUnavailable, "coordinator is still loading the event log")
	case !s.lead.IsLeader():
		return RestoreResult{}, commands.ErrNotLeader
	}
	if e := s.life.evicting.Load(); e != nil {
		return RestoreResult{}, e
	}
	if meta.Actor == "" {
		meta.Actor = commands.Truncate(in.RequestedBy, commands.MaxTextBytes)
	}
	var res RestoreResult
	var rerr error
	if err := s.dec.runInWriter(ctx, func() { res, rerr = s.restore(ctx, meta, in, s.now()) }); err != nil {
		return RestoreResult{}, err
	}
	return res, rerr
}

// restoreLog is the restore, in the writer. The snapshot is stored before
// the entry is appended, under the entry's id (chosen above every id the
// log, the projection and the kept snapshots have): the log never holds a
// restore without its snapshot, and a snapshot whose entry did not land is
// one the log does not hold, which start-up skips.
func (g *logGuard) restoreLog(ctx context.Context, meta events.Meta, in RestoreLogInput, now time.Time) (RestoreResult, error) {
	loss := g.life.lost.Load()
	if loss == nil {
		return RestoreResult{}, commands.ErrLogNotLost
	}
	rs, ok := g.tl.log.(events.Restorable)
	if !ok || !g.snaps.on() {
		return RestoreResult{}, commands.WithMsg(commands.ErrUnavailable, "this coordinator keeps no snapshots in Redis: it cannot restore the log")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	at := g.state.LastIDLocked()
	if held, err := g.tl.log.Get(ctx, []string{at}); err != nil {
		return RestoreResult{}, commands.Failed(commands.ErrUnavailable, err, "the event log cannot be read: nothing was restored; retry")
	} else if len(held) == 1 {
		g.life.lost.Store(nil)
		return RestoreResult{}, commands.ErrLogNotLost
	}
	logLast, err := g.tl.log.LastID(ctx)
	if err != nil {
		return RestoreResult{}, commands.Failed(commands.ErrUnavailable, err, "the event log cannot be read: nothing was restored; retry")
	}
	kept, err := g.snaps.store.Kept(ctx)
	if err != nil {
		return RestoreResult{}, commands.Failed(commands.ErrUnavailable, err, "the snapshots cannot be read: nothing was restored; retry")
	}
	id := restoreID(now, append([]string{logLast, at}, kept...)...)
	meta.Time = now
	meta.StreamPrefix, meta.ConsumerGroup = "", ""
	ev := &events.LogRestored{RestoredFrom: at, LogLastID: logLast, Cause: loss.Cause, LostEntries: loss.LostEntries,
		RequestedBy: in.RequestedBy, Reason: in.Reason, Coordinator: g.coordinatorID}
	meta.Actor, meta.RequestID = commands.Truncate(meta.Actor, commands.MaxTextBytes), commands.Truncate(meta.RequestID, commands.MaxTextBytes)
	data, err := events.Encode(meta, ev)
	if err != nil {
		return RestoreResult{}, fmt.Errorf("encode log.restored: %w", err)
	}
	rec := events.Record{ID: id, Type: ev.EventType(), Schema: events.SchemaVersion, Meta: meta, Event: ev}
	snap, err := restoredSnapshot(g.state, rec)
	if err != nil {
		return RestoreResult{}, err
	}
	if err := g.snaps.saveAt(ctx, id, snap); err != nil {
		return RestoreResult{}, commands.Failed(commands.ErrUnavailable, err, "the snapshot of the restored state could not be stored: nothing was restored; retry")
	}
	if err := rs.AppendRestore(ctx, logLast, id, data); err != nil {
		switch {
		case errors.Is(err, events.ErrFenced):
			return RestoreResult{}, commands.ErrNotLeader
		case errors.Is(err, events.ErrConflict):
			return RestoreResult{}, commands.WithMsg(commands.ErrStateConflict, "the event log moved while it was being restored (another writer appended): nothing was restored; retry")
		}
		return RestoreResult{}, commands.Failed(commands.ErrUnavailable, err, "the log.restored entry was not confirmed: if it landed, the coordinator follows it within seconds (GET /readyz); else retry")
	}
	if err := g.state.Apply(rec); err != nil {
		// The log is past the projection now; the next catch-up reloads.
		return RestoreResult{}, fmt.Errorf("apply log.restored: %w", err)
	}
	g.life.lost.Store(nil)
	g.life.healthy.Store(true)
	g.recent.reset(id)
	g.answered = id
	if g.afterAppend != nil {
		g.afterAppend(rec)
	}
	g.logger.Warn().Str("eventId", id).Str("restoredFrom", at).Str("logLastId", logLast).Str("cause", loss.Cause).
		Str("requestedBy", in.RequestedBy).Str("reason", in.Reason).Msg("the event log was restored from the state this coordinator held: deciding again")
	return RestoreResult{EventID: id, RestoredFrom: at, LogLastID: logLast, Cause: loss.Cause, LostEntries: loss.LostEntries, AtLeast: loss.AtLeast}, nil
}

// RestoreLogInput is POST /coord/v1/log/restore's request: who restores the
// log and why (both required, MaxTextBytes at most).
type RestoreLogInput struct {
	RequestedBy string
	Reason      string
}

// RestoreResult is what a restore wrote.
type RestoreResult struct {
	// EventID is the log.restored entry's id, and the id of the snapshot of
	// the restored state.
	EventID string
	// RestoredFrom is the position of the state restored; LogLastID the
	// log's last id before the restore; Cause, LostEntries and AtLeast the
	// loss it ended.
	RestoredFrom string
	LogLastID    string
	Cause        string
	LostEntries  int64
	AtLeast      bool
}

// restoredSnapshot is the snapshot of st with rec (log.restored) applied:
// the state after the restore entry.
func restoredSnapshot(st *projection.State, rec events.Record) ([]byte, error) {
	data, err := st.Capture().Encode()
	if err != nil {
		return nil, fmt.Errorf("encode the restored state: %w", err)
	}
	after, err := projection.Restore(data)
	if err != nil {
		return nil, fmt.Errorf("copy the restored state: %w", err)
	}
	if err := after.Apply(rec); err != nil {
		return nil, fmt.Errorf("apply log.restored to the restored state: %w", err)
	}
	return after.Capture().Encode()
}

// restoreID is the id of a restore's entry: now's millisecond, unless one of
// ids is at or after it, then just after the highest of them.
func restoreID(now time.Time, ids ...string) string {
	next := events.ID{Ms: uint64(max(now.UnixMilli(), 0))}
	for _, s := range ids {
		id, err := events.ParseID(s)
		if err == nil && !id.Less(next) {
			next = events.ID{Ms: id.Ms, Seq: id.Seq + 1}
		}
	}
	return next.String()
}
