package projection

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rscoord/rsc/events"
)

// FoldOptions bounds one fold and hooks into it. Every field is optional.
type FoldOptions struct {
	// Until stops after this id (inclusive); entries beyond it are not decoded.
	Until string
	// Stop is asked about each decoded record; true stops before applying it.
	Stop func(events.Record) bool
	// Before and After see each record around its Apply.
	Before, After func(events.Record)
	// PageSize is how many entries one Read asks for (2000).
	PageSize int
	// Check, if set, runs after each page is read, with the id the page was
	// read after; an error stops the fold before that page is applied and is
	// returned. The replica checks with it that the log was not trimmed past
	// that id while the page was being read: a page read across a trim would
	// fold the entries after the gap onto a state that misses the ones in it.
	Check func(ctx context.Context, after string) error
}

// errStopped ends a fold that Stop or Until ended (not an error to the caller).
var errStopped = errors.New("fold stopped")

// RestoredError stops a fold before a log.restored entry that does not
// continue the fold's state: the state after the entry is the snapshot the
// restore stored under its id, which no fold of the entries before it gives
// (they are not the restored state's). The fold that meets one starts again
// from a snapshot at or after ID.
type RestoredError struct {
	ID   string // the log.restored entry
	From string // the position of the state it restored
	At   string // the fold's position before it
}

func (e *RestoredError) Error() string {
	return fmt.Sprintf("log entry %s restored the state at %s from its snapshot; a fold at %s cannot go past it (start from a snapshot at or after %s)", e.ID, e.From, e.At, e.ID)
}

// Fold is the one fold of the log: start-up, catch-up, the follower, the
// replay library and tools all bring a projection up to date through it. It
// applies every entry of log after st's last id, in order, with State.Apply,
// and returns how many it applied. An entry whose event cannot be read but
// whose envelope names a stream prefix quarantines that prefix
// (events.Confine, quarantine.go) and the fold goes on; any other
// undecodable entry stops it with the *events.DecodeError naming the entry,
// and a log.restored entry that does not continue the state before it with a
// *RestoredError.
//
// Reading, decoding and applying overlap: one goroutine reads the next page
// while a second decodes the previous one and the caller's goroutine applies,
// so a fold from Redis runs at about the speed of the slowest of the three
// rather than their sum.
func Fold(ctx context.Context, log events.Log, st *State, o FoldOptions) (int, error) {
	if o.PageSize <= 0 {
		o.PageSize = 2000
	}
	var until events.ID
	bounded := o.Until != ""
	if bounded {
		id, err := events.ParseID(o.Until)
		if err != nil {
			return 0, fmt.Errorf("fold until %q: %w", o.Until, err)
		}
		until = id
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	pages := make(chan foldPage, 2)
	batches := make(chan foldBatch, 2)
	// spent brings the pages of records the applier is done with back to
	// the decoder, which decodes the next entries into them: a fold makes
	// a few pages of records, not one per page.
	spent := make(chan []events.Record, cap(batches)+2)
	start := st.LastID()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // read
		defer wg.Done()
		defer close(pages)
		after := st.LastID()
		for {
			entries, err := log.Read(ctx, after, o.PageSize)
			if err != nil {
				select {
				case pages <- foldPage{err: fmt.Errorf("read log after %s: %w", after, err)}:
				case <-ctx.Done():
				}
				return
			}
			if len(entries) == 0 {
				return
			}
			if o.Check != nil {
				if err := o.Check(ctx, after); err != nil {
					select {
					case pages <- foldPage{err: err}:
					case <-ctx.Done():
					}
					return
				}
			}
			last := entries[len(entries)-1].ID
			done := false
			if bounded {
				for i, e := range entries {
					if id, err := events.ParseID(e.ID); err == nil && until.Less(id) {
						entries, done = entries[:i], true
						break
					}
				}
			}
			if len(entries) > 0 {
				select {
				case pages <- foldPage{entries: entries}:
				case <-ctx.Done():
					return
				}
			}
			if done {
				return
			}
			after = last
		}
	}()
	go func() { // decode
		defer wg.Done()
		defer close(batches)
		send := func(b foldBatch) bool {
			select {
			case batches <- b:
				return true
			case <-ctx.Done():
				return false
			}
		}
		prev := start // the state's position before the next record
		for p := range pages {
			if p.err != nil {
				send(foldBatch{err: p.err})
				return
			}
			var recs []events.Record
			select {
			case recs = <-spent:
			default:
				recs = make([]events.Record, 0, len(p.entries))
			}
			for _, e := range p.entries {
				rec, err := events.Decode(e.ID, e.Data)
				if r, ok := rec.Event.(*events.LogRestored); err == nil && ok && r.RestoredFrom != prev {
					err = &RestoredError{ID: e.ID, From: r.RestoredFrom, At: prev}
				}
				if err != nil {
					if q, ok := events.Confine(err); ok {
						recs = append(recs, q)
						prev = e.ID
						continue
					}
					if len(recs) > 0 && !send(foldBatch{recs: recs}) {
						return
					}
					send(foldBatch{err: err})
					return
				}
				recs = append(recs, rec)
				prev = e.ID
			}
			if !send(foldBatch{recs: recs}) {
				return
			}
		}
	}()
	n, err := applyBatches(st, batches, spent, o)
	cancel()
	for range batches { // let the decoder end
	}
	wg.Wait()
	if errors.Is(err, errStopped) {
		err = nil
	}
	return n, err
}

type foldPage struct {
	entries []events.Entry
	err     error
}

type foldBatch struct {
	recs []events.Record
	err  error
}

// applyBatches applies decoded pages in order; it takes the state's lock once
// per page, and hands each page it applied, emptied, to spent.
func applyBatches(st *State, batches <-chan foldBatch, spent chan<- []events.Record, o FoldOptions) (int, error) {
	n := 0
	ix := newFoldIndexes()
	defer func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		rebuildIndexes(st.groups, ix.rebuild)
	}()
	for b := range batches {
		if b.err != nil {
			return n, b.err
		}
		applied, err := st.applyPage(b.recs, o, ix)
		n += applied
		if err != nil {
			return n, err
		}
		clear(b.recs) // the state keeps what the records hold, not the page
		select {
		case spent <- b.recs[:0]:
		default:
		}
	}
	return n, nil
}

// applyPage applies records in order. Without hooks it takes the state's lock
// once for the page; with hooks (which may read the state) once per record,
// calling the hooks outside it.
func (s *State) applyPage(recs []events.Record, o FoldOptions, ix *foldIndexes) (int, error) {
	if o.Stop == nil && o.Before == nil && o.After == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		ix.suspend(s.groups, recs)
		for i, rec := range recs {
			if err := s.applyLocked(rec); err != nil {
				return i, err
			}
			if _, ok := rec.Event.(*events.GroupCreated); ok {
				if g := s.groups[KeyOf(rec)]; g != nil && g.ix != nil {
					g.ix = nil // a group created in the fold: indexed once at its end
					ix.rebuild[g.Key] = true
				}
			}
		}
		return len(recs), nil
	}
	for i, rec := range recs {
		if o.Stop != nil && o.Stop(rec) {
			return i, errStopped
		}
		if o.Before != nil {
			o.Before(rec)
		}
		if err := s.Apply(rec); err != nil {
			return i, err
		}
		if o.After != nil {
			o.After(rec)
		}
	}
	return len(recs), nil
}

// foldIndexes is what a fold knows of the groups' member indexes: the
// events it folded per group, and the groups whose index it dropped.
type foldIndexes struct {
	events  map[GroupKey]int
	rebuild map[GroupKey]bool
}

func newFoldIndexes() *foldIndexes {
	return &foldIndexes{events: map[GroupKey]int{}, rebuild: map[GroupKey]bool{}}
}

// suspend drops, until the fold ends, the member index of each group
// whose events in the fold are at least half as many as its member and
// target records: keeping the index current event by event (touch, settle)
// costs more than building it once at the end then (rebuildIndexes). A group
// without an index answers its questions by scanning, so a reader meanwhile is
// answered right.
func (ix *foldIndexes) suspend(groups map[GroupKey]*Group, recs []events.Record) {
	// Counted by runs of records of one group (a decision's records are
	// of one group), so the map is not asked once per record.
	var run GroupKey
	n := 0
	for _, rec := range recs {
		if k := KeyOf(rec); n == 0 || k != run {
			if n > 0 {
				ix.events[run] += n
			}
			run, n = k, 0
		}
		n++
	}
	if n > 0 {
		ix.events[run] += n
	}
	for k, n := range ix.events {
		if g := groups[k]; g != nil && g.ix != nil && 2*n >= len(g.members)+len(g.targets) {
			g.ix = nil
			ix.rebuild[k] = true
		}
	}
}

// rebuildIndexes indexes again the flat groups a fold left without one.
func rebuildIndexes(groups map[GroupKey]*Group, keys map[GroupKey]bool) {
	for k := range keys {
		if g := groups[k]; g != nil && g.ix == nil && g.lay == nil {
			buildIndex(g)
		}
	}
}
