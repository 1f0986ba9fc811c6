package member_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
)

// attempts records every handler call (payload and deliveries) and fails
// the calls a rule says to fail.
type attempts struct {
	mu    sync.Mutex
	calls []string // "payload#deliveries", with a trailing "!" when failed
	fail  func(payload string, deliveries int64) bool
}

func (a *attempts) handler(_ context.Context, m member.Message) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	call := m.Field("p") + "#" + strconv.FormatInt(m.Deliveries, 10)
	if a.fail != nil && a.fail(m.Field("p"), m.Deliveries) {
		a.calls = append(a.calls, call+"!")
		return errors.New("refused")
	}
	a.calls = append(a.calls, call)
	return nil
}

func (a *attempts) log() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...)
}

func (a *attempts) are(want ...string) func() bool {
	return func() bool { return equalStrings(a.log(), want) }
}

// A failed entry of an ordered group blocks its shard: it is claimed again
// and retried in place after RetryBackoff (Redis counts each delivery), and
// the entries after it wait for its success. An unordered group moves on and
// retries the failed entry after the later ones.
func TestFailedEntryBlocksItsShardInOrderedGroups(t *testing.T) {
	for _, tc := range []struct {
		ordering string
		want     []string
	}{
		{client.OrderingKey, []string{"a#1!", "a#2!", "a#3", "b#1", "c#1"}},
		{client.OrderingNone, []string{"a#1!", "b#1", "c#1", "a#2!", "a#3"}},
	} {
		t.Run(tc.ordering, func(t *testing.T) {
			e := setup(t, 1, ordered{mv: 12, assigned: []int{0}, ordering: tc.ordering}.reply())
			for i, p := range []string{"a", "b", "c"} {
				e.add(t, 0, "5-"+strconv.Itoa(i+1), "p", p)
			}
			got := &attempts{fail: func(p string, d int64) bool { return p == "a" && d < 3 }}
			rt := e.start(t, e.config(nil), got.handler)
			eventually(t, "a handled on its third delivery, b and c once", func() bool { return len(got.log()) == 5 })
			if calls := got.log(); !equalStrings(calls, tc.want) {
				t.Fatalf("handler calls %v, want %v", calls, tc.want)
			}
			eventually(t, "all acked", func() bool { return e.pending(t, 0) == 0 })
			if st := rt.Stats(); st.Failed != 2 || st.Handled != 3 {
				t.Fatalf("stats %+v, want 2 failures and 3 handled", st)
			}
		})
	}
}

// In an ordered group, a message that keeps failing goes to the dead-letter
// hook on its MaxDeliveries-th delivery (counted by Redis, the retries in
// place included) and is acked; only then is the next entry handled.
func TestOrderedRetryInPlaceEndsAtTheDeadLetter(t *testing.T) {
	e := setup(t, 1, ordered{mv: 12, assigned: []int{0}}.reply())
	e.add(t, 0, "5-1", "p", "poison")
	e.add(t, 0, "5-2", "p", "next")
	got := &attempts{fail: func(p string, _ int64) bool { return p == "poison" }}
	var mu sync.Mutex
	var dead []string
	e.start(t, e.config(func(c *member.Config) {
		c.MaxDeliveries = 3
		c.DeadLetter = func(_ context.Context, m member.Message, _ error) error {
			mu.Lock()
			defer mu.Unlock()
			dead = append(dead, m.Field("p")+"#"+strconv.FormatInt(m.Deliveries, 10)+" before "+strconv.Itoa(len(got.log())))
			return nil
		}
	}), got.handler)
	eventually(t, "the poison dead-lettered, then next handled", got.are("poison#1!", "poison#2!", "poison#3!", "next#1"))
	mu.Lock()
	defer mu.Unlock()
	if len(dead) != 1 || dead[0] != "poison#3 before 3" {
		t.Fatalf("dead letters %v, want the poison message on its third delivery, before next", dead)
	}
	eventually(t, "both acked", func() bool { return e.pending(t, 0) == 0 })
}

// A shard revoked while its failed entry is retried in place keeps the entry
// and the ones after it pending; the next owner claims them and handles
// them in order.
func TestOrderedFailedEntryGoesToTheNextOwnerInOrder(t *testing.T) {
	handover := make(chan struct{})
	e := setup(t, 1, func(req client.HeartbeatRequest) (client.HeartbeatResponse, int) {
		o := ordered{mv: 12}
		select {
		case <-handover:
			if req.MemberID == "b" {
				o.assigned = []int{0}
			}
		default:
			if req.MemberID == "a" {
				o.assigned = []int{0}
			}
		}
		return o.reply()(req)
	})
	e.add(t, 0, "5-1", "p", "a")
	e.add(t, 0, "5-2", "p", "b")
	gotA := &attempts{fail: func(p string, _ int64) bool { return p == "a" }}
	gotB := &attempts{}
	e.start(t, e.config(func(c *member.Config) { c.MemberIDBase = "a" }), gotA.handler)
	e.start(t, e.config(func(c *member.Config) { c.MemberIDBase, c.ClaimMinIdle = "b", time.Minute }), gotB.handler)
	eventually(t, "a retried in place", func() bool { return len(gotA.log()) >= 2 })
	close(handover)
	eventually(t, "member a released shard 0", func() bool {
		st, _ := revokeState(e.coord.last("a"), 0)
		return st == client.RevokeRevoked
	})
	for _, c := range gotA.log() {
		if c[:2] != "a#" || c[len(c)-1] != '!' {
			t.Fatalf("member a's calls %v: only failed attempts of a, never b", gotA.log())
		}
	}
	eventually(t, "member b handled a, then b", func() bool {
		calls := gotB.log()
		return len(calls) == 2 && calls[0][:2] == "a#" && calls[1] == "b#2" // read by a, claimed by b
	})
	eventually(t, "acked", func() bool { return e.pending(t, 0) == 0 })
}
