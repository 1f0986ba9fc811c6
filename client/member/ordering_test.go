package member_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/routing"
)

// ordered is an OK answer for a group with ordering KEY (or Ordering).
type ordered struct {
	mv       int64
	assigned []int
	barriers map[int]string // shard → After
	ordering string         // default KEY
	// slow answers a heartbeat interval of a minute: only holds (and what
	// they poke) make the member heartbeat again within a test.
	slow bool
}

func (o ordered) reply() reply {
	return func(req client.HeartbeatRequest) (client.HeartbeatResponse, int) {
		resp, _ := answer(client.StatusOK, 2, o.assigned...)(req)
		resp.MetadataVersion, resp.Assignment.MetadataVersion = o.mv, o.mv
		resp.Assignment.Ordering = client.OrderingKey
		if o.ordering != "" {
			resp.Assignment.Ordering = o.ordering
		}
		for shard, after := range o.barriers {
			resp.Assignment.Barriers = append(resp.Assignment.Barriers, client.ShardBarrier{Shard: client.Shard{ShardIndex: shard}, After: after})
		}
		if o.slow {
			resp.HeartbeatIntervalMs = 60_000
		}
		return resp, 0
	}
}

// add writes an entry with an explicit id (or "*") and returns its id.
func (e env) add(t *testing.T, shard int, id string, fields ...string) string {
	t.Helper()
	values := map[string]any{}
	for i := 0; i+1 < len(fields); i += 2 {
		values[fields[i]] = fields[i+1]
	}
	got, err := e.rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: routing.StreamKey(prefix, shard), ID: id, Values: values}).Result()
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// events collects OnEvent's events.
type events struct {
	mu  sync.Mutex
	all []member.Event
}

func (ev *events) on(e member.Event) {
	ev.mu.Lock()
	ev.all = append(ev.all, e)
	ev.mu.Unlock()
}

func (ev *events) of(kind member.EventKind) []member.Event {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	var out []member.Event
	for _, e := range ev.all {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func ownsShards(rt *member.Runtime, shards ...int) func() bool {
	return func() bool { return equalInts(rt.Members()[0].Owned, shards) }
}

func payloadsAre(r *received, want ...string) func() bool {
	return func() bool { return equalStrings(r.payloads(), want) }
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// moreHeartbeats waits for n more heartbeats of member id than now.
func (e env) moreHeartbeats(t *testing.T, id string, n int) {
	t.Helper()
	base := len(e.coord.requests(id))
	eventually(t, strconv.Itoa(n)+" more heartbeats", func() bool { return len(e.coord.requests(id)) >= base+n })
}

// Entries past a barrier's After wait, unacked, until an answer lists a
// higher After or no barrier for the shard; meanwhile the member heartbeats
// fast. Entries up to After are handled at once.
func TestBarrierHoldsEntriesUntilReleased(t *testing.T) {
	e := setup(t, 1, ordered{mv: 12, assigned: []int{0}, barriers: map[int]string{0: "5-2"}, slow: true}.reply())
	// Written before the member starts, so that one read gets them all.
	for i, p := range []string{"a", "b", "c", "d"} {
		e.add(t, 0, "5-"+strconv.Itoa(i+1), "p", p)
	}
	var got received
	var ev events
	rt := e.start(t, e.config(func(c *member.Config) {
		c.HoldHeartbeatInterval = 30 * time.Millisecond
		c.OnEvent = ev.on
	}), got.handler)
	eventually(t, "entries up to After handled", payloadsAre(&got, "a", "b"))
	// The answers' interval is a minute: only the hold makes it heartbeat.
	e.moreHeartbeats(t, "w", 4)
	if p := got.payloads(); len(p) != 2 {
		t.Fatalf("handled %v past the barrier", p)
	}
	if n := e.pending(t, 0); n != 2 {
		t.Fatalf("%d pending, want the 2 held entries", n)
	}
	if held := ev.of(member.EventHeld); len(held) != 1 || held[0].Count != 2 || held[0].Shards[0] != 0 {
		t.Fatalf("held events %+v", held)
	}
	eventually(t, "held entries reported pending", func() bool {
		for _, p := range e.coord.last("w").ShardProgress {
			if p.PendingCount == 2 && p.LastAckedID != nil && *p.LastAckedID == "5-2" {
				return true
			}
		}
		return false
	})

	// A higher After releases up to it.
	e.coord.set(ordered{mv: 12, assigned: []int{0}, barriers: map[int]string{0: "5-3"}, slow: true}.reply())
	eventually(t, "released up to the new After", payloadsAre(&got, "a", "b", "c"))
	e.moreHeartbeats(t, "w", 4)
	if p := got.payloads(); len(p) != 3 {
		t.Fatalf("handled %v past the raised barrier", p)
	}

	// No barrier: the rest, in order.
	e.coord.set(ordered{mv: 12, assigned: []int{0}, slow: true}.reply())
	eventually(t, "all handled in order", payloadsAre(&got, "a", "b", "c", "d"))
	eventually(t, "all acked", func() bool { return e.pending(t, 0) == 0 && rt.Stats().Acked == 4 })
	if st := rt.Stats(); st.Holds != 2 {
		t.Fatalf("stats %+v, want 2 holds and 4 acks", st)
	}
	if len(ev.of(member.EventResumed)) != 2 {
		t.Fatalf("resumed events %+v", ev.of(member.EventResumed))
	}
	// Back to the coordinator's interval: at most the heartbeat in flight.
	n := len(e.coord.requests("w"))
	time.Sleep(300 * time.Millisecond)
	if m := len(e.coord.requests("w")); m > n+1 {
		t.Fatalf("%d heartbeats after the release with a one-minute interval", m-n)
	}
}

// An entry published with a routing newer than the last answer the member
// applied waits for a heartbeat (sent at once) whose answer is at least that
// new, and is then judged against that answer's barriers.
func TestEntryOfNewerRoutingWaitsForHeartbeat(t *testing.T) {
	e := setup(t, 1, ordered{mv: 12, assigned: []int{0}, slow: true}.reply())
	var got received
	var v20 atomic.Bool // an answer of version 20 may have been applied
	h := func(ctx context.Context, m member.Message) error {
		if _, ok := m.Values[routing.FenceField]; ok {
			t.Errorf("the handler got %s: %v", routing.FenceField, m.Values)
		}
		if m.Field("p") == "new" && !v20.Load() {
			t.Error("an entry of routing version 20 was handled before an answer of version 20")
		}
		return got.handler(ctx, m)
	}
	rt := e.start(t, e.config(func(c *member.Config) { c.HoldHeartbeatInterval = 30 * time.Millisecond }), h)
	eventually(t, "shard 0 owned", ownsShards(rt, 0))
	e.add(t, 0, "*", "p", "untagged")
	e.add(t, 0, "*", "p", "known", routing.FenceField, "12")
	eventually(t, "entries of known versions handled at once", payloadsAre(&got, "untagged", "known"))
	base := len(e.coord.requests("w"))
	if rt.Stats().Holds != 0 {
		t.Fatalf("stats %+v: nothing should have waited", rt.Stats())
	}

	id := e.add(t, 0, "*", "p", "new", routing.FenceField, "20")
	// With a one-minute interval, only the entry makes the member heartbeat.
	eventually(t, "a heartbeat asked by the entry", func() bool { return len(e.coord.requests("w")) > base })
	e.moreHeartbeats(t, "w", 3) // answered with version 12: still waiting
	if got.has("new") {
		t.Fatal("handled before an answer of its version")
	}
	// Version 20 arrives with a barrier below the entry: it waits for that.
	v20.Store(true)
	e.coord.set(ordered{mv: 20, assigned: []int{0}, barriers: map[int]string{0: "0-1"}, slow: true}.reply())
	e.moreHeartbeats(t, "w", 3)
	if got.has("new") {
		t.Fatalf("entry %s handled past the barrier of the answer it waited for", id)
	}
	e.coord.set(ordered{mv: 20, assigned: []int{0}, slow: true}.reply())
	eventually(t, "handled once released", payloadsAre(&got, "untagged", "known", "new"))
	eventually(t, "acked", func() bool { return e.pending(t, 0) == 0 })
	if st := rt.Stats(); st.Holds != 1 {
		t.Fatalf("stats %+v, want one hold", st)
	}
}

// Members strip the fence field whatever the ordering.
func TestFenceFieldStrippedInUnorderedGroups(t *testing.T) {
	e := setup(t, 1, ordered{mv: 12, assigned: []int{0}, ordering: client.OrderingNone}.reply())
	var got received
	rt := e.start(t, e.config(nil), got.handler)
	eventually(t, "shard 0 owned", ownsShards(rt, 0))
	e.add(t, 0, "*", "p", "x", routing.FenceField, "3")
	eventually(t, "handled", func() bool { return got.has("x") })
	got.mu.Lock()
	defer got.mu.Unlock()
	if _, ok := got.msgs[0].Values[routing.FenceField]; ok || len(got.msgs[0].Values) != 1 {
		t.Fatalf("values %v", got.msgs[0].Values)
	}
}

// A member taking a shard of an ordered group claims everything pending on
// it first, whatever its idle time, over several XAUTOCLAIM pages, and
// handles it in id order before any new entry. An unordered group keeps
// waiting ClaimMinIdle.
func TestOrderedTakeoverClaimsAllPendingFirst(t *testing.T) {
	for _, ordering := range []string{client.OrderingKey, client.OrderingNone} {
		t.Run(ordering, func(t *testing.T) {
			e := setup(t, 1, ordered{mv: 12, assigned: []int{0}, ordering: ordering}.reply())
			ctx := context.Background()
			var want []string
			for i := 0; i < 25; i++ {
				want = append(want, "old-"+strconv.Itoa(i))
				e.add(t, 0, "*", "p", want[i])
			}
			// A previous owner read them and died before acking.
			if err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "dead", Streams: []string{"orders:0", ">"}, Count: 100}).Err(); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				want = append(want, "new-"+strconv.Itoa(i))
				e.add(t, 0, "*", "p", want[len(want)-1])
			}
			var got received
			var ev events
			e.start(t, e.config(func(c *member.Config) {
				c.ClaimMinIdle = time.Minute
				c.BatchSize = 10
				c.OnEvent = ev.on
			}), got.handler)
			if ordering == client.OrderingNone {
				eventually(t, "new entries handled", func() bool { return len(got.payloads()) == 3 })
				if p := got.payloads(); p[0] != "new-0" || e.pending(t, 0) != 25 {
					t.Fatalf("handled %v; want only the new entries, the old ones left to ClaimMinIdle", p)
				}
				return
			}
			eventually(t, "everything handled", func() bool { return len(got.payloads()) == len(want) })
			if p := got.payloads(); !equalStrings(p, want) {
				t.Fatalf("handled %v, want %v", p, want)
			}
			eventually(t, "acked", func() bool { return e.pending(t, 0) == 0 })
			total := 0
			for _, c := range ev.of(member.EventClaimed) {
				total += c.Count
			}
			if total != 25 {
				t.Fatalf("claimed %d, want 25", total)
			}
		})
	}
}

// Entries held back when the member releases the shard stay pending,
// unacked; the next owner claims them and handles them, in order, before
// the entries that came later.
func TestHeldEntriesGoToTheNextOwner(t *testing.T) {
	var phase atomic.Int32 // 0: a owns shard 0 behind a barrier; 1: a revoked; 2: b owns it, released
	barrier := map[int]string{0: "5-2"}
	e := setup(t, 1, func(req client.HeartbeatRequest) (client.HeartbeatResponse, int) {
		o := ordered{mv: 12, barriers: barrier}
		switch p := phase.Load(); {
		case req.MemberID == "a" && p == 0:
			o.assigned = []int{0}
		case req.MemberID == "b" && p == 2:
			o.assigned, o.barriers = []int{0}, nil
		}
		return o.reply()(req)
	})
	for i, p := range []string{"a", "b", "c", "d"} {
		e.add(t, 0, "5-"+strconv.Itoa(i+1), "p", p)
	}
	var gotA, gotB received
	a := e.start(t, e.config(func(c *member.Config) { c.MemberIDBase = "a" }), gotA.handler)
	eventually(t, "a owns shard 0", ownsShards(a, 0))
	// b's ClaimMinIdle would leave a's entries alone: ordering claims them.
	e.start(t, e.config(func(c *member.Config) { c.MemberIDBase, c.ClaimMinIdle = "b", time.Minute }), gotB.handler)
	eventually(t, "a handled up to the barrier", payloadsAre(&gotA, "a", "b"))
	e.moreHeartbeats(t, "a", 3)

	phase.Store(1)
	eventually(t, "a released shard 0", func() bool {
		st, _ := revokeState(e.coord.last("a"), 0)
		return st == client.RevokeRevoked
	})
	if p := gotA.payloads(); len(p) != 2 || e.pending(t, 0) != 2 {
		t.Fatalf("a handled %v, %d pending: the held entries must stay pending", p, e.pending(t, 0))
	}
	e.add(t, 0, "6-1", "p", "e")

	phase.Store(2)
	eventually(t, "b handled the held entries, then the new one", payloadsAre(&gotB, "c", "d", "e"))
	eventually(t, "acked", func() bool { return e.pending(t, 0) == 0 })
	if p := gotA.payloads(); len(p) != 2 {
		t.Fatalf("a handled %v after releasing the shard", p)
	}
}

// A runtime closed while it holds entries back leaves them pending.
func TestCloseWhileHoldingLeavesEntriesPending(t *testing.T) {
	e := setup(t, 1, ordered{mv: 12, assigned: []int{0}, barriers: map[int]string{0: "5-1"}}.reply())
	var got received
	rt, err := member.Start(context.Background(), e.config(nil), got.handler)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "shard 0 owned", ownsShards(rt, 0))
	e.add(t, 0, "5-1", "p", "a")
	e.add(t, 0, "5-2", "p", "b")
	eventually(t, "held", func() bool { return rt.Stats().Holds == 1 && got.has("a") })
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if got.has("b") || e.pending(t, 0) != 1 {
		t.Fatalf("handled %v, %d pending: want b held and pending", got.payloads(), e.pending(t, 0))
	}
	leave := e.coord.last("w")
	if st, _ := revokeState(leave, 0); *leave.MemberEpoch != -1 || st != client.RevokeRevoked {
		t.Fatalf("leave %+v", leave)
	}
}

// A held-back entry that Redis no longer lists as pending (the consumer group
// was lost and recreated at the stream's start) makes the reader start over:
// it reads the shard again from what the group delivers, instead of holding
// forever while the barrier waits for the group to read the shard again.
func TestLostHeldEntryMakesTheReaderStartOver(t *testing.T) {
	e := setup(t, 1, ordered{mv: 12, assigned: []int{0}, barriers: map[int]string{0: "5-2"}}.reply())
	for i, p := range []string{"a", "b", "c"} {
		e.add(t, 0, "5-"+strconv.Itoa(i+1), "p", p)
	}
	var got received
	e.start(t, e.config(func(c *member.Config) { c.HoldHeartbeatInterval = 30 * time.Millisecond }), got.handler)
	eventually(t, "entries up to After handled", payloadsAre(&got, "a", "b"))
	eventually(t, "c held", func() bool { return e.pending(t, 0) == 1 })
	// Redis loses the consumer group; the coordinator recreates it at 0.
	ctx := context.Background()
	key := routing.StreamKey(prefix, 0)
	if err := e.rdb.XGroupDestroy(ctx, key, group).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.XGroupCreate(ctx, key, group, "0").Err(); err != nil {
		t.Fatal(err)
	}
	// The entries up to the barrier are handled again (at least once), in
	// order, and acked: the group's proof can complete.
	eventually(t, "a and b handled again", payloadsAre(&got, "a", "b", "a", "b"))
	eventually(t, "c held again, nothing else pending", func() bool { return e.pending(t, 0) == 1 })
	e.coord.set(ordered{mv: 12, assigned: []int{0}}.reply())
	eventually(t, "released", payloadsAre(&got, "a", "b", "a", "b", "c"))
	eventually(t, "all acked", func() bool { return e.pending(t, 0) == 0 })
}
