package projection_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// quarantineLog is a log of two prefixes in which one entry of orders cannot
// be read (raw, its bytes), followed by entries of both prefixes. It returns
// the log and the bad entry's id.
func quarantineLog(t *testing.T, raw []byte) (*events.MemLog, string) {
	t.Helper()
	log := events.NewMemLog()
	ctx := context.Background()
	add := func(k projection.GroupKey, ev events.Event) {
		t.Helper()
		data, err := events.Encode(events.Meta{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, Time: t0, Actor: "ops"}, ev)
		if err != nil {
			t.Fatal(err)
		}
		last, _ := log.LastID(ctx)
		if _, err := log.Append(ctx, last, [][]byte{data}); err != nil {
			t.Fatal(err)
		}
	}
	add(payments, &events.GroupCreated{ShardCount: 2, RequestedBy: "ops"})
	add(orders, &events.GroupCreated{ShardCount: 4, RequestedBy: "ops"})
	add(projection.GroupKey{StreamPrefix: "orders"}, &events.StreamAdopted{ShardCount: 4, RequestedBy: "ops"})
	add(orders, &events.MemberJoined{MemberID: "o-0", MemberName: "o-0", MaxConcurrency: 1, Principal: "ops", Epochs: events.Epochs{GroupEpoch: 2, MetadataVersion: 2}})
	last, _ := log.LastID(ctx)
	ids, err := log.Append(ctx, last, [][]byte{raw})
	if err != nil {
		t.Fatal(err)
	}
	add(orders, &events.MemberJoined{MemberID: "o-1", MemberName: "o-1", MaxConcurrency: 1, Epochs: events.Epochs{GroupEpoch: 2, MetadataVersion: 2}})
	add(payments, &events.MemberJoined{MemberID: "p-1", MemberName: "p-1", MaxConcurrency: 1, Principal: "ops", Epochs: events.Epochs{GroupEpoch: 2, MetadataVersion: 2}})
	return log, ids[0]
}

func rawEnvelope(t *testing.T, typ, prefix string, payload any) []byte {
	t.Helper()
	p, err := msgpack.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	data, err := msgpack.Marshal(map[string]any{"type": typ, "v": 1, "prefix": prefix, "time": t0.UnixNano(), "payload": msgpack.RawMessage(p)})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestFoldQuarantinesOnePrefix: an entry of orders that cannot be read (an
// unknown type, or a stream.adopted with shardCount 2,147,483,647)
// quarantines orders, and only orders: its groups and stream leave the state,
// its later entries are skipped and counted, payments is folded on. The
// quarantine survives a snapshot, and the fold from that snapshot agrees with
// the fold from zero.
func TestFoldQuarantinesOnePrefix(t *testing.T) {
	for _, tc := range []struct {
		name, typ, reason string
		raw               func(t *testing.T) []byte
	}{
		{"unknown type", "group.teleported", "unknown event type", func(t *testing.T) []byte {
			return rawEnvelope(t, "group.teleported", "orders", map[string]any{"to": "mars"})
		}},
		{"shard count out of bounds", "stream.adopted", "shardCount 2147483647 is outside", func(t *testing.T) []byte {
			return rawEnvelope(t, "stream.adopted", "orders", map[string]any{"shardCount": 2147483647, "requestedBy": "ops"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log, bad := quarantineLog(t, tc.raw(t))
			st := projection.New()
			n, err := projection.Fold(context.Background(), log, st, projection.FoldOptions{})
			if err != nil {
				t.Fatalf("Fold: %v; want orders quarantined and the fold to go on", err)
			}
			if n != 7 {
				t.Errorf("applied %d entries, want all 7", n)
			}
			q, ok := st.Quarantined("orders")
			if !ok || q.EntryID != bad || q.Type != tc.typ || !strings.Contains(q.Reason, tc.reason) || q.Skipped != 1 {
				t.Fatalf("quarantine of orders = %+v, %v; want entry %s (%s: %q), one entry skipped", q, ok, bad, tc.typ, tc.reason)
			}
			if _, ok := st.Quarantined("payments"); ok {
				t.Fatal("payments quarantined too")
			}
			if _, ok := st.Group(orders); ok {
				t.Error("orders' group is still in the state")
			}
			if _, ok := st.Stream("orders"); ok {
				t.Error("orders' stream is still in the state")
			}
			if g := MustGroup(t, st, payments); g.MemberCount() != 1 {
				t.Errorf("payments has %d members, want its join after the bad entry applied", g.MemberCount())
			}
			// The quarantined prefix's members no longer count for their
			// principal (as after a restore, which counts the groups kept).
			st.RLock()
			active := st.ActiveMembersOfLocked("ops")
			st.RUnlock()
			if active != 1 {
				t.Errorf("principal ops has %d active members, want payments' one", active)
			}
			if last, _ := log.LastID(context.Background()); st.LastID() != last {
				t.Errorf("position %s, want %s (the last entry)", st.LastID(), last)
			}

			// A snapshot taken at the bad entry restores it quarantined,
			// and folding on from it gives the same state.
			at := projection.New()
			if _, err := projection.Fold(context.Background(), log, at, projection.FoldOptions{Until: bad}); err != nil {
				t.Fatal(err)
			}
			snap, err := at.Encode()
			if err != nil {
				t.Fatal(err)
			}
			restored, err := projection.Restore(snap)
			if err != nil {
				t.Fatal(err)
			}
			if q, ok := restored.Quarantined("orders"); !ok || q.EntryID != bad {
				t.Fatalf("restored quarantine %+v, %v; want entry %s", q, ok, bad)
			}
			if _, err := projection.Fold(context.Background(), log, restored, projection.FoldOptions{}); err != nil {
				t.Fatal(err)
			}
			a, _ := st.Encode()
			b, _ := restored.Encode()
			if !bytes.Equal(a, b) {
				t.Error("the fold from the snapshot differs from the fold from zero")
			}
		})
	}
}

// TestSnapshotWithoutQuarantineIsUnchanged: a state with no quarantine
// encodes without the field, as earlier builds wrote it.
func TestSnapshotWithoutQuarantineIsUnchanged(t *testing.T) {
	var r recorder
	st := projection.New()
	MustApply(t, st, r.rec(orders, &events.GroupCreated{ShardCount: 2, RequestedBy: "ops"}))
	data, err := st.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("quarantined")) {
		t.Fatal("an unquarantined snapshot carries the quarantine field")
	}
}

// TestRestoreRefusesOutOfBoundsCounts: a snapshot with a shard count beyond
// events.MaxShardCount is refused (a version 2 snapshot would otherwise size
// a slice by it), so start-up falls back to an older one.
func TestRestoreRefusesOutOfBoundsCounts(t *testing.T) {
	var r recorder
	st := projection.New()
	MustApply(t, st, r.rec(orders, &events.GroupCreated{ShardCount: 2, RequestedBy: "ops"}))
	data, err := st.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var snap map[string]any
	if err := msgpack.Unmarshal(data, &snap); err != nil {
		t.Fatal(err)
	}
	snap["v"] = 2
	snap["groups"].([]any)[0].(map[string]any)["shardCount"] = 2147483647
	bad, err := msgpack.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := projection.Restore(bad); err == nil || !strings.Contains(err.Error(), "2147483647") {
		t.Fatalf("Restore: %v, want the count refused", err)
	}
}
