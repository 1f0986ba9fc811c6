package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/replay"
)

var update = flag.Bool("update", false, "rewrite testdata/scale-in.jsonl from the fixture builder")

// fixtureFile is the scale-in fixture exported; cmd/replay's tests read it.
const fixtureFile = "testdata/scale-in.jsonl"

// mustCanonical is the state's canonical encoding: equal states, equal bytes.
func mustCanonical(tb testing.TB, st *projection.State) []byte {
	tb.Helper()
	b, err := replay.CanonicalEncode(st)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// mustSnapshot is the state's snapshot bytes, as the coordinator writes them.
func mustSnapshot(tb testing.TB, st *projection.State) []byte {
	tb.Helper()
	b, err := st.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// entryCount is how many entries the builder appended.
func (b *logBuilder) entryCount() int { return len(b.log.Entries()) }

func mustStateAt(tb testing.TB, l events.Log, p replay.Point) (*projection.State, string) {
	tb.Helper()
	st, last, err := replay.StateAt(context.Background(), l, p)
	if err != nil {
		tb.Fatalf("StateAt(%+v): %v", p, err)
	}
	return st, last
}

func mustGroup(tb testing.TB, st *projection.State, k projection.GroupKey) *replay.GroupSnapshot {
	tb.Helper()
	g, err := replay.GroupState(st, k)
	if err != nil {
		tb.Fatal(err)
	}
	return g
}

func TestStateAtByID(t *testing.T) {
	b := scaleInLog(t)
	tests := []struct {
		name       string
		until      string
		wantLast   string
		shards     int
		assignable int
		members    []string
		resharding string // state of reshard-0001, "" when absent
	}{
		{name: "after m1 converged", until: b.marks["m1"], wantLast: b.marks["m1"], shards: 4, assignable: 4, members: []string{"m1"}},
		{name: "both members stable", until: b.marks["stable"], wantLast: b.marks["stable"], shards: 4, assignable: 4, members: []string{"m1", "m2"}},
		{name: "activated", until: b.marks["activated"], wantLast: b.marks["activated"], shards: 2, assignable: 4, members: []string{"m1", "m2"}, resharding: projection.Active},
		{name: "drained", until: b.marks["drained"], wantLast: b.marks["drained"], shards: 2, assignable: 2, members: []string{"m1", "m2"}, resharding: projection.Draining},
		{name: "beyond the end", until: "1000-0", wantLast: b.marks["end"], shards: 2, assignable: 2, members: []string{"m1", "m2"}, resharding: projection.Deprecated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, last := mustStateAt(t, b.log, replay.Point{UntilID: tt.until})
			if last != tt.wantLast {
				t.Fatalf("last id = %s, want %s", last, tt.wantLast)
			}
			g := mustGroup(t, st, billing)
			if g.LastID != tt.wantLast {
				t.Errorf("snapshot lastId = %s, want %s", g.LastID, tt.wantLast)
			}
			if g.ShardCount != tt.shards || g.AssignableShardCount != tt.assignable {
				t.Errorf("shards %d/%d, want %d/%d", g.ShardCount, g.AssignableShardCount, tt.shards, tt.assignable)
			}
			var ids []string
			for _, m := range g.Members {
				ids = append(ids, m.MemberID)
			}
			if !slices.Equal(ids, tt.members) {
				t.Errorf("members %v, want %v", ids, tt.members)
			}
			state := ""
			for _, m := range g.Reshardings {
				if m.ReshardingID == "reshard-0001" {
					state = m.State
				}
			}
			if state != tt.resharding {
				t.Errorf("reshard-0001 state %q, want %q", state, tt.resharding)
			}
		})
	}
}

func TestStateAtByTime(t *testing.T) {
	b := scaleInLog(t)
	stable, _ := events.ParseID(b.marks["stable"])
	// Entry n-0 was decided at fixtureStart + (n-1)s.
	at := func(n uint64) time.Time { return fixtureStart.Add(time.Duration(n-1) * time.Second) }
	tests := []struct {
		name     string
		at       time.Time
		wantLast string
	}{
		{name: "exactly an entry's time includes it", at: at(stable.Ms), wantLast: b.marks["stable"]},
		{name: "between two entries", at: at(stable.Ms).Add(500 * time.Millisecond), wantLast: b.marks["stable"]},
		{name: "before the first entry", at: fixtureStart.Add(-time.Hour), wantLast: events.ZeroID},
		{name: "after the last entry", at: fixtureStart.Add(time.Hour), wantLast: b.marks["end"]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, last := mustStateAt(t, b.log, replay.Point{At: tt.at})
			if last != tt.wantLast {
				t.Fatalf("last id = %s, want %s", last, tt.wantLast)
			}
			byID, _ := mustStateAt(t, b.log, replay.Point{UntilID: tt.wantLast})
			if !bytes.Equal(mustCanonical(t, st), mustCanonical(t, byID)) {
				t.Fatal("state by time differs from state by the same id")
			}
		})
	}
}

func TestStateAtRejectsBadPoints(t *testing.T) {
	b := scaleInLog(t)
	for name, p := range map[string]replay.Point{
		"id and time":  {UntilID: "3-0", At: fixtureStart},
		"malformed id": {UntilID: "three"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := replay.StateAt(context.Background(), b.log, p); !errors.Is(err, replay.ErrInvalidArgument) {
				t.Fatalf("err = %v, want ErrInvalidArgument", err)
			}
		})
	}
}

func TestStateAtStopsBeforeCorruptEntry(t *testing.T) {
	b := scaleInLog(t)
	good := b.last
	b.addRaw([]byte("not msgpack"))
	if _, last := mustStateAt(t, b.log, replay.Point{UntilID: good}); last != good {
		t.Fatalf("last = %s, want %s", last, good)
	}
}

func TestGroupStateUnknownGroup(t *testing.T) {
	st, _ := mustStateAt(t, scaleInLog(t).log, replay.Point{})
	_, err := replay.GroupState(st, projection.GroupKey{StreamPrefix: "nope", ConsumerGroup: "nope"})
	if !errors.Is(err, replay.ErrGroupNotFound) {
		t.Fatalf("err = %v, want ErrGroupNotFound", err)
	}
}

func TestGroupStatesListsEveryGroup(t *testing.T) {
	st, _ := mustStateAt(t, scaleInLog(t).log, replay.Point{})
	var got []string
	for _, g := range replay.GroupStates(st) {
		got = append(got, g.StreamPrefix+"/"+g.ConsumerGroup)
	}
	if want := []string{"orders/billing", "payments/ledger"}; !slices.Equal(got, want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
}

func TestHistoryListsEveryStateChangeInOrder(t *testing.T) {
	b := scaleInLog(t)
	tl, err := replay.History(context.Background(), b.log, billing)
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Reshardings) != 1 {
		t.Fatalf("%d reshardings, want 1", len(tl.Reshardings))
	}
	r := tl.Reshardings[0]
	if r.ReshardingID != "reshard-0001" || r.FromShardCount != 4 || r.ToShardCount != 2 || r.Kind != "SCALE_IN" || r.State != projection.Deprecated {
		t.Errorf("resharding = %+v", r)
	}
	if r.RequestedBy != "alice" || r.Reason != "traffic dropped" {
		t.Errorf("requested by %q for %q", r.RequestedBy, r.Reason)
	}
	if r.Before != (replay.Epochs{GroupEpoch: 3, MetadataVersion: 3}) {
		t.Errorf("before = %+v, want epochs 3/3", r.Before)
	}
	want := []struct {
		state, phase string
		g, mv        int64
	}{
		{projection.Preparing, "requested", 3, 3},
		{projection.Preparing, "provisioned", 3, 3},
		{projection.Active, "activated", 4, 4},
		{projection.Draining, "converged", 5, 5},
		{projection.Draining, "drained; revoking removed shards", 6, 6},
		{projection.Deprecated, "completed", 6, 7},
		{projection.Deprecated, "retired: streams deleted", 6, 7},
	}
	if len(r.Changes) != len(want) {
		t.Fatalf("%d changes, want %d: %+v", len(r.Changes), len(want), r.Changes)
	}
	prev := events.ZeroID
	for i, w := range want {
		c := r.Changes[i]
		if c.State != w.state || c.Phase != w.phase || c.GroupEpoch != w.g || c.MetadataVersion != w.mv {
			t.Errorf("change %d = %s/%s g%d mv%d, want %s/%s g%d mv%d", i, c.State, c.Phase, c.GroupEpoch, c.MetadataVersion, w.state, w.phase, w.g, w.mv)
		}
		if cmp, _ := events.CompareIDs(c.EventID, prev); cmp <= 0 {
			t.Errorf("change %d event %s not after %s", i, c.EventID, prev)
		}
		prev = c.EventID
	}
	if r.Rollback.Requested || r.Rollback.Eligible {
		t.Errorf("rollback = %+v, want not requested and not eligible", r.Rollback)
	}
	if r.Retirement == nil || !slices.Equal(r.Retirement.StreamKeys, []string{"orders:2", "orders:3"}) || r.Retirement.Kept {
		t.Errorf("retirement = %+v", r.Retirement)
	}
}

func TestHistoryRecordsRollback(t *testing.T) {
	b := scaleOutLog(t)
	rb := b.add(billing, "alice", &events.ReshardingRolledBack{ReshardingID: "reshard-0002", Policy: "metadata", State: projection.RolledBack, ShardCount: 4, AssignableCount: 4, RequestedBy: "alice", Reason: "wrong group", Epochs: events.Epochs{GroupEpoch: 4, MetadataVersion: 4}})
	tl, err := replay.History(context.Background(), b.log, billing)
	if err != nil {
		t.Fatal(err)
	}
	r := tl.Reshardings[0]
	if !r.Rollback.Requested || r.Rollback.EventID != rb || r.Rollback.Policy != "metadata" || r.Rollback.Reason != "wrong group" || r.State != projection.RolledBack {
		t.Fatalf("rollback = %+v, state %s", r.Rollback, r.State)
	}
	if last := r.Changes[len(r.Changes)-1]; last.State != projection.RolledBack || last.EventID != rb {
		t.Fatalf("last change = %+v", last)
	}
}

func TestHistoryOfDeletedGroupKeepsReshardings(t *testing.T) {
	b := scaleInLog(t)
	b.add(billing, "alice", &events.GroupDeleted{RequestedBy: "alice", Reason: "gone"})
	tl, err := replay.History(context.Background(), b.log, billing)
	if err != nil {
		t.Fatal(err)
	}
	if !tl.Deleted || len(tl.Reshardings) != 1 || len(tl.Reshardings[0].Changes) != 7 {
		t.Fatalf("timeline = %+v", tl)
	}
}

func TestHistoryUnknownGroup(t *testing.T) {
	_, err := replay.History(context.Background(), scaleInLog(t).log, projection.GroupKey{StreamPrefix: "x", ConsumerGroup: "y"})
	if !errors.Is(err, replay.ErrGroupNotFound) {
		t.Fatalf("err = %v, want ErrGroupNotFound", err)
	}
}

func TestDiffShowsShardCountAndMemberChanges(t *testing.T) {
	b := scaleInLog(t)
	d, err := replay.Diff(context.Background(), b.log, billing, b.marks["m1"], b.marks["end"])
	if err != nil {
		t.Fatal(err)
	}
	if d.FromID != b.marks["m1"] || d.ToID != b.marks["end"] {
		t.Errorf("range %s..%s", d.FromID, d.ToID)
	}
	if d.ShardCount == nil || *d.ShardCount != (replay.Change[int]{From: 4, To: 2}) {
		t.Errorf("shard count change = %v, want 4 -> 2", d.ShardCount)
	}
	if d.AssignableShardCount == nil || *d.AssignableShardCount != (replay.Change[int]{From: 4, To: 2}) {
		t.Errorf("assignable change = %v, want 4 -> 2", d.AssignableShardCount)
	}
	if d.GroupEpoch == nil || *d.GroupEpoch != (replay.Change[int64]{From: 2, To: 6}) {
		t.Errorf("group epoch change = %v", d.GroupEpoch)
	}
	if d.MetadataVersion == nil || *d.MetadataVersion != (replay.Change[int64]{From: 2, To: 7}) {
		t.Errorf("metadata version change = %v", d.MetadataVersion)
	}
	if len(d.MembersAdded) != 1 || d.MembersAdded[0] != (replay.MemberSummary{MemberID: "m2", State: projection.MemberActive}) {
		t.Errorf("members added = %+v, want m2", d.MembersAdded)
	}
	if len(d.MembersRemoved) != 0 {
		t.Errorf("members removed = %+v", d.MembersRemoved)
	}
	targets := map[string][]int{}
	for _, tc := range d.Targets {
		targets[tc.MemberID] = tc.To
	}
	if !slices.Equal(targets["m1"], []int{0}) || !slices.Equal(targets["m2"], []int{1}) {
		t.Errorf("targets = %v", targets)
	}
	if len(d.Reshardings) != 1 || !d.Reshardings[0].New || d.Reshardings[0].State.To != projection.Deprecated || len(d.Reshardings[0].Changes) != 7 {
		t.Errorf("reshardings = %+v", d.Reshardings)
	}
	wantEvents := int(after(t, b.marks["end"]) - after(t, b.marks["m1"])) // all of billing
	if d.Events != wantEvents {
		t.Errorf("events = %d, want %d", d.Events, wantEvents)
	}
	var text bytes.Buffer
	if err := d.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"shard count: 4 -> 2", "member added: m2 (ACTIVE)", "target of m1: [0 1 2 3] -> [0] (-1 -2 -3)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
}

func TestDiffOfUnchangedGroupIsEmpty(t *testing.T) {
	b := scaleInLog(t)
	d, err := replay.Diff(context.Background(), b.log, ledger, b.marks["m1"], "")
	if err != nil {
		t.Fatal(err)
	}
	if !d.Empty() || d.Events != 0 || d.ToID != b.marks["end"] {
		t.Fatalf("diff = %+v", d)
	}
}

func TestDiffRejectsBadRanges(t *testing.T) {
	b := scaleInLog(t)
	ctx := context.Background()
	if _, err := replay.Diff(ctx, b.log, billing, "10-0", "5-0"); !errors.Is(err, replay.ErrInvalidArgument) {
		t.Errorf("reversed range: err = %v", err)
	}
	if _, err := replay.Diff(ctx, b.log, billing, "x", ""); !errors.Is(err, replay.ErrInvalidArgument) {
		t.Errorf("malformed id: err = %v", err)
	}
	if _, err := replay.Diff(ctx, b.log, projection.GroupKey{StreamPrefix: "x", ConsumerGroup: "y"}, "", ""); !errors.Is(err, replay.ErrGroupNotFound) {
		t.Errorf("unknown group: err = %v", err)
	}
}

func TestRollbackPlan(t *testing.T) {
	tests := []struct {
		name         string
		build        func(testing.TB) *logBuilder
		id           string
		eligible     bool
		wantBefore   int // shard count before
		wantAfter    int
		wantSentence []string
	}{
		{
			name: "completed and retired scale-in", build: scaleInLog, id: "reshard-0001", eligible: false, wantBefore: 4, wantAfter: 2,
			wantSentence: []string{
				"Resharding reshard-0001 scaled orders/billing in from 4 to 2 shards; the log records it as DEPRECATED.",
				"Not eligible for rollback: resharding completed (DEPRECATED); start a new resharding instead. The steps below are what undoing it by hand, or by a new resharding, would involve.",
				"Restore the routed shard count from 2 to 4: shards 2..3 go back into producer routing.",
				"Restore the assignable shard count from 2 to 4: shards 2..3 are assigned to members again.",
				"Shards 2..3 were revoked from member m2 (2, 3) after the drain; they come back through the restored targets.",
				"Recreate the deleted shard streams orders:2 and orders:3 and their consumer groups before routing to them: retirement deleted them (they had been proven drained).",
				"Restore the target assignment of member m1 from [0] to [0 1].",
				"Restore the target assignment of member m2 from [1] to [2 3].",
				"Epochs are not restored: the resharding moved the group epoch from 3 to 6 and the metadata version from 3 to 7; a rollback bumps them again (from 6 and 7 now) so members fetch the old layout.",
			},
		},
		{
			name: "active scale-out", build: scaleOutLog, id: "reshard-0002", eligible: true, wantBefore: 4, wantAfter: 8,
			wantSentence: []string{
				"Restore the routed shard count from 8 to 4: remove shards 4..7 from producer routing.",
				"Revoke shards 4..7 from member m1 (4, 5, 6, 7) and wait until they release them.",
				"Retire the new shard streams orders:4, orders:5, orders:6 and orders:7 once nobody holds them (delete them, or keep them by policy).",
				"Restore the target assignment of member m1 from [0 1 2 3 4 5 6 7] to [0 1 2 3].",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.build(t)
			p, err := replay.RollbackPlan(context.Background(), b.log, billing, tt.id)
			if err != nil {
				t.Fatal(err)
			}
			if p.Rollback.Eligible != tt.eligible {
				t.Errorf("eligible = %v (%s), want %v", p.Rollback.Eligible, p.Rollback.Reason, tt.eligible)
			}
			if p.Before.ShardCount != tt.wantBefore || p.After.ShardCount != tt.wantAfter {
				t.Errorf("shard count before %d after %d, want %d and %d", p.Before.ShardCount, p.After.ShardCount, tt.wantBefore, tt.wantAfter)
			}
			if p.Diff.ShardCount == nil || p.Diff.ShardCount.From != tt.wantBefore || p.Diff.ShardCount.To != tt.wantAfter {
				t.Errorf("diff shard count = %v", p.Diff.ShardCount)
			}
			if p.LastEventID != b.marks["end"] && tt.id == "reshard-0001" {
				t.Errorf("last event = %s, want %s", p.LastEventID, b.marks["end"])
			}
			for _, s := range tt.wantSentence {
				if !slices.Contains(p.Undo, s) {
					t.Errorf("missing sentence %q in:\n%s", s, strings.Join(p.Undo, "\n"))
				}
			}
		})
	}
}

func TestRollbackPlanBeforeIsTheEntryBeforePreparing(t *testing.T) {
	b := scaleInLog(t)
	p, err := replay.RollbackPlan(context.Background(), b.log, billing, "reshard-0001")
	if err != nil {
		t.Fatal(err)
	}
	if p.Before.LastID != b.marks["stable"] {
		t.Errorf("before at %s, want %s", p.Before.LastID, b.marks["stable"])
	}
	if after(t, p.FirstEventID) != after(t, b.marks["stable"])+1 {
		t.Errorf("first event %s does not follow %s", p.FirstEventID, b.marks["stable"])
	}
}

func after(tb testing.TB, id string) uint64 {
	tb.Helper()
	p, err := events.ParseID(id)
	if err != nil {
		tb.Fatal(err)
	}
	return p.Ms
}

func TestRollbackPlanUnknownResharding(t *testing.T) {
	_, err := replay.RollbackPlan(context.Background(), scaleInLog(t).log, billing, "reshard-nope")
	if !errors.Is(err, replay.ErrReshardingNotFound) {
		t.Fatalf("err = %v, want ErrReshardingNotFound", err)
	}
}

func TestVerify(t *testing.T) {
	ctx := context.Background()
	b := scaleInLog(t)

	t.Run("no snapshot", func(t *testing.T) {
		res, err := replay.Verify(ctx, b.log, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !res.Match || res.Entries != b.entryCount() || res.LastID != b.marks["end"] || res.Snapshot != nil {
			t.Fatalf("result = %+v", res)
		}
	})
	t.Run("snapshot in the middle", func(t *testing.T) {
		st, _ := mustStateAt(t, b.log, replay.Point{UntilID: b.marks["activated"]})
		res, err := replay.Verify(ctx, b.log, mustSnapshot(t, st))
		if err != nil {
			t.Fatal(err)
		}
		if !res.Match || res.Snapshot == nil || !res.Snapshot.Match || res.Snapshot.LastID != b.marks["activated"] || res.Snapshot.TailEntries != b.entryCount()-int(after(t, b.marks["activated"])) {
			t.Fatalf("result = %+v snapshot %+v", res, res.Snapshot)
		}
	})
	t.Run("snapshot of another history", func(t *testing.T) {
		// The same log, except that m2 joined under another name.
		other := newLogBuilder(t)
		for _, e := range b.log.Entries() {
			rec, err := events.Decode(e.ID, e.Data)
			if err != nil {
				t.Fatal(err)
			}
			if j, ok := rec.Event.(*events.MemberJoined); ok && j.MemberID == "m2" {
				j.MemberName = "impostor"
			}
			other.next = rec.Time
			other.add(projection.KeyOf(rec), rec.Actor, rec.Event)
		}
		st, _ := mustStateAt(t, other.log, replay.Point{UntilID: b.marks["activated"]})
		res, err := replay.Verify(ctx, b.log, mustSnapshot(t, st))
		if err != nil {
			t.Fatal(err)
		}
		if res.Match || res.Snapshot.Match {
			t.Fatalf("result = %+v, want a mismatch", res)
		}
		want := []replay.GroupDifference{{StreamPrefix: "orders", ConsumerGroup: "billing", What: "state differs"}}
		if !slices.Equal(res.Snapshot.Differences, want) {
			t.Fatalf("differences = %+v, want %+v", res.Snapshot.Differences, want)
		}
	})
	t.Run("unreadable snapshot", func(t *testing.T) {
		res, err := replay.Verify(ctx, b.log, []byte("garbage"))
		if err != nil {
			t.Fatal(err)
		}
		if res.Match || res.Snapshot.Error == "" {
			t.Fatalf("result = %+v", res)
		}
	})
	t.Run("snapshot beyond the log", func(t *testing.T) {
		longer := scaleInLog(t)
		longer.add(ledger, "bob", &events.GroupDeleted{RequestedBy: "bob", Reason: "done"})
		st, _ := mustStateAt(t, longer.log, replay.Point{})
		res, err := replay.Verify(ctx, b.log, mustSnapshot(t, st))
		if err != nil {
			t.Fatal(err)
		}
		if res.Match || len(res.Problems) == 0 || !strings.Contains(res.Problems[0], "after the log's last entry") {
			t.Fatalf("result = %+v", res)
		}
	})
}

func TestVerifyNamesCorruptEntry(t *testing.T) {
	b := scaleInLog(t)
	bad := b.addRaw([]byte{0xc1, 0xff, 0x00, 0x13})
	b.add(ledger, "bob", &events.GroupDeleted{RequestedBy: "bob"})
	_, err := replay.Verify(context.Background(), b.log, nil)
	var de *events.DecodeError
	if !errors.As(err, &de) || de.ID != bad {
		t.Fatalf("err = %v, want a DecodeError for %s", err, bad)
	}
	if !strings.Contains(err.Error(), bad) {
		t.Fatalf("error %q does not name %s", err, bad)
	}
}

func TestEventsFilter(t *testing.T) {
	b := scaleInLog(t)
	tests := []struct {
		name string
		f    replay.Filter
		want int
		ok   func(replay.EventRecord) bool
	}{
		{name: "everything", f: replay.Filter{}, want: b.entryCount()},
		{name: "one group", f: replay.Filter{StreamPrefix: "payments"}, want: 1, ok: func(r replay.EventRecord) bool { return r.ConsumerGroup == "ledger" }},
		{name: "namespace", f: replay.Filter{Types: []string{"resharding.*"}}, want: 7, ok: func(r replay.EventRecord) bool { return strings.HasPrefix(r.Type, "resharding.") }},
		{name: "exact types", f: replay.Filter{Types: []string{"member.joined", "group.created"}}, want: 4},
		{name: "id range", f: replay.Filter{FromID: "3-0", ToID: "5-0"}, want: 3},
		{name: "time range", f: replay.Filter{Since: fixtureStart.Add(2 * time.Second), Until: fixtureStart.Add(4 * time.Second)}, want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			for r, err := range replay.Events(context.Background(), b.log, tt.f) {
				if err != nil {
					t.Fatal(err)
				}
				if tt.ok != nil && !tt.ok(r) {
					t.Errorf("unexpected record %+v", r)
				}
				n++
			}
			if n != tt.want {
				t.Fatalf("%d records, want %d", n, tt.want)
			}
		})
	}
}

func TestEventsRecordJSON(t *testing.T) {
	b := scaleInLog(t)
	for r, err := range replay.Events(context.Background(), b.log, replay.Filter{Types: []string{"resharding.preparing"}}) {
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := r.Event.(*events.ReshardingPreparing); !ok {
			t.Fatalf("event is %T", r.Event)
		}
		want := `{"reshardingId":"reshard-0001","fromShardCount":4,"toShardCount":2,"requestedBy":"alice","reason":"traffic dropped"}`
		if string(r.Payload) != want {
			t.Fatalf("payload %s, want %s", r.Payload, want)
		}
	}
}

func TestEventsErrors(t *testing.T) {
	b := scaleInLog(t)
	bad := b.addRaw([]byte("garbage"))
	t.Run("corrupt entry ends the iteration with its id", func(t *testing.T) {
		n := 0
		var last error
		for _, err := range replay.Events(context.Background(), b.log, replay.Filter{Types: []string{"group.deleted"}}) {
			n++
			last = err
		}
		var de *events.DecodeError
		if n != 1 || !errors.As(last, &de) || de.ID != bad {
			t.Fatalf("%d yields, last error %v; want one DecodeError for %s", n, last, bad)
		}
	})
	for name, f := range map[string]replay.Filter{
		"unknown type":    {Types: []string{"resharding.exploded"}},
		"unknown pattern": {Types: []string{"nothing.*"}},
		"reversed ids":    {FromID: "5-0", ToID: "3-0"},
		"reversed times":  {Since: fixtureStart.Add(time.Hour), Until: fixtureStart},
	} {
		t.Run(name, func(t *testing.T) {
			for _, err := range replay.Events(context.Background(), b.log, f) {
				if !errors.Is(err, replay.ErrInvalidArgument) {
					t.Fatalf("err = %v, want ErrInvalidArgument", err)
				}
			}
		})
	}
}

func TestExportImportRoundTrip(t *testing.T) {
	ctx := context.Background()
	b := scaleInLog(t)
	var file bytes.Buffer
	n, err := replay.Export(ctx, b.log, &file)
	if err != nil || n != b.entryCount() {
		t.Fatalf("Export = %d, %v", n, err)
	}
	l, err := replay.Import(bytes.NewReader(file.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	got, want := l.Entries(), b.log.Entries()
	if !slices.EqualFunc(got, want, func(a, b events.Entry) bool { return a.ID == b.ID && bytes.Equal(a.Data, b.Data) }) {
		t.Fatal("imported entries differ from the exported log")
	}
	stA, _ := mustStateAt(t, b.log, replay.Point{})
	stB, _ := mustStateAt(t, l, replay.Point{})
	if !bytes.Equal(mustCanonical(t, stA), mustCanonical(t, stB)) {
		t.Fatal("imported log folds to a different state")
	}
}

func TestExportKeepsCorruptEntries(t *testing.T) {
	b := scaleInLog(t)
	bad := b.addRaw([]byte("garbage"))
	var file bytes.Buffer
	if _, err := replay.Export(context.Background(), b.log, &file); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(file.String(), `"decodeError"`) {
		t.Fatal("export does not flag the corrupt entry")
	}
	l, err := replay.Import(&file)
	if err != nil {
		t.Fatal(err)
	}
	_, err = replay.Verify(context.Background(), l, nil)
	var de *events.DecodeError
	if !errors.As(err, &de) || de.ID != bad {
		t.Fatalf("verify of the imported copy: %v, want DecodeError for %s", err, bad)
	}
}

func TestImportRejectsBadFiles(t *testing.T) {
	for name, text := range map[string]string{
		"not json":       "hello\n",
		"missing data":   `{"id":"1-0"}` + "\n",
		"bad base64":     `{"id":"1-0","data":"***"}` + "\n",
		"bad id":         `{"id":"one","data":""}` + "\n",
		"ids not rising": `{"id":"2-0","data":""}` + "\n" + `{"id":"1-0","data":""}` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := replay.Import(strings.NewReader(text)); !errors.Is(err, replay.ErrBadFile) {
				t.Fatalf("err = %v, want ErrBadFile", err)
			}
		})
	}
}

// TestFixtureFile checks testdata/scale-in.jsonl, the scale-in fixture as an
// export file (cmd/replay's tests run the CLI on it): it is an old log that must
// keep decoding and folding, and it must still hold the fixture builder's
// events. Its bytes are frozen when written (-update rewrites it): encodings of
// maps are not byte-stable from run to run, so the entries are compared in
// canonical form.
func TestFixtureFile(t *testing.T) {
	b := scaleInLog(t)
	if *update {
		var buf bytes.Buffer
		if _, err := replay.Export(context.Background(), b.log, &buf); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.FromSlash(fixtureFile), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(filepath.FromSlash(fixtureFile))
	if err != nil {
		t.Fatalf("%v (run go test ./replay -update to create it)", err)
	}
	defer f.Close()
	l, err := replay.Import(f)
	if err != nil {
		t.Fatal(err)
	}
	got, want := l.Entries(), b.log.Entries()
	if len(got) != len(want) {
		t.Fatalf("%s holds %d entries, the fixture %d; run go test ./replay -update if the change is intended", fixtureFile, len(got), len(want))
	}
	for i := range got {
		if got[i].ID != want[i].ID || !bytes.Equal(mustCanonicalBytes(t, got[i].Data), mustCanonicalBytes(t, want[i].Data)) {
			t.Fatalf("entry %s of %s differs from the fixture; run go test ./replay -update if the change is intended", got[i].ID, fixtureFile)
		}
	}
	res, err := replay.Verify(context.Background(), l, nil)
	if err != nil || !res.Match {
		t.Fatalf("verify fixture: %+v, %v", res, err)
	}
	stFile, _ := mustStateAt(t, l, replay.Point{})
	stBuilt, _ := mustStateAt(t, b.log, replay.Point{})
	if !bytes.Equal(mustCanonical(t, stFile), mustCanonical(t, stBuilt)) {
		t.Fatal("the fixture file folds to another state than the fixture builder's log")
	}
}

// mustCanonicalBytes renders one entry so that two encodings of the same event
// compare equal: the decoded record, its payload normalised through a map.
func mustCanonicalBytes(tb testing.TB, data []byte) []byte {
	tb.Helper()
	rec, err := events.Decode("1-0", data)
	if err != nil {
		tb.Fatal(err)
	}
	r, err := replay.NewEventRecord(rec)
	if err != nil {
		tb.Fatal(err)
	}
	// Payload JSON keeps the encoded map order; normalise it through a map.
	var payload any
	if err := json.Unmarshal(r.Payload, &payload); err != nil {
		tb.Fatal(err)
	}
	r.Payload = nil
	out, err := json.Marshal(struct {
		R replay.EventRecord
		P any
	}{r, payload})
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
