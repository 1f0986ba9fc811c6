package events

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// MemLog is an in-memory Log for tests, simulations and replaying an exported
// file. Ids are "<n>-0" with n counting from 1, so a replay is deterministic.
type MemLog struct {
	mu      sync.Mutex
	entries []Entry
	last    ID
	notify  chan struct{}
	index   map[string][]string // group history index: name -> ids
	restore string              // the last restore's id
}

var (
	_ Indexed    = (*MemLog)(nil)
	_ Restorable = (*MemLog)(nil)
)

// NewMemLog returns an empty log.
func NewMemLog() *MemLog { return &MemLog{notify: make(chan struct{}), index: map[string][]string{}} }

// LoadEntries returns a log holding exactly the given entries (ids kept as they are).
func LoadEntries(entries []Entry) (*MemLog, error) {
	l := NewMemLog()
	for _, e := range entries {
		id, err := ParseID(e.ID)
		if err != nil {
			return nil, err
		}
		if len(l.entries) > 0 && !l.last.Less(id) {
			return nil, fmt.Errorf("load entries: id %s not after %s", e.ID, l.last)
		}
		l.entries = append(l.entries, Entry{ID: id.String(), Data: append([]byte(nil), e.Data...)})
		l.last = id
	}
	return l, nil
}

func (l *MemLog) Append(ctx context.Context, after string, batch [][]byte) ([]string, error) {
	drafts := make([]Draft, len(batch))
	for i, d := range batch {
		drafts[i] = Draft{Data: d}
	}
	return l.AppendIndexed(ctx, after, drafts)
}

// AppendIndexed implements Indexed.
func (l *MemLog) AppendIndexed(ctx context.Context, after string, batch []Draft) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	want, err := ParseID(after)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if want != l.last {
		return nil, fmt.Errorf("%w: log is at %s, caller at %s", ErrConflict, l.last, after)
	}
	ids := make([]string, len(batch))
	for i, d := range batch {
		l.last = ID{Ms: l.last.Ms + 1}
		ids[i] = l.last.String()
		l.entries = append(l.entries, Entry{ID: ids[i], Data: append([]byte(nil), d.Data...)})
		if d.Index != "" {
			l.index[d.Index] = append(l.index[d.Index], ids[i])
		}
	}
	if len(batch) > 0 {
		close(l.notify)
		l.notify = make(chan struct{})
	}
	return ids, nil
}

// AppendRestore implements Restorable.
func (l *MemLog) AppendRestore(ctx context.Context, after, id string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	want, err := ParseID(after)
	if err != nil {
		return err
	}
	at, err := ParseID(id)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if want != l.last {
		return fmt.Errorf("%w: log is at %s, caller at %s", ErrConflict, l.last, after)
	}
	if !l.last.Less(at) {
		return fmt.Errorf("append %s: not above the log's last id %s", id, l.last)
	}
	l.last = at
	l.entries = append(l.entries, Entry{ID: at.String(), Data: append([]byte(nil), data...)})
	l.restore = at.String()
	close(l.notify)
	l.notify = make(chan struct{})
	return nil
}

// LastRestore implements Restorable.
func (l *MemLog) LastRestore(ctx context.Context) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.restore, nil
}

func (l *MemLog) Read(ctx context.Context, after string, count int) ([]Entry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out, _, err := l.read(after, count)
	return out, err
}

func (l *MemLog) read(after string, count int) ([]Entry, chan struct{}, error) {
	from, err := ParseID(after)
	if err != nil {
		return nil, nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.entries), func(i int) bool {
		id, _ := ParseID(l.entries[i].ID)
		return from.Less(id)
	})
	end := len(l.entries)
	if count > 0 && i+count < end {
		end = i + count
	}
	out := make([]Entry, end-i)
	copy(out, l.entries[i:end])
	return out, l.notify, nil
}

func (l *MemLog) Tail(ctx context.Context, after string, count int, block time.Duration) ([]Entry, error) {
	deadline := time.NewTimer(block)
	defer deadline.Stop()
	for {
		out, wait, err := l.read(after, count)
		if err != nil || len(out) > 0 {
			return out, err
		}
		select {
		case <-wait:
		case <-deadline.C:
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (l *MemLog) Get(ctx context.Context, ids []string) ([]Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Entry, 0, len(ids))
	for _, want := range ids {
		wid, err := ParseID(want)
		if err != nil {
			return nil, err
		}
		i := sort.Search(len(l.entries), func(i int) bool {
			id, _ := ParseID(l.entries[i].ID)
			return !id.Less(wid)
		})
		if i < len(l.entries) && l.entries[i].ID == wid.String() {
			out = append(out, l.entries[i])
		}
	}
	return out, nil
}

func (l *MemLog) LastID(ctx context.Context) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last.String(), nil
}

func (l *MemLog) Len(ctx context.Context) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(len(l.entries)), nil
}

// History implements Indexed.
func (l *MemLog) History(ctx context.Context, index, after string, limit int) ([]string, error) {
	from, err := ParseID(after)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ids := l.index[index]
	i := sort.Search(len(ids), func(i int) bool {
		id, _ := ParseID(ids[i])
		return from.Less(id)
	})
	end := len(ids)
	if limit > 0 && i+limit < end {
		end = i + limit
	}
	return append([]string(nil), ids[i:end]...), nil
}

// Entries returns a copy of every entry.
func (l *MemLog) Entries() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Entry(nil), l.entries...)
}
