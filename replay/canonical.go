package replay

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/rscoord/rsc/projection"
)

// CanonicalEncode is projection.State.Encode with the entries of every map
// sorted by their encoded key, so that equal states give equal bytes.
//
// Encode alone does not promise that: events.Marshal asks msgpack to sort map
// keys, but msgpack v5 sorts only map[string]string, map[string]bool and
// map[string]any, so Group.Members and Group.Targets come out in Go's random
// map order. Verify and the digests it prints compare this form instead.
func CanonicalEncode(st *projection.State) ([]byte, error) {
	enc, err := st.Encode()
	if err != nil {
		return nil, fmt.Errorf("encode projection: %w", err)
	}
	return canonical(enc)
}

// canonical rewrites msgpack bytes with every map's entries sorted by their
// encoded key; everything else is copied byte for byte.
func canonical(data []byte) ([]byte, error) {
	r := bytes.NewReader(data)
	dec := msgpack.NewDecoder(r)
	var buf bytes.Buffer
	if err := canonicalValue(dec, &buf); err != nil {
		return nil, fmt.Errorf("canonical msgpack: %w", err)
	}
	if r.Len() > 0 {
		return nil, fmt.Errorf("canonical msgpack: %d trailing bytes", r.Len())
	}
	return buf.Bytes(), nil
}

func canonicalValue(dec *msgpack.Decoder, buf *bytes.Buffer) error {
	c, err := dec.PeekCode()
	if err != nil {
		return err
	}
	switch {
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := dec.DecodeMapLen()
		if err != nil {
			return err
		}
		type entry struct{ k, v []byte }
		entries := make([]entry, n)
		for i := range entries {
			k, err := dec.DecodeRaw()
			if err != nil {
				return err
			}
			var v bytes.Buffer
			if err := canonicalValue(dec, &v); err != nil {
				return err
			}
			entries[i] = entry{k: k, v: v.Bytes()}
		}
		sort.Slice(entries, func(i, j int) bool { return bytes.Compare(entries[i].k, entries[j].k) < 0 })
		writeLen(buf, n, msgpcode.FixedMapLow, msgpcode.Map16, msgpcode.Map32)
		for _, e := range entries {
			buf.Write(e.k)
			buf.Write(e.v)
		}
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := dec.DecodeArrayLen()
		if err != nil {
			return err
		}
		writeLen(buf, n, msgpcode.FixedArrayLow, msgpcode.Array16, msgpcode.Array32)
		for i := 0; i < n; i++ {
			if err := canonicalValue(dec, buf); err != nil {
				return err
			}
		}
	default:
		raw, err := dec.DecodeRaw()
		if err != nil {
			return err
		}
		buf.Write(raw)
	}
	return nil
}

// writeLen writes a map or array header in its shortest form.
func writeLen(buf *bytes.Buffer, n int, fixed, code16, code32 byte) {
	switch {
	case n < 16:
		buf.WriteByte(fixed | byte(n))
	case n <= 0xffff:
		buf.WriteByte(code16)
		buf.Write(binary.BigEndian.AppendUint16(nil, uint16(n)))
	default:
		buf.WriteByte(code32)
		buf.Write(binary.BigEndian.AppendUint32(nil, uint32(n)))
	}
}
