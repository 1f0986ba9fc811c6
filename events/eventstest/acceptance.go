// Package eventstest holds the acceptance suite every events.Log implementation
// must pass. The in-memory log runs it in events' tests; the Redis log runs it
// against a real Redis in redisstore's integration tests.
package eventstest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
)

// RunLogSuite runs the acceptance suite. newLog must return an empty log.
// Logs that keep a history index (events.Indexed) also run its part.
func RunLogSuite(t *testing.T, newLog func(t *testing.T) events.Log) {
	ctx := context.Background()
	payload := func(i int) []byte { return []byte(fmt.Sprintf("entry-%d", i)) }

	t.Run("history index", func(t *testing.T) {
		l, ok := newLog(t).(events.Indexed)
		if !ok {
			t.Skip("the log keeps no history index")
		}
		a, b := events.IndexName("orders", "billing"), events.IndexName("orders:billing", "")
		if a == b {
			t.Fatalf("index names collide: %q", a)
		}
		ids, err := l.AppendIndexed(ctx, events.ZeroID, []events.Draft{
			{Data: payload(1), Index: a},
			{Data: payload(2), Index: b, Membership: true},
			{Data: payload(3)},
			{Data: payload(4), Index: a, Membership: true},
		})
		if err != nil {
			t.Fatal(err)
		}
		more, err := l.AppendIndexed(ctx, ids[3], []events.Draft{{Data: payload(5), Index: a}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.History(ctx, a, events.ZeroID, 10)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{ids[0], ids[3], more[0]}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("History(a) = %v, want %v (both classes, in order)", got, want)
		}
		if page, _ := l.History(ctx, a, ids[0], 1); len(page) != 1 || page[0] != ids[3] {
			t.Fatalf("History(a) after %s, limit 1 = %v, want [%s]", ids[0], page, ids[3])
		}
		if got, _ := l.History(ctx, b, events.ZeroID, 10); len(got) != 1 || got[0] != ids[1] {
			t.Fatalf("History(b) = %v, want [%s]", got, ids[1])
		}
		if got, _ := l.History(ctx, events.IndexName("none", "x"), events.ZeroID, 10); len(got) != 0 {
			t.Fatalf("History of an unknown group = %v", got)
		}
		if _, err := l.AppendIndexed(ctx, ids[3], []events.Draft{{Data: payload(6), Index: a}}); !errors.Is(err, events.ErrConflict) {
			t.Fatalf("stale indexed append: %v, want ErrConflict", err)
		}
		if got, _ := l.History(ctx, a, events.ZeroID, 10); len(got) != 3 {
			t.Fatalf("a refused append indexed something: %v", got)
		}
	})

	t.Run("restore", func(t *testing.T) {
		l := newLog(t)
		rs, ok := l.(events.Restorable)
		if !ok {
			t.Skip("the log records no restores")
		}
		if id, err := rs.LastRestore(ctx); err != nil || id != "" {
			t.Fatalf("LastRestore of a new log = %q, %v; want none", id, err)
		}
		ids, err := l.Append(ctx, events.ZeroID, [][]byte{payload(1)})
		if err != nil {
			t.Fatal(err)
		}
		if err := rs.AppendRestore(ctx, events.ZeroID, "9999999999999-5", payload(2)); !errors.Is(err, events.ErrConflict) {
			t.Fatalf("restore at a stale position: %v, want ErrConflict", err)
		}
		if err := rs.AppendRestore(ctx, ids[0], ids[0], payload(2)); err == nil {
			t.Fatal("a restore entry not above the position landed")
		}
		const at = "9999999999999-5" // above anything the clock gives
		if err := rs.AppendRestore(ctx, ids[0], at, payload(2)); err != nil {
			t.Fatal(err)
		}
		if got, err := rs.LastRestore(ctx); err != nil || got != at {
			t.Fatalf("LastRestore = %q, %v; want %s", got, err, at)
		}
		if got := MustLastID(t, l); got != at {
			t.Fatalf("LastID after the restore = %s, want %s", got, at)
		}
		// Appends go on from the restore entry.
		more, err := l.Append(ctx, at, [][]byte{payload(3)})
		if err != nil {
			t.Fatal(err)
		}
		entries, err := l.Read(ctx, events.ZeroID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 3 || entries[1].ID != at || string(entries[1].Data) != string(payload(2)) || entries[2].ID != more[0] {
			t.Fatalf("entries after the restore: %v", entries)
		}
	})

	t.Run("empty log is at ZeroID", func(t *testing.T) {
		l := newLog(t)
		last := MustLastID(t, l)
		if last != events.ZeroID {
			t.Fatalf("LastID = %q, want %q", last, events.ZeroID)
		}
		if n, _ := l.Len(ctx); n != 0 {
			t.Fatalf("Len = %d, want 0", n)
		}
	})

	t.Run("append then read in order", func(t *testing.T) {
		l := newLog(t)
		ids, err := l.Append(ctx, events.ZeroID, [][]byte{payload(1), payload(2)})
		if err != nil {
			t.Fatal(err)
		}
		ids2, err := l.Append(ctx, ids[1], [][]byte{payload(3)})
		if err != nil {
			t.Fatal(err)
		}
		all, err := l.Read(ctx, events.ZeroID, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 3 || string(all[0].Data) != "entry-1" || string(all[2].Data) != "entry-3" || all[2].ID != ids2[0] {
			t.Fatalf("read %+v", all)
		}
		after, _ := l.Read(ctx, ids[0], 1)
		if len(after) != 1 || after[0].ID != ids[1] {
			t.Fatalf("read after %s count 1 = %+v", ids[0], after)
		}
		if last := MustLastID(t, l); last != ids2[0] {
			t.Fatalf("LastID = %s, want %s", last, ids2[0])
		}
		if n, _ := l.Len(ctx); n != 3 {
			t.Fatalf("Len = %d, want 3", n)
		}
		got, err := l.Get(ctx, []string{ids2[0], ids[0], "999999999999-0"})
		if err != nil || len(got) != 2 || got[0].ID != ids2[0] || got[1].ID != ids[0] {
			t.Fatalf("Get = %+v, %v", got, err)
		}
	})

	t.Run("stale position conflicts and writes nothing", func(t *testing.T) {
		l := newLog(t)
		ids, err := l.Append(ctx, events.ZeroID, [][]byte{payload(1)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.Append(ctx, events.ZeroID, [][]byte{payload(2), payload(3), payload(4)})
		if !errors.Is(err, events.ErrConflict) {
			t.Fatalf("append at stale position: err = %v, want ErrConflict", err)
		}
		all, _ := l.Read(ctx, events.ZeroID, 0)
		if len(all) != 1 || all[0].ID != ids[0] {
			t.Fatalf("log after conflicting batch = %d entries, want 1", len(all))
		}
	})

	t.Run("concurrent appends at one position: exactly one wins", func(t *testing.T) {
		l := newLog(t)
		base, err := l.Append(ctx, events.ZeroID, [][]byte{payload(0)})
		if err != nil {
			t.Fatal(err)
		}
		const writers = 20
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins, conflicts := 0, 0
		for i := 0; i < writers; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, err := l.Append(ctx, base[0], [][]byte{payload(100 + i), payload(200 + i)})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
				case errors.Is(err, events.ErrConflict):
					conflicts++
				default:
					t.Errorf("append: %v", err)
				}
			}(i)
		}
		wg.Wait()
		if wins != 1 || conflicts != writers-1 {
			t.Fatalf("wins=%d conflicts=%d, want 1 and %d", wins, conflicts, writers-1)
		}
		all, _ := l.Read(ctx, events.ZeroID, 0)
		if len(all) != 3 {
			t.Fatalf("log holds %d entries, want 3 (base + one whole batch)", len(all))
		}
		var a, b int
		fmt.Sscanf(string(all[1].Data), "entry-%d", &a)
		fmt.Sscanf(string(all[2].Data), "entry-%d", &b)
		if b-a != 100 {
			t.Fatalf("batch interleaved: %q then %q", all[1].Data, all[2].Data)
		}
	})

	t.Run("tail wakes on a new entry", func(t *testing.T) {
		l := newLog(t)
		done := make(chan []events.Entry, 1)
		go func() {
			got, err := l.Tail(ctx, events.ZeroID, 10, 5*time.Second)
			if err != nil {
				t.Error(err)
			}
			done <- got
		}()
		time.Sleep(50 * time.Millisecond)
		if _, err := l.Append(ctx, events.ZeroID, [][]byte{payload(7)}); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-done:
			if len(got) != 1 || string(got[0].Data) != "entry-7" {
				t.Fatalf("tail got %+v", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("tail did not wake")
		}
	})

	t.Run("tail returns empty after the block time", func(t *testing.T) {
		l := newLog(t)
		got, err := l.Tail(ctx, events.ZeroID, 10, 50*time.Millisecond)
		if err != nil || len(got) != 0 {
			t.Fatalf("tail on empty log = %+v, %v", got, err)
		}
	})

	t.Run("malformed position is an error", func(t *testing.T) {
		l := newLog(t)
		if _, err := l.Append(ctx, "not-an-id", [][]byte{payload(1)}); err == nil {
			t.Fatal("append with malformed position succeeded")
		}
	})
}

// MustLastID returns the log's last id or fails the test.
func MustLastID(tb testing.TB, l events.Log) string {
	tb.Helper()
	id, err := l.LastID(context.Background())
	if err != nil {
		tb.Fatalf("LastID: %v", err)
	}
	return id
}
