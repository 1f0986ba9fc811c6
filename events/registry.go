package events

import "fmt"

// Event is one fact in the log. Every implementation is a plain struct registered
// under a namespaced type name such as "group.created".
type Event interface {
	EventType() string
}

var (
	registry = map[string]func() Event{}
	// payloadPlans holds the plan that decodes each registered type's
	// payload (plan.go); a type without one decodes through reflection.
	payloadPlans = map[string]*plan{}
)

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
	registry[name] = ctor
	if p := payloadPlan(ctor()); p != nil {
		payloadPlans[name] = p
	}
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
	ctor, ok := registry[name]
	if !ok {
		return nil, false
	}
	return ctor(), true
}
