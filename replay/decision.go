package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/rscoord/rsc/events"
)

// A replay to a point stops at the end of a decision. One decision's records
// are appended together, every one after the first marked as continuing it
// (events.Meta.Continues); the state between two of them was never anyone's
// (a scale-in's resharding.activated and the assignment.changed that follows it
// in the same decision: the group epoch moved, the assignment epoch not yet).
// A point inside a decision rounds forward to the decision's last record; the
// state says where it ended (its LastID). Entries of builds before the mark
// are each a decision of their own, and replay as they always did.

// decisionEnd returns the id of the last record of the decision that the last
// entry at or before until belongs to: until itself, or, when the entries after
// it continue that decision, the last of them (never past end, the pinned end
// of the log). An entry that does not decode ends the search: the fold reports
// it.
func decisionEnd(ctx context.Context, log events.Log, until, end string) (string, error) {
	if c, err := events.CompareIDs(until, end); err != nil || c >= 0 {
		return until, nil
	}
	// A point before the log's first entry (a trimmed log) belongs to no
	// decision the log holds: it stays where it is, and the caller refuses
	// it as before the trim point.
	first, err := log.Read(ctx, events.ZeroID, 1)
	if err != nil {
		return "", fmt.Errorf("read the log's first entry: %w", err)
	}
	if len(first) == 0 {
		return until, nil
	}
	if c, err := events.CompareIDs(until, first[0].ID); err != nil || c < 0 {
		return until, nil
	}
	at := until
	for {
		entries, err := log.Read(ctx, at, decisionPage)
		if err != nil {
			return "", fmt.Errorf("read log after %s: %w", at, err)
		}
		for _, e := range entries {
			if c, err := events.CompareIDs(e.ID, end); err != nil || c > 0 {
				return at, nil
			}
			if !continues(e) {
				return at, nil
			}
			at = e.ID
		}
		if len(entries) < decisionPage {
			return at, nil
		}
	}
}

// decisionPage is how many entries decisionEnd reads at once: most decisions
// write a few records.
const decisionPage = 16

// continues reports whether entry e continues the decision of the entry before
// it (a corrupt entry whose envelope was read says so too).
func continues(e events.Entry) bool {
	rec, err := events.Decode(e.ID, e.Data)
	if err == nil {
		return rec.Continues
	}
	var de *events.DecodeError
	return errors.As(err, &de) && de.Meta != nil && de.Meta.Continues
}
