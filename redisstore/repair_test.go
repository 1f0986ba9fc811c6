package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/redisstore"
)

// repairRecord is a Record function that writes a marker.
func repairRecord(r redisstore.RepairResult) ([]byte, error) {
	return []byte("repaired " + strings.Join(r.Skipped, ",")), nil
}

// TestIntegrationRepairSkipsEntries: a repair leaves the named entries out,
// keeps every other entry's id and data, keeps the old log aside, drops the
// entries' history index and archive copies, ends the log with its record
// after the old log's last id, and leaves XINFO saying what was deleted.
func TestIntegrationRepairSkipsEntries(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)
	l := redisstore.NewLog(rdb, uniqueKey("test:events"))
	var drafts []events.Draft
	for i := 0; i < 6; i++ {
		drafts = append(drafts, events.Draft{Data: []byte{byte('a' + i)}, Index: "orders/g"})
	}
	ids, err := l.AppendIndexed(ctx, events.ZeroID, drafts)
	if err != nil {
		t.Fatal(err)
	}
	before := MustRead(t, l, events.ZeroID)
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: l.ArchiveKey(), ID: ids[1], Values: []any{"e", "b"}}).Err(); err != nil {
		t.Fatal(err)
	}
	// The last entry is skipped too: the log's last generated id stays past it.
	res, err := l.Repair(ctx, redisstore.RepairPlan{Skip: []string{ids[1], ids[5]}, Record: repairRecord})
	if err != nil {
		t.Fatal(err)
	}
	if res.SkippedCount != 2 || res.Kept != 4 || strings.Join(res.Skipped, ",") != ids[1]+","+ids[5] {
		t.Fatalf("result %+v", res)
	}
	after := MustRead(t, l, events.ZeroID)
	if len(after) != 5 {
		t.Fatalf("repaired log holds %d entries, want 4 kept and the record", len(after))
	}
	for i, want := range []events.Entry{before[0], before[2], before[3], before[4]} {
		if after[i].ID != want.ID || string(after[i].Data) != string(want.Data) {
			t.Errorf("entry %d = %s %q, want %s %q", i, after[i].ID, after[i].Data, want.ID, want.Data)
		}
	}
	rec := after[4]
	if rec.ID != res.RecordID || !strings.HasPrefix(string(rec.Data), "repaired ") {
		t.Errorf("last entry %s %q, want the record %s", rec.ID, rec.Data, res.RecordID)
	}
	if c, _ := events.CompareIDs(rec.ID, ids[5]); c <= 0 {
		t.Errorf("record %s is not after the old log's last id %s", rec.ID, ids[5])
	}
	if last, _ := l.LastID(ctx); last != rec.ID {
		t.Errorf("LastID = %s, want the record %s (appends go on after it)", last, rec.ID)
	}
	if n, maxDeleted, err := l.Gaps(ctx); err != nil || n != 2 || maxDeleted != ids[5] {
		t.Errorf("Gaps = %d, %s, %v; want the 2 entries left out, the last %s", n, maxDeleted, err, ids[5])
	}
	if got := entryIDs(MustRead(t, redisstore.NewLog(rdb, res.PreviousLog), events.ZeroID)); strings.Join(got, ",") != strings.Join(ids, ",") {
		t.Errorf("previous log %s holds %v, want the log before the repair", res.PreviousLog, got)
	}
	hist, err := l.History(ctx, "orders/g", events.ZeroID, 100)
	if err != nil || strings.Join(hist, ",") != strings.Join([]string{ids[0], ids[2], ids[3], ids[4]}, ",") {
		t.Errorf("history index = %v, %v; want the entries left out gone", hist, err)
	}
	if n, _ := rdb.XLen(ctx, l.ArchiveKey()).Result(); n != 0 {
		t.Errorf("archive keeps %d copies of entries left out", n)
	}
	if n, _ := rdb.Exists(ctx, "{"+l.Key()+"}:repair").Result(); n != 0 {
		t.Error("the work key is left behind")
	}
	MustAppend(t, l, rec.ID, []byte("after the repair"))

	// An entry that is not in the log is refused, and nothing changes.
	if _, err := l.Repair(ctx, redisstore.RepairPlan{Skip: []string{ids[1]}, Record: repairRecord}); !errors.Is(err, redisstore.ErrNotInLog) {
		t.Errorf("repair of an entry already left out: %v, want ErrNotInLog", err)
	}
}

// TestIntegrationRepairRefusesWhileLeased: a coordinator holding the log's
// lease refuses the repair, unless told to go on.
func TestIntegrationRepairRefusesWhileLeased(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)
	l := redisstore.NewLog(rdb, uniqueKey("test:events"))
	ids := MustAppend(t, l, events.ZeroID, []byte("a"), []byte("b"))
	lease := mustLease(t, rdb, l.Key(), "c1", "http://c1")
	mustAcquire(t, lease, time.Minute)
	_, err := l.Repair(ctx, redisstore.RepairPlan{Skip: []string{ids[0]}, Record: repairRecord})
	if !errors.Is(err, redisstore.ErrLeaseHeld) || !strings.Contains(err.Error(), "c1") {
		t.Fatalf("repair under a held lease: %v, want ErrLeaseHeld naming c1", err)
	}
	if n, _ := l.Len(ctx); n != 2 {
		t.Fatalf("the refused repair changed the log (%d entries)", n)
	}
	res, err := l.Repair(ctx, redisstore.RepairPlan{Skip: []string{ids[0]}, IgnoreLease: true, Record: repairRecord})
	if err != nil || !strings.HasPrefix(res.LeaseHolder, "c1") {
		t.Fatalf("repair with IgnoreLease: %+v, %v", res, err)
	}
}

// TestIntegrationRepairThroughSnapshot: a repair through an id keeps the
// entries up to it, leaves out every later one, and raises the trim point to
// it; on a log that is gone (moved aside by hand) it makes a log of the
// record alone, trimmed to that id.
func TestIntegrationRepairThroughSnapshot(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)
	l, ids := trimFixture(t, rdb)
	res, err := l.Repair(ctx, redisstore.RepairPlan{Through: ids[3], Record: repairRecord})
	if err != nil {
		t.Fatal(err)
	}
	got := entryIDs(MustRead(t, l, events.ZeroID))
	if want := append(append([]string{}, ids[:4]...), res.RecordID); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("log = %v, want %v", got, want)
	}
	if to, _ := l.TrimmedTo(ctx); to != ids[3] || res.TrimmedTo != ids[3] {
		t.Errorf("TrimmedTo = %s (result %s), want %s", to, res.TrimmedTo, ids[3])
	}

	gone := redisstore.NewLog(rdb, uniqueKey("test:events"))
	MustAppend(t, gone, events.ZeroID, []byte("a"))
	if err := rdb.Rename(ctx, gone.Key(), gone.Key()+":aside").Err(); err != nil {
		t.Fatal(err)
	}
	res, err = gone.Repair(ctx, redisstore.RepairPlan{Through: "1700000000000-5", Record: repairRecord})
	if err != nil {
		t.Fatal(err)
	}
	if got := entryIDs(MustRead(t, gone, events.ZeroID)); len(got) != 1 || got[0] != res.RecordID {
		t.Errorf("log = %v, want the record alone", got)
	}
	if to, _ := gone.TrimmedTo(ctx); to != "1700000000000-5" {
		t.Errorf("TrimmedTo = %s, want the snapshot's id", to)
	}
}

// TestIntegrationSnapshotSetAside: the snapshots a repair sets aside leave
// the store (their bytes kept under set-aside keys), and the newest one that
// stays is where the newest lives.
func TestIntegrationSnapshotSetAside(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)
	s := redisstore.NewSnapshotStore(rdb, uniqueKey("test:events"))
	for _, id := range []string{"1-0", "2-0", "3-0"} {
		if err := s.Save(ctx, id, []byte("snap "+id), 3); err != nil {
			t.Fatal(err)
		}
	}
	aside, err := s.SetAside(ctx, func(id string) bool { c, _ := events.CompareIDs(id, "2-0"); return c >= 0 }, "", "t1")
	if err != nil || strings.Join(aside, ",") != "3-0,2-0" {
		t.Fatalf("SetAside = %v, %v; want 3-0 and 2-0", aside, err)
	}
	if kept, _ := s.Kept(ctx); strings.Join(kept, ",") != "1-0" {
		t.Errorf("kept %v, want 1-0", kept)
	}
	if data, _ := s.Load(ctx); string(data) != "snap 1-0" {
		t.Errorf("newest = %q, want snap 1-0", data)
	}
	for _, id := range aside {
		key, _ := redisstore.SameSlotKey(s.Key(), "set-aside:t1:"+id)
		if data, _ := rdb.Get(ctx, key).Result(); data != "snap "+id {
			t.Errorf("%s = %q, want the snapshot kept", key, data)
		}
	}
	if err := s.Save(ctx, "4-0", []byte("snap 4-0"), 3); err != nil {
		t.Fatal(err)
	}
	if kept, _ := s.Kept(ctx); strings.Join(kept, ",") != "4-0,1-0" {
		t.Errorf("kept after a new save %v, want 4-0,1-0", kept)
	}
}
