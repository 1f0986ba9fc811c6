package projection_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// recount is what each principal holds, counted member by member.
func recount(s *projection.State) map[string]int {
	out := map[string]int{}
	for _, g := range s.Groups() {
		for _, m := range g.EachMember() {
			if m.Active() {
				out[m.Principal]++
			}
		}
	}
	return out
}

// TestPrincipalTotalsFollowTheFold: the totals the State keeps per
// principal (what a quota on member records reads) are, after every record
// of generated logs, what counting every member gives; an overlay over the
// State, with the next records folded into it, answers what the State
// answers once it applied them; a restored snapshot has the same totals.
func TestPrincipalTotalsFollowTheFold(t *testing.T) {
	principals := []string{"", "svc-a", "svc-b"}
	for seed := uint64(1); seed <= 4; seed++ {
		recs := generateRecords(seed, 1500)
		for i := range recs {
			recs[i].ID = fmt.Sprintf("%d-0", i+1)
		}
		s := projection.New()
		for i, rec := range recs {
			if i%7 == 0 && i+5 < len(recs) {
				// The overlay over the state before rec, with rec and the
				// four after it, against a state that applied them.
				s.Lock()
				ov := s.NewOverlayLocked()
				for _, r := range recs[i : i+5] {
					ov.Apply(r)
				}
				got := map[string]int{}
				for _, p := range principals {
					if n := ov.ActiveMembersOf(p); n != 0 {
						got[p] = n
					}
				}
				s.Unlock()
				ahead := projection.New()
				MustApply(t, ahead, recs[:i+5]...)
				if want := recount(ahead); !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d, overlay over record %d..%d: %v, counting gives %v", seed, i+1, i+5, got, want)
				}
			}
			MustApply(t, s, rec)
			got := map[string]int{}
			s.RLock()
			for _, p := range principals {
				if n := s.ActiveMembersOfLocked(p); n != 0 {
					got[p] = n
				}
			}
			s.RUnlock()
			if want := recount(s); !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d, after record %d (%s): totals %v, counting gives %v", seed, i+1, rec.Type, got, want)
			}
		}
		data, err := s.Encode()
		if err != nil {
			t.Fatal(err)
		}
		restored, err := projection.Restore(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range principals {
			restored.RLock()
			n := restored.ActiveMembersOfLocked(p)
			restored.RUnlock()
			if want := recount(s)[p]; n != want {
				t.Fatalf("seed %d: restored snapshot has %d for %q, want %d", seed, n, p, want)
			}
		}
	}
}

// TestEmptySinceIsTheRecordThatEmptiedTheGroup: a group is empty since its
// creation until a member joins, not empty while one is live, and empty
// since the record that took its last live member (a leave, an expiry).
func TestEmptySinceIsTheRecordThatEmptiedTheGroup(t *testing.T) {
	var r recorder
	s := projection.New()
	created := r.rec(orders, &events.GroupCreated{ShardCount: 2, Provisioned: true, RequestedBy: "m-1", RegisteredBy: "m-1", Principal: "svc"})
	MustApply(t, s, created)
	g, _ := s.Group(orders)
	if !g.EmptySince.Equal(created.Time) || !g.Registered || g.Owner != "svc" || !g.Provisioned {
		t.Fatalf("after create: emptySince %v registered %v owner %q provisioned %v", g.EmptySince, g.Registered, g.Owner, g.Provisioned)
	}
	MustApply(t, s, r.rec(orders, &events.MemberJoined{MemberID: "m-1", MemberName: "m-1", MaxConcurrency: 1, Epochs: events.Epochs{GroupEpoch: 2, MetadataVersion: 1}}),
		r.rec(orders, &events.MemberJoined{MemberID: "m-2", MemberName: "m-2", MaxConcurrency: 1, Epochs: events.Epochs{GroupEpoch: 3, MetadataVersion: 1}}))
	if g, _ = s.Group(orders); !g.EmptySince.IsZero() {
		t.Fatalf("with live members: emptySince %v", g.EmptySince)
	}
	MustApply(t, s, r.rec(orders, &events.MemberLeft{MemberID: "m-1", Epochs: events.Epochs{GroupEpoch: 4, MetadataVersion: 1}}))
	if g, _ = s.Group(orders); !g.EmptySince.IsZero() {
		t.Fatalf("one live member left: emptySince %v", g.EmptySince)
	}
	expired := r.rec(orders, &events.MembersExpired{MemberIDs: []string{"m-2"}, Epochs: events.Epochs{GroupEpoch: 5, MetadataVersion: 1}})
	MustApply(t, s, expired, r.rec(orders, &events.MembersPruned{MemberIDs: []string{"m-1"}, MetadataVersion: 1}))
	if g, _ = s.Group(orders); !g.EmptySince.Equal(expired.Time) {
		t.Fatalf("after the last live member expired: emptySince %v, want %v", g.EmptySince, expired.Time)
	}
}
