package projection_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// layoutHistory folds a group of 4 shards at version 1 scaled 4 -> 8
// (activated at version 3), rolled back to 4 (version 5), scaled 4 -> 2
// (version 7, completed at 8), then a resharding rolled back before its
// activation (no layout change).
func layoutHistory(t *testing.T) (*projection.State, *recorder) {
	r := &recorder{}
	s := projection.New()
	MustApply(t, s,
		r.rec(orders, &events.GroupCreated{ShardCount: 4, Provisioned: true, RequestedBy: "alice"}), // 1
		r.rec(orders, &events.ReshardingPreparing{ReshardingID: "r1", FromShardCount: 4, ToShardCount: 8, RequestedBy: "alice", Reason: "r"}),
		r.rec(orders, &events.ReshardingActivated{ReshardingID: "r1", ShardCount: 8, AssignableCount: 8, Epochs: ep(2, 3)}),                                                                                       // 3
		r.rec(orders, &events.ReshardingRolledBack{ReshardingID: "r1", Policy: "metadata", State: projection.RolledBack, ShardCount: 4, AssignableCount: 4, RequestedBy: "alice", Reason: "r", Epochs: ep(3, 5)}), // 4
		r.rec(orders, &events.ReshardingPreparing{ReshardingID: "r2", FromShardCount: 4, ToShardCount: 2, RequestedBy: "alice", Reason: "r"}),
		r.rec(orders, &events.ReshardingActivated{ReshardingID: "r2", ShardCount: 2, AssignableCount: 4, Epochs: ep(4, 7)}), // 6
		r.rec(orders, &events.ReshardingCompleted{ReshardingID: "r2", State: projection.Deprecated, MetadataVersion: 8}),
		r.rec(orders, &events.ReshardingPreparing{ReshardingID: "r3", FromShardCount: 2, ToShardCount: 6, RequestedBy: "alice", Reason: "r"}),
		r.rec(orders, &events.ReshardingRolledBack{ReshardingID: "r3", Policy: "metadata", State: projection.RolledBack, ShardCount: 2, AssignableCount: 2, RequestedBy: "alice", Reason: "r", Epochs: ep(5, 9)}),
	)
	return s, r
}

// wantHistory is layoutHistory's previous layouts, newest first.
var wantHistory = []projection.Layout{
	{MetadataVersion: 5, ShardCount: 4, Fence: 7, EndedAt: at(6)},
	{MetadataVersion: 3, ShardCount: 8, Fence: 5, EndedAt: at(4)},
	{MetadataVersion: 1, ShardCount: 4, Fence: 3, EndedAt: at(3)},
}

// TestPreviousLayoutsFold: every activation and rollback that changes the
// shard count records the layout it ends (the version it began at, its
// count, the version it took the group to, the record's time), newest
// first; a rollback before activation records none; the list survives a
// snapshot.
func TestPreviousLayoutsFold(t *testing.T) {
	s, _ := layoutHistory(t)
	g := MustGroup(t, s, orders)
	if !reflect.DeepEqual(g.PreviousLayouts, wantHistory) || g.LayoutSince != 7 {
		t.Fatalf("previous layouts %+v since %d, want %+v since 7", g.PreviousLayouts, g.LayoutSince, wantHistory)
	}
	restored, err := projection.Restore(MustEncodeState(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if rg := MustGroup(t, restored, orders); !sameLayouts(rg.PreviousLayouts, wantHistory) || rg.LayoutSince != 7 {
		t.Fatalf("after restore: %+v since %d", rg.PreviousLayouts, rg.LayoutSince)
	}
}

// TestPreviousLayoutsBounded: the list keeps the newest
// MaxPreviousLayouts; the oldest go.
func TestPreviousLayoutsBounded(t *testing.T) {
	var r recorder
	s := projection.New()
	MustApply(t, s, r.rec(orders, &events.GroupCreated{ShardCount: 2, Provisioned: true, RequestedBy: "alice"}))
	n := projection.MaxPreviousLayouts + 1
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("r%d", i)
		to := 3 + i%2 // 2 -> 3 -> 4 -> 3 -> 4 ...
		MustApply(t, s,
			r.rec(orders, &events.ReshardingPreparing{ReshardingID: id, FromShardCount: 2, ToShardCount: to, RequestedBy: "alice", Reason: "r"}),
			r.rec(orders, &events.ReshardingActivated{ReshardingID: id, ShardCount: to, AssignableCount: to, Epochs: ep(int64(i+2), int64(2*i+2))}),
			r.rec(orders, &events.ReshardingCompleted{ReshardingID: id, State: projection.Deprecated, MetadataVersion: int64(2*i + 3)}),
		)
	}
	g := MustGroup(t, s, orders)
	if len(g.PreviousLayouts) != projection.MaxPreviousLayouts {
		t.Fatalf("%d previous layouts after %d changes, want %d", len(g.PreviousLayouts), n, projection.MaxPreviousLayouts)
	}
	newest, oldest := g.PreviousLayouts[0], g.PreviousLayouts[len(g.PreviousLayouts)-1]
	if newest.Fence != int64(2*(n-1)+2) || oldest.Fence != 4 { // the first change (fence 2) is gone
		t.Fatalf("newest %+v, oldest %+v", newest, oldest)
	}
}

// TestLayoutsSince: the read keeps the layouts that ended after the time.
func TestLayoutsSince(t *testing.T) {
	if got := projection.LayoutsSince(wantHistory, at(4)); !reflect.DeepEqual(got, wantHistory[:1]) {
		t.Fatalf("since at(4): %+v", got)
	}
	if got := projection.LayoutsSince(wantHistory, at(2)); !reflect.DeepEqual(got, wantHistory) {
		t.Fatalf("since at(2): %+v", got)
	}
	if got := projection.LayoutsSince(wantHistory, at(6)); len(got) != 0 {
		t.Fatalf("since at(6): %+v", got)
	}
}

// TestPreviousLayoutsFromVersion3Snapshot: a snapshot written before the
// projection kept previous layouts restores them from the reshardings'
// histories, as the fold has them (the first layout's start version is not
// in the history: it is taken as the version before its end).
func TestPreviousLayoutsFromVersion3Snapshot(t *testing.T) {
	s, _ := layoutHistory(t)
	var snap map[string]any
	if err := msgpack.Unmarshal(MustEncodeState(t, s), &snap); err != nil {
		t.Fatal(err)
	}
	snap["v"] = 3
	for _, g := range snap["groups"].([]any) {
		delete(g.(map[string]any), "previousLayouts")
		delete(g.(map[string]any), "layoutSince")
	}
	data, err := msgpack.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := projection.Restore(data)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]projection.Layout(nil), wantHistory...)
	want[2].MetadataVersion = 2
	if g := MustGroup(t, restored, orders); !sameLayouts(g.PreviousLayouts, want) || g.LayoutSince != 7 {
		t.Fatalf("derived %+v since %d, want %+v since 7", g.PreviousLayouts, g.LayoutSince, want)
	}
}

// TestStreamPreviousLayouts: a stream's layouts come from its scales and
// from its groups' activations and rollbacks (once per change, however
// many groups record it), in stream versions.
func TestStreamPreviousLayouts(t *testing.T) {
	var r recorder
	s := projection.New()
	MustApply(t, s,
		r.rec(events1, &events.StreamCreated{ShardCount: 2, Provisioned: true, RequestedBy: "alice", CreatedShards: ints(0, 1)}),
		r.rec(events1, &events.StreamScaled{From: 2, To: 4, MetadataVersion: 2, RequestedBy: "alice", Reason: "r", CreatedShards: ints(2, 3)}), // 2
		r.rec(eventsBill, &events.GroupCreated{ShardCount: 4, Provisioned: true, RequestedBy: "svc", MetadataVersion: 2, KeysChecked: true}),
		r.rec(eventsAuth, &events.GroupCreated{ShardCount: 4, Provisioned: true, RequestedBy: "svc", MetadataVersion: 2, KeysChecked: true}),
		r.rec(eventsAuth, &events.ReshardingPreparing{ReshardingID: "a1", FromShardCount: 4, ToShardCount: 8, RequestedBy: "alice", Reason: "r", KeysChecked: true}),
		r.rec(eventsBill, &events.ReshardingPreparing{ReshardingID: "b1", FromShardCount: 4, ToShardCount: 8, RequestedBy: "alice", Reason: "r", KeysChecked: true}),
		r.rec(eventsAuth, &events.ReshardingActivated{ReshardingID: "a1", ShardCount: 8, AssignableCount: 8, Epochs: ep(2, 3), StreamMetadataVersion: 3}), // 7
		r.rec(eventsBill, &events.ReshardingActivated{ReshardingID: "b1", ShardCount: 8, AssignableCount: 8, Epochs: ep(2, 3), StreamMetadataVersion: 3}),
	)
	want := []projection.Layout{
		{MetadataVersion: 2, ShardCount: 4, Fence: 3, EndedAt: at(7)},
		{MetadataVersion: 1, ShardCount: 2, Fence: 2, EndedAt: at(2)},
	}
	st := mustStream(t, s, "events")
	if !reflect.DeepEqual(st.PreviousLayouts, want) || st.LayoutSince != 3 {
		t.Fatalf("stream layouts %+v since %d, want %+v since 3", st.PreviousLayouts, st.LayoutSince, want)
	}
	restored, err := projection.Restore(MustEncodeState(t, s))
	if err != nil {
		t.Fatal(err)
	}
	if rst := mustStream(t, restored, "events"); !sameLayouts(rst.PreviousLayouts, want) {
		t.Fatalf("after restore: %+v", rst.PreviousLayouts)
	}
}

// sameLayouts compares layouts with their times as instants (a restored
// time is in the local zone).
func sameLayouts(a, b []projection.Layout) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if !x.EndedAt.Equal(y.EndedAt) {
			return false
		}
		x.EndedAt = y.EndedAt
		if x != y {
			return false
		}
	}
	return true
}
