package projection_test

import (
	"fmt"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

func ep(groupEpoch, metadataVersion int64) events.Epochs {
	return events.Epochs{GroupEpoch: groupEpoch, MetadataVersion: metadataVersion}
}

func ints(s ...int) []int { return s }

// created is the event every fold case starts from: a group of 4 shards.
func created() events.Event {
	return &events.GroupCreated{ShardCount: 4, Provisioned: true, RequestedBy: "alice", Reason: "launch"}
}

// foldGroup applies group.created and then evs to orders, and returns the group
// (nil if it does not exist) and the number of the last record.
func foldGroup(tb testing.TB, evs ...events.Event) (*projection.Group, int) {
	tb.Helper()
	var r recorder
	s := projection.New()
	MustApply(tb, s, r.rec(orders, created()))
	for _, ev := range evs {
		MustApply(tb, s, r.rec(orders, ev))
	}
	g, _ := s.Group(orders)
	return g, r.n
}

func assertInts(tb testing.TB, what string, got, want []int) {
	tb.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		tb.Errorf("%s = %v, want %v", what, got, want)
	}
}

func assertEpochs(tb testing.TB, g *projection.Group, groupEpoch, assignmentEpoch, metadataVersion int64) {
	tb.Helper()
	if g.GroupEpoch != groupEpoch || g.AssignmentEpoch != assignmentEpoch || g.MetadataVersion != metadataVersion {
		tb.Errorf("epochs (group, assignment, metadata) = (%d, %d, %d), want (%d, %d, %d)",
			g.GroupEpoch, g.AssignmentEpoch, g.MetadataVersion, groupEpoch, assignmentEpoch, metadataVersion)
	}
}

// mustMember returns a member of the group or fails the test.
func mustMember(tb testing.TB, g *projection.Group, id string) *projection.Member {
	tb.Helper()
	m := g.Member(id)
	if m == nil {
		tb.Fatalf("member %q missing; members: %v", id, g.MemberIDs())
	}
	return m
}

func joined(id string, groupEpoch, metadataVersion int64) *events.MemberJoined {
	return &events.MemberJoined{MemberID: id, MemberName: "worker-" + id, MaxConcurrency: 4, Epochs: ep(groupEpoch, metadataVersion)}
}

func TestFoldMemberEvents(t *testing.T) {
	tests := []struct {
		name   string
		events []events.Event
		check  func(t *testing.T, g *projection.Group, last int)
	}{
		{
			name: "group.created sets counts and epochs 1/1/1",
			check: func(t *testing.T, g *projection.Group, last int) {
				if g.ShardCount != 4 || g.AssignableCount != 4 {
					t.Errorf("shardCount/assignableCount = %d/%d, want 4/4", g.ShardCount, g.AssignableCount)
				}
				assertEpochs(t, g, 1, 1, 1)
				if g.MemberCount() != 0 || g.TargetCount() != 0 || len(g.Reshardings) != 0 || g.Active() != nil {
					t.Errorf("new group is not empty: %+v", g)
				}
				if g.Key != orders || g.CreatedBy != "alice" || !g.CreatedAt.Equal(at(1)) || !g.UpdatedAt.Equal(at(1)) {
					t.Errorf("key/createdBy/createdAt/updatedAt = %v/%q/%v/%v", g.Key, g.CreatedBy, g.CreatedAt, g.UpdatedAt)
				}
				if got := g.State(); got != "EMPTY" {
					t.Errorf("State() = %s, want EMPTY", got)
				}
			},
		},
		{
			name:   "member.joined adds an active member at epoch 0 and sets the group's epochs",
			events: []events.Event{joined("a", 2, 2)},
			check: func(t *testing.T, g *projection.Group, last int) {
				m := mustMember(t, g, "a")
				if m.State != projection.MemberActive || m.Epoch != 0 || m.Name != "worker-a" || m.MaxConcurrency != 4 {
					t.Errorf("member = %+v", m)
				}
				if !m.JoinedAt.Equal(at(last)) || !m.UpdatedAt.Equal(at(last)) || !g.UpdatedAt.Equal(at(last)) {
					t.Errorf("joinedAt/updatedAt = %v/%v, group updatedAt %v, want %v", m.JoinedAt, m.UpdatedAt, g.UpdatedAt, at(last))
				}
				// The assignment epoch only moves with assignment.computed.
				assertEpochs(t, g, 2, 1, 2)
				if !reflect.DeepEqual(g.LiveMemberIDs(), []string{"a"}) {
					t.Errorf("live = %v", g.LiveMemberIDs())
				}
			},
		},
		{
			name: "member.joined again after expiry resets the member",
			events: []events.Event{
				joined("a", 2, 2),
				&events.MemberSynced{MemberID: "a", MemberEpoch: 2, Granted: ints(0, 1)},
				&events.OwnershipReported{MemberID: "a", Owned: ints(0, 1), Revoking: ints(2)},
				&events.MembersExpired{MemberIDs: []string{"a"}, Epochs: ep(3, 3)},
				&events.MemberJoined{MemberID: "a", MemberName: "worker-a2", MaxConcurrency: 2, Rejoin: true, Epochs: ep(4, 4)},
			},
			check: func(t *testing.T, g *projection.Group, last int) {
				m := mustMember(t, g, "a")
				if m.State != projection.MemberActive || m.Epoch != 0 || m.Name != "worker-a2" || m.MaxConcurrency != 2 {
					t.Errorf("member = %+v", m)
				}
				if len(m.Current) != 0 || len(m.Revoking) != 0 || len(m.Granted) != 0 {
					t.Errorf("rejoined member keeps current=%v revoking=%v granted=%v", m.Current, m.Revoking, m.Granted)
				}
				if !m.JoinedAt.Equal(at(last)) {
					t.Errorf("joinedAt = %v, want the rejoin time %v", m.JoinedAt, at(last))
				}
				assertEpochs(t, g, 4, 1, 4)
			},
		},
		{
			name: "member.updated changes name and capacity only",
			events: []events.Event{
				joined("a", 2, 2),
				&events.MemberSynced{MemberID: "a", MemberEpoch: 2, Granted: ints(1)},
				&events.MemberUpdated{MemberID: "a", MemberName: "renamed", MaxConcurrency: 32},
			},
			check: func(t *testing.T, g *projection.Group, last int) {
				m := mustMember(t, g, "a")
				if m.Name != "renamed" || m.MaxConcurrency != 32 || m.Epoch != 2 || m.State != projection.MemberActive {
					t.Errorf("member = %+v", m)
				}
				assertInts(t, "granted", m.Granted, ints(1))
				assertEpochs(t, g, 2, 1, 2)
			},
		},
		{
			name: "assignment.computed replaces the whole target, sorted and de-duplicated",
			events: []events.Event{
				joined("a", 2, 2), joined("b", 3, 3),
				&events.AssignmentComputed{AssignmentEpoch: 3, Targets: map[string][]int{"a": ints(3, 1, 1), "b": ints(2, 0)}},
				&events.AssignmentComputed{AssignmentEpoch: 4, Targets: map[string][]int{"a": ints(2, 0, 1, 3)}},
			},
			check: func(t *testing.T, g *projection.Group, last int) {
				if g.TargetCount() != 1 {
					t.Errorf("targets = %v, want only a's", maps.Collect(g.EachTarget()))
				}
				assertInts(t, "target a", g.Target("a"), ints(0, 1, 2, 3))
				if got := g.Target("b"); got != nil {
					t.Errorf("target b = %v, want nil", got)
				}
				assertEpochs(t, g, 3, 4, 3)
			},
		},
		{
			name: "member.synced sets the member epoch and the granted set",
			events: []events.Event{
				joined("a", 2, 2),
				&events.MemberSynced{MemberID: "a", MemberEpoch: 2, Granted: ints(3, 0, 3)},
			},
			check: func(t *testing.T, g *projection.Group, last int) {
				m := mustMember(t, g, "a")
				if m.Epoch != 2 {
					t.Errorf("epoch = %d, want 2", m.Epoch)
				}
				assertInts(t, "granted", m.Granted, ints(0, 3))
				if !m.Holds(0) || !m.Holds(3) || m.Holds(1) {
					t.Errorf("Holds(0,1,3) = %v,%v,%v; granted shards count as held", m.Holds(0), m.Holds(1), m.Holds(3))
				}
				assertEpochs(t, g, 2, 1, 2)
			},
		},
		{
			name: "member.ownership_reported sets current and revoking",
			events: []events.Event{
				joined("a", 2, 2),
				&events.OwnershipReported{MemberID: "a", Owned: ints(2, 1), Revoking: ints(3)},
			},
			check: func(t *testing.T, g *projection.Group, last int) {
				m := mustMember(t, g, "a")
				assertInts(t, "current", m.Current, ints(1, 2))
				assertInts(t, "revoking", m.Revoking, ints(3))
				if !m.Holds(3) {
					t.Error("a revoking shard still counts as held")
				}
			},
		},
		{
			name: "member.revoke_acknowledged is audit only",
			events: []events.Event{
				joined("a", 2, 2),
				&events.OwnershipReported{MemberID: "a", Owned: ints(1), Revoking: ints(3)},
				&events.RevokeAcknowledged{MemberID: "a", Shards: ints(3)},
			},
			check: func(t *testing.T, g *projection.Group, last int) {
				m := mustMember(t, g, "a")
				assertInts(t, "current", m.Current, ints(1))
				assertInts(t, "revoking", m.Revoking, ints(3))
				if !g.UpdatedAt.Equal(at(last)) {
					t.Errorf("group updatedAt = %v, want %v", g.UpdatedAt, at(last))
				}
			},
		},
		{
			name: "member.left: LEAVING at epoch -1, grants dropped, owned shards kept until released",
			events: []events.Event{
				joined("a", 2, 2),
				&events.MemberSynced{MemberID: "a", MemberEpoch: 2, Granted: ints(0, 1)},
				&events.OwnershipReported{MemberID: "a", Owned: ints(0, 1)},
				&events.MemberLeft{MemberID: "a", Epochs: ep(3, 3)},
			},
			check: func(t *testing.T, g *projection.Group, last int) {
				m := mustMember(t, g, "a")
				if m.State != projection.MemberLeaving || m.Epoch != -1 {
					t.Errorf("state/epoch = %s/%d, want LEAVING/-1", m.State, m.Epoch)
				}
				assertInts(t, "granted", m.Granted, nil)
				assertInts(t, "current", m.Current, ints(0, 1))
				if m.Live() || !m.CanHold() || !m.Holds(0) {
					t.Errorf("Live/CanHold/Holds(0) = %v/%v/%v, want false/true/true", m.Live(), m.CanHold(), m.Holds(0))
				}
				assertEpochs(t, g, 3, 1, 3)
			},
		},
		{
			name: "member.expired: EXPIRED, member epoch + 1, shards no longer held",
			events: []events.Event{
				joined("a", 2, 2), joined("b", 3, 3), joined("c", 4, 4),
				&events.MemberSynced{MemberID: "a", MemberEpoch: 4, Granted: ints(0)},
				&events.OwnershipReported{MemberID: "a", Owned: ints(0)},
				&events.MembersExpired{MemberIDs: []string{"a", "b"}, Epochs: ep(5, 5)},
			},
			check: func(t *testing.T, g *projection.Group, last int) {
				a, b, c := mustMember(t, g, "a"), mustMember(t, g, "b"), mustMember(t, g, "c")
				if a.State != projection.MemberExpired || a.Epoch != 5 {
					t.Errorf("a state/epoch = %s/%d, want EXPIRED/5", a.State, a.Epoch)
				}
				if b.State != projection.MemberExpired || b.Epoch != 1 {
					t.Errorf("b state/epoch = %s/%d, want EXPIRED/1", b.State, b.Epoch)
				}
				if c.State != projection.MemberActive || c.Epoch != 0 {
					t.Errorf("c state/epoch = %s/%d, want ACTIVE/0", c.State, c.Epoch)
				}
				assertInts(t, "a granted", a.Granted, nil)
				if a.Holds(0) || g.HeldByOthers("c", 0) {
					t.Error("an expired member's shard still counts as held")
				}
				assertEpochs(t, g, 5, 1, 5)
				if !reflect.DeepEqual(g.LiveMemberIDs(), []string{"c"}) {
					t.Errorf("live = %v, want [c]", g.LiveMemberIDs())
				}
			},
		},
		{
			name: "member.fenced clears ownership",
			events: []events.Event{
				joined("a", 2, 2),
				&events.MemberSynced{MemberID: "a", MemberEpoch: 2, Granted: ints(0, 1)},
				&events.OwnershipReported{MemberID: "a", Owned: ints(0, 1), Revoking: ints(2)},
				&events.MemberFenced{MemberID: "a", Reason: "held a revoked shard", MemberEpoch: 3, Epochs: ep(3, 3)},
			},
			check: func(t *testing.T, g *projection.Group, last int) {
				m := mustMember(t, g, "a")
				if m.State != projection.MemberFenced || m.Epoch != 3 {
					t.Errorf("state/epoch = %s/%d, want FENCED/3", m.State, m.Epoch)
				}
				if m.Current != nil || m.Revoking != nil || m.Granted != nil {
					t.Errorf("fenced member keeps current=%v revoking=%v granted=%v", m.Current, m.Revoking, m.Granted)
				}
				if m.CanHold() {
					t.Error("a fenced member can still hold shards")
				}
				assertEpochs(t, g, 3, 1, 3)
			},
		},
		{
			name: "member.pruned removes members and their targets",
			events: []events.Event{
				joined("a", 2, 2), joined("b", 3, 3),
				&events.AssignmentComputed{AssignmentEpoch: 3, Targets: map[string][]int{"a": ints(0, 1), "b": ints(2, 3)}},
				&events.MembersExpired{MemberIDs: []string{"b"}, Epochs: ep(4, 4)},
				&events.MembersPruned{MemberIDs: []string{"b", "never-existed"}, MetadataVersion: 5},
			},
			check: func(t *testing.T, g *projection.Group, last int) {
				if ok := g.Member("b") != nil; ok {
					t.Error("pruned member b is still there")
				}
				if _, ok := g.TargetOf("b"); ok {
					t.Error("pruned member b still has a target")
				}
				if ok := g.Member("never-existed") != nil; ok {
					t.Error("pruning an unknown member created it")
				}
				assertInts(t, "target a", g.Target("a"), ints(0, 1))
				assertEpochs(t, g, 4, 3, 5)
			},
		},
		{
			name: "command.rejected changes nothing, not even the update time",
			events: []events.Event{
				joined("a", 2, 2),
				&events.CommandRejected{Command: "group.delete", ErrorCode: "MEMBERS_LIVE", Message: "1 live member", RequestedBy: "bob"},
			},
			check: func(t *testing.T, g *projection.Group, last int) {
				assertEpochs(t, g, 2, 1, 2)
				if g.MemberCount() != 1 || g.ShardCount != 4 {
					t.Errorf("group changed: %+v", g)
				}
				if !g.UpdatedAt.Equal(at(last - 1)) {
					t.Errorf("updatedAt = %v, want %v (the join's)", g.UpdatedAt, at(last-1))
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, last := foldGroup(t, tc.events...)
			if g == nil {
				t.Fatal("group does not exist")
			}
			tc.check(t, g, last)
		})
	}
}

func TestFoldReshardingLifecycle(t *testing.T) {
	evidence := []events.ShardDrain{
		{ShardIndex: 2, StreamKey: "orders:2", Exists: true, Groups: []events.GroupDrain{{Name: "billing"}}},
		{ShardIndex: 3, StreamKey: "orders:3", Exists: false, Groups: []events.GroupDrain{}},
	}
	// A scale-in 4 -> 2, step by step; each check sees the group after its event.
	steps := []struct {
		name  string
		ev    events.Event
		check func(t *testing.T, g *projection.Group, m *projection.Resharding)
	}{
		{
			"preparing",
			&events.ReshardingPreparing{ReshardingID: "rsh-1", FromShardCount: 4, ToShardCount: 2, RequestedBy: "alice", Reason: "quiet"},
			func(t *testing.T, g *projection.Group, m *projection.Resharding) {
				if g.Active() != m || m.State != projection.Preparing || m.From != 4 || m.To != 2 || m.RequestedBy != "alice" || m.Reason != "quiet" {
					t.Errorf("resharding = %+v, active %q", m, g.ActiveResharding)
				}
				if m.StartEpochs != ep(2, 2) {
					t.Errorf("start epochs = %+v, want the group's epochs at the request (2, 2)", m.StartEpochs)
				}
				if g.ShardCount != 4 || g.AssignableCount != 4 {
					t.Errorf("counts changed while preparing: %d/%d", g.ShardCount, g.AssignableCount)
				}
				if projection.Phase(g, m) != "provisioning" {
					t.Errorf("phase = %q", projection.Phase(g, m))
				}
			},
		},
		{
			"provisioned",
			&events.ReshardingProvisioned{ReshardingID: "rsh-1", Shards: 2},
			func(t *testing.T, g *projection.Group, m *projection.Resharding) {
				if m.ProvisionedShards != 2 || m.State != projection.Preparing {
					t.Errorf("provisioned/state = %d/%s", m.ProvisionedShards, m.State)
				}
			},
		},
		{
			"activated routes 2 shards but keeps 4 assignable",
			&events.ReshardingActivated{ReshardingID: "rsh-1", ShardCount: 2, AssignableCount: 4, Epochs: ep(3, 3)},
			func(t *testing.T, g *projection.Group, m *projection.Resharding) {
				if m.State != projection.Active || g.ShardCount != 2 || g.AssignableCount != 4 {
					t.Errorf("state/shardCount/assignable = %s/%d/%d, want ACTIVE/2/4", m.State, g.ShardCount, g.AssignableCount)
				}
				assertEpochs(t, g, 3, 1, 3)
				if lo, hi := m.RemovedRange(); lo != 2 || hi != 4 {
					t.Errorf("removed range = [%d, %d), want [2, 4)", lo, hi)
				}
			},
		},
		{
			"draining",
			&events.ReshardingDraining{ReshardingID: "rsh-1", Epochs: ep(3, 4)},
			func(t *testing.T, g *projection.Group, m *projection.Resharding) {
				if m.State != projection.Draining || m.Drained || g.Active() != m {
					t.Errorf("state/drained/active = %s/%v/%q", m.State, m.Drained, g.ActiveResharding)
				}
				assertEpochs(t, g, 3, 1, 4)
				if projection.Phase(g, m) != "draining" {
					t.Errorf("phase = %q", projection.Phase(g, m))
				}
			},
		},
		{
			"drained shrinks the assignable set",
			&events.ReshardingDrained{ReshardingID: "rsh-1", AssignableCount: 2, Evidence: evidence, Epochs: ep(4, 5)},
			func(t *testing.T, g *projection.Group, m *projection.Resharding) {
				if !m.Drained || g.AssignableCount != 2 || g.ShardCount != 2 || m.State != projection.Draining {
					t.Errorf("drained/assignable/shardCount/state = %v/%d/%d/%s", m.Drained, g.AssignableCount, g.ShardCount, m.State)
				}
				if !reflect.DeepEqual(m.Evidence, evidence) {
					t.Errorf("evidence = %+v", m.Evidence)
				}
				assertEpochs(t, g, 4, 1, 5)
				if projection.Phase(g, m) != "revoking" {
					t.Errorf("phase = %q", projection.Phase(g, m))
				}
			},
		},
		{
			"reopened makes the removed shards assignable again",
			&events.ReshardingReopened{ReshardingID: "rsh-1", AssignableCount: 4, Evidence: evidence[:1], Epochs: ep(5, 6)},
			func(t *testing.T, g *projection.Group, m *projection.Resharding) {
				if m.Drained || g.AssignableCount != 4 || len(m.Evidence) != 1 {
					t.Errorf("drained/assignable/evidence = %v/%d/%v", m.Drained, g.AssignableCount, m.Evidence)
				}
				assertEpochs(t, g, 5, 1, 6)
			},
		},
		{
			"drained again",
			&events.ReshardingDrained{ReshardingID: "rsh-1", AssignableCount: 2, Evidence: evidence, Epochs: ep(6, 7)},
			func(t *testing.T, g *projection.Group, m *projection.Resharding) {
				if !m.Drained || g.AssignableCount != 2 {
					t.Errorf("drained/assignable = %v/%d", m.Drained, g.AssignableCount)
				}
			},
		},
		{
			"completed clears the active resharding",
			&events.ReshardingCompleted{ReshardingID: "rsh-1", State: projection.Deprecated, MetadataVersion: 8},
			func(t *testing.T, g *projection.Group, m *projection.Resharding) {
				if g.ActiveResharding != "" || g.Active() != nil {
					t.Errorf("active = %q after completion", g.ActiveResharding)
				}
				if m.State != projection.Deprecated || !m.Terminal() {
					t.Errorf("state = %s, want DEPRECATED", m.State)
				}
				if !reflect.DeepEqual(m.Evidence, evidence) {
					t.Errorf("completion without evidence replaced the evidence: %+v", m.Evidence)
				}
				assertEpochs(t, g, 6, 1, 8)
				if projection.Phase(g, m) != "retiring" {
					t.Errorf("phase = %q, want retiring", projection.Phase(g, m))
				}
			},
		},
		{
			"retired",
			&events.ShardsRetired{ReshardingID: "rsh-1", StreamKeys: []string{"orders:2", "orders:3"}, Kept: true},
			func(t *testing.T, g *projection.Group, m *projection.Resharding) {
				if !m.Retired || !m.RetiredKept || !reflect.DeepEqual(m.RetiredKeys, []string{"orders:2", "orders:3"}) {
					t.Errorf("retired/kept/keys = %v/%v/%v", m.Retired, m.RetiredKept, m.RetiredKeys)
				}
				if m.State != projection.Deprecated {
					t.Errorf("retirement changed the state to %s", m.State)
				}
				if projection.Phase(g, m) != "done" {
					t.Errorf("phase = %q, want done", projection.Phase(g, m))
				}
				last := m.History[len(m.History)-1]
				if !strings.Contains(last.Phase, "kept") {
					t.Errorf("last history phase = %q", last.Phase)
				}
			},
		},
	}

	var r recorder
	s := projection.New()
	MustApply(t, s, r.rec(orders, created()), r.rec(orders, joined("a", 2, 2)))
	for i, step := range steps {
		ok := t.Run(step.name, func(t *testing.T) {
			rec := r.rec(orders, step.ev)
			MustApply(t, s, rec)
			g := MustGroup(t, s, orders)
			m := g.Resharding("rsh-1")
			if m == nil {
				t.Fatal("resharding rsh-1 missing")
			}
			if len(m.History) != i+1 {
				t.Fatalf("history has %d changes, want %d", len(m.History), i+1)
			}
			h := m.History[i]
			if h.EventID != rec.ID || !h.At.Equal(rec.Time) || h.Actor != rec.Actor || h.State != m.State ||
				h.GroupEpoch != g.GroupEpoch || h.MetadataVersion != g.MetadataVersion {
				t.Errorf("history entry = %+v for record %s", h, rec.ID)
			}
			if !m.UpdatedAt.Equal(rec.Time) {
				t.Errorf("resharding updatedAt = %v, want %v", m.UpdatedAt, rec.Time)
			}
			step.check(t, g, m)
		})
		if !ok {
			return
		}
	}
}

func TestFoldRollback(t *testing.T) {
	tests := []struct {
		name       string
		rollback   *events.ReshardingRolledBack
		wantActive bool
	}{
		{
			"metadata rollback finishes at once",
			&events.ReshardingRolledBack{ReshardingID: "rsh-1", Policy: "metadata", State: projection.RolledBack, ShardCount: 4, AssignableCount: 4, RequestedBy: "bob", Reason: "too hot", Epochs: ep(4, 5)},
			false,
		},
		{
			"drain rollback keeps the resharding active",
			&events.ReshardingRolledBack{ReshardingID: "rsh-1", Policy: "drain", State: projection.RollingBack, ShardCount: 4, AssignableCount: 6, RequestedBy: "bob", Reason: "too hot", Epochs: ep(4, 5)},
			true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, _ := foldGroup(t,
				&events.ReshardingPreparing{ReshardingID: "rsh-1", FromShardCount: 4, ToShardCount: 6, RequestedBy: "alice"},
				&events.ReshardingProvisioned{ReshardingID: "rsh-1", Shards: 6},
				&events.ReshardingActivated{ReshardingID: "rsh-1", ShardCount: 6, AssignableCount: 6, Epochs: ep(2, 3)},
				tc.rollback,
			)
			m := g.Resharding("rsh-1")
			if m.State != tc.rollback.State || m.RollbackPolicy != tc.rollback.Policy || m.RollbackRequestedBy != "bob" || m.RollbackReason != "too hot" || m.Drained {
				t.Errorf("resharding = %+v", m)
			}
			if g.ShardCount != 4 || g.AssignableCount != tc.rollback.AssignableCount {
				t.Errorf("shardCount/assignable = %d/%d, want 4/%d", g.ShardCount, g.AssignableCount, tc.rollback.AssignableCount)
			}
			if got := g.Active() != nil; got != tc.wantActive {
				t.Errorf("active = %v (%q), want %v", got, g.ActiveResharding, tc.wantActive)
			}
			assertEpochs(t, g, 4, 1, 5)
			if lo, hi := m.RemovedRange(); lo != 4 || hi != 6 {
				t.Errorf("removed range after rollback of a scale-out = [%d, %d), want [4, 6)", lo, hi)
			}
		})
	}
}

func TestFoldGroupDeletion(t *testing.T) {
	var r recorder
	s := projection.New()
	MustApply(t, s,
		r.rec(orders, created()),
		r.rec(payments, &events.GroupCreated{ShardCount: 2}),
		r.rec(orders, joined("a", 2, 2)),
		r.rec(orders, &events.GroupDeleted{RequestedBy: "alice", Reason: "done", Force: true}),
	)
	if _, ok := s.Group(orders); ok {
		t.Fatal("deleted group still exists")
	}
	s.RLock()
	seen := s.PrefixSeenLocked(orders.StreamPrefix)
	s.RUnlock()
	if !seen {
		t.Error("the prefix of a deleted group is forgotten")
	}
	// Events of a group that does not exist change nothing.
	MustApply(t, s, r.rec(orders, joined("b", 3, 3)))
	if _, ok := s.Group(orders); ok {
		t.Fatal("an event for a deleted group brought it back")
	}
	// Creating it again starts from scratch, after the other group.
	MustApply(t, s, r.rec(orders, &events.GroupCreated{ShardCount: 8}))
	g := MustGroup(t, s, orders)
	if g.ShardCount != 8 || g.MemberCount() != 0 {
		t.Errorf("recreated group = %+v", g)
	}
	assertEpochs(t, g, 1, 1, 1)
	var keys []projection.GroupKey
	for _, g := range s.Groups() {
		keys = append(keys, g.Key)
	}
	if !reflect.DeepEqual(keys, []projection.GroupKey{payments, orders}) {
		t.Errorf("groups in order %v, want [payments orders]", keys)
	}
	// GroupsWhere copies only the groups it accepts, in the same order.
	eight := s.GroupsWhere(func(g projection.ReadOnlyGroup) bool { return g.ShardCount() == 8 })
	if len(eight) != 1 || eight[0].Key != orders {
		t.Errorf("GroupsWhere(8 shards) = %v, want [orders]", eight)
	}
	eight[0].ShardCount = 99
	if g := MustGroup(t, s, orders); g.ShardCount != 8 {
		t.Errorf("GroupsWhere returned the live group, not a copy")
	}
	if none := s.GroupsWhere(func(projection.ReadOnlyGroup) bool { return false }); len(none) != 0 {
		t.Errorf("GroupsWhere(false) = %v", none)
	}
}

func TestFoldEventOfUnknownGroup(t *testing.T) {
	var r recorder
	s := projection.New()
	MustApply(t, s, r.rec(orders, &events.CommandRejected{Command: "group.delete", ErrorCode: "GROUP_NOT_FOUND"}))
	if _, ok := s.Group(orders); ok {
		t.Fatal("a rejected command created a group")
	}
	// A global event (no group) changes nothing either.
	MustApply(t, s, r.rec(projection.GroupKey{}, &events.CommandRejected{Command: "x"}))
	if len(s.Groups()) != 0 {
		t.Errorf("groups = %+v, want none", s.Groups())
	}
	if s.LastID() != "2-0" || s.Applied() != 2 {
		t.Errorf("lastID/applied = %s/%d, want 2-0/2", s.LastID(), s.Applied())
	}
}

func TestApplyOutOfOrder(t *testing.T) {
	rec := func(id string) events.Record {
		var r recorder
		x := r.rec(orders, joined("late", 9, 9))
		x.ID = id
		return x
	}
	tests := []struct {
		name string
		id   string
	}{
		{"same id twice", "100-5"},
		{"lower sequence", "100-4"},
		{"lower millisecond", "99-9"},
		{"zero id", "0-0"},
		{"malformed id", "not-an-id"},
		{"empty id", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var r recorder
			s := projection.New()
			first := r.rec(orders, created())
			first.ID = "100-5"
			MustApply(t, s, first)
			before := MustCanonicalState(t, s)
			err := s.Apply(rec(tc.id))
			if err == nil {
				t.Fatalf("Apply(%q) after 100-5 succeeded", tc.id)
			}
			if tc.id != "" && !strings.Contains(err.Error(), tc.id) {
				t.Errorf("error %q does not name the id %q", err, tc.id)
			}
			if got := MustCanonicalState(t, s); !reflect.DeepEqual(got, before) {
				t.Errorf("a refused Apply changed the state:\n got %v\nwant %v", got, before)
			}
			if s.LastID() != "100-5" || s.Applied() != 1 {
				t.Errorf("lastID/applied = %s/%d, want 100-5/1", s.LastID(), s.Applied())
			}
			MustApply(t, s, rec("100-6"))
			if s.LastID() != "100-6" {
				t.Errorf("lastID = %s, want 100-6", s.LastID())
			}
		})
	}
}

func TestApplyNormalisesID(t *testing.T) {
	var r recorder
	s := projection.New()
	rec := r.rec(orders, created())
	rec.ID = "0042"
	MustApply(t, s, rec)
	if s.LastID() != "42-0" {
		t.Errorf("lastID = %q, want 42-0", s.LastID())
	}
}

// groupWith builds a group from events applied after group.created (4 shards).
func groupWith(tb testing.TB, evs ...events.Event) *projection.Group {
	tb.Helper()
	g, _ := foldGroup(tb, evs...)
	return g
}

func TestGroupState(t *testing.T) {
	target := func(t map[string][]int) events.Event {
		return &events.AssignmentComputed{AssignmentEpoch: 3, Targets: t}
	}
	owns := func(id string, owned, revoking []int) events.Event {
		return &events.OwnershipReported{MemberID: id, Owned: owned, Revoking: revoking}
	}
	tests := []struct {
		name   string
		events []events.Event
		want   string
	}{
		{"no members", nil, "EMPTY"},
		{"only expired members", []events.Event{joined("a", 2, 2), owns("a", ints(0), nil), &events.MembersExpired{MemberIDs: []string{"a"}, Epochs: ep(3, 3)}}, "EMPTY"},
		{"only a leaving member, still holding", []events.Event{joined("a", 2, 2), owns("a", ints(0), nil), &events.MemberLeft{MemberID: "a", Epochs: ep(3, 3)}}, "EMPTY"},
		{"only fenced members", []events.Event{joined("a", 2, 2), &events.MemberFenced{MemberID: "a", MemberEpoch: 1, Epochs: ep(3, 3)}}, "EMPTY"},
		{"live member without target or shards", []events.Event{joined("a", 2, 2)}, "STABLE"},
		{"current equals target", []events.Event{
			joined("a", 2, 2), joined("b", 3, 3), target(map[string][]int{"a": ints(0, 1), "b": ints(2, 3)}),
			owns("a", ints(1, 0), nil), owns("b", ints(2, 3), nil),
		}, "STABLE"},
		{"target not yet reached", []events.Event{
			joined("a", 2, 2), joined("b", 3, 3), target(map[string][]int{"a": ints(0, 1), "b": ints(2, 3)}),
			owns("a", ints(0, 1), nil), owns("b", ints(2), nil),
		}, "RECONCILING"},
		{"member owns more than its target", []events.Event{
			joined("a", 2, 2), target(map[string][]int{"a": ints(0)}), owns("a", ints(0, 1), nil),
		}, "RECONCILING"},
		{"member still revoking", []events.Event{
			joined("a", 2, 2), target(map[string][]int{"a": ints(0, 1, 2, 3)}), owns("a", ints(0, 1, 2, 3), ints(3)),
		}, "RECONCILING"},
		{"target blocked by another member's grant", []events.Event{
			joined("a", 2, 2), joined("b", 3, 3), target(map[string][]int{"a": ints(0, 1), "b": ints(2, 3)}),
			owns("a", ints(0, 1), nil), owns("b", ints(2, 3), nil),
			&events.MemberSynced{MemberID: "a", MemberEpoch: 3, Granted: ints(0, 1, 2)},
		}, "RECONCILING"},
		{"leaving member still holds a removed shard", []events.Event{
			joined("a", 2, 2), joined("b", 3, 3), target(map[string][]int{"a": ints(0, 1, 2, 3)}),
			owns("a", ints(0, 1, 2, 3), nil), owns("b", ints(5), nil), &events.MemberLeft{MemberID: "b", Epochs: ep(4, 4)},
		}, "RECONCILING"},
		{"leaving member released everything", []events.Event{
			joined("a", 2, 2), joined("b", 3, 3), target(map[string][]int{"a": ints(0, 1, 2, 3)}),
			owns("a", ints(0, 1, 2, 3), nil), &events.MemberLeft{MemberID: "b", Epochs: ep(4, 4)}, owns("b", nil, nil),
		}, "STABLE"},
		{"expired member's stale shards do not block", []events.Event{
			joined("a", 2, 2), joined("b", 3, 3), owns("b", ints(0, 1), nil),
			&events.MembersExpired{MemberIDs: []string{"b"}, Epochs: ep(4, 4)},
			target(map[string][]int{"a": ints(0, 1, 2, 3)}), owns("a", ints(0, 1, 2, 3), nil),
		}, "STABLE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := groupWith(t, tc.events...)
			if got := g.State(); got != tc.want {
				t.Errorf("State() = %s, want %s", got, tc.want)
			}
			if got := projection.ViewGroup(g).State; got != tc.want {
				t.Errorf("ViewGroup state = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestGrantableAndBlocked(t *testing.T) {
	// b's target is every shard; what a still holds must be revoked before it
	// is granted to b.
	base := []events.Event{
		joined("a", 2, 2), joined("b", 3, 3),
		&events.AssignmentComputed{AssignmentEpoch: 3, Targets: map[string][]int{"b": ints(0, 1, 2, 3)}},
	}
	tests := []struct {
		name         string
		events       []events.Event
		member       string
		wantAssigned []int
		wantPending  []int
	}{
		{"nothing held elsewhere", nil, "b", ints(0, 1, 2, 3), nil},
		{"in A's current", []events.Event{&events.OwnershipReported{MemberID: "a", Owned: ints(0)}}, "b", ints(1, 2, 3), ints(0)},
		{"in A's granted", []events.Event{&events.MemberSynced{MemberID: "a", MemberEpoch: 2, Granted: ints(1)}}, "b", ints(0, 2, 3), ints(1)},
		{"in A's revoking", []events.Event{&events.OwnershipReported{MemberID: "a", Revoking: ints(2)}}, "b", ints(0, 1, 3), ints(2)},
		{"current, granted and revoking together", []events.Event{
			&events.MemberSynced{MemberID: "a", MemberEpoch: 2, Granted: ints(1)},
			&events.OwnershipReported{MemberID: "a", Owned: ints(0), Revoking: ints(3)},
		}, "b", ints(2), ints(0, 1, 3)},
		{"A left but has not released", []events.Event{
			&events.OwnershipReported{MemberID: "a", Owned: ints(3)}, &events.MemberLeft{MemberID: "a", Epochs: ep(4, 4)},
		}, "b", ints(0, 1, 2), ints(3)},
		{"A expired", []events.Event{
			&events.OwnershipReported{MemberID: "a", Owned: ints(0, 1)}, &events.MembersExpired{MemberIDs: []string{"a"}, Epochs: ep(4, 4)},
		}, "b", ints(0, 1, 2, 3), nil},
		{"A fenced", []events.Event{
			&events.OwnershipReported{MemberID: "a", Owned: ints(0, 1)}, &events.MemberFenced{MemberID: "a", MemberEpoch: 3, Epochs: ep(4, 4)},
		}, "b", ints(0, 1, 2, 3), nil},
		{"own shards do not block", []events.Event{&events.OwnershipReported{MemberID: "b", Owned: ints(0, 1)}}, "b", ints(0, 1, 2, 3), nil},
		{"member without a target", []events.Event{&events.OwnershipReported{MemberID: "b", Owned: ints(0)}}, "a", nil, nil},
		{"unknown member", nil, "zed", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := groupWith(t, append(append([]events.Event{}, base...), tc.events...)...)
			assigned, pending := g.Grantable(tc.member)
			if assigned == nil || pending == nil {
				t.Errorf("Grantable returned nil slices (%v, %v); the wire wants []", assigned, pending)
			}
			assertInts(t, "assigned", assigned, tc.wantAssigned)
			assertInts(t, "pending", pending, tc.wantPending)
			assertInts(t, "Blocked", g.Blocked(tc.member), tc.wantPending)
			for _, s := range tc.wantPending {
				if !g.HeldByOthers(tc.member, s) {
					t.Errorf("HeldByOthers(%s, %d) = false for a pending shard", tc.member, s)
				}
			}
		})
	}
}

// TestOldLogFolds folds the log an earlier build wrote (events/testdata) and
// checks what it must mean.
func TestOldLogFolds(t *testing.T) {
	entries := MustReadLogFile(t, "../events/testdata/old-log.jsonl")
	s := MustFold(t, MustDecodeAll(t, entries))
	if s.LastID() != entries[len(entries)-1].ID {
		t.Errorf("lastID = %s, want %s", s.LastID(), entries[len(entries)-1].ID)
	}
	if _, ok := s.Group(payments); ok {
		t.Error("payments/ledger was deleted in the old log but exists")
	}
	s.RLock()
	seen := s.PrefixSeenLocked(payments.StreamPrefix)
	s.RUnlock()
	if !seen {
		t.Error("payments was created in the old log but its prefix is not remembered")
	}
	g := MustGroup(t, s, orders)
	if g.ShardCount != 4 || g.AssignableCount != 4 {
		t.Errorf("shardCount/assignable = %d/%d, want 4/4", g.ShardCount, g.AssignableCount)
	}
	assertEpochs(t, g, 14, 14, 19)
	if !reflect.DeepEqual(g.MemberIDs(), []string{"m-1", "m-2"}) || !reflect.DeepEqual(g.LiveMemberIDs(), []string{"m-1"}) {
		t.Errorf("members = %v, live = %v; want [m-1 m-2], [m-1]", g.MemberIDs(), g.LiveMemberIDs())
	}
	if m := g.Member("m-2"); m.State != projection.MemberLeaving || m.Name != "worker-2-renamed" || m.MaxConcurrency != 8 {
		t.Errorf("m-2 = %+v", m)
	}
	assertInts(t, "target m-1", g.Target("m-1"), ints(0, 1, 2, 3))
	if g.Active() != nil || len(g.Reshardings) != 3 {
		t.Fatalf("active %q, %d reshardings; want none active and 3", g.ActiveResharding, len(g.Reshardings))
	}
	wantStates := []string{projection.Deprecated, projection.Deprecated, projection.RolledBack}
	for i, m := range g.Reshardings {
		if m.State != wantStates[i] {
			t.Errorf("resharding %s state = %s, want %s", m.ReshardingID, m.State, wantStates[i])
		}
	}
	if m := g.Resharding("rsh-2"); !m.Retired || len(m.RetiredKeys) != 2 || !m.Drained {
		t.Errorf("rsh-2 = %+v, want drained and retired", m)
	}
	if v := projection.ViewAssignments(g); len(v.InvariantViolations) != 0 {
		t.Errorf("invariant violations: %v", v.InvariantViolations)
	}
}

// TestFinishedReshardingsAreBounded: a group keeps at most
// MaxFinishedReshardings finished reshardings (the oldest go first), so the
// state does not grow with the number of reshardings in the log.
func TestFinishedReshardingsAreBounded(t *testing.T) {
	var r recorder
	s := projection.New()
	MustApply(t, s, r.rec(orders, created()))
	count := 4
	for i := 0; i < projection.MaxFinishedReshardings+10; i++ {
		id := fmt.Sprintf("r-%03d", i)
		to := count * 2
		if i%2 == 1 {
			to = count / 2
		}
		MustApply(t, s,
			r.rec(orders, &events.ReshardingPreparing{ReshardingID: id, FromShardCount: count, ToShardCount: to}),
			r.rec(orders, &events.ReshardingCompleted{ReshardingID: id, State: projection.Deprecated}),
		)
		count = to
	}
	g := MustGroup(t, s, orders)
	if len(g.Reshardings) != projection.MaxFinishedReshardings {
		t.Fatalf("%d reshardings kept, want %d", len(g.Reshardings), projection.MaxFinishedReshardings)
	}
	if first := g.Reshardings[0].ReshardingID; first != "r-010" {
		t.Errorf("oldest kept resharding %s, want r-010 (the oldest ones go first)", first)
	}
	if last := g.Reshardings[len(g.Reshardings)-1].ReshardingID; last != fmt.Sprintf("r-%03d", projection.MaxFinishedReshardings+9) {
		t.Errorf("newest resharding %s dropped", last)
	}
}
