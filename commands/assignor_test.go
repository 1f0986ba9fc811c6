package commands_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/rscoord/rsc/commands"
)

func span(lo, hi int) []int {
	out := []int{}
	for s := lo; s < hi; s++ {
		out = append(out, s)
	}
	return out
}

func TestAssign(t *testing.T) {
	tests := []struct {
		name       string
		prev       map[string][]int
		live       []string
		shardCount int
		want       map[string][]int
	}{
		{
			name: "no live members",
			prev: map[string][]int{"a": {0, 1}}, live: nil, shardCount: 4,
			want: map[string][]int{},
		},
		{
			name: "no live members and no shards",
			live: []string{}, shardCount: 0,
			want: map[string][]int{},
		},
		{
			name: "live members but no shards",
			live: []string{"a", "b"}, shardCount: 0,
			want: map[string][]int{"a": {}, "b": {}},
		},
		{
			name: "one member gets every shard",
			live: []string{"a"}, shardCount: 4,
			want: map[string][]int{"a": {0, 1, 2, 3}},
		},
		{
			name: "4 shards over 2 members: 2 and 2",
			live: []string{"a", "b"}, shardCount: 4,
			want: map[string][]int{"a": {0, 2}, "b": {1, 3}},
		},
		{
			name: "more members than shards",
			live: []string{"a", "b", "c"}, shardCount: 2,
			want: map[string][]int{"a": {0}, "b": {1}, "c": {}},
		},
		{
			name: "balanced previous assignment is kept",
			prev: map[string][]int{"a": {0, 3}, "b": {1, 2}}, live: []string{"a", "b"}, shardCount: 4,
			want: map[string][]int{"a": {0, 3}, "b": {1, 2}},
		},
		{
			name: "balanced previous assignment with a remainder is kept",
			prev: map[string][]int{"a": {4}, "b": {0, 2}, "c": {1, 3}}, live: []string{"a", "b", "c"}, shardCount: 5,
			want: map[string][]int{"a": {4}, "b": {0, 2}, "c": {1, 3}},
		},
		{
			name: "new member joins [a:0-7] and takes exactly 4",
			prev: map[string][]int{"a": span(0, 8)}, live: []string{"a", "b"}, shardCount: 8,
			want: map[string][]int{"a": {0, 1, 2, 3}, "b": {4, 5, 6, 7}},
		},
		{
			name: "leaving member's shards are redistributed, the rest stay",
			prev: map[string][]int{"a": {0, 1}, "b": {2, 3}, "c": {4, 5}}, live: []string{"a", "c"}, shardCount: 6,
			want: map[string][]int{"a": {0, 1, 2}, "c": {3, 4, 5}},
		},
		{
			name: "shards at or above shardCount are dropped",
			prev: map[string][]int{"a": {0, 1, 5, 9}, "b": {2, 3, 4}}, live: []string{"a", "b"}, shardCount: 4,
			want: map[string][]int{"a": {0, 1}, "b": {2, 3}},
		},
		{
			name: "negative shards are dropped",
			prev: map[string][]int{"a": {-1, 0}}, live: []string{"a"}, shardCount: 2,
			want: map[string][]int{"a": {0, 1}},
		},
		{
			name: "a shard listed twice in one member counts once",
			prev: map[string][]int{"a": {1, 1, 0}}, live: []string{"a", "b"}, shardCount: 2,
			want: map[string][]int{"a": {0}, "b": {1}},
		},
		{
			name: "a shard listed by two live members goes to one of them",
			prev: map[string][]int{"a": {0, 1}, "b": {1, 2}}, live: []string{"a", "b"}, shardCount: 4,
			want: map[string][]int{"a": {0, 1}, "b": {2, 3}},
		},
		{
			name: "previous owners that are not live keep nothing",
			prev: map[string][]int{"gone": {0, 1, 2, 3}}, live: []string{"a", "b"}, shardCount: 4,
			want: map[string][]int{"a": {0, 2}, "b": {1, 3}},
		},
		{
			name: "live member order does not matter",
			prev: map[string][]int{"a": {0, 1, 2, 3}}, live: []string{"c", "a", "b"}, shardCount: 4,
			want: map[string][]int{"a": {0, 1}, "b": {3}, "c": {2}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			prevCopy := copyAssignment(tc.prev)
			liveCopy := slices.Clone(tc.live)
			got := commands.Assign(tc.prev, tc.live, tc.shardCount)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Assign = %v, want %v", got, tc.want)
			}
			if !reflect.DeepEqual(tc.prev, prevCopy) || !slices.Equal(tc.live, liveCopy) {
				t.Errorf("Assign changed its inputs: prev %v -> %v, live %v -> %v", prevCopy, tc.prev, liveCopy, tc.live)
			}
			if again := commands.Assign(tc.prev, tc.live, tc.shardCount); !reflect.DeepEqual(again, got) {
				t.Errorf("Assign is not deterministic: %v then %v", got, again)
			}
		})
	}
}

func TestAssignIsStableUnderReassignment(t *testing.T) {
	// Assigning again from its own output changes nothing.
	r := rand.New(rand.NewPCG(11, 12))
	for i := 0; i < 200; i++ {
		prev, live, n := randomAssignCase(r)
		first := commands.Assign(prev, live, n)
		if second := commands.Assign(first, live, n); !reflect.DeepEqual(second, first) {
			t.Fatalf("case %d: Assign(Assign(x)) = %v, Assign(x) = %v", i, second, first)
		}
	}
}

func copyAssignment(a map[string][]int) map[string][]int {
	if a == nil {
		return nil
	}
	out := make(map[string][]int, len(a))
	for k, v := range a {
		out[k] = slices.Clone(v)
	}
	return out
}

// randomAssignCase builds a previous assignment as a coordinator could have
// left it: each shard of an older, possibly larger count owned by at most one
// member, some of which are no longer live, and some shards unowned.
func randomAssignCase(r *rand.Rand) (prev map[string][]int, live []string, shardCount int) {
	shardCount = r.IntN(40)
	oldCount := shardCount
	if r.IntN(3) == 0 {
		oldCount = r.IntN(48)
	}
	pool := make([]string, 1+r.IntN(10))
	for i := range pool {
		pool[i] = fmt.Sprintf("m-%02d", i)
	}
	prev = map[string][]int{}
	for s := 0; s < oldCount; s++ {
		if r.IntN(6) == 0 {
			continue // unowned
		}
		// Skew ownership so some members hold far more than a fair share.
		owner := pool[min(r.IntN(len(pool)), r.IntN(len(pool)))]
		prev[owner] = append(prev[owner], s)
	}
	for _, m := range pool {
		if r.IntN(4) > 0 {
			live = append(live, m)
		}
	}
	// Live members that never owned anything (new joiners).
	for i := 0; i < r.IntN(3); i++ {
		live = append(live, fmt.Sprintf("new-%d", i))
	}
	r.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	return prev, live, shardCount
}

// minimalMoves is the fewest previously owned shards (owner still live, shard
// still valid) that any balanced assignment must move: with q = n/L and r = n%L,
// the r members with the most valid shards may keep q+1, the rest q.
func minimalMoves(prev map[string][]int, live []string, n int) int {
	if len(live) == 0 {
		return 0
	}
	counts := make([]int, 0, len(live))
	for _, m := range live {
		c := 0
		for _, s := range prev[m] {
			if s >= 0 && s < n {
				c++
			}
		}
		counts = append(counts, c)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(counts)))
	q, rem := n/len(live), n%len(live)
	moves := 0
	for i, c := range counts {
		limit := q
		if i < rem {
			limit = q + 1
		}
		moves += max(0, c-limit)
	}
	return moves
}

func TestAssignProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(2024, 5))
	for i := 0; i < 2000; i++ {
		prev, live, n := randomAssignCase(r)
		got := commands.Assign(prev, live, n)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("case %d: Assign(%v, %v, %d) = %v: %s", i, prev, live, n, got, fmt.Sprintf(format, args...))
		}

		isLive := map[string]bool{}
		for _, m := range live {
			isLive[m] = true
		}
		if len(got) != len(isLive) {
			fail("%d entries for %d live members", len(got), len(isLive))
		}
		owner := make([]string, n)
		lo, hi := n+1, -1
		for _, m := range live {
			shards, ok := got[m]
			if !ok || shards == nil {
				fail("live member %s has no entry", m)
			}
			if !sort.IntsAreSorted(shards) {
				fail("shards of %s not sorted", m)
			}
			lo, hi = min(lo, len(shards)), max(hi, len(shards))
			for _, s := range shards {
				if s < 0 || s >= n {
					fail("%s got shard %d outside [0, %d)", m, s, n)
				}
				if owner[s] != "" {
					fail("shard %d assigned to %s and %s", s, owner[s], m)
				}
				owner[s] = m
			}
		}
		for m := range got {
			if !isLive[m] {
				fail("entry for non-live member %s", m)
			}
		}
		if len(live) > 0 {
			for s, m := range owner {
				if m == "" {
					fail("shard %d unassigned", s)
				}
			}
			if hi-lo > 1 {
				fail("unbalanced: sizes from %d to %d", lo, hi)
			}
		}

		moved := 0
		for m, shards := range prev {
			if !isLive[m] {
				continue
			}
			seen := map[int]bool{}
			for _, s := range shards {
				if s >= 0 && s < n && !seen[s] {
					seen[s] = true
					if owner[s] != m {
						moved++
					}
				}
			}
		}
		if want := minimalMoves(prev, live, n); moved != want {
			fail("moved %d previously owned shards, the minimum is %d", moved, want)
		}
	}
}

func BenchmarkAssign(b *testing.B) {
	const members, shards = 100, 256
	live := make([]string, members)
	for i := range live {
		live[i] = fmt.Sprintf("member-%03d", i)
	}
	// The steady state after one member left: its shards need new owners.
	prev := commands.Assign(nil, live, shards)
	leaving := live[members/2]
	live = append(slices.Clone(live[:members/2]), live[members/2+1:]...)
	b.ReportAllocs()
	for b.Loop() {
		out := commands.Assign(prev, live, shards)
		if _, ok := out[leaving]; ok {
			b.Fatal("departed member kept an entry")
		}
	}
}
