package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/replay"
)

// historyType is what the coordinator's trim keeps in the archive
// (commands.ArchivedType): everything but membership.
func historyType(typ string) bool {
	return !strings.HasPrefix(typ, "member.") && !strings.HasPrefix(typ, "assignment.")
}

// trimAt is b's log as the coordinator leaves it after trimming behind a
// snapshot taken at mark: the log from that entry on, the archive of the
// history before it, and the snapshot (plus any extra kept snapshots).
func trimAt(tb testing.TB, b *logBuilder, mark string, extra ...[]byte) *replay.TrimmedLog {
	tb.Helper()
	base := b.marks[mark]
	var head, tail, archive []events.Entry
	for _, e := range b.log.Entries() {
		if c, _ := events.CompareIDs(e.ID, base); c < 0 {
			head = append(head, e)
			rec, err := events.Decode(e.ID, e.Data)
			if err != nil || historyType(rec.Type) {
				archive = append(archive, e)
			}
			continue
		}
		tail = append(tail, e)
	}
	logPart, err := events.LoadEntries(tail)
	if err != nil {
		tb.Fatal(err)
	}
	archPart, err := events.LoadEntries(archive)
	if err != nil {
		tb.Fatal(err)
	}
	st, _ := mustStateAt(tb, b.log, replay.Point{UntilID: base})
	t, err := replay.NewTrimmedLog(logPart, archPart, head[len(head)-1].ID, append([][]byte{mustSnapshot(tb, st)}, extra...))
	if err != nil {
		tb.Fatal(err)
	}
	if t.BaseID() != base {
		tb.Fatalf("base = %q, want the snapshot at %s", t.BaseID(), base)
	}
	return t
}

func TestTrimmedLogStateAt(t *testing.T) {
	b := scaleInLog(t)
	tr := trimAt(t, b, "activated")
	for _, mark := range []string{"activated", "drained", "end"} {
		t.Run("at "+mark, func(t *testing.T) {
			want, _ := mustStateAt(t, b.log, replay.Point{UntilID: b.marks[mark]})
			got, last := mustStateAt(t, tr, replay.Point{UntilID: b.marks[mark]})
			if last != b.marks[mark] || !bytes.Equal(mustCanonical(t, got), mustCanonical(t, want)) {
				t.Fatalf("state at %s from the snapshot (last %s) differs from the fold from zero", b.marks[mark], last)
			}
		})
	}
	t.Run("the end by default", func(t *testing.T) {
		want, _ := mustStateAt(t, b.log, replay.Point{})
		got, _ := mustStateAt(t, tr, replay.Point{})
		if !bytes.Equal(mustCanonical(t, got), mustCanonical(t, want)) {
			t.Fatal("state at the end differs")
		}
	})
	t.Run("before the snapshot", func(t *testing.T) {
		_, _, err := replay.StateAt(context.Background(), tr, replay.Point{UntilID: b.marks["stable"]})
		if !errors.Is(err, replay.ErrTrimmed) || !strings.Contains(err.Error(), b.marks["activated"]) {
			t.Fatalf("err = %v, want ErrTrimmed naming the oldest replayable id %s", err, b.marks["activated"])
		}
	})
	t.Run("at a time before the snapshot", func(t *testing.T) {
		_, _, err := replay.StateAt(context.Background(), tr, replay.Point{At: fixtureStart.Add(5e9)})
		if !errors.Is(err, replay.ErrTrimmed) {
			t.Fatalf("err = %v, want ErrTrimmed", err)
		}
	})
	t.Run("no snapshot reaches the trim point", func(t *testing.T) {
		none, err := replay.NewTrimmedLog(events.NewMemLog(), events.NewMemLog(), "5-0", [][]byte{[]byte("not a snapshot")})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := replay.StateAt(context.Background(), none, replay.Point{}); !errors.Is(err, replay.ErrTrimmed) {
			t.Fatalf("err = %v, want ErrTrimmed", err)
		}
	})
}

// The oldest snapshot at or after the trim point is the base, whatever the order.
func TestTrimmedLogBaseIsTheOldestUsableSnapshot(t *testing.T) {
	b := scaleInLog(t)
	end, _ := mustStateAt(t, b.log, replay.Point{})
	early, _ := mustStateAt(t, b.log, replay.Point{UntilID: b.marks["m1"]}) // behind the trim point
	tr := trimAt(t, b, "activated", mustSnapshot(t, end), mustSnapshot(t, early))
	if tr.BaseID() != b.marks["activated"] {
		t.Fatalf("base %s, want %s", tr.BaseID(), b.marks["activated"])
	}
}

func TestTrimmedLogEventsListTheArchive(t *testing.T) {
	b := scaleInLog(t)
	tr := trimAt(t, b, "drained")
	var want []string
	for r, err := range replay.Events(context.Background(), b.log, replay.Filter{}) {
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := events.CompareIDs(r.ID, b.marks["drained"]); c >= 0 || historyType(r.Type) {
			want = append(want, r.ID+" "+r.Type)
		}
	}
	var got []string
	for r, err := range replay.Events(context.Background(), tr, replay.Filter{}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.ID+" "+r.Type)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events of the trimmed log:\n%s\nwant the archived history, then the log:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestTrimmedLogHistory(t *testing.T) {
	t.Run("resharding held by the snapshot", func(t *testing.T) {
		b := scaleInLog(t)
		full, err := replay.History(context.Background(), b.log, billing)
		if err != nil {
			t.Fatal(err)
		}
		got, err := replay.History(context.Background(), trimAt(t, b, "drained"), billing)
		if err != nil {
			t.Fatal(err)
		}
		fj, _ := json.Marshal(full)
		gj, _ := json.Marshal(got)
		if !bytes.Equal(fj, gj) {
			t.Fatalf("history of the trimmed log:\n%s\nwant:\n%s", gj, fj)
		}
	})
	t.Run("resharding of a group deleted before the snapshot", func(t *testing.T) {
		b := scaleInLog(t)
		b.add(billing, "alice", &events.GroupDeleted{RequestedBy: "alice", Reason: "gone"})
		b.add(billing, "alice", &events.GroupCreated{ShardCount: 2, Provisioned: true, RequestedBy: "alice"})
		b.mark("recreated")
		b.add(billing, "m1", &events.MemberJoined{MemberID: "m1", MemberName: "billing-1", MaxConcurrency: 4, Epochs: events.Epochs{GroupEpoch: 2, MetadataVersion: 2}})
		full, err := replay.History(context.Background(), b.log, billing)
		if err != nil {
			t.Fatal(err)
		}
		got, err := replay.History(context.Background(), trimAt(t, b, "recreated"), billing)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Reshardings) != 1 || len(full.Reshardings) != 1 {
			t.Fatalf("%d reshardings from the archive, %d from the full log; want 1", len(got.Reshardings), len(full.Reshardings))
		}
		g, f := got.Reshardings[0], full.Reshardings[0]
		if g.ReshardingID != f.ReshardingID || g.State != f.State || len(g.Changes) != len(f.Changes) || g.Rollback.EligibilityReason != f.Rollback.EligibilityReason {
			t.Fatalf("resharding from the archive = %+v\nwant %+v", g, f)
		}
		// Epochs may be lower (membership was not archived); the steps are the same.
		for i := range f.Changes {
			if g.Changes[i].EventID != f.Changes[i].EventID || g.Changes[i].State != f.Changes[i].State || g.Changes[i].Phase != f.Changes[i].Phase || g.Changes[i].Actor != f.Changes[i].Actor {
				t.Errorf("change %d = %+v, want %+v", i, g.Changes[i], f.Changes[i])
			}
		}
	})
}

func TestTrimmedLogDiffAndRollbackPlan(t *testing.T) {
	b := scaleInLog(t)
	tr := trimAt(t, b, "drained")
	if _, err := replay.Diff(context.Background(), tr, billing, b.marks["stable"], ""); !errors.Is(err, replay.ErrTrimmed) {
		t.Errorf("Diff from before the snapshot: %v, want ErrTrimmed", err)
	}
	d, err := replay.Diff(context.Background(), tr, billing, "", "")
	if err != nil {
		t.Fatal(err)
	}
	want, err := replay.Diff(context.Background(), b.log, billing, b.marks["drained"], "")
	if err != nil {
		t.Fatal(err)
	}
	dj, _ := json.Marshal(d)
	wj, _ := json.Marshal(want)
	if !bytes.Equal(dj, wj) {
		t.Errorf("Diff from the start of a trimmed log:\n%s\nwant the diff from its snapshot:\n%s", dj, wj)
	}
	if _, err := replay.RollbackPlan(context.Background(), tr, billing, "reshard-0001"); !errors.Is(err, replay.ErrTrimmed) {
		t.Errorf("RollbackPlan of a resharding begun before the snapshot: %v, want ErrTrimmed", err)
	}
	p, err := replay.RollbackPlan(context.Background(), trimAt(t, b, "stable"), billing, "reshard-0001")
	if err != nil {
		t.Fatal(err)
	}
	fp, err := replay.RollbackPlan(context.Background(), b.log, billing, "reshard-0001")
	if err != nil {
		t.Fatal(err)
	}
	pj, _ := json.Marshal(p)
	fj, _ := json.Marshal(fp)
	if !bytes.Equal(pj, fj) {
		t.Errorf("RollbackPlan after the snapshot:\n%s\nwant:\n%s", pj, fj)
	}
}

func TestTrimmedLogVerify(t *testing.T) {
	b := scaleInLog(t)
	tr := trimAt(t, b, "activated")
	end, _ := mustStateAt(t, b.log, replay.Point{})
	res, err := replay.Verify(context.Background(), tr, mustSnapshot(t, end))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Match || res.FromSnapshot != b.marks["activated"] || res.TrimmedTo == "" || res.Snapshot == nil || !res.Snapshot.Match {
		t.Fatalf("verify = %+v", res)
	}
	full, err := replay.Verify(context.Background(), b.log, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Digest != full.Digest {
		t.Errorf("digest from the snapshot %s, from zero %s: the states differ", res.Digest, full.Digest)
	}
	var text bytes.Buffer
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "cannot be folded from zero") || !strings.Contains(text.String(), "from the snapshot at "+b.marks["activated"]) {
		t.Errorf("text does not say the fold started from the snapshot:\n%s", text.String())
	}
}
