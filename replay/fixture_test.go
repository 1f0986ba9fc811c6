package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// billing is the group the fixtures reshard; ledger is a bystander group.
var (
	billing = projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "billing"}
	ledger  = projection.GroupKey{StreamPrefix: "payments", ConsumerGroup: "ledger"}
)

// fixtureStart is the decision time of every fixture's first event; each
// following event is one second later, so outputs are stable.
var fixtureStart = time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)

// logBuilder appends encoded events to a MemLog, one second apart.
type logBuilder struct {
	tb   testing.TB
	log  *events.MemLog
	next time.Time
	last string
	// marks names positions: the id of the last entry appended when mark was called.
	marks map[string]string
}

func newLogBuilder(tb testing.TB) *logBuilder {
	return &logBuilder{tb: tb, log: events.NewMemLog(), next: fixtureStart, last: events.ZeroID, marks: map[string]string{}}
}

// add appends one event of group k decided by actor and returns its id.
func (b *logBuilder) add(k projection.GroupKey, actor string, ev events.Event) string {
	b.tb.Helper()
	data, err := events.Encode(events.Meta{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, Time: b.next, Actor: actor}, ev)
	if err != nil {
		b.tb.Fatalf("encode %s: %v", ev.EventType(), err)
	}
	b.next = b.next.Add(time.Second)
	return b.addRaw(data)
}

// addRaw appends bytes as they are (for corrupt entries).
func (b *logBuilder) addRaw(data []byte) string {
	b.tb.Helper()
	ids, err := b.log.Append(context.Background(), b.last, [][]byte{data})
	if err != nil {
		b.tb.Fatalf("append: %v", err)
	}
	b.last = ids[0]
	return b.last
}

func (b *logBuilder) mark(name string) { b.marks[name] = b.last }

// scaleInLog is the main fixture: group orders/billing with 4 shards, members m1
// and m2 joining and converging, then resharding "reshard-0001" scaling it in
// from 4 to 2: preparing, provisioned, activated, draining, drained (shards 2
// and 3 revoked), completed (DEPRECATED) and retired (streams deleted). A second
// group, payments/ledger, is created along the way and never changes. Marks:
// "stable" (both members converged), "activated", "drained", "end".
func scaleInLog(tb testing.TB) *logBuilder {
	tb.Helper()
	b := newLogBuilder(tb)
	const rs = "reshard-0001"
	drained := []events.ShardDrain{
		{ShardIndex: 2, StreamKey: "orders:2", Exists: true, Groups: []events.GroupDrain{{Name: "billing", Pending: 0, Lag: 0}}},
		{ShardIndex: 3, StreamKey: "orders:3", Exists: true, Groups: []events.GroupDrain{{Name: "billing", Pending: 0, Lag: 0}}},
	}
	b.add(billing, "alice", &events.GroupCreated{ShardCount: 4, Provisioned: true, RequestedBy: "alice", Reason: "billing consumers"})
	b.add(ledger, "bob", &events.GroupCreated{ShardCount: 2, Provisioned: true, RequestedBy: "bob"})

	b.add(billing, "m1", &events.MemberJoined{MemberID: "m1", MemberName: "billing-1", MaxConcurrency: 4, Epochs: events.Epochs{GroupEpoch: 2, MetadataVersion: 2}})
	b.add(billing, "m1", &events.AssignmentComputed{AssignmentEpoch: 2, Targets: map[string][]int{"m1": {0, 1, 2, 3}}})
	b.add(billing, "m1", &events.MemberSynced{MemberID: "m1", MemberEpoch: 2, Granted: []int{0, 1, 2, 3}})
	b.add(billing, "m1", &events.OwnershipReported{MemberID: "m1", Owned: []int{0, 1, 2, 3}, Revoking: []int{}})
	b.mark("m1")

	b.add(billing, "m2", &events.MemberJoined{MemberID: "m2", MemberName: "billing-2", MaxConcurrency: 2, Epochs: events.Epochs{GroupEpoch: 3, MetadataVersion: 3}})
	b.add(billing, "m2", &events.AssignmentComputed{AssignmentEpoch: 3, Targets: map[string][]int{"m1": {0, 1}, "m2": {2, 3}}})
	b.add(billing, "m2", &events.MemberSynced{MemberID: "m2", MemberEpoch: 3, Granted: []int{}})
	b.add(billing, "m1", &events.MemberSynced{MemberID: "m1", MemberEpoch: 3, Granted: []int{0, 1}})
	b.add(billing, "m1", &events.OwnershipReported{MemberID: "m1", Owned: []int{0, 1}, Revoking: []int{}})
	b.add(billing, "m1", &events.RevokeAcknowledged{MemberID: "m1", Shards: []int{2, 3}})
	b.add(billing, "m2", &events.MemberSynced{MemberID: "m2", MemberEpoch: 3, Granted: []int{2, 3}})
	b.add(billing, "m2", &events.OwnershipReported{MemberID: "m2", Owned: []int{2, 3}, Revoking: []int{}})
	b.mark("stable")

	b.add(billing, "alice", &events.ReshardingPreparing{ReshardingID: rs, FromShardCount: 4, ToShardCount: 2, RequestedBy: "alice", Reason: "traffic dropped"})
	b.add(billing, "coordinator", &events.ReshardingProvisioned{ReshardingID: rs, Shards: 2})
	b.add(billing, "coordinator", &events.ReshardingActivated{ReshardingID: rs, ShardCount: 2, AssignableCount: 4, Epochs: events.Epochs{GroupEpoch: 4, MetadataVersion: 4}})
	b.add(billing, "coordinator", &events.AssignmentComputed{AssignmentEpoch: 4, Targets: map[string][]int{"m1": {0, 1}, "m2": {2, 3}}})
	b.mark("activated")
	b.add(billing, "m1", &events.MemberSynced{MemberID: "m1", MemberEpoch: 4, Granted: []int{0, 1}})
	b.add(billing, "m2", &events.MemberSynced{MemberID: "m2", MemberEpoch: 4, Granted: []int{2, 3}})

	b.add(billing, "coordinator", &events.ReshardingDraining{ReshardingID: rs, Epochs: events.Epochs{GroupEpoch: 5, MetadataVersion: 5}})
	b.add(billing, "coordinator", &events.AssignmentComputed{AssignmentEpoch: 5, Targets: map[string][]int{"m1": {0, 1}, "m2": {2, 3}}})
	b.add(billing, "coordinator", &events.ReshardingDrained{ReshardingID: rs, AssignableCount: 2, Evidence: drained, Epochs: events.Epochs{GroupEpoch: 6, MetadataVersion: 6}})
	b.add(billing, "coordinator", &events.AssignmentComputed{AssignmentEpoch: 6, Targets: map[string][]int{"m1": {0}, "m2": {1}}})
	b.mark("drained")
	b.add(billing, "m1", &events.MemberSynced{MemberID: "m1", MemberEpoch: 6, Granted: []int{0}})
	b.add(billing, "m1", &events.OwnershipReported{MemberID: "m1", Owned: []int{0}, Revoking: []int{}})
	b.add(billing, "m1", &events.RevokeAcknowledged{MemberID: "m1", Shards: []int{1}})
	b.add(billing, "m2", &events.MemberSynced{MemberID: "m2", MemberEpoch: 6, Granted: []int{1}})
	b.add(billing, "m2", &events.OwnershipReported{MemberID: "m2", Owned: []int{1}, Revoking: []int{}})
	b.add(billing, "m2", &events.RevokeAcknowledged{MemberID: "m2", Shards: []int{2, 3}})

	b.add(billing, "coordinator", &events.ReshardingCompleted{ReshardingID: rs, State: projection.Deprecated, Evidence: drained, MetadataVersion: 7})
	b.add(billing, "coordinator", &events.ShardsRetired{ReshardingID: rs, StreamKeys: []string{"orders:2", "orders:3"}})
	b.mark("end")
	return b
}

// scaleOutLog is a group orders/billing with one member, in the middle of
// resharding "reshard-0002" from 4 to 8 shards: activated, new shards 4..7
// assigned and granted to m1. Marks: "end".
func scaleOutLog(tb testing.TB) *logBuilder {
	tb.Helper()
	b := newLogBuilder(tb)
	const rs = "reshard-0002"
	b.add(billing, "alice", &events.GroupCreated{ShardCount: 4, Provisioned: true, RequestedBy: "alice"})
	b.add(billing, "m1", &events.MemberJoined{MemberID: "m1", MemberName: "billing-1", MaxConcurrency: 8, Epochs: events.Epochs{GroupEpoch: 2, MetadataVersion: 2}})
	b.add(billing, "m1", &events.AssignmentComputed{AssignmentEpoch: 2, Targets: map[string][]int{"m1": {0, 1, 2, 3}}})
	b.add(billing, "m1", &events.MemberSynced{MemberID: "m1", MemberEpoch: 2, Granted: []int{0, 1, 2, 3}})
	b.add(billing, "m1", &events.OwnershipReported{MemberID: "m1", Owned: []int{0, 1, 2, 3}, Revoking: []int{}})
	b.add(billing, "alice", &events.ReshardingPreparing{ReshardingID: rs, FromShardCount: 4, ToShardCount: 8, RequestedBy: "alice", Reason: "black friday"})
	b.add(billing, "coordinator", &events.ReshardingProvisioned{ReshardingID: rs, Shards: 8})
	b.add(billing, "coordinator", &events.ReshardingActivated{ReshardingID: rs, ShardCount: 8, AssignableCount: 8, Epochs: events.Epochs{GroupEpoch: 3, MetadataVersion: 3}})
	b.add(billing, "coordinator", &events.AssignmentComputed{AssignmentEpoch: 3, Targets: map[string][]int{"m1": {0, 1, 2, 3, 4, 5, 6, 7}}})
	b.add(billing, "m1", &events.MemberSynced{MemberID: "m1", MemberEpoch: 3, Granted: []int{0, 1, 2, 3, 4, 5, 6, 7}})
	b.mark("end")
	return b
}
