package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// budgetCoordinator is a coordinator on a MemLog and a clock the test moves.
func budgetCoordinator(t *testing.T, cfg coordinator.Config) (*coordinator.Coordinator, *events.MemLog, *simClock) {
	t.Helper()
	log := events.NewMemLog()
	clock := newSimClock(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	cfg.DisableProvisioning, cfg.TickInterval, cfg.ShardCheckInterval, cfg.SnapshotEvery, cfg.Logger = true, time.Hour, -1, -1, zerolog.Nop()
	c := coordinator.New(cfg, log, nil, nil, clock)
	if err := c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c.Run()
	t.Cleanup(c.Close)
	return c, log, clock
}

// rejectedIn decodes the log's command.rejected records.
func rejectedIn(t *testing.T, log *events.MemLog) []events.Record {
	t.Helper()
	var out []events.Record
	for _, rec := range decoded(t, log.Entries()) {
		if rec.Type == "command.rejected" {
			out = append(out, rec)
		}
	}
	return out
}

// TestRefusalsAreRecordedAtABoundedRate: a principal's loop of refused
// commands records a quarter of a minute's budget at once, and the next
// record after the budget refilled counts the refusals left out; another
// principal has a budget of its own. A refusal naming a group that does not
// exist is recorded as such and reaches no group's history index (no key for
// a made-up name); one naming a group that exists is in its history.
func TestRefusalsAreRecordedAtABoundedRate(t *testing.T) {
	c, log, clock := budgetCoordinator(t, coordinator.Config{RejectionsPerMinute: 60})
	ctx := context.Background()
	target := 3
	scale := func(principal string, k projection.GroupKey) {
		t.Helper()
		_, err := c.Scale(ctx, events.Meta{Actor: principal}, k, commands.ScaleInput{TargetShardCount: &target, RequestedBy: principal, Reason: "loop"})
		if err == nil {
			t.Fatalf("scale of %v was accepted", k)
		}
	}
	made := func(i int) projection.GroupKey {
		return projection.GroupKey{StreamPrefix: fmt.Sprintf("made-up-%03d", i), ConsumerGroup: "g"}
	}
	for i := 0; i < 100; i++ {
		scale("mallory", made(i))
	}
	recs := rejectedIn(t, log)
	if len(recs) != 15 {
		t.Fatalf("100 refusals recorded %d command.rejected, want 15 (a quarter of 60 a minute at once)", len(recs))
	}
	for _, rec := range recs {
		ev := rec.Event.(*events.CommandRejected)
		if !ev.NoGroup || ev.Suppressed != 0 || rec.StreamPrefix == "" {
			t.Errorf("record %+v %+v: want the named group, NoGroup and nothing suppressed yet", rec.Meta, ev)
		}
	}
	for i := 0; i < 100; i++ {
		k := made(i)
		if ids, err := log.History(ctx, events.IndexName(k.StreamPrefix, k.ConsumerGroup), events.ZeroID, 0); err != nil || len(ids) > 0 {
			t.Fatalf("the history index of the made-up group %v holds %v (%v)", k, ids, err)
		}
	}
	scale("alice", made(0))
	if n := len(rejectedIn(t, log)); n != 16 {
		t.Fatalf("another principal's refusal: %d records, want 16 (its own budget)", n)
	}
	clock.Advance(2 * time.Second) // two more of mallory's refusals may be recorded
	scale("mallory", made(100))
	recs = rejectedIn(t, log)
	last := recs[len(recs)-1].Event.(*events.CommandRejected)
	if len(recs) != 17 || last.Suppressed != 85 {
		t.Fatalf("after the budget refilled: %d records, the last counts %d suppressed, want 17 and 85", len(recs), last.Suppressed)
	}
	scale("mallory", made(101))
	if last := rejectedIn(t, log); last[len(last)-1].Event.(*events.CommandRejected).Suppressed != 0 {
		t.Error("the record after the one that counted the suppressed counts them again")
	}

	k := projection.GroupKey{StreamPrefix: "real", ConsumerGroup: "g"}
	one := 1
	if _, err := c.CreateGroup(ctx, events.Meta{Actor: "alice"}, commands.CreateGroupInput{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, InitialShardCount: &one, RequestedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Scale(ctx, events.Meta{Actor: "alice"}, k, commands.ScaleInput{TargetShardCount: &one, RequestedBy: "alice", Reason: "same"})
	if !errors.Is(err, commands.ErrShardCountUnchanged) {
		t.Fatalf("scale to the same count: %v", err)
	}
	ids, err := log.History(ctx, events.IndexName(k.StreamPrefix, k.ConsumerGroup), events.ZeroID, 0)
	if err != nil || len(ids) != 2 {
		t.Fatalf("the history of a group that exists holds %v (%v), want its creation and the refusal", ids, err)
	}
}

// TestStreamRefusalsAreInTheStreamsHistory: a refused command on a stream
// (stream.scale, stream.create) is recorded under the stream's prefix and is
// in the stream's history, like a group's refusal in the group's; one naming
// a stream that does not exist is recorded as such (no key for a made-up
// name), and one whose prefix is not a valid name under no prefix at all.
// They were all recorded without a prefix, so a stream's history never
// showed its refusals.
func TestStreamRefusalsAreInTheStreamsHistory(t *testing.T) {
	c, log, _ := budgetCoordinator(t, coordinator.Config{RejectionsPerMinute: 60})
	ctx := context.Background()
	two := 2
	if _, err := c.CreateStream(ctx, events.Meta{Actor: "alice"}, commands.CreateStreamInput{StreamPrefix: "s", InitialShardCount: &two, RequestedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ScaleStream(ctx, events.Meta{Actor: "alice"}, "s", commands.ScaleInput{TargetShardCount: &two, RequestedBy: "alice", Reason: "same"}); err == nil {
		t.Fatal("a stream scale to its own count was accepted")
	}
	if _, err := c.CreateStream(ctx, events.Meta{Actor: "alice"}, commands.CreateStreamInput{StreamPrefix: "s", InitialShardCount: &two, RequestedBy: "alice"}); err == nil {
		t.Fatal("a second create of the stream was accepted")
	}
	three := 3
	if _, err := c.ScaleStream(ctx, events.Meta{Actor: "alice"}, "made-up", commands.ScaleInput{TargetShardCount: &three, RequestedBy: "alice", Reason: "r"}); err == nil {
		t.Fatal("a scale of a stream that does not exist was accepted")
	}
	if _, err := c.ScaleStream(ctx, events.Meta{Actor: "alice"}, "bad prefix", commands.ScaleInput{TargetShardCount: &three, RequestedBy: "alice", Reason: "r"}); err == nil {
		t.Fatal("a scale of an invalid prefix was accepted")
	}
	recs := rejectedIn(t, log)
	if len(recs) != 4 {
		t.Fatalf("%d command.rejected records, want 4", len(recs))
	}
	want := []struct {
		command, prefix string
		noGroup         bool
	}{{"stream.scale", "s", false}, {"stream.create", "s", false}, {"stream.scale", "made-up", true}, {"stream.scale", "", false}}
	for i, w := range want {
		ev := recs[i].Event.(*events.CommandRejected)
		if ev.Command != w.command || recs[i].StreamPrefix != w.prefix || recs[i].ConsumerGroup != "" || ev.NoGroup != w.noGroup {
			t.Errorf("refusal %d: %s under %q/%q noGroup=%v, want %s under %q noGroup=%v", i, ev.Command, recs[i].StreamPrefix, recs[i].ConsumerGroup, ev.NoGroup, w.command, w.prefix, w.noGroup)
		}
	}
	hist, _, err := c.GroupHistory(ctx, projection.GroupKey{StreamPrefix: "s"}, events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}
	types := typesOf(decoded(t, hist))
	if len(types) != 3 || types[1] != "command.rejected" || types[2] != "command.rejected" {
		t.Fatalf("the stream's history holds %v, want its creation and the two refusals", types)
	}
	if ids, err := log.History(ctx, events.IndexName("made-up", ""), events.ZeroID, 0); err != nil || len(ids) > 0 {
		t.Fatalf("the history index of the made-up stream holds %v (%v)", ids, err)
	}
}

// TestChurnBudget: one principal's loop of joins and leaves in a group is
// held to its budget (429 with when to retry, nothing appended); steady
// heartbeats go on, and the budget refills with time.
func TestChurnBudget(t *testing.T) {
	c, log, clock := budgetCoordinator(t, coordinator.Config{MemberChurnPerMinute: 60})
	ctx := context.Background()
	k := projection.GroupKey{StreamPrefix: "churn", ConsumerGroup: "g"}
	four := 4
	if _, err := c.CreateGroup(ctx, events.Meta{Actor: "admin"}, commands.CreateGroupInput{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, InitialShardCount: &four, RequestedBy: "admin"}); err != nil {
		t.Fatal(err)
	}
	ops, refused := 0, 0
	var wait time.Duration
	for i := 0; i < 40 && refused == 0; i++ {
		id := fmt.Sprintf("m-%02d", i)
		for _, epoch := range []int64{0, -1} {
			_, err := c.Heartbeat(ctx, k, id, "svc", heartbeatReq(id, epoch))
			var ce *commands.Error
			switch {
			case err == nil:
				ops++
			case errors.As(err, &ce) && errors.Is(err, commands.ErrRateLimited):
				refused++
				wait = ce.RetryAfter
			default:
				t.Fatal(err)
			}
			if refused > 0 {
				break
			}
		}
	}
	if ops != 15 || refused != 1 || wait <= 0 || wait > time.Second {
		t.Fatalf("%d joins and leaves accepted, %d refused (retry in %s); want 15 (a quarter of 60 a minute), then a refusal saying to retry within a second", ops, refused, wait)
	}
	n, _ := log.Len(ctx)
	if _, err := c.Heartbeat(ctx, k, "late", "svc", heartbeatReq("late", 0)); !errors.Is(err, commands.ErrRateLimited) {
		t.Fatalf("a join with the budget spent: %v", err)
	}
	if m, _ := log.Len(ctx); m != n {
		t.Fatalf("a refused join appended %d entries", m-n)
	}
	if _, err := c.Heartbeat(ctx, k, "late", "other", heartbeatReq("late", 0)); err != nil {
		t.Fatalf("another principal's join: %v", err)
	}
	clock.Advance(time.Second)
	if _, err := c.Heartbeat(ctx, k, "later", "svc", heartbeatReq("later", 0)); err != nil {
		t.Fatalf("a join a second later (one refilled): %v", err)
	}
}

// heartbeatReq is a member's heartbeat that reports holding nothing: a join
// with epoch 0, a leave with -1.
func heartbeatReq(id string, epoch int64) *wire.HeartbeatRequest {
	pv, mv, one := wire.ProtocolVersion, int64(0), 1
	if epoch < 0 {
		mv = 1
	}
	return &wire.HeartbeatRequest{ProtocolVersion: &pv, RequestID: id, MemberID: id, MemberName: &id, MemberEpoch: &epoch, MetadataVersion: &mv,
		RuntimeConsumerCapacity: &wire.Capacity{RuntimeMaxConcurrency: &one, AvailableConcurrency: &one},
		OwnedShards:             []wire.ShardRef{}, RevokingShards: []wire.RevokingReport{}, ShardProgress: []wire.ShardProgress{}}
}
