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
// json.Unmarshal) alongside the type of v.
func checkKeys(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	err := walkValue(dec, reflect.TypeOf(v), "")
	var ke *errJSONKey
	if errors.As(err, &ke) {
		return ke
	}
	return nil // not a key problem: json.Unmarshal reports it
}

// walkValue reads one JSON value from dec; t is the Go type it decodes into
// (nil when nothing is known of it: its keys are only checked for duplicates).
func walkValue(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	t = deref(t)
	switch tok {
	case json.Delim('{'):
		return walkObject(dec, t, path)
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := walkValue(dec, elem, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return nil
}

func walkObject(dec *json.Decoder, t reflect.Type, path string) error {
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
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		where := key
		if path != "" {
			where = path + "." + key
		}
		if seen[key] {
			return &errJSONKey{"duplicate key " + strconv.Quote(where)}
		}
		seen[key] = true
		next := elem
		if fields != nil {
			ft, exact := fields[key]
			if !exact {
				if want, ok := folded[strings.ToLower(key)]; ok {
					return &errJSONKey{fmt.Sprintf("key %s differs from %s only by case", strconv.Quote(where), strconv.Quote(want))}
				}
			}
			next = ft // nil for an unknown key: ignored, only checked for duplicates
		}
		if err := walkValue(dec, next, where); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
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
)

// customDecoder reports a type that decodes itself (time.Time, say): its keys
// are its own business.
func customDecoder(t reflect.Type) bool {
	p := reflect.PointerTo(t)
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
