package cow

import (
	"maps"
	"testing"
)

func seen(m *Map[string, int]) map[string]int {
	out := map[string]int{}
	for k, v := range m.All() {
		if _, dup := out[k]; dup {
			panic("All yielded " + k + " twice")
		}
		out[k] = v
	}
	return out
}

func check(t *testing.T, m *Map[string, int], want map[string]int) {
	t.Helper()
	if got := seen(m); !maps.Equal(got, want) {
		t.Errorf("All = %v, want %v", got, want)
	}
	if m.Len() != len(want) {
		t.Errorf("Len = %d, want %d", m.Len(), len(want))
	}
	for k, v := range want {
		if got, ok := m.Get(k); !ok || got != v {
			t.Errorf("Get(%q) = %d, %v, want %d", k, got, ok, v)
		}
	}
}

func TestReadsFallThroughAndBaseIsNotWritten(t *testing.T) {
	base := map[string]int{"a": 1, "b": 2}
	m := Over(base)
	m.Set("b", 20)
	m.Set("c", 3)
	m.Delete("a")
	check(t, &m, map[string]int{"b": 20, "c": 3})
	if _, ok := m.Get("a"); ok {
		t.Error("a deleted key is still seen")
	}
	if !maps.Equal(base, map[string]int{"a": 1, "b": 2}) {
		t.Errorf("the layer wrote its base: %v", base)
	}
}

func TestDeleteThenSetAgain(t *testing.T) {
	m := Over(map[string]int{"a": 1})
	m.Delete("a")
	m.Set("a", 5)
	check(t, &m, map[string]int{"a": 5})
	m.Delete("a")
	check(t, &m, map[string]int{})
}

func TestDeleteOfANewKeyLeavesNoEdit(t *testing.T) {
	m := Over(map[string]int{"a": 1})
	m.Set("n", 1)
	m.Delete("n")
	if m.EditCount() != 0 || m.Edited("n") {
		t.Errorf("deleting a key only this layer held left an edit: %d edits", m.EditCount())
	}
	m.Delete("a")
	if _, ok := m.gone["a"]; !ok || m.EditCount() != 1 {
		t.Error("deleting a base key recorded no deletion")
	}
}

func TestChildOfChildMerges(t *testing.T) {
	base := map[string]int{"a": 1, "b": 2, "c": 3}
	root := Over(base)
	root.Set("a", 10)
	mid := root.Child()
	mid.Delete("b")
	mid.Set("d", 4)
	leaf := mid.Child()
	leaf.Set("b", 22) // re-set what its parent deleted
	leaf.Delete("c")
	leaf.Delete("d")
	check(t, &leaf, map[string]int{"a": 10, "b": 22})
	check(t, &mid, map[string]int{"a": 10, "c": 3, "d": 4})
	leaf.Merge()
	check(t, &mid, map[string]int{"a": 10, "b": 22})
	mid.Merge()
	check(t, &root, map[string]int{"a": 10, "b": 22})
	if root.Edited("d") {
		t.Error("a key set and deleted above the root left an edit in it")
	}
	if !maps.Equal(base, map[string]int{"a": 1, "b": 2, "c": 3}) {
		t.Errorf("merging wrote the base: %v", base)
	}
}

func TestDroppedChildChangesNothing(t *testing.T) {
	root := Over(map[string]int{"a": 1})
	root.Set("b", 2)
	c := root.Child()
	c.Delete("a")
	c.Set("b", 3)
	c.Set("x", 9)
	// c is never merged
	check(t, &root, map[string]int{"a": 1, "b": 2})
}

func TestLocalAndEditedSeeOnlyTheLayer(t *testing.T) {
	root := Over(map[string]int{"a": 1})
	root.Set("b", 2)
	c := root.Child()
	if _, ok := c.Local("b"); ok || c.Edited("b") {
		t.Error("a child reports its parent's edit as its own")
	}
	c.Delete("b")
	if _, ok := c.Local("b"); ok || !c.Edited("b") {
		t.Error("a child's deletion is not its edit, or Local sees a deleted key")
	}
}

func TestIterationStops(t *testing.T) {
	m := Over(map[string]int{"a": 1, "b": 2, "c": 3})
	m.Set("d", 4)
	n := 0
	for range m.All() {
		n++
		if n == 2 {
			break
		}
	}
	if n != 2 {
		t.Errorf("All went on after the loop broke: %d", n)
	}
}

func TestDeleteWhereAndEdits(t *testing.T) {
	root := Map[string, int]{}
	root.Set("x1", 1)
	root.Set("y1", 2)
	c := root.Child()
	c.Set("x2", 3)
	c.DeleteWhere(func(k string) bool { return k[0] == 'x' })
	check(t, &c, map[string]int{"y1": 2})
	edits := map[string]Edit[int]{}
	for k, e := range c.Edits() {
		edits[k] = e
	}
	if want := map[string]Edit[int]{"x1": {Deleted: true}}; !maps.Equal(edits, want) {
		t.Errorf("Edits = %v, want %v", edits, want)
	}
	c.Merge()
	check(t, &root, map[string]int{"y1": 2})
	if root.EditCount() != 1 {
		t.Errorf("root holds %d edits, want 1 (y1)", root.EditCount())
	}
}

func TestReadsDoNotAllocate(t *testing.T) {
	root := Over(map[string]int{"a": 1, "b": 2})
	root.Set("c", 3)
	c := root.Child()
	c.Set("d", 4)
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = c.Get("a")
		_, _ = c.Get("z")
		_ = c.Len()
		for range c.All() {
		}
	})
	if allocs != 0 {
		t.Errorf("reads allocated %.0f times", allocs)
	}
}
