package coordinator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
)

// trimRig is a log with its snapshot store in a real Redis, and a writer that
// appends events the way the coordinator encodes them.
type trimRig struct {
	t     *testing.T
	rdb   *redis.Client
	log   *redisstore.Log
	snaps *redisstore.SnapshotStore
	last  string
	at    time.Time
}

var rigSeq int

func newTrimRig(t *testing.T, rdb *redis.Client) *trimRig {
	rigSeq++
	key := fmt.Sprintf("test:trim:%d:%d", time.Now().UnixNano(), rigSeq)
	return &trimRig{t: t, rdb: rdb, log: redisstore.NewLog(rdb, key), snaps: redisstore.NewSnapshotStore(rdb, key), last: events.ZeroID, at: time.Date(2025, 6, 1, 9, 0, 0, 0, time.UTC)}
}

// add appends one event of group k and returns its id.
func (r *trimRig) add(k projection.GroupKey, ev events.Event) string {
	r.t.Helper()
	r.at = r.at.Add(time.Second)
	data, err := events.Encode(events.Meta{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, Time: r.at, Actor: "test"}, ev)
	if err != nil {
		r.t.Fatal(err)
	}
	ids, err := r.log.Append(context.Background(), r.last, [][]byte{data})
	if err != nil {
		r.t.Fatal(err)
	}
	r.last = ids[0]
	return r.last
}

// coordinator loads a fresh coordinator on the rig's log.
func (r *trimRig) coordinator(trim bool, fromSnapshot bool) (*coordinator.Coordinator, error) {
	c := coordinator.New(coordinator.Config{Logger: zerolog.Nop(), SnapshotEvery: -1, DisableProvisioning: true, SnapshotKeep: 2, TrimLog: trim, Trimmer: r.log}, r.log, nil, r.snaps, nil)
	return c, c.Load(context.Background(), fromSnapshot)
}

func (r *trimRig) mustCoordinator(trim bool) *coordinator.Coordinator {
	r.t.Helper()
	c, err := r.coordinator(trim, true)
	if err != nil {
		r.t.Fatalf("Load: %v", err)
	}
	return c
}

// snapshot loads a coordinator and saves a snapshot at the end of the log.
func (r *trimRig) snapshot(trim bool) {
	r.t.Helper()
	r.mustCoordinator(trim).SaveSnapshot()
	if kept, _ := r.snaps.Kept(context.Background()); len(kept) == 0 || kept[0] != r.last {
		r.t.Fatalf("snapshot at %s not saved (kept %v)", r.last, kept)
	}
}

// mustEncode is the state's snapshot bytes: equal states, equal bytes.
func mustEncode(t *testing.T, st *projection.State) []byte {
	t.Helper()
	b, err := st.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// reshard appends a group's scale-out, with membership chatter between the steps.
func (r *trimRig) reshard(k projection.GroupKey, id string, from, to int, epoch int64) {
	r.add(k, &events.MemberJoined{MemberID: "m-" + id, MemberName: "m", Epochs: events.Epochs{GroupEpoch: epoch, MetadataVersion: epoch}})
	r.add(k, &events.AssignmentComputed{AssignmentEpoch: epoch, Targets: map[string][]int{"m-" + id: {0}}})
	r.add(k, &events.ReshardingPreparing{ReshardingID: id, FromShardCount: from, ToShardCount: to, RequestedBy: "alice"})
	r.add(k, &events.ReshardingActivated{ReshardingID: id, ShardCount: to, AssignableCount: to, Epochs: events.Epochs{GroupEpoch: epoch + 1, MetadataVersion: epoch + 1}})
	r.add(k, &events.MemberSynced{MemberID: "m-" + id, MemberEpoch: epoch + 1, Granted: []int{0}})
	r.add(k, &events.ReshardingCompleted{ReshardingID: id, State: projection.Deprecated, MetadataVersion: epoch + 2})
}

var orders = projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "billing"}

func TestArchivedType(t *testing.T) {
	for _, typ := range events.Types() {
		want := !strings.HasPrefix(typ, "member.") && !strings.HasPrefix(typ, "assignment.")
		if got := coordinator.ArchivedType(typ); got != want {
			t.Errorf("ArchivedType(%q) = %v, want %v", typ, got, want)
		}
	}
	for _, typ := range []string{"group.created", "group.deleted", "command.rejected", "resharding.preparing", "resharding.retired"} {
		if !coordinator.ArchivedType(typ) {
			t.Errorf("%s is resharding or admin history and must be archived", typ)
		}
	}
}

func TestIntegrationLoadFallsBackToAnOlderSnapshot(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartProcess(t).Client(t)

	t.Run("untrimmed log", func(t *testing.T) {
		r := newTrimRig(t, rdb)
		r.add(orders, &events.GroupCreated{ShardCount: 2, RequestedBy: "alice"})
		r.snapshot(false)
		older := r.last
		r.reshard(orders, "rs-1", 2, 4, 2)
		r.snapshot(false)
		want := mustEncode(t, r.mustCoordinator(false).State())
		if err := rdb.Set(ctx, r.snaps.Key(), "garbage", 0).Err(); err != nil {
			t.Fatal(err)
		}
		c := r.mustCoordinator(false)
		if !bytes.Equal(mustEncode(t, c.State()), want) {
			t.Fatal("state after falling back to the older snapshot differs")
		}
		if n := c.State().Applied(); n != 6 {
			t.Errorf("folded %d entries after the older snapshot at %s, want its 6-entry tail", n, older)
		}
	})

	t.Run("trimmed log", func(t *testing.T) {
		r := newTrimRig(t, rdb)
		r.add(orders, &events.GroupCreated{ShardCount: 2, RequestedBy: "alice"})
		r.reshard(orders, "rs-1", 2, 4, 2)
		r.snapshot(true)
		r.reshard(orders, "rs-2", 4, 8, 4)
		r.snapshot(true) // trims behind the first snapshot
		r.reshard(orders, "rs-3", 8, 6, 6)
		want := mustEncode(t, r.mustCoordinator(false).State())
		if trimmed, _ := r.log.TrimmedTo(ctx); trimmed == events.ZeroID {
			t.Fatal("the log was not trimmed")
		}
		if err := rdb.Set(ctx, r.snaps.Key(), "garbage", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mustEncode(t, r.mustCoordinator(false).State()), want) {
			t.Fatal("state from the older snapshot of a trimmed log differs")
		}
		// Neither snapshot restores: a trimmed log cannot be folded from zero.
		keys, err := r.snaps.Keys(ctx) // the newest, the id list, the older one
		if err != nil || len(keys) != 3 {
			t.Fatalf("snapshot keys %v, %v", keys, err)
		}
		if err := rdb.Set(ctx, keys[2], "garbage", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := r.coordinator(false, true); err == nil || !strings.Contains(err.Error(), "trimmed") {
			t.Fatalf("Load with no usable snapshot of a trimmed log: %v, want a refusal naming the trim", err)
		}
		if _, err := r.coordinator(false, false); err == nil || !strings.Contains(err.Error(), "--ignore-snapshot") {
			t.Fatalf("Load from zero of a trimmed log: %v, want a refusal naming --ignore-snapshot", err)
		}
	})
}

// A coordinator that lost the lead and saves its older state late does not
// replace the newer snapshot.
func TestIntegrationLateSnapshotIsRefused(t *testing.T) {
	ctx := context.Background()
	r := newTrimRig(t, redistest.StartProcess(t).Client(t))
	r.add(orders, &events.GroupCreated{ShardCount: 2, RequestedBy: "alice"})
	stale := r.mustCoordinator(false)
	r.reshard(orders, "rs-1", 2, 4, 2)
	r.snapshot(false)
	stale.SaveSnapshot()
	if kept, _ := r.snaps.Kept(ctx); len(kept) != 1 || kept[0] != r.last {
		t.Fatalf("kept %v after a late save, want only the newer %s", kept, r.last)
	}
}

func TestIntegrationTrimLogKeepsHistoryAndReplays(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartProcess(t).Client(t)
	r := newTrimRig(t, rdb)
	created := r.add(orders, &events.GroupCreated{ShardCount: 2, RequestedBy: "alice"})
	r.reshard(orders, "rs-1", 2, 4, 2)
	r.snapshot(true)
	oldest := r.last
	r.reshard(orders, "rs-2", 4, 8, 4)
	r.snapshot(true)
	r.add(orders, &events.CommandRejected{Command: "scale", ErrorCode: "SHARD_COUNT_UNCHANGED"})
	logNow, err := r.log.Read(ctx, events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}

	// Trimmed behind the oldest kept snapshot; its history is in the archive.
	first := logNow[0].ID
	if c, _ := events.CompareIDs(first, oldest); c != 0 {
		t.Fatalf("log starts at %s, want the oldest kept snapshot's entry %s", first, oldest)
	}
	arch, err := r.log.Archive().Read(ctx, events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}
	types := typesOf(decoded(t, arch))
	// resharding.completed is the snapshot's own last entry: it stays in the log.
	if got, want := strings.Join(types, ","), "group.created,resharding.preparing,resharding.activated"; got != want {
		t.Fatalf("archive = %s, want %s", got, want)
	}
	if arch[0].ID != created {
		t.Errorf("archived group.created under %s, want its log id %s", arch[0].ID, created)
	}

	c := r.mustCoordinator(true)
	hist, err := c.HistoryLog().Read(ctx, events.ZeroID, 0)
	if err != nil || len(hist) != len(arch)+len(logNow) {
		t.Fatalf("history = %d entries, %v; want %d archived + %d in the log", len(hist), err, len(arch), len(logNow))
	}
	g, _ := c.State().Group(orders)
	if len(g.Reshardings) != 2 || len(g.Reshardings[0].History) != 3 {
		t.Fatalf("reshardings after a trimmed start-up: %+v", g.Reshardings)
	}

	// Replay at or after the oldest kept snapshot works; before it, it is refused.
	for _, id := range []string{oldest, logNow[3].ID, r.last} {
		st, err := c.StateAt(ctx, id)
		if err != nil {
			t.Fatalf("StateAt(%s): %v", id, err)
		}
		if st.LastID() != id {
			t.Errorf("StateAt(%s) is at %s", id, st.LastID())
		}
	}
	_, err = c.StateAt(ctx, created)
	if !errors.Is(err, commands.ErrLogTrimmed) || !strings.Contains(err.Error(), oldest) {
		t.Fatalf("StateAt before the trim point: %v, want ErrLogTrimmed naming %s", err, oldest)
	}
}

// trimmingLog is a log that trims itself behind before on the first Read after
// it is armed: the trim lands between a catch-up's check of the trim point
// and the read of its first page.
type trimmingLog struct {
	*redisstore.Log
	before string
	armed  atomic.Bool
	fired  atomic.Bool
}

func (l *trimmingLog) Read(ctx context.Context, after string, count int) ([]events.Entry, error) {
	if l.armed.CompareAndSwap(true, false) {
		if _, _, err := l.Log.TrimBefore(ctx, l.before, func(events.Entry) bool { return false }); err != nil {
			return nil, err
		}
		l.fired.Store(true)
	}
	return l.Log.Read(ctx, after, count)
}

// TestIntegrationTrimDuringCatchUpReloads: a replica behind the log catches
// up while another replica trims the log behind its oldest kept snapshot, and
// the trim lands after the catch-up checked the trim point but before it read.
// The page it reads starts after the gap; folding it lost g1..g11 for good
// (TestIntegrationHAFollowerBehindTrimPoint caught it once under load).
// Every page is now checked against the trim point after it is read, and a
// page read across a trim makes the replica reload from the snapshot.
func TestIntegrationTrimDuringCatchUpReloads(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartProcess(t).Client(t)
	r := newTrimRig(t, rdb)
	group := func(i int) projection.GroupKey {
		return projection.GroupKey{StreamPrefix: "trim", ConsumerGroup: fmt.Sprintf("g%d", i)}
	}
	r.add(group(0), &events.GroupCreated{ShardCount: 2, RequestedBy: "alice"})
	tl := &trimmingLog{Log: r.log}
	c := coordinator.New(coordinator.Config{Logger: zerolog.Nop(), SnapshotEvery: -1, DisableProvisioning: true, SnapshotKeep: 2, Trimmer: r.log}, tl, nil, r.snaps, nil)
	if err := c.Load(ctx, true); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 12; i++ {
		r.add(group(i), &events.GroupCreated{ShardCount: 2, RequestedBy: "alice"})
	}
	r.snapshot(false)
	tl.before = r.last
	for i := 13; i <= 20; i++ {
		r.add(group(i), &events.GroupCreated{ShardCount: 2, RequestedBy: "alice"})
	}
	r.snapshot(false)
	tl.armed.Store(true)
	c.Run()
	t.Cleanup(c.Close)

	want := mustEncode(t, r.mustCoordinator(false).State())
	deadline := time.Now().Add(15 * time.Second)
	for !bytes.Equal(mustEncode(t, c.State()), want) {
		if time.Now().After(deadline) {
			var names []string
			for _, g := range c.State().Groups() {
				names = append(names, g.Key.ConsumerGroup)
			}
			t.Fatalf("after the catch-up the replica serves %d groups %v (trim fired: %v), want the 21 a fresh load folds", len(names), names, tl.fired.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !tl.fired.Load() {
		t.Fatal("the trim never landed during the catch-up: the test proves nothing")
	}
}
