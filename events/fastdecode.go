package events

// Decoding is the coordinator's hot loop: start-up, catch-up, the follower and
// every replay fold the whole log through Decode. The msgpack library decodes by
// reflection; the envelope (envelopedecode.go) and every registered payload
// type (through its plan, plan.go) are decoded here instead, over a reader
// that neither copies the input nor reflects per value. A type registered
// with a field of a kind no plan reads still decodes, through
// msgpack.Unmarshal.

// structDecoder is a struct that the fast path decodes field by field: the
// envelope, every struct a generated decoder reads (decoders_gen.go), and
// every struct a plan reads (planned).
type structDecoder interface {
	// wireFields lists the msgpack field names in the order the reflection
	// decoder gives them (declaration order, embedded structs flattened in
	// place): the order of a struct encoded as an array.
	wireFields() *fieldTable
	// decodeField reads the value of wire field i into the struct; i ==
	// len(wireFields().names)+j is the j-th embedded struct as a whole (its
	// key: whole[j]).
	decodeField(r *reader, i int) error
	// reset zeroes the struct (a msgpack nil).
	reset()
}

// fieldTable is a struct's msgpack field names in wire order.
type fieldTable struct {
	names []string
	// whole names the structs it embeds (Epochs), whose fields are
	// flattened into names and which their type's name also decodes whole,
	// as msgpack allows.
	whole []string
}

// index returns the wire index of the field named key, -1 if the struct has
// none (the value is skipped: fields are only ever added). hint is where to look
// first: encoders write fields in wire order.
func (t *fieldTable) index(key []byte, hint int) int {
	if hint < len(t.names) && string(key) == t.names[hint] {
		return hint
	}
	for i, name := range t.names {
		if string(key) == name {
			return i
		}
	}
	for j, name := range t.whole {
		if string(key) == name {
			return len(t.names) + j
		}
	}
	return -1
}

// decodeStruct decodes a struct value into s the way msgpack decodes into an
// existing struct: a map sets the fields it names and leaves the others as they
// are, nil zeroes the struct, an empty array zeroes it too, and an array of
// exactly as many values as the struct has fields sets them in wire order.
func decodeStruct[S structDecoder](r *reader, s S) error {
	c, err := r.readByte()
	if err != nil {
		return err
	}
	fields := s.wireFields()
	if c >= 0x90 && c <= 0x9f || c == mpArray16 || c == mpArray32 {
		n, err := r.arrayLenOf(c)
		if err != nil {
			return err
		}
		if n == 0 {
			s.reset()
			return nil
		}
		if n != len(fields.names) {
			return errArrayStruct
		}
		for i := 0; i < n; i++ {
			if err := s.decodeField(r, i); err != nil {
				return err
			}
		}
		return nil
	}
	n, err := r.mapLenOf(c)
	if err != nil {
		return err
	}
	if n == -1 {
		s.reset()
		return nil
	}
	hint := 0
	for ; n > 0; n-- {
		var key []byte
		if c := r.peek(); c >= 0xa0 && c <= 0xbf && r.off+1+int(c&0x1f) <= len(r.b) {
			// A fixstr, what every encoder writes for a field name.
			key = r.b[r.off+1 : r.off+1+int(c&0x1f)]
			r.off += 1 + len(key)
		} else if key, err = r.strBytes(); err != nil {
			return err
		}
		i := fields.index(key, hint)
		if i < 0 {
			if err := r.skip(); err != nil {
				return err
			}
			continue
		}
		if err := s.decodeField(r, i); err != nil {
			return err
		}
		hint = i + 1
	}
	return nil
}

// resize gives s length n the way msgpack does before it decodes n elements
// into an existing slice: elements within the old capacity are kept (and
// decoded into), the rest are zero. (msgpack rounds the capacity of a new slice
// up; that changes no element: an element past the length is zero or was
// decoded earlier either way.)
func resize[T any](s []T, n int) []T {
	if s == nil {
		return make([]T, n)
	}
	if cap(s) >= n {
		return s[:n]
	}
	s = s[:cap(s)]
	return append(s, make([]T, n-len(s))...)
}

// arrayInto reads an array header and gives *p, the slice to decode it into,
// its length, the way msgpack does: nil gives a nil slice and an empty array
// an empty one (s is then empty: nothing is left to decode).
func arrayInto[T any](r *reader, p *[]T) (s []T, err error) {
	n, err := r.arrayLen()
	if err != nil {
		return nil, err
	}
	switch {
	case n == -1:
		*p = nil
		return nil, nil
	case n == 0 && *p == nil:
		*p = []T{}
		return nil, nil
	}
	s = resize(*p, n)
	*p = s
	return s, nil
}

// ints decodes an array of integers into *p (arrayInto).
func (r *reader) ints(p *[]int) error {
	s, err := arrayInto(r, p)
	for i := range s {
		if s[i], err = r.int(); err != nil {
			return err
		}
	}
	return err
}

// strings decodes an array of strings into *p. nil leaves *p as it is (so did
// msgpack), an empty array gives an empty slice.
func (r *reader) strings(p *[]string) error {
	n, err := r.arrayLen()
	if err != nil || n == -1 {
		return err
	}
	s := *p
	if s == nil {
		s = make([]string, 0, n)
	} else {
		s = s[:0]
	}
	for i := 0; i < n; i++ {
		v, err := r.string()
		if err != nil {
			return err
		}
		s = append(s, v)
	}
	*p = s
	return nil
}

// targets decodes a map of member id to shard indexes into *p, adding to the
// map that is there; nil gives a nil map.
func (r *reader) targets(p *Targets) error {
	n, err := r.mapLen()
	if err != nil {
		return err
	}
	if n == -1 {
		*p = nil
		return nil
	}
	if *p == nil {
		*p = make(Targets, n)
	}
	m := *p
	for ; n > 0; n-- {
		k, err := r.string()
		if err != nil {
			return err
		}
		var v []int
		if err := r.ints(&v); err != nil {
			return err
		}
		m[k] = v
	}
	return nil
}

// generatedDecoder is an event type with a decoder generated from its plan
// (decoders_gen.go). decode calls decodeStruct with the event's own type: with
// an interface type, decodeStruct would convert it at every field it reads.
type generatedDecoder interface {
	decode(r *reader) error
}

// decodeStructs decodes an array of structs into *p (arrayInto), for the
// generated decoders (decoders_gen.go); structs (plan.go) is the same for a
// plan.
func decodeStructs[T any, P interface {
	*T
	structDecoder
}](r *reader, p *[]T) error {
	s, err := arrayInto(r, p)
	for i := range s {
		if err := decodeStruct(r, P(&s[i])); err != nil {
			return err
		}
	}
	return err
}
