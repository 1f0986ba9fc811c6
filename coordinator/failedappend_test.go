package coordinator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// roundRig is a coordinator on a faultLog, the fake shard Redis and a virtual
// clock, with member a converged on shard 0 and member b on shard 1, and b in
// a metadata-correction round it never converges in: it keeps reporting a
// metadata version above the log's.
type roundRig struct {
	t     *testing.T
	clock *simClock
	log   *faultLog
	c     *coordinator.Coordinator
	epoch map[string]int64
	n     int
}

func newRoundRig(t *testing.T) *roundRig {
	t.Helper()
	r := &roundRig{t: t, clock: newSimClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), log: newFaultLog(), epoch: map[string]int64{}}
	r.c = coordinator.New(coordinator.Config{TickInterval: time.Hour, ShardCheckInterval: -1, BarrierCheckInterval: time.Hour, SnapshotEvery: -1}, r.log, newFakeShards(r.clock), nil, r.clock)
	if err := r.c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	r.c.Run()
	t.Cleanup(r.c.Close)
	two := 2
	if _, err := r.c.CreateGroup(context.Background(), events.Meta{Actor: "test"}, commands.CreateGroupInput{
		StreamPrefix: simKey.StreamPrefix, ConsumerGroup: simKey.ConsumerGroup, InitialShardCount: &two, RequestedBy: "test",
	}); err != nil {
		t.Fatal(err)
	}
	r.mustStatus("a", 0, nil, wire.StatusOK)
	r.mustStatus("a", 0, []int{0, 1}, wire.StatusOK)
	r.mustStatus("b", 0, nil, wire.StatusOK)
	r.mustStatus("a", 0, []int{0, 1}, wire.StatusOK) // told to keep only 0
	r.mustStatus("a", 0, []int{0}, wire.StatusOK)
	if resp := r.mustStatus("b", 0, nil, wire.StatusOK); fmt.Sprint(refInts(resp.Assignment.AssignedShards)) != "[1]" {
		t.Fatalf("b was not granted shard 1: %v", refInts(resp.Assignment.AssignedShards))
	}
	r.mustStatus("b", 0, []int{1}, wire.StatusOK)
	// b reports a metadata version the log never had: a round opens.
	r.mustStatus("b", 5, []int{1}, wire.StatusSyncMetadata)
	if !r.c.CorrectionOpen(simKey) {
		t.Fatal("no correction round opened")
	}
	return r
}

func (r *roundRig) group() *projection.Group {
	g, ok := r.c.State().Group(simKey)
	if !ok {
		r.t.Fatal("no group")
	}
	return g
}

// heartbeat sends id's heartbeat with its last epoch, mvAbove above the
// stored metadata version, owning owned.
func (r *roundRig) heartbeat(id string, mvAbove int64, owned []int) (*wire.HeartbeatResponse, error) {
	r.n++
	r.clock.Advance(100 * time.Millisecond)
	req := &wire.HeartbeatRequest{
		ProtocolVersion: ptr(wire.ProtocolVersion), RequestID: fmt.Sprintf("r%d", r.n), MemberID: id, MemberName: ptr(id),
		MemberEpoch: ptr(r.epoch[id]), MetadataVersion: ptr(r.group().MetadataVersion + mvAbove),
		RuntimeConsumerCapacity: &wire.Capacity{RuntimeMaxConcurrency: ptr(1), AvailableConcurrency: ptr(1)},
		OwnedShards:             shardIDs(owned), RevokingShards: []wire.RevokingReport{}, ShardProgress: []wire.ShardProgress{},
	}
	resp, err := r.c.Heartbeat(context.Background(), simKey, id, "", req)
	if err == nil {
		switch resp.Status {
		case wire.StatusOK, wire.StatusSyncMetadata, wire.StatusRevokePending:
			r.epoch[id] = resp.MemberEpoch
		}
	}
	return resp, err
}

func (r *roundRig) mustStatus(id string, mvAbove int64, owned []int, want string) *wire.HeartbeatResponse {
	r.t.Helper()
	resp, err := r.heartbeat(id, mvAbove, owned)
	if err != nil || resp.Status != want {
		r.t.Fatalf("heartbeat of %s: %+v %v, want %s", id, resp, err, want)
	}
	return resp
}

// untilOverdue lets the round run into its rebalance timeout, a converging
// and b not, both heartbeating every 3 s so no lease lapses.
func (r *roundRig) untilOverdue() {
	r.t.Helper()
	for i := 0; i < 18; i++ {
		r.clock.Advance(3 * time.Second)
		r.mustStatus("b", 5, []int{1}, wire.StatusSyncMetadata)
		if _, err := r.heartbeat("a", 0, []int{0}); err != nil {
			r.t.Fatal(err)
		}
	}
	r.clock.Advance(3 * time.Second)
}

// fenced reports whether the log records member.fenced for id.
func (r *roundRig) fenced(id string) bool {
	for _, rec := range decoded(r.t, r.log.Entries()) {
		if f, ok := rec.Event.(*events.MemberFenced); ok && f.MemberID == id {
			return true
		}
	}
	return false
}

// checkFold: the state served is the log folded again.
func (r *roundRig) checkFold() {
	r.t.Helper()
	st := projection.New()
	if _, err := projection.Fold(context.Background(), r.log, st, projection.FoldOptions{}); err != nil {
		r.t.Fatal(err)
	}
	a, _ := st.Encode()
	b, _ := r.c.State().Encode()
	if !bytes.Equal(a, b) {
		r.t.Fatalf("the state served differs from the log folded again:\n  %v", msgpackDiff(b, a, 10))
	}
}

// neverKeepsShard1 sends b's heartbeats for a while and fails if any answer
// grants it shard 1 without the log recording the grant.
func (r *roundRig) neverKeepsShard1(mvAbove int64) {
	r.t.Helper()
	for i := 0; i < 5; i++ {
		r.clock.Advance(3 * time.Second)
		resp, err := r.heartbeat("b", mvAbove, []int{1})
		if err != nil {
			r.t.Fatalf("b's heartbeat %d: %v", i, err)
		}
		if resp.Status == wire.StatusOK && containsInt(refInts(resp.Assignment.AssignedShards), 1) {
			if m := r.group().Member("b"); m == nil || !containsInt(m.Granted, 1) {
				r.t.Fatalf("b's heartbeat %d is OK with shard 1, which the log does not grant it", i)
			}
			if r.fenced("b") {
				r.t.Fatalf("b's heartbeat %d is OK with shard 1 after the log fenced it", i)
			}
		}
	}
}

// TestFailedAppendEndingOverdueRoundChangesNothing: at the rebalance timeout
// of a correction round b never converged in, a's heartbeat ends the round
// (b is fenced and quarantined) and that append fails. a gets 503, and
// nothing of the decision happened: the round stays open in memory, b is
// not quarantined, and the next heartbeat once the log can be written
// fences b. The round used to be closed and b quarantined in memory with no
// member.fenced in the log: b's next heartbeats were answered OK with shard
// 1, for good.
func TestFailedAppendEndingOverdueRoundChangesNothing(t *testing.T) {
	r := newRoundRig(t)
	r.untilOverdue()
	r.log.failNext(appendRefused)
	if _, err := r.heartbeat("a", 0, []int{0}); !isKind(err, commands.KindUnavailable) {
		t.Fatalf("a's heartbeat with the log refusing the append: %v, want 503", err)
	}
	if r.fenced("b") {
		t.Fatal("the refused append is in the log")
	}
	if !r.c.CorrectionOpen(simKey) {
		t.Fatal("the round was closed by a decision whose append failed")
	}
	r.checkFold()
	// The log can be written again: b's own heartbeat ends the round.
	resp, err := r.heartbeat("b", 5, []int{1})
	if err != nil || resp.Status != wire.StatusFenced {
		t.Fatalf("b's heartbeat after the failed append: %+v %v, want %s", resp, err, wire.StatusFenced)
	}
	if !r.fenced("b") {
		t.Fatal("b was answered FENCED but the log does not record it")
	}
	r.checkFold()
	r.neverKeepsShard1(5)
}

// TestRefusedAppendSaysNothingWasRecorded: an append Redis refused with an
// answer (out of memory) was answered "it may have been recorded; read the
// state before retrying", as if the answer had been lost; it says the
// decision was not recorded, so the caller may retry. Nothing changed.
func TestRefusedAppendSaysNothingWasRecorded(t *testing.T) {
	r := newRoundRig(t)
	r.untilOverdue()
	r.log.failNext(appendRefusedUnwritten)
	_, err := r.heartbeat("a", 0, []int{0})
	if !isKind(err, commands.KindUnavailable) {
		t.Fatalf("a's heartbeat with Redis refusing the append: %v, want 503", err)
	}
	var ce *commands.Error
	if !errors.As(err, &ce) || !strings.Contains(ce.Message, "not recorded") || strings.Contains(ce.Message, "may have been recorded") {
		t.Fatalf("the refusal is answered %q, want that the decision was not recorded", ce.Message)
	}
	if r.fenced("b") || !r.c.CorrectionOpen(simKey) {
		t.Fatal("the refused append changed the state")
	}
	r.checkFold()
	if resp, err := r.heartbeat("b", 5, []int{1}); err != nil || resp.Status != wire.StatusFenced {
		t.Fatalf("b's heartbeat once Redis takes writes again: %+v %v, want %s", resp, err, wire.StatusFenced)
	}
	r.checkFold()
}

// TestLostAnswerEndingOverdueRound: the append ending the round lands, but
// its answer is lost on the way back. The writer reads the log, finds its
// batch there and answers as if the append had answered: a gets its
// answer, the round is closed and b fenced in memory as in the log.
func TestLostAnswerEndingOverdueRound(t *testing.T) {
	r := newRoundRig(t)
	r.untilOverdue()
	r.log.failNext(appendLost)
	if _, err := r.heartbeat("a", 0, []int{0}); err != nil {
		t.Fatalf("a's heartbeat whose append landed with its answer lost: %v", err)
	}
	if !r.fenced("b") {
		t.Fatal("the lost answer's batch is not in the log")
	}
	if r.c.CorrectionOpen(simKey) {
		t.Fatal("the round the log ended is still open")
	}
	r.checkFold()
	resp, err := r.heartbeat("b", 5, []int{1})
	if err != nil || resp.Status != wire.StatusFenced {
		t.Fatalf("b's heartbeat: %+v %v, want %s", resp, err, wire.StatusFenced)
	}
	r.neverKeepsShard1(5)
}

// TestLostAnswerUnreadEndingOverdueRound: the append lands, its answer is
// lost and the log cannot be read right after either: a gets 503. Once the
// log can be read the coordinator folds the batch it could not confirm and
// serves what the log says: b is fenced and never keeps shard 1.
func TestLostAnswerUnreadEndingOverdueRound(t *testing.T) {
	r := newRoundRig(t)
	r.untilOverdue()
	r.log.failNext(appendLostUnread)
	_, err := r.heartbeat("a", 0, []int{0})
	if !isKind(err, commands.KindUnavailable) {
		t.Fatalf("a's heartbeat with the log unreadable after the append: %v, want 503", err)
	}
	if !strings.Contains(err.Error(), "may have been recorded") {
		t.Fatalf("answer %q: want it to say the decision may have been recorded", err)
	}
	r.log.readsBack()
	deadline := time.Now().Add(10 * time.Second)
	for {
		last, _ := r.log.LastID(context.Background())
		if r.c.State().LastID() == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the coordinator did not catch up with the log (at %s, log at %s)", r.c.State().LastID(), last)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.checkFold()
	if r.c.CorrectionOpen(simKey) {
		t.Fatal("the round the log ended is still open")
	}
	resp, err := r.heartbeat("b", 5, []int{1})
	if err != nil || resp.Status != wire.StatusFenced {
		t.Fatalf("b's heartbeat: %+v %v, want %s", resp, err, wire.StatusFenced)
	}
	r.neverKeepsShard1(5)
}

// TestNotDurableAppendIsNotAnswered: the append ending the round lands on
// the primary but too few replicas acknowledge it (--log-replicas). Its
// decision is not answered (503), though the entries are there to read: a
// failover may still lose them. The next read of the log folds them while
// they are there: b is fenced, as the log says.
func TestNotDurableAppendIsNotAnswered(t *testing.T) {
	r := newRoundRig(t)
	r.untilOverdue()
	r.log.failNext(appendNotDurable)
	_, err := r.heartbeat("a", 0, []int{0})
	if !isKind(err, commands.KindUnavailable) {
		t.Fatalf("a's heartbeat whose append no replica acknowledged: %v, want 503", err)
	}
	// The entries are in the log: the answer must not tell the caller that
	// nothing was recorded (a blind retry of an admin command would then
	// be refused, or done twice).
	if !strings.Contains(err.Error(), "may have been recorded") {
		t.Fatalf("answer %q: want it to say the decision may have been recorded", err)
	}
	if !r.fenced("b") {
		t.Fatal("the unacknowledged batch is not in the log")
	}
	resp, err := r.heartbeat("b", 5, []int{1})
	if err != nil || resp.Status != wire.StatusFenced {
		t.Fatalf("b's heartbeat after the log was read again: %+v %v, want %s", resp, err, wire.StatusFenced)
	}
	r.checkFold()
	r.neverKeepsShard1(5)
}
