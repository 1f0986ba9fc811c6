package commands_test

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// A Redis failover that promotes a replica which had not received the newest
// entries leaves the log behind the coordinator's projection. These tests play
// it on an in-memory log that is swapped for a copy missing its tail (what
// the promoted replica holds), and check that the coordinator goes back to
// the replay of the log instead of refusing every decision as a conflict.

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

func (l *promotableLog) m() *events.MemLog { return l.cur.Load() }
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

// memSnaps is a commands.SnapshotStore in memory.
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
func startOn(t *testing.T, log events.Log, snaps *memSnaps) *commands.Coordinator {
	t.Helper()
	var ss commands.SnapshotStore
	if snaps != nil {
		ss = snaps
	}
	c := commands.New(commands.Config{DisableProvisioning: true, Logger: zerolog.Nop(), SnapshotEvery: -1, SnapshotKeep: 2}, log, nil, ss, nil)
	if err := c.Load(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	c.Run()
	t.Cleanup(c.Close)
	return c
}

func create(c *commands.Coordinator, group string) error {
	n := 2
	_, err := c.CreateGroup(context.Background(), events.Meta{Actor: "t"}, commands.CreateGroupInput{StreamPrefix: "p", ConsumerGroup: group, InitialShardCount: &n, RequestedBy: "t"})
	return err
}

func mustCreate(t *testing.T, c *commands.Coordinator, groups ...string) {
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
// log, byte for byte.
func mustEqualReplay(t *testing.T, c *commands.Coordinator, log events.Log) {
	t.Helper()
	replayed := projection.New()
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

// The promoted log lacks the last five creates: the next decision reloads
// the projection from the log, succeeds, and the state is the log's replay.
func TestReloadWhenTheLogLostItsTail(t *testing.T) {
	log := newPromotableLog()
	c := startOn(t, log, nil)
	mustCreate(t, c, "g1", "g2")
	kept := len(log.m().Entries())
	mustCreate(t, c, "g3", "g4", "g5", "g6", "g7")
	log.promote(t, kept)

	if err := create(c, "g8"); err != nil {
		t.Fatalf("first decision after the failover: %v, want it decided on the log as it is", err)
	}
	if got, want := fmt.Sprint(groupNames(c.State())), "[g1 g2 g8]"; got != want {
		t.Fatalf("groups after the failover %s, want %s", got, want)
	}
	mustEqualReplay(t, c, log)
}

// Another writer went on on the promoted log before this coordinator's next
// decision: the log's last id is past the projection's, but the projection's
// last entry is not in it. Folding on would mix the lost entries with the
// new ones.
func TestReloadWhenTheLogWentOnWithoutItsTail(t *testing.T) {
	log := newPromotableLog()
	c := startOn(t, log, nil)
	mustCreate(t, c, "g1")
	kept := len(log.m().Entries())
	mustCreate(t, c, "g2", "g3", "g4", "g5")
	log.promote(t, kept, "x")

	if err := create(c, "g6"); err != nil {
		t.Fatalf("decision after the failover: %v", err)
	}
	if got, want := fmt.Sprint(groupNames(c.State())), "[g1 g6 x]"; got != want {
		t.Fatalf("groups after the failover %s, want %s", got, want)
	}
	mustEqualReplay(t, c, log)
}

// A snapshot taken at an entry the failover lost is not restored, at start-up
// nor at a reload: an older one is folded from instead.
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

	if err := create(c, "g5"); err != nil {
		t.Fatalf("decision after the failover: %v", err)
	}
	if got, want := fmt.Sprint(groupNames(c.State())), "[g1 g5 x]"; got != want {
		t.Fatalf("groups after the failover %s, want %s", got, want)
	}
	mustEqualReplay(t, c, log)
}
