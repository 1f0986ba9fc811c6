package httpapi

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// encoding/json matches object keys to struct fields case-insensitively and
// keeps the last of duplicate keys, so {"targetShardCount":3,"TARGETSHARDCOUNT":5}
// decodes as 5 while a proxy, a log or an auditor that reads the first key sees
// 3. checkKeys runs before json.Unmarshal and refuses what could be read two
// ways: a key that appears twice in one object, and a key that is not one of
// the contract's but equals one of them but for case. Unknown keys stay
// ignored, as the contract says; nested objects and arrays of objects are
// checked against their own types.

// errJSONKey is a key checkKeys refuses; its message names the key and where
// it is.
type errJSONKey struct{ msg string }

func (e *errJSONKey) Error() string { return e.msg }

// checkKeys walks data (valid JSON or not: a syntax error is left to
// json.Unmarshal) alongside the type of v. It scans the bytes itself, without
// allocating for anything but keys with escapes or bad UTF-8, objects of more than 16 keys and
// the error, since every request body goes through it.
func checkKeys(data []byte, v any) error {
	s := keyScan{data: data}
	err := s.value(reflect.TypeOf(v), nil, 0)
	var ke *errJSONKey
	if errors.As(err, &ke) {
		return ke
	}
	return nil // not a key problem: json.Unmarshal reports it
}

// errNotJSON stops the scan at a syntax error, which json.Unmarshal reports.
var errNotJSON = errors.New("not JSON")

// maxKeyScanDepth is encoding/json's nesting limit: deeper input is a syntax
// error to it, and the scan stops there too (it recurses per level).
const maxKeyScanDepth = 10000

// keyPath is where a value is, built into a string only for an error.
type keyPath struct {
	parent *keyPath
	key    []byte
	index  int // -1 for a key
}

func (p *keyPath) String() string {
	if p == nil {
		return ""
	}
	parent := p.parent.String()
	switch {
	case p.index >= 0:
		return parent + "[" + strconv.Itoa(p.index) + "]"
	case parent == "":
		return string(p.key)
	}
	return parent + "." + string(p.key)
}

type keyScan struct {
	data []byte
	i    int
}

func (s *keyScan) ws() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value scans one JSON value; t is the Go type it decodes into (nil when
// nothing is known of it: its keys are only checked for duplicates).
func (s *keyScan) value(t reflect.Type, at *keyPath, depth int) error {
	s.ws()
	if s.i >= len(s.data) || depth > maxKeyScanDepth {
		return errNotJSON
	}
	t = deref(t)
	switch c := s.data[s.i]; {
	case c == '{':
		s.i++
		return s.object(t, at, depth+1)
	case c == '[':
		s.i++
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		s.ws()
		if s.i < len(s.data) && s.data[s.i] == ']' {
			s.i++
			return nil
		}
		for n := 0; ; n++ {
			if err := s.value(elem, &keyPath{parent: at, index: n}, depth+1); err != nil {
				return err
			}
			if end, err := s.sep(']'); end || err != nil {
				return err
			}
		}
	case c == '"':
		_, _, err := s.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		for s.i < len(s.data) && strings.IndexByte("0123456789+-.eE", s.data[s.i]) >= 0 {
			s.i++
		}
		return nil
	case c >= 'a' && c <= 'z': // true, false, null (json.Unmarshal checks the letters)
		for s.i < len(s.data) && s.data[s.i] >= 'a' && s.data[s.i] <= 'z' {
			s.i++
		}
		return nil
	}
	return errNotJSON
}

// str scans a string at s.i and returns its raw bytes, without the quotes,
// and whether it holds escapes.
// sep reads what follows an element or member: ',' (more follow, false) or
// closer (the end, true); anything else is errNotJSON.
func (s *keyScan) sep(closer byte) (bool, error) {
	s.ws()
	if s.i >= len(s.data) {
		return false, errNotJSON
	}
	s.i++
	switch s.data[s.i-1] {
	case ',':
		return false, nil
	case closer:
		return true, nil
	}
	return false, errNotJSON
}

func (s *keyScan) str() (raw []byte, escaped bool, err error) {
	start := s.i + 1
	for j := start; j < len(s.data); j++ {
		switch c := s.data[j]; {
		case c == '\\':
			escaped = true
			j++
		case c == '"':
			s.i = j + 1
			return s.data[start:j], escaped, nil
		case c < 0x20:
			return nil, false, errNotJSON
		}
	}
	return nil, false, errNotJSON
}

func (s *keyScan) object(t reflect.Type, at *keyPath, depth int) error {
	var fields map[string]reflect.Type
	var folded map[string]string
	var elem reflect.Type
	switch {
	case t == nil:
	case t.Kind() == reflect.Struct && !customDecoder(t):
		fields, folded = structKeys(t)
	case t.Kind() == reflect.Map:
		elem = t.Elem()
	}
	var few [16][]byte
	seen := few[:0]
	var many map[string]bool
	s.ws()
	if s.i < len(s.data) && s.data[s.i] == '}' {
		s.i++
		return nil
	}
	for {
		s.ws()
		if s.i >= len(s.data) || s.data[s.i] != '"' {
			return errNotJSON
		}
		key, escaped, err := s.str()
		if err != nil {
			return err
		}
		if escaped || !utf8.Valid(key) { // as encoding/json reads it: unescaped, bad UTF-8 as U+FFFD
			var k string
			if json.Unmarshal(s.data[s.i-len(key)-2:s.i], &k) != nil {
				return errNotJSON
			}
			key = []byte(k)
		}
		here := &keyPath{parent: at, key: key, index: -1}
		dup := false
		if many != nil {
			dup = many[string(key)]
			many[string(key)] = true
		} else {
			for _, k := range seen {
				dup = dup || bytes.Equal(k, key)
			}
			if seen = append(seen, key); len(seen) == len(few) {
				many = make(map[string]bool, 2*len(few))
				for _, k := range seen {
					many[string(k)] = true
				}
			}
		}
		if dup {
			return &errJSONKey{"duplicate key " + strconv.Quote(here.String())}
		}
		next := elem
		if fields != nil {
			ft, exact := fields[string(key)]
			if !exact {
				if want, ok := folded[strings.ToLower(string(key))]; ok {
					return &errJSONKey{fmt.Sprintf("key %s differs from %s only by case", strconv.Quote(here.String()), strconv.Quote(want))}
				}
			}
			next = ft // nil for an unknown key: ignored, only checked for duplicates
		}
		s.ws()
		if s.i >= len(s.data) || s.data[s.i] != ':' {
			return errNotJSON
		}
		s.i++
		if err := s.value(next, here, depth); err != nil {
			return err
		}
		if end, err := s.sep('}'); end || err != nil {
			return err
		}
	}
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	keysAreFields   = reflect.TypeFor[interface{ JSONKeysAreFields() }]()
)

// customDecoder reports a type that decodes itself (time.Time, say): its keys
// are its own business. A struct whose decoder reads exactly its own fields
// says so (JSONKeysAreFields, wire.ShardRef): its keys are checked as any
// struct's.
func customDecoder(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	if t.Implements(keysAreFields) || p.Implements(keysAreFields) {
		return false
	}
	return t.Implements(jsonUnmarshaler) || p.Implements(jsonUnmarshaler) || t.Implements(textUnmarshaler) || p.Implements(textUnmarshaler)
}

// keyCache holds structKeys per type.
var keyCache sync.Map // reflect.Type -> structKeySet

type structKeySet struct {
	fields map[string]reflect.Type // JSON key -> field type
	folded map[string]string       // lower-cased key -> JSON key
}

// structKeys is the JSON keys of struct t as encoding/json names them
// (fields of embedded structs promoted, "-" skipped), with their types.
func structKeys(t reflect.Type) (map[string]reflect.Type, map[string]string) {
	if ks, ok := keyCache.Load(t); ok {
		k := ks.(structKeySet)
		return k.fields, k.folded
	}
	k := structKeySet{fields: map[string]reflect.Type{}, folded: map[string]string{}}
	depth := map[string]int{}
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || (f.Anonymous && f.Tag.Get("json") == "" && deref(f.Type).Kind() == reflect.Struct) {
			continue // an embedded struct's fields are promoted (VisibleFields lists them)
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if d, dup := depth[name]; dup && d <= len(f.Index) {
			continue // the shallower field wins, as in encoding/json
		}
		depth[name] = len(f.Index)
		k.fields[name] = f.Type
		k.folded[strings.ToLower(name)] = name
	}
	keyCache.Store(t, k)
	return k.fields, k.folded
}
