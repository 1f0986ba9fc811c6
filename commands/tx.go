package commands

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// tx is one decision in progress: what it decides on (the batch's view of
// the projection, its own view of the runtime table, the rules, the request's
// metadata and the time) and where what it decides goes (the batch's
// records, its runtime overlay). It reaches nothing else: a decision is a
// function of these, and the writer alone turns its records into appends
// and its runtime changes into commits (decider.go).
type Tx struct {
	B     *Batch
	RT    *RuntimeOverlay
	Rules Rules
	Meta  events.Meta
	Now   time.Time
	Log   zerolog.Logger
}

// batchCtx accumulates the records of one batch before they are appended,
// folded into an overlay of the projection, and the batch's runtime changes.
type Batch struct {
	base    *projection.State
	Overlay *projection.Overlay
	RT      *RuntimeOverlay
	Data    [][]byte
	Recs    []events.Record
}

func NewBatch(st *projection.State, table *RuntimeTable, now time.Time) *Batch {
	return &Batch{base: st, Overlay: st.NewOverlayLocked(), RT: newRuntimeOverlay(table, now)}
}

// undo drops what the decision that started at record n emitted (it failed):
// the overlay is rebuilt from the records before it. Its runtime overlay is
// dropped by the caller.
func (b *Batch) Undo(n int) {
	if len(b.Recs) == n {
		return
	}
	b.Data, b.Recs = b.Data[:n], b.Recs[:n]
	b.Overlay = b.base.NewOverlayLocked()
	for _, rec := range b.Recs {
		b.Overlay.Apply(rec)
	}
}

func (t *Tx) Group(k projection.GroupKey) *projection.Group { return t.B.Overlay.Group(k) }

// timers is the reading the decision's leases, deadlines and rounds are
// measured against (Clock); now is the wall-clock time it records.
func (t *Tx) timers() time.Time { return t.RT.now }

// groupsWithPrefix lists the groups of a stream prefix, in creation order.
func (t *Tx) GroupsWithPrefix(prefix string) []*projection.Group {
	var out []*projection.Group
	for _, k := range t.B.Overlay.Keys() {
		if k.StreamPrefix == prefix {
			out = append(out, t.Group(k))
		}
	}
	return out
}

// prefixSeen reports whether a group of the prefix ever existed in the
// committed state (its leftover streams are the coordinator's own).
func (t *Tx) prefixSeen(prefix string) bool { return t.B.base.PrefixSeenLocked(prefix) }

// emit records an event for group k (encoded now, appended with the batch) and
// folds it into the overlay; it returns the group as it is after the event.
func (t *Tx) Emit(k projection.GroupKey, ev events.Event) *projection.Group {
	m := t.Meta
	m.StreamPrefix, m.ConsumerGroup = k.StreamPrefix, k.ConsumerGroup
	// Callers validate what they pass; this is the last line of defence for
	// what every event carries.
	m.Actor, m.RequestID = Truncate(m.Actor, MaxTextBytes), Truncate(m.RequestID, MaxTextBytes)
	data, err := events.Encode(m, ev)
	if err != nil {
		panic(fmt.Sprintf("encode %s: %v", ev.EventType(), err))
	}
	rec := events.Record{Type: ev.EventType(), Schema: events.SchemaVersion, Meta: m, Event: ev}
	t.B.Data = append(t.B.Data, data)
	t.B.Recs = append(t.B.Recs, rec)
	t.B.Overlay.Apply(rec)
	return t.B.Overlay.Group(k)
}

// emitAs is emit with another actor (the coordinator's own follow-up decisions).
func (t *Tx) emitAs(actor string, k projection.GroupKey, ev events.Event) *projection.Group {
	saved := t.Meta.Actor
	t.Meta.Actor = actor
	defer func() { t.Meta.Actor = saved }()
	return t.Emit(k, ev)
}

// renew records the in-memory part of an accepted heartbeat: lease,
// capacity, progress.
func (t *Tx) renew(k projection.GroupKey, id string, req *wire.HeartbeatRequest, available int, progress []wire.ShardProgress) {
	t.RT.renew(k, id, t.Rules.MemberLease, req, available, progress)
}

// Actor names the coordinator's own decisions in the log.
const Actor = "coordinator"
