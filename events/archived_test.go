package events_test

import (
	"context"
	"strings"
	"testing"

	"github.com/rscoord/rsc/events"
)

// trimmedPair is a log trimmed behind 6-0 and its archive: 2-0 and 4-0 were
// archived and trimmed, 6-0 was archived but not yet trimmed (a crash between
// the copy and the trim), the other ids were membership and are gone.
func trimmedPair(tb testing.TB) (log, archive *events.MemLog) {
	tb.Helper()
	mk := func(ids ...string) *events.MemLog {
		var entries []events.Entry
		for _, id := range ids {
			entries = append(entries, events.Entry{ID: id, Data: []byte("e" + id)})
		}
		l, err := events.LoadEntries(entries)
		if err != nil {
			tb.Fatal(err)
		}
		return l
	}
	return mk("6-0", "7-0", "8-0"), mk("2-0", "4-0", "6-0")
}

func ids(entries []events.Entry) string {
	var out []string
	for _, e := range entries {
		if string(e.Data) != "e"+e.ID {
			out = append(out, e.ID+"(wrong data)")
			continue
		}
		out = append(out, e.ID)
	}
	return strings.Join(out, ",")
}

func TestWithArchiveRead(t *testing.T) {
	log, archive := trimmedPair(t)
	h := events.WithArchive(log, archive)
	tests := []struct {
		after string
		count int
		want  string
	}{
		{events.ZeroID, 0, "2-0,4-0,6-0,7-0,8-0"},
		{events.ZeroID, 2, "2-0,4-0"},
		{events.ZeroID, 3, "2-0,4-0,6-0"},
		{"2-0", 0, "4-0,6-0,7-0,8-0"},
		{"4-0", 2, "6-0,7-0"},
		{"5-0", 0, "6-0,7-0,8-0"},
		{"6-0", 0, "7-0,8-0"},
		{"8-0", 0, ""},
	}
	for _, tc := range tests {
		got, err := h.Read(context.Background(), tc.after, tc.count)
		if err != nil {
			t.Fatal(err)
		}
		if ids(got) != tc.want {
			t.Errorf("Read(%s, %d) = %s, want %s", tc.after, tc.count, ids(got), tc.want)
		}
	}
}

// Paging through the view with a small page reads every entry once.
func TestWithArchivePages(t *testing.T) {
	log, archive := trimmedPair(t)
	h := events.WithArchive(log, archive)
	var all []events.Entry
	after := events.ZeroID
	for {
		page, err := h.Read(context.Background(), after, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
		after = page[len(page)-1].ID
	}
	if got := ids(all); got != "2-0,4-0,6-0,7-0,8-0" {
		t.Fatalf("pages = %s", got)
	}
}

func TestWithArchiveGet(t *testing.T) {
	log, archive := trimmedPair(t)
	h := events.WithArchive(log, archive)
	got, err := h.Get(context.Background(), []string{"8-0", "3-0", "4", "6-0", "2-0"})
	if err != nil {
		t.Fatal(err)
	}
	if ids(got) != "8-0,4-0,6-0,2-0" {
		t.Fatalf("Get = %s, want the ids asked for that exist, in that order", ids(got))
	}
	if _, err := h.Get(context.Background(), []string{"x"}); err == nil {
		t.Fatal("Get of a malformed id: no error")
	}
}

func TestWithArchiveAppendsToTheLog(t *testing.T) {
	log, archive := trimmedPair(t)
	h := events.WithArchive(log, archive)
	last, err := h.LastID(context.Background())
	if err != nil || last != "8-0" {
		t.Fatalf("LastID = %s, %v; want the log's", last, err)
	}
	if _, err := h.Append(context.Background(), last, [][]byte{[]byte("e9-0")}); err != nil {
		t.Fatal(err)
	}
	if n, _ := log.Len(context.Background()); n != 4 {
		t.Fatalf("log holds %d entries after Append, want 4", n)
	}
	if n, _ := archive.Len(context.Background()); n != 3 {
		t.Fatalf("archive holds %d entries after Append, want 3 (untouched)", n)
	}
}
