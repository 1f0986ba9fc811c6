package projection

import "github.com/rscoord/rsc/events"

// Overlay is a scratch view over a State: the commands package folds the events of
// a decision into it before they are appended, so later steps of the same decision
// (and later decisions in the same batch) see their effect. The State itself is
// only changed by Apply, after the append landed. Groups an Overlay has not
// touched are read from the State, so the caller must hold the State's lock for
// the Overlay's whole life.
type Overlay struct {
	base    *State
	groups  map[GroupKey]*Group
	deleted map[GroupKey]bool
	created []GroupKey
}

// NewOverlayLocked starts an overlay; the caller holds the lock.
func (s *State) NewOverlayLocked() *Overlay {
	return &Overlay{base: s, groups: map[GroupKey]*Group{}, deleted: map[GroupKey]bool{}}
}

// Group returns the group as the overlay sees it (read-only), or nil.
func (o *Overlay) Group(k GroupKey) *Group {
	if o.deleted[k] {
		return nil
	}
	if g, ok := o.groups[k]; ok {
		return g
	}
	return o.base.groups[k]
}

// Keys lists the groups the overlay sees, in creation order.
func (o *Overlay) Keys() []GroupKey {
	var out []GroupKey
	for _, k := range o.base.order {
		if !o.deleted[k] {
			out = append(out, k)
		}
	}
	for _, k := range o.created {
		if !o.deleted[k] {
			if _, inBase := o.base.groups[k]; !inBase {
				out = append(out, k)
			}
		}
	}
	return out
}

// Apply folds a record (its id may still be empty) into the overlay.
func (o *Overlay) Apply(rec events.Record) {
	k := KeyOf(rec)
	cur := o.Group(k)
	if cur != nil {
		if _, own := o.groups[k]; !own {
			cur = cur.Clone()
		}
	}
	g := foldGroup(cur, k, rec)
	if g == nil {
		if cur != nil {
			o.deleted[k] = true
			delete(o.groups, k)
		}
		return
	}
	delete(o.deleted, k)
	if _, seen := o.groups[k]; !seen && o.base.groups[k] == nil {
		o.created = append(o.created, k)
	}
	o.groups[k] = g
}
