package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/internal/redistest"
)

// verifyResult is what the runbook reads from `replay verify -o json`.
type verifyResult struct {
	Match        bool `json:"match"`
	Quarantining []struct {
		ID           string `json:"id"`
		StreamPrefix string `json:"streamPrefix"`
	} `json:"quarantining"`
	Snapshot *struct {
		LastID string `json:"lastId"`
	} `json:"snapshot"`
	Problems []string `json:"problems"`
}

func decodeVerify(t *testing.T, r replayRun) verifyResult {
	t.Helper()
	var v verifyResult
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("replay verify output: %v\n%s", err, r.stdout)
	}
	return v
}

// TestIntegrationCorruptLogRunbook executes every step of the runbook for a
// corrupt log (docs/operations.md, Runbook: a corrupt log), as an operator
// types them, against a real Redis:
//
//   - an entry of a newer build quarantines its prefix: find it (health,
//     replay verify), keep a copy (replay export), stop, replay repair --skip,
//     start: the prefix is served again;
//   - an entry whose envelope cannot be read stops the coordinator: find it
//     (/readyz, replay verify), replay repair --skip, start;
//   - the log is beyond repair and moved aside (reproduction: following the
//     README's "start from the last good snapshot after moving the log
//     aside" literally ended READY at lastEventId 0-0 with no streams, the
//     snapshot newer than the emptied log ignored): find the last good
//     snapshot (replay verify), replay repair --from-snapshot, start: the
//     snapshot's state is served and the coordinator goes on deciding.
func TestIntegrationCorruptLogRunbook(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	stream := fmt.Sprintf("coordinator:events:runbook:%d", time.Now().UnixNano())
	opts := func(m *Main) { m.LogStream = stream }
	tc := startCoordinator(t, rs, opts)
	createGroup(t, tc, "payments", "ledger", 2)
	createGroup(t, tc, "orders", "billing", 3)
	beatOK(t, tc, "payments", "ledger", "p1", 0, 0, nil)

	func() { // an entry of a newer build
		bad := xadd(t, rdb, stream, rawLogEntry(t, "orders.teleported", "orders", "billing", map[string]any{"to": "mars"}))
		eventually(t, 10*time.Second, "orders quarantined", func() bool {
			return tc.Do("GET", "/coord/v1/streams/orders/groups/billing", nil).Status == 409
		})
		// 1. Find it: the health names each quarantined prefix and its entry;
		// replay verify names every entry that would quarantine a prefix.
		h := tc.Do("GET", "/coord/v1/monitoring/health", nil).MustStatus(t, 200)
		if !strings.Contains(string(h.Body), bad) {
			t.Fatalf("health %s does not name %s", h.Body, bad)
		}
		v := decodeVerify(t, mustReplay(t, rs, stream, 1, "verify", "-o", "json"))
		if len(v.Quarantining) != 1 || v.Quarantining[0].ID != bad || v.Quarantining[0].StreamPrefix != "orders" {
			t.Fatalf("verify names %+v, want %s of orders", v.Quarantining, bad)
		}
		// 2. Keep a copy of the log as it is.
		file := filepath.Join(t.TempDir(), "log-before-repair.jsonl")
		mustReplay(t, rs, stream, 0, "export", "--out", file)
		if data, err := os.ReadFile(file); err != nil || !strings.Contains(string(data), bad) {
			t.Fatalf("the export does not hold %s: %v", bad, err)
		}
		// 3. Stop the coordinator; 4. leave the entry out; 5. start it.
		_ = tc.Main.Close()
		mustReplay(t, rs, stream, 0, "repair", "--skip", bad, "--reason", "entry of a newer build", "--requested-by", "runbook")
		tc = startCoordinator(t, rs, opts)
		tc.Do("GET", "/coord/v1/streams/orders/groups/billing", nil).MustStatus(t, 200)
		if v := decodeVerify(t, mustReplay(t, rs, stream, 0, "verify", "-o", "json")); !v.Match {
			t.Fatalf("verify after the repair: %+v", v)
		}
	}()

	func() { // an entry whose envelope cannot be read
		bad := xadd(t, rdb, stream, []byte("\xc1\xff not msgpack"))
		eventually(t, 10*time.Second, "the coordinator stops on "+bad, func() bool {
			r := tc.DoAs("", "", "GET", "/readyz", nil)
			return r.Status == 503 && r.JSON["status"] == "METADATA_CORRUPT" && strings.Contains(fmt.Sprint(r.JSON["message"]), bad)
		})
		wantCorrupt(t, "payments routing", tc.Do("GET", "/coord/v1/streams/payments/groups/ledger/producer-routing", nil), bad)
		if r := mustReplay(t, rs, stream, 3, "verify"); !strings.Contains(r.stderr, bad) {
			t.Fatalf("verify does not name %s: %s", bad, r.stderr)
		}
		_ = tc.Main.Close()
		mustReplay(t, rs, stream, 0, "repair", "--skip", bad, "--reason", "corrupt bytes", "--requested-by", "runbook")
		tc = startCoordinator(t, rs, opts)
		tc.Do("GET", "/coord/v1/streams/payments/groups/ledger/producer-routing", nil).MustStatus(t, 200)
	}()

	func() { // start from the last good snapshot
		_ = tc.Main.Close() // writes a snapshot
		before := tc.Main.Coordinator().Replica.State().Groups()
		// The log is beyond repair: moved aside.
		if err := rdb.Rename(ctx, stream, stream+":broken").Err(); err != nil {
			t.Fatal(err)
		}
		// 1. The last good snapshot: replay verify reports the stored one.
		v := decodeVerify(t, mustReplay(t, rs, stream, 1, "verify", "-o", "json"))
		if v.Snapshot == nil || v.Snapshot.LastID == "" {
			t.Fatalf("verify names no snapshot: %+v", v)
		}
		// 2. Start the log again from it; 3. start the coordinator.
		mustReplay(t, rs, stream, 0, "repair", "--from-snapshot", v.Snapshot.LastID, "--reason", "log lost", "--requested-by", "runbook")
		tc = startCoordinator(t, rs, opts)
		r := tc.DoAs("", "", "GET", "/readyz", nil).MustStatus(t, 200)
		if r.JSON["lastEventId"] == "0-0" {
			t.Fatalf("/readyz %s: started from nothing", r.Body)
		}
		after := tc.Main.Coordinator().Replica.State().Groups()
		if len(after) != len(before) || len(after) != 2 {
			t.Fatalf("%d groups served after the start from the snapshot, want the snapshot's %d", len(after), len(before))
		}
		tc.Do("GET", "/coord/v1/streams/orders/groups/billing", nil).MustStatus(t, 200)
		// It decides on, and a restart keeps what it decided.
		createGroup(t, tc, "after", "g", 2)
		_ = tc.Main.Close()
		tc = startCoordinator(t, rs, opts)
		tc.Do("GET", "/coord/v1/streams/after/groups/g", nil).MustStatus(t, 200)
		tc.Do("GET", "/coord/v1/streams/payments/groups/ledger", nil).MustStatus(t, 200)
		// The repairs are in the audit history.
		var repaired []string
		for _, e := range apiAllEvents(t, tc, "/coord/v1/monitoring/events") {
			if e.Type == "log.repaired" {
				repaired = append(repaired, e.ID)
			}
		}
		if len(repaired) != 1 {
			t.Errorf("%d log.repaired in the history of the log started from the snapshot, want its own", len(repaired))
		}
	}()
}
