package events

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// decodeState is what one Decode works with. It is pooled: the reader and the
// envelope would otherwise escape to the heap through the decoders' interface.
type decodeState struct {
	r   reader
	env wireEnvelope
}

var decodeStates = sync.Pool{New: func() any { return new(decodeState) }}

var errNoPayload = errors.New("no payload")

// decode is Decode without its recover. The checks come in the order the
// reflection decoder made them: the envelope as a whole, its type, its schema,
// the type's registration, the payload.
func (st *decodeState) decode(id string, data []byte) (Record, error) {
	r, env := &st.r, &st.env
	r.b = data
	if err := decodeStruct(r, env); err != nil {
		return Record{}, &DecodeError{ID: id, Err: fmt.Errorf("%w: envelope: %v", ErrCorrupt, err)}
	}
	if len(env.typ) == 0 {
		return Record{}, &DecodeError{ID: id, Err: fmt.Errorf("%w: envelope has no type", ErrCorrupt)}
	}
	if env.schema > SchemaVersion || env.schema < 1 {
		return Record{}, env.eventError(id, string(env.typ), fmt.Errorf("%w: schema %d (this build reads up to %d)", ErrUnsupportedSchema, env.schema, SchemaVersion))
	}
	ev := env.ev
	if ev == nil || string(env.evType) != string(env.typ) {
		reg, ok := registry[string(env.typ)]
		if !ok {
			return Record{}, env.eventError(id, string(env.typ), ErrUnknownType)
		}
		ev = reg.ctor()
		if !env.metaSet {
			env.metaStrings()
		}
		*r = reader{b: env.payload, actor: env.meta.Actor}
		if err := decodePayload(r, reg.plan, ev); err != nil {
			return Record{}, env.eventError(id, ev.EventType(), fmt.Errorf("%w: payload: %v", ErrCorrupt, err))
		}
	}
	if err := checkBounds(ev); err != nil {
		return Record{}, env.eventError(id, ev.EventType(), fmt.Errorf("%w: %v", ErrOutOfBounds, err))
	}
	if !env.metaSet {
		env.metaStrings()
	}
	// EventType is the registered name: the Record does not copy it out of data.
	rec := Record{ID: id, Type: ev.EventType(), Schema: env.schema, Meta: env.meta, Event: ev}
	rec.Continues = env.cont
	if env.timeNanos != 0 {
		rec.Time = time.Unix(0, env.timeNanos).UTC()
	}
	return rec, nil
}

// decodePayload decodes an event's payload (what r holds) into ev, which its
// constructor made, through p, its type's plan (nil: by reflection).
func decodePayload(r *reader, p *plan, ev Event) error {
	if r.b == nil {
		return errNoPayload
	}
	if p != nil {
		return decodePlanned(r, p, ev)
	}
	return msgpack.Unmarshal(r.b, ev)
}

// decodePlanned decodes a payload into ev through the decoder generated from
// its plan p (decoders_gen.go), or through p itself when ev's type has none
// (a type registered outside this package, or before go generate ran).
func decodePlanned(r *reader, p *plan, ev Event) error {
	if g, ok := ev.(generatedDecoder); ok {
		return g.decode(r)
	}
	return decodeStruct(r, plannedEvent(p, ev))
}

// eventError is the DecodeError of an entry whose envelope was read but whose
// event was not: it carries what the envelope says (see Confine).
func (e *wireEnvelope) eventError(id, typ string, err error) *DecodeError {
	if !e.metaSet {
		e.metaStrings()
	}
	m := e.meta
	m.Continues = e.cont
	if e.timeNanos != 0 {
		m.Time = time.Unix(0, e.timeNanos).UTC()
	}
	return &DecodeError{ID: id, Type: typ, Meta: &m, Err: err}
}

// wireEnvelope is the envelope as the fast path reads it: the strings stay views
// of the input until they are needed.
type wireEnvelope struct {
	typ           []byte
	schema        int
	prefix, group []byte
	timeNanos     int64
	actor, req    []byte
	cont          bool
	payload       []byte // nil: missing or nil

	// ev is the payload, decoded as the envelope was read, as an event of type
	// evType; nil if it was not (see decodeInline).
	ev     Event
	evType []byte
	// meta holds the four strings, copied out once metaSet.
	meta    Meta
	metaSet bool
}

var envelopeFields = fieldTable{names: []string{"type", "v", "prefix", "group", "time", "actor", "req", "cont", "payload"}}

// The envelope decodes through *wireEnvelope itself (decodeStruct's calls go
// straight to its methods; a wrapper around it cost a second call per field).
func (e *wireEnvelope) wireFields() *fieldTable { return &envelopeFields }
func (e *wireEnvelope) reset()                  { *e = wireEnvelope{} }
func (e *wireEnvelope) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.typ, err = r.strBytes()
	case 1:
		e.schema, err = r.int()
	case 2:
		e.prefix, err = r.strBytes()
		e.metaSet = false
	case 3:
		e.group, err = r.strBytes()
		e.metaSet = false
	case 4:
		e.timeNanos, err = r.int64()
	case 5:
		e.actor, err = r.strBytes()
		e.metaSet = false
	case 6:
		e.req, err = r.strBytes()
		e.metaSet = false
	case 7:
		e.cont, err = r.bool()
	case 8:
		e.ev, e.evType = nil, nil
		if r.off < len(r.b) && r.b[r.off] == mpNil {
			r.off++
			e.payload = nil
			return nil
		}
		start := r.off
		if ev := e.decodeInline(r); ev != nil {
			e.ev, e.evType, e.payload = ev, e.typ, r.b[start:r.off:r.off]
			return nil
		}
		r.off = start
		e.payload, err = r.raw()
	}
	return err
}

// decodeInline decodes the payload where it stands, when the type came before
// it (the encoder writes it first) and has a plan, instead of
// stepping over it and coming back. It returns nil, having read an unknown
// amount, if it could not: the caller steps over the payload from its start,
// and decode reports whatever is wrong in the order of the checks.
//
// Decoding a value reads exactly the bytes that stepping over it reads, with
// one exception: the ext header that reader.mapLen skips (sawExt).
func (e *wireEnvelope) decodeInline(r *reader) Event {
	reg, ok := registry[string(e.typ)]
	if !ok || reg.plan == nil {
		return nil
	}
	p, ev := reg.plan, reg.ctor()
	if !e.metaSet {
		e.metaStrings()
	}
	r.actor, r.sawExt = e.meta.Actor, false
	err := decodePlanned(r, p, ev)
	r.actor = ""
	if err != nil || r.sawExt {
		return nil
	}
	return ev
}

// metaStrings copies the envelope's four strings out of the input with one
// allocation: most entries carry all four, and they live as long as the Record.
func (e *wireEnvelope) metaStrings() {
	e.metaSet = true
	m := &e.meta
	n := len(e.prefix) + len(e.group) + len(e.actor) + len(e.req)
	if n == 0 {
		*m = Meta{}
		return
	}
	var stack [128]byte
	buf := stack[:0]
	if n > len(stack) {
		buf = make([]byte, 0, n)
	}
	buf = append(buf, e.prefix...)
	buf = append(buf, e.group...)
	buf = append(buf, e.actor...)
	buf = append(buf, e.req...)
	all := string(buf)
	at := 0
	take := func(k int) string {
		s := all[at : at+k]
		at += k
		return s
	}
	m.StreamPrefix = take(len(e.prefix))
	m.ConsumerGroup = take(len(e.group))
	m.Actor = take(len(e.actor))
	m.RequestID = take(len(e.req))
}
