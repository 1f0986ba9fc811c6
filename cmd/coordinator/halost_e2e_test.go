package main

import (
	"bytes"
	"context"
	"strconv"
	"testing"
	"time"
)

// --ha and FLUSHALL: both replicas keep the state they hold (LOG_LOST), the
// lease and the token secret are gone too; a replica still leads (it is who
// restores), a restore sent to the follower is forwarded to it, and both
// serve the restored state, which the log then replays to.
func TestIntegrationHAFlushallIsRestored(t *testing.T) {
	h, rdb := startHA(t, 2)
	ctx := context.Background()
	leader := h.waitLeader(20 * time.Second)
	follower := 1 - leader
	replica := func(i int) *testCoordinator { return &testCoordinator{t: t, URL: h.replicas[i].URL()} }
	for _, g := range []string{"a", "b"} {
		apiSend(t, replica(follower), apiAdmin, "POST", apiGroupPath("hal", g), map[string]any{"initialShardCount": 2, "requestedBy": "test"}, nil).apiWant(t, 201)
	}
	before := map[int]string{}
	for i := range 2 {
		apiEventually(t, 10*time.Second, "replica-"+strconv.Itoa(i)+" to hold both groups", func() (bool, string) {
			r := apiSend(t, replica(i), apiAdmin, "GET", apiGroupPath("hal", "b"), nil, nil)
			return r.Status == 200, string(r.Body)
		})
		r, _ := readyz(h.replicas[i].URL())
		before[i] = r.LastEventID
	}

	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		apiEventually(t, 20*time.Second, "replica-"+strconv.Itoa(i)+" LOG_LOST", func() (bool, string) {
			r := apiSend(t, replica(i), apiNoAuth, "GET", "/readyz", nil, nil)
			return r.Status == 503 && r.JSON["status"] == "LOG_LOST", string(r.Body)
		})
		apiSend(t, replica(i), apiAdmin, "GET", apiGroupPath("hal", "a"), nil, nil).apiWant(t, 200)
	}
	// The restore, sent to whichever replica does not lead now: forwarded.
	var res apiResp
	apiEventually(t, 20*time.Second, "the restore through a follower", func() (bool, string) {
		for i := range 2 {
			r, _ := readyz(h.replicas[i].URL())
			if r.Role == "FOLLOWER" {
				res = apiSend(t, replica(i), apiAdmin, "POST", "/coord/v1/log/restore", map[string]any{"requestedBy": "ops", "reason": "FLUSHALL"}, nil)
				return res.Status == 200 && res.Header.Get("X-Rsc-Forwarded-To") != "", string(res.Body)
			}
		}
		return false, "no follower"
	})
	if from := res.JSON["restoredFrom"]; from != before[0] || from != before[1] {
		t.Fatalf("restored from %v, want both replicas' position %v", from, before)
	}
	h.waitLeader(20 * time.Second)
	apiSend(t, replica(follower), apiAdmin, "POST", apiGroupPath("hal", "c"), map[string]any{"initialShardCount": 2, "requestedBy": "test"}, nil).apiWant(t, 201)
	var states [][]byte
	for i := range 2 {
		apiEventually(t, 10*time.Second, "replica-"+strconv.Itoa(i)+" to hold the new group", func() (bool, string) {
			r := apiSend(t, replica(i), apiAdmin, "GET", apiGroupPath("hal", "c"), nil, nil)
			return r.Status == 200, string(r.Body)
		})
		for _, g := range []string{"a", "b"} {
			apiSend(t, replica(i), apiAdmin, "GET", apiGroupPath("hal", g), nil, nil).apiWant(t, 200)
		}
		page := apiSend(t, replica(i), apiAdmin, "GET", "/coord/v1/monitoring/streams/hal/replay", nil, nil).apiWant(t, 200)
		states = append(states, page.Body)
	}
	if !bytes.Equal(states[0], states[1]) {
		t.Fatalf("the replicas serve different states after the restore:\n%s\n%s", states[0], states[1])
	}
}
