package coordinator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// TestLeftMemberWithItsOldEpochRejoins: after a leave (epoch -1), a heartbeat
// with the member's old positive epoch is answered FENCED_MEMBER_EPOCH, so
// that the member rejoins with epoch 0 and gets shards again. It was
// accepted (the epoch lies between the recorded -1 and the assignment
// epoch): OK with nothing assigned, the lease renewed, the member LEAVING for
// as long as it kept heartbeating, and the group EMPTY
// (TestIntegrationHeartbeatAbuse found it: a request with the honest
// member's principal made it leave).
func TestLeftMemberWithItsOldEpochRejoins(t *testing.T) {
	h := newBugHarness(t, 2, events.OrderingNone)
	r, err := h.heartbeat("a", 0, nil, nil)
	if err != nil || r.Status != wire.StatusOK {
		t.Fatalf("join: %v %v", r, err)
	}
	epoch := r.MemberEpoch
	if r, err = h.heartbeat("a", epoch, refInts(r.Assignment.AssignedShards), nil); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("converge: %v %v", r, err)
	}
	epoch = r.MemberEpoch
	if r, err = h.heartbeat("a", -1, nil, nil); err != nil || r.Status != wire.StatusOK {
		t.Fatalf("leave: %v %v", r, err)
	}
	if m := h.group().Member("a"); m.State != projection.MemberLeaving {
		t.Fatalf("after the leave a is %s", m.State)
	}
	r, err = h.heartbeat("a", epoch, nil, nil)
	if err != nil || r.Status != wire.StatusFenced {
		t.Fatalf("a heartbeat with the epoch held before the leave: %v %v, want %s", r, err, wire.StatusFenced)
	}
	// The same with a metadata version above the stored one: no correction
	// round answers it SYNC_METADATA with the leave's epoch -1.
	h.n++
	req := &wire.HeartbeatRequest{
		ProtocolVersion: ptr(wire.ProtocolVersion), RequestID: fmt.Sprintf("r%d", h.n), MemberID: "a", MemberName: ptr("a"),
		MemberEpoch: ptr(epoch), MetadataVersion: ptr(h.group().MetadataVersion + 5),
		RuntimeConsumerCapacity: &wire.Capacity{RuntimeMaxConcurrency: ptr(1), AvailableConcurrency: ptr(1)},
		OwnedShards:             []wire.ShardRef{}, RevokingShards: []wire.RevokingReport{}, ShardProgress: []wire.ShardProgress{},
	}
	if r, err = h.c.Heartbeat(context.Background(), simKey, "a", "", req); err != nil || r.Status != wire.StatusFenced {
		t.Fatalf("a heartbeat with the old epoch and a newer metadata version: %+v %v, want %s", r, err, wire.StatusFenced)
	}
	if r, err = h.heartbeat("a", 0, nil, nil); err != nil || r.Status != wire.StatusOK || len(r.Assignment.AssignedShards)+len(r.Assignment.PendingShards) != 2 {
		t.Fatalf("rejoin: %+v %v, want OK with both shards", r, err)
	}
	if m := h.group().Member("a"); !m.Live() {
		t.Fatalf("after the rejoin a is %s", m.State)
	}
}
