package events

import (
	"bytes"
	"encoding/binary"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// pooledEncoder is a msgpack encoder with the codec's settings and the buffer it
// writes to, kept between calls: a new encoder and a growing buffer per event
// were most of what encoding allocated.
type pooledEncoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

// maxPooledBuffer: a buffer that grew past this (a large snapshot) is not kept.
const maxPooledBuffer = 64 << 10

var encoders = sync.Pool{New: func() any { return &pooledEncoder{enc: msgpack.NewEncoder(nil)} }}

func getEncoder() *pooledEncoder {
	p := encoders.Get().(*pooledEncoder)
	p.buf.Reset()
	p.enc.Reset(&p.buf) // also clears the settings
	p.enc.SetSortMapKeys(true)
	p.enc.SetOmitEmpty(false)
	return p
}

func putEncoder(p *pooledEncoder) {
	if p.buf.Cap() <= maxPooledBuffer {
		encoders.Put(p)
	}
}

// appendEnvelope appends the envelope that Marshal(envelope{...}) writes: a map
// of the fields in declaration order, the empty omitempty ones left out, Schema
// (an int) in its shortest form, TimeNanos (an int64) always in 9 bytes, and the
// payload as it is. TestEncodeMatchesReflect holds it to Marshal.
func appendEnvelope(b []byte, typ string, m Meta, nanos int64, payload []byte) []byte {
	fields := 4 // type, v, time, payload
	size := 1 + strSize("type") + strSize(typ) + strSize("v") + 1 + strSize("time") + 9 + strSize("payload") + len(payload)
	for _, s := range [...]struct{ key, val string }{{"prefix", m.StreamPrefix}, {"group", m.ConsumerGroup}, {"actor", m.Actor}, {"req", m.RequestID}} {
		if s.val != "" {
			fields++
			size += strSize(s.key) + strSize(s.val)
		}
	}
	if b == nil {
		b = make([]byte, 0, size)
	}
	if m.Continues {
		fields++
		size += strSize("cont") + 1
	}
	b = append(b, 0x80|byte(fields)) // at most 9 fields: a fixmap
	b = appendStr(appendStr(b, "type"), typ)
	b = appendInt(appendStr(b, "v"), SchemaVersion)
	if m.StreamPrefix != "" {
		b = appendStr(appendStr(b, "prefix"), m.StreamPrefix)
	}
	if m.ConsumerGroup != "" {
		b = appendStr(appendStr(b, "group"), m.ConsumerGroup)
	}
	b = binary.BigEndian.AppendUint64(append(appendStr(b, "time"), mpInt64), uint64(nanos))
	if m.Actor != "" {
		b = appendStr(appendStr(b, "actor"), m.Actor)
	}
	if m.RequestID != "" {
		b = appendStr(appendStr(b, "req"), m.RequestID)
	}
	if m.Continues {
		b = append(appendStr(b, "cont"), mpTrue)
	}
	return append(appendStr(b, "payload"), payload...)
}

// strSize is the encoded size of s.
func strSize(s string) int {
	switch n := len(s); {
	case n < 32:
		return 1 + n
	case n < 1<<8:
		return 2 + n
	case n < 1<<16:
		return 3 + n
	default:
		return 5 + n
	}
}

// appendStr appends s as msgpack's EncodeString writes it.
func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, mpStr8, byte(n))
	case n < 1<<16:
		b = binary.BigEndian.AppendUint16(append(b, mpStr16), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpStr32), uint32(n))
	}
	return append(b, s...)
}

// appendInt appends n as msgpack's EncodeInt writes it (shortest form).
func appendInt(b []byte, n int64) []byte {
	switch {
	case n >= 0 && n <= 0x7f, n < 0 && n >= -32:
		return append(b, byte(n))
	case n >= 0 && n <= 0xff:
		return append(b, mpUint8, byte(n))
	case n >= 0 && n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, mpUint16), uint16(n))
	case n >= 0 && n <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, mpUint32), uint32(n))
	case n >= 0:
		return binary.BigEndian.AppendUint64(append(b, mpUint64), uint64(n))
	case n >= -1<<7:
		return append(b, mpInt8, byte(n))
	case n >= -1<<15:
		return binary.BigEndian.AppendUint16(append(b, mpInt16), uint16(n))
	case n >= -1<<31:
		return binary.BigEndian.AppendUint32(append(b, mpInt32), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, mpInt64), uint64(n))
	}
}
