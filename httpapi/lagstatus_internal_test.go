package httpapi

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// lagWin builds a window oldest first from compact samples: each is
// "<owned>/<waiting>/<delivered>/<oldest pending>/<pending>/<backlog>", with
// owned and waiting as o/- and w/-, and backlog "?" for unknown.
func lagWin(t *testing.T, specs ...string) []lagSample {
	t.Helper()
	out := make([]lagSample, len(specs))
	for i, spec := range specs {
		parts := strings.Split(spec, "/")
		if len(parts) != 6 {
			t.Fatalf("spec %q: want 6 parts", spec)
		}
		var pending int64
		if _, err := fmt.Sscan(parts[4], &pending); err != nil {
			t.Fatalf("spec %q: pending: %v", spec, err)
		}
		s := lagSample{at: time.Unix(int64(10*i), 0), owned: parts[0] == "o", waiting: parts[1] == "w", delivered: parts[2], pending: pending}
		if parts[3] != "-" {
			s.oldestPending = parts[3]
		}
		if parts[5] != "?" {
			var b float64
			if _, err := fmt.Sscan(parts[5], &b); err != nil {
				t.Fatalf("spec %q: backlog: %v", spec, err)
			}
			s.backlog = &b
		}
		out[i] = s
	}
	return out
}

// TestShardLagStatus is the status rule, one case per clause and boundary.
func TestShardLagStatus(t *testing.T) {
	cases := []struct {
		name   string
		window []string
		want   string
	}{
		{"no sample", nil, wire.LagStatusOK},
		{"one idle sample", []string{"o/-/1-0/-/0/0"}, wire.LagStatusOK},

		// STOP: unowned with entries waiting in the 2 newest samples.
		{"unowned with entries, two samples: STOP", []string{"-/w/1-0/-/0/3", "-/w/1-0/-/0/13"}, wire.LagStatusStop},
		{"unowned with entries, one sample: a handover, OK", []string{"o/w/1-0/-/0/3", "-/w/1-0/-/0/13"}, wire.LagStatusOK},
		{"unowned with only pending entries: STOP", []string{"-/w/1-0/1-0/1/3", "-/w/1-0/1-0/1/13"}, wire.LagStatusStop},
		{"unowned and nothing waits: OK", []string{"-/-/1-0/-/0/0", "-/-/1-0/-/0/0"}, wire.LagStatusOK},
		{"owned again: not STOP", []string{"-/w/1-0/-/0/3", "o/w/1-0/-/0/13"}, wire.LagStatusOK},
		{"STOP wins over STALL", []string{"o/w/1-0/-/0/1", "o/w/1-0/-/0/2", "o/w/1-0/-/0/3", "-/w/1-0/-/0/4", "-/w/1-0/-/0/5"}, wire.LagStatusStop},

		// STALL: a full window waiting, no step advancing.
		{"stalled full window: STALL", []string{"o/w/1-0/-/0/1", "o/w/1-0/-/0/2", "o/w/1-0/-/0/3", "o/w/1-0/-/0/4", "o/w/1-0/-/0/5"}, wire.LagStatusStall},
		{"stalled 4 samples: window not full, OK", []string{"o/w/1-0/-/0/2", "o/w/1-0/-/0/3", "o/w/1-0/-/0/4", "o/w/1-0/-/0/5"}, wire.LagStatusOK},
		{"stalled, looks at the newest 5 only", []string{"o/w/0-1/-/0/1", "o/w/1-0/-/0/1", "o/w/1-0/-/0/2", "o/w/1-0/-/0/3", "o/w/1-0/-/0/4", "o/w/1-0/-/0/5"}, wire.LagStatusStall},
		{"stuck pending entry, nothing new: STALL", []string{"o/w/9-0/5-0/2/1", "o/w/9-0/5-0/2/2", "o/w/9-0/5-0/2/3", "o/w/9-0/5-0/2/4", "o/w/9-0/5-0/2/5"}, wire.LagStatusStall},
		{"stalled then the owner left (one sample): still STALL", []string{"o/w/1-0/-/0/1", "o/w/1-0/-/0/2", "o/w/1-0/-/0/3", "o/w/1-0/-/0/4", "-/w/1-0/-/0/5"}, wire.LagStatusStall},
		{"read once in the window: not STALL", []string{"o/w/1-0/-/0/1", "o/w/1-0/-/0/2", "o/w/2-0/-/0/3", "o/w/2-0/-/0/4", "o/w/2-0/-/0/5"}, wire.LagStatusWarn},
		{"acknowledged the oldest pending: not STALL", []string{"o/w/9-0/5-0/2/1", "o/w/9-0/5-0/2/1", "o/w/9-0/6-0/1/1", "o/w/9-0/6-0/1/1", "o/w/9-0/6-0/1/1"}, wire.LagStatusOK},
		{"acknowledged a later pending entry: not STALL", []string{"o/w/9-0/5-0/3/1", "o/w/9-0/5-0/3/1", "o/w/9-0/5-0/2/1", "o/w/9-0/5-0/2/1", "o/w/9-0/5-0/2/1"}, wire.LagStatusOK},
		{"nothing waited in one sample: not STALL", []string{"o/w/1-0/-/0/1", "o/w/1-0/-/0/2", "o/-/1-0/-/0/0", "o/w/1-0/-/0/4", "o/w/1-0/-/0/5"}, wire.LagStatusOK},
		{"idle group, nothing waits: OK", []string{"o/-/1-0/-/0/0", "o/-/1-0/-/0/0", "o/-/1-0/-/0/0", "o/-/1-0/-/0/0", "o/-/1-0/-/0/0"}, wire.LagStatusOK},
		{"a stream with entries and no group: STALL", []string{"o/w//-/0/?", "o/w//-/0/?", "o/w//-/0/?", "o/w//-/0/?", "o/w//-/0/?"}, wire.LagStatusStall},

		// WARN: advancing, the backlog age rising at every step, >= 1 s.
		{"falling behind: WARN", []string{"o/w/1-0/-/0/1", "o/w/2-0/-/0/2", "o/w/3-0/-/0/3", "o/w/4-0/-/0/4", "o/w/5-0/-/0/5"}, wire.LagStatusWarn},
		{"rising at the floor: WARN", []string{"o/w/1-0/-/0/0.2", "o/w/2-0/-/0/0.4", "o/w/3-0/-/0/0.6", "o/w/4-0/-/0/0.8", "o/w/5-0/-/0/1"}, wire.LagStatusWarn},
		{"rising below the floor: OK", []string{"o/w/1-0/-/0/0.002", "o/w/2-0/-/0/0.004", "o/w/3-0/-/0/0.006", "o/w/4-0/-/0/0.008", "o/w/5-0/-/0/0.999"}, wire.LagStatusOK},
		{"flat once: OK", []string{"o/w/1-0/-/0/1", "o/w/2-0/-/0/2", "o/w/3-0/-/0/2", "o/w/4-0/-/0/4", "o/w/5-0/-/0/5"}, wire.LagStatusOK},
		{"down once: OK", []string{"o/w/1-0/-/0/1", "o/w/2-0/-/0/3", "o/w/3-0/-/0/2", "o/w/4-0/-/0/4", "o/w/5-0/-/0/5"}, wire.LagStatusOK},
		{"caught up once (0): OK", []string{"o/w/1-0/-/0/3", "o/-/2-0/-/0/0", "o/w/3-0/-/0/2", "o/w/4-0/-/0/4", "o/w/5-0/-/0/5"}, wire.LagStatusOK},
		{"backlog unknown once: OK", []string{"o/w/1-0/-/0/1", "o/w/2-0/-/0/?", "o/w/3-0/-/0/3", "o/w/4-0/-/0/4", "o/w/5-0/-/0/5"}, wire.LagStatusOK},
		{"rising, 4 samples: OK", []string{"o/w/2-0/-/0/2", "o/w/3-0/-/0/3", "o/w/4-0/-/0/4", "o/w/5-0/-/0/5"}, wire.LagStatusOK},
		{"unacknowledged entries age while the group reads: WARN", []string{"o/w/1-0/1-0/1/1", "o/w/2-0/1-0/2/2", "o/w/3-0/1-0/3/3", "o/w/4-0/1-0/4/4", "o/w/5-0/1-0/5/5"}, wire.LagStatusWarn},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := shardLagStatus(lagWin(t, tc.window...)); got != tc.want {
				t.Fatalf("status of %v = %s, want %s", tc.window, got, tc.want)
			}
		})
	}
}

// TestLagSampleOf: what waits, and the backlog age, from one read.
func TestLagSampleOf(t *testing.T) {
	str := func(s string) *string { return &s }
	sec := func(v float64) *float64 { return &v }
	cases := []struct {
		name    string
		o       wire.ShardOffset
		waiting bool
		backlog *float64
	}{
		{"no stream", wire.ShardOffset{}, false, nil},
		{"a stream with entries and no group", wire.ShardOffset{Exists: true, ShardStream: wire.ShardStream{StreamLength: 3}}, true, nil},
		{"an empty stream and no group", wire.ShardOffset{Exists: true}, false, nil},
		{"all read and acknowledged", wire.ShardOffset{Exists: true, ShardStream: wire.ShardStream{StreamLength: 3, GroupLastDeliveredID: str("3-0"), LagSeconds: sec(0), OldestPendingSeconds: sec(0)}}, false, sec(0)},
		{"undelivered", wire.ShardOffset{Exists: true, ShardStream: wire.ShardStream{StreamLength: 3, GroupLastDeliveredID: str("1-0"), OldestUndeliveredID: str("2-0"), LagSeconds: sec(4), OldestPendingSeconds: sec(0)}}, true, sec(4)},
		{"pending older than undelivered", wire.ShardOffset{Exists: true, ShardStream: wire.ShardStream{StreamLength: 3, GroupLastDeliveredID: str("2-0"), OldestUndeliveredID: str("3-0"), LagSeconds: sec(4), OldestPendingID: str("1-0"), OldestPendingSeconds: sec(9), PendingCount: 2}}, true, sec(9)},
		{"only pending", wire.ShardOffset{Exists: true, ShardStream: wire.ShardStream{StreamLength: 3, GroupLastDeliveredID: str("3-0"), LagSeconds: sec(0), OldestPendingID: str("1-0"), OldestPendingSeconds: sec(9), PendingCount: 1}}, true, sec(9)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := sampleOf(tc.o, true, time.Unix(0, 0))
			if s.waiting != tc.waiting {
				t.Errorf("waiting = %v, want %v", s.waiting, tc.waiting)
			}
			if (s.backlog == nil) != (tc.backlog == nil) || (s.backlog != nil && *s.backlog != *tc.backlog) {
				t.Errorf("backlog = %v, want %v", fmtPtr(s.backlog), fmtPtr(tc.backlog))
			}
		})
	}
}

func fmtPtr(v *float64) string {
	if v == nil {
		return "nil"
	}
	return fmt.Sprint(*v)
}

// TestLagMemoryWindow: a read closer than half the interval replaces the
// newest sample; the window keeps the newest lagWindow samples; the group's
// status is its worst shard's; each group's samples are its own.
func TestLagMemoryWindow(t *testing.T) {
	str := func(s string) *string { return &s }
	sec := func(v float64) *float64 { return &v }
	every := 10 * time.Second
	m := newLagMemory(every)
	g := projection.GroupWith(projection.GroupKey{StreamPrefix: "p", ConsumerGroup: "g"}, map[string]*projection.Member{
		"a": {State: projection.MemberActive, Current: []int{0}},
	}, nil)
	// Shard 0 is owned and stalled; shard 1 nobody owns, with entries.
	stalled := wire.ShardOffset{Shard: wire.ShardRef{ShardIndex: 0}, Exists: true, ShardStream: wire.ShardStream{StreamKey: "p:0", StreamLength: 2,
		GroupLastDeliveredID: str("1-0"), OldestUndeliveredID: str("2-0"), LagSeconds: sec(5), OldestPendingSeconds: sec(0)}}
	orphan := stalled
	orphan.Shard, orphan.StreamKey = wire.ShardRef{ShardIndex: 1}, "p:1"
	t0 := time.Unix(1000, 0)
	read := func(at time.Time) ([]string, string) { return m.observe(g, []wire.ShardOffset{stalled, orphan}, at) }

	shards, group := read(t0)
	if shards[0] != wire.LagStatusOK || shards[1] != wire.LagStatusOK || group != wire.LagStatusOK {
		t.Fatalf("first read: %v %s, want OK everywhere", shards, group)
	}
	// Reads 4.9 s apart replace each other: still one sample, no STOP.
	for i := 1; i <= 3; i++ {
		if shards, _ = read(t0.Add(time.Duration(i) * 4900 * time.Millisecond / 3)); shards[1] != wire.LagStatusOK {
			t.Fatalf("read %d within half an interval: shard 1 %s, want OK (one sample)", i, shards[1])
		}
	}
	at := t0.Add(4900 * time.Millisecond)
	// The next read, half an interval later, is a second sample: STOP.
	at = at.Add(every / 2)
	shards, group = read(at)
	if shards[1] != wire.LagStatusStop || group != wire.LagStatusStop || shards[0] != wire.LagStatusOK {
		t.Fatalf("second sample: %v %s, want shard 1 STOP and the group STOP", shards, group)
	}
	for i := 0; i < 3; i++ {
		at = at.Add(every)
		shards, _ = read(at)
	}
	if shards[0] != wire.LagStatusStall {
		t.Fatalf("fifth sample of a stalled shard: %s, want STALL", shards[0])
	}
	if n := len(m.shards[rateKey{group: "g", streamKey: "p:0"}]); n != lagWindow {
		t.Fatalf("%d samples kept, want %d", n, lagWindow)
	}
	// Another group reading the same streams has its own samples.
	other := projection.GroupWith(projection.GroupKey{StreamPrefix: "p", ConsumerGroup: "h"}, maps.Collect(g.EachMember()), nil)
	if shards, group = m.observe(other, []wire.ShardOffset{stalled, orphan}, at); group != wire.LagStatusOK {
		t.Fatalf("first read of another group: %v %s, want OK", shards, group)
	}
	// Samples are forgotten rateMemoryTTL after the last read.
	m.observe(other, nil, at.Add(rateMemoryTTL+rateSweepEvery+time.Second))
	if len(m.shards) != 0 {
		t.Fatalf("%d shards remembered after the TTL, want 0", len(m.shards))
	}
}
