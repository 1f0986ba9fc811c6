package chaos

import (
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/client/member"
)

// step is one thing a recorder hears, at a millisecond offset.
type step struct {
	ms     int
	proc   string
	member string
	kind   member.EventKind // "" with handled, or "gone"
	shards []int
	// handled: a handler call of shards[0] lasting dur ms.
	handled bool
	dur     int
}

func TestRecorderCheck(t *testing.T) {
	ev := func(ms int, proc, m string, k member.EventKind, shards ...int) step {
		return step{ms: ms, proc: proc, member: m, kind: k, shards: shards}
	}
	h := func(ms int, proc, m string, shard, dur int) step {
		return step{ms: ms, proc: proc, member: m, shards: []int{shard}, handled: true, dur: dur}
	}
	gone := func(ms int, proc string) step { return step{ms: ms, proc: proc, kind: "gone"} }

	cases := []struct {
		name  string
		steps []step
		want  []string // substrings, one per expected violation
	}{
		{
			name: "revoke before assign: released, then assigned elsewhere",
			steps: []step{
				ev(0, "p", "a", member.EventAssigned, 0, 1), h(10, "p", "a", 0, 5),
				ev(100, "p", "a", member.EventRevoking, 1), h(105, "p", "a", 1, 5), ev(120, "p", "a", member.EventReleased, 1),
				ev(200, "q", "b", member.EventAssigned, 1), h(201, "q", "b", 1, 5),
			},
		},
		{
			name: "assigned to a second member before the first released it",
			steps: []step{
				ev(0, "p", "a", member.EventAssigned, 1), ev(100, "p", "a", member.EventRevoking, 1),
				ev(150, "q", "b", member.EventAssigned, 1), h(160, "q", "b", 1, 5),
				ev(200, "p", "a", member.EventReleased, 1),
			},
			want: []string{"shard 1 read by two members at once: a@p"},
		},
		{
			name: "a killed process's shard taken over after the kill",
			steps: []step{
				ev(0, "p#1", "s", member.EventAssigned, 2), h(50, "p#1", "s", 2, 10), gone(55, "p#1"),
				ev(2100, "q", "b", member.EventAssigned, 2), h(2100, "q", "b", 2, 5),
			},
		},
		{
			name: "the same member id in a restarted process is another reader",
			steps: []step{
				ev(0, "p#1", "s", member.EventAssigned, 2), gone(50, "p#1"),
				ev(2100, "p#2", "s", member.EventAssigned, 2), h(2110, "p#2", "s", 2, 5),
			},
		},
		{
			name: "the in-flight tail of a lapsed member overlaps the takeover",
			steps: []step{
				ev(0, "p", "a", member.EventAssigned, 3), h(1400, "p", "a", 3, 50), h(1450, "p", "a", 3, 50),
				ev(1460, "p", "a", member.EventLeaseLapsed, 3), h(1500, "p", "a", 3, 600),
				ev(2050, "q", "b", member.EventAssigned, 3), h(2060, "q", "b", 3, 5),
			},
		},
		{
			name: "a takeover before the lapse is not the documented one",
			steps: []step{
				ev(0, "p", "a", member.EventAssigned, 3), ev(1000, "q", "b", member.EventAssigned, 3),
				ev(1460, "p", "a", member.EventLeaseLapsed, 3),
			},
			want: []string{"shard 3 read by two members at once"},
		},
		{
			name: "a lapsed member keeps reading long after its lapse",
			steps: []step{
				ev(0, "p", "a", member.EventAssigned, 3), ev(1000, "p", "a", member.EventLeaseLapsed, 3),
				h(4000, "p", "a", 3, 5),
			},
			want: []string{"after its window closed"},
		},
		{
			name: "lease restored: reading again is a new window of the same reader",
			steps: []step{
				ev(0, "p", "a", member.EventAssigned, 3), ev(1000, "p", "a", member.EventLeaseLapsed, 3),
				ev(5000, "p", "a", member.EventLeaseRestored, 3), h(5010, "p", "a", 3, 5),
			},
		},
		{
			name: "handled after the release",
			steps: []step{
				ev(0, "p", "a", member.EventAssigned, 0), ev(100, "p", "a", member.EventReleased, 0), h(300, "p", "a", 0, 5),
			},
			want: []string{"after its window closed"},
		},
		{
			name: "handled without ever being assigned",
			steps: []step{
				h(300, "p", "a", 7, 5),
			},
			want: []string{"without having been assigned"},
		},
		{
			name: "the reader starts just before the assigned event",
			steps: []step{
				h(0, "p", "a", 4, 5), ev(20, "p", "a", member.EventAssigned, 4),
			},
		},
		{
			name: "fenced: every shard stops, listed or not; left closes the rest",
			steps: []step{
				ev(0, "p", "a", member.EventAssigned, 0, 1), ev(500, "p", "a", member.EventFenced),
				ev(600, "q", "b", member.EventAssigned, 0, 1), h(610, "q", "b", 0, 5), ev(900, "q", "b", member.EventLeft),
				ev(950, "p", "a", member.EventAssigned, 0),
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base := time.Unix(1_700_000_000, 0)
			at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
			r := NewRecorder()
			for _, s := range tc.steps {
				switch {
				case s.kind == "gone":
					r.Gone(s.proc, at(s.ms))
				case s.handled:
					r.Handled(s.proc, s.member, s.shards[0], at(s.ms), at(s.ms+s.dur))
				default:
					r.Event(s.proc, member.Event{Time: at(s.ms), MemberID: s.member, Kind: s.kind, Shards: s.shards})
				}
			}
			got := r.Check(at(10_000))
			if len(got) != len(tc.want) {
				t.Fatalf("violations %q, want %d matching %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %d is %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}
