package events

import "fmt"

// Event is one fact in the log. Every implementation is a plain struct registered
// under a namespaced type name such as "group.created".
type Event interface {
	EventType() string
}

// registered is one event type: its constructor, and the plan that decodes
// its payload (plan.go; nil: it decodes through reflection).
type registered struct {
	ctor func() Event
	plan *plan
}

var registry = map[string]registered{}

// Register adds an event type, and the plan that decodes its payload from
// its struct's msgpack tags (plan.go): an event type is its struct, its
// EventType and this call, nothing else. It panics on a duplicate name: two
// structs under one name would make old logs ambiguous.
func Register(name string, ctor func() Event) {
	if name == "" {
		panic("events: Register with empty name")
	}
	if _, dup := registry[name]; dup {
		panic(fmt.Sprintf("events: duplicate event type %q", name))
	}
	if got := ctor().EventType(); got != name {
		panic(fmt.Sprintf("events: constructor for %q builds %q", name, got))
	}
	registry[name] = registered{ctor: ctor, plan: payloadPlan(ctor())}
}

// Types lists every registered event type name.
func Types() []string {
	out := make([]string, 0, len(registry))
	for name := range registry {
		out = append(out, name)
	}
	sortStrings(out)
	return out
}

// New returns a zero value of the named event type, or false if it is unknown.
func New(name string) (Event, bool) {
	r, ok := registry[name]
	if !ok {
		return nil, false
	}
	return r.ctor(), true
}
