package replay_test

import (
	"context"
	"testing"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/replay"
)

// decisionLog is a group whose one decision wrote n records: group.created
// (its own decision), then member.joined and n-1 member.updated continuing
// it, then a member.left of a decision of its own. It returns the log and the
// ids of the decision's first and last records.
func decisionLog(t *testing.T, n int) (*logBuilder, string, string) {
	b := newLogBuilder(t)
	b.add(billing, "alice", &events.GroupCreated{ShardCount: 2, Provisioned: true, RequestedBy: "alice"})
	m := events.Meta{StreamPrefix: billing.StreamPrefix, ConsumerGroup: billing.ConsumerGroup, Time: fixtureStart, Actor: "m1"}
	add := func(ev events.Event) string {
		data, err := events.Encode(m, ev)
		if err != nil {
			t.Fatal(err)
		}
		m.Continues = true
		return b.addRaw(data)
	}
	first := add(&events.MemberJoined{MemberID: "m1", Epochs: events.Epochs{GroupEpoch: 2, MetadataVersion: 2}})
	last := first
	for i := 1; i < n; i++ {
		last = add(&events.MemberUpdated{MemberID: "m1", MaxConcurrency: i})
	}
	b.add(billing, "m1", &events.MemberLeft{MemberID: "m1", Epochs: events.Epochs{GroupEpoch: 3, MetadataVersion: 3}})
	return b, first, last
}

// TestStateAtRoundsToTheDecisionsEnd: a point on any record of a decision,
// or between two of them, gives the state after its last record, and says so
// (the last id); a point on the decision's last record, or on a record of a
// decision of its own, stays where it is. The decision is longer than a page
// of the look-ahead.
func TestStateAtRoundsToTheDecisionsEnd(t *testing.T) {
	ctx := context.Background()
	b, first, last := decisionLog(t, 40)
	created := events.ZeroID
	if entries, err := b.log.Read(ctx, events.ZeroID, 1); err != nil || len(entries) != 1 {
		t.Fatal(entries, err)
	} else {
		created = entries[0].ID
	}
	firstID, _ := events.ParseID(first)
	for _, tc := range []struct{ at, want string }{
		{created, created},
		{first, last},
		{events.ID{Ms: firstID.Ms + 10}.String(), last},
		{last, last},
		{b.last, b.last},
	} {
		st, got, err := replay.StateAt(ctx, b.log, replay.Point{UntilID: tc.at})
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want || st.LastID() != tc.want {
			t.Errorf("StateAt(%s) ends at %s (state %s), want %s", tc.at, got, st.LastID(), tc.want)
		}
		st, _, err = replay.StateAtID(ctx, b.log, nil, "", tc.at)
		if err != nil {
			t.Fatal(err)
		}
		if st.LastID() != tc.want {
			t.Errorf("StateAtID(%s) ends at %s, want %s", tc.at, st.LastID(), tc.want)
		}
	}
	g, ok := mustState(t, b, first).Group(billing)
	if !ok || g.Member("m1") == nil || g.Member("m1").MaxConcurrency != 39 {
		t.Fatalf("state at the decision's first record: %+v", g)
	}
}

// TestDiffRoundsToTheDecisionsEnd: both ends of a diff are decision ends.
func TestDiffRoundsToTheDecisionsEnd(t *testing.T) {
	b, first, last := decisionLog(t, 3)
	d, err := replay.Diff(context.Background(), b.log, billing, first, first)
	if err != nil {
		t.Fatal(err)
	}
	if d.FromID != last || d.ToID != last {
		t.Fatalf("diff from %s to %s, want both at %s", d.FromID, d.ToID, last)
	}
}

// TestLogWithoutDecisionMarksReplaysEntryByEntry: a log of earlier builds
// (no record continues another) replays to exactly the entry asked for.
func TestLogWithoutDecisionMarksReplaysEntryByEntry(t *testing.T) {
	b := scaleInLog(t)
	entries, err := b.log.Read(context.Background(), events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, last, err := replay.StateAt(context.Background(), b.log, replay.Point{UntilID: e.ID}); err != nil || last != e.ID {
			t.Fatalf("StateAt(%s) = %s, %v", e.ID, last, err)
		}
	}
}

func mustState(t *testing.T, b *logBuilder, at string) *projection.State {
	t.Helper()
	st, _, err := replay.StateAt(context.Background(), b.log, replay.Point{UntilID: at})
	if err != nil {
		t.Fatal(err)
	}
	return st
}
