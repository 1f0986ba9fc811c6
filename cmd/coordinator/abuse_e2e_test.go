package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/projection"
)

// TestIntegrationHeartbeatAbuse is an abuse campaign against a live
// coordinator: seeded random heartbeats with random principals, member ids
// (the honest members' among them), epochs, metadata versions and arrays, and
// malformed bodies, while three honest members heartbeat. After every request:
// no 5xx, no shard granted to two members that may hold shards, and what the
// request appended to the log is bounded. At the end the honest members still
// converge. RSC_ABUSE_REQUESTS and RSC_ABUSE_SEED change the campaign.
func TestIntegrationHeartbeatAbuse(t *testing.T) {
	parallel(t)
	requests := 1500
	if testing.Short() {
		requests = 300
	}
	if v, err := strconv.Atoi(os.Getenv("RSC_ABUSE_REQUESTS")); err == nil && v > 0 {
		requests = v
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("RSC_ABUSE_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("abuse campaign: %d requests, seed %d (RSC_ABUSE_SEED=%d to replay)", requests, seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	users := []map[string]any{
		{"username": "admin", "password": "password", "roles": []string{"ADMIN"}},
		{"username": "svc-a", "password": "a-pw", "roles": []string{"MEMBER"}},
		{"username": "svc-b", "password": "b-pw", "roles": []string{"MEMBER"}},
		{"username": "reader", "password": "r-pw", "roles": []string{"READ"}},
	}
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.UsersFile = apiUsersFile(t, users)
		m.TokenSecret = "abuse-secret"
		m.MemberLease = 2 * time.Second
		m.RebalanceTimeout = 2 * time.Second
		m.TickInterval = 100 * time.Millisecond
		m.MaxMembersPerGroup = 64
	})
	const prefix, group, shards = "abuse", "g", 8
	apiCreate(t, tc, prefix, group, shards).apiWant(t, 201)
	honest := []*simMember{
		newSimMember(tc, prefix, group, "honest-0", nil, false),
		newSimMember(tc, prefix, group, "honest-1", nil, false),
		newSimMember(tc, prefix, group, "honest-2", nil, false),
	}
	for _, m := range honest {
		m.start(150 * time.Millisecond)
	}
	stopHonest := func() {
		for _, m := range honest {
			m.stop()
		}
	}
	defer stopHonest()

	rdb := apiRedis(t, tc)
	ctx := context.Background()
	k := projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: group}
	// Wrong passwords are left out: the login throttle (tested on its own)
	// would soon refuse every password from this address, honest ones too.
	auths := []apiAuth{apiBasic("svc-a", "a-pw"), apiBasic("svc-b", "b-pw"), apiAdmin, apiNoAuth, apiBasic("reader", "r-pw")}
	ids := []string{"honest-0", "honest-1", "honest-2", "x-1", "x-2", "x-3", "members", "heartbeat", "ünïcode", strings.Repeat("l", 200)}
	statuses := map[int]int{}
	protocol := map[string]int{}
	lastEpoch := map[string]int64{}
	lastMV := int64(1)
	lastID := lastLogID(t, tc)
	for i := 0; i < requests; i++ {
		auth := auths[0]
		if rng.IntN(4) == 0 {
			auth = auths[rng.IntN(len(auths))]
		}
		id := ids[rng.IntN(len(ids))]
		if rng.IntN(20) == 0 {
			id = fmt.Sprintf("rnd-%d", rng.IntN(200)) // fresh ids fill the member cap
		}
		pathID := id
		if rng.IntN(30) == 0 {
			pathID = ids[rng.IntN(len(ids))] // path and body disagree
		}
		body := abuseBody(rng, id, lastEpoch[id], lastMV)
		resp := apiSend(t, tc, auth, "POST", apiHBPath(prefix, group, pathID), body, nil)
		statuses[resp.Status]++
		if resp.Status >= 500 {
			t.Fatalf("request %d answered %d: %s (body %s)", i, resp.Status, resp.Body, abuseShow(body))
		}
		switch resp.Status {
		case 200, 400, 401, 403, 409, 429:
		default:
			t.Fatalf("request %d answered unexpected %d: %s", i, resp.Status, resp.Body)
		}
		if resp.Status == 200 {
			protocol[fmt.Sprint(resp.JSON["status"])]++
			if e, ok := resp.JSON["memberEpoch"].(float64); ok {
				lastEpoch[id] = int64(e)
			}
			if mv, ok := resp.JSON["metadataVersion"].(float64); ok && mv > 0 {
				lastMV = int64(mv)
			}
		}
		// What this request appended is bounded.
		entries, err := rdb.XRange(ctx, tc.Main.LogStream, "("+lastID, "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) > 16 {
			t.Fatalf("request %d appended %d events (body %s)", i, len(entries), abuseShow(body))
		}
		for _, e := range entries {
			size := 0
			for f, v := range e.Values {
				size += len(f) + len(fmt.Sprint(v))
			}
			if size > 8<<10 {
				t.Fatalf("request %d appended a %d-byte event", i, size)
			}
			lastID = e.ID
		}
		if i%25 == 0 {
			abuseCheckOwnership(t, tc, k)
		}
	}
	abuseCheckOwnership(t, tc, k)
	t.Logf("HTTP statuses %v; heartbeat statuses %v", statuses, protocol)

	// The honest members still converge: their shards cover the group once the
	// fake members' leases ran out.
	stopHonest()
	for _, m := range honest {
		m.start(150 * time.Millisecond)
	}
	converged := func() bool {
		seen := map[int]bool{}
		for _, m := range honest {
			for _, s := range m.ownedNow() {
				seen[s] = true
			}
		}
		return len(seen) == shards
	}
	for deadline := time.Now().Add(30 * time.Second); !converged(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			for _, m := range honest {
				t.Logf("%s owns %v", m.id, m.ownedNow())
			}
			g := apiSend(t, tc, apiAdmin, "GET", "/coord/v1/monitoring/streams/"+prefix+"/groups/"+group, nil, nil)
			ms := apiSend(t, tc, apiAdmin, "GET", "/coord/v1/monitoring/streams/"+prefix+"/groups/"+group+"/members", nil, nil)
			t.Fatalf("timed out after 30s waiting for the honest members to own every shard again\ngroup: %s\nmembers: %s", g.Body, ms.Body)
		}
	}
	abuseCheckOwnership(t, tc, k)
}

// abuseCheckOwnership: no shard is granted to (or owned by) two members the
// coordinator counts as holders.
func abuseCheckOwnership(t *testing.T, tc *testCoordinator, k projection.GroupKey) {
	t.Helper()
	g, ok := tc.Main.Coordinator().State().Group(k)
	if !ok {
		t.Fatal("the group disappeared")
	}
	if v := projection.ViewAssignments(g).InvariantViolations; len(v) > 0 {
		t.Fatalf("invariant violations: %v", v)
	}
	holders := map[int][]string{}
	for _, id := range g.MemberIDs() {
		m := g.Member(id)
		if !m.CanHold() {
			continue
		}
		seen := map[int]bool{}
		for _, set := range [][]int{m.Granted, m.Current} {
			for _, s := range set {
				if !seen[s] {
					seen[s] = true
					holders[s] = append(holders[s], id)
				}
			}
		}
	}
	for s, ids := range holders {
		if len(ids) > 1 {
			t.Fatalf("shard %d is held by %v at once", s, ids)
		}
	}
}

func lastLogID(t *testing.T, tc *testCoordinator) string {
	t.Helper()
	msgs, err := apiRedis(t, tc).XRevRangeN(context.Background(), tc.Main.LogStream, "+", "-", 1).Result()
	if err != nil || len(msgs) == 0 {
		t.Fatalf("read the log's last id: %v", err)
	}
	return msgs[0].ID
}

// abuseBody is a random heartbeat body for id. Seven in ten are well formed
// with hostile values (epochs around the last one the id was given, metadata
// versions far ahead, claims on shards it may not hold, revoke and progress
// reports); the rest carry invalid fields or are not heartbeats at all.
func abuseBody(rng *rand.Rand, id string, lastEpoch, lastMV int64) any {
	pick := func(vals ...any) any { return vals[rng.IntN(len(vals))] }
	shardList := func(valid bool) []any {
		n := rng.IntN(6)
		out := make([]any, 0, n)
		seen := map[int]bool{}
		for j := 0; j < n; j++ {
			idx := rng.IntN(8)
			if !valid {
				idx = rng.IntN(14) - 3
			}
			if valid && seen[idx] {
				continue
			}
			seen[idx] = true
			out = append(out, map[string]any{"shardIndex": idx})
			if !valid && rng.IntN(5) == 0 {
				out = append(out, map[string]any{"shardIndex": idx}) // duplicate
			}
		}
		return out
	}
	valid := rng.IntN(10) < 7
	body := map[string]any{
		"protocolVersion":         1,
		"requestId":               fmt.Sprintf("r-%d", rng.Int()),
		"memberId":                id,
		"memberName":              pick(nil, id, "worker"),
		"memberEpoch":             pick(lastEpoch, lastEpoch, lastEpoch, lastEpoch+1, lastEpoch-1, int64(0), int64(-1)),
		"metadataVersion":         pick(lastMV, lastMV, lastMV, int64(0), int64(999999)),
		"runtimeConsumerCapacity": map[string]any{"runtimeMaxConcurrency": 1, "availableConcurrency": 1},
		"ownedShards":             shardList(true),
	}
	if rng.IntN(3) == 0 {
		var revoking []any
		for _, s := range shardList(true) {
			revoking = append(revoking, map[string]any{"shard": s, "state": pick("REVOKING", "DRAINING", "REVOKED"), "inFlight": pick(0, 1)})
		}
		body["revokingShards"] = revoking
	}
	if rng.IntN(3) == 0 {
		var progress []any
		for _, s := range shardList(true) {
			progress = append(progress, map[string]any{"shard": s, "streamKey": pick("abuse:1", "elsewhere"),
				"lastDeliveredId": pick(nil, "1-1"), "lastAckedId": pick(nil, "2-0"), "pendingCount": pick(0, 5)})
		}
		body["shardProgress"] = progress
	}
	if valid {
		return body
	}
	switch rng.IntN(12) {
	case 0:
		return "{not json"
	case 1:
		return []any{1, 2, 3}
	case 2:
		body["ownedShards"] = "all"
	case 3:
		body["ownedShards"] = shardList(false)
	case 4:
		body["protocolVersion"] = pick(2, 0, -1, nil, "1")
	case 5:
		body["requestId"] = pick(strings.Repeat("q", 257), "", "  ", "a\x00b")
	case 6:
		body["memberId"] = pick("other", "")
	case 7:
		body["memberName"] = pick(strings.Repeat("n", 300), "line\nbreak")
	case 8:
		body["memberEpoch"] = pick(-2, 1<<40, -(1 << 40), nil)
	case 9:
		body["runtimeConsumerCapacity"] = pick(map[string]any{"runtimeMaxConcurrency": 0, "availableConcurrency": -1}, nil)
	case 10:
		var revoking []any
		for _, s := range shardList(false) {
			revoking = append(revoking, map[string]any{"shard": s, "state": pick("BOGUS", "REVOKED"), "inFlight": pick(0, -1)})
		}
		body["revokingShards"] = revoking
	default:
		var progress []any
		for _, s := range shardList(false) {
			progress = append(progress, map[string]any{"shard": s, "streamKey": strings.Repeat("k", 400), "lastDeliveredId": "bogus", "pendingCount": -3})
		}
		body["shardProgress"] = progress
	}
	return body
}

func abuseShow(body any) string {
	b, _ := json.Marshal(body)
	if len(b) > 400 {
		return string(b[:400]) + "..."
	}
	return string(b)
}
