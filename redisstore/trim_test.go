package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/redisstore"
)

// keepHistory keeps the entries whose data starts with "history".
func keepHistory(e events.Entry) bool { return strings.HasPrefix(string(e.Data), "history") }

// trimFixture appends 4 history and 4 chatter entries, interleaved.
func trimFixture(t *testing.T, rdb *redis.Client) (*redisstore.Log, []string) {
	t.Helper()
	l := redisstore.NewLog(rdb, uniqueKey("test:events"))
	var batch [][]byte
	for i := 0; i < 8; i++ {
		if i%2 == 0 {
			batch = append(batch, []byte("history "+string(rune('a'+i))))
		} else {
			batch = append(batch, []byte("chatter "+string(rune('a'+i))))
		}
	}
	return l, MustAppend(t, l, events.ZeroID, batch...)
}

func entryIDs(entries []events.Entry) []string {
	out := []string{}
	for _, e := range entries {
		out = append(out, e.ID)
	}
	return out
}

func TestIntegrationTrimBefore(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)

	t.Run("archives the kept entries and trims the rest", func(t *testing.T) {
		l, ids := trimFixture(t, rdb)
		if got, err := l.TrimmedTo(ctx); err != nil || got != events.ZeroID {
			t.Fatalf("TrimmedTo before any trim = %q, %v", got, err)
		}
		archived, removed, err := l.TrimBefore(ctx, ids[5], keepHistory)
		if err != nil || archived != 3 || removed != 5 {
			t.Fatalf("TrimBefore(%s) = %d archived, %d removed, %v; want 3, 5", ids[5], archived, removed, err)
		}
		if got := entryIDs(MustRead(t, l, events.ZeroID)); strings.Join(got, ",") != strings.Join(ids[5:], ",") {
			t.Errorf("log holds %v, want %v", got, ids[5:])
		}
		arch := MustRead(t, l.Archive(), events.ZeroID)
		if got, want := entryIDs(arch), []string{ids[0], ids[2], ids[4]}; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("archive holds %v, want the history entries %v under their log ids", got, want)
		}
		for _, e := range arch {
			if !keepHistory(e) {
				t.Errorf("archive entry %s = %q", e.ID, e.Data)
			}
		}
		// Everything up to the entry before ids[5] may be gone, nothing after.
		got, err := l.TrimmedTo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := events.CompareIDs(got, ids[4]); c < 0 {
			t.Errorf("TrimmedTo = %s, before the removed %s", got, ids[4])
		}
		if c, _ := events.CompareIDs(got, ids[5]); c >= 0 {
			t.Errorf("TrimmedTo = %s, not before the kept %s", got, ids[5])
		}
		if n, _ := rdb.XLen(ctx, l.Key()).Result(); n != 3 {
			t.Errorf("XLEN = %d, want 3", n)
		}
	})

	t.Run("compare-and-append is unaffected", func(t *testing.T) {
		l, ids := trimFixture(t, rdb)
		if _, _, err := l.TrimBefore(ctx, ids[7], keepHistory); err != nil {
			t.Fatal(err)
		}
		if last, err := l.LastID(ctx); err != nil || last != ids[7] {
			t.Fatalf("LastID after the trim = %s, %v; want %s", last, err, ids[7])
		}
		if _, err := l.Append(ctx, ids[6], [][]byte{[]byte("stale")}); !errors.Is(err, events.ErrConflict) {
			t.Errorf("append from a stale position after a trim: %v, want ErrConflict", err)
		}
		next := MustAppend(t, l, ids[7], []byte("history i"))
		if c, _ := events.CompareIDs(next[0], ids[7]); c <= 0 {
			t.Errorf("appended %s, not after %s", next[0], ids[7])
		}
		// Everything trimmed: the stream still exists and still knows its last id.
		if _, _, err := l.TrimBefore(ctx, "99999999999999-0", nil); err != nil {
			t.Fatal(err)
		}
		if last, _ := l.LastID(ctx); last != next[0] {
			t.Errorf("LastID of an emptied log = %s, want %s", last, next[0])
		}
		MustAppend(t, l, next[0], []byte("history j"))
	})

	t.Run("a re-run after a crash copies nothing twice", func(t *testing.T) {
		l, ids := trimFixture(t, rdb)
		// The crashed run archived the first history entry and died before the trim.
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: l.ArchiveKey(), ID: ids[0], Values: []any{"e", "history a"}}).Err(); err != nil {
			t.Fatal(err)
		}
		archived, removed, err := l.TrimBefore(ctx, ids[4], keepHistory)
		if err != nil || archived != 1 || removed != 4 {
			t.Fatalf("re-run = %d archived, %d removed, %v; want 1 (ids[2]), 4", archived, removed, err)
		}
		archived, removed, err = l.TrimBefore(ctx, ids[4], keepHistory)
		if err != nil || archived != 0 || removed != 0 {
			t.Fatalf("same trim again = %d archived, %d removed, %v; want 0, 0", archived, removed, err)
		}
		// Copied but not trimmed (crash after the copy): the next trim skips it.
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: l.ArchiveKey(), ID: ids[4], Values: []any{"e", "history e"}}).Err(); err != nil {
			t.Fatal(err)
		}
		if archived, _, err := l.TrimBefore(ctx, ids[7], keepHistory); err != nil || archived != 1 {
			t.Fatalf("next trim = %d archived, %v; want 1 (ids[6])", archived, err)
		}
		if got := entryIDs(MustRead(t, l.Archive(), events.ZeroID)); strings.Join(got, ",") != strings.Join([]string{ids[0], ids[2], ids[4], ids[6]}, ",") {
			t.Errorf("archive = %v", got)
		}
	})

	t.Run("concurrent trims", func(t *testing.T) {
		l, ids := trimFixture(t, rdb)
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, _, err := l.TrimBefore(ctx, ids[7], keepHistory); err != nil {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if n, _ := l.Archive().Len(ctx); n != 4 {
			t.Errorf("archive holds %d entries, want 4", n)
		}
	})

	t.Run("read with the archive", func(t *testing.T) {
		l, ids := trimFixture(t, rdb)
		if _, _, err := l.TrimBefore(ctx, ids[6], keepHistory); err != nil {
			t.Fatal(err)
		}
		h := events.WithArchive(l, l.Archive())
		got := entryIDs(MustRead(t, h, events.ZeroID))
		if want := []string{ids[0], ids[2], ids[4], ids[6], ids[7]}; strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("history = %v, want %v", got, want)
		}
		found, err := h.Get(ctx, []string{ids[1], ids[2], ids[7]})
		if err != nil || strings.Join(entryIDs(found), ",") != ids[2]+","+ids[7] {
			t.Errorf("Get = %v, %v", entryIDs(found), err)
		}
	})
}

// TestIntegrationDeletedEntryIsNotATrim: an entry an operator deleted with
// XDEL is a gap, never a trim point (it was: XINFO's max-deleted-entry-id was
// taken for one, and start-up without a snapshot reaching it stopped for
// good). A trim is recorded, and a gap after it is still a gap.
func TestIntegrationDeletedEntryIsNotATrim(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)
	l, ids := trimFixture(t, rdb)
	if err := rdb.XDel(ctx, l.Key(), ids[3]).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := l.TrimmedTo(ctx); err != nil || got != events.ZeroID {
		t.Fatalf("TrimmedTo after an XDEL = %q, %v; want 0-0 (the log was never trimmed)", got, err)
	}
	n, maxDeleted, err := l.Gaps(ctx)
	if err != nil || n != 1 || maxDeleted != ids[3] {
		t.Fatalf("Gaps = %d, %q, %v; want 1 entry, the last %s", n, maxDeleted, err, ids[3])
	}

	// A trim is recorded where it trimmed; the XDEL'd entry after it is
	// still a gap.
	if _, _, err := l.TrimBefore(ctx, ids[2], keepHistory); err != nil {
		t.Fatal(err)
	}
	to, err := l.TrimmedTo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := events.CompareIDs(to, ids[1]); c < 0 {
		t.Errorf("TrimmedTo = %s, before the trimmed %s", to, ids[1])
	}
	if c, _ := events.CompareIDs(to, ids[2]); c >= 0 {
		t.Errorf("TrimmedTo = %s, not before the kept %s", to, ids[2])
	}
	if n, maxDeleted, err := l.Gaps(ctx); err != nil || n != 1 || maxDeleted != ids[3] {
		t.Errorf("Gaps after the trim = %d, %q, %v; want the one XDEL'd entry %s", n, maxDeleted, err, ids[3])
	}
	// A trim that removes nothing moves nothing.
	if _, _, err := l.TrimBefore(ctx, ids[2], keepHistory); err != nil {
		t.Fatal(err)
	}
	if again, _ := l.TrimmedTo(ctx); again != to {
		t.Errorf("TrimmedTo moved from %s to %s on a trim that removed nothing", to, again)
	}
}

// TestIntegrationLegacyTrimmedLog: a log trimmed by a build that recorded
// nothing (an archive, no record) is recognised as trimmed up to the entry
// before its first one, also after an XDEL further on; AdoptTrimRecord writes
// that once, and a log with no archive is adopted as never trimmed.
func TestIntegrationLegacyTrimmedLog(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)

	l, ids := trimFixture(t, rdb)
	// What an earlier build's trim left: archived copies, XTRIM, no record.
	for _, i := range []int{0, 2} {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: l.ArchiveKey(), ID: ids[i], Values: []any{"e", "history"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.XTrimMinID(ctx, l.Key(), ids[4]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XDel(ctx, l.Key(), ids[6]).Err(); err != nil {
		t.Fatal(err)
	}
	to, err := l.TrimmedTo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := events.CompareIDs(to, ids[3]); c < 0 {
		t.Fatalf("legacy TrimmedTo = %s, before the trimmed %s", to, ids[3])
	}
	if c, _ := events.CompareIDs(to, ids[4]); c >= 0 {
		t.Fatalf("legacy TrimmedTo = %s, not before the first entry %s (the XDEL of %s is not a trim)", to, ids[4], ids[6])
	}
	adopted, set, err := l.AdoptTrimRecord(ctx)
	if err != nil || !set || adopted != to {
		t.Fatalf("AdoptTrimRecord = %s, %v, %v; want %s written", adopted, set, err, to)
	}
	// From now on the record decides: deleting the first entry is a gap.
	if err := rdb.XDel(ctx, l.Key(), ids[4]).Err(); err != nil {
		t.Fatal(err)
	}
	if again, _ := l.TrimmedTo(ctx); again != to {
		t.Errorf("TrimmedTo after an XDEL of the first entry = %s, want the recorded %s", again, to)
	}
	if _, set, _ := l.AdoptTrimRecord(ctx); set {
		t.Error("AdoptTrimRecord wrote a second time")
	}

	fresh, fids := trimFixture(t, rdb)
	if err := rdb.XDel(ctx, fresh.Key(), fids[0]).Err(); err != nil {
		t.Fatal(err)
	}
	if adopted, set, err := fresh.AdoptTrimRecord(ctx); err != nil || !set || adopted != events.ZeroID {
		t.Fatalf("AdoptTrimRecord of a never trimmed log with its first entry deleted = %s, %v, %v; want 0-0", adopted, set, err)
	}
}
