package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// streamHarness is a coordinator on an in-memory log and fake shard
// streams, for the stream commands (streams.go) and what they change in the
// group commands.
type streamHarness struct {
	t     *testing.T
	clock *simClock
	fake  *fakeShards
	log   *events.MemLog
	c     *coordinator.Coordinator
	n     atomic.Int64
}

func newStreamHarness(t *testing.T, cfg coordinator.Config) *streamHarness {
	t.Helper()
	h := &streamHarness{t: t, clock: newSimClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), log: events.NewMemLog()}
	h.fake = newFakeShards(h.clock)
	cfg.TickInterval, cfg.ShardCheckInterval, cfg.BarrierCheckInterval, cfg.SnapshotEvery = time.Hour, -1, time.Hour, -1
	h.c = coordinator.New(cfg, h.log, h.fake, nil, h.clock)
	if err := h.c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	h.c.Run()
	t.Cleanup(h.c.Close)
	return h
}

var meta = events.Meta{Actor: "alice"}

func (h *streamHarness) createStream(prefix string, n int) (projection.StreamView, error) {
	return h.c.CreateStream(context.Background(), meta, commands.CreateStreamInput{StreamPrefix: prefix, InitialShardCount: &n, RequestedBy: "alice", Reason: "test"})
}

func (h *streamHarness) createGroup(prefix, group string, n *int) (projection.GroupView, error) {
	return h.c.CreateGroup(context.Background(), meta, commands.CreateGroupInput{StreamPrefix: prefix, ConsumerGroup: group, InitialShardCount: n, RequestedBy: "alice"})
}

func (h *streamHarness) stream(prefix string) *projection.Stream {
	h.t.Helper()
	st, ok := h.c.State().Stream(prefix)
	if !ok {
		h.t.Fatalf("no stream %s", prefix)
	}
	return st
}

// heartbeat sends member id's heartbeat to prefix/group.
func (h *streamHarness) heartbeat(prefix, group, id string, epoch, mv int64, owned []int) (*wire.HeartbeatResponse, error) {
	req := &wire.HeartbeatRequest{
		ProtocolVersion: ptr(wire.ProtocolVersion), RequestID: fmt.Sprintf("r%d", h.n.Add(1)), MemberID: id, MemberName: ptr(id),
		MemberEpoch: ptr(epoch), MetadataVersion: ptr(mv),
		RuntimeConsumerCapacity: &wire.Capacity{RuntimeMaxConcurrency: ptr(1), AvailableConcurrency: ptr(1)},
		OwnedShards:             shardIDs(owned), RevokingShards: []wire.RevokingReport{}, ShardProgress: []wire.ShardProgress{},
	}
	return h.c.Heartbeat(context.Background(), projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: group}, id, "svc", req)
}

// records lists the log's records.
func (h *streamHarness) records() []events.Record {
	h.t.Helper()
	entries, err := h.log.Read(context.Background(), events.ZeroID, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	return decoded(h.t, entries)
}

// typesSince lists the types of the records after the first n.
func (h *streamHarness) typesSince(n int) []string {
	var out []string
	for _, rec := range h.records()[n:] {
		out = append(out, rec.Type)
	}
	return out
}

// fakeGroups lists the consumer groups on a fake stream (nil when it does not exist).
func (h *streamHarness) fakeGroups(key string) []string {
	h.fake.mu.Lock()
	defer h.fake.mu.Unlock()
	st := h.fake.streams[key]
	if st == nil {
		return nil
	}
	return append([]string{}, sortedKeys(st.groups)...)
}

func (h *streamHarness) fakeExists(key string) bool {
	h.fake.mu.Lock()
	defer h.fake.mu.Unlock()
	return h.fake.streams[key] != nil
}

// stranger puts a stream the coordinator did not create under key.
func (h *streamHarness) stranger(key string) {
	h.fake.mu.Lock()
	defer h.fake.mu.Unlock()
	h.fake.streams[key] = &fakeStream{groups: map[string]*fakeGroup{}}
}

func wantCode(t *testing.T, err error, code *commands.Error, contains string) {
	t.Helper()
	var ce *commands.Error
	if !errors.As(err, &ce) || ce.Code != code.Code {
		t.Fatalf("error %v, want %s", err, code.Code)
	}
	if contains != "" && !strings.Contains(ce.Message, contains) {
		t.Fatalf("message %q does not say %q", ce.Message, contains)
	}
}

// TestCreateStreamMakesNoGroup: POST /streams/{p} creates the shard streams,
// empty and without a consumer group, and records the stream's metadata at
// version 1 with the shards it created; no group exists afterwards.
func TestCreateStreamMakesNoGroup(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	v, err := h.createStream("orders", 3)
	if err != nil {
		t.Fatal(err)
	}
	if v.ShardCount != 3 || v.MetadataVersion != 1 || !v.Metadata || len(v.ConsumerGroups) != 0 {
		t.Fatalf("answer %+v", v)
	}
	for i := 0; i < 3; i++ {
		if groups := h.fakeGroups(fmt.Sprintf("orders:%d", i)); groups == nil || len(groups) != 0 {
			t.Errorf("orders:%d: consumer groups %v, want an existing stream without any", i, groups)
		}
	}
	if h.fakeExists("orders:3") {
		t.Error("a shard beyond the count was created")
	}
	if gs := h.c.State().Groups(); len(gs) != 0 {
		t.Fatalf("groups %v after a stream create", gs)
	}
	recs := h.records()
	if len(recs) != 1 || recs[0].Type != "stream.created" || recs[0].ConsumerGroup != "" || recs[0].StreamPrefix != "orders" {
		t.Fatalf("log %+v, want one stream.created of prefix orders", recs)
	}
	if ev := recs[0].Event.(*events.StreamCreated); !reflect.DeepEqual(ev.CreatedShards, []int{0, 1, 2}) || ev.RequestedBy != "alice" || ev.Reason != "test" {
		t.Fatalf("stream.created %+v", ev)
	}
}

// TestCreateStreamRefusals: metadata, a group of the prefix, a key of the
// prefix in Redis (a shard stream or the bare prefix) refuse a create with
// 409 naming it, creating nothing; ordering KEY and 0 shards are 400.
func TestCreateStreamRefusals(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	if _, err := h.createStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	_, err := h.createStream("orders", 2)
	wantCode(t, err, commands.ErrPrefixExists, "orders")
	if _, err := h.createGroup("billing", "g", ptr(2)); err != nil {
		t.Fatal(err)
	}
	_, err = h.createStream("billing", 2)
	wantCode(t, err, commands.ErrPrefixExists, "billing")
	h.stranger("theirs:1")
	_, err = h.createStream("theirs", 3)
	wantCode(t, err, commands.ErrPrefixExists, "theirs:1")
	if h.fakeExists("theirs:0") || h.fakeExists("theirs:2") {
		t.Fatal("a refused create created shard streams")
	}
	h.stranger("bare")
	_, err = h.createStream("bare", 1)
	wantCode(t, err, commands.ErrPrefixExists, "bare")
	key := "KEY"
	_, err = h.c.CreateStream(context.Background(), meta, commands.CreateStreamInput{StreamPrefix: "sorted", RequestedBy: "alice", Ordering: &key})
	wantCode(t, err, commands.ErrInvalid, "ordering")
	_, err = h.createStream("empty", 0)
	wantCode(t, err, commands.ErrInvalid, "initialShardCount")
}

// TestAdoptStream: adopt records metadata over streams that exist, creating
// nothing; a missing one, or a key of another type, is 400 naming it and
// writes nothing; adopting a stream with metadata is 409.
func TestAdoptStream(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	for i := 0; i < 3; i++ {
		h.stranger(fmt.Sprintf("legacy:%d", i))
	}
	before := len(h.records())
	_, err := h.c.AdoptStream(context.Background(), meta, commands.AdoptStreamInput{StreamPrefix: "legacy", ShardCount: ptr(4), RequestedBy: "alice"})
	wantCode(t, err, commands.ErrInvalid, "legacy:3")
	h.fake.mu.Lock()
	h.fake.typed = map[string]string{"typed:0": "hash"}
	h.fake.mu.Unlock()
	_, err = h.c.AdoptStream(context.Background(), meta, commands.AdoptStreamInput{StreamPrefix: "typed", ShardCount: ptr(1), RequestedBy: "alice"})
	wantCode(t, err, commands.ErrInvalid, "typed:0 is a hash")
	_, err = h.c.AdoptStream(context.Background(), meta, commands.AdoptStreamInput{StreamPrefix: "legacy", RequestedBy: "alice"})
	wantCode(t, err, commands.ErrInvalid, "shardCount")
	for _, rec := range h.records()[before:] {
		if rec.Type != "command.rejected" {
			t.Fatalf("a refused adopt recorded %s", rec.Type)
		}
	}
	v, err := h.c.AdoptStream(context.Background(), meta, commands.AdoptStreamInput{StreamPrefix: "legacy", ShardCount: ptr(3), RequestedBy: "alice", Reason: "take over"})
	if err != nil {
		t.Fatal(err)
	}
	if v.ShardCount != 3 || v.MetadataVersion != 1 || v.Origin != events.StreamOriginAdopted {
		t.Fatalf("answer %+v", v)
	}
	st := h.stream("legacy")
	if !st.Owns(2) || st.Created(2) {
		t.Fatalf("adopted shards: created %v adopted %v", st.CreatedShards, st.AdoptedShards)
	}
	_, err = h.c.AdoptStream(context.Background(), meta, commands.AdoptStreamInput{StreamPrefix: "legacy", ShardCount: ptr(3), RequestedBy: "alice"})
	wantCode(t, err, commands.ErrPrefixExists, "legacy")
}

// TestGroupCreateOnAStream: a group of a stream with metadata takes its shard
// count and metadata version (another explicit count is 400); the first
// group of a bare prefix writes the stream's metadata.
func TestGroupCreateOnAStream(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	if _, err := h.createStream("orders", 4); err != nil {
		t.Fatal(err)
	}
	// Move the stream's version: a scale without groups.
	if _, err := h.c.ScaleStream(context.Background(), meta, "orders", commands.ScaleInput{TargetShardCount: ptr(3), RequestedBy: "alice", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	_, err := h.createGroup("orders", "billing", ptr(4))
	wantCode(t, err, commands.ErrInvalid, "Group shard count must match stream shard count 3 for 'orders'")
	g, err := h.createGroup("orders", "billing", nil)
	if err != nil {
		t.Fatal(err)
	}
	if g.ShardCount != 3 || g.MetadataVersion != 2 {
		t.Fatalf("group of a stream at 3 shards, version 2: %+v", g)
	}
	for i := 0; i < 3; i++ {
		if groups := h.fakeGroups(fmt.Sprintf("orders:%d", i)); !reflect.DeepEqual(groups, []string{"billing"}) {
			t.Errorf("orders:%d has consumer groups %v", i, groups)
		}
	}
	if groups := h.fakeGroups("orders:3"); len(groups) != 0 {
		t.Errorf("the shard the scale-in kept got consumer groups %v", groups)
	}

	n := len(h.records())
	if _, err := h.createGroup("fresh", "g", ptr(2)); err != nil {
		t.Fatal(err)
	}
	if got := h.typesSince(n); !reflect.DeepEqual(got, []string{"stream.created", "group.created"}) {
		t.Fatalf("the first group of a bare prefix recorded %v", got)
	}
	st := h.stream("fresh")
	if !st.Metadata || st.Origin != events.StreamOriginGroup || st.ShardCount != 2 || !reflect.DeepEqual(st.CreatedShards, []int{0, 1}) {
		t.Fatalf("stream written by its first group: %+v", st)
	}
	_, err = h.createGroup("fresh", "other", ptr(3))
	wantCode(t, err, commands.ErrInvalid, "must match stream shard count 2")
}

// TestRegistrationOnFirstHeartbeat: consumers of two group names that were
// never created join a created stream: each first heartbeat registers its
// group (consumer group on every shard, the stream's layout and version)
// and joins; a positive epoch, or a prefix without metadata, stays
// UNKNOWN_MEMBER_ID.
func TestRegistrationOnFirstHeartbeat(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	if _, err := h.createStream("orders", 4); err != nil {
		t.Fatal(err)
	}
	r, err := h.heartbeat("orders", "billing", "m1", 3, 1, nil)
	if err != nil || r.Status != wire.StatusUnknownMember {
		t.Fatalf("positive epoch for a missing group: %+v %v", r, err)
	}
	r, err = h.heartbeat("nostream", "billing", "m1", 0, 0, nil)
	if err != nil || r.Status != wire.StatusUnknownMember {
		t.Fatalf("first heartbeat without stream metadata: %+v %v", r, err)
	}
	for _, group := range []string{"billing", "audit"} {
		n := len(h.records())
		r, err := h.heartbeat("orders", group, "m-"+group, 0, 0, nil)
		if err != nil || r.Status != wire.StatusOK || len(r.Assignment.AssignedShards) != 4 {
			t.Fatalf("%s's first heartbeat: %+v %v", group, r, err)
		}
		types := h.typesSince(n)
		if len(types) < 2 || types[0] != "group.created" || types[1] != "member.joined" {
			t.Fatalf("%s's first heartbeat recorded %v", group, types)
		}
		created := h.records()[n].Event.(*events.GroupCreated)
		if created.RegisteredBy != "m-"+group || created.RequestedBy != "svc" || created.ShardCount != 4 || created.MetadataVersion != 1 || !strings.Contains(created.Reason, "m-"+group) {
			t.Fatalf("%s registered as %+v", group, created)
		}
	}
	for i := 0; i < 4; i++ {
		if groups := h.fakeGroups(fmt.Sprintf("orders:%d", i)); !reflect.DeepEqual(groups, []string{"audit", "billing"}) {
			t.Errorf("orders:%d has consumer groups %v, want audit and billing", i, groups)
		}
	}
}

// TestRegistrationRace: first heartbeats of two members of one new group at
// once register it once; both join.
func TestRegistrationRace(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	if _, err := h.createStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := h.heartbeat("orders", "billing", fmt.Sprintf("m%d", i), 0, 0, nil)
			if err == nil && r.Status != wire.StatusOK {
				err = fmt.Errorf("status %s", r.Status)
			}
			errs[i] = err
		}(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("member %d: %v", i, err)
		}
	}
	created := 0
	for _, rec := range h.records() {
		if rec.Type == "group.created" {
			created++
		}
	}
	g, _ := h.c.State().Group(projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "billing"})
	if created != 1 || g == nil || len(g.LiveMemberIDs()) != 2 {
		t.Fatalf("%d group.created, group %+v; want one, with both members", created, g)
	}
}

// TestRegistrationProvisioningFailureRecordsNothing: a registration whose
// consumer groups cannot be provisioned answers 503 and records nothing.
func TestRegistrationProvisioningFailureRecordsNothing(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	if _, err := h.createStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	h.fake.mu.Lock()
	h.fake.provisionDown = true
	h.fake.mu.Unlock()
	n := len(h.records())
	_, err := h.heartbeat("orders", "billing", "m1", 0, 0, nil)
	wantCode(t, err, commands.ErrProvisioningFailed, "")
	if got := h.typesSince(n); len(got) != 0 {
		t.Fatalf("a failed registration recorded %v", got)
	}
}

// TestRegistrationRefusedBeforeProvisioning: a first heartbeat the decision
// would refuse (more owned shards than the stream has, 400) provisions no
// consumer group: one left behind would be in no event, in no view, and
// would keep a scale-in's drain from being proven.
func TestRegistrationRefusedBeforeProvisioning(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	if _, err := h.createStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	n := len(h.records())
	_, err := h.heartbeat("orders", "ghost", "m1", 0, 0, []int{0, 1, 2})
	wantCode(t, err, commands.ErrInvalid, "ownedShards")
	if got := h.typesSince(n); len(got) != 0 {
		t.Fatalf("a refused registration recorded %v", got)
	}
	for i := 0; i < 2; i++ {
		if groups := h.fakeGroups(fmt.Sprintf("orders:%d", i)); len(groups) != 0 {
			t.Errorf("orders:%d has consumer groups %v after a refused registration, want none", i, groups)
		}
	}
	// At the limit the registration goes through.
	r, err := h.heartbeat("orders", "ghost", "m1", 0, 0, []int{0, 1})
	if err != nil || r.Status == wire.StatusUnknownMember {
		t.Fatalf("a first heartbeat owning the stream's 2 shards: %+v %v", r, err)
	}
	if groups := h.fakeGroups("orders:1"); !reflect.DeepEqual(groups, []string{"ghost"}) {
		t.Errorf("orders:1 has consumer groups %v, want ghost", groups)
	}
}

// TestScaleOfAStreamWithoutGroups: the layout changes at once (new shard
// streams without groups, removed ones kept), the version moves by one per
// change, and the answer names no group and no migration.
func TestScaleOfAStreamWithoutGroups(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	if _, err := h.createStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	res, err := h.c.ScaleStream(context.Background(), meta, "orders", commands.ScaleInput{TargetShardCount: ptr(4), RequestedBy: "alice", Reason: "more"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.AffectedConsumerGroups) != 0 || len(res.Reshardings) != 0 || res.TargetShardCount != 4 {
		t.Fatalf("answer %+v", res)
	}
	if st := h.stream("orders"); st.ShardCount != 4 || st.MetadataVersion != 2 || !reflect.DeepEqual(st.CreatedShards, []int{0, 1, 2, 3}) {
		t.Fatalf("after the scale-out: %+v", st)
	}
	if groups := h.fakeGroups("orders:3"); groups == nil || len(groups) != 0 {
		t.Fatalf("orders:3: %v, want a stream without groups", groups)
	}
	if _, err := h.c.ScaleStream(context.Background(), meta, "orders", commands.ScaleInput{TargetShardCount: ptr(1), RequestedBy: "alice", Reason: "fewer"}); err != nil {
		t.Fatal(err)
	}
	st := h.stream("orders")
	if st.ShardCount != 1 || st.MetadataVersion != 3 || !h.fakeExists("orders:3") {
		t.Fatalf("after the scale-in: %+v (orders:3 exists %v)", st, h.fakeExists("orders:3"))
	}
	recs := h.records()
	if ev := recs[len(recs)-1].Event.(*events.StreamScaled); !reflect.DeepEqual(ev.KeptKeys, []string{"orders:1", "orders:2", "orders:3"}) {
		t.Fatalf("stream.scaled %+v", ev)
	}
	_, err = h.c.ScaleStream(context.Background(), meta, "orders", commands.ScaleInput{TargetShardCount: ptr(1), RequestedBy: "alice", Reason: "same"})
	wantCode(t, err, commands.ErrShardCountUnchanged, "")
	// Back out: the kept streams are the coordinator's, used again.
	if _, err := h.c.ScaleStream(context.Background(), meta, "orders", commands.ScaleInput{TargetShardCount: ptr(4), RequestedBy: "alice", Reason: "again"}); err != nil {
		t.Fatal(err)
	}
	_, err = h.c.ScaleStream(context.Background(), meta, "unknown", commands.ScaleInput{TargetShardCount: ptr(4), RequestedBy: "alice", Reason: "r"})
	wantCode(t, err, commands.ErrStreamNotFound, "")
}

// TestGroupScaleOfAStreamScalesEveryGroup: a group-level scale on a stream
// with metadata and two groups scales both (the stream has one layout), the
// stream's version moves once, and a rollback of one rolls back both.
func TestGroupScaleOfAStreamScalesEveryGroup(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	if _, err := h.createStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"audit", "billing"} {
		if _, err := h.createGroup("orders", g, nil); err != nil {
			t.Fatal(err)
		}
	}
	billing := projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "billing"}
	audit := projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "audit"}
	v, err := h.c.Scale(context.Background(), meta, billing, commands.ScaleInput{TargetShardCount: ptr(4), RequestedBy: "alice", Reason: "more"})
	if err != nil {
		t.Fatal(err)
	}
	if v.FromShardCount != 2 || v.ToShardCount != 4 {
		t.Fatalf("billing's resharding %+v", v)
	}
	for _, k := range []projection.GroupKey{billing, audit} {
		if g, _ := h.c.State().Group(k); g.ShardCount != 4 {
			t.Fatalf("%s has %d shards after the group-level scale, want 4", k.ConsumerGroup, g.ShardCount)
		}
	}
	if st := h.stream("orders"); st.ShardCount != 4 || st.MetadataVersion != 2 {
		t.Fatalf("the stream after both groups' activation: %d shards at version %d, want 4 at 2", st.ShardCount, st.MetadataVersion)
	}
	if _, err := h.c.Rollback(context.Background(), meta, billing, v.ReshardingID, commands.RollbackInput{RequestedBy: "alice", Reason: "back"}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []projection.GroupKey{billing, audit} {
		if g, _ := h.c.State().Group(k); g.ShardCount != 2 || g.Active() != nil {
			t.Fatalf("%s after the rollback: %d shards, active %v; want 2 and none", k.ConsumerGroup, g.ShardCount, g.Active())
		}
	}
	if st := h.stream("orders"); st.ShardCount != 2 || st.MetadataVersion != 3 {
		t.Fatalf("the stream after the rollback: %d shards at version %d, want 2 at 3", st.ShardCount, st.MetadataVersion)
	}
}

// TestScaleOutRefusesKeysTheCoordinatorDidNotCreate (#19 finding 4): a
// stranger's stream, or a key of another type, at a shard a scale-out adds
// refuses it up front, naming the key; nothing but the refusal is recorded
// and the stranger's stream gets no consumer group.
func TestScaleOutRefusesKeysTheCoordinatorDidNotCreate(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	k := projection.GroupKey{StreamPrefix: "fx", ConsumerGroup: "g"}
	if _, err := h.createGroup("fx", "g", ptr(1)); err != nil {
		t.Fatal(err)
	}
	h.stranger("fx:3")
	n := len(h.records())
	_, err := h.c.Scale(context.Background(), meta, k, commands.ScaleInput{TargetShardCount: ptr(4), RequestedBy: "alice", Reason: "more"})
	wantCode(t, err, commands.ErrPrefixExists, "fx:3")
	if got := h.typesSince(n); !reflect.DeepEqual(got, []string{"command.rejected"}) {
		t.Fatalf("a refused scale-out recorded %v", got)
	}
	if groups := h.fakeGroups("fx:3"); len(groups) != 0 || h.fakeExists("fx:1") {
		t.Fatalf("the refused scale-out provisioned: fx:3 groups %v, fx:1 exists %v", groups, h.fakeExists("fx:1"))
	}
	h.fake.mu.Lock()
	delete(h.fake.streams, "fx:3")
	h.fake.typed = map[string]string{"fx:2": "string"}
	h.fake.mu.Unlock()
	_, err = h.c.Scale(context.Background(), meta, k, commands.ScaleInput{TargetShardCount: ptr(4), RequestedBy: "alice", Reason: "more"})
	wantCode(t, err, commands.ErrPrefixExists, "fx:2 (a string, not a stream)")
	if g, _ := h.c.State().Group(k); g.Active() != nil {
		t.Fatalf("a refused scale-out left resharding %+v", g.Active())
	}
}

// TestFenceKeysOfAnotherTypeAreRefused: a shard's fence key that is not a
// hash (someone else's string at "{orders:1}:fence") refuses the create or
// scale-out that would use it, naming it; a hash there (a fence that
// outlived its stream) is taken as the shard's fence.
func TestFenceKeysOfAnotherTypeAreRefused(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	h.fake.mu.Lock()
	h.fake.typed = map[string]string{"{orders:1}:fence": "string", "{orders:0}:fence": "hash"}
	h.fake.mu.Unlock()
	n := len(h.records())
	_, err := h.createStream("orders", 2)
	wantCode(t, err, commands.ErrPrefixExists, "{orders:1}:fence")
	if strings.Contains(err.Error(), "{orders:0}:fence") {
		t.Errorf("a fence hash was refused: %v", err)
	}
	if got := h.typesSince(n); !reflect.DeepEqual(got, []string{"command.rejected"}) {
		t.Fatalf("a refused create recorded %v", got)
	}
	if h.fakeExists("orders:0") || h.fakeExists("orders:1") {
		t.Fatal("the refused create provisioned shard streams")
	}
	if _, err := h.createStream("orders", 1); err != nil {
		t.Fatalf("a create whose only fence key is a hash: %v", err)
	}
	k := projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "g"}
	if _, err := h.createGroup("orders", "g", nil); err != nil {
		t.Fatal(err)
	}
	_, err = h.c.Scale(context.Background(), meta, k, commands.ScaleInput{TargetShardCount: ptr(2), RequestedBy: "alice", Reason: "more"})
	wantCode(t, err, commands.ErrPrefixExists, "{orders:1}:fence")
}

// TestRetirementDeletesOnlyWhatTheCoordinatorCreated: a scale-in of groups
// on an adopted stream retires its removed shards by keeping them (recorded
// as kept), while a shard the coordinator created is deleted.
func TestRetirementDeletesOnlyWhatTheCoordinatorCreated(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	for i := 0; i < 2; i++ {
		h.stranger(fmt.Sprintf("ad:%d", i))
	}
	if _, err := h.c.AdoptStream(context.Background(), meta, commands.AdoptStreamInput{StreamPrefix: "ad", ShardCount: ptr(2), RequestedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	k := projection.GroupKey{StreamPrefix: "ad", ConsumerGroup: "g"}
	if _, err := h.createGroup("ad", "g", nil); err != nil {
		t.Fatal(err)
	}
	// 2 -> 3 creates ad:2; 3 -> 1 removes an adopted and a created shard.
	for _, to := range []int{3, 1} {
		if _, err := h.c.Scale(context.Background(), meta, k, commands.ScaleInput{TargetShardCount: ptr(to), RequestedBy: "alice", Reason: "r"}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 6; i++ {
			h.clock.Advance(time.Second)
			h.c.Tick(context.Background())
		}
	}
	g, _ := h.c.State().Group(k)
	last := g.Reshardings[len(g.Reshardings)-1]
	if !last.Retired {
		t.Fatalf("the scale-in did not retire: %+v", last)
	}
	if !h.fakeExists("ad:1") || h.fakeExists("ad:2") {
		t.Fatalf("after the scale-in: adopted ad:1 exists %v (want true), created ad:2 exists %v (want false)", h.fakeExists("ad:1"), h.fakeExists("ad:2"))
	}
	var retired *events.ShardsRetired
	for _, rec := range h.records() {
		if ev, ok := rec.Event.(*events.ShardsRetired); ok {
			retired = ev
		}
	}
	if retired == nil || !reflect.DeepEqual(retired.StreamKeys, []string{"ad:2"}) || !reflect.DeepEqual(retired.KeptKeys, []string{"ad:1"}) {
		t.Fatalf("resharding.retired %+v, want ad:2 deleted and ad:1 kept", retired)
	}
}

// TestCaps: --max-groups and --max-total-shards refuse what would pass them,
// with their own error codes; the limit itself is accepted.
func TestCaps(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{MaxGroups: 2, MaxTotalShards: 6})
	if _, err := h.createGroup("a", "g", ptr(2)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.createGroup("b", "g", ptr(4)); err != nil { // 6 shards: the limit
		t.Fatal(err)
	}
	_, err := h.createGroup("c", "g", ptr(1))
	wantCode(t, err, commands.ErrGroupLimit, "--max-groups is 2")
	_, err = h.createStream("s", 1)
	wantCode(t, err, commands.ErrShardLimit, "--max-total-shards is 6")
	_, err = h.c.Scale(context.Background(), meta, projection.GroupKey{StreamPrefix: "a", ConsumerGroup: "g"}, commands.ScaleInput{TargetShardCount: ptr(3), RequestedBy: "alice", Reason: "r"})
	wantCode(t, err, commands.ErrShardLimit, "")
	// A scale-in is never refused.
	if _, err := h.c.Scale(context.Background(), meta, projection.GroupKey{StreamPrefix: "b", ConsumerGroup: "g"}, commands.ScaleInput{TargetShardCount: ptr(3), RequestedBy: "alice", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
}

// TestUndecodableEntryMakesTheMetadataCorrupt: a log entry this build
// cannot decode stops the load and makes the replica report
// COORDINATOR_METADATA_CORRUPT naming it; a load of a log it can decode
// clears it.
func TestUndecodableEntryMakesTheMetadataCorrupt(t *testing.T) {
	log := events.NewMemLog()
	good, err := events.Encode(events.Meta{StreamPrefix: "orders", Time: time.Unix(1, 0)}, &events.StreamCreated{ShardCount: 1, RequestedBy: "a"})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := log.Append(context.Background(), events.ZeroID, [][]byte{good, []byte("\xc1 not msgpack")})
	if err != nil {
		t.Fatal(err)
	}
	c := coordinator.New(coordinator.Config{DisableProvisioning: true}, log, nil, nil, nil)
	t.Cleanup(c.Close)
	if err := c.Load(context.Background(), false); err == nil {
		t.Fatal("a log with an undecodable entry loaded")
	}
	err = c.Replica.Corrupt()
	wantCode(t, err, commands.ErrMetadataCorrupt, ids[1])
	clean := coordinator.New(coordinator.Config{DisableProvisioning: true}, events.NewMemLog(), nil, nil, nil)
	t.Cleanup(clean.Close)
	if err := clean.Load(context.Background(), false); err != nil || clean.Replica.Corrupt() != nil {
		t.Fatalf("a clean log: load %v, corrupt %v", err, clean.Replica.Corrupt())
	}
}

// TestOrderedCutoverCarriesTheStreamFence: the cutover of an ordered group
// of a stream with metadata records the stream's version after the change
// as its stream fence (raised under routing.StreamFenceField with the
// group's), the hook for producers that route by stream.
func TestOrderedCutoverCarriesTheStreamFence(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	if _, err := h.createStream("orders", 2); err != nil {
		t.Fatal(err)
	}
	key := events.OrderingKey
	if _, err := h.c.CreateGroup(context.Background(), meta, commands.CreateGroupInput{StreamPrefix: "orders", ConsumerGroup: "g", RequestedBy: "alice", Ordering: &key}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.Scale(context.Background(), meta, projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "g"}, commands.ScaleInput{TargetShardCount: ptr(4), RequestedBy: "alice", Reason: "r"}); err != nil {
		t.Fatal(err)
	}
	var cut *events.ReshardingCutover
	for _, rec := range h.records() {
		if ev, ok := rec.Event.(*events.ReshardingCutover); ok {
			cut = ev
		}
	}
	if st := h.stream("orders"); cut == nil || cut.StreamFence != st.MetadataVersion || st.MetadataVersion != 2 {
		t.Fatalf("cutover %+v, stream at version %d: want the stream fence 2", cut, st.MetadataVersion)
	}
}

// TestReshardingAnswersNameTheirEvents: the answer to a scale (group and
// stream level) and to a rollback names, for every state change, the log
// entry that recorded it, as GET shows it; the changes its own decision
// recorded had "" (the answer was built before the append gave ids).
func TestReshardingAnswersNameTheirEvents(t *testing.T) {
	h := newStreamHarness(t, coordinator.Config{})
	if _, err := h.createGroup("orders", "billing", ptr(2)); err != nil {
		t.Fatal(err)
	}
	k := projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "billing"}
	same := func(what string, v projection.ReshardingView) {
		t.Helper()
		g, _ := h.c.State().Group(k)
		r := g.Resharding(v.ReshardingID)
		if r == nil || len(r.History) < len(v.StateHistory) || len(v.StateHistory) == 0 {
			t.Fatalf("%s: resharding %s answered with %d changes, the state has %+v", what, v.ReshardingID, len(v.StateHistory), r)
		}
		for i, c := range v.StateHistory {
			if c.EventID == "" || c.EventID != r.History[i].EventID {
				t.Errorf("%s: change %d (%s) answered with event id %q, the log recorded it as %q", what, i, c.State, c.EventID, r.History[i].EventID)
			}
		}
	}
	v, err := h.c.Scale(context.Background(), meta, k, commands.ScaleInput{TargetShardCount: ptr(4), RequestedBy: "alice", Reason: "more"})
	if err != nil {
		t.Fatal(err)
	}
	same("group scale", v)
	rb, err := h.c.Rollback(context.Background(), meta, k, v.ReshardingID, commands.RollbackInput{RequestedBy: "alice", Reason: "undo"})
	if err != nil {
		t.Fatal(err)
	}
	same("rollback", rb)
	// Let the rollback finish before the next scale.
	waitFor(t, "the rollback to finish", func() bool {
		g, _ := h.c.State().Group(k)
		return g.Active() == nil
	})
	res, err := h.c.ScaleStream(context.Background(), meta, "orders", commands.ScaleInput{TargetShardCount: ptr(3), RequestedBy: "alice", Reason: "stream"})
	if err != nil {
		t.Fatal(err)
	}
	same("stream scale", res.Reshardings[0])
}
