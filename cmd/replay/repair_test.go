package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/replay"
)

// TestIntegrationRepair (reproduction: the only repair that worked was
// copying every other entry by hand, with its id, into a new stream and
// RENAMEing it over the log). replay verify names the entry that quarantines
// a prefix; replay repair --skip leaves it out while every other entry keeps
// its id, refuses while a coordinator holds the lease (unless told), sets
// aside the snapshots that hold the entry's effect, and records who, why and
// which ids in the log; verify then passes.
func TestIntegrationRepair(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	const stream = "test:repair"
	n := appendFixture(t, rdb, stream)
	log := redisstore.NewLog(rdb, stream)
	before := MustReadAll(t, log)
	// A snapshot from before the bad entry, and one after it.
	snaps := redisstore.NewSnapshotStore(rdb, stream)
	older, _, err := replay.StateAt(ctx, log, replay.Point{UntilID: before[n/2].ID})
	if err != nil {
		t.Fatal(err)
	}
	saveSnapshot(t, snaps, older)

	payload, _ := msgpack.Marshal(map[string]any{"to": "mars"})
	data, _ := msgpack.Marshal(map[string]any{"type": "group.teleported", "v": 1, "prefix": "orders", "group": "billing", "time": time.Now().UnixNano(), "payload": msgpack.RawMessage(payload)})
	bad, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{"e": data}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	newer, _, err := replay.StateAt(ctx, log, replay.Point{})
	if err != nil {
		t.Fatal(err)
	}
	saveSnapshot(t, snaps, newer)
	remote := []string{"--redis", srv.URL(), "--log-stream", stream}

	r := mustRun(t, exitFailed, append(remote, "verify", "-o", "text")...)
	if !strings.Contains(r.stdout, "quarantining: "+bad+" orders \"group.teleported\"") || !strings.Contains(r.stdout, "replay repair --skip "+bad) {
		t.Fatalf("verify does not name %s:\n%s", bad, r.stdout)
	}
	// replay events lists it as unreadable and goes on.
	r = mustRun(t, exitOK, append(remote, "events")...)
	if !strings.Contains(r.stdout, `"id":"`+bad+`","type":"group.teleported"`) || !strings.Contains(r.stdout, `"unreadable":"unknown event type"`) {
		t.Fatalf("events does not list %s as unreadable:\n%s", bad, r.stdout)
	}

	mustRun(t, exitUsage, append(remote, "repair", "--skip", bad)...) // no --reason
	mustRun(t, exitUsage, append(remote, "repair", "--reason", "r")...)
	lease, err := redisstore.NewLease(rdb, stream, "c1", "http://c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.Acquire(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	r = mustRun(t, exitFailed, append(remote, "repair", "--skip", bad, "--reason", "newer build")...)
	if !strings.Contains(r.stderr, "c1") || !strings.Contains(r.stderr, "--ignore-lease") {
		t.Fatalf("refusal under the lease does not name the holder and the flag:\n%s", r.stderr)
	}
	if kept, _ := snaps.Kept(ctx); len(kept) != 2 {
		t.Fatalf("the refused repair changed the snapshots: %v", kept)
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}

	r = mustRun(t, exitOK, append(remote, "repair", "--skip", bad, "--reason", "entry of a newer build", "--requested-by", "alice")...)
	var out repairOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatal(err)
	}
	if out.SkippedCount != 1 || out.Skipped[0] != bad || out.Kept != int64(n) || len(out.SnapshotsSetAside) != 1 || out.SnapshotsSetAside[0] != newer.LastID() {
		t.Fatalf("repair output %+v", out)
	}
	after := MustReadAll(t, log)
	if len(after) != n+1 {
		t.Fatalf("repaired log holds %d entries, want %d and the record", len(after), n)
	}
	for i := range before {
		if after[i].ID != before[i].ID || string(after[i].Data) != string(before[i].Data) {
			t.Fatalf("entry %d changed: %s, want %s", i, after[i].ID, before[i].ID)
		}
	}
	if kept, _ := snaps.Kept(ctx); len(kept) != 1 || kept[0] != older.LastID() {
		t.Errorf("kept snapshots %v, want the one before the entry", kept)
	}
	rec, err := events.Decode(after[n].ID, after[n].Data)
	if err != nil {
		t.Fatal(err)
	}
	lr, ok := rec.Event.(*events.LogRepaired)
	if !ok || lr.RequestedBy != "alice" || lr.Reason != "entry of a newer build" || len(lr.Skipped) != 1 || lr.Skipped[0] != bad || lr.PreviousLog != out.PreviousLog || rec.Actor != "alice" {
		t.Fatalf("record %+v (%+v)", rec, rec.Event)
	}
	if n, _ := rdb.XLen(ctx, out.PreviousLog).Result(); n != int64(len(before))+1 {
		t.Errorf("the log before the repair (%s) holds %d entries", out.PreviousLog, n)
	}
	mustRun(t, exitOK, append(remote, "verify")...)
	r = mustRun(t, exitOK, append(remote, "events", "--type", "log.repaired")...)
	if !strings.Contains(r.stdout, `"requestedBy":"alice"`) {
		t.Fatalf("events --type log.repaired:\n%s", r.stdout)
	}
	mustRun(t, exitFailed, append(remote, "repair", "--skip", bad, "--reason", "again")...) // not in the log any more
}

func MustReadAll(t *testing.T, l events.Log) []events.Entry {
	t.Helper()
	entries, err := l.Read(context.Background(), events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

func saveSnapshot(t *testing.T, s *redisstore.SnapshotStore, st interface {
	Encode() ([]byte, error)
	LastID() string
}) {
	t.Helper()
	data, err := st.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Save(context.Background(), st.LastID(), data, 2); err != nil {
		t.Fatal(err)
	}
}
