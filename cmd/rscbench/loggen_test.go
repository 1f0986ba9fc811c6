package main

import (
	"context"
	"testing"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// TestGeneratedLogMarksDecisions: the generated log marks each decision's
// records after its first as the writer does (one time, one request each), and
// the state at the end of every decision breaks no assignment invariant:
// what a replay, which stops only at decision ends, can show.
func TestGeneratedLogMarksDecisions(t *testing.T) {
	ctx := context.Background()
	ml, _, err := generateLog(ctx, 8000, 7)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := ml.Read(ctx, events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}
	st := projection.New()
	var prev events.Record
	decisions, checked := 0, 0
	for i, e := range entries {
		rec, err := events.Decode(e.ID, e.Data)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Continues {
			if i == 0 || !rec.Time.Equal(prev.Time) || rec.RequestID != "" && prev.RequestID != "" && rec.RequestID != prev.RequestID {
				t.Fatalf("%s (%s) continues the decision of %s (%s) at another time or request", rec.ID, rec.Type, prev.ID, prev.Type)
			}
		} else {
			decisions++
		}
		if err := st.Apply(rec); err != nil {
			t.Fatal(err)
		}
		prev = rec
		if i+1 < len(entries) {
			next, err := events.Decode(entries[i+1].ID, entries[i+1].Data)
			if err != nil {
				t.Fatal(err)
			}
			if next.Continues {
				continue
			}
		}
		if i%3 != 0 {
			continue // a sample of the decision ends
		}
		checked++
		for _, g := range st.Groups() {
			if v := projection.ViewAssignments(g).InvariantViolations; len(v) > 0 {
				t.Fatalf("after %s (%s), the end of a decision: %s breaks %q", rec.ID, rec.Type, g.Key, v)
			}
		}
	}
	if decisions == len(entries) || checked == 0 {
		t.Fatalf("%d decisions in %d entries, %d checked: no decision of several records", decisions, len(entries), checked)
	}
	t.Logf("%d entries, %d decisions, %d decision ends checked", len(entries), decisions, checked)
}
