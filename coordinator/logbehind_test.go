package coordinator_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// A Redis failover that promotes a replica which had not received the newest
// entries leaves the log behind the coordinator's projection; a Redis
// restarted without persistence, or FLUSHALL, leaves no log at all. These
// tests play both on an in-memory log that is swapped for a copy missing its
// tail (what the promoted replica holds) or for an empty one, and check that
// the coordinator keeps the state it holds (LOG_LOST: reads served, every
// decision that would append refused) instead of folding on entries the log
// no longer has or throwing the state away, and that a restore writes it
// back so that a restart loads it again.

// promotableLog is an events.Log (and events.Indexed) whose contents a test
// replaces at once, as a failover replaces the primary.
type promotableLog struct{ cur atomic.Pointer[events.MemLog] }

func newPromotableLog() *promotableLog {
	l := &promotableLog{}
	l.cur.Store(events.NewMemLog())
	return l
}

// promote replaces the log with its first n entries, followed by the
// creation of each foreign group: what another writer appended on the
// promoted replica, with ids past the lost ones (Redis's ids follow the
// clock, which went on during the failover).
func (l *promotableLog) promote(t *testing.T, n int, foreign ...string) {
	t.Helper()
	all := l.cur.Load().Entries()
	entries := append([]events.Entry(nil), all[:n]...)
	last, err := events.ParseID(all[len(all)-1].ID)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range foreign {
		data, err := events.Encode(events.Meta{StreamPrefix: "p", ConsumerGroup: g, Actor: "other", Time: time.Date(2025, 6, 1, 9, 0, i, 0, time.UTC)},
			&events.GroupCreated{ShardCount: 2, RequestedBy: "other"})
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, events.Entry{ID: events.ID{Ms: last.Ms + 1000 + uint64(i)}.String(), Data: data})
	}
	m, err := events.LoadEntries(entries)
	if err != nil {
		t.Fatal(err)
	}
	l.cur.Store(m)
}

// flush empties the log, as FLUSHALL or a Redis restart without
// persistence does.
func (l *promotableLog) flush() { l.cur.Store(events.NewMemLog()) }

func (l *promotableLog) m() *events.MemLog { return l.cur.Load() }
func (l *promotableLog) AppendRestore(ctx context.Context, after, id string, data []byte) error {
	return l.m().AppendRestore(ctx, after, id, data)
}
func (l *promotableLog) LastRestore(ctx context.Context) (string, error) {
	return l.m().LastRestore(ctx)
}
func (l *promotableLog) Append(ctx context.Context, after string, b [][]byte) ([]string, error) {
	return l.m().Append(ctx, after, b)
}
func (l *promotableLog) AppendIndexed(ctx context.Context, after string, b []events.Draft) ([]string, error) {
	return l.m().AppendIndexed(ctx, after, b)
}
func (l *promotableLog) History(ctx context.Context, index, after string, limit int) ([]string, error) {
	return l.m().History(ctx, index, after, limit)
}
func (l *promotableLog) Read(ctx context.Context, after string, count int) ([]events.Entry, error) {
	return l.m().Read(ctx, after, count)
}
func (l *promotableLog) Tail(ctx context.Context, after string, count int, block time.Duration) ([]events.Entry, error) {
	// A short wait: a tail blocked on the old log would not see the new one.
	return l.m().Tail(ctx, after, count, min(block, 20*time.Millisecond))
}
func (l *promotableLog) Get(ctx context.Context, ids []string) ([]events.Entry, error) {
	return l.m().Get(ctx, ids)
}
func (l *promotableLog) LastID(ctx context.Context) (string, error) { return l.m().LastID(ctx) }
func (l *promotableLog) Len(ctx context.Context) (int64, error)     { return l.m().Len(ctx) }

// memSnaps is a coordinator.SnapshotStore in memory.
type memSnaps struct {
	mu   sync.Mutex
	data map[string][]byte
	kept []string // newest first
}

func (s *memSnaps) Load(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.kept) == 0 {
		return nil, nil
	}
	return s.data[s.kept[0]], nil
}

func (s *memSnaps) Save(ctx context.Context, lastID string, data []byte, keep int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.data == nil {
		s.data = map[string][]byte{}
	}
	if len(s.kept) > 0 {
		if cmp, _ := events.CompareIDs(lastID, s.kept[0]); cmp <= 0 {
			return events.ErrConflict
		}
	}
	s.data[lastID] = data
	s.kept = append([]string{lastID}, s.kept...)
	if len(s.kept) > keep {
		s.kept = s.kept[:keep]
	}
	return nil
}

// flush forgets every snapshot (FLUSHALL).
func (s *memSnaps) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data, s.kept = nil, nil
}

func (s *memSnaps) Kept(ctx context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.kept...), nil
}

func (s *memSnaps) LoadAt(ctx context.Context, lastID string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data[lastID], nil
}

// startOn loads and runs a coordinator on log (snaps: a *memSnaps or nil).
func startOn(t *testing.T, log events.Log, snaps *memSnaps) *coordinator.Coordinator {
	t.Helper()
	var ss coordinator.SnapshotStore
	if snaps != nil {
		ss = snaps
	}
	c := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop(), SnapshotEvery: -1, SnapshotKeep: 2, GuardInterval: 20 * time.Millisecond}, log, nil, ss, nil)
	if err := c.Load(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	c.Run()
	t.Cleanup(c.Close)
	return c
}

func create(c *coordinator.Coordinator, group string) error {
	n := 2
	_, err := c.CreateGroup(context.Background(), events.Meta{Actor: "t"}, commands.CreateGroupInput{StreamPrefix: "p", ConsumerGroup: group, InitialShardCount: &n, RequestedBy: "t"})
	return err
}

func mustCreate(t *testing.T, c *coordinator.Coordinator, groups ...string) {
	t.Helper()
	for _, g := range groups {
		if err := create(c, g); err != nil {
			t.Fatalf("create %s: %v", g, err)
		}
	}
}

func groupNames(st *projection.State) []string {
	var out []string
	for _, g := range st.Groups() {
		out = append(out, g.Key.ConsumerGroup)
	}
	sort.Strings(out)
	return out
}

// mustEqualReplay fails unless the coordinator's projection is the fold of
// log (from the newest of snaps, when given), byte for byte.
func mustEqualReplay(t *testing.T, c *coordinator.Coordinator, log events.Log, snaps ...*memSnaps) {
	t.Helper()
	replayed := projection.New()
	if len(snaps) > 0 {
		data, _ := snaps[0].Load(context.Background())
		st, err := projection.Restore(data)
		if err != nil {
			t.Fatal(err)
		}
		replayed = st
	}
	if _, err := projection.Fold(context.Background(), log, replayed, projection.FoldOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := c.State().Capture().Encode()
	if err != nil {
		t.Fatal(err)
	}
	want, err := replayed.Capture().Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("served state (groups %v, at %s) is not the replay of the log (groups %v, at %s)",
			groupNames(c.State()), c.State().LastID(), groupNames(replayed), replayed.LastID())
	}
}

// mustLost waits until the coordinator finds the log lost with this cause,
// and checks that a decision is refused with LOG_LOST meanwhile.
func mustLost(t *testing.T, c *coordinator.Coordinator, cause string) *coordinator.LogLoss {
	t.Helper()
	waitFor(t, "LOG_LOST", func() bool { return c.LogLoss() != nil })
	loss := c.LogLoss()
	if loss.Cause != cause {
		t.Fatalf("loss %+v, want cause %s", loss, cause)
	}
	if err := create(c, "refused"); !errors.Is(err, commands.ErrLogLost) {
		t.Fatalf("a create while the log is lost: %v, want LOG_LOST", err)
	}
	return loss
}

func restore(t *testing.T, c *coordinator.Coordinator) coordinator.RestoreResult {
	t.Helper()
	res, err := c.RestoreLog(context.Background(), events.Meta{Actor: "ops"}, coordinator.RestoreLogInput{RequestedBy: "ops", Reason: "the log was lost"})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	return res
}

// The promoted log lacks the last five creates: the coordinator keeps the
// state it holds (the five included) and refuses decisions until the log
// is restored; then the log's replay from the restore's snapshot is what it
// serves, and it decides on.
func TestLogThatLostItsTailIsHeld(t *testing.T) {
	log := newPromotableLog()
	snaps := &memSnaps{}
	c := startOn(t, log, snaps)
	mustCreate(t, c, "g1", "g2")
	kept := len(log.m().Entries())
	mustCreate(t, c, "g3", "g4", "g5", "g6", "g7")
	log.promote(t, kept)

	loss := mustLost(t, c, coordinator.LossEntriesLost)
	if loss.LostEntries != 5 || loss.AtLeast {
		t.Fatalf("loss %+v, want 5 lost entries", loss)
	}
	if got, want := fmt.Sprint(groupNames(c.State())), "[g1 g2 g3 g4 g5 g6 g7]"; got != want {
		t.Fatalf("groups served while the log is lost %s, want %s", got, want)
	}
	res := restore(t, c)
	if res.RestoredFrom == "" || res.Cause != coordinator.LossEntriesLost || res.LostEntries != 5 {
		t.Fatalf("restore answered %+v", res)
	}
	if c.LogLoss() != nil {
		t.Fatal("still LOG_LOST after the restore")
	}
	mustCreate(t, c, "g8")
	if got, want := fmt.Sprint(groupNames(c.State())), "[g1 g2 g3 g4 g5 g6 g7 g8]"; got != want {
		t.Fatalf("groups after the restore %s, want %s", got, want)
	}
	mustEqualReplay(t, c, log, snaps)
}

// Another writer went on on the promoted log before this coordinator's next
// decision: the log's last id is past the projection's, but the projection's
// last entry is not in it. Folding on would mix the lost entries with the
// new ones: the coordinator does not, and stays LOG_LOST. Restored, its
// state is the log's again (the other writer's entry is superseded); an
// operator who prefers the log as it is restarts the coordinator instead.
func TestLogThatWentOnWithoutItsTailIsHeld(t *testing.T) {
	log := newPromotableLog()
	snaps := &memSnaps{}
	c := startOn(t, log, snaps)
	mustCreate(t, c, "g1")
	kept := len(log.m().Entries())
	mustCreate(t, c, "g2", "g3", "g4", "g5")
	log.promote(t, kept, "x")

	mustLost(t, c, coordinator.LossEntriesLost)
	if got, want := fmt.Sprint(groupNames(c.State())), "[g1 g2 g3 g4 g5]"; got != want {
		t.Fatalf("groups while the log is lost %s, want %s (never folded onto the lost entries)", got, want)
	}

	// The log as it is: what a restarted coordinator serves.
	asIs := startOn(t, log, &memSnaps{})
	if got, want := fmt.Sprint(groupNames(asIs.State())), "[g1 x]"; got != want {
		t.Fatalf("groups of a coordinator started on the log as it is %s, want %s", got, want)
	}
	asIs.Close()

	restore(t, c)
	mustCreate(t, c, "g6")
	if got, want := fmt.Sprint(groupNames(c.State())), "[g1 g2 g3 g4 g5 g6]"; got != want {
		t.Fatalf("groups after the restore %s, want %s", got, want)
	}
	mustEqualReplay(t, c, log, snaps)
	again := startOn(t, log, snaps)
	mustSameState(t, again, c)
}

// A snapshot taken at an entry the failover lost is not restored at
// start-up: an older one is folded from instead. The running coordinator
// that took it keeps its state (LOG_LOST).
func TestSnapshotAtALostEntryIsNotRestored(t *testing.T) {
	log := newPromotableLog()
	snaps := &memSnaps{}
	c := startOn(t, log, snaps)
	mustCreate(t, c, "g1")
	c.SaveSnapshot()
	kept := len(log.m().Entries())
	mustCreate(t, c, "g2", "g3", "g4")
	c.SaveSnapshot() // at g4's entry, which the failover loses
	if ids, _ := snaps.Kept(context.Background()); len(ids) != 2 {
		t.Fatalf("kept snapshots %v, want 2", ids)
	}
	// The log's last id passes the lost snapshot's: only the snapshot's entry
	// missing from the log tells.
	log.promote(t, kept, "x")

	fresh := startOn(t, log, snaps)
	if got, want := fmt.Sprint(groupNames(fresh.State())), "[g1 x]"; got != want {
		t.Fatalf("groups of a coordinator started after the failover %s, want %s", got, want)
	}
	mustEqualReplay(t, fresh, log)
	fresh.Close()

	mustLost(t, c, coordinator.LossEntriesLost)
	if got, want := fmt.Sprint(groupNames(c.State())), "[g1 g2 g3 g4]"; got != want {
		t.Fatalf("groups of the running coordinator after the failover %s, want %s", got, want)
	}
}

// mustSameState fails unless two coordinators serve the same state.
func mustSameState(t *testing.T, a, b *coordinator.Coordinator) {
	t.Helper()
	ea, err := a.State().Capture().Encode()
	if err != nil {
		t.Fatal(err)
	}
	eb, err := b.State().Capture().Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ea, eb) {
		t.Fatalf("states differ: groups %v at %s, groups %v at %s", groupNames(a.State()), a.State().LastID(), groupNames(b.State()), b.State().LastID())
	}
}

// FLUSHALL (or a restart without persistence) while running: the state is
// kept and served, decisions are refused; the restore writes it back, and a
// coordinator started afterwards loads the same state.
func TestFlushedLogIsRestoredFromTheState(t *testing.T) {
	log := newPromotableLog()
	snaps := &memSnaps{}
	c := startOn(t, log, snaps)
	mustCreate(t, c, "g1", "g2", "g3")
	c.SaveSnapshot()
	before := fmt.Sprint(groupNames(c.State()))
	log.flush()
	snaps.flush()

	loss := mustLost(t, c, coordinator.LossLogGone)
	if loss.LogLastID != events.ZeroID || loss.LogLength != 0 {
		t.Fatalf("loss %+v, want an empty log", loss)
	}
	if got := fmt.Sprint(groupNames(c.State())); got != before {
		t.Fatalf("groups served while the log is gone %s, want %s", got, before)
	}
	if _, err := c.RestoreLog(context.Background(), events.Meta{}, coordinator.RestoreLogInput{RequestedBy: "ops"}); !errors.Is(err, commands.ErrInvalid) {
		t.Fatalf("a restore without a reason: %v, want INVALID_REQUEST", err)
	}
	res := restore(t, c)
	if res.LogLastID != events.ZeroID || res.Cause != coordinator.LossLogGone {
		t.Fatalf("restore answered %+v", res)
	}
	if _, err := c.RestoreLog(context.Background(), events.Meta{}, coordinator.RestoreLogInput{RequestedBy: "ops", Reason: "again"}); !errors.Is(err, commands.ErrLogNotLost) {
		t.Fatalf("a second restore: %v, want LOG_NOT_LOST", err)
	}
	mustCreate(t, c, "g4")
	c.Close()
	again := startOn(t, log, snaps)
	if got, want := fmt.Sprint(groupNames(again.State())), "[g1 g2 g3 g4]"; got != want {
		t.Fatalf("groups after a restart %s, want %s", got, want)
	}
	if got := again.State().LastRestore(); got.ID != res.EventID || got.From != res.RestoredFrom {
		t.Fatalf("the restarted state's last restore %+v, want %s from %s", got, res.EventID, res.RestoredFrom)
	}
}

// With --log-replicas, a failover that lost only entries after the last one
// this coordinator appended and had acknowledged lost no decision it
// answered (the entries another writer appended, folded here before the
// replicas had them): the projection reloads from the log, as the log is.
// One that lost an answered entry is LOG_LOST.
func TestReplicasWindowLossReloads(t *testing.T) {
	start := func(log *promotableLog) *coordinator.Coordinator {
		c := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop(), SnapshotEvery: -1, GuardInterval: 20 * time.Millisecond, LogReplicas: 1}, log, nil, nil, nil)
		if err := c.Load(context.Background(), true); err != nil {
			t.Fatal(err)
		}
		c.Run()
		t.Cleanup(c.Close)
		return c
	}
	t.Run("only unanswered entries lost", func(t *testing.T) {
		log := newPromotableLog()
		c := start(log)
		mustCreate(t, c, "g1", "g2")
		kept := len(log.m().Entries())
		other := start(log) // another writer's entries, folded here unanswered
		mustCreate(t, other, "x1", "x2")
		other.Close()
		waitFor(t, "the foreign entries folded", func() bool { return len(groupNames(c.State())) == 4 })
		log.promote(t, kept)
		waitFor(t, "the reload", func() bool { return fmt.Sprint(groupNames(c.State())) == "[g1 g2]" })
		if c.LogLoss() != nil {
			t.Fatalf("LOG_LOST %+v after losing only entries no replica acknowledged", c.LogLoss())
		}
		mustCreate(t, c, "g3")
		mustEqualReplay(t, c, log)
	})
	t.Run("an answered entry lost", func(t *testing.T) {
		log := newPromotableLog()
		c := start(log)
		mustCreate(t, c, "g1")
		kept := len(log.m().Entries())
		mustCreate(t, c, "g2")
		log.promote(t, kept)
		mustLost(t, c, coordinator.LossEntriesLost)
		if got := fmt.Sprint(groupNames(c.State())); got != "[g1 g2]" {
			t.Fatalf("groups %s, want [g1 g2] kept", got)
		}
	})
}
