package projection_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// restoredLog is the log of a restore: entries 1-3 survived, 4 was lost,
// 5 is log.restored of the state at 4, 6 goes on after it.
func restoredLog(t *testing.T) (*events.MemLog, []events.Record) {
	t.Helper()
	var r recorder
	recs := []events.Record{
		r.rec(orders, &events.GroupCreated{ShardCount: 2, RequestedBy: "t"}),
		r.rec(payments, &events.GroupCreated{ShardCount: 2, RequestedBy: "t"}),
		r.rec(orders, &events.MemberJoined{MemberID: "m", Epochs: events.Epochs{GroupEpoch: 1, MetadataVersion: 2}}),
		r.rec(payments, &events.GroupDeleted{RequestedBy: "t"}), // lost
		r.rec(projection.GroupKey{}, &events.LogRestored{RestoredFrom: "4-0", LogLastID: "3-0", Cause: "ENTRIES_LOST", LostEntries: 1, RequestedBy: "ops", Reason: "t"}),
		r.rec(orders, &events.MemberLeft{MemberID: "m", Epochs: events.Epochs{GroupEpoch: 2, MetadataVersion: 3}}),
	}
	var entries []events.Entry
	for i, rec := range recs {
		if i == 3 {
			continue
		}
		data, err := events.Encode(rec.Meta, rec.Event)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, events.Entry{ID: rec.ID, Data: data})
	}
	l, err := events.LoadEntries(entries)
	if err != nil {
		t.Fatal(err)
	}
	return l, recs
}

// A fold never applies a log.restored entry to a state it did not restore:
// from zero it stops before the entry (the state after it is in the
// restore's snapshot), having applied what came before; from the restored
// state, or from the snapshot taken at the entry, it goes on.
func TestFoldStopsAtARestoreOfAnotherState(t *testing.T) {
	ctx := context.Background()
	l, recs := restoredLog(t)

	st := projection.New()
	n, err := projection.Fold(ctx, l, st, projection.FoldOptions{})
	var re *projection.RestoredError
	if !errors.As(err, &re) || re.ID != "5-0" || re.From != "4-0" || re.At != "3-0" {
		t.Fatalf("fold from zero: %v, want a RestoredError at 5-0 (from 4-0, fold at 3-0)", err)
	}
	if n != 3 || st.LastID() != "3-0" {
		t.Fatalf("fold from zero applied %d entries up to %s, want 3 up to 3-0", n, st.LastID())
	}

	// The restored state (it applied 1-4) goes on through the restore.
	restored := MustFold(t, recs[:4])
	if _, err := projection.Fold(ctx, l, restored, projection.FoldOptions{}); err != nil {
		t.Fatalf("fold of the restored state: %v", err)
	}
	want := MustFold(t, recs)
	if !reflect.DeepEqual(MustCanonicalState(t, restored), MustCanonicalState(t, want)) {
		t.Fatal("the restored state folded through the restore is not the state of every record")
	}
	if mark := restored.LastRestore(); mark.ID != "5-0" || mark.From != "4-0" {
		t.Fatalf("LastRestore %+v, want 5-0 from 4-0", mark)
	}

	// The snapshot taken at the restore carries it, and a fold goes on from it.
	snap := MustFold(t, recs[:5])
	data := MustEncodeState(t, snap)
	fromSnap, err := projection.Restore(data)
	if err != nil {
		t.Fatal(err)
	}
	if mark := fromSnap.LastRestore(); mark.ID != "5-0" || mark.From != "4-0" {
		t.Fatalf("LastRestore of the snapshot %+v, want 5-0 from 4-0", mark)
	}
	if _, err := projection.Fold(ctx, l, fromSnap, projection.FoldOptions{}); err != nil {
		t.Fatalf("fold from the restore's snapshot: %v", err)
	}
	if !reflect.DeepEqual(MustCanonicalState(t, fromSnap), MustCanonicalState(t, want)) {
		t.Fatal("the fold from the restore's snapshot is not the state of every record")
	}
}
