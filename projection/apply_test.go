package projection

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/rscoord/rsc/events"
)

// TestEveryEventTypeHasAFold: an event type registered in events without a
// fold registered here (register, in the apply file of its subject) would
// fold as an audit record, silently. Registering one twice panics at init.
func TestEveryEventTypeHasAFold(t *testing.T) {
	for _, name := range events.Types() {
		if _, ok := groupFolds[name]; !ok {
			t.Errorf("event type %q has no fold: register it in the projection's apply file of its subject", name)
		}
	}
	for name := range groupFolds {
		if _, ok := events.New(name); !ok {
			t.Errorf("fold registered for %q, which events does not know", name)
		}
	}
	for name := range streamFolds {
		if _, ok := events.New(name); !ok {
			t.Errorf("stream fold registered for %q, which events does not know", name)
		}
	}
}

func TestRegisterFoldRefusesADuplicate(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("a second fold of member.joined was registered")
		}
	}()
	register(memberJoined)
}

// TestMemberIDsOf: the member events, and only those, name the members whose
// records they change (the fold keeps liveness and principals' totals by them).
func TestMemberIDsOf(t *testing.T) {
	named := map[string]bool{}
	for _, tc := range []struct {
		ev   events.Event
		want []string
	}{
		{&events.MemberJoined{MemberID: "a"}, []string{"a"}},
		{&events.MemberUpdated{MemberID: "a"}, []string{"a"}},
		{&events.MemberSynced{MemberID: "a"}, []string{"a"}},
		{&events.OwnershipReported{MemberID: "a"}, []string{"a"}},
		{&events.MemberLeft{MemberID: "a"}, []string{"a"}},
		{&events.MemberFenced{MemberID: "a"}, []string{"a"}},
		{&events.MembersExpired{MemberIDs: []string{"a", "b"}}, []string{"a", "b"}},
		{&events.MembersPruned{MemberIDs: []string{"a", "b"}}, []string{"a", "b"}},
	} {
		named[tc.ev.EventType()] = true
		if got := memberIDsOf(tc.ev, new([1]string)); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("memberIDsOf(%s) = %q, want %q", tc.ev.EventType(), got, tc.want)
		}
	}
	for _, name := range events.Types() {
		if ev, _ := events.New(name); !named[name] && memberIDsOf(ev, new([1]string)) != nil {
			t.Errorf("memberIDsOf(%s) = %q, want none", name, memberIDsOf(ev, new([1]string)))
		}
	}
}

// TestUnionIsTheSortedSetOfBoth: union merges a sorted set with sorted values
// and sorts unsorted ones; either way it is the sorted, de-duplicated set of
// both.
func TestUnionIsTheSortedSetOfBoth(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	values := func(sorted bool) []int {
		out := make([]int, rng.IntN(6))
		for i := range out {
			out[i] = rng.IntN(8)
		}
		if sorted {
			out = SortedInts(out)
		}
		return out
	}
	for i := 0; i < 2000; i++ {
		set, more := values(true), values(i%3 != 0)
		if i%7 == 0 {
			set = values(false) // a set that is not one: union still sorts
		}
		want := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(set), more...))))
		if len(more) == 0 {
			want = set
		}
		if got := union(set, more...); !slices.Equal(got, want) {
			t.Fatalf("union(%v, %v) = %v, want %v", set, more, got, want)
		}
	}
}

// TestWithoutDropsEveryValue: without keeps the set's order and drops every
// value given, few (scanned) or many, sorted or not (binary search).
func TestWithoutDropsEveryValue(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 2000; i++ {
		set := make([]int, rng.IntN(40))
		for j := range set {
			set[j] = rng.IntN(48)
		}
		set = SortedInts(set)
		drop := make([]int, rng.IntN(20))
		for j := range drop {
			drop[j] = rng.IntN(48)
		}
		if i%2 == 0 {
			slices.Sort(drop)
		}
		var want []int
		for _, v := range set {
			if !slices.Contains(drop, v) {
				want = append(want, v)
			}
		}
		got := without(set, drop...)
		if len(drop) == 0 || len(set) == 0 {
			want = set
		}
		if !slices.Equal(got, want) {
			t.Fatalf("without(%v, %v) = %v, want %v", set, drop, got, want)
		}
	}
}
