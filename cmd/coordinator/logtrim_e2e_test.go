package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
)

// TestIntegrationTrimLog runs a coordinator with --trim-log and a snapshot
// every few events while a group is scaled with heartbeating members: the log
// is trimmed behind the oldest kept snapshot, the archive keeps the group's
// resharding history, and a restart from the trimmed log serves the same state,
// the same audit history and the same stateHistory, and goes on appending.
func TestIntegrationTrimLog(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	stream := fmt.Sprintf("coordinator:events:trim:%d", time.Now().UnixNano())
	opts := func(m *Main) {
		fastTimings(m)
		m.LogStream = stream
		m.TrimLog = true
		m.SnapshotEvery = 5
		m.SnapshotMinInterval = -time.Second
		m.SnapshotKeep = 2
	}
	tc := startCoordinator(t, rs, opts)
	rdb := rs.Client(t)
	ctx := context.Background()
	log := redisstore.NewLog(rdb, stream)

	createGroup(t, tc, "lg", "g", 2)
	a, b := newSimMember(tc, "lg", "g", "a", rdb, false), newSimMember(tc, "lg", "g", "b", rdb, false)
	a.start(50 * time.Millisecond)
	b.start(50 * time.Millisecond)
	defer a.stop()
	defer b.stop()
	eventually(t, 10*time.Second, "2 shards split 1/1", func() bool { return len(a.ownedNow()) == 1 && len(b.ownedNow()) == 1 })
	var reshardings []string
	for _, n := range []int{4, 3, 6} {
		id := scale(t, tc, "lg", "g", n)
		waitState(t, tc, "lg", "g", id, "DEPRECATED", 20*time.Second)
		reshardings = append(reshardings, id)
	}

	// The group's history as it stands, before the trims reach it.
	history := apiAllEvents(t, tc, apiMonPath("lg", "g", "events"))
	var keep []apiEvent // group.created and every resharding event
	lastHistory := ""
	for _, e := range history {
		if e.Type == "group.created" || strings.HasPrefix(e.Type, "resharding.") {
			keep = append(keep, e)
			lastHistory = e.ID
		}
	}
	if len(keep) < 1+3*3 || keep[0].Type != "group.created" {
		t.Fatalf("history before the trims: %d group and resharding events: %+v", len(keep), keep)
	}

	// Membership churn (members that join once and expire) grows the log until
	// it is trimmed past the last resharding event.
	for i := 0; ; i++ {
		trimmed, err := log.TrimmedTo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if c, _ := events.CompareIDs(trimmed, lastHistory); c >= 0 {
			break
		}
		if i == 300 {
			t.Fatalf("the log was not trimmed past %s (trimmed to %s)", lastHistory, trimmed)
		}
		tc.Do("POST", apiHBPath("lg", "g", fmt.Sprintf("x%d", i)), heartbeatBody(fmt.Sprintf("x%d", i), 0, 0, nil, nil)).MustStatus(t, 200)
		time.Sleep(100 * time.Millisecond) // paces the churn; the loop's check is the wait
	}
	entries, err := log.Read(ctx, events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := events.CompareIDs(entries[0].ID, lastHistory); c <= 0 {
		t.Fatalf("the log still starts at %s, not after %s", entries[0].ID, lastHistory)
	}
	if len(entries) >= len(history) {
		t.Fatalf("the log holds %d entries, the group's history alone had %d: nothing was trimmed", len(entries), len(history))
	}
	archived, err := log.Archive().Read(ctx, events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}
	inArchive := map[string]bool{}
	for _, e := range archived {
		rec, err := events.Decode(e.ID, e.Data)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(rec.Type, "member.") || strings.HasPrefix(rec.Type, "assignment.") {
			t.Errorf("archive holds %s %s: membership must be dropped", e.ID, rec.Type)
		}
		inArchive[e.ID] = true
	}
	for _, e := range keep {
		if !inArchive[e.ID] {
			t.Errorf("archive lacks %s %s", e.ID, e.Type)
		}
	}
	t.Logf("log: %d entries from %s; archive: %d entries; %d group and resharding events before the trims", len(entries), entries[0].ID, len(archived), len(keep))

	// Restart on the trimmed log.
	a.stop()
	b.stop()
	var stateHistory [][]byte
	for _, id := range reshardings {
		stateHistory = append(stateHistory, mustJSON(t, tc.migration("lg", "g", id)["stateHistory"]))
	}
	_ = tc.Main.Close()
	before, err := tc.Main.Coordinator().State().Encode()
	if err != nil {
		t.Fatal(err)
	}
	again := startCoordinator(t, rs, opts)
	after, err := again.Main.Coordinator().State().Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("state after the restart from the trimmed log differs from the state before it")
	}
	for i, id := range reshardings {
		if got := mustJSON(t, again.migration("lg", "g", id)["stateHistory"]); !bytes.Equal(got, stateHistory[i]) {
			t.Errorf("stateHistory of %s after the restart:\n%s\nwant\n%s", id, got, stateHistory[i])
		}
	}

	// The audit history still lists group.created and every resharding event.
	listed := map[string]string{}
	for _, e := range apiAllEvents(t, again, apiMonPath("lg", "g", "events")) {
		listed[e.ID] = e.Type
	}
	all := map[string]string{}
	for _, e := range apiAllEvents(t, again, "/coord/v1/monitoring/events") {
		all[e.ID] = e.Type
	}
	for _, e := range keep {
		if listed[e.ID] != e.Type {
			t.Errorf("group history lacks %s %s", e.ID, e.Type)
		}
		if all[e.ID] != e.Type {
			t.Errorf("global history lacks %s %s", e.ID, e.Type)
		}
	}

	// Replay: from a kept snapshot on it works, before the trim point it is refused.
	apiDo(t, again, "GET", apiMonPath("lg", "g", "replay"), nil).apiWant(t, 200)
	r := apiDo(t, again, "GET", apiMonPath("lg", "g", "replay")+"?until="+keep[0].ID, nil).apiWantError(t, 422, "LOG_TRIMMED")
	if !strings.Contains(r.apiMsg(), "oldest replayable id") {
		t.Errorf("replay before the trim point: %q does not name the oldest replayable id", r.apiMsg())
	}

	// Appends still work on the trimmed log.
	id := scale(t, again, "lg", "g", 2)
	if again.migration("lg", "g", id)["state"] == nil {
		t.Fatalf("resharding %s after the restart not served", id)
	}
	last, err := log.LastID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := events.CompareIDs(last, again.Main.Coordinator().State().LastID()); c != 0 {
		t.Errorf("log at %s, projection at %s", last, again.Main.Coordinator().State().LastID())
	}
}

func mustJSON(tb testing.TB, v any) []byte {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestLogGrowthFlags(t *testing.T) {
	m := NewMain()
	if err := m.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	if m.TrimLog || m.SnapshotKeep != 2 {
		t.Fatalf("defaults: --trim-log %v --snapshot-keep %d, want false and 2", m.TrimLog, m.SnapshotKeep)
	}
	t.Setenv("RSC_TRIM_LOG", "true")
	t.Setenv("RSC_SNAPSHOT_KEEP", "3")
	m = NewMain()
	if err := m.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	if !m.TrimLog || m.SnapshotKeep != 3 {
		t.Fatalf("from the environment: --trim-log %v --snapshot-keep %d, want true and 3", m.TrimLog, m.SnapshotKeep)
	}
	for _, args := range [][]string{{"--snapshot-keep", "0"}, {"--snapshot-keep", "-1"}, {"--ha", "--leader-lease", "1ms"}} {
		if err := NewMain().ParseFlags(args); err == nil {
			t.Errorf("ParseFlags(%v) accepted it", args)
		}
	}
}
