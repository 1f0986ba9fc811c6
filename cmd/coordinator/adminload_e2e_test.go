package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
)

// TestIntegrationConcurrentAdminLoad fires 400 admin requests in three racing
// rounds, each released at once on a start barrier across four groups: 100
// creates, 200 scales with distinct targets, 100 rollbacks. Every conflict has
// exactly one winner: one 201 per created group; one 202 per group among its 50
// scales, the only resharding.preparing of the group in the log; one
// resharding.rolled_back per resharding, however many rollbacks raced for it
// (a repeated rollback answers 202 with the rolled-back resharding). The log
// never holds two active reshardings of a group, and the served state equals a
// fresh fold of it.
func TestIntegrationConcurrentAdminLoad(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, func(m *Main) {
		fastTimings(m)
		// No maintenance tick during the test: a resharding without members
		// completes at the next tick, after which a second scale of the same
		// group would rightly win. The reshardings here end only by rollback.
		m.TickInterval = time.Hour
	})
	const groups = 4
	const creates, scales, rollbacks = 25, 50, 25 // per group: 400 requests in all
	type answer struct {
		group  string
		status int
		body   []byte
		id     string // the reshardingId of a 202
	}
	// Each group on a prefix of its own: groups of one stream scale and roll
	// back together (0.3.5: the stream's layout is theirs), and this test
	// races commands on independent groups.
	pathOf := func(g string) string { return "/coord/v1/streams/load-" + g + "/groups/" + g }
	groupName := func(i int) string { return fmt.Sprintf("g%d", i%groups) }
	// round sends n requests, each built by req(i), all released together once
	// every goroutine is ready, and returns the answers.
	round := func(name string, n int, req func(i int) (group, method, path string, body any)) []answer {
		t.Helper()
		var ready, done sync.WaitGroup
		start := make(chan struct{})
		answers := make([]answer, n)
		ready.Add(n)
		done.Add(n)
		for i := 0; i < n; i++ {
			go func(i int) {
				defer done.Done()
				g, method, path, body := req(i)
				ready.Done()
				<-start
				r, err := tc.TryDoAs("admin", "password", method, path, body)
				if err != nil {
					t.Errorf("%s %d (%s): %v", name, i, g, err)
					return
				}
				id, _ := r.JSON["reshardingId"].(string)
				answers[i] = answer{group: g, status: r.Status, body: r.Body, id: id}
			}(i)
		}
		ready.Wait()
		close(start)
		done.Wait()
		byStatus := map[int]int{}
		for _, a := range answers {
			byStatus[a.status]++
		}
		t.Logf("%s: %d requests, answers by status %v", name, n, byStatus)
		if t.Failed() {
			t.FailNow()
		}
		return answers
	}
	// allowed fails on an answer outside codes and returns the 2xx answers by group.
	allowed := func(name string, answers []answer, winCode int, codes ...int) map[string][]answer {
		t.Helper()
		wins := map[string][]answer{}
		for _, a := range answers {
			ok := a.status == winCode
			for _, c := range codes {
				ok = ok || a.status == c
			}
			if !ok {
				t.Errorf("%s of %s answered %d: %s", name, a.group, a.status, a.body)
			}
			if a.status == winCode {
				wins[a.group] = append(wins[a.group], a)
			}
		}
		return wins
	}

	// Round 1: 25 creates of each group.
	created := allowed("create", round("create", groups*creates, func(i int) (string, string, string, any) {
		g := groupName(i)
		return g, "POST", pathOf(g), map[string]any{"initialShardCount": 4, "requestedBy": "load"}
	}), 201, 409)
	for i := 0; i < groups; i++ {
		if n := len(created[groupName(i)]); n != 1 {
			t.Errorf("group %s: %d creates won, want exactly 1", groupName(i), n)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Round 2: 50 scales of each group, to 50 different targets (1..50; 4 is
	// the current count, refused 422 unless a winner came first).
	scaleAnswers := round("scale", groups*scales, func(i int) (string, string, string, any) {
		g := groupName(i)
		return g, "POST", pathOf(g) + "/scale", map[string]any{"targetShardCount": 1 + i/groups, "requestedBy": "load", "reason": "load"}
	})
	scaled := allowed("scale", scaleAnswers, 202, 409, 422)
	winner := map[string]string{}
	for i := 0; i < groups; i++ {
		g := groupName(i)
		if n := len(scaled[g]); n != 1 {
			codes := map[string]int{}
			for _, a := range scaleAnswers {
				if a.group == g && a.status != 202 {
					var e struct{ ErrorCode, Message string }
					_ = json.Unmarshal(a.body, &e)
					codes[e.ErrorCode+": "+truncateMsg(e.Message)]++
				}
			}
			t.Errorf("group %s: %d of %d racing scales won (202), want exactly 1; refusals %v", g, n, scales, codes)
			continue
		}
		winner[g] = scaled[g][0].id
	}
	if t.Failed() {
		t.FailNow()
	}

	// Round 3: 25 rollbacks of each group's resharding.
	rolled := allowed("rollback", round("rollback", groups*rollbacks, func(i int) (string, string, string, any) {
		g := groupName(i)
		return g, "POST", pathOf(g) + "/migrations/" + winner[g] + "/rollback", map[string]any{"requestedBy": "load", "reason": "load"}
	}), 202, 409)
	for g, wins := range rolled {
		for _, a := range wins {
			if a.id != winner[g] {
				t.Errorf("a rollback of %s answered resharding %q: %s", winner[g], a.id, a.body)
			}
		}
	}

	// The log: one group.created per group, one resharding.preparing per group
	// (the scale that won), one resharding.rolled_back per resharding.
	ctx := context.Background()
	log := redisstore.NewLog(rs.Client(t), tc.Main.LogStream)
	entries, err := log.Read(ctx, events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}
	createdInLog := map[string]int{}
	prepared := map[string][]string{}
	rolledBack := map[string]int{}
	for _, e := range entries {
		rec, err := events.Decode(e.ID, e.Data)
		if err != nil {
			t.Fatal(err)
		}
		switch ev := rec.Event.(type) {
		case *events.GroupCreated:
			createdInLog[rec.ConsumerGroup]++
		case *events.ReshardingPreparing:
			prepared[rec.ConsumerGroup] = append(prepared[rec.ConsumerGroup], ev.ReshardingID)
		case *events.ReshardingRolledBack:
			rolledBack[ev.ReshardingID]++
		}
	}
	for i := 0; i < groups; i++ {
		g := groupName(i)
		if createdInLog[g] != 1 {
			t.Errorf("the log has %d group.created for %s, want 1", createdInLog[g], g)
		}
		if len(prepared[g]) != 1 || prepared[g][0] != winner[g] {
			t.Errorf("the log's reshardings of %s: %v, want only the winner %s", g, prepared[g], winner[g])
		}
		if rolledBack[winner[g]] != 1 {
			t.Errorf("the log has %d resharding.rolled_back for %s (%s), want exactly 1", rolledBack[winner[g]], winner[g], g)
		}
	}
	folded := foldCheckingReshardings(t, ctx, log)
	var ended []string
	for _, g := range folded.Groups() {
		ended = append(ended, fmt.Sprintf("%s: %d shards, active %q", g.Key.ConsumerGroup, g.ShardCount, g.ActiveResharding))
		if g.ShardCount != 4 || g.ActiveResharding != "" {
			t.Errorf("group %s after the rollback: %d shards, active resharding %q; want 4 and none", g.Key.ConsumerGroup, g.ShardCount, g.ActiveResharding)
		}
	}
	sort.Strings(ended)
	t.Logf("groups at the end: %v", ended)
	want, _ := folded.Encode()
	got, _ := tc.Main.Coordinator().State().Encode()
	if string(want) != string(got) {
		t.Fatalf("the served state differs from a fresh fold of the log")
	}
}

// truncateMsg keeps the first 120 bytes of an error message (a test log line).
func truncateMsg(s string) string {
	if len(s) > 120 {
		return s[:120]
	}
	return s
}
