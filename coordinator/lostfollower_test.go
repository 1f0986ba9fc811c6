package coordinator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/coordinator"
)

// startFollower runs a replica that never leads (another replica holds the
// lease) on log and snaps: it follows what the leader appends.
func startFollower(t *testing.T, log *promotableLog, snaps *memSnaps) *coordinator.Coordinator {
	t.Helper()
	c := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop(), SnapshotEvery: -1, SnapshotKeep: 2, GuardInterval: 20 * time.Millisecond,
		Lease: &scriptedLease{holder: "other", token: 1}, LeaseTTL: time.Second}, log, nil, snaps, nil)
	if err := c.Load(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	c.Run()
	t.Cleanup(c.Close)
	return c
}

func caughtUp(t *testing.T, f, leader *coordinator.Coordinator) {
	t.Helper()
	waitFor(t, "the follower to catch up", func() bool { return f.State().LastID() == leader.State().LastID() })
}

// A follower whose log was lost with the leader's holds its state too
// (LOG_LOST); once the leader restored the log from the same state, it
// reloads from the restore's snapshot and serves what the leader serves.
func TestFollowerFollowsTheRestoreOfItsState(t *testing.T) {
	log := newPromotableLog()
	snaps := &memSnaps{}
	leader := startOn(t, log, snaps)
	mustCreate(t, leader, "g1", "g2")
	f := startFollower(t, log, snaps)
	mustCreate(t, leader, "g3")
	caughtUp(t, f, leader)

	log.flush()
	mustLost(t, leader, coordinator.LossLogGone)
	waitFor(t, "the follower to find the log lost", func() bool { return f.LogLoss() != nil })
	if got, want := fmt.Sprint(groupNames(f.State())), "[g1 g2 g3]"; got != want {
		t.Fatalf("the follower serves %s while the log is lost, want %s", got, want)
	}
	restore(t, leader)
	waitFor(t, "the follower to follow the restore", func() bool { return f.LogLoss() == nil && f.State().LastID() == leader.State().LastID() })
	mustSameState(t, f, leader)
	mustCreate(t, leader, "g4")
	caughtUp(t, f, leader)
	mustSameState(t, f, leader)
}

// A follower whose projection is longer than the state the leader restored
// (it applied entries the leader never had: a restarted leader loaded the
// log after a failover had lost them) says so and stays LOG_LOST, rather
// than throwing away entries the restored log lacks. Restarted, it follows
// the restored log.
func TestLongerFollowerSaysSo(t *testing.T) {
	log := newPromotableLog()
	snaps := &memSnaps{}
	first := startOn(t, log, snaps)
	mustCreate(t, first, "g1")
	f := startFollower(t, log, snaps)
	kept := len(log.m().Entries())
	mustCreate(t, first, "g2", "g3")
	caughtUp(t, f, first)
	first.Close()

	// A failover loses g2 and g3; a leader started now loads g1 only.
	log.promote(t, kept)
	waitFor(t, "the follower to find the entries lost", func() bool { return f.LogLoss() != nil })
	leader := startOn(t, log, snaps)
	if got := fmt.Sprint(groupNames(leader.State())); got != "[g1]" {
		t.Fatalf("the new leader loaded %s, want [g1]", got)
	}
	// Then the log is lost altogether, and the new leader restores its state.
	log.flush()
	mustLost(t, leader, coordinator.LossLogGone)
	res := restore(t, leader)

	waitFor(t, "the follower to see the restore", func() bool { l := f.LogLoss(); return l != nil && l.Longer })
	loss := f.LogLoss()
	if loss.RestoredAt != res.EventID || loss.RestoredFrom != res.RestoredFrom {
		t.Fatalf("the follower's loss %+v, want the restore %s from %s", loss, res.EventID, res.RestoredFrom)
	}
	if got, want := fmt.Sprint(groupNames(f.State())), "[g1 g2 g3]"; got != want {
		t.Fatalf("the longer follower serves %s, want its own state %s", got, want)
	}
	restarted := startFollower(t, log, snaps)
	mustSameState(t, restarted, leader)
}
