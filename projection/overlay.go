package projection

import (
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/internal/cow"
)

// Overlay is a scratch view over a State: the commands package folds the events of
// a decision into it before they are appended, so later steps of the same decision
// (and later decisions in the same batch) see their effect. The State itself is
// only changed by Apply, after the append landed. Groups an Overlay has not
// touched are read from the State, and the groups it changed share the
// State's members (each copied on its first write), so the caller must hold
// the State's lock for the Overlay's whole life.
type Overlay struct {
	base    *State
	groups  cow.Map[GroupKey, *Group]
	streams cow.Map[string, *Stream] // the streams the overlay changed are copies
	// order is the creation order as the overlay sees it; nil until the first
	// create or delete (then it starts as a copy of the State's order).
	order []GroupKey
}

// NewOverlayLocked starts an overlay; the caller holds the lock.
func (s *State) NewOverlayLocked() *Overlay {
	return &Overlay{base: s, groups: cow.Over(s.groups), streams: cow.Over(s.streams)}
}

// Group returns the group as the overlay sees it (read-only), or nil. A group
// the overlay changed is layered over the State's (see Group): read it
// through its methods.
func (o *Overlay) Group(k GroupKey) *Group {
	g, _ := o.groups.Get(k)
	return g
}

// Stream returns a prefix's stream as the overlay sees it (read-only), or nil.
func (o *Overlay) Stream(prefix string) *Stream {
	st, _ := o.streams.Get(prefix)
	return st
}

// EachStream calls fn with every stream the overlay sees (read-only), in no
// particular order.
func (o *Overlay) EachStream(fn func(*Stream)) {
	for _, st := range o.streams.All() {
		fn(st)
	}
}

// Keys lists the groups the overlay sees, in creation order (as the State will
// list them once the overlay's records are applied).
func (o *Overlay) Keys() []GroupKey {
	if o.order == nil {
		return append([]GroupKey(nil), o.base.order...)
	}
	return append([]GroupKey(nil), o.order...)
}

func (o *Overlay) editOrder() {
	if o.order == nil {
		o.order = append(make([]GroupKey, 0, len(o.base.order)+1), o.base.order...)
	}
}

// Apply folds a record (its id may still be empty) into the overlay.
func (o *Overlay) Apply(rec events.Record) {
	k := KeyOf(rec)
	cur := o.Group(k)
	if touchesStream(rec) {
		st, own := o.streams.Local(rec.StreamPrefix)
		if !own {
			if st, _ = o.streams.Get(rec.StreamPrefix); st != nil {
				st = st.Clone()
			}
		}
		o.streams.Set(rec.StreamPrefix, foldStream(st, rec, cur))
	}
	if cur != nil {
		if _, own := o.groups.Local(k); !own {
			cur = layered(cur)
		}
	}
	g := foldGroup(cur, k, rec)
	switch {
	case g == nil && cur != nil:
		o.groups.Delete(k)
		o.editOrder()
		for i, ok := range o.order {
			if ok == k {
				o.order = append(o.order[:i], o.order[i+1:]...)
				break
			}
		}
	case g != nil && cur == nil:
		o.groups.Set(k, g)
		o.editOrder()
		o.order = append(o.order, k)
	case g != nil:
		o.groups.Set(k, g)
	}
}
