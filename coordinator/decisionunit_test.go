package coordinator_test

import (
	"context"
	"testing"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/replay"
)

// TestReplayAtActivationOfScaleInEndsWithItsDecision: a scale-in's
// activation bumps the group epoch, and the same decision recomputes the
// target assignment (its assignment epoch). The writer marks every record of
// a decision after its first (events.Meta.Continues), so a replay asked for
// the state at resharding.activated rounds forward to the decision's end:
// before the mark it stopped between the two, where "assignmentEpoch 3 does
// not match groupEpoch 4" (the console's replay showed it).
func TestReplayAtActivationOfScaleInEndsWithItsDecision(t *testing.T) {
	h := newHoldHarness(t, 4, coordinator.Config{})
	a, b := &hmember{id: "a"}, &hmember{id: "b"}
	h.settle(a, b)
	to := 2
	if _, err := h.c.Scale(context.Background(), events.Meta{Actor: "test"}, simKey, commands.ScaleInput{TargetShardCount: &to, RequestedBy: "test", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	find := func() (int, []events.Record) {
		entries, err := h.log.Read(ctx, events.ZeroID, 0)
		if err != nil {
			t.Fatal(err)
		}
		recs := decoded(t, entries)
		for i, rec := range recs {
			if rec.Type == "resharding.activated" {
				return i, recs
			}
		}
		return -1, recs
	}
	at, recs := find()
	if at < 0 {
		h.c.Tick(ctx) // provisioning and activation, if the scale left them to the reconciler
		waitFor(t, "the scale-in activated", func() bool { at, recs = find(); return at >= 0 })
	}
	activated := recs[at]
	start, end := at, at
	for start > 0 && recs[start].Continues {
		start--
	}
	for end+1 < len(recs) && recs[end+1].Continues {
		end++
	}
	if end == at {
		t.Fatalf("no record continues the activation's decision (log %v)", typesOf(recs))
	}
	for _, rec := range recs[start : end+1] {
		if rec.Time != recs[start].Time || rec.RequestID != recs[start].RequestID {
			t.Fatalf("%s is in the decision of %s with time %v request %q, want %v %q", rec.Type, recs[start].Type, rec.Time, rec.RequestID, recs[start].Time, recs[start].RequestID)
		}
	}

	// Folded record by record (what a log without the marks replays), the
	// state right after the activation breaks the assignment invariant.
	st := projection.New()
	if _, err := projection.Fold(ctx, h.log, st, projection.FoldOptions{Until: activated.ID}); err != nil {
		t.Fatal(err)
	}
	if v := violations(t, st); len(v) == 0 {
		t.Fatal("the state between the activation's records shows no violation: this test would not see the rounding")
	}

	for name, replayAt := range map[string]func() (*projection.State, string){
		"StateAt": func() (*projection.State, string) {
			st, last, err := replay.StateAt(ctx, h.log, replay.Point{UntilID: activated.ID})
			if err != nil {
				t.Fatal(err)
			}
			return st, last
		},
		"StateAtID": func() (*projection.State, string) {
			st, _, err := replay.StateAtID(ctx, h.log, nil, "", activated.ID)
			if err != nil {
				t.Fatal(err)
			}
			return st, st.LastID()
		},
	} {
		st, last := replayAt()
		if last != recs[end].ID {
			t.Errorf("%s at %s ends at %s, want the decision's last record %s (%s)", name, activated.ID, last, recs[end].ID, recs[end].Type)
		}
		if v := violations(t, st); len(v) > 0 {
			t.Errorf("%s at resharding.activated: invariant violations %q", name, v)
		}
	}
}

func violations(t *testing.T, st *projection.State) []string {
	t.Helper()
	g, ok := st.Group(simKey)
	if !ok {
		t.Fatal("no group")
	}
	return projection.ViewAssignments(g).InvariantViolations
}
