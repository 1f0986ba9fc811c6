package events

import (
	"bytes"
	"fmt"
	"reflect"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// DecodeReflect is Decode as it was before the hand-written decoders: the
// envelope and every payload through msgpack.Unmarshal (reflection). The fast
// path is benchmarked against it.
func DecodeReflect(id string, data []byte) (Record, error) {
	return decodeReflect(id, data, msgpack.Unmarshal)
}

// DecodeReflectUnpooled is DecodeReflect with a new msgpack decoder for each
// value, which decodes the same: the differential tests use it because a pooled
// decoder keeps the buffer it grew for a length the input did not hold, and
// grows it again by a megabyte per such input (a few hundred corrupt entries
// took 14 GB).
func DecodeReflectUnpooled(id string, data []byte) (Record, error) {
	return decodeReflect(id, data, func(b []byte, v any) error {
		dec := msgpack.NewDecoder(bytes.NewReader(b))
		dec.UsePreallocateValues(true) // as Unmarshal
		return dec.Decode(v)
	})
}

func decodeReflect(id string, data []byte, unmarshal func([]byte, any) error) (rec Record, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &DecodeError{ID: id, Err: fmt.Errorf("%w: %v", ErrCorrupt, r)}
		}
	}()
	var env envelope
	if err := unmarshal(data, &env); err != nil {
		return Record{}, &DecodeError{ID: id, Err: fmt.Errorf("%w: envelope: %v", ErrCorrupt, err)}
	}
	if env.Type == "" {
		return Record{}, &DecodeError{ID: id, Err: fmt.Errorf("%w: envelope has no type", ErrCorrupt)}
	}
	m := Meta{StreamPrefix: env.StreamPrefix, ConsumerGroup: env.ConsumerGroup, Actor: env.Actor, RequestID: env.RequestID, Continues: env.Continues}
	if env.TimeNanos != 0 {
		m.Time = time.Unix(0, env.TimeNanos).UTC()
	}
	if env.Schema > SchemaVersion || env.Schema < 1 {
		return Record{}, &DecodeError{ID: id, Type: env.Type, Meta: &m, Err: fmt.Errorf("%w: schema %d (this build reads up to %d)", ErrUnsupportedSchema, env.Schema, SchemaVersion)}
	}
	reg, ok := registry[env.Type]
	if !ok {
		return Record{}, &DecodeError{ID: id, Type: env.Type, Meta: &m, Err: ErrUnknownType}
	}
	ev := reg.ctor()
	if err := unmarshal(env.Payload, ev); err != nil {
		return Record{}, &DecodeError{ID: id, Type: env.Type, Meta: &m, Err: fmt.Errorf("%w: payload: %v", ErrCorrupt, err)}
	}
	if err := checkBounds(ev); err != nil {
		return Record{}, &DecodeError{ID: id, Type: env.Type, Meta: &m, Err: fmt.Errorf("%w: %v", ErrOutOfBounds, err)}
	}
	return Record{ID: id, Type: env.Type, Schema: env.Schema, Meta: m, Event: ev}, nil
}

// HasFastDecoder reports whether the named type decodes through a plan.
func HasFastDecoder(name string) bool { return registry[name].plan != nil }

// WireFields is the field names, in wire order, that the plan of v (a pointer
// to an event or to a struct an event nests) knows.
func WireFields(v any) []string {
	if p := planOf(reflect.TypeOf(v).Elem()); p != nil {
		return p.table.names
	}
	return nil
}

// EnvelopeWireFields is WireFields of the envelope.
func EnvelopeWireFields() []string { return envelopeFields.names }

// EncodeReflect is Encode as it was before the envelope was written by hand:
// the payload and then the envelope through a new msgpack encoder each.
func EncodeReflect(m Meta, ev Event) ([]byte, error) {
	if ev == nil {
		return nil, fmt.Errorf("encode event: nil event")
	}
	typ := ev.EventType()
	if _, ok := registry[typ]; !ok {
		return nil, fmt.Errorf("encode event %q: %w", typ, ErrUnknownType)
	}
	payload, err := marshalUnpooled(ev)
	if err != nil {
		return nil, fmt.Errorf("encode event %q: %w", typ, err)
	}
	var nanos int64
	if !m.Time.IsZero() {
		nanos = m.Time.UnixNano()
	}
	return marshalUnpooled(envelope{
		Type:          typ,
		Schema:        SchemaVersion,
		StreamPrefix:  m.StreamPrefix,
		ConsumerGroup: m.ConsumerGroup,
		TimeNanos:     nanos,
		Actor:         m.Actor,
		RequestID:     m.RequestID,
		Continues:     m.Continues,
		Payload:       payload,
	})
}

// marshalUnpooled is Marshal with a new encoder and buffer, as it was.
func marshalUnpooled(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	enc.SetOmitEmpty(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// AppendInt is the envelope writer's int encoding.
func AppendInt(b []byte, n int64) []byte { return appendInt(b, n) }
