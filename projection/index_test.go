package projection_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// groupAnswers is what a decision asks a group about its members, answered
// by the group's methods (the fold's index, or a layered group's base index
// with its layer).
type groupAnswers struct {
	Count, LiveCount         int
	IDs, Live, Active, Outsd []string
	Terminal                 []string // oldest first
	Oldest3                  []string // the first 3 of them, asked for alone
	Holders                  map[int][]string
	HeldByOthers             map[string][]int
	Targets                  map[string][]int
	State                    string
	// The target index (when it trusts the assignment).
	Trusted          bool
	Unsettled        []string
	Least, Most      string
	Free, OwnedAbove []int
}

func answersOf(g *projection.Group, shards int) groupAnswers {
	a := groupAnswers{Count: g.MemberCount(), LiveCount: g.LiveCount(), IDs: g.MemberIDs(), Live: g.LiveMemberIDs(), Active: g.ActiveMemberIDs(), Outsd: g.OutsideTargetIDs(),
		Holders: map[int][]string{}, HeldByOthers: map[string][]int{}, Targets: map[string][]int{}, State: g.State()}
	for s := 0; s < shards; s++ {
		if h := g.HoldersOf(s); len(h) > 0 {
			a.Holders[s] = h
		}
	}
	for _, id := range a.IDs {
		for s := 0; s < shards; s++ {
			if g.HeldByOthers(id, s) {
				a.HeldByOthers[id] = append(a.HeldByOthers[id], s)
			}
		}
	}
	for id, t := range g.EachTarget() {
		a.Targets[id] = t
	}
	for _, m := range g.OldestTerminal(-1, nil) {
		a.Terminal = append(a.Terminal, m.ID)
	}
	for _, m := range g.OldestTerminal(3, nil) {
		a.Oldest3 = append(a.Oldest3, m.ID)
	}
	if x, ok := g.TargetIndex(); ok {
		none := func(string) bool { return false }
		a.Trusted, a.Unsettled, a.Free, a.OwnedAbove = true, x.Unsettled(), x.FreeBelow(shards), x.OwnedFrom(0)
		a.Least, _, _ = x.First(false, none)
		a.Most, _, _ = x.First(true, none)
	}
	return a
}

// scanAnswers answers the same questions by scanning a flat group's maps,
// the way the methods did before the index.
func scanAnswers(g *projection.Group, shards int) groupAnswers {
	a := groupAnswers{Count: g.MemberCount(), Holders: map[int][]string{}, HeldByOthers: map[string][]int{}, Targets: map[string][]int{}}
	for id, m := range g.EachMember() {
		a.IDs = append(a.IDs, id)
		if m.Live() {
			a.Live = append(a.Live, id)
		}
		if m.Live() || (m.State == projection.MemberLeaving && (len(m.Current) > 0 || len(m.Revoking) > 0)) {
			a.Active = append(a.Active, id)
		}
		if m.CanHold() {
			outside := false
			for _, s := range append(append([]int{}, m.Current...), m.Revoking...) {
				outside = outside || !containsInt(g.Target(id), s)
			}
			if outside {
				a.Outsd = append(a.Outsd, id)
			}
		}
	}
	a.LiveCount = len(a.Live)
	for _, l := range [][]string{a.IDs, a.Live, a.Active, a.Outsd} {
		sort.Strings(l)
	}
	if a.IDs == nil {
		a.IDs = []string{}
	}
	for s := 0; s < shards; s++ {
		for _, id := range a.IDs {
			if g.Member(id).Holds(s) {
				a.Holders[s] = append(a.Holders[s], id)
			}
		}
	}
	for _, id := range a.IDs {
		for s := 0; s < shards; s++ {
			for _, h := range a.Holders[s] {
				if h != id {
					a.HeldByOthers[id] = append(a.HeldByOthers[id], s)
					break
				}
			}
		}
	}
	for id, t := range g.EachTarget() {
		a.Targets[id] = t
	}
	a.State = scanState(g)
	var terminal []*projection.Member
	for _, m := range g.EachMember() {
		if m.State == projection.MemberExpired || m.State == projection.MemberFenced || (m.State == projection.MemberLeaving && len(m.Current) == 0 && len(m.Revoking) == 0) {
			terminal = append(terminal, m)
		}
	}
	sort.Slice(terminal, func(i, j int) bool {
		if !terminal[i].UpdatedAt.Equal(terminal[j].UpdatedAt) {
			return terminal[i].UpdatedAt.Before(terminal[j].UpdatedAt)
		}
		return terminal[i].ID < terminal[j].ID
	})
	for _, m := range terminal {
		a.Terminal = append(a.Terminal, m.ID)
	}
	a.Oldest3 = a.Terminal[:min(3, len(a.Terminal))]
	// The target index, from the maps.
	owners := map[int][]string{}
	odd := false
	least, most := -1, -1
	for _, id := range a.IDs {
		m := g.Member(id)
		t, has := g.TargetOf(id)
		if m.Live() != has {
			a.Unsettled = append(a.Unsettled, id)
		}
		if !m.Live() || !has {
			continue
		}
		for _, s := range t {
			odd = odd || s < 0
			owners[s] = append(owners[s], id)
		}
		if least < 0 || len(t) < least {
			least, a.Least = len(t), id
		}
		if most < 0 || len(t) > most {
			most, a.Most = len(t), id
		}
	}
	for id := range g.EachTarget() {
		if g.Member(id) == nil {
			a.Unsettled = append(a.Unsettled, id)
		}
	}
	sort.Strings(a.Unsettled)
	a.Trusted = !odd
	for _, o := range owners {
		a.Trusted = a.Trusted && len(o) < 2
	}
	for s := 0; s < shards; s++ {
		if len(owners[s]) == 0 {
			a.Free = append(a.Free, s)
		}
	}
	for s := 0; s < 4096; s++ {
		if len(owners[s]) > 0 {
			a.OwnedAbove = append(a.OwnedAbove, s)
		}
	}
	if !a.Trusted {
		a.Unsettled, a.Least, a.Most, a.Free, a.OwnedAbove = nil, "", "", nil, nil
	}
	return a
}

func scanState(g *projection.Group) string {
	var live []string
	for id, m := range g.EachMember() {
		if m.Live() {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		return "EMPTY"
	}
	for _, id := range live {
		m := g.Member(id)
		if !projection.EqualSets(m.Current, g.Target(id)) || len(m.Revoking) > 0 {
			return "RECONCILING"
		}
		for _, s := range g.Target(id) {
			for oid, o := range g.EachMember() {
				if oid != id && o.Holds(s) {
					return "RECONCILING"
				}
			}
		}
	}
	for _, m := range g.EachMember() {
		if m.State == projection.MemberLeaving && (len(m.Current) > 0 || len(m.Revoking) > 0) {
			return "RECONCILING"
		}
	}
	return "STABLE"
}

// normal makes empty and nil lists compare equal.
func normal(a groupAnswers) groupAnswers {
	fix := func(l []string) []string {
		if len(l) == 0 {
			return nil
		}
		return l
	}
	a.IDs, a.Live, a.Active, a.Outsd, a.Unsettled = fix(a.IDs), fix(a.Live), fix(a.Active), fix(a.Outsd), fix(a.Unsettled)
	a.Terminal, a.Oldest3 = fix(a.Terminal), fix(a.Oldest3)
	if len(a.Free) == 0 {
		a.Free = nil
	}
	if len(a.OwnedAbove) == 0 {
		a.OwnedAbove = nil
	}
	for id, t := range a.Targets {
		if len(t) == 0 {
			a.Targets[id] = nil
		}
	}
	return a
}

const indexShards = 40

// TestIndexMatchesScan: after every record of generated logs, every question
// a decision asks of a group of the State (answered from the fold's index)
// has the answer a scan of its members gives.
func TestIndexMatchesScan(t *testing.T) {
	for _, seed := range determinismSeeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			_, recs := MustGeneratedLog(t, seed, generatedEvents)
			s := projection.New()
			for _, rec := range recs {
				MustApply(t, s, rec)
				s.RLock()
				g := s.GroupLocked(projection.KeyOf(rec))
				if g != nil {
					got, want := normal(answersOf(g, indexShards)), normal(scanAnswers(g, indexShards))
					if !reflect.DeepEqual(got, want) {
						s.RUnlock()
						t.Fatalf("after %s (%s): the index answers\n %+v\nthe members say\n %+v", rec.ID, rec.Type, got, want)
					}
					if clone := normal(answersOf(g.Clone(), indexShards)); !reflect.DeepEqual(clone, want) {
						s.RUnlock()
						t.Fatalf("after %s (%s): a clone's index (built at once) answers\n %+v\nthe members say\n %+v", rec.ID, rec.Type, clone, want)
					}
				}
				s.RUnlock()
			}
		})
	}
}

// TestLayeredGroupAnswersAsTheState: a group an Overlay folded a batch into
// (layered over the State's) answers every question as the State's group
// does once the same records are applied, and its clone is that group.
func TestLayeredGroupAnswersAsTheState(t *testing.T) {
	for _, seed := range determinismSeeds[:3] {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			_, recs := MustGeneratedLog(t, seed, generatedEvents)
			r := rand.New(rand.NewPCG(seed, 7))
			s := projection.New()
			for i := 0; i < len(recs); {
				batch := recs[i:min(i+1+r.IntN(12), len(recs))]
				i += len(batch)
				s.Lock()
				ov := s.NewOverlayLocked()
				for _, rec := range batch {
					ov.Apply(rec)
				}
				seen := map[projection.GroupKey]groupAnswers{}
				for _, rec := range batch {
					if g := ov.Group(projection.KeyOf(rec)); g != nil {
						seen[g.Key] = normal(answersOf(g, indexShards))
					}
				}
				for _, rec := range batch {
					if err := s.ApplyLocked(rec); err != nil {
						s.Unlock()
						t.Fatal(err)
					}
				}
				for k, got := range seen {
					// The target index of a layered group speaks for its
					// settled members only (commands' TestAssignmentDeltaIsAssign
					// checks what reconcile makes of it).
					want := normal(answersOf(s.GroupLocked(k), indexShards))
					got.Trusted, got.Unsettled, got.Least, got.Most, got.Free, got.OwnedAbove = false, nil, "", "", nil, nil
					want.Trusted, want.Unsettled, want.Least, want.Most, want.Free, want.OwnedAbove = false, nil, "", "", nil, nil
					if !reflect.DeepEqual(got, want) {
						s.Unlock()
						t.Fatalf("batch ending %s: the layered group of %v answers\n %+v\nthe State's\n %+v", batch[len(batch)-1].ID, k, got, want)
					}
				}
				s.Unlock()
			}
		})
	}
}

// TestOverlayCopiesOnlyWhatChanged: folding a join into a group of thousands
// of members copies no member the join does not concern: the overlay's group
// shares them with the State, and the State's group is left as it was.
func TestOverlayCopiesOnlyWhatChanged(t *testing.T) {
	var r recorder
	s := projection.New()
	MustApply(t, s, r.rec(orders, created()))
	for i := 0; i < 3000; i++ {
		MustApply(t, s, r.rec(orders, &events.MemberJoined{MemberID: fmt.Sprintf("m-%04d", i), MemberName: "m", MaxConcurrency: 1, Epochs: events.Epochs{GroupEpoch: int64(i + 2), MetadataVersion: int64(i + 2)}}))
	}
	MustApply(t, s, r.rec(orders, &events.MemberLeft{MemberID: "m-0001", Epochs: events.Epochs{GroupEpoch: 3002, MetadataVersion: 3002}}))
	s.Lock()
	defer s.Unlock()
	base := s.GroupLocked(orders)
	before := MustCanonicalGroup(t, base)
	ov := s.NewOverlayLocked()
	ov.Apply(r.rec(orders, &events.MemberJoined{MemberID: "new", MemberName: "new", MaxConcurrency: 1, Epochs: events.Epochs{GroupEpoch: 3003, MetadataVersion: 3003}}))
	ov.Apply(r.rec(orders, &events.MemberLeft{MemberID: "m-0002", Epochs: events.Epochs{GroupEpoch: 3004, MetadataVersion: 3004}}))
	ov.Apply(r.rec(orders, &events.MembersPruned{MemberIDs: []string{"m-0001"}, MetadataVersion: 3005}))
	g := ov.Group(orders)
	if projection.HoldsOwnMaps(g) {
		t.Fatal("the overlay's group holds maps of its own: it was copied whole")
	}
	if g.Member("m-0000") != base.Member("m-0000") {
		t.Error("an untouched member was copied")
	}
	if g.Member("m-0002") == base.Member("m-0002") || g.Member("m-0002").State != projection.MemberLeaving || base.Member("m-0002").State != projection.MemberActive {
		t.Error("the member that left is not the overlay's own copy, or the State's changed")
	}
	if g.Member("new") == nil || base.Member("new") != nil || g.Member("m-0001") != nil || base.Member("m-0001") == nil {
		t.Error("the join and the prune are not the overlay's alone")
	}
	if g.MemberCount() != 3000 || base.MemberCount() != 3000 {
		t.Errorf("member counts %d (overlay), %d (State), want 3000 and 3000", g.MemberCount(), base.MemberCount())
	}
	if !reflect.DeepEqual(MustCanonicalGroup(t, base), before) {
		t.Error("folding into the overlay changed the State's group")
	}
}

// TestFoldRebuildsTheIndexesItSuspends: a fold drops the index of a group
// with many events in it and builds it once at the end. Folded in pages of
// every size from 1 (every group kept current event by event) to the whole
// log (every group rebuilt), each group ends with an index whose answers
// are a scan's.
func TestFoldRebuildsTheIndexesItSuspends(t *testing.T) {
	log, _ := MustGeneratedLog(t, determinismSeeds[0], generatedEvents)
	for _, page := range []int{1, 7, 100, generatedEvents} {
		t.Run(fmt.Sprintf("page=%d", page), func(t *testing.T) {
			s := projection.New()
			if _, err := projection.Fold(context.Background(), log, s, projection.FoldOptions{PageSize: page}); err != nil {
				t.Fatal(err)
			}
			s.RLock()
			defer s.RUnlock()
			for _, k := range s.GroupKeysLocked() {
				g := s.GroupLocked(k)
				if !projection.Indexed(g) {
					t.Fatalf("group %v has no index after the fold", k)
				}
				if got, want := normal(answersOf(g, indexShards)), normal(scanAnswers(g, indexShards)); !reflect.DeepEqual(got, want) {
					t.Fatalf("group %v: the index answers\n %+v\nthe members say\n %+v", k, got, want)
				}
			}
		})
	}
}
