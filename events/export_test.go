package events

import (
	"fmt"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// DecodeReflect is Decode as it was before the hand-written decoders: the
// envelope and every payload through msgpack.Unmarshal (reflection). The fast
// path is tested and benchmarked against it.
func DecodeReflect(id string, data []byte) (rec Record, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &DecodeError{ID: id, Err: fmt.Errorf("%w: %v", ErrCorrupt, r)}
		}
	}()
	var env envelope
	if err := msgpack.Unmarshal(data, &env); err != nil {
		return Record{}, &DecodeError{ID: id, Err: fmt.Errorf("%w: envelope: %v", ErrCorrupt, err)}
	}
	if env.Type == "" {
		return Record{}, &DecodeError{ID: id, Err: fmt.Errorf("%w: envelope has no type", ErrCorrupt)}
	}
	if env.Schema > SchemaVersion || env.Schema < 1 {
		return Record{}, &DecodeError{ID: id, Type: env.Type, Err: fmt.Errorf("%w: schema %d (this build reads up to %d)", ErrUnsupportedSchema, env.Schema, SchemaVersion)}
	}
	ctor, ok := registry[env.Type]
	if !ok {
		return Record{}, &DecodeError{ID: id, Type: env.Type, Err: ErrUnknownType}
	}
	ev := ctor()
	if err := msgpack.Unmarshal(env.Payload, ev); err != nil {
		return Record{}, &DecodeError{ID: id, Type: env.Type, Err: fmt.Errorf("%w: payload: %v", ErrCorrupt, err)}
	}
	rec = Record{ID: id, Type: env.Type, Schema: env.Schema, Event: ev}
	rec.StreamPrefix = env.StreamPrefix
	rec.ConsumerGroup = env.ConsumerGroup
	if env.TimeNanos != 0 {
		rec.Time = time.Unix(0, env.TimeNanos).UTC()
	}
	rec.Actor = env.Actor
	rec.RequestID = env.RequestID
	return rec, nil
}

// HasFastDecoder reports whether the named type decodes without reflection.
func HasFastDecoder(name string) bool {
	ctor, ok := registry[name]
	if !ok {
		return false
	}
	_, fast := ctor().(structDecoder)
	return fast
}

// WireFields is the field names, in wire order, that the hand-written decoder
// of v (a pointer to an event or to a struct an event nests) knows.
func WireFields(v any) []string {
	if s, ok := v.(structDecoder); ok {
		return s.wireFields().names
	}
	return nil
}

// EnvelopeWireFields is WireFields of the envelope.
func EnvelopeWireFields() []string { return envelopeFields.names }
