package projection_test

import (
	"os"
	"reflect"
	"testing"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

var (
	events1    = projection.GroupKey{StreamPrefix: "events"}
	eventsAuth = projection.GroupKey{StreamPrefix: "events", ConsumerGroup: "audit"}
	eventsBill = projection.GroupKey{StreamPrefix: "events", ConsumerGroup: "billing"}
)

func mustStream(tb testing.TB, s *projection.State, prefix string) *projection.Stream {
	tb.Helper()
	st, ok := s.Stream(prefix)
	if !ok {
		tb.Fatalf("no stream %s", prefix)
	}
	return st
}

// TestStreamFold: a stream's metadata starts at version 1 and moves by one
// per layout change; groups of it start at its version; the record of its
// shard streams follows what each event says it created, adopted, retired
// or recreated.
func TestStreamFold(t *testing.T) {
	var r recorder
	s := projection.New()
	MustApply(t, s, r.rec(events1, &events.StreamCreated{ShardCount: 2, Provisioned: true, RequestedBy: "alice", CreatedShards: ints(0, 1)}))
	st := mustStream(t, s, "events")
	if !st.Metadata || st.ShardCount != 2 || st.MetadataVersion != 1 || st.Origin != events.StreamOriginCreated || st.CreatedBy != "alice" {
		t.Fatalf("after stream.created: %+v", st)
	}
	if _, ok := s.Group(events1); ok {
		t.Fatal("stream.created made a group")
	}
	// A stream without groups scales at once.
	MustApply(t, s, r.rec(events1, &events.StreamScaled{From: 2, To: 4, MetadataVersion: 2, RequestedBy: "alice", Reason: "r", CreatedShards: ints(2, 3)}))
	MustApply(t, s, r.rec(events1, &events.StreamScaled{From: 4, To: 3, MetadataVersion: 3, RequestedBy: "alice", Reason: "r", KeptKeys: []string{"events:3"}}))
	st = mustStream(t, s, "events")
	if st.ShardCount != 3 || st.MetadataVersion != 3 {
		t.Fatalf("after two scales: %d shards at version %d, want 3 at 3", st.ShardCount, st.MetadataVersion)
	}
	assertInts(t, "created (a kept key stays the coordinator's)", st.CreatedShards, ints(0, 1, 2, 3))

	// A group registered by a heartbeat takes the stream's version; its
	// scale changes the stream's layout (the event carries the version).
	MustApply(t, s, r.rec(eventsBill, &events.GroupCreated{ShardCount: 3, Provisioned: true, RequestedBy: "svc", MetadataVersion: 3, RegisteredBy: "m-1", KeysChecked: true}))
	g := MustGroup(t, s, eventsBill)
	assertEpochs(t, g, 1, 1, 3)
	MustApply(t, s,
		r.rec(eventsBill, &events.ReshardingPreparing{ReshardingID: "r1", FromShardCount: 3, ToShardCount: 5, RequestedBy: "alice", Reason: "r", KeysChecked: true, CreatedShards: ints(4)}),
		r.rec(eventsBill, &events.ReshardingProvisioned{ReshardingID: "r1", Shards: 5}),
		r.rec(eventsBill, &events.ReshardingActivated{ReshardingID: "r1", ShardCount: 5, AssignableCount: 5, Epochs: ep(2, 4), StreamMetadataVersion: 4}),
	)
	st = mustStream(t, s, "events")
	if st.ShardCount != 5 || st.MetadataVersion != 4 {
		t.Fatalf("after the group's activation: %d shards at version %d, want 5 at 4", st.ShardCount, st.MetadataVersion)
	}
	assertInts(t, "created after the scale-out", st.CreatedShards, ints(0, 1, 2, 3, 4))
	// Retirement takes what it deleted out of the record; what it kept stays.
	MustApply(t, s, r.rec(eventsBill, &events.ShardsRetired{ReshardingID: "r1", StreamKeys: []string{"events:3", "events:4"}}))
	assertInts(t, "created after a retirement", mustStream(t, s, "events").CreatedShards, ints(0, 1, 2))
	// The last group's delete leaves the stream's metadata.
	MustApply(t, s, r.rec(eventsBill, &events.GroupDeleted{RequestedBy: "alice", Reason: "gone"}))
	if st := mustStream(t, s, "events"); !st.Metadata || st.MetadataVersion != 4 {
		t.Fatalf("after the last group's delete: %+v", st)
	}
}

// TestStreamAdoptedShards: adopted shards are owned but not created; a
// repair that recreates a lost one makes it the coordinator's.
func TestStreamAdoptedShards(t *testing.T) {
	var r recorder
	s := projection.New()
	MustApply(t, s, r.rec(events1, &events.StreamAdopted{ShardCount: 3, RequestedBy: "alice"}))
	st := mustStream(t, s, "events")
	if st.Origin != events.StreamOriginAdopted || st.MetadataVersion != 1 || !st.Owns(2) || st.Created(2) || st.Owns(3) {
		t.Fatalf("adopted stream: %+v", st)
	}
	MustApply(t, s,
		r.rec(eventsBill, &events.GroupCreated{ShardCount: 3, Provisioned: true, RequestedBy: "alice", MetadataVersion: 1, KeysChecked: true}),
		r.rec(eventsBill, &events.ShardsRepaired{Shards: []events.ShardRepair{{ShardIndex: 1, StreamKey: "events:1", StreamMissing: true, GroupMissing: true}}}),
	)
	st = mustStream(t, s, "events")
	assertInts(t, "created", st.CreatedShards, ints(1))
	assertInts(t, "adopted", st.AdoptedShards, ints(0, 2))
}

// TestStreamLayoutWithoutMetadata: a prefix whose groups predate stream
// metadata routes by its groups when they agree, and is a conflict when
// they do not; with metadata the stream's layout wins.
func TestStreamLayoutWithoutMetadata(t *testing.T) {
	var r recorder
	s := projection.New()
	MustApply(t, s,
		r.rec(eventsAuth, &events.GroupCreated{ShardCount: 3, Provisioned: true, RequestedBy: "alice"}),
		r.rec(eventsBill, &events.GroupCreated{ShardCount: 3, Provisioned: true, RequestedBy: "alice"}),
		r.rec(eventsBill, &events.MemberJoined{MemberID: "m", MemberName: "m", MaxConcurrency: 1, Epochs: ep(2, 2)}),
	)
	st, groups := s.StreamWithGroups("events")
	if st == nil || st.Metadata {
		t.Fatalf("groups of an old log: stream %+v, want a record without metadata", st)
	}
	if n, mv, ok, conflict := projection.StreamLayout(st, groups); !ok || conflict || n != 3 || mv != 2 {
		t.Fatalf("agreeing groups: layout %d at %d (ok %v, conflict %v), want 3 at the highest version 2", n, mv, ok, conflict)
	}
	assertInts(t, "an old log's provisioned shards count as created", st.CreatedShards, ints(0, 1, 2))
	MustApply(t, s,
		r.rec(eventsBill, &events.ReshardingPreparing{ReshardingID: "r1", FromShardCount: 3, ToShardCount: 5, RequestedBy: "alice", Reason: "r"}),
		r.rec(eventsBill, &events.ReshardingProvisioned{ReshardingID: "r1", Shards: 5}),
		r.rec(eventsBill, &events.ReshardingActivated{ReshardingID: "r1", ShardCount: 5, AssignableCount: 5, Epochs: ep(3, 3)}),
	)
	st, groups = s.StreamWithGroups("events")
	if _, _, ok, conflict := projection.StreamLayout(st, groups); ok || !conflict {
		t.Fatalf("groups at 3 and 5 shards: ok %v conflict %v, want a conflict", ok, conflict)
	}
	assertInts(t, "an old resharding's provisioned shards count as created", st.CreatedShards, ints(0, 1, 2, 3, 4))
	if v := projection.ViewStream("events", st, groups); !v.Conflict || v.Metadata || !reflect.DeepEqual(v.ConsumerGroups, []string{"audit", "billing"}) {
		t.Fatalf("view %+v", v)
	}
	if _, _, ok, _ := projection.StreamLayout(nil, nil); ok {
		t.Fatal("a prefix with nothing has a layout")
	}
}

// TestOldLogV2Folds: a log of the build before stream metadata folds with
// the record of its shard streams derived from what it provisioned and
// retired, and with no stream metadata (so stream-scoped routing answers
// from its groups, and 409 where they disagree).
func TestOldLogV2Folds(t *testing.T) {
	entries := MustReadLogFile(t, "../events/testdata/old-log-v2.jsonl")
	s := MustFold(t, MustDecodeAll(t, entries))
	for prefix, want := range map[string][]int{"legacy": {0, 1, 2}, "multi": {0, 1, 2}, "wide": {0, 1}} {
		st := mustStream(t, s, prefix)
		if st.Metadata {
			t.Errorf("%s: an old log wrote no stream metadata, the fold has %+v", prefix, st)
		}
		assertInts(t, prefix+" created", st.CreatedShards, want)
	}
	st, groups := s.StreamWithGroups("multi")
	if _, _, _, conflict := projection.StreamLayout(st, groups); !conflict {
		t.Error("multi's groups have 3 and 2 shards: want a conflict")
	}
	st, groups = s.StreamWithGroups("legacy")
	if n, _, ok, _ := projection.StreamLayout(st, groups); !ok || n != 3 {
		t.Errorf("legacy: layout %d (ok %v), want its group's 3", n, ok)
	}
}

// TestRestoreOldSnapshotDerivesStreams: a snapshot of the build before
// stream metadata restores with the same record of shard streams as the fold
// of its log, and encodes like it.
func TestRestoreOldSnapshotDerivesStreams(t *testing.T) {
	data, err := os.ReadFile("testdata/snapshot-v2-old.msgpack")
	if err != nil {
		t.Fatal(err)
	}
	restored, err := projection.Restore(data)
	if err != nil {
		t.Fatal(err)
	}
	folded := MustFold(t, MustDecodeAll(t, MustReadLogFile(t, "../events/testdata/old-log-v2.jsonl")))
	for _, p := range []string{"legacy", "multi", "wide"} {
		got, want := mustStream(t, restored, p), mustStream(t, folded, p)
		if !reflect.DeepEqual(got.CreatedShards, want.CreatedShards) || got.Metadata != want.Metadata {
			t.Errorf("%s restored %+v, folded %+v", p, got, want)
		}
	}
	again, err := projection.Restore(MustEncodeState(t, restored))
	if err != nil {
		t.Fatal(err)
	}
	assertSameState(t, "a restored old snapshot, saved and restored again", again, restored)
}
