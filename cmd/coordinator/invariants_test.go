package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// foldCheckingReshardings folds the whole log into a fresh projection and
// checks, after every event, the one-resharding-at-a-time invariant: no group
// ever has two unfinished reshardings (PREPARING, ACTIVE, DRAINING or
// ROLLING_BACK), a resharding is never requested while another one is active,
// and only the group's active resharding is ever activated. It returns the
// folded state.
func foldCheckingReshardings(tb testing.TB, ctx context.Context, log events.Log) *projection.State {
	tb.Helper()
	st := projection.New()
	var problems []string
	activeBefore := ""
	keyOf := func(rec events.Record) projection.GroupKey {
		return projection.GroupKey{StreamPrefix: rec.StreamPrefix, ConsumerGroup: rec.ConsumerGroup}
	}
	n, err := projection.Fold(ctx, log, st, projection.FoldOptions{
		Before: func(rec events.Record) {
			activeBefore = ""
			if g, ok := st.Group(keyOf(rec)); ok {
				activeBefore = g.ActiveResharding
			}
		},
		After: func(rec events.Record) {
			g, ok := st.Group(keyOf(rec))
			if !ok {
				return
			}
			var open []string
			for _, m := range g.Reshardings {
				if !m.Terminal() {
					open = append(open, m.ReshardingID+" ("+m.State+")")
				}
			}
			if len(open) > 1 {
				problems = append(problems, fmt.Sprintf("after %s %s: group %s/%s has %d unfinished reshardings: %s",
					rec.ID, rec.Type, rec.StreamPrefix, rec.ConsumerGroup, len(open), strings.Join(open, ", ")))
			}
			switch ev := rec.Event.(type) {
			case *events.ReshardingPreparing:
				if activeBefore != "" {
					problems = append(problems, fmt.Sprintf("%s: resharding %s of %s/%s requested while %s was active",
						rec.ID, ev.ReshardingID, rec.StreamPrefix, rec.ConsumerGroup, activeBefore))
				}
			case *events.ReshardingActivated:
				if activeBefore != ev.ReshardingID {
					problems = append(problems, fmt.Sprintf("%s: resharding %s of %s/%s activated while the active one was %q",
						rec.ID, ev.ReshardingID, rec.StreamPrefix, rec.ConsumerGroup, activeBefore))
				}
			}
		},
	})
	if err != nil {
		tb.Fatalf("fold the log: %v", err)
	}
	if len(problems) > 0 {
		if len(problems) > 10 {
			problems = append(problems[:10], fmt.Sprintf("... and %d more", len(problems)-10))
		}
		tb.Fatalf("one resharding at a time, checked after each of %d events:\n%s", n, strings.Join(problems, "\n"))
	}
	return st
}
