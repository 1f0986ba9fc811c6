package chaos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// CheckLog finds a shard granted to a second member while the first still
// holds it, once, at the event that caused it.
func TestCheckLogFindsAShardHeldTwice(t *testing.T) {
	ctx := context.Background()
	k := projection.GroupKey{StreamPrefix: "p", ConsumerGroup: "g"}
	at := time.Unix(1_700_000_000, 0).UTC()
	cases := []struct {
		name string
		evs  []events.Event
		want []string
	}{
		{
			name: "disjoint grants",
			evs: []events.Event{
				&events.MemberSynced{MemberID: "a", MemberEpoch: 2, Granted: []int{0, 1}},
				&events.MemberSynced{MemberID: "b", MemberEpoch: 2, Granted: []int{2, 3}},
			},
		},
		{
			name: "shard 1 granted to b while a holds it",
			evs: []events.Event{
				&events.MemberSynced{MemberID: "a", MemberEpoch: 2, Granted: []int{0, 1}},
				&events.MemberSynced{MemberID: "b", MemberEpoch: 2, Granted: []int{1, 2}},
				&events.OwnershipReported{MemberID: "b", Owned: []int{1, 2}, Revoking: []int{}},
			},
			want: []string{"(member.synced): shard 1 held by more than one member [a, b]"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log := events.NewMemLog()
			meta := events.Meta{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, Time: at, Actor: "test"}
			all := append([]events.Event{
				&events.GroupCreated{ShardCount: 4, Provisioned: true, RequestedBy: "test"},
				&events.MemberJoined{MemberID: "a", MemberName: "a", MaxConcurrency: 1, Epochs: events.Epochs{GroupEpoch: 1, MetadataVersion: 1}},
				&events.MemberJoined{MemberID: "b", MemberName: "b", MaxConcurrency: 1, Epochs: events.Epochs{GroupEpoch: 2, MetadataVersion: 1}},
			}, tc.evs...)
			after := events.ZeroID
			for _, ev := range all {
				data, err := events.Encode(meta, ev)
				if err != nil {
					t.Fatal(err)
				}
				ids, err := log.Append(ctx, after, [][]byte{data})
				if err != nil {
					t.Fatal(err)
				}
				after = ids[0]
			}
			n, got, err := CheckLog(ctx, log, k)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(all) {
				t.Errorf("folded %d events, want %d", n, len(all))
			}
			if len(got) != len(tc.want) {
				t.Fatalf("violations %q, want %q", got, tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %q, want it to contain %q", got[i], w)
				}
			}
		})
	}
}
