package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/rscoord/rsc/events"
)

// payloadJSON renders an event's fields for people: under their pinned msgpack
// names (the event structs carry no JSON tags, and the msgpack names are the
// ones that never change), in declaration order, with map keys sorted so that
// the same event always renders the same way.
func payloadJSON(ev events.Event) (json.RawMessage, error) {
	var buf bytes.Buffer
	if err := writeJSON(&buf, reflect.ValueOf(ev)); err != nil {
		return nil, fmt.Errorf("render %s payload: %w", ev.EventType(), err)
	}
	return buf.Bytes(), nil
}

func writeJSON(buf *bytes.Buffer, v reflect.Value) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			buf.WriteString("null")
			return nil
		}
		return writeJSON(buf, v.Elem())
	case reflect.Struct:
		buf.WriteByte('{')
		first := true
		if err := writeFields(buf, v, &first); err != nil {
			return err
		}
		buf.WriteByte('}')
	case reflect.Map:
		if v.IsNil() {
			buf.WriteString("null")
			return nil
		}
		keys := v.MapKeys()
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = fmt.Sprint(k.Interface())
		}
		idx := make([]int, len(keys))
		for i := range idx {
			idx[i] = i
		}
		sort.Slice(idx, func(a, b int) bool { return names[idx[a]] < names[idx[b]] })
		buf.WriteByte('{')
		for n, i := range idx {
			if n > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, names[i])
			buf.WriteByte(':')
			if err := writeJSON(buf, v.MapIndex(keys[i])); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			buf.WriteString("null")
			return nil
		}
		buf.WriteByte('[')
		for i := 0; i < v.Len(); i++ {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := writeJSON(buf, v.Index(i)); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	default:
		b, err := json.Marshal(v.Interface())
		if err != nil {
			return err
		}
		buf.Write(b)
	}
	return nil
}

// writeFields writes a struct's fields as msgpack encodes them: named by their
// msgpack tag, embedded structs inlined, omitempty honoured.
func writeFields(buf *bytes.Buffer, v reflect.Value, first *bool) error {
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
		if name == "-" {
			continue
		}
		fv := v.Field(i)
		if f.Anonymous && name == "" && fv.Kind() == reflect.Struct {
			if err := writeFields(buf, fv, first); err != nil {
				return err
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		if strings.Contains(","+opts+",", ",omitempty,") && empty(fv) {
			continue
		}
		if !*first {
			buf.WriteByte(',')
		}
		*first = false
		writeString(buf, name)
		buf.WriteByte(':')
		if err := writeJSON(buf, fv); err != nil {
			return err
		}
	}
	return nil
}

// empty is msgpack's omitempty test.
func empty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	}
	return v.IsZero()
}

func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s)
	buf.Write(b)
}
