package coordinator

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
)

// readCountingLog is a MemLog that counts the reads a catch-up makes.
type readCountingLog struct {
	*events.MemLog
	reads atomic.Int64
}

func (l *readCountingLog) Read(ctx context.Context, after string, count int) ([]events.Entry, error) {
	l.reads.Add(1)
	return l.MemLog.Read(ctx, after, count)
}

func (l *readCountingLog) Get(ctx context.Context, ids []string) ([]events.Entry, error) {
	l.reads.Add(1)
	return l.MemLog.Get(ctx, ids)
}

// writerOnly is a loaded coordinator whose writer runs and nothing else (no
// follower, no ticks): what the writer does is what the test asks of it.
func writerOnly(t *testing.T, log events.Log) *Coordinator {
	t.Helper()
	// No churn budgets: a test of the writer floods one principal with
	// joins faster than a budget lets them through.
	c := New(Config{DisableProvisioning: true, TickInterval: time.Hour, ShardCheckInterval: -1, SnapshotEvery: -1, MemberChurnPerMinute: -1, PrincipalChurnPerMinute: -1, Logger: zerolog.Nop()}, log, nil, nil, nil)
	if err := c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	go c.dec.run()
	t.Cleanup(func() {
		c.life.closing.Store(true)
		c.life.cancel()
		<-c.dec.exited
	})
	return c
}

// TestFollowerCatchUpSkipsWhatTheWriterApplied: the follower reads the
// leader's own appends, often before the writer applied them, and asks the
// writer to catch up past the entry it read. When the projection holds that
// entry by then, the writer reads nothing from the log (a catch-up is three
// round trips to Redis in the writer, which every decision queued behind it
// waited for); an entry another writer appended beyond the projection is
// folded.
func TestFollowerCatchUpSkipsWhatTheWriterApplied(t *testing.T) {
	log := &readCountingLog{MemLog: events.NewMemLog()}
	c := writerOnly(t, log)
	ctx := context.Background()
	n := 2
	for _, g := range []string{"a", "b"} {
		if _, err := c.CreateGroup(ctx, events.Meta{Actor: "t"}, commands.CreateGroupInput{StreamPrefix: "p", ConsumerGroup: g, InitialShardCount: &n, RequestedBy: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	entries := log.Entries()
	before := log.reads.Load()
	for _, e := range entries { // the newest, and one the projection is past
		if err := c.dec.catchUpPast(ctx, e.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n := log.reads.Load() - before; n != 0 {
		t.Fatalf("catching up past entries the projection holds read the log %d times, want 0", n)
	}

	data, err := events.Encode(events.Meta{StreamPrefix: "p", ConsumerGroup: "foreign", Actor: "other", Time: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		&events.GroupCreated{ShardCount: 2, RequestedBy: "other"})
	if err != nil {
		t.Fatal(err)
	}
	ids, err := log.MemLog.Append(ctx, entries[len(entries)-1].ID, [][]byte{data})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.dec.catchUpPast(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if log.reads.Load() == before {
		t.Fatal("catching up past another writer's entry read nothing")
	}
	if got := c.State().LastID(); got != ids[0] {
		t.Fatalf("after the catch-up the projection is at %s, want %s (the other writer's entry)", got, ids[0])
	}

	// A writer that is not healthy reads the log, whatever it was shown.
	c.life.healthy.Store(false)
	before = log.reads.Load()
	if err := c.dec.catchUpPast(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if log.reads.Load() == before || !c.life.healthy.Load() {
		t.Fatal("an unhealthy writer skipped the catch-up")
	}
}
