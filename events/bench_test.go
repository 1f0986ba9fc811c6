package events_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
)

// benchLog is a realistic coordinator log of n entries: membership chatter
// (syncs, ownership reports, joins, recomputed assignments, expiries) is about
// 99% of it; the rest is reshardings with drain evidence, group creation and
// rejected commands. It is the same for every run (fixed seed).
func benchLog(tb testing.TB, n int) [][]byte {
	tb.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	const shards = 64
	member := func() string { return fmt.Sprintf("orders-worker-%04x-%d", rng.IntN(1<<16), rng.IntN(32)) }
	someShards := func() []int {
		out := make([]int, 1+rng.IntN(6))
		for i := range out {
			out[i] = rng.IntN(shards)
		}
		return out
	}
	epochs := func() events.Epochs {
		return events.Epochs{GroupEpoch: 1000 + rng.Int64N(1000), MetadataVersion: 2000 + rng.Int64N(1000)}
	}
	evidence := func() []events.ShardDrain {
		return []events.ShardDrain{
			{ShardIndex: 62, StreamKey: "orders:62", Exists: true, Groups: []events.GroupDrain{{Name: "billing", Pending: 0, Lag: 0}, {Name: "audit", Pending: 3, Lag: -1}}},
			{ShardIndex: 63, StreamKey: "orders:63", Exists: true, Groups: []events.GroupDrain{{Name: "billing"}, {Name: "audit"}}},
		}
	}
	t0 := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	out := make([][]byte, 0, n)
	for i := 0; i < n; i++ {
		m := member()
		meta := events.Meta{
			StreamPrefix: "orders", ConsumerGroup: "billing", Time: t0.Add(time.Duration(i) * 37 * time.Millisecond),
			Actor: m, RequestID: fmt.Sprintf("hb-%08x", rng.Uint32()),
		}
		var ev events.Event
		switch p := rng.IntN(1000); {
		case p < 400:
			ev = &events.MemberSynced{MemberID: m, MemberEpoch: 1 + rng.Int64N(5000), Granted: someShards()}
		case p < 650:
			ev = &events.OwnershipReported{MemberID: m, Owned: someShards(), Revoking: someShards()[:rng.IntN(2)]}
		case p < 780:
			ev = &events.MemberJoined{MemberID: m, MemberName: "worker", MaxConcurrency: 8, Rejoin: rng.IntN(4) == 0, Principal: "svc-orders", Epochs: epochs()}
		case p < 900:
			meta.Actor = "coordinator"
			ev = &events.AssignmentChanged{AssignmentEpoch: 1000 + rng.Int64N(1000), Targets: events.Targets{m: someShards(), member(): someShards()}, Removed: []string{member()}}
		case p < 960:
			meta.Actor = "coordinator"
			ev = &events.MembersExpired{MemberIDs: []string{m, member()}, Epochs: epochs()}
		case p < 980:
			ev = &events.RevokeAcknowledged{MemberID: m, Shards: someShards()}
		case p < 990:
			ev = &events.MemberLeft{MemberID: m, Epochs: epochs()}
		case p < 993:
			meta.Actor = "coordinator"
			ev = &events.ReshardingDrained{ReshardingID: "rsh-7", AssignableCount: 62, Evidence: evidence(), Epochs: epochs()}
		case p < 995:
			meta.Actor = "coordinator"
			ev = &events.ReshardingCompleted{ReshardingID: "rsh-7", State: "DEPRECATED", Evidence: evidence(), MetadataVersion: 3000}
		case p < 997:
			meta.Actor = "alice"
			ev = &events.ReshardingPreparing{ReshardingID: "rsh-8", FromShardCount: 64, ToShardCount: 62, RequestedBy: "alice", Reason: "traffic dropped"}
		case p < 998:
			meta.Actor = "alice"
			ev = &events.GroupCreated{ShardCount: 64, Provisioned: true, RequestedBy: "alice", Reason: "launch"}
		default:
			meta.Actor = "bob"
			ev = &events.CommandRejected{Command: "resharding.create", ErrorCode: "RESHARDING_IN_PROGRESS", Message: "a resharding is active", RequestedBy: "bob"}
		}
		out = append(out, MustEncode(tb, meta, ev))
	}
	return out
}

// BenchmarkDecode decodes a realistic log with the fast path (plans, fast)
// and with the reflection decoder they replace (reflect), in the same run.
// ev/s is entries decoded per second on one core.
func BenchmarkDecode(b *testing.B) {
	entries := benchLog(b, 4096)
	var size int
	for _, e := range entries {
		size += len(e)
	}
	for _, bc := range []struct {
		name   string
		decode func(string, []byte) (events.Record, error)
	}{
		{"reflect", events.DecodeReflect},
		{"fast", events.Decode},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size / len(entries)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := bc.decode("1714564800000-0", entries[i%len(entries)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ev/s")
		})
	}
}
