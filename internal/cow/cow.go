// Package cow is a copy-on-write map layer: the one overlay mechanism of the
// projection (projection.Overlay) and of the runtime table
// (commands.RuntimeOverlay).
//
// A Map reads through its edits to its parent layer and then to a base map it
// never writes; it records sets and deletes in its own edits. A child layer
// (Child) is a nested scratch over its parent: Merge folds its edits into the
// parent, and dropping it (never merging) leaves the parent as it was. The
// owner of the base applies the outermost layer's edits itself (Edits), when
// it may.
//
// Reads allocate nothing; a layer's edit map is made on its first write. The
// base, and every parent, must not change while a layer over them is in use.
// A Map is a value: copy it only before its first write.
package cow

import "iter"

// Map is a copy-on-write layer over a base map and, for a child, a parent
// layer. The zero Map is an empty layer over nothing.
type Map[K comparable, V any] struct {
	base   map[K]V
	parent *Map[K, V]
	// set are the keys this layer gave a value, gone those it deleted (a
	// key is in one or neither); each is made on its first write.
	set  map[K]V
	gone map[K]struct{}
}

// Edit is a layer's change to one key: its new value, or its deletion.
type Edit[V any] struct {
	Value   V
	Deleted bool
}

// Over is a layer over base, which the layer reads and never writes.
func Over[K comparable, V any](base map[K]V) Map[K, V] { return Map[K, V]{base: base} }

// Child is a layer over m: it sees m's edits, and m sees the child's only
// once it is merged.
func (m *Map[K, V]) Child() Map[K, V] { return Map[K, V]{base: m.base, parent: m} }

// Get is k's value as the layer sees it.
func (m *Map[K, V]) Get(k K) (V, bool) {
	for l := m; l != nil; l = l.parent {
		if v, ok := l.set[k]; ok {
			return v, true
		}
		if _, ok := l.gone[k]; ok {
			var zero V
			return zero, false
		}
	}
	v, ok := m.base[k]
	return v, ok
}

// Local is k's value when this layer itself set it (not a parent, not the
// base).
func (m *Map[K, V]) Local(k K) (V, bool) {
	v, ok := m.set[k]
	return v, ok
}

// Edited reports whether this layer itself set or deleted k.
func (m *Map[K, V]) Edited(k K) bool {
	if _, ok := m.set[k]; ok {
		return true
	}
	_, ok := m.gone[k]
	return ok
}

// Set gives k the value v in this layer.
func (m *Map[K, V]) Set(k K, v V) {
	if m.set == nil {
		m.set = map[K]V{}
	}
	m.set[k] = v
	delete(m.gone, k)
}

// Delete removes k as this layer sees it: a deletion is recorded only when
// a parent or the base holds k.
func (m *Map[K, V]) Delete(k K) {
	delete(m.set, k)
	if m.below(k) {
		if m.gone == nil {
			m.gone = map[K]struct{}{}
		}
		m.gone[k] = struct{}{}
	}
}

// DeleteWhere deletes every key the layer sees that drop accepts.
func (m *Map[K, V]) DeleteWhere(drop func(K) bool) {
	var keys []K
	for k := range m.All() {
		if drop(k) {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		m.Delete(k)
	}
}

// below reports whether a parent layer or the base holds k.
func (m *Map[K, V]) below(k K) bool {
	if m.parent != nil {
		_, ok := m.parent.Get(k)
		return ok
	}
	_, ok := m.base[k]
	return ok
}

// shadowed reports whether a layer from m up to (not including) l edited k.
func (m *Map[K, V]) shadowed(l *Map[K, V], k K) bool {
	for s := m; s != l; s = s.parent {
		if s.Edited(k) {
			return true
		}
	}
	return false
}

// Len is the number of keys the layer sees.
func (m *Map[K, V]) Len() int {
	n := len(m.base)
	for l := m; l != nil; l = l.parent {
		for k := range l.set {
			if _, inBase := m.base[k]; !inBase && !m.shadowed(l, k) {
				n++
			}
		}
		for k := range l.gone {
			if _, inBase := m.base[k]; inBase && !m.shadowed(l, k) {
				n--
			}
		}
	}
	return n
}

// All yields every key the layer sees with its value, in no particular
// order.
func (m *Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		for l := m; l != nil; l = l.parent {
			for k, v := range l.set {
				if m.shadowed(l, k) {
					continue
				}
				if !yield(k, v) {
					return
				}
			}
		}
		for k, v := range m.base {
			if m.shadowed(nil, k) {
				continue
			}
			if !yield(k, v) {
				return
			}
		}
	}
}

// Edits yields this layer's own edits (not its parents'), in no particular
// order: what its owner applies to the base.
func (m *Map[K, V]) Edits() iter.Seq2[K, Edit[V]] {
	return func(yield func(K, Edit[V]) bool) {
		for k, v := range m.set {
			if !yield(k, Edit[V]{Value: v}) {
				return
			}
		}
		for k := range m.gone {
			if !yield(k, Edit[V]{Deleted: true}) {
				return
			}
		}
	}
}

// EditCount is the number of this layer's own edits.
func (m *Map[K, V]) EditCount() int { return len(m.set) + len(m.gone) }

// Merge folds this layer's edits into its parent and empties the layer.
func (m *Map[K, V]) Merge() {
	for k, v := range m.set {
		m.parent.Set(k, v)
	}
	for k := range m.gone {
		m.parent.Delete(k)
	}
	m.set, m.gone = nil, nil
}
