package projection_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// readOnlyState is a group with something behind every slice its views hand
// out: a member owning, revoking and granted shards, a target, an active
// resharding with a history, an autoscaling policy.
func readOnlyState(t *testing.T) *projection.State {
	t.Helper()
	s := projection.New()
	var r recorder
	MustApply(t, s,
		r.rec(orders, &events.GroupCreated{ShardCount: 4, RequestedBy: "alice"}),
		r.rec(orders, joined("a", 2, 2)),
		r.rec(orders, &events.AssignmentChanged{AssignmentEpoch: 2, Targets: events.Targets{"a": ints(0, 1, 2, 3)}}),
		r.rec(orders, &events.MemberSynced{MemberID: "a", MemberEpoch: 2, Granted: ints(0, 1, 2)}),
		r.rec(orders, &events.OwnershipReported{MemberID: "a", Owned: ints(0, 1), Revoking: ints(2)}),
		r.rec(orders, &events.ReshardingPreparing{ReshardingID: "rsh-1", FromShardCount: 4, ToShardCount: 6, RequestedBy: "alice"}),
		r.rec(orders, &events.AutoscalingConfigured{Enabled: true, MinShards: 2, MaxShards: 8, TargetRate: 100}),
	)
	return s
}

// TestReadOnlyViewsCannotChangeTheState: what the views Read hands out is a
// copy: changing every slice and map they return leaves the state as it was.
// It fails when a view hands out the state's own slice or map.
func TestReadOnlyViewsCannotChangeTheState(t *testing.T) {
	s := readOnlyState(t)
	before := MustCanonicalState(t, s)
	s.Read(func(st projection.Reader) {
		g := st.Group(orders)
		m := g.Member("a")
		act := g.Active()
		if !g.Exists() || !m.Exists() || m.Current().Len() == 0 || m.Revoking().Len() == 0 || m.Granted().Len() == 0 ||
			len(g.Target("a")) == 0 || !act.Exists() || len(act.History()) == 0 {
			t.Fatal("the fixture lacks a member's shards, a target or a resharding's history: the test would change nothing")
		}
		of, _ := g.TargetOf("a")
		targets := g.Targets()
		for _, shards := range [][]int{g.Target("a"), of, targets["a"], m.Current().Copy(), m.Revoking().Copy(), m.Granted().Copy()} {
			for i := range shards {
				shards[i] = 99
			}
		}
		delete(targets, "a")
		for _, h := range [][]projection.StateChange{act.History(), g.Resharding("rsh-1").History(), g.LastResharding().History()} {
			h[0].State, h[0].EventID, h[0].At = "CHANGED", "changed", time.Time{}
		}
		for _, ids := range [][]string{g.MemberIDs(), g.LiveMemberIDs()} {
			for i := range ids {
				ids[i] = "changed"
			}
		}
		keys := st.GroupKeys()
		keys[0] = projection.GroupKey{}
	})
	if after := MustCanonicalState(t, s); !reflect.DeepEqual(after, before) {
		t.Errorf("changing what the read-only views returned changed the state:\nbefore %v\nafter  %v", before, after)
	}
}

// TestReadOnlyViewsHandOutNoPointer: the views and Reader have no exported
// field, and every method returns values (scalars, strings, times, structs
// of those), other views, or one of the copies the test above changes: no
// pointer, slice or map into the state. A method added that returns one
// fails here until it returns a copy and the test above changes it.
func TestReadOnlyViewsHandOutNoPointer(t *testing.T) {
	copies := map[string]bool{ // methods returning a slice or map of their own
		"Target": true, "TargetOf": true, "Targets": true, "MemberIDs": true, "LiveMemberIDs": true,
		"OutsideTargetIDs": true, "Grantable": true, "BarriersByShard": true, "History": true, "Copy": true, "GroupKeys": true,
	}
	views := map[reflect.Type]bool{}
	for _, v := range []any{projection.Reader{}, projection.ReadOnlyGroup{}, projection.ReadOnlyMember{}, projection.ReadOnlyResharding{},
		projection.ReadOnlyStream{}, projection.ReadOnlyInts{}} {
		views[reflect.TypeOf(v)] = true
	}
	var plain func(reflect.Type) bool
	plain = func(ty reflect.Type) bool {
		switch {
		case views[ty] || ty == reflect.TypeOf(time.Time{}):
			return true
		case ty.Kind() == reflect.Struct:
			for i := range ty.NumField() {
				if !plain(ty.Field(i).Type) {
					return false
				}
			}
			return true
		}
		switch ty.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Func, reflect.Chan, reflect.Interface, reflect.UnsafePointer, reflect.Array:
			return false
		}
		return true
	}
	for view := range views {
		for i := range view.NumField() {
			if view.Field(i).IsExported() {
				t.Errorf("%s has an exported field %s", view, view.Field(i).Name)
			}
		}
		for i := range view.NumMethod() {
			meth := view.Method(i)
			for j := range meth.Type.NumOut() {
				if out := meth.Type.Out(j); !plain(out) && !copies[meth.Name] {
					t.Errorf("%s.%s returns %s: neither a value, a view nor a copy", view, meth.Name, out)
				}
			}
			for j := 1; j < meth.Type.NumIn(); j++ { // a callback sees values only
				if in := meth.Type.In(j); in.Kind() == reflect.Func {
					for k := range in.NumIn() {
						if !plain(in.In(k)) {
							t.Errorf("%s.%s calls back with %s", view, meth.Name, in.In(k))
						}
					}
				}
			}
		}
	}
}
