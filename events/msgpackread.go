package events

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// reader is a cursor over msgpack bytes, for the decoders of the envelope
// and of every event payload (fastdecode.go, plan.go). It never copies the
// input and allocates only for the strings, slices and maps it returns.
//
// Its rules are those of github.com/vmihailenco/msgpack/v5, the decoder that
// wrote and read every log so far, leniencies included, so that the two
// decode any entry to the same Record or both refuse it (TestFastDecodeMatchesReflect):
// nil reads as the zero value (but leaves a []string alone), an int field takes
// any int or uint width, a string field also takes bin, a struct also takes an
// array of exactly its fields in declaration order. Everything else of the wrong
// msgpack type is an error.
type reader struct {
	b   []byte
	off int
	// actor is the entry's Actor, already copied out: a payload string equal
	// to it (a member's own id, mostly) shares it instead of being copied again.
	actor string
	// sawExt: mapLen skipped an ext header (see wireEnvelope.decodeInline).
	sawExt bool
}

// msgpack codes (https://github.com/msgpack/msgpack/blob/master/spec.md).
const (
	mpNil      = 0xc0
	mpFalse    = 0xc2
	mpTrue     = 0xc3
	mpBin8     = 0xc4
	mpBin16    = 0xc5
	mpBin32    = 0xc6
	mpExt8     = 0xc7
	mpExt16    = 0xc8
	mpExt32    = 0xc9
	mpFloat32  = 0xca
	mpFloat64  = 0xcb
	mpUint8    = 0xcc
	mpUint16   = 0xcd
	mpUint32   = 0xce
	mpUint64   = 0xcf
	mpInt8     = 0xd0
	mpInt16    = 0xd1
	mpInt32    = 0xd2
	mpInt64    = 0xd3
	mpFixExt1  = 0xd4
	mpFixExt16 = 0xd8
	mpStr8     = 0xd9
	mpStr16    = 0xda
	mpStr32    = 0xdb
	mpArray16  = 0xdc
	mpArray32  = 0xdd
	mpMap16    = 0xde
	mpMap32    = 0xdf
)

var (
	errShort       = errors.New("msgpack: unexpected end of data")
	errArrayStruct = errors.New("msgpack: number of fields in array-encoded struct has changed")
)

func codeError(c byte, decoding string) error {
	return fmt.Errorf("msgpack: invalid code=%x decoding %s", c, decoding)
}

func (r *reader) readByte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, errShort
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// peek returns the next byte without reading it, or nil's code at the end.
func (r *reader) peek() byte {
	if r.off < len(r.b) {
		return r.b[r.off]
	}
	return mpNil
}

// next returns the next n bytes (a view of the input, not a copy).
func (r *reader) next(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.off {
		return nil, errShort
	}
	b := r.b[r.off : r.off+n : r.off+n]
	r.off += n
	return b, nil
}

func (r *reader) uint8() (uint64, error) {
	c, err := r.readByte()
	return uint64(c), err
}

func (r *reader) uint16() (uint64, error) {
	b, err := r.next(2)
	if err != nil {
		return 0, err
	}
	return uint64(binary.BigEndian.Uint16(b)), nil
}

func (r *reader) uint32() (uint64, error) {
	b, err := r.next(4)
	if err != nil {
		return 0, err
	}
	return uint64(binary.BigEndian.Uint32(b)), nil
}

func (r *reader) uint64() (uint64, error) {
	b, err := r.next(8)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint64(b), nil
}

// int64 reads an integer of any msgpack width into an int64 (a uint64 above
// MaxInt64 wraps, as it did). nil is 0; a float, a string or anything else is
// an error.
func (r *reader) int64() (int64, error) {
	c, err := r.readByte()
	if err != nil {
		return 0, err
	}
	if c <= 0x7f || c >= 0xe0 {
		return int64(int8(c)), nil
	}
	var n uint64
	switch c {
	case mpNil:
		return 0, nil
	case mpUint8:
		n, err = r.uint8()
	case mpInt8:
		n, err = r.uint8()
		return int64(int8(n)), err
	case mpUint16:
		n, err = r.uint16()
	case mpInt16:
		n, err = r.uint16()
		return int64(int16(n)), err
	case mpUint32:
		n, err = r.uint32()
	case mpInt32:
		n, err = r.uint32()
		return int64(int32(n)), err
	case mpUint64, mpInt64:
		n, err = r.uint64()
	default:
		return 0, codeError(c, "int64")
	}
	return int64(n), err
}

func (r *reader) int() (int, error) {
	n, err := r.int64()
	return int(n), err
}

// float64 reads a float32 or float64, or an integer of any width (as msgpack's
// own decoder does); nil is 0.
func (r *reader) float64() (float64, error) {
	switch r.peek() {
	case mpFloat32:
		_, _ = r.readByte()
		n, err := r.uint32()
		return float64(math.Float32frombits(uint32(n))), err
	case mpFloat64:
		_, _ = r.readByte()
		n, err := r.uint64()
		return math.Float64frombits(n), err
	}
	n, err := r.int64()
	if err != nil {
		return 0, err
	}
	return float64(n), nil
}

// bool reads true or false; nil is false.
func (r *reader) bool() (bool, error) {
	c, err := r.readByte()
	if err != nil {
		return false, err
	}
	switch c {
	case mpTrue:
		return true, nil
	case mpFalse, mpNil:
		return false, nil
	}
	return false, codeError(c, "bool")
}

// strBytes reads a str or a bin (both decode into a string) and returns a view
// of its bytes; nil reads as no bytes.
func (r *reader) strBytes() ([]byte, error) {
	c, err := r.readByte()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n = uint64(c & 0x1f)
	case c == mpNil:
		return nil, nil
	case c == mpStr8 || c == mpBin8:
		n, err = r.uint8()
	case c == mpStr16 || c == mpBin16:
		n, err = r.uint16()
	case c == mpStr32 || c == mpBin32:
		n, err = r.uint32()
	default:
		return nil, codeError(c, "string/bytes length")
	}
	if err != nil {
		return nil, err
	}
	return r.next(int(n))
}

func (r *reader) string() (string, error) {
	b, err := r.strBytes()
	switch {
	case len(b) == 0:
		return "", err
	case string(b) == r.actor:
		return r.actor, err
	}
	return string(b), err
}

// arrayLen reads an array header; nil is -1.
func (r *reader) arrayLen() (int, error) {
	c, err := r.readByte()
	if err != nil {
		return 0, err
	}
	return r.arrayLenOf(c)
}

func (r *reader) arrayLenOf(c byte) (int, error) {
	var n uint64
	var err error
	switch {
	case c >= 0x90 && c <= 0x9f:
		return int(c & 0x0f), nil
	case c == mpNil:
		return -1, nil
	case c == mpArray16:
		n, err = r.uint16()
	case c == mpArray32:
		n, err = r.uint32()
	default:
		return 0, codeError(c, "array length")
	}
	if err != nil {
		return 0, err
	}
	return r.fits(int(n))
}

// mapLenOf reads the rest of a map header whose first byte was c; nil is -1.
func (r *reader) mapLenOf(c byte) (int, error) {
	var n uint64
	var err error
	switch {
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), nil
	case c == mpNil:
		return -1, nil
	case c == mpMap16:
		n, err = r.uint16()
	case c == mpMap32:
		n, err = r.uint32()
	default:
		return 0, codeError(c, "map length")
	}
	if err != nil {
		return 0, err
	}
	return r.fits(int(n))
}

// mapLen reads a map header the way msgpack decodes a Go map: an ext header in
// front of it is skipped (a quirk of DecodeMapLen, kept so that both decoders
// accept the same bytes).
func (r *reader) mapLen() (int, error) {
	c, err := r.readByte()
	if err != nil {
		return 0, err
	}
	if (c >= mpFixExt1 && c <= mpFixExt16) || (c >= mpExt8 && c <= mpExt32) {
		hdr := 1 // the ext type
		switch c {
		case mpExt8:
			hdr += 1
		case mpExt16:
			hdr += 2
		case mpExt32:
			hdr += 4
		}
		r.sawExt = true
		if _, err := r.next(hdr); err != nil {
			return 0, err
		}
		if c, err = r.readByte(); err != nil {
			return 0, err
		}
	}
	return r.mapLenOf(c)
}

// fits refuses a container length that the rest of the input cannot hold (every
// element takes at least one byte), before anything is allocated for it. The
// reflection decoder fails on such input too, only later.
func (r *reader) fits(n int) (int, error) {
	if n > len(r.b)-r.off {
		return 0, errShort
	}
	return n, nil
}

// skip steps over one value of any type, ext and timestamps included. It keeps a
// count of values still to step over instead of recursing, so nesting depth
// costs nothing.
func (r *reader) skip() error {
	for pending := 1; pending > 0; pending-- {
		c, err := r.readByte()
		if err != nil {
			return err
		}
		var n uint64
		switch {
		case c <= 0x7f || c >= 0xe0, c == mpNil, c == mpFalse, c == mpTrue:
			continue
		case c >= 0x80 && c <= 0x8f:
			pending += 2 * int(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			pending += int(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			_, err = r.next(int(c & 0x1f))
		case c == mpUint8 || c == mpInt8:
			_, err = r.next(1)
		case c == mpUint16 || c == mpInt16:
			_, err = r.next(2)
		case c == mpUint32 || c == mpInt32 || c == mpFloat32:
			_, err = r.next(4)
		case c == mpUint64 || c == mpInt64 || c == mpFloat64:
			_, err = r.next(8)
		case c == mpStr8 || c == mpBin8:
			if n, err = r.uint8(); err == nil {
				_, err = r.next(int(n))
			}
		case c == mpStr16 || c == mpBin16:
			if n, err = r.uint16(); err == nil {
				_, err = r.next(int(n))
			}
		case c == mpStr32 || c == mpBin32:
			if n, err = r.uint32(); err == nil {
				_, err = r.next(int(n))
			}
		case c == mpArray16:
			if n, err = r.uint16(); err == nil {
				pending += int(n)
			}
		case c == mpArray32:
			if n, err = r.uint32(); err == nil {
				pending += int(n)
			}
		case c == mpMap16:
			if n, err = r.uint16(); err == nil {
				pending += 2 * int(n)
			}
		case c == mpMap32:
			if n, err = r.uint32(); err == nil {
				pending += 2 * int(n)
			}
		case c >= mpFixExt1 && c <= mpFixExt16:
			_, err = r.next(1 + 1<<(c-mpFixExt1)) // type byte and 1, 2, 4, 8 or 16 data bytes
		case c == mpExt8:
			if n, err = r.uint8(); err == nil {
				_, err = r.next(int(n) + 1)
			}
		case c == mpExt16:
			if n, err = r.uint16(); err == nil {
				_, err = r.next(int(n) + 1)
			}
		case c == mpExt32:
			if n, err = r.uint32(); err == nil {
				_, err = r.next(int(n) + 1)
			}
		default: // 0xc1, never used
			return fmt.Errorf("msgpack: unknown code %x", c)
		}
		if err != nil {
			return err
		}
		if pending-1 > len(r.b)-r.off {
			return errShort
		}
	}
	return nil
}

// raw steps over one value and returns its bytes (a view of the input).
func (r *reader) raw() ([]byte, error) {
	start := r.off
	if err := r.skip(); err != nil {
		return nil, err
	}
	return r.b[start:r.off:r.off], nil
}
