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
type tx struct {
	b     *batchCtx
	rt    *runtimeOverlay
	rules rules
	meta  events.Meta
	now   time.Time
	log   zerolog.Logger
}

// batchCtx accumulates the records of one batch before they are appended,
// folded into an overlay of the projection, and the batch's runtime changes.
type batchCtx struct {
	base *projection.State
	ov   *projection.Overlay
	rt   *runtimeOverlay
	data [][]byte
	recs []events.Record
}

func newBatch(st *projection.State, table *runtimeTable, now time.Time) *batchCtx {
	return &batchCtx{base: st, ov: st.NewOverlayLocked(), rt: newRuntimeOverlay(table, now)}
}

// undo drops what the decision that started at record n emitted (it failed):
// the overlay is rebuilt from the records before it. Its runtime overlay is
// dropped by the caller.
func (b *batchCtx) undo(n int) {
	if len(b.recs) == n {
		return
	}
	b.data, b.recs = b.data[:n], b.recs[:n]
	b.ov = b.base.NewOverlayLocked()
	for _, rec := range b.recs {
		b.ov.Apply(rec)
	}
}

func (t *tx) group(k projection.GroupKey) *projection.Group { return t.b.ov.Group(k) }

// timers is the reading the decision's leases, deadlines and rounds are
// measured against (Clock); now is the wall-clock time it records.
func (t *tx) timers() time.Time { return t.rt.now }

// groupsWithPrefix lists the groups of a stream prefix, in creation order.
func (t *tx) groupsWithPrefix(prefix string) []*projection.Group {
	var out []*projection.Group
	for _, k := range t.b.ov.Keys() {
		if k.StreamPrefix == prefix {
			out = append(out, t.group(k))
		}
	}
	return out
}

// prefixSeen reports whether a group of the prefix ever existed in the
// committed state (its leftover streams are the coordinator's own).
func (t *tx) prefixSeen(prefix string) bool { return t.b.base.PrefixSeenLocked(prefix) }

// emit records an event for group k (encoded now, appended with the batch) and
// folds it into the overlay; it returns the group as it is after the event.
func (t *tx) emit(k projection.GroupKey, ev events.Event) *projection.Group {
	m := t.meta
	m.StreamPrefix, m.ConsumerGroup = k.StreamPrefix, k.ConsumerGroup
	// Callers validate what they pass; this is the last line of defence for
	// what every event carries.
	m.Actor, m.RequestID = truncate(m.Actor, MaxTextBytes), truncate(m.RequestID, MaxTextBytes)
	data, err := events.Encode(m, ev)
	if err != nil {
		panic(fmt.Sprintf("encode %s: %v", ev.EventType(), err))
	}
	rec := events.Record{Type: ev.EventType(), Schema: events.SchemaVersion, Meta: m, Event: ev}
	// The decision's records after its first continue it: replay steps
	// from one decision's end to the next (events.Meta.Continues).
	t.meta.Continues = true
	t.b.data = append(t.b.data, data)
	t.b.recs = append(t.b.recs, rec)
	t.b.ov.Apply(rec)
	return t.b.ov.Group(k)
}

// emitAs is emit with another actor (the coordinator's own follow-up decisions).
func (t *tx) emitAs(actor string, k projection.GroupKey, ev events.Event) *projection.Group {
	saved := t.meta.Actor
	t.meta.Actor = actor
	defer func() { t.meta.Actor = saved }()
	return t.emit(k, ev)
}

// renew records the in-memory part of an accepted heartbeat: lease,
// capacity, progress.
func (t *tx) renew(k projection.GroupKey, id string, req *wire.HeartbeatRequest, available int, progress []wire.ShardProgress) {
	t.rt.renew(k, id, t.rules.memberLease, req, available, progress)
}

// Actor names the coordinator's own decisions in the log.
const Actor = "coordinator"
