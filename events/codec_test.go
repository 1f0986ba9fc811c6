package events_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/events"
)

// testTypePrefix marks event types that tests register themselves; loops over
// events.Types() skip them, because the registry is global to the test binary.
const testTypePrefix = "test."

// sampleMeta is the meta every sample event is encoded with.
var sampleMeta = events.Meta{
	StreamPrefix:  "orders",
	ConsumerGroup: "billing",
	Time:          time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.UTC),
	Actor:         "alice",
	RequestID:     "req-0001",
}

// sampleEvents returns one populated value of every event type, written by hand:
// every field holds a non-zero value, so a renamed or re-typed msgpack field
// shows up as a difference. A new event type needs a sample here (and a golden
// file, see golden_test.go).
func sampleEvents() map[string]events.Event {
	epochs := events.Epochs{GroupEpoch: 7, MetadataVersion: 9}
	evidence := []events.ShardDrain{
		{ShardIndex: 4, StreamKey: "orders:4", Exists: true, Groups: []events.GroupDrain{
			{Name: "billing", Pending: 0, Lag: 0},
			{Name: "audit", Pending: 2, Lag: -1},
		}},
		{ShardIndex: 5, StreamKey: "orders:5", Exists: false, Groups: []events.GroupDrain{}},
	}
	return map[string]events.Event{
		"log.restored": &events.LogRestored{RestoredFrom: "1714564800000-3", LogLastID: "1714564700000-0", Cause: "ENTRIES_LOST", LostEntries: 12,
			RequestedBy: "alice", Reason: "failover lost the tail", Coordinator: "replica-b"},
		"group.created":                   &events.GroupCreated{ShardCount: 4, Provisioned: true, RequestedBy: "alice", Reason: "launch"},
		"group.deleted":                   &events.GroupDeleted{RequestedBy: "alice", Reason: "decommissioned", Force: true},
		"group.consumer_groups_destroyed": &events.ConsumerGroupsDestroyed{StreamKeys: []string{"orders:0", "orders:1"}},
		"coordinator.term_started":        &events.TermStarted{Term: 3, Holder: "replica-b#00ff", URL: "http://10.0.0.2:8080"},
		"log.repaired": &events.LogRepaired{RequestedBy: "alice@ops-1", Reason: "entry of a newer build", Skipped: []string{"1714564800000-0"}, SkippedCount: 1,
			Through: "1714564700000-3", PreviousLog: "{coordinator:events}:before-repair:1714564900000", SnapshotsSetAside: []string{"1714564800001-0"}, LeaseIgnored: true},
		"command.rejected": &events.CommandRejected{
			Command: "resharding.create", ErrorCode: "RESHARDING_IN_PROGRESS", Message: "a resharding is active",
			RequestedBy: "bob", Detail: "rsh-1",
		},
		"assignment.computed": &events.AssignmentComputed{AssignmentEpoch: 7, Targets: map[string][]int{
			"m-1": {0, 2}, "m-2": {1, 3}, "m-3": {},
		}},
		"assignment.changed": &events.AssignmentChanged{AssignmentEpoch: 8, Targets: map[string][]int{
			"m-1": {0, 2}, "m-3": {},
		}, Removed: []string{"m-2"}},
		"group.shards_repaired": &events.ShardsRepaired{Shards: []events.ShardRepair{
			{ShardIndex: 1, StreamKey: "orders:1", StreamMissing: true, GroupMissing: true},
			{ShardIndex: 2, StreamKey: "orders:2", StreamMissing: false, GroupMissing: true},
		}},
		"member.joined":              &events.MemberJoined{MemberID: "m-1", MemberName: "worker-1", MaxConcurrency: 8, Rejoin: true, Epochs: epochs},
		"member.updated":             &events.MemberUpdated{MemberID: "m-1", MemberName: "worker-1b", MaxConcurrency: 16},
		"member.synced":              &events.MemberSynced{MemberID: "m-1", MemberEpoch: 7, Granted: []int{0, 2}},
		"member.ownership_reported":  &events.OwnershipReported{MemberID: "m-1", Owned: []int{0, 2}, Revoking: []int{3}},
		"member.revoke_acknowledged": &events.RevokeAcknowledged{MemberID: "m-1", Shards: []int{3}},
		"member.left":                &events.MemberLeft{MemberID: "m-2", Epochs: epochs},
		"member.expired":             &events.MembersExpired{MemberIDs: []string{"m-2", "m-3"}, Epochs: epochs},
		"member.fenced":              &events.MemberFenced{MemberID: "m-3", Reason: "held shard 1 after revoke timeout", MemberEpoch: 8, Epochs: epochs},
		"member.pruned":              &events.MembersPruned{MemberIDs: []string{"m-2", "m-3"}, MetadataVersion: 10},
		"resharding.preparing": &events.ReshardingPreparing{
			ReshardingID: "rsh-1", FromShardCount: 6, ToShardCount: 4, RequestedBy: "alice", Reason: "traffic dropped",
		},
		"resharding.provisioned": &events.ReshardingProvisioned{ReshardingID: "rsh-1", Shards: 4},
		"resharding.activated":   &events.ReshardingActivated{ReshardingID: "rsh-1", ShardCount: 4, AssignableCount: 6, Epochs: epochs},
		"resharding.draining":    &events.ReshardingDraining{ReshardingID: "rsh-1", Epochs: epochs},
		"resharding.drained":     &events.ReshardingDrained{ReshardingID: "rsh-1", AssignableCount: 4, Evidence: evidence, Epochs: epochs},
		"resharding.reopened":    &events.ReshardingReopened{ReshardingID: "rsh-1", AssignableCount: 6, Evidence: evidence, Epochs: epochs},
		"resharding.completed": &events.ReshardingCompleted{
			ReshardingID: "rsh-1", State: "DEPRECATED", Evidence: evidence, MetadataVersion: 12,
		},
		"resharding.rolled_back": &events.ReshardingRolledBack{
			ReshardingID: "rsh-2", Policy: "drain", State: "ROLLING_BACK", ShardCount: 4, AssignableCount: 6,
			RequestedBy: "bob", Reason: "new shards overloaded", Epochs: epochs,
		},
		"resharding.retired":     &events.ShardsRetired{ReshardingID: "rsh-1", StreamKeys: []string{"orders:4", "orders:5"}, Kept: true},
		"group.ordering_changed": &events.GroupOrderingChanged{Ordering: "KEY", RequestedBy: "alice", Reason: "per-key order"},
		"resharding.cutover": &events.ReshardingCutover{ReshardingID: "rsh-1", Fence: 11, FromCount: 4, ToCount: 6, Shards: []events.ShardCutover{
			{ShardIndex: 0, StreamKey: "orders:0", LastID: "1700000000000-3", Fenced: true},
			{ShardIndex: 1, StreamKey: "orders:1", LastID: "0-0", Fenced: false},
		}, Barriers: []events.CutoverBarrier{{ShardIndex: 4, After: "0-0", Sources: []int{0}}}},
		"resharding.barrier_released": &events.BarrierReleased{ReshardingID: "rsh-1", Fence: 11, Shards: []int{4, 5}, Evidence: []events.BarrierProof{
			{ShardIndex: 0, StreamKey: "orders:0", CutoverID: "1700000000000-3", LastDelivered: "1700000000000-3", Exists: true, Pending: 2},
			{ShardIndex: 1, StreamKey: "orders:1", CutoverID: "0-0", LastDelivered: "", Exists: false},
		}},
		"autoscaling.configured": &events.AutoscalingConfigured{
			Enabled: true, MinShards: 2, MaxShards: 32, TargetRate: 1000.5, MaxLagSeconds: 30, ScaleOutCooldown: 60, ScaleInCooldown: 300,
			EvaluationWindow: 60, MaxStepFactor: 2, DryRun: true, RequestedBy: "alice", Reason: "on demand",
		},
		"autoscaling.disabled": &events.AutoscalingDisabled{RequestedBy: "alice", Reason: "manual again"},
		"autoscaling.decided": &events.AutoscalingDecided{
			From: 2, To: 4, Direction: "OUT", DryRun: true, ReshardingID: "rsh-9", Reason: "8000 entries/s over 60s", Window: 60.25, Rate: 8000.5,
			Shards: []events.ShardLoad{{ShardIndex: 1, Rate: 4000.25, Lag: 12, LagSeconds: 0.5}},
		},
		"resharding.unfenced_writes": &events.UnfencedWrites{ReshardingID: "rsh-1", Fence: 11, Shards: []events.ShardWrites{
			{ShardIndex: 2, StreamKey: "orders:2", Count: 3, FirstID: "1700000000001-0"},
		}},
		"stream.created": &events.StreamCreated{ShardCount: 4, Provisioned: true, RequestedBy: "alice", Reason: "launch", Group: "billing", CreatedShards: []int{0, 1, 3}},
		"stream.adopted": &events.StreamAdopted{ShardCount: 3, RequestedBy: "alice", Reason: "take over"},
		"stream.scaled":  &events.StreamScaled{From: 4, To: 2, MetadataVersion: 3, RequestedBy: "alice", Reason: "fewer", CreatedShards: []int{}, KeptKeys: []string{"orders:2", "orders:3"}},
	}
}

// sampleVariants are samples of event types whose fields were added after the
// type's golden file was written: that file (encoded without the field, which
// is omitempty) must never change, so the new field is pinned by a golden file
// of its own under testdata/golden/variants, named <type>.<variant>.
func sampleVariants() map[string]events.Event {
	epochs := events.Epochs{GroupEpoch: 7, MetadataVersion: 9}
	return map[string]events.Event{
		"member.expired.dropped":  &events.MembersExpired{MemberIDs: []string{"m-2"}, Epochs: epochs, Reason: "the connection of its held heartbeat closed"},
		"member.joined.principal": &events.MemberJoined{MemberID: "m-1", MemberName: "worker-1", MaxConcurrency: 8, Rejoin: true, Principal: "svc-orders", Epochs: epochs},
		"group.created.ordering":  &events.GroupCreated{ShardCount: 4, Provisioned: true, RequestedBy: "alice", Reason: "launch", Ordering: "KEY"},
		"group.created.registered": &events.GroupCreated{ShardCount: 4, Provisioned: true, RequestedBy: "svc-orders", Reason: "registered by the first heartbeat of member m-1",
			Ordering: "KEY", MetadataVersion: 3, RegisteredBy: "m-1", KeysChecked: true, CreatedShards: []int{2}},
		"group.created.principal": &events.GroupCreated{ShardCount: 4, Provisioned: true, RequestedBy: "svc-orders", Reason: "registered by the first heartbeat of member m-1",
			Ordering: "KEY", MetadataVersion: 3, RegisteredBy: "m-1", KeysChecked: true, CreatedShards: []int{2},
			Principal: "svc-orders", Anonymous: true, ForeignShards: []int{1}},
		"stream.created.principal": &events.StreamCreated{ShardCount: 4, Provisioned: true, RequestedBy: "alice", Reason: "launch", Group: "billing", CreatedShards: []int{0, 1, 2, 3}, Principal: "alice", Anonymous: true},
		"stream.adopted.principal": &events.StreamAdopted{ShardCount: 4, RequestedBy: "alice", Reason: "take over", Principal: "alice", Anonymous: true},
		"group.deleted.destroy":    &events.GroupDeleted{RequestedBy: "coordinator", Reason: "empty for 168h0m0s", Destroy: []string{"orders:0", "orders:1"}, Expired: true},
		"resharding.preparing.keys": &events.ReshardingPreparing{ReshardingID: "rsh-1", FromShardCount: 2, ToShardCount: 4, RequestedBy: "alice", Reason: "more",
			KeysChecked: true, CreatedShards: []int{2, 3}},
		"resharding.activated.stream":   &events.ReshardingActivated{ReshardingID: "rsh-1", ShardCount: 4, AssignableCount: 6, Epochs: epochs, StreamMetadataVersion: 5},
		"resharding.rolled_back.stream": &events.ReshardingRolledBack{ReshardingID: "rsh-2", Policy: "metadata", State: "ROLLED_BACK", ShardCount: 4, AssignableCount: 4, RequestedBy: "bob", Reason: "back", Epochs: epochs, StreamMetadataVersion: 6},
		"resharding.retired.keptkeys":   &events.ShardsRetired{ReshardingID: "rsh-1", StreamKeys: []string{"orders:4"}, KeptKeys: []string{"orders:5"}},
		"resharding.cutover.streamfence": &events.ReshardingCutover{ReshardingID: "rsh-1", Fence: 11, FromCount: 1, ToCount: 2, Shards: []events.ShardCutover{
			{ShardIndex: 0, StreamKey: "orders:0", LastID: "0-0", Fenced: true},
		}, Barriers: []events.CutoverBarrier{}, StreamFence: 4},
		"command.rejected.suppressed": &events.CommandRejected{Command: "group.scale", ErrorCode: "GROUP_NOT_FOUND", Message: "Group not found",
			RequestedBy: "alice", Detail: "made-up group", Suppressed: 4211, NoGroup: true},
		"resharding.barrier_released.lastgenerated": &events.BarrierReleased{ReshardingID: "rsh-1", Fence: 11, Shards: []int{4}, Evidence: []events.BarrierProof{
			{ShardIndex: 0, StreamKey: "orders:0", CutoverID: "1700000000000-3", LastDelivered: "0-0", Exists: true, LastGenerated: "0-0"},
		}},
	}
}

// registeredTypes is events.Types() without the types tests register.
func registeredTypes() []string {
	var out []string
	for _, name := range events.Types() {
		if !strings.HasPrefix(name, testTypePrefix) {
			out = append(out, name)
		}
	}
	return out
}

// MustEncode encodes an event or fails the test.
func MustEncode(tb testing.TB, m events.Meta, ev events.Event) []byte {
	tb.Helper()
	data, err := events.Encode(m, ev)
	if err != nil {
		tb.Fatalf("Encode(%T): %v", ev, err)
	}
	return data
}

// MustMarshal marshals v with the codec's settings or fails the test.
func MustMarshal(tb testing.TB, v any) []byte {
	tb.Helper()
	data, err := events.Marshal(v)
	if err != nil {
		tb.Fatalf("Marshal(%T): %v", v, err)
	}
	return data
}

// rawEnvelope builds envelope bytes by hand, so tests can write what this build
// never would (unknown types, other schemas, missing fields).
func rawEnvelope(tb testing.TB, fields map[string]any) []byte {
	tb.Helper()
	return MustMarshal(tb, fields)
}

func TestSamplesCoverEveryRegisteredType(t *testing.T) {
	samples := sampleEvents()
	types := registeredTypes()
	if len(types) == 0 {
		t.Fatal("no event types registered")
	}
	for _, name := range types {
		ev, ok := samples[name]
		if !ok {
			t.Errorf("event type %q has no sample in sampleEvents", name)
			continue
		}
		if got := ev.EventType(); got != name {
			t.Errorf("sample for %q has EventType %q", name, got)
		}
		zero, ok := events.New(name)
		if !ok {
			t.Errorf("New(%q) = false for a registered type", name)
			continue
		}
		if reflect.TypeOf(zero) != reflect.TypeOf(ev) {
			t.Errorf("New(%q) builds %T, sample is %T", name, zero, ev)
		}
	}
	for name := range samples {
		if _, ok := events.New(name); !ok {
			t.Errorf("sample %q is not a registered type", name)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	samples := sampleEvents()
	for _, name := range registeredTypes() {
		t.Run(name, func(t *testing.T) {
			zero, _ := events.New(name)
			cases := []struct {
				name string
				meta events.Meta
				ev   events.Event
			}{
				{"populated", sampleMeta, samples[name]},
				{"zero value", events.Meta{}, zero},
				{"global event", events.Meta{Time: sampleMeta.Time, Actor: "coordinator"}, samples[name]},
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					if tc.ev == nil {
						t.Fatalf("no sample for %q", name)
					}
					const id = "1714564800123-4"
					rec, err := events.Decode(id, MustEncode(t, tc.meta, tc.ev))
					if err != nil {
						t.Fatalf("Decode: %v", err)
					}
					if rec.ID != id || rec.Type != name || rec.Schema != events.SchemaVersion {
						t.Errorf("record header = (%q, %q, %d), want (%q, %q, %d)", rec.ID, rec.Type, rec.Schema, id, name, events.SchemaVersion)
					}
					assertMetaEqual(t, rec.Meta, tc.meta)
					if !reflect.DeepEqual(rec.Event, tc.ev) {
						t.Errorf("event round trip:\n got %#v\nwant %#v", rec.Event, tc.ev)
					}
				})
			}
		})
	}
}

// assertMetaEqual compares metas; times are compared as instants, and a decoded
// time is always UTC.
func assertMetaEqual(tb testing.TB, got, want events.Meta) {
	tb.Helper()
	if !got.Time.Equal(want.Time) {
		tb.Errorf("meta time = %v, want %v", got.Time, want.Time)
	}
	if !got.Time.IsZero() && got.Time.Location() != time.UTC {
		tb.Errorf("decoded meta time is in %v, want UTC", got.Time.Location())
	}
	got.Time, want.Time = time.Time{}, time.Time{}
	if got != want {
		tb.Errorf("meta = %+v, want %+v", got, want)
	}
}

func TestEncodeValueAndPointerGiveSameBytes(t *testing.T) {
	ptr := &events.MemberSynced{MemberID: "m-1", MemberEpoch: 3, Granted: []int{1}}
	if a, b := MustEncode(t, sampleMeta, ptr), MustEncode(t, sampleMeta, *ptr); string(a) != string(b) {
		t.Errorf("encoding a pointer and a value differ:\n%x\n%x", a, b)
	}
}

func TestEncodeIsDeterministic(t *testing.T) {
	// Equal values must give equal bytes: the log and the projection's snapshot
	// (State.Encode) rely on it. msgpack sorts only a few plain map types, so
	// maps in events are named types that encode with sorted keys.
	targets := events.Targets{}
	for i := 0; i < 50; i++ {
		targets[fmt.Sprintf("m-%02d", i)] = []int{i}
	}
	tests := []struct {
		name string
		v    any
	}{
		{"map[string]string", map[string]string{"b": "2", "a": "1", "c": "3", "d": "4", "e": "5"}},
		{"events.Targets", targets},
		{"event with a map", &events.AssignmentComputed{AssignmentEpoch: 3, Targets: targets}},
		{"struct holding events.Targets", struct {
			T events.Targets `msgpack:"t"`
		}{targets}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := MustMarshal(t, tc.v)
			for i := 0; i < stableEncodings; i++ {
				if got := MustMarshal(t, tc.v); !bytes.Equal(got, want) {
					t.Fatalf("Marshal(%T) attempt %d differs from the first: map keys are not sorted", tc.v, i)
				}
			}
		})
	}
}

func TestTargetsEncodeSorted(t *testing.T) {
	tests := []struct {
		name    string
		targets events.Targets
		want    []string // keys in wire order
	}{
		{"nil", nil, nil},
		{"empty", events.Targets{}, []string{}},
		{"several", events.Targets{"m-2": {1}, "m-10": {2}, "m-1": {0}, "a": nil}, []string{"a", "m-1", "m-10", "m-2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := MustMarshal(t, tc.targets)
			dec := msgpack.NewDecoder(bytes.NewReader(data))
			n, err := dec.DecodeMapLen()
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if n != -1 {
					t.Fatalf("nil Targets encoded as a map of %d, want nil", n)
				}
				return
			}
			var keys []string
			for i := 0; i < n; i++ {
				k, err := dec.DecodeString()
				if err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
				if err := dec.Skip(); err != nil {
					t.Fatal(err)
				}
			}
			if len(keys) != len(tc.want) || (len(keys) > 0 && !reflect.DeepEqual(keys, tc.want)) {
				t.Errorf("keys on the wire = %v, want %v", keys, tc.want)
			}
			var back events.Targets
			if err := msgpack.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			if len(back) != len(tc.targets) {
				t.Errorf("decoded %v, want %v", back, tc.targets)
			}
		})
	}
}

type unregisteredEvent struct{}

func (unregisteredEvent) EventType() string { return "test.never_registered" }

func TestEncodeErrors(t *testing.T) {
	tests := []struct {
		name    string
		ev      events.Event
		wantErr error
	}{
		{"nil event", nil, nil},
		{"unregistered type", unregisteredEvent{}, events.ErrUnknownType},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data, err := events.Encode(sampleMeta, tc.ev)
			if err == nil {
				t.Fatalf("Encode succeeded with %x", data)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("Encode error = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	valid := MustEncode(t, sampleMeta, sampleEvents()["member.synced"])
	payload := func(v any) msgpack.RawMessage { return MustMarshal(t, v) }
	goodPayload := payload(map[string]any{"memberId": "m-1", "memberEpoch": 1, "granted": []int{0}})

	tests := []struct {
		name     string
		data     []byte
		wantErr  error
		wantType string // DecodeError.Type
	}{
		{"nil bytes", nil, events.ErrCorrupt, ""},
		{"empty bytes", []byte{}, events.ErrCorrupt, ""},
		{"garbage text", []byte("this is not msgpack at all"), events.ErrCorrupt, ""},
		{"garbage binary", []byte{0xc1, 0xff, 0x00, 0x13, 0x37}, events.ErrCorrupt, ""},
		{"json instead of msgpack", []byte(`{"type":"group.created","v":1}`), events.ErrCorrupt, ""},
		{"envelope is an array", MustMarshal(t, []any{"group.created", 1}), events.ErrCorrupt, ""},
		{"envelope is a string", MustMarshal(t, "group.created"), events.ErrCorrupt, ""},
		{"type has the wrong kind", rawEnvelope(t, map[string]any{"type": 42, "v": 1, "payload": goodPayload}), events.ErrCorrupt, ""},
		{"empty type", rawEnvelope(t, map[string]any{"type": "", "v": 1, "time": 1, "payload": goodPayload}), events.ErrCorrupt, ""},
		{"no type field", rawEnvelope(t, map[string]any{"v": 1, "time": 1, "payload": goodPayload}), events.ErrCorrupt, ""},
		{"unknown type", rawEnvelope(t, map[string]any{"type": "member.teleported", "v": 1, "time": 1, "payload": goodPayload}), events.ErrUnknownType, "member.teleported"},
		{"unknown type in a future schema", rawEnvelope(t, map[string]any{"type": "member.teleported", "v": 99, "payload": goodPayload}), events.ErrUnsupportedSchema, "member.teleported"},
		{"schema 99", rawEnvelope(t, map[string]any{"type": "member.synced", "v": 99, "time": 1, "payload": goodPayload}), events.ErrUnsupportedSchema, "member.synced"},
		{"schema 0", rawEnvelope(t, map[string]any{"type": "member.synced", "v": 0, "time": 1, "payload": goodPayload}), events.ErrUnsupportedSchema, "member.synced"},
		{"negative schema", rawEnvelope(t, map[string]any{"type": "member.synced", "v": -1, "payload": goodPayload}), events.ErrUnsupportedSchema, "member.synced"},
		{"no schema field", rawEnvelope(t, map[string]any{"type": "member.synced", "payload": goodPayload}), events.ErrUnsupportedSchema, "member.synced"},
		{"no payload", rawEnvelope(t, map[string]any{"type": "member.synced", "v": 1, "time": 1}), events.ErrCorrupt, "member.synced"},
		{"payload is a string", rawEnvelope(t, map[string]any{"type": "member.synced", "v": 1, "payload": payload("granted")}), events.ErrCorrupt, "member.synced"},
		{"payload field re-typed", rawEnvelope(t, map[string]any{"type": "member.synced", "v": 1, "payload": payload(map[string]any{"granted": "0,1"})}), events.ErrCorrupt, "member.synced"},
		{"payload int field holds a string", rawEnvelope(t, map[string]any{"type": "group.created", "v": 1, "payload": payload(map[string]any{"shardCount": "four"})}), events.ErrCorrupt, "group.created"},
		{"truncated to one byte", valid[:1], events.ErrCorrupt, ""},
		{"truncated by one byte", valid[:len(valid)-1], events.ErrCorrupt, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const id = "1714564800123-7"
			assertDecodeError(t, id, tc.data, tc.wantErr, tc.wantType)
		})
	}
}

// assertDecodeError decodes data and checks the error: a *DecodeError naming id
// (and wantType, when set) that wraps wantErr.
func assertDecodeError(tb testing.TB, id string, data []byte, wantErr error, wantType string) {
	tb.Helper()
	rec, err := events.Decode(id, data)
	if err == nil {
		tb.Fatalf("Decode(%x) = %+v, want an error", data, rec)
	}
	var de *events.DecodeError
	if !errors.As(err, &de) {
		tb.Fatalf("Decode error %v (%T) is not a *events.DecodeError", err, err)
	}
	if de.ID != id {
		tb.Errorf("DecodeError.ID = %q, want %q", de.ID, id)
	}
	if !strings.Contains(err.Error(), id) {
		tb.Errorf("error %q does not name entry %s", err, id)
	}
	if !errors.Is(err, wantErr) {
		tb.Errorf("Decode error = %v, want it to wrap %v", err, wantErr)
	}
	if wantType != "" && de.Type != wantType {
		tb.Errorf("DecodeError.Type = %q, want %q", de.Type, wantType)
	}
	for _, other := range []error{events.ErrCorrupt, events.ErrUnknownType, events.ErrUnsupportedSchema} {
		if other != wantErr && errors.Is(err, other) {
			tb.Errorf("Decode error %v also wraps %v", err, other)
		}
	}
}

func TestDecodeEveryTruncation(t *testing.T) {
	for _, name := range registeredTypes() {
		t.Run(name, func(t *testing.T) {
			data := MustEncode(t, sampleMeta, sampleEvents()[name])
			for n := 0; n < len(data); n++ {
				assertDecodeError(t, "5-0", data[:n], events.ErrCorrupt, "")
			}
		})
	}
}

func TestDecodeForwardCompatibleFields(t *testing.T) {
	// Fields are only ever added: an entry written by a build that knows more
	// fields (same schema) decodes, and an entry written before a field existed
	// decodes with that field zero.
	tests := []struct {
		name    string
		payload map[string]any
		want    events.Event
	}{
		{
			"unknown payload field is ignored",
			map[string]any{"memberId": "m-1", "memberEpoch": 4, "granted": []int{2}, "grantedAtMs": 12345},
			&events.MemberSynced{MemberID: "m-1", MemberEpoch: 4, Granted: []int{2}},
		},
		{
			"missing payload field is zero",
			map[string]any{"memberId": "m-1"},
			&events.MemberSynced{MemberID: "m-1"},
		},
		{
			"empty payload map",
			map[string]any{},
			&events.MemberSynced{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := rawEnvelope(t, map[string]any{
				"type": "member.synced", "v": events.SchemaVersion, "time": int64(1), "futureEnvelopeField": "x",
				"payload": msgpack.RawMessage(MustMarshal(t, tc.payload)),
			})
			rec, err := events.Decode("9-0", data)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(rec.Event, tc.want) {
				t.Errorf("event = %#v, want %#v", rec.Event, tc.want)
			}
		})
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  *events.DecodeError
		want string
	}{
		{"with type", &events.DecodeError{ID: "3-1", Type: "member.synced", Err: events.ErrCorrupt}, `log entry 3-1 (type "member.synced"): corrupt log entry`},
		{"without type", &events.DecodeError{ID: "3-1", Err: events.ErrCorrupt}, `log entry 3-1: corrupt log entry`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
			if !errors.Is(tc.err, events.ErrCorrupt) {
				t.Error("DecodeError does not unwrap to its Err")
			}
		})
	}
}

// dupEvent is registered under a test-only name to check that a second
// registration of the same name panics.
type dupEvent struct{}

func (dupEvent) EventType() string { return "test.dup" }

type mismatchedEvent struct{}

func (mismatchedEvent) EventType() string { return "test.something_else" }

func TestRegisterRefusesBadRegistrations(t *testing.T) {
	// The first registration of "test.dup" succeeds (guarded, so -count=N works).
	if _, ok := events.New("test.dup"); !ok {
		events.Register("test.dup", func() events.Event { return dupEvent{} })
	}
	if ev, ok := events.New("test.dup"); !ok || ev.EventType() != "test.dup" {
		t.Fatalf("New(test.dup) = %v, %v after Register", ev, ok)
	}
	before := events.Types()

	tests := []struct {
		name      string
		typeName  string
		ctor      func() events.Event
		wantPanic string
	}{
		{"duplicate of a test type", "test.dup", func() events.Event { return dupEvent{} }, `duplicate event type "test.dup"`},
		{"duplicate of a built-in type", "group.created", func() events.Event { return &events.GroupCreated{} }, `duplicate event type "group.created"`},
		{"empty name", "", func() events.Event { return dupEvent{} }, "empty name"},
		{"constructor builds another type", "test.mismatch", func() events.Event { return mismatchedEvent{} }, `builds "test.something_else"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := catchPanic(func() { events.Register(tc.typeName, tc.ctor) })
			if got == nil {
				t.Fatalf("Register(%q) did not panic", tc.typeName)
			}
			if msg, _ := got.(string); !strings.Contains(msg, tc.wantPanic) {
				t.Errorf("panic = %v, want it to mention %q", got, tc.wantPanic)
			}
		})
	}
	if after := events.Types(); !reflect.DeepEqual(before, after) {
		t.Errorf("refused registrations changed the registry: %v -> %v", before, after)
	}
}

func catchPanic(fn func()) (p any) {
	defer func() { p = recover() }()
	fn()
	return nil
}

func TestNewUnknownType(t *testing.T) {
	for _, name := range []string{"", "member", "member.teleported", "GROUP.CREATED"} {
		if ev, ok := events.New(name); ok || ev != nil {
			t.Errorf("New(%q) = %v, %v; want nil, false", name, ev, ok)
		}
	}
}

func TestTypesIsSortedAndStable(t *testing.T) {
	types := events.Types()
	for i := 1; i < len(types); i++ {
		if types[i-1] >= types[i] {
			t.Errorf("Types() not sorted at %d: %q >= %q", i, types[i-1], types[i])
		}
	}
	types[0] = "mutated"
	if events.Types()[0] == "mutated" {
		t.Error("Types() returns the registry's own slice")
	}
}

func TestParseID(t *testing.T) {
	tests := []struct {
		in      string
		want    events.ID
		wantStr string
		wantErr bool
	}{
		{in: "0-0", want: events.ID{}, wantStr: "0-0"},
		{in: "0", want: events.ID{}, wantStr: "0-0"},
		{in: "1", want: events.ID{Ms: 1}, wantStr: "1-0"},
		{in: "1-2", want: events.ID{Ms: 1, Seq: 2}, wantStr: "1-2"},
		{in: "1714564800123-45", want: events.ID{Ms: 1714564800123, Seq: 45}, wantStr: "1714564800123-45"},
		{in: "18446744073709551615-18446744073709551615", want: events.ID{Ms: 1<<64 - 1, Seq: 1<<64 - 1}, wantStr: "18446744073709551615-18446744073709551615"},
		{in: "007-08", want: events.ID{Ms: 7, Seq: 8}, wantStr: "7-8"},
		{in: "", wantErr: true},
		{in: "abc", wantErr: true},
		{in: "1-", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "-", wantErr: true},
		{in: "1-2-3", wantErr: true},
		{in: "1-x", wantErr: true},
		{in: " 1-2", wantErr: true},
		{in: "1-2 ", wantErr: true},
		{in: "+1-2", wantErr: true},
		{in: "-1-2", wantErr: true},
		{in: "1.5-0", wantErr: true},
		{in: "$", wantErr: true},
		{in: ">", wantErr: true},
		{in: "*", wantErr: true},
		{in: "18446744073709551616-0", wantErr: true},
		{in: "0-18446744073709551616", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := events.ParseID(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseID(%q) = %v, want an error", tc.in, got)
				}
				if !errors.Is(err, events.ErrBadID) {
					t.Errorf("ParseID(%q) error = %v, want ErrBadID", tc.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseID(%q): %v", tc.in, err)
			}
			if got != tc.want {
				t.Errorf("ParseID(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
			if s := got.String(); s != tc.wantStr {
				t.Errorf("String() = %q, want %q", s, tc.wantStr)
			}
			if is := events.IsIDText(tc.in); is != (tc.in == tc.wantStr) {
				t.Errorf("IsIDText(%q) = %v, want %v", tc.in, is, !is)
			}
		})
	}
}

func TestCompareIDs(t *testing.T) {
	tests := []struct {
		name    string
		a, b    string
		want    int
		wantErr bool
	}{
		{name: "equal", a: "5-3", b: "5-3", want: 0},
		{name: "seq omitted equals seq 0", a: "5", b: "5-0", want: 0},
		{name: "zero ids", a: "0-0", b: events.ZeroID, want: 0},
		{name: "lower seq", a: "5-2", b: "5-3", want: -1},
		{name: "higher seq", a: "5-10", b: "5-9", want: 1},
		{name: "lower ms wins over seq", a: "4-999", b: "5-0", want: -1},
		{name: "numeric not lexical ms", a: "10-0", b: "9-0", want: 1},
		{name: "numeric not lexical seq", a: "1-10", b: "1-9", want: 1},
		{name: "leading zeros", a: "007-1", b: "7-1", want: 0},
		{name: "max ids", a: "18446744073709551615-18446744073709551615", b: "18446744073709551615-18446744073709551614", want: 1},
		{name: "bad left", a: "x", b: "1-0", wantErr: true},
		{name: "bad right", a: "1-0", b: "1-0-0", wantErr: true},
		{name: "empty", a: "", b: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := events.CompareIDs(tc.a, tc.b)
			if tc.wantErr {
				if !errors.Is(err, events.ErrBadID) {
					t.Fatalf("CompareIDs(%q, %q) = %d, %v; want ErrBadID", tc.a, tc.b, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("CompareIDs(%q, %q) = %d, %v; want %d", tc.a, tc.b, got, err, tc.want)
			}
			if back, _ := events.CompareIDs(tc.b, tc.a); back != -tc.want {
				t.Errorf("CompareIDs(%q, %q) = %d, not the opposite of %d", tc.b, tc.a, back, tc.want)
			}
		})
	}
}

func TestIDLess(t *testing.T) {
	tests := []struct {
		name string
		a, b events.ID
		want bool
	}{
		{"same", events.ID{Ms: 1, Seq: 1}, events.ID{Ms: 1, Seq: 1}, false},
		{"seq", events.ID{Ms: 1, Seq: 1}, events.ID{Ms: 1, Seq: 2}, true},
		{"ms", events.ID{Ms: 1, Seq: 9}, events.ID{Ms: 2}, true},
		{"greater", events.ID{Ms: 3}, events.ID{Ms: 2, Seq: 9}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.a.Less(tc.b); got != tc.want {
				t.Errorf("%v.Less(%v) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}
