package benchratio_test

import (
	"testing"

	"github.com/rscoord/rsc/internal/benchratio"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		in := append([]float64(nil), tc.in...)
		if got := benchratio.Median(in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.in[i] {
				t.Fatalf("Median sorted its argument: %v", in)
			}
		}
	}
}

// Every side runs b.N operations, each index once, in slices whose first
// side rotates; the ratios are reported.
func TestRunInterleaves(t *testing.T) {
	var order []string
	var n, ops [3]int
	var syncs int
	side := func(k int, name string) benchratio.Side {
		return benchratio.Side{Name: name, Op: func(i int) error {
			if i != ops[k] {
				t.Errorf("%s: operation %d after %d", name, i, ops[k]-1)
			}
			ops[k]++
			n[k]++
			if len(order) == 0 || order[len(order)-1] != name {
				order = append(order, name)
			}
			return nil
		}}
	}
	var res testing.BenchmarkResult
	var bN int
	res = testing.Benchmark(func(b *testing.B) {
		order, n, ops, syncs = nil, [3]int{}, [3]int{}, 0
		c := side(2, "c")
		c.Sync = func() error { syncs++; return nil }
		benchratio.Run(b, benchratio.Config{Msgs: 2, Slice: 3}, side(0, "a"), side(1, "b"), c)
		bN = b.N
	})
	for k := range n {
		if n[k] != bN {
			t.Fatalf("side %d ran %d operations, b.N %d", k, n[k], bN)
		}
	}
	if slices := (bN + 2) / 3; syncs != slices || len(order) < 3 {
		t.Fatalf("%d syncs for %d slices; order %v", syncs, slices, order)
	}
	if bN >= 9 && (order[0] != "a" || order[3] != "b" || order[6] != "c") {
		t.Fatalf("the first side of the first three slices: %v", order[:9])
	}
	for _, m := range []string{"a-msgs/s", "b/a", "c/a-median"} {
		if _, ok := res.Extra[m]; !ok {
			t.Errorf("metric %s missing: %v", m, res.Extra)
		}
	}
}
