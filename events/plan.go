package events

import (
	"reflect"
	"strings"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// Every event payload decodes on the fast path (fastdecode.go) through a plan
// that Register builds once from the struct's msgpack tags: its wire field
// names in the order the reflection decoder gives them, and for each where it
// lies in the struct and which reader call reads it. No event type writes a
// decoder of its own, and a type added later decodes fast as soon as it is
// registered, as long as its fields are of the kinds below (the kinds the
// events use); a type with another kind of field decodes through
// msgpack.Unmarshal instead (TestEveryTypeDecodesFast says which).
//
// go generate writes each plan of this package's event types out as Go
// (decoders_gen.go, by TestGeneratedDecoders, which fails when the file is
// stale): the same reader calls as the plan makes, in a switch on the wire
// index, as the hand-written decoders that the plans replaced did: through
// the plans, BenchmarkDecode's log took 9% more CPU an entry, a
// resharding.completed 35% more (a plan looks each field up in its table and
// sizes a slice of structs by reflection). A type without a generated decoder
// decodes through its plan.

// fieldKind is how one field is read.
type fieldKind uint8

const (
	kindString  fieldKind = iota // string
	kindBool                     // bool
	kindInt                      // int
	kindInt64                    // int64
	kindFloat64                  // float64
	kindInts                     // []int
	kindStrings                  // []string
	kindTargets                  // Targets
	kindStruct                   // a struct, decoded into in place (also an embedded one, whole)
	kindStructs                  // a slice of structs
)

// planField is one field of a plan: its kind, name (in Go) and offset in the
// struct, and for a struct or a slice of structs, their plan (and the slice's
// type).
type planField struct {
	kind  fieldKind
	name  string
	off   uintptr
	elem  *plan
	slice reflect.Type
}

// plan is how the fast path decodes one struct type. fields holds one entry
// per wire index: table.names (an embedded struct's fields flattened where it
// is embedded, as msgpack does), then each embedded struct whole, under its
// type's name (table.whole), as msgpack also accepts.
type plan struct {
	typ    reflect.Type
	table  fieldTable
	fields []planField
}

// plans holds the plan of every struct type seen by planOf, built at init (by
// Register) and only read after.
var plans = map[reflect.Type]*plan{}

// planOf returns the plan of struct type t, or nil if a field has a kind no
// plan reads.
func planOf(t reflect.Type) *plan {
	if p, ok := plans[t]; ok {
		return p
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	p := &plan{typ: t}
	plans[t] = p // a struct that nests itself finds its plan
	var whole []planField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, ok := wireName(f)
		if !ok {
			continue
		}
		if f.Anonymous && name == f.Name && f.Type.Kind() == reflect.Struct {
			inner := planOf(f.Type)
			if inner == nil {
				delete(plans, t)
				return nil
			}
			for j, n := range inner.table.names {
				pf := inner.fields[j]
				pf.off += f.Offset
				p.table.names = append(p.table.names, n)
				p.fields = append(p.fields, pf)
			}
			p.table.whole = append(p.table.whole, f.Name)
			whole = append(whole, planField{kind: kindStruct, name: f.Name, off: f.Offset, elem: inner})
			continue
		}
		pf, ok := fieldOf(f.Type)
		if !ok {
			delete(plans, t)
			return nil
		}
		pf.name, pf.off = f.Name, f.Offset
		p.table.names = append(p.table.names, name)
		p.fields = append(p.fields, pf)
	}
	p.fields = append(p.fields, whole...)
	return p
}

// wireName is the msgpack name of a struct field, false for one msgpack skips.
func wireName(f reflect.StructField) (string, bool) {
	name, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
	switch name {
	case "-":
		return "", false
	case "":
		return f.Name, true
	}
	return name, true
}

var (
	thisPackage = reflect.TypeFor[Epochs]().PkgPath()
	typeTargets = reflect.TypeFor[Targets]()
	typeInts    = reflect.TypeFor[[]int]()
	typeStrings = reflect.TypeFor[[]string]()
)

// fieldOf is how a field of type t is read, false for a kind no plan reads.
func fieldOf(t reflect.Type) (planField, bool) {
	switch t {
	case typeTargets:
		return planField{kind: kindTargets}, true
	case typeInts:
		return planField{kind: kindInts}, true
	case typeStrings:
		return planField{kind: kindStrings}, true
	}
	if t.Name() != "" && t.PkgPath() != "" && (t.PkgPath() != thisPackage || decodesItself(t)) {
		return planField{}, false // another package's type may decode itself (time.Time)
	}
	switch t.Kind() {
	case reflect.String:
		return planField{kind: kindString}, true
	case reflect.Bool:
		return planField{kind: kindBool}, true
	case reflect.Int:
		return planField{kind: kindInt}, true
	case reflect.Int64:
		return planField{kind: kindInt64}, true
	case reflect.Float64:
		return planField{kind: kindFloat64}, true
	case reflect.Struct:
		if elem := planOf(t); elem != nil {
			return planField{kind: kindStruct, elem: elem}, true
		}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct {
			if elem := planOf(t.Elem()); elem != nil {
				return planField{kind: kindStructs, elem: elem, slice: t}, true
			}
		}
	}
	return planField{}, false
}

// decodesItself reports whether msgpack decodes a t through t's own method.
func decodesItself(t reflect.Type) bool {
	pt := reflect.PointerTo(t)
	return pt.Implements(reflect.TypeFor[msgpack.CustomDecoder]()) || pt.Implements(reflect.TypeFor[msgpack.Unmarshaler]())
}

// planned is a struct value that a plan decodes: the plan and where the value
// is. It is a structDecoder by value, so decoding allocates nothing for it.
type planned struct {
	p  *plan
	at unsafe.Pointer
}

func (s planned) wireFields() *fieldTable { return &s.p.table }

func (s planned) reset() { reflect.NewAt(s.p.typ, s.at).Elem().SetZero() }

func (s planned) decodeField(r *reader, i int) (err error) {
	f := &s.p.fields[i]
	at := unsafe.Add(s.at, f.off)
	switch f.kind {
	case kindString:
		*(*string)(at), err = r.string()
	case kindBool:
		*(*bool)(at), err = r.bool()
	case kindInt:
		*(*int)(at), err = r.int()
	case kindInt64:
		*(*int64)(at), err = r.int64()
	case kindFloat64:
		*(*float64)(at), err = r.float64()
	case kindInts:
		err = r.ints((*[]int)(at))
	case kindStrings:
		err = r.strings((*[]string)(at))
	case kindTargets:
		err = r.targets((*Targets)(at))
	case kindStruct:
		err = decodeStruct(r, planned{p: f.elem, at: at})
	case kindStructs:
		err = r.structs(f, at)
	}
	return err
}

// structs decodes an array of structs into the slice at at, the way msgpack
// decodes into an existing slice: nil gives a nil slice, an empty array an
// empty one, and elements within the old capacity are kept and decoded into.
func (r *reader) structs(f *planField, at unsafe.Pointer) error {
	n, err := r.arrayLen()
	if err != nil {
		return err
	}
	s := reflect.NewAt(f.slice, at).Elem()
	switch {
	case n == -1:
		s.SetZero()
		return nil
	case s.IsNil():
		s.Set(reflect.MakeSlice(f.slice, n, n))
	case s.Cap() >= n:
		s.SetLen(n)
	default:
		s.SetLen(s.Cap())
		s.Set(reflect.AppendSlice(s, reflect.MakeSlice(f.slice, n-s.Len(), n-s.Len())))
	}
	base, size := s.UnsafePointer(), f.slice.Elem().Size()
	for i := 0; i < n; i++ {
		if err := decodeStruct(r, planned{p: f.elem, at: unsafe.Add(base, uintptr(i)*size)}); err != nil {
			return err
		}
	}
	return nil
}

// payloadPlan is the plan of the struct ev points to, nil when ev is not a
// pointer to a struct that a plan reads.
func payloadPlan(ev Event) *plan {
	t := reflect.TypeOf(ev)
	if t == nil || t.Kind() != reflect.Pointer {
		return nil
	}
	return planOf(t.Elem())
}

// plannedEvent is ev (made by its constructor: a pointer) as its plan decodes it.
func plannedEvent(p *plan, ev Event) planned {
	return planned{p: p, at: reflect.ValueOf(ev).UnsafePointer()}
}
