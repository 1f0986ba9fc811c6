package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rscoord/rsc/events"
)

// errLogDown is what faultLog answers for an append or read it fails.
var errLogDown = errors.New("fault log: connection reset")

// appendFault is what faultLog does to one append.
type appendFault int

const (
	appendOK appendFault = iota
	// appendRefused: nothing is written and the writer gets an error (Redis
	// refused the write, or the connection dropped before it arrived).
	appendRefused
	// appendLost: the batch lands in the log but the writer gets an error
	// (the connection dropped while the answer was on its way back).
	appendLost
	// appendLostUnread: as appendLost, and every read fails too until
	// readsBack is called (Redis went away right after the write).
	appendLostUnread
	// appendNotDurable: the batch lands in the log, but too few replicas
	// acknowledged it (events.ErrNotDurable): it may be lost later.
	appendNotDurable
	// appendRefusedUnwritten: Redis answered, refusing the append before
	// it wrote anything (out of memory, say: events.ErrRefused).
	appendRefusedUnwritten
)

// faultLog is an events.MemLog whose appends fail on demand: the next one
// (failNext), or those decide picks (the simulation). A fault is only ever
// applied to an append that would land (one based on the log's last id), so
// an append that conflicts anyway is answered as MemLog answers it; onLost
// sees every batch that landed with an error answer.
type faultLog struct {
	*events.MemLog
	mu        sync.Mutex
	next      []appendFault
	decide    func() appendFault
	readsDown bool
	onLost    func(ids []string, batch []events.Draft)
	faults    map[appendFault]int
}

var _ events.Indexed = (*faultLog)(nil)

func newFaultLog() *faultLog {
	return &faultLog{MemLog: events.NewMemLog(), faults: map[appendFault]int{}}
}

// failNext makes the next appends that would land fail as given, in order.
func (l *faultLog) failNext(f ...appendFault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next = append(l.next, f...)
}

// readsBack ends the read outage of an appendLostUnread.
func (l *faultLog) readsBack() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.readsDown = false
}

// refused is how many appends the log refused so far.
func (l *faultLog) refused() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.faults[appendRefused]
}

// total is how many appends failed so far.
func (l *faultLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.faults[appendRefused] + l.faults[appendLost] + l.faults[appendLostUnread] + l.faults[appendNotDurable]
}

func (l *faultLog) Append(ctx context.Context, after string, batch [][]byte) ([]string, error) {
	drafts := make([]events.Draft, len(batch))
	for i, d := range batch {
		drafts[i] = events.Draft{Data: d}
	}
	return l.AppendIndexed(ctx, after, drafts)
}

func (l *faultLog) AppendIndexed(ctx context.Context, after string, batch []events.Draft) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last, _ := l.MemLog.LastID(ctx)
	f := appendOK
	if last == after {
		switch {
		case len(l.next) > 0:
			f, l.next = l.next[0], l.next[1:]
		case l.decide != nil:
			f = l.decide()
		}
	}
	l.faults[f]++
	switch f {
	case appendRefused:
		return nil, errLogDown
	case appendRefusedUnwritten:
		return nil, fmt.Errorf("fault log: %w: OOM command not allowed when used memory > 'maxmemory'", events.ErrRefused)
	case appendLost, appendLostUnread, appendNotDurable:
		ids, err := l.MemLog.AppendIndexed(ctx, after, batch)
		if err != nil {
			return nil, err
		}
		if f == appendLostUnread {
			l.readsDown = true
		}
		if l.onLost != nil {
			l.onLost(ids, batch)
		}
		if f == appendNotDurable {
			return nil, fmt.Errorf("fault log: %w", events.ErrNotDurable)
		}
		return nil, errLogDown
	}
	return l.MemLog.AppendIndexed(ctx, after, batch)
}

func (l *faultLog) Read(ctx context.Context, after string, count int) ([]events.Entry, error) {
	l.mu.Lock()
	down := l.readsDown
	l.mu.Unlock()
	if down {
		return nil, errLogDown
	}
	return l.MemLog.Read(ctx, after, count)
}
