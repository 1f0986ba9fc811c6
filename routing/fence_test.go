package routing

import (
	"fmt"
	"slices"
	"testing"
)

// TestSourcesCoverEveryMove routes many keys in two layouts and checks that
// every key that changes shard comes from a listed source of its new shard,
// and that a shard that loses a key is one LosesKeys fences.
func TestSourcesCoverEveryMove(t *testing.T) {
	counts := []int{1, 2, 3, 4, 5, 7, 8, 16}
	for _, from := range counts {
		for _, to := range counts {
			if from == to {
				continue
			}
			t.Run(fmt.Sprintf("%d-%d", from, to), func(t *testing.T) {
				moved := 0
				for i := 0; i < 20000; i++ {
					key := fmt.Sprintf("key-%d", i)
					s, _ := RouteKey(key, from)
					d, _ := RouteKey(key, to)
					if s == d {
						continue
					}
					moved++
					if !slices.Contains(Sources(from, to, d), s) {
						t.Fatalf("key %q moves %d -> %d but Sources(%d,%d,%d) = %v", key, s, d, from, to, d, Sources(from, to, d))
					}
					if !LosesKeys(from, to, s) {
						t.Fatalf("key %q leaves shard %d but LosesKeys(%d,%d,%d) is false", key, s, from, to, s)
					}
				}
				if moved == 0 {
					t.Fatalf("no key moved between %d and %d shards", from, to)
				}
			})
		}
	}
}

// TestSourcesPowersOfTwo pins the narrow source sets: doubling gives each new
// shard one source and keeps the old shards' own keys; halving gives each
// kept shard the one shard folded onto it.
func TestSourcesPowersOfTwo(t *testing.T) {
	cases := []struct {
		from, to, target int
		want             []int
	}{
		{4, 8, 0, nil},
		{4, 8, 5, []int{1}},
		{8, 4, 1, []int{5}},
		{8, 2, 1, []int{3, 5, 7}},
		{4, 5, 4, []int{0, 1, 2, 3}},
		{5, 3, 0, []int{1, 2, 3, 4}},
		{4, 8, 8, nil},
	}
	for _, c := range cases {
		if got := Sources(c.from, c.to, c.target); !slices.Equal(got, c.want) {
			t.Errorf("Sources(%d,%d,%d) = %v, want %v", c.from, c.to, c.target, got, c.want)
		}
	}
	if LosesKeys(8, 4, 2) {
		t.Error("halving 8 -> 4 keeps shard 2's keys on shard 2")
	}
	if !LosesKeys(8, 4, 6) || !LosesKeys(4, 8, 2) || !LosesKeys(4, 5, 0) {
		t.Error("LosesKeys misses a shard that loses keys")
	}
	if got := FenceKey("orders:3"); got != "{orders:3}:fence" || Slot(got) != Slot("orders:3") {
		t.Errorf("FenceKey = %q (slot %d), want the stream's slot %d", got, Slot(got), Slot("orders:3"))
	}
}
