package member_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/routing"
)

func TestMemberIDs(t *testing.T) {
	for _, tc := range []struct {
		name string
		base string
		n    int
		want []string
	}{
		{"one member keeps the base", "pod-1", 1, []string{"pod-1"}},
		{"zero is one", "pod-1", 0, []string{"pod-1"}},
		{"several get -m suffixes", "10.0.0.7", 3, []string{"10.0.0.7-m0", "10.0.0.7-m1", "10.0.0.7-m2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := member.MemberIDs(tc.base, tc.n); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("MemberIDs(%q, %d) = %v, want %v", tc.base, tc.n, got, tc.want)
			}
		})
	}
}

func TestDefaultMemberIDBase(t *testing.T) {
	t.Setenv("POD_IP", "10.1.2.3")
	t.Setenv("HOSTNAME", "web-7")
	if got := member.DefaultMemberIDBase(); got != "10.1.2.3" {
		t.Fatalf("with POD_IP: %q", got)
	}
	t.Setenv("POD_IP", "")
	t.Setenv("HOSTNAME", " web 7/x. ")
	if got := member.DefaultMemberIDBase(); got != "web-7-x" {
		t.Fatalf("with HOSTNAME: %q, want the sanitised web-7-x", got)
	}
}

func TestStartValidatesConfig(t *testing.T) {
	_, err := member.Start(context.Background(), member.Config{StreamPrefix: "a{b}", ConsumerGroup: "g"}, nil)
	if !errors.Is(err, member.ErrInvalidConfig) {
		t.Fatalf("err %v, want ErrInvalidConfig", err)
	}
	for _, want := range []string{"Coordinator", "Redis", "handler", "braces"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not mention %s", err, want)
		}
	}
}

func TestJoinReadAckAndReportProgress(t *testing.T) {
	e := setup(t, 2, answer(client.StatusOK, 2, 0, 1))
	var got received
	rt := e.start(t, e.config(nil), got.handler)
	eventually(t, "both shards owned", func() bool { return equalInts(owned(e.coord.last("w")), []int{0, 1}) })
	first := e.coord.requests("w")[0]
	if *first.MemberEpoch != 0 || len(first.OwnedShards) != 0 || *first.ProtocolVersion != 1 || *first.MemberName != "w" || first.RequestID == "" {
		t.Fatalf("join heartbeat %+v: want epoch 0, nothing owned", first)
	}
	id0 := e.publish(t, 0, "a")
	e.publish(t, 1, "b")
	eventually(t, "both messages handled", func() bool { return got.has("a") && got.has("b") })
	eventually(t, "acks", func() bool { return e.pending(t, 0) == 0 && e.pending(t, 1) == 0 })
	eventually(t, "progress reported", func() bool {
		req := e.coord.last("w")
		for _, p := range req.ShardProgress {
			if p.Shard.ShardIndex == 0 && p.LastAckedID != nil && *p.LastAckedID == id0 && p.StreamKey == "orders:0" {
				return true
			}
		}
		return false
	})
	last := e.coord.last("w")
	if *last.MemberEpoch != 2 || *last.MetadataVersion != 12 {
		t.Fatalf("epochs not adopted: %+v", last)
	}
	if st := rt.Stats(); st.Handled != 2 || st.Acked != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestConcurrencyRunsIndependentLogicalMembers(t *testing.T) {
	e := setup(t, 3, func(req client.HeartbeatRequest) (client.HeartbeatResponse, int) {
		// Each member gets the shard of its suffix and its own epoch.
		idx := int(req.MemberID[len(req.MemberID)-1] - '0')
		return answer(client.StatusOK, int64(5+idx), idx)(req)
	})
	var got received
	rt := e.start(t, e.config(func(c *member.Config) { c.Concurrency = 3 }), got.handler)
	if ids := rt.MemberIDs(); strings.Join(ids, ",") != "w-m0,w-m1,w-m2" {
		t.Fatalf("member ids %v", ids)
	}
	for i, id := range rt.MemberIDs() {
		eventually(t, id+" owns its shard", func() bool {
			req := e.coord.last(id)
			return equalInts(owned(req), []int{i}) && *req.MemberEpoch == int64(5+i)
		})
	}
	for i := 0; i < 3; i++ {
		e.publish(t, i, string(rune('a'+i)))
	}
	eventually(t, "all handled", func() bool { return len(got.payloads()) == 3 })
	for _, m := range got.msgs {
		if m.MemberID != "w-m"+string(rune('0'+m.ShardIndex)) {
			t.Fatalf("shard %d handled by %s", m.ShardIndex, m.MemberID)
		}
	}
}

// A revoked shard is released only after its in-flight messages are handled
// and acked: DRAINING while they run, REVOKED (inFlight 0) after, then gone.
func TestRevokeFinishesInFlightBeforeRelease(t *testing.T) {
	e := setup(t, 2, answer(client.StatusOK, 2, 0, 1))
	gate := make(chan struct{})
	var started atomic.Bool
	var got received
	h := func(ctx context.Context, m member.Message) error {
		if m.ShardIndex == 1 {
			started.Store(true)
			<-gate
		}
		return got.handler(ctx, m)
	}
	e.start(t, e.config(nil), h)
	eventually(t, "both shards owned", func() bool { return equalInts(owned(e.coord.last("w")), []int{0, 1}) })
	e.publish(t, 1, "slow")
	eventually(t, "handler running", started.Load)

	e.coord.set(answer(client.StatusOK, 3, 0))
	eventually(t, "DRAINING reported", func() bool {
		st, inFlight := revokeState(e.coord.last("w"), 1)
		return st == client.RevokeDraining && inFlight >= 1
	})
	if req := e.coord.last("w"); !equalInts(owned(req), []int{0}) {
		t.Fatalf("owned %v while draining", owned(req))
	}
	if e.pending(t, 1) != 1 {
		t.Fatal("the in-flight message must still be pending")
	}
	// Nothing is released while the handler runs (over several heartbeats,
	// each a chance to report the release).
	e.heartbeats(t, "w", 4)
	for _, req := range e.coord.requests("w") {
		if st, _ := revokeState(req, 1); st == client.RevokeRevoked {
			t.Fatal("REVOKED reported while a message was in flight")
		}
	}
	close(gate)
	eventually(t, "REVOKED reported", func() bool {
		st, inFlight := revokeState(e.coord.last("w"), 1)
		return st == client.RevokeRevoked && inFlight == 0
	})
	if e.pending(t, 1) != 0 || !got.has("slow") {
		t.Fatal("the in-flight message must be handled and acked before REVOKED")
	}
	eventually(t, "shard 1 forgotten", func() bool {
		req := e.coord.last("w")
		st, _ := revokeState(req, 1)
		return st == "" && equalInts(owned(req), []int{0})
	})
	// The shard is no longer read: an entry published on it stays undelivered
	// while a later one on shard 0 is handled and the member heartbeats on.
	after := e.publish(t, 1, "after")
	e.publish(t, 0, "marker")
	eventually(t, "the marker on shard 0 handled", func() bool { return got.has("marker") })
	e.heartbeats(t, "w", 3)
	if got.has("after") || e.delivered(t, 1, after) {
		t.Fatal("a released shard was read")
	}
}

// SYNC_METADATA and REVOKE_PENDING keep owned ∩ assigned and never start
// shards; only OK does.
func TestOnlyOKStartsNewShards(t *testing.T) {
	e := setup(t, 2, answer(client.StatusOK, 2, 0))
	var got received
	e.start(t, e.config(nil), got.handler)
	eventually(t, "shard 0 owned", func() bool { return equalInts(owned(e.coord.last("w")), []int{0}) })

	e.coord.set(answer(client.StatusRevokePending, 3, 0, 1))
	eventually(t, "epoch 3 adopted", func() bool { return *e.coord.last("w").MemberEpoch == 3 })
	e.heartbeats(t, "w", 3) // each after the member acted on a REVOKE_PENDING
	if req := e.coord.last("w"); !equalInts(owned(req), []int{0}) {
		t.Fatalf("REVOKE_PENDING started shards: owned %v", owned(req))
	}
	x := e.publish(t, 1, "x")
	e.publish(t, 0, "marker")
	eventually(t, "the marker on shard 0 handled", func() bool { return got.has("marker") })
	e.heartbeats(t, "w", 3)
	if got.has("x") || e.delivered(t, 1, x) {
		t.Fatal("shard 1 read without an OK")
	}

	e.coord.set(answer(client.StatusSyncMetadata, 4))
	eventually(t, "shard 0 revoked by SYNC_METADATA", func() bool {
		req := e.coord.last("w")
		st, _ := revokeState(req, 0)
		return *req.MemberEpoch == 4 && len(req.OwnedShards) == 0 && (st == client.RevokeRevoked || st == "")
	})

	e.coord.set(answer(client.StatusOK, 5, 0, 1))
	eventually(t, "OK starts both", func() bool { return equalInts(owned(e.coord.last("w")), []int{0, 1}) })
	eventually(t, "x handled", func() bool { return got.has("x") })
}

func TestFencedStopsEverythingAndRejoins(t *testing.T) {
	e := setup(t, 1, answer(client.StatusOK, 2, 0))
	var got received
	var events sync.Map
	cfg := e.config(func(c *member.Config) {
		c.OnEvent = func(ev member.Event) { events.Store(ev.Kind, ev) }
	})
	e.start(t, cfg, got.handler)
	eventually(t, "shard 0 owned", func() bool { return equalInts(owned(e.coord.last("w")), []int{0}) })

	// Fenced, then the coordinator only accepts a rejoin, and grants nothing yet.
	var rejoined atomic.Bool
	e.coord.set(func(req client.HeartbeatRequest) (client.HeartbeatResponse, int) {
		if *req.MemberEpoch == 0 {
			rejoined.Store(true)
			if len(req.OwnedShards)+len(req.RevokingShards)+len(req.ShardProgress) != 0 {
				t.Errorf("rejoin must report nothing: %+v", req)
			}
			return answer(client.StatusOK, 7)(req)
		}
		if rejoined.Load() {
			return answer(client.StatusOK, 7)(req)
		}
		return client.HeartbeatResponse{Status: client.StatusFenced, MemberEpoch: 9, MetadataVersion: 20}, 0
	})
	eventually(t, "rejoin with epoch 0", rejoined.Load)
	if _, ok := events.Load(member.EventFenced); !ok {
		t.Fatal("no fenced event")
	}
	id := e.publish(t, 0, "while-unassigned")
	e.heartbeats(t, "w", 4) // each after the member acted on an answer granting nothing
	if got.has("while-unassigned") || e.delivered(t, 0, id) {
		t.Fatal("a fenced member kept reading")
	}
	if req := e.coord.last("w"); *req.MemberEpoch != 7 || len(req.OwnedShards) != 0 {
		t.Fatalf("after rejoin: %+v", req)
	}
}

func TestUnknownMemberRejoins(t *testing.T) {
	e := setup(t, 1, answer(client.StatusOK, 2, 0))
	var got received
	e.start(t, e.config(nil), got.handler)
	eventually(t, "shard 0 owned", func() bool { return equalInts(owned(e.coord.last("w")), []int{0}) })
	e.coord.set(func(req client.HeartbeatRequest) (client.HeartbeatResponse, int) {
		if *req.MemberEpoch == 0 {
			return answer(client.StatusOK, 3, 0)(req)
		}
		return client.HeartbeatResponse{Status: client.StatusUnknownMember, MemberEpoch: *req.MemberEpoch}, 0
	})
	eventually(t, "rejoined and owning shard 0 again", func() bool {
		req := e.coord.last("w")
		return *req.MemberEpoch == 3 && equalInts(owned(req), []int{0})
	})
}

func TestRejectedHeartbeatKeepsState(t *testing.T) {
	for _, status := range []string{client.StatusInvalidRequest, client.StatusUnsupportedProtocol} {
		t.Run(status, func(t *testing.T) {
			e := setup(t, 1, answer(client.StatusOK, 4, 0))
			var got received
			// A rejected heartbeat does not renew the lease; a long one keeps
			// this test about state, not about lapses.
			e.start(t, e.config(func(c *member.Config) { c.MemberLease = time.Minute }), got.handler)
			eventually(t, "shard 0 owned", func() bool { return equalInts(owned(e.coord.last("w")), []int{0}) })
			e.coord.set(func(req client.HeartbeatRequest) (client.HeartbeatResponse, int) {
				return client.HeartbeatResponse{Status: status, MemberEpoch: *req.MemberEpoch}, 0
			})
			n := len(e.coord.requests("w"))
			eventually(t, "more heartbeats", func() bool { return len(e.coord.requests("w")) > n+3 })
			req := e.coord.last("w")
			if *req.MemberEpoch != 4 || !equalInts(owned(req), []int{0}) {
				t.Fatalf("state changed after %s: %+v", status, req)
			}
			e.publish(t, 0, "still-read")
			eventually(t, "still reading", func() bool { return got.has("still-read") })
		})
	}
}

// When heartbeats fail for longer than the member lease, reading stops until
// a heartbeat succeeds again.
func TestLeaseLapsePausesReading(t *testing.T) {
	e := setup(t, 1, answer(client.StatusOK, 2, 0))
	var got received
	var lapsed, restored atomic.Bool
	cfg := e.config(func(c *member.Config) {
		c.MemberLease = 300 * time.Millisecond
		c.OnEvent = func(ev member.Event) {
			switch ev.Kind {
			case member.EventLeaseLapsed:
				lapsed.Store(true)
			case member.EventLeaseRestored:
				restored.Store(true)
			}
		}
	})
	rt := e.start(t, cfg, got.handler)
	eventually(t, "shard 0 owned", func() bool { return equalInts(owned(e.coord.last("w")), []int{0}) })
	e.coord.set(httpStatus(http.StatusServiceUnavailable))
	eventually(t, "lease lapsed", lapsed.Load)
	if rt.Members()[0].LeaseValid {
		t.Fatal("status says the lease is valid")
	}
	e.heartbeats(t, "w", 2) // a read already blocked (Block 50 ms) has ended by now
	id := e.publish(t, 0, "during-outage")
	e.heartbeats(t, "w", 4) // each failed, each a chance to read
	if got.has("during-outage") || e.delivered(t, 0, id) {
		t.Fatal("read a shard after the lease lapsed")
	}
	e.coord.set(answer(client.StatusOK, 2, 0))
	eventually(t, "lease restored", restored.Load)
	eventually(t, "reading resumes", func() bool { return got.has("during-outage") })
	if st := rt.Stats(); st.HeartbeatFailures == 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestGracefulLeave(t *testing.T) {
	e := setup(t, 2, answer(client.StatusOK, 2, 0, 1))
	var got received
	rt, err := member.Start(context.Background(), e.config(nil), got.handler)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "both shards owned", func() bool { return equalInts(owned(e.coord.last("w")), []int{0, 1}) })
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	leave := e.coord.last("w")
	if *leave.MemberEpoch != -1 || *leave.RuntimeConsumerCapacity.AvailableConcurrency != 0 || len(leave.OwnedShards) != 0 {
		t.Fatalf("leave heartbeat %+v", leave)
	}
	for _, s := range []int{0, 1} {
		if st, inFlight := revokeState(leave, s); st != client.RevokeRevoked || inFlight != 0 {
			t.Fatalf("shard %d reported %s/%d on leave, want REVOKED/0", s, st, inFlight)
		}
	}
}

// A new owner claims what a crashed owner left pending.
func TestTakeoverClaimsPendingEntries(t *testing.T) {
	e := setup(t, 1, answer(client.StatusOK, 2, 0))
	ctx := context.Background()
	e.publish(t, 0, "orphan-1")
	e.publish(t, 0, "orphan-2")
	// A previous owner read them and died before acking.
	if _, err := e.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "dead", Streams: []string{"orders:0", ">"}, Count: 10}).Result(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the orphans idle for ClaimMinIdle (100 ms)", func() bool {
		p, err := e.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: "orders:0", Group: group, Start: "-", End: "+", Count: 10}).Result()
		return err == nil && len(p) == 2 && p[0].Idle >= 100*time.Millisecond && p[1].Idle >= 100*time.Millisecond
	})
	var got received
	var claimed atomic.Int64
	cfg := e.config(func(c *member.Config) {
		c.OnEvent = func(ev member.Event) {
			if ev.Kind == member.EventClaimed {
				claimed.Add(int64(ev.Count))
			}
		}
	})
	e.start(t, cfg, got.handler)
	eventually(t, "orphans handled", func() bool { return got.has("orphan-1") && got.has("orphan-2") })
	eventually(t, "orphans acked", func() bool { return e.pending(t, 0) == 0 })
	if claimed.Load() != 2 {
		t.Fatalf("claimed %d, want 2", claimed.Load())
	}
	for _, m := range got.msgs {
		if m.Deliveries != 2 {
			t.Fatalf("claimed message delivered %d times, want 2", m.Deliveries)
		}
	}
}

// A failing message stays pending, is retried after RetryBackoff, and goes to
// the dead-letter hook on its MaxDeliveries-th failure.
func TestFailedMessageRetriedThenDeadLettered(t *testing.T) {
	e := setup(t, 1, answer(client.StatusOK, 2, 0))
	var attempts atomic.Int64
	var dead []member.Message
	var mu sync.Mutex
	h := func(ctx context.Context, m member.Message) error {
		if m.Field("p") == "poison" {
			attempts.Add(1)
			return errors.New("cannot handle")
		}
		return nil
	}
	cfg := e.config(func(c *member.Config) {
		c.MaxDeliveries = 3
		c.DeadLetter = func(ctx context.Context, m member.Message, err error) error {
			mu.Lock()
			dead = append(dead, m)
			mu.Unlock()
			return nil
		}
	})
	rt := e.start(t, cfg, h)
	eventually(t, "shard 0 owned", func() bool { return equalInts(owned(e.coord.last("w")), []int{0}) })
	e.publish(t, 0, "poison")
	eventually(t, "first failure pending", func() bool { return attempts.Load() == 1 && e.pending(t, 0) == 1 })
	eventually(t, "pending reported", func() bool {
		for _, p := range e.coord.last("w").ShardProgress {
			if p.PendingCount == 1 {
				return true
			}
		}
		return false
	})
	eventually(t, "dead-lettered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(dead) == 1
	})
	eventually(t, "acked after dead-lettering", func() bool { return e.pending(t, 0) == 0 })
	if attempts.Load() != 3 || dead[0].Deliveries != 3 {
		t.Fatalf("%d attempts, dead-lettered at delivery %d; want 3 and 3", attempts.Load(), dead[0].Deliveries)
	}
	if st := rt.Stats(); st.DeadLettered != 1 || st.Failed != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// A shard whose stream is missing (retired, or not provisioned yet) does not
// break the member; reading starts once it exists.
func TestMissingStreamIsTolerated(t *testing.T) {
	e := setup(t, 1, answer(client.StatusOK, 2, 0, 1)) // shard 1 has no stream
	var got received
	e.start(t, e.config(nil), got.handler)
	eventually(t, "both owned", func() bool { return equalInts(owned(e.coord.last("w")), []int{0, 1}) })
	e.publish(t, 0, "a")
	eventually(t, "shard 0 still read", func() bool { return got.has("a") })
	if err := e.rdb.XGroupCreateMkStream(context.Background(), routing.StreamKey(prefix, 1), group, "$").Err(); err != nil {
		t.Fatal(err)
	}
	e.publish(t, 1, "b")
	eventually(t, "shard 1 read once provisioned", func() bool { return got.has("b") })
}

// A shard re-assigned by an OK while it drains is read again once drained.
func TestReassignedWhileDrainingResumes(t *testing.T) {
	e := setup(t, 2, answer(client.StatusOK, 2, 0, 1))
	gate := make(chan struct{})
	var blocked atomic.Bool
	var got received
	h := func(ctx context.Context, m member.Message) error {
		if m.Field("p") == "slow" {
			blocked.Store(true)
			<-gate
		}
		return got.handler(ctx, m)
	}
	e.start(t, e.config(nil), h)
	eventually(t, "both owned", func() bool { return equalInts(owned(e.coord.last("w")), []int{0, 1}) })
	e.publish(t, 1, "slow")
	eventually(t, "blocked", blocked.Load)
	e.coord.set(answer(client.StatusOK, 3, 0))
	eventually(t, "draining", func() bool { st, _ := revokeState(e.coord.last("w"), 1); return st == client.RevokeDraining })
	e.coord.set(answer(client.StatusOK, 4, 0, 1))
	eventually(t, "the re-assignment adopted while draining", func() bool { return *e.coord.last("w").MemberEpoch == 4 })
	close(gate)
	eventually(t, "owned again", func() bool { return equalInts(owned(e.coord.last("w")), []int{0, 1}) })
	e.publish(t, 1, "again")
	eventually(t, "read again", func() bool { return got.has("again") })
}
