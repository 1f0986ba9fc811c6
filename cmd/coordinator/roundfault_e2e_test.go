package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
)

// TestIntegrationRefusedWritesAtTheEndOfACorrectionRound: member b opens a
// metadata-correction round and never converges while a does. Redis refuses
// writes (min-replicas-to-write with no replica) across the round's rebalance
// timeout, so the decision that ends the round (fencing b) cannot be
// appended: a's heartbeat is a 503 and nothing of that decision happens in
// memory either. Once Redis takes writes again, b is fenced by a decision the
// log records, is never answered OK with its shard after that, and the group
// served is the log folded again.
func TestIntegrationRefusedWritesAtTheEndOfACorrectionRound(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings) // rebalance timeout 5 s, lease 2 s
	rdb := rs.Client(t)
	ctx := context.Background()
	createGroup(t, tc, "rnd", "g", 2)
	beat := func(b apiHBBody) apiResp {
		t.Helper()
		return apiSend(t, tc, apiMember, "POST", apiHBPath("rnd", "g", b.Member), b.toMap(), nil)
	}
	must := func(b apiHBBody, status string) apiHB {
		t.Helper()
		r := beat(b)
		hb := apiHB{hbResult: decodeHeartbeat(t, r.Body), JSON: r.JSON, Body: r.Body}
		if r.Status != http.StatusOK || hb.Status != status {
			t.Fatalf("heartbeat of %s: HTTP %d %s, want %s", b.Member, r.Status, r.Body, status)
		}
		return hb
	}
	ea, mv, _ := apiJoinSteady(t, tc, "rnd", "g", "a")
	jb := must(apiHBBody{Member: "b"}, "OK") // pending 1 until a releases it
	ea = must(apiHBBody{Member: "a", Epoch: ea, MV: mv, Owned: []int{0, 1}}, "OK").MemberEpoch
	a := must(apiHBBody{Member: "a", Epoch: ea, MV: jb.MetadataVersion, Owned: []int{0}}, "OK")
	b := must(apiHBBody{Member: "b", Epoch: jb.MemberEpoch, MV: jb.MetadataVersion}, "OK")
	if !equalInts(b.Assigned, []int{1}) {
		t.Fatalf("b was not granted shard 1: %s", b.Body)
	}
	eb, stored := b.MemberEpoch, b.MetadataVersion
	must(apiHBBody{Member: "b", Epoch: eb, MV: stored, Owned: []int{1}}, "OK")

	// b reports a version the log never had: the round opens; a converges, b never does.
	opened := time.Now()
	must(apiHBBody{Member: "b", Epoch: eb, MV: stored + 5, Owned: []int{1}}, "SYNC_METADATA")
	for time.Since(opened) < 4*time.Second {
		must(apiHBBody{Member: "a", Epoch: a.MemberEpoch, MV: stored, Owned: []int{0}}, "REVOKE_PENDING")
		must(apiHBBody{Member: "b", Epoch: eb, MV: stored + 5, Owned: []int{1}}, "SYNC_METADATA")
		time.Sleep(400 * time.Millisecond) // a heartbeat interval, leases are 2 s
	}

	// Redis refuses writes across the rebalance timeout.
	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
		t.Fatal(err)
	}
	refused := true
	defer func() {
		if refused {
			_ = rdb.ConfigSet(ctx, "min-replicas-to-write", "0").Err()
		}
	}()
	time.Sleep(time.Until(opened.Add(5*time.Second + 200*time.Millisecond))) // past the timeout
	if r := beat(apiHBBody{Member: "a", Epoch: a.MemberEpoch, MV: stored, Owned: []int{0}}); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("a's heartbeat ending the round while Redis refuses writes: HTTP %d %s, want 503", r.Status, r.Body)
	}
	log := redisstore.NewLog(rdb, tc.Main.LogStream)
	if fencedInLog(t, log, "b") {
		t.Fatal("b is fenced in a log Redis refused to write")
	}
	if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil {
		t.Fatal(err)
	}
	refused = false

	// Once the log takes writes, the round's end is decided again and recorded.
	eventually(t, 5*time.Second, "b fenced in the log", func() bool { return fencedInLog(t, log, "b") })
	for i := 0; i < 5; i++ {
		r := beat(apiHBBody{Member: "b", Epoch: eb, MV: stored + 5, Owned: []int{1}})
		hb := decodeHeartbeat(t, r.Body)
		if r.Status == http.StatusOK && hb.Status == "OK" && equalInts(hb.Assigned, []int{1}) {
			t.Fatalf("b, fenced by the log, was answered OK with shard 1: %s", r.Body)
		}
		if hb.Status != "FENCED_MEMBER_EPOCH" {
			t.Fatalf("b's heartbeat after the fence: HTTP %d %s, want FENCED_MEMBER_EPOCH", r.Status, r.Body)
		}
	}
	eventually(t, 5*time.Second, "the group served is the log folded again", func() bool {
		st := projection.New()
		if _, err := projection.Fold(ctx, log, st, projection.FoldOptions{}); err != nil {
			t.Fatal(err)
		}
		g, ok := st.Group(projection.GroupKey{StreamPrefix: "rnd", ConsumerGroup: "g"})
		if !ok {
			return false
		}
		want, _ := json.Marshal(httpapi.GroupOf(g))
		var x, y any
		_ = json.Unmarshal(want, &x)
		_ = json.Unmarshal(tc.Do("GET", "/coord/v1/streams/rnd/groups/g", nil).Body, &y)
		wx, _ := json.Marshal(x)
		gy, _ := json.Marshal(y)
		return bytes.Equal(wx, gy)
	})
}

// fencedInLog reports whether the log records member.fenced for id.
func fencedInLog(t *testing.T, log events.Log, id string) bool {
	t.Helper()
	found := false
	_, err := projection.Fold(context.Background(), log, projection.New(), projection.FoldOptions{After: func(rec events.Record) {
		if f, ok := rec.Event.(*events.MemberFenced); ok && f.MemberID == id {
			found = true
		}
	}})
	if err != nil {
		t.Fatal(fmt.Errorf("fold the log: %w", err))
	}
	return found
}
