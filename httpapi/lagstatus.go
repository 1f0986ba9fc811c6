package httpapi

import (
	"sync"
	"time"

	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// A group's lag status, in the style of Burrow: each read of a shard stream
// by the offsets cache (offsetcache.go, one per refresh interval) is a sample,
// and the status of a shard is a pure function of its last lagWindow samples
// (shardLagStatus); a group's is its worst shard's. The rule, in order, the
// first that holds wins:
//
//   - STOP: entries wait (below) and no member holds the shard, in each of the
//     newest lagStopSamples samples: nobody will read them.
//   - STALL: the window is full (lagWindow samples), entries wait in each
//     sample, and the group did not advance between any two consecutive ones:
//     the same last-delivered id, the same oldest pending id, and a pending
//     count that did not go down (nothing was read, nothing acknowledged).
//   - WARN: the window is full and the backlog age (the age of the group's
//     oldest entry not yet acknowledged: its oldest pending one when any is
//     pending, else its oldest undelivered one, else 0) is known in each
//     sample, rose strictly between each two consecutive ones, and is at
//     least lagWarnFloor in the newest: the group reads, but falls further
//     behind at every read. The floor keeps a group that keeps up within a
//     batch from warning when its millisecond ages happen to rise four times
//     in a row.
//   - OK otherwise.
//
// Entries wait when the group has an entry it was not delivered or one it did
// not acknowledge, or when the stream has entries and no such consumer group.
// A read closer than half the refresh interval to a shard's newest sample (a
// read on demand after a scale) replaces that sample, so a full window spans
// at least two intervals. Samples are kept per consumer group and stream key,
// and forgotten after rateMemoryTTL without a read.

const (
	// lagWindow is how many samples of a shard the rule looks at: STALL and
	// WARN need that many (4 steps; 40 s at the default 10 s interval).
	lagWindow = 5
	// lagStopSamples is how many newest samples must find a shard unowned
	// with entries waiting before it is STOP (a handover between two
	// members takes less than a refresh interval).
	lagStopSamples = 2
	// lagWarnFloor is the least backlog age that may WARN.
	lagWarnFloor = 1.0 // seconds
)

// lagSeverity orders the statuses from the best to the worst.
var lagSeverity = map[string]int{wire.LagStatusOK: 0, wire.LagStatusWarn: 1, wire.LagStatusStall: 2, wire.LagStatusStop: 3}

// lagSample is what the rule needs of one read of a shard stream.
type lagSample struct {
	at            time.Time
	owned         bool   // a member held the shard at the read
	waiting       bool   // entries wait (see above)
	delivered     string // the group's last-delivered id ("" without the group)
	oldestPending string // the id of its oldest pending entry ("" when none)
	pending       int64
	backlog       *float64 // backlog age in seconds; nil when unknown
}

// shardLagStatus is the rule above over w, a shard's samples oldest first.
func shardLagStatus(w []lagSample) string {
	n := len(w)
	if n == 0 {
		return wire.LagStatusOK
	}
	if n >= lagStopSamples {
		stop := true
		for _, s := range w[n-lagStopSamples:] {
			stop = stop && s.waiting && !s.owned
		}
		if stop {
			return wire.LagStatusStop
		}
	}
	if n < lagWindow {
		return wire.LagStatusOK
	}
	w = w[n-lagWindow:]
	stalled, growing := true, true
	for i, s := range w {
		stalled = stalled && s.waiting
		growing = growing && s.backlog != nil
		if i == 0 {
			continue
		}
		p := w[i-1]
		if s.delivered != p.delivered || s.oldestPending != p.oldestPending || s.pending < p.pending {
			stalled = false
		}
		if growing && !(*s.backlog > *p.backlog) {
			growing = false
		}
	}
	switch {
	case stalled:
		return wire.LagStatusStall
	case growing && *w[len(w)-1].backlog >= lagWarnFloor:
		return wire.LagStatusWarn
	}
	return wire.LagStatusOK
}

// worseLag is the worse of two statuses.
func worseLag(a, b string) string {
	if lagSeverity[b] > lagSeverity[a] {
		return b
	}
	return a
}

// sampleOf is the sample of one read of a shard.
func sampleOf(o wire.ShardOffset, owned bool, at time.Time) lagSample {
	s := lagSample{at: at, owned: owned, pending: o.PendingCount}
	if o.GroupLastDeliveredID != nil {
		s.delivered = *o.GroupLastDeliveredID
	}
	if o.OldestPendingID != nil {
		s.oldestPending = *o.OldestPendingID
	}
	switch {
	case !o.Exists:
	case o.GroupLastDeliveredID == nil:
		s.waiting = o.StreamLength > 0
	default:
		s.waiting = o.OldestUndeliveredID != nil || o.PendingCount > 0
	}
	if o.LagSeconds != nil {
		b := *o.LagSeconds
		if o.OldestPendingSeconds != nil && o.PendingCount > 0 {
			b = max(b, *o.OldestPendingSeconds)
		}
		s.backlog = &b
	}
	return s
}

// lagMemory is the recent samples of every shard stream read lately.
type lagMemory struct {
	every time.Duration // the refresh interval

	mu        sync.Mutex
	shards    map[rateKey][]lagSample
	lastSweep time.Time
}

func newLagMemory(every time.Duration) *lagMemory {
	return &lagMemory{every: every, shards: map[rateKey][]lagSample{}}
}

// observe records one read of g's shards at now and returns each shard's
// status, in the order of offs, and the group's.
func (m *lagMemory) observe(g *projection.Group, offs []wire.ShardOffset, now time.Time) ([]string, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Sub(m.lastSweep) >= rateSweepEvery {
		for k, w := range m.shards {
			if len(w) == 0 || now.Sub(w[len(w)-1].at) > rateMemoryTTL {
				delete(m.shards, k)
			}
		}
		m.lastSweep = now
	}
	held := heldShards(g)
	out := make([]string, len(offs))
	group := wire.LagStatusOK
	for i, o := range offs {
		k := rateKey{group: g.Key.ConsumerGroup, streamKey: o.StreamKey}
		s := sampleOf(o, held[o.Shard.ShardIndex], now)
		w := m.shards[k]
		if n := len(w); n > 0 && now.Sub(w[n-1].at) < m.every/2 {
			w[n-1] = s
		} else {
			if n == lagWindow {
				w = append(w[:0], w[1:]...)
			}
			w = append(w, s)
		}
		m.shards[k] = w
		out[i] = shardLagStatus(w)
		group = worseLag(group, out[i])
	}
	return out, group
}

// heldShards is every shard some member that may still hold shards holds
// (granted, reading or revoking it: projection.Member.Holds).
func heldShards(g *projection.Group) map[int]bool {
	out := map[int]bool{}
	for _, m := range g.EachMember() {
		if !m.CanHold() {
			continue
		}
		for _, set := range [][]int{m.Current, m.Revoking, m.Granted} {
			for _, s := range set {
				out[s] = true
			}
		}
	}
	return out
}

// groupLagAges is the greatest lagSeconds and oldestPendingSeconds of a
// group's shards, each nil when any shard's is.
func groupLagAges(offs []wire.ShardOffset) (lag, pending *float64) {
	greatest := func(pick func(o wire.ShardOffset) *float64) *float64 {
		top := 0.0
		for _, o := range offs {
			v := pick(o)
			if v == nil {
				return nil
			}
			top = max(top, *v)
		}
		return &top
	}
	return greatest(func(o wire.ShardOffset) *float64 { return o.LagSeconds }),
		greatest(func(o wire.ShardOffset) *float64 { return o.OldestPendingSeconds })
}
