package chaos

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/rscoord/rsc/client/member"
)

// Recorder collects, from the members' side, when each member read each
// shard, and checks that no two members read a shard at overlapping times.
//
// A reader is one logical member in one process incarnation ("proc"): a
// member id reused by a restarted process is a different reader. A reader's
// window on a shard opens when the runtime reports the shard assigned (or the
// lease restored) and closes when it reports it released (drained, in-flight
// messages acked), fenced, its lease lapsed, the member left, or the process
// was killed. Handler calls are evidence too: a window is widened to cover
// every message handled in it.
//
// The one overlap allowed is the takeover documented for an expired member:
// a member whose lease lapsed (or that was fenced) stops reading, but
// finishes the batch it already read; the member that takes the shard over
// may start while that tail runs. So a window closed by a lapse or a fence
// may overlap a later window that opened after the close, and nothing else
// may overlap.
type Recorder struct {
	// OpenSkew is how long before its "assigned" event a handler call may
	// start: the runtime starts a shard's reader, then reports it.
	OpenSkew time.Duration
	// TailLimit bounds how long after a lapse or fence a member may still be
	// handling the batch it read before.
	TailLimit time.Duration

	mu   sync.Mutex
	recs []record
}

type recordKind int

const (
	recEvent recordKind = iota
	recHandled
	recGone
)

type record struct {
	kind   recordKind
	seq    int
	at     time.Time // event time; handler start; kill time
	end    time.Time // handler end
	proc   string
	member string
	event  member.EventKind
	shards []int
}

// NewRecorder returns a Recorder with the defaults: 100ms of open skew, a 2s tail.
func NewRecorder() *Recorder {
	return &Recorder{OpenSkew: 100 * time.Millisecond, TailLimit: 2 * time.Second}
}

func (r *Recorder) add(rec record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rec.seq = len(r.recs)
	r.recs = append(r.recs, rec)
}

// Event records a member runtime event (member.Config.OnEvent) of process proc.
func (r *Recorder) Event(proc string, e member.Event) {
	at := e.Time
	if at.IsZero() {
		at = time.Now()
	}
	r.add(record{kind: recEvent, at: at, proc: proc, member: e.MemberID, event: e.Kind, shards: append([]int(nil), e.Shards...)})
}

// Handled records one handler call: member of process proc handled a message
// of shard from start to end.
func (r *Recorder) Handled(proc, memberID string, shard int, start, end time.Time) {
	r.add(record{kind: recHandled, at: start, end: end, proc: proc, member: memberID, shards: []int{shard}})
}

// Gone records that process proc died at at (SIGKILL): its members read nothing after.
func (r *Recorder) Gone(proc string, at time.Time) {
	r.add(record{kind: recGone, at: at, proc: proc})
}

// Counts returns how many events and handler calls were recorded.
func (r *Recorder) Counts() (events, handled int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.recs {
		switch rec.kind {
		case recEvent:
			events++
		case recHandled:
			handled++
		}
	}
	return events, handled
}

// closeKind says how a window ended.
type closeKind string

const (
	closeReleased closeKind = "released"
	closeLeft     closeKind = "left"
	closeKilled   closeKind = "killed"
	closeLapsed   closeKind = "lease-lapsed"
	closeFenced   closeKind = "fenced"
	closeEnd      closeKind = "end of run"
)

// soft reports whether the member may still finish in-flight messages after the close.
func (k closeKind) soft() bool { return k == closeLapsed || k == closeFenced }

type readerKey struct{ proc, member string }

func (k readerKey) String() string { return k.member + "@" + k.proc }

type window struct {
	reader      readerKey
	shard       int
	open, close time.Time
	how         closeKind
	// first and last are the span including handled messages.
	first, last time.Time
	handled     int
}

// Check returns every violation: overlapping windows of different readers on
// one shard (beyond the documented takeover), and messages handled by a
// reader outside its windows. Windows still open are closed at end.
func (r *Recorder) Check(end time.Time) []string {
	r.mu.Lock()
	recs := append([]record(nil), r.recs...)
	r.mu.Unlock()
	return analyze(recs, end, r.OpenSkew, r.TailLimit)
}

func analyze(recs []record, end time.Time, openSkew, tailLimit time.Duration) []string {
	sort.SliceStable(recs, func(i, j int) bool {
		if !recs[i].at.Equal(recs[j].at) {
			return recs[i].at.Before(recs[j].at)
		}
		return recs[i].seq < recs[j].seq
	})
	var base time.Time
	if len(recs) > 0 {
		base = recs[0].at
	}
	rel := func(t time.Time) string { return fmt.Sprintf("+%.3fs", t.Sub(base).Seconds()) }

	open := map[readerKey]map[int]*window{}
	all := map[readerKey]map[int][]*window{}
	openW := func(k readerKey, s int, at time.Time) {
		if open[k] == nil {
			open[k] = map[int]*window{}
			all[k] = map[int][]*window{}
		}
		if open[k][s] != nil {
			return
		}
		w := &window{reader: k, shard: s, open: at, first: at, last: at}
		open[k][s] = w
		all[k][s] = append(all[k][s], w)
	}
	closeW := func(k readerKey, s int, at time.Time, how closeKind) {
		w := open[k][s]
		if w == nil {
			return
		}
		w.close, w.how = at, how
		if at.After(w.last) {
			w.last = at
		}
		delete(open[k], s)
	}
	closeAll := func(k readerKey, at time.Time, how closeKind) {
		for s := range open[k] {
			closeW(k, s, at, how)
		}
	}
	var handled []record
	for _, rec := range recs {
		k := readerKey{rec.proc, rec.member}
		switch rec.kind {
		case recHandled:
			handled = append(handled, rec)
		case recGone:
			for rk := range open {
				if rk.proc == rec.proc {
					closeAll(rk, rec.at, closeKilled)
				}
			}
		case recEvent:
			switch rec.event {
			case member.EventAssigned, member.EventLeaseRestored:
				for _, s := range rec.shards {
					openW(k, s, rec.at)
				}
			case member.EventReleased:
				for _, s := range rec.shards {
					closeW(k, s, rec.at, closeReleased)
				}
			case member.EventLeaseLapsed:
				for _, s := range rec.shards {
					closeW(k, s, rec.at, closeLapsed)
				}
			case member.EventFenced:
				// A fence stops every shard, listed or not.
				closeAll(k, rec.at, closeFenced)
			case member.EventLeft:
				closeAll(k, rec.at, closeLeft)
			}
		}
	}
	for k := range open {
		closeAll(k, end, closeEnd)
	}

	var violations []string
	for _, h := range handled {
		k := readerKey{h.proc, h.member}
		s := h.shards[0]
		var w *window
		for _, c := range all[k][s] {
			if !c.open.After(h.at.Add(openSkew)) {
				w = c
			}
		}
		if w == nil {
			violations = append(violations, fmt.Sprintf("%s handled a message of shard %d at %s without having been assigned the shard", k, s, rel(h.at)))
			continue
		}
		if h.at.After(w.close) {
			limit := w.close
			if w.how.soft() {
				limit = w.close.Add(tailLimit)
			}
			if h.at.After(limit) {
				violations = append(violations, fmt.Sprintf("%s handled a message of shard %d at %s, after its window closed at %s (%s)", k, s, rel(h.at), rel(w.close), w.how))
				continue
			}
		}
		w.handled++
		if h.at.Before(w.first) {
			w.first = h.at
		}
		if h.end.After(w.last) {
			w.last = h.end
		}
	}

	byShard := map[int][]*window{}
	for _, shards := range all {
		for s, ws := range shards {
			byShard[s] = append(byShard[s], ws...)
		}
	}
	for _, s := range slices.Sorted(maps.Keys(byShard)) {
		ws := byShard[s]
		sort.Slice(ws, func(i, j int) bool { return ws[i].first.Before(ws[j].first) })
		for i := 0; i < len(ws); i++ {
			for j := i + 1; j < len(ws); j++ {
				a, b := ws[i], ws[j]
				if a.reader == b.reader || !b.first.Before(a.last) {
					continue
				}
				if (a.how.soft() && !b.first.Before(a.close)) || (b.how.soft() && !a.first.Before(b.close)) {
					continue // the expired member's in-flight tail during a takeover
				}
				violations = append(violations, fmt.Sprintf("shard %d read by two members at once: %s [%s, %s] closed by %s (%d handled) and %s [%s, %s] closed by %s (%d handled)",
					s, a.reader, rel(a.first), rel(a.last), a.how, a.handled, b.reader, rel(b.first), rel(b.last), b.how, b.handled))
			}
		}
	}
	return violations
}
