package replay

import (
	"context"
	"fmt"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Snapshots are the snapshots the coordinator keeps of its projection, each
// under the id of the last entry it includes (commands.SnapshotStore).
type Snapshots interface {
	// Kept lists the kept snapshots' last ids, newest first.
	Kept(ctx context.Context) ([]string, error)
	// LoadAt returns the kept snapshot after lastID (nil, nil when not kept).
	LoadAt(ctx context.Context, lastID string) ([]byte, error)
}

// StateAtID folds the state after entry until (inclusive; or after the last
// record of the decision it is inside, decisionEnd) starting from the
// newest kept snapshot at or before it, so its cost depends on the distance to
// that snapshot, not on the length of the log. A snapshot that does not
// restore is passed over. When no kept snapshot is at or before until, the
// log is folded from zero; on a log trimmed at its head (trimmedTo after
// ZeroID) that is impossible, and the answer is ErrTrimmed naming the oldest
// point that can be replayed. It returns the state and the snapshot it
// started from ("" for zero).
func StateAtID(ctx context.Context, log events.Log, snaps Snapshots, trimmedTo, until string) (*projection.State, string, error) {
	if _, err := parseUserID("until id", until); err != nil {
		return nil, "", err
	}
	if trimmedTo == "" {
		trimmedTo = events.ZeroID
	}
	last, err := log.LastID(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("last id of log: %w", err)
	}
	if until, err = decisionEnd(ctx, log, until, last); err != nil {
		return nil, "", err
	}
	var ids []string
	if snaps != nil {
		var err error
		if ids, err = snaps.Kept(ctx); err != nil {
			return nil, "", fmt.Errorf("list kept snapshots: %w", err)
		}
	}
	oldest := ""
	for _, id := range ids { // newest first
		if c, err := events.CompareIDs(id, trimmedTo); err != nil || c < 0 {
			continue // its tail was trimmed
		}
		oldest = id
		if c, _ := events.CompareIDs(id, until); c > 0 {
			continue
		}
		data, err := snaps.LoadAt(ctx, id)
		if err != nil {
			return nil, "", fmt.Errorf("load snapshot %s: %w", id, err)
		}
		if data == nil {
			continue
		}
		st, err := projection.Restore(data)
		if err != nil || st.LastID() != id {
			continue
		}
		if _, err := projection.Fold(ctx, log, st, projection.FoldOptions{Until: until}); err != nil {
			return nil, "", err
		}
		return st, id, nil
	}
	if trimmedTo != events.ZeroID {
		if oldest == "" {
			return nil, "", fmt.Errorf("%w: the log was trimmed up to %s and no kept snapshot reaches that point: no state can be replayed", ErrTrimmed, trimmedTo)
		}
		return nil, "", fmt.Errorf("%w: the state at %s can no longer be replayed; the oldest replayable id is %s (the oldest kept snapshot). The audit history still lists the resharding and admin events before it", ErrTrimmed, until, oldest)
	}
	st := projection.New()
	if _, err := projection.Fold(ctx, log, st, projection.FoldOptions{Until: until}); err != nil {
		return nil, "", err
	}
	return st, "", nil
}
