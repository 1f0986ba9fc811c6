package commands

import (
	"encoding/binary"
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
	// Seed is the decision's random draw (the ids it makes: newID), made by
	// whoever runs it.
	Seed [16]byte

	recs  []events.Record
	data  [][]byte
	drawn uint32
}

// Batch is what the decisions of one batch share: an overlay of the
// projection with the records of the batch's earlier decisions folded in,
// and the batch's runtime overlay. A decision's own records are its result
// (Result); the writer folds them into the batch and appends them.
type Batch struct {
	base    *projection.State
	Overlay *projection.Overlay
	RT      *RuntimeOverlay
}

// NewBatch starts a batch on the committed state st and runtime table.
func NewBatch(st *projection.State, table *RuntimeTable, now time.Time) *Batch {
	return &Batch{base: st, Overlay: st.NewOverlayLocked(), RT: newRuntimeOverlay(table, now)}
}

// Undo drops what a failed decision folded into the overlay: it is rebuilt
// from kept, the records of the batch's decisions that stand. Its runtime
// overlay is dropped by the caller.
func (b *Batch) Undo(kept []events.Record) {
	b.Overlay = b.base.NewOverlayLocked()
	for _, rec := range kept {
		b.Overlay.Apply(rec)
	}
}

// Result is what one decision decided (Kafka's CoordinatorResult): the
// records to append, in order (Encoded holds them as the log stores them),
// and the answer to its caller.
type Result[T any] struct {
	Records []events.Record
	Encoded [][]byte
	Answer  T
}

// Decide runs decide on t and returns its result. A refused decision has
// no result; what it folded into the batch's overlay is undone by the writer
// (Tx.Emitted says whether there is anything to undo).
func Decide[T any](t *Tx, decide func(t *Tx) (T, error)) (Result[T], error) {
	v, err := decide(t)
	if err != nil {
		return Result[T]{}, err
	}
	return Result[T]{Records: t.recs, Encoded: t.data, Answer: v}, nil
}

// Emitted reports whether the decision emitted a record.
func (t *Tx) Emitted() bool { return len(t.recs) > 0 }

// newID is the next resharding id of the decision: a UUID (version 4)
// derived from the decision's Seed and how many it drew before, so that a
// decision is a function of its inputs.
func (t *Tx) newID() string {
	b := t.Seed
	binary.BigEndian.PutUint32(b[12:], binary.BigEndian.Uint32(b[12:])+t.drawn)
	t.drawn++
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
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

// emit records an event for group k (encoded now; one of the decision's
// Result.Records) and folds it into the batch's overlay; it returns the group as it is after the event.
func (t *Tx) emit(k projection.GroupKey, ev events.Event) *projection.Group {
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
	// The decision's records after its first continue it: replay steps
	// from one decision's end to the next (events.Meta.Continues).
	t.Meta.Continues = true
	t.data = append(t.data, data)
	t.recs = append(t.recs, rec)
	t.B.Overlay.Apply(rec)
	return t.B.Overlay.Group(k)
}

// emitAs is emit with another actor (the coordinator's own follow-up decisions).
func (t *Tx) emitAs(actor string, k projection.GroupKey, ev events.Event) *projection.Group {
	saved := t.Meta.Actor
	t.Meta.Actor = actor
	defer func() { t.Meta.Actor = saved }()
	return t.emit(k, ev)
}

// renew records the in-memory part of an accepted heartbeat: lease,
// capacity, progress.
func (t *Tx) renew(k projection.GroupKey, id string, req *wire.HeartbeatRequest, available int, progress []wire.ShardProgress) {
	t.RT.renew(k, id, t.Rules.MemberLease, req, available, progress)
}

// Actor names the coordinator's own decisions in the log.
const Actor = "coordinator"
