package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/redisstore"
)

func mustEncode(tb testing.TB, prefix, group string, ev events.Event) []byte {
	tb.Helper()
	data, err := events.Encode(events.Meta{StreamPrefix: prefix, ConsumerGroup: group, Time: time.Unix(1700000000, 0), Actor: "t"}, ev)
	if err != nil {
		tb.Fatal(err)
	}
	return data
}

// TestIntegrationHistoryIndexBackfillAndTrim: a log written without the index
// (an earlier build) is indexed once by BackfillIndex; later appends index
// themselves; trimming the log drops the membership entries of the index at
// the same point and keeps the resharding and admin ones (the archive holds
// their entries).
func TestIntegrationHistoryIndexBackfillAndTrim(t *testing.T) {
	_, rdb := MustStartRedis(t)
	ctx := context.Background()
	l := redisstore.NewLog(rdb, uniqueKey("test:index"))
	a := events.IndexName("orders", "billing")

	// Written by an earlier build: no index.
	old := MustAppend(t, l, events.ZeroID,
		mustEncode(t, "orders", "billing", &events.GroupCreated{ShardCount: 2, RequestedBy: "alice"}),
		mustEncode(t, "orders", "billing", &events.MemberJoined{MemberID: "m1"}),
		mustEncode(t, "", "", &events.TermStarted{Term: 1}),
		mustEncode(t, "orders", "other", &events.GroupCreated{ShardCount: 1, RequestedBy: "bob"}),
	)
	if got, _ := l.History(ctx, a, events.ZeroID, 10); len(got) != 0 {
		t.Fatalf("history before the backfill: %v", got)
	}
	n, skipped, err := l.BackfillIndex(ctx)
	if err != nil || n != 3 || skipped != 0 {
		t.Fatalf("BackfillIndex = %d indexed, %d skipped, %v; want 3, 0", n, skipped, err)
	}
	if n, _, _ := l.BackfillIndex(ctx); n != 0 {
		t.Fatalf("a second backfill indexed %d entries", n)
	}
	if got, _ := l.History(ctx, a, events.ZeroID, 10); fmt.Sprint(got) != fmt.Sprint(old[:2]) {
		t.Fatalf("history after the backfill = %v, want %v", got, old[:2])
	}

	// This build's appends index themselves.
	ids, err := l.AppendIndexed(ctx, old[3], []events.Draft{
		{Data: mustEncode(t, "orders", "billing", &events.MemberLeft{MemberID: "m1"}), Index: a, Membership: true},
		{Data: mustEncode(t, "orders", "billing", &events.ReshardingPreparing{ReshardingID: "r1", FromShardCount: 2, ToShardCount: 3}), Index: a},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := append(append([]string{}, old[:2]...), ids...)
	if got, _ := l.History(ctx, a, events.ZeroID, 10); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("history = %v, want %v", got, want)
	}

	// Trim before the resharding event: the two membership entries leave the
	// index, the creation stays (archived).
	if _, _, err := l.TrimBefore(ctx, ids[1], func(e events.Entry) bool {
		rec, err := events.Decode(e.ID, e.Data)
		return err != nil || !events.Membership(rec.Type)
	}); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.History(ctx, a, events.ZeroID, 10); fmt.Sprint(got) != fmt.Sprint([]string{old[0], ids[1]}) {
		t.Fatalf("history after the trim = %v, want %v", got, []string{old[0], ids[1]})
	}
	hl := events.WithArchive(l, l.Archive())
	entries, err := hl.Get(ctx, []string{old[0], ids[1]})
	if err != nil || len(entries) != 2 {
		t.Fatalf("the history's entries after the trim: %d, %v", len(entries), err)
	}
}
