package events

import (
	"bytes"
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// SchemaVersion is written into every envelope. Fields are only ever added to
// event payloads, so every schema version so far decodes with the same structs.
const SchemaVersion = 1

// Meta is what every event carries besides its payload: which group it belongs
// to, when the decision was made, who asked, and the request that caused it.
type Meta struct {
	// StreamPrefix and ConsumerGroup name the group; both are empty for global events.
	StreamPrefix  string
	ConsumerGroup string
	// Time is the decision time, set by the writer. A fold uses it instead of the clock.
	Time time.Time
	// Actor is an operator name, a member id, or "coordinator" for its own decisions.
	Actor string
	// RequestID is the caller's X-Request-Id (or heartbeat requestId), if any.
	RequestID string
	// Continues says the record belongs to the decision of the record before
	// it in the log: one decision's records are appended together, and only
	// the first of them leaves it false. A replay to a point stops at the end
	// of a decision (the state between two records of one decision was never
	// anyone's). Entries of builds before this record leave it false: each is
	// a decision of its own.
	Continues bool
}

// envelope is the wire form. Field names are pinned with tags: never rename them.
type envelope struct {
	Type          string             `msgpack:"type"`
	Schema        int                `msgpack:"v"`
	StreamPrefix  string             `msgpack:"prefix,omitempty"`
	ConsumerGroup string             `msgpack:"group,omitempty"`
	TimeNanos     int64              `msgpack:"time"`
	Actor         string             `msgpack:"actor,omitempty"`
	RequestID     string             `msgpack:"req,omitempty"`
	Continues     bool               `msgpack:"cont,omitempty"`
	Payload       msgpack.RawMessage `msgpack:"payload"`
}

// Record is a decoded log entry.
type Record struct {
	ID     string
	Type   string
	Schema int
	Meta
	Event Event
}

// Marshal encodes v deterministically: msgpack sorts the keys of string-keyed
// maps of basic values, and the repository's other maps (Targets, MemberMap) sort
// their own keys, so equal values give equal bytes.
func Marshal(v any) ([]byte, error) {
	p := getEncoder()
	defer putEncoder(p)
	if err := p.enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.Clone(p.buf.Bytes()), nil
}

// Encode turns an event and its meta into the bytes stored in the log: the
// payload as Marshal writes it, in an envelope written by hand (appendEnvelope)
// byte for byte as Marshal would write it.
func Encode(m Meta, ev Event) ([]byte, error) {
	if ev == nil {
		return nil, fmt.Errorf("encode event: nil event")
	}
	typ := ev.EventType()
	if _, ok := registry[typ]; !ok {
		return nil, fmt.Errorf("encode event %q: %w", typ, ErrUnknownType)
	}
	// What Decode would refuse is never written.
	if err := checkBounds(ev); err != nil {
		return nil, fmt.Errorf("encode event %q: %w: %v", typ, ErrOutOfBounds, err)
	}
	p := getEncoder()
	defer putEncoder(p)
	if err := p.enc.Encode(ev); err != nil {
		return nil, fmt.Errorf("encode event %q: %w", typ, err)
	}
	var nanos int64
	if !m.Time.IsZero() {
		nanos = m.Time.UnixNano()
	}
	return appendEnvelope(nil, typ, m, nanos, p.buf.Bytes()), nil
}

// Decode turns a log entry back into a Record. A corrupt entry, an unknown type or
// a newer schema is an error that names the entry id; Decode never panics.
//
// It accepts exactly the bytes that msgpack.Unmarshal into envelope and into
// the event struct accepted, and gives the same values (see reader), but reads
// the envelope by hand and every event type through the plan Register built
// of it (plan.go), without reflecting per value.
func Decode(id string, data []byte) (rec Record, err error) {
	st := decodeStates.Get().(*decodeState)
	defer func() {
		*st = decodeState{} // keep no reference to data
		decodeStates.Put(st)
		if r := recover(); r != nil {
			err = &DecodeError{ID: id, Err: fmt.Errorf("%w: %v", ErrCorrupt, r)}
		}
	}()
	return st.decode(id, data)
}

// DecodeError names the log entry that could not be decoded.
type DecodeError struct {
	ID   string
	Type string
	// Meta is what the entry's envelope says (stream prefix, group, time,
	// actor, request) when the envelope was read and only its event could
	// not be (an unknown type, a newer schema, a payload that does not
	// decode or is out of bounds); nil when the envelope itself could not
	// be read.
	Meta *Meta
	Err  error
}

func (e *DecodeError) Error() string {
	if e.Type != "" {
		return fmt.Sprintf("log entry %s (type %q): %v", e.ID, e.Type, e.Err)
	}
	return fmt.Sprintf("log entry %s: %v", e.ID, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }
