package replay_test

import (
	"context"
	"errors"
	"testing"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/replay"
)

// keptSnapshots is a snapshot store holding snapshots taken at given ids.
type keptSnapshots map[string][]byte

func (k keptSnapshots) Kept(context.Context) ([]string, error) {
	var ids []string
	for id := range k {
		ids = append(ids, id)
	}
	// newest first
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0; j-- {
			if c, _ := events.CompareIDs(ids[j], ids[j-1]); c > 0 {
				ids[j], ids[j-1] = ids[j-1], ids[j]
			}
		}
	}
	return ids, nil
}

func (k keptSnapshots) LoadAt(_ context.Context, id string) ([]byte, error) { return k[id], nil }

// snapshotAt folds l up to id and encodes the state.
func snapshotAt(tb testing.TB, l events.Log, id string) []byte {
	tb.Helper()
	st := projection.New()
	if _, err := projection.Fold(context.Background(), l, st, projection.FoldOptions{Until: id}); err != nil {
		tb.Fatal(err)
	}
	data, err := st.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// TestStateAtIDFromTheNearestSnapshot: every point folds to the same state
// from the newest kept snapshot at or before it as from zero; it starts from
// that snapshot; a trimmed log refuses points before its oldest snapshot.
func TestStateAtIDFromTheNearestSnapshot(t *testing.T) {
	ctx := context.Background()
	b := scaleInLog(t)
	entries, err := b.log.Read(ctx, events.ZeroID, 0)
	if err != nil || len(entries) < 10 {
		t.Fatalf("fixture log: %d entries, %v", len(entries), err)
	}
	a, c := entries[3].ID, entries[len(entries)/2].ID
	snaps := keptSnapshots{a: snapshotAt(t, b.log, a), c: snapshotAt(t, b.log, c)}
	for i, e := range entries {
		st, from, err := replay.StateAtID(ctx, b.log, snaps, events.ZeroID, e.ID)
		if err != nil {
			t.Fatalf("point %s: %v", e.ID, err)
		}
		want := ""
		if i >= len(entries)/2 {
			want = c
		} else if i >= 3 {
			want = a
		}
		if from != want {
			t.Errorf("point %s started from %q, want %q", e.ID, from, want)
		}
		full := projection.New()
		if _, err := projection.Fold(ctx, b.log, full, projection.FoldOptions{Until: e.ID}); err != nil {
			t.Fatal(err)
		}
		got, _ := st.Encode()
		exp, _ := full.Encode()
		if string(got) != string(exp) {
			t.Fatalf("point %s: the state from the snapshot differs from the fold from zero", e.ID)
		}
	}
	// Trimmed up to a: points before a cannot be replayed; a and later can.
	if _, _, err := replay.StateAtID(ctx, b.log, snaps, entries[2].ID, entries[1].ID); !errors.Is(err, replay.ErrTrimmed) {
		t.Errorf("a point before the oldest snapshot of a trimmed log: %v, want ErrTrimmed", err)
	}
	if _, from, err := replay.StateAtID(ctx, b.log, snaps, entries[2].ID, entries[5].ID); err != nil || from != a {
		t.Errorf("a point after the oldest snapshot of a trimmed log: from %q, %v", from, err)
	}
	if _, _, err := replay.StateAtID(ctx, b.log, nil, events.ZeroID, "not-an-id"); !errors.Is(err, replay.ErrInvalidArgument) {
		t.Errorf("a bad point: %v, want ErrInvalidArgument", err)
	}
}
