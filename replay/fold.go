package replay

import (
	"context"
	"fmt"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// pageSize is how many entries one Read asks for.
const pageSize = 1000

// scan calls fn for every entry with an id after after and at most end, in log
// order, until fn returns false or an error. Callers pass as end the log's last id
// taken once at the start, so a log that keeps growing is read as of one moment.
func scan(ctx context.Context, log events.Log, after, end string, fn func(events.Entry) (bool, error)) error {
	endID, err := events.ParseID(end)
	if err != nil {
		return fmt.Errorf("end of log: %w", err)
	}
	pos := after
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		entries, err := log.Read(ctx, pos, pageSize)
		if err != nil {
			return fmt.Errorf("read log after %s: %w", pos, err)
		}
		if len(entries) == 0 {
			return nil
		}
		for _, e := range entries {
			id, err := events.ParseID(e.ID)
			if err != nil {
				return fmt.Errorf("log entry %q: %w", e.ID, err)
			}
			if endID.Less(id) {
				return nil
			}
			more, err := fn(e)
			if err != nil || !more {
				return err
			}
			pos = e.ID
		}
	}
}

// folder folds a log into a projection through projection.Fold, the one
// fold the coordinator uses too, with hooks that let a question look at the
// state around chosen records; the end of the log is pinned when the folder is
// made, so a log that keeps growing is read as of one moment.
type folder struct {
	log events.Log
	st  *projection.State
	end string // the log's last id when the folder was made
	n   int    // entries applied by this folder
}

// newFolder starts folding into st (projection.New() for a fold from zero, or a
// restored snapshot) and pins the end of the log.
func newFolder(ctx context.Context, log events.Log, st *projection.State) (*folder, error) {
	end, err := log.LastID(ctx)
	if err != nil {
		return nil, fmt.Errorf("last id of log: %w", err)
	}
	return &folder{log: log, st: st, end: end}, nil
}

// foldOptions bounds one fold call and hooks into it. All fields are optional.
type foldOptions struct {
	// until stops after this id (inclusive), or after the last record of the
	// decision it is inside (decisionEnd), without decoding anything beyond.
	until string
	// stop is asked about each decoded record; true stops before applying it.
	stop func(events.Record) bool
	// before and after see each record around its Apply.
	before, after func(events.Record)
}

// fold applies the entries after the state's last id, within o's bounds. It can
// be called again to go on from where the previous call stopped.
func (f *folder) fold(ctx context.Context, o foldOptions) error {
	end := f.end
	if o.until != "" {
		c, err := events.CompareIDs(o.until, end)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		if c < 0 {
			if end, err = decisionEnd(ctx, f.log, o.until, f.end); err != nil {
				return err
			}
		}
	}
	n, err := projection.Fold(ctx, f.log, f.st, projection.FoldOptions{Until: end, Stop: o.stop, Before: o.before, After: o.after, PageSize: pageSize})
	f.n += n
	return err
}

// parseUserID checks an id given by the caller; a bad one is ErrInvalidArgument.
func parseUserID(what, id string) (events.ID, error) {
	p, err := events.ParseID(id)
	if err != nil {
		return events.ID{}, fmt.Errorf("%w: %s: %w", ErrInvalidArgument, what, err)
	}
	return p, nil
}

// reshardingOf returns the resharding id a record belongs to, if any.
func reshardingOf(ev events.Event) string {
	if s, ok := ev.(events.ReshardingStep); ok {
		return s.Resharding()
	}
	return ""
}
