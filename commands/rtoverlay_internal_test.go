package commands

import (
	"testing"
	"time"

	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// The runtime overlay's lifecycle, below the public surface: what a decision
// changes is invisible until the batch commits, a failed decision's changes
// vanish, and a commit writes only what its decisions changed, so it never
// undoes what the steady heartbeat (which renews without the writer) wrote
// meanwhile.

var ovKey = projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "billing"}

func ovRequest(mv int64) *wire.HeartbeatRequest { return &wire.HeartbeatRequest{MetadataVersion: &mv} }

func TestOverlayCommitKeepsALaterSteadyRenewal(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	table := NewRuntimeTable()
	table.renew(ovKey, "a", renewal{at: t0, lease: 15 * time.Second})
	batch := newRuntimeOverlay(table, t0.Add(time.Second))
	d := batch.Child(t0.Add(time.Second))
	d.renew(ovKey, "a", 15*time.Second, ovRequest(3), 1, nil)
	d.rebalanceDue(ovKey, "a", 15*time.Second, time.Minute) // arms a deadline
	d.Merge()
	if m, _ := table.member(ovKey, "a"); !m.rebalanceDeadline.IsZero() || m.reportedMV != 0 {
		t.Fatalf("the table shows what the batch has not committed: %+v", m)
	}
	// The steady heartbeat renews a while the batch is appended.
	table.renew(ovKey, "a", renewal{at: t0.Add(2 * time.Second), lease: 15 * time.Second, reportedMV: 4})
	table.Commit(batch)
	m, _ := table.member(ovKey, "a")
	if want := t0.Add(17 * time.Second); !m.leaseExpiresAt.Equal(want) || m.reportedMV != 4 {
		t.Errorf("the commit undid the later steady renewal: lease %s (want %s), reported mv %d (want 4)", m.leaseExpiresAt, want, m.reportedMV)
	}
	if want := t0.Add(61 * time.Second); !m.rebalanceDeadline.Equal(want) {
		t.Errorf("the decision's deadline was not committed: %s, want %s", m.rebalanceDeadline, want)
	}
}

func TestOverlayCommitRenewsWhenItIsTheLater(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	table := NewRuntimeTable()
	table.renew(ovKey, "a", renewal{at: t0, lease: 15 * time.Second})
	batch := newRuntimeOverlay(table, t0.Add(5*time.Second))
	d := batch.Child(t0.Add(5 * time.Second))
	d.renew(ovKey, "a", 15*time.Second, ovRequest(7), 0, nil)
	d.Merge()
	table.Commit(batch)
	if m, _ := table.member(ovKey, "a"); !m.leaseExpiresAt.Equal(t0.Add(20*time.Second)) || m.reportedMV != 7 {
		t.Errorf("the decision's renewal was not committed: %+v", m)
	}
}

func TestOverlayDroppedDecisionChangesNothing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	table := NewRuntimeTable()
	table.renew(ovKey, "a", renewal{at: t0, lease: 15 * time.Second})
	batch := newRuntimeOverlay(table, t0)
	ok := batch.Child(t0)
	ok.openRound(ovKey, 5)
	ok.Merge()
	failed := batch.Child(t0)
	failed.closeRound(ovKey)
	failed.quarantine(ovKey, "b", "p", t0.Add(time.Hour))
	failed.dropMembers(ovKey, []string{"a"})
	// failed is never merged: the decision returned an error.
	if !batch.round(ovKey).Open || batch.isQuarantined(ovKey, "b", "p") {
		t.Fatal("a dropped decision's changes reached the batch")
	}
	if table.Round(ovKey).Open {
		t.Fatal("the table shows a round the batch has not committed")
	}
	table.Commit(batch)
	if !table.Round(ovKey).Open {
		t.Error("the committed round is not open")
	}
	if _, ok := table.member(ovKey, "a"); !ok {
		t.Error("the dropped decision's prune reached the table")
	}
	if _, ok := table.quarantinedUntil(ovKey, "m:b"); ok {
		t.Error("the dropped decision's quarantine reached the table")
	}
}

func TestOverlayRoundAndQuarantineCommit(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	table := NewRuntimeTable()
	batch := newRuntimeOverlay(table, t0)
	d := batch.Child(t0)
	if !d.openRound(ovKey, 5) || d.openRound(ovKey, 5) {
		t.Fatal("openRound: a new round opens once")
	}
	d.ackRound(ovKey, "a")
	d.Merge()
	d = batch.Child(t0.Add(time.Minute))
	if !d.roundAcked(ovKey, "a") {
		t.Fatal("a later decision of the batch does not see the ack")
	}
	d.closeRound(ovKey)
	d.quarantine(ovKey, "b", "", t0.Add(time.Hour))
	d.Merge()
	table.Commit(batch)
	if table.Round(ovKey).Open {
		t.Error("the round the batch closed is open")
	}
	after := newRuntimeOverlay(table, t0.Add(2*time.Minute))
	if !after.isQuarantined(ovKey, "b", "") {
		t.Error("the quarantine was not committed")
	}
	if later := newRuntimeOverlay(table, t0.Add(2*time.Hour)); later.isQuarantined(ovKey, "b", "") {
		t.Error("a lapsed quarantine still holds")
	}
}

func TestOverlayDropGroupForgetsItsRuntime(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	table := NewRuntimeTable()
	table.renew(ovKey, "a", renewal{at: t0, lease: 15 * time.Second})
	batch := newRuntimeOverlay(table, t0)
	d := batch.Child(t0)
	d.openRound(ovKey, 5)
	d.Merge()
	d = batch.Child(t0)
	d.dropGroup(ovKey)
	if _, ok := d.view(ovKey, "a"); ok || d.round(ovKey).Open {
		t.Fatal("the deleted group's runtime is still seen")
	}
	d.Merge()
	table.Commit(batch)
	if _, ok := table.member(ovKey, "a"); ok || table.Round(ovKey).Open {
		t.Error("the deleted group's runtime survived the commit")
	}
}

func TestOverlayDropGroupHidesTheBatchsEditsAndAllowsANewStart(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	table := NewRuntimeTable()
	batch := newRuntimeOverlay(table, t0)
	d := batch.Child(t0)
	d.renew(ovKey, "a", 15*time.Second, ovRequest(3), 1, nil)
	d.rebalanceDue(ovKey, "a", 15*time.Second, time.Minute)
	d.quarantine(ovKey, "a", "p", t0.Add(time.Hour))
	d.setLeaseFloor(ovKey, t0.Add(time.Second))
	d.Merge()
	d = batch.Child(t0)
	d.dropGroup(ovKey)
	if _, ok := d.view(ovKey, "a"); ok || d.isQuarantined(ovKey, "a", "p") || len(d.deadlineIDs(ovKey)) != 0 || !d.leaseFloor(ovKey).IsZero() {
		t.Fatal("the batch's runtime of the deleted group is still seen")
	}
	if _, ok := batch.view(ovKey, "a"); !ok || !batch.isQuarantined(ovKey, "a", "p") {
		t.Fatal("a decision's delete reached the batch before it merged")
	}
	d.Merge()
	d = batch.Child(t0.Add(2 * time.Second))
	d.renew(ovKey, "b", 15*time.Second, ovRequest(4), 1, nil) // the group is created again
	d.Merge()
	table.Commit(batch)
	if _, ok := table.member(ovKey, "a"); ok {
		t.Error("the deleted group's member survived the commit")
	}
	if until, ok := table.quarantinedUntil(ovKey, "m:a"); ok {
		t.Errorf("the deleted group's quarantine survived the commit: %s", until)
	}
	if m, ok := table.member(ovKey, "b"); !ok || m.reportedMV != 4 {
		t.Errorf("the member of the group created again was not committed: %+v, %v", m, ok)
	}
}
