package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
)

// Tests of the member protocol against hostile or buggy clients: each attack
// here worked before the coordinator bounded its inputs, bound member ids to
// principals, ended correction rounds at the rebalance timeout and released a
// leaver's shards at once.

// hostileEvents returns the group's audit events of one type.
func hostileEvents(t *testing.T, tc *testCoordinator, prefix, group, typ string) []apiEvent {
	t.Helper()
	var out []apiEvent
	for _, e := range apiAllEvents(t, tc, apiMonPath(prefix, group, "events")) {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// TestIntegrationHostileMemberCannotStallGroup: a member that keeps reporting
// metadataVersion 999999 opened a correction round that never closed, and the
// well-behaved members sat in REVOKE_PENDING with shards owned by nobody for
// as long as it kept beating. Now the round ends at the rebalance timeout: the
// member that did not converge is fenced (member.fenced says why), the others
// proceed, and the same member cannot open another round.
func TestIntegrationHostileMemberCannotStallGroup(t *testing.T) {
	const rebalance = 2 * time.Second
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.RebalanceTimeout = rebalance
		m.TickInterval = 100 * time.Millisecond
	})
	apiCreate(t, tc, "stall", "g", 4).apiWant(t, 201)
	a := newSimMember(tc, "stall", "g", "good-a", nil, false)
	b := newSimMember(tc, "stall", "g", "good-b", nil, false)
	a.start(100 * time.Millisecond)
	b.start(100 * time.Millisecond)
	defer a.stop()
	defer b.stop()
	eventually(t, 10*time.Second, "the good members share every shard", func() bool {
		return len(a.ownedNow())+len(b.ownedNow()) == 4
	})

	// The hostile member joins, then reports a metadata version the
	// coordinator never issued, for ever (rejoining whenever it is fenced).
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	hostile := map[string]int{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		epoch := int64(0)
		for ctx.Err() == nil {
			body := heartbeatBody("hostile", epoch, 999999, nil, nil)
			r, err := tc.TryDoAs("admin", "password", "POST", apiHBPath("stall", "g", "hostile"), body)
			if err == nil && r.Status == 200 {
				hb := decodeHeartbeat(t, r.Body)
				mu.Lock()
				hostile[hb.Status]++
				mu.Unlock()
				switch hb.Status {
				case "FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID":
					epoch = 0
				default:
					epoch = hb.MemberEpoch
				}
			}
			time.Sleep(100 * time.Millisecond) // the hostile member's heartbeat interval
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	eventually(t, 5*time.Second, "a correction round opens", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return hostile["SYNC_METADATA"] > 0
	})
	eventually(t, 4*rebalance+5*time.Second, "the hostile member is fenced for not converging", func() bool {
		for _, e := range hostileEvents(t, tc, "stall", "g", "member.fenced") {
			if e.Payload["memberId"] == "hostile" && strings.Contains(fmt.Sprint(e.Payload["reason"]), "metadata correction") {
				return true
			}
		}
		return false
	})
	// The others proceed: for two seconds (longer than the rebalance timeout)
	// the good members only get OK, and together they read every shard the
	// hostile member is not assigned.
	eventually(t, 3*rebalance, "the good members are answered OK again", func() bool {
		before := a.statusCounts()
		time.Sleep(300 * time.Millisecond) // an observation window of a few of a's heartbeats
		after := a.statusCounts()
		return after["OK"] > before["OK"] && after["REVOKE_PENDING"] == before["REVOKE_PENDING"] && after["SYNC_METADATA"] == before["SYNC_METADATA"]
	})
	// An observation window longer than the rebalance timeout: no new round
	// may open in it (nothing to wait for; only time shows it).
	beforeA, beforeB := a.statusCounts(), b.statusCounts()
	time.Sleep(rebalance + 500*time.Millisecond)
	for name, m := range map[string]*simMember{"good-a": a, "good-b": b} {
		before := map[string]map[string]int{"good-a": beforeA, "good-b": beforeB}[name]
		after := m.statusCounts()
		for _, st := range []string{"REVOKE_PENDING", "SYNC_METADATA", "FENCED_MEMBER_EPOCH"} {
			if after[st] != before[st] {
				t.Errorf("%s got %d more %s answers after the round ended: the hostile member opened another round", name, after[st]-before[st], st)
			}
		}
	}
	g := apiGroup(t, tc, "stall", "g")
	if g["state"] == "EMPTY" {
		t.Fatalf("group is EMPTY: %v", g)
	}
	fenced := 0
	for _, e := range hostileEvents(t, tc, "stall", "g", "member.fenced") {
		if e.Payload["memberId"] != "hostile" {
			t.Errorf("a well-behaved member was fenced: %v", e.Payload)
		}
		fenced++
	}
	if fenced != 1 {
		t.Errorf("hostile member fenced %d times, want once (quarantined after the first round)", fenced)
	}
}

// statusCounts copies the member's answer counts by status.
func (m *simMember) statusCounts() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]int, len(m.statuses))
	for k, v := range m.statuses {
		out[k] = v
	}
	return out
}

// TestIntegrationMemberIDBoundToPrincipal: a heartbeat with another member's
// id and memberEpoch -1 released all of its shards at once while the real
// member went on reading them. With the member API authenticated, a member id
// belongs to the principal that joined it: anyone else gets 403, leave
// included, and nothing is released or recorded.
func TestIntegrationMemberIDBoundToPrincipal(t *testing.T) {
	parallel(t)
	users := []map[string]any{
		{"username": "svc-a", "password": "a-pw", "roles": []string{"MEMBER"}},
		{"username": "svc-b", "password": "b-pw", "roles": []string{"MEMBER"}},
		{"username": "boss", "password": "b-pw", "roles": []string{"ADMIN"}},
	}
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.UsersFile = apiUsersFile(t, users)
		m.TokenSecret = "test-secret"
	})
	svcA, svcB, boss := apiBasic("svc-a", "a-pw"), apiBasic("svc-b", "b-pw"), apiBasic("boss", "b-pw")
	apiSend(t, tc, boss, "POST", apiGroupPath("bind", "g"), map[string]any{"initialShardCount": 4, "requestedBy": "boss"}, nil).apiWant(t, 201)

	join := apiHeartbeat(t, tc, svcA, "bind", "g", "m-1", apiHBBody{Member: "m-1"}.toMap())
	steady := apiHeartbeat(t, tc, svcA, "bind", "g", "m-1", apiHBBody{Member: "m-1", Epoch: join.MemberEpoch, MV: join.MetadataVersion, Owned: join.Assigned}.toMap())
	if steady.Status != "OK" || len(steady.Assigned) != 4 {
		t.Fatalf("m-1 should own every shard: %s", steady.Body)
	}
	rdb := apiRedis(t, tc)
	logLen := apiLogLen(t, tc, rdb)

	attacks := []struct {
		name string
		body apiHBBody
	}{
		{"leave", apiHBBody{Member: "m-1", Epoch: -1, MV: steady.MetadataVersion}},
		{"rejoin", apiHBBody{Member: "m-1", Epoch: 0}},
		{"claim", apiHBBody{Member: "m-1", Epoch: steady.MemberEpoch, MV: steady.MetadataVersion, Owned: []int{0, 1, 2, 3}}},
		{"release", apiHBBody{Member: "m-1", Epoch: steady.MemberEpoch, MV: steady.MetadataVersion, Owned: []int{}}},
	}
	for _, a := range attacks {
		r := apiSend(t, tc, svcB, "POST", apiHBPath("bind", "g", "m-1"), a.body.toMap(), nil)
		r.apiWantError(t, 403, "MEMBER_PRINCIPAL_MISMATCH")
		// The boss (ADMIN) is another principal too.
		apiSend(t, tc, boss, "POST", apiHBPath("bind", "g", "m-1"), a.body.toMap(), nil).apiWantError(t, 403, "MEMBER_PRINCIPAL_MISMATCH")
	}
	if got := apiLogLen(t, tc, rdb); got != logLen {
		t.Errorf("refused heartbeats appended %d events", got-logLen)
	}
	// m-1 still holds everything and its owner goes on undisturbed.
	again := apiHeartbeat(t, tc, svcA, "bind", "g", "m-1", apiHBBody{Member: "m-1", Epoch: steady.MemberEpoch, MV: steady.MetadataVersion, Owned: steady.Assigned}.toMap())
	if again.Status != "OK" || len(again.Assigned) != 4 {
		t.Fatalf("the real member lost its shards: %s", again.Body)
	}
	// svc-b may run its own members.
	other := apiHeartbeat(t, tc, svcB, "bind", "g", "m-2", apiHBBody{Member: "m-2"}.toMap())
	if other.Status != "OK" {
		t.Fatalf("svc-b cannot join its own member: %s", other.Body)
	}
	// The real member can leave.
	left := apiHeartbeat(t, tc, svcA, "bind", "g", "m-1", apiHBBody{Member: "m-1", Epoch: -1, MV: again.MetadataVersion}.toMap())
	if left.Status != "OK" || left.MemberEpoch != -1 {
		t.Fatalf("leave of the real member: %s", left.Body)
	}
}

// TestIntegrationAnonymousMembersStillBindCredentials: with
// --allow-anonymous-members a heartbeat needs no credentials, and the protocol
// cannot tell an impostor from an anonymous member (README), but a member that
// joined with credentials stays bound to them.
func TestIntegrationAnonymousMembersStillBindCredentials(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) { m.AllowAnonymousMembers = true })
	apiCreate(t, tc, "anon", "g", 2).apiWant(t, 201)
	if hb := apiHeartbeat(t, tc, apiNoAuth, "anon", "g", "free", apiHBBody{Member: "free"}.toMap()); hb.Status != "OK" {
		t.Fatalf("anonymous join: %s", hb.Body)
	}
	if hb := apiHeartbeat(t, tc, apiAdmin, "anon", "g", "bound", apiHBBody{Member: "bound"}.toMap()); hb.Status != "OK" {
		t.Fatalf("credentialed join: %s", hb.Body)
	}
	apiSend(t, tc, apiNoAuth, "POST", apiHBPath("anon", "g", "bound"), apiHBBody{Member: "bound", Epoch: -1}.toMap(), nil).apiWantError(t, 403, "MEMBER_PRINCIPAL_MISMATCH")
}

// ownedRaw is member m1's heartbeat at epoch 1 with ownedShards as given.
func ownedRaw(owned []any) map[string]any {
	b := apiHBBody{Member: "m1", Epoch: 1}.toMap()
	b["ownedShards"] = owned
	return b
}

// TestIntegrationHeartbeatNamesAndRegistrations: a heartbeat on a prefix or
// group name no group can have is a 400 naming it (it was UNKNOWN_MEMBER_ID,
// a rejoin forever; a name that was not UTF-8 registered a group whose name
// every answer showed as U+FFFD, and broke /metrics); a first heartbeat
// refused for listing more shards than the stream has provisions no
// consumer group (one was left on every shard, in no event, blocking every
// scale-in's drain).
func TestIntegrationHeartbeatNamesAndRegistrations(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	rdb := apiRedis(t, tc)
	ctx := context.Background()
	apiDo(t, tc, "POST", "/coord/v1/streams/names", map[string]any{"initialShardCount": 2, "requestedBy": "a"}).apiWant(t, 201)
	noGroups := func(what string) {
		t.Helper()
		for i := 0; i < 2; i++ {
			groups, err := rdb.XInfoGroups(ctx, fmt.Sprintf("names:%d", i)).Result()
			if err != nil || len(groups) != 0 {
				t.Fatalf("%s: names:%d has consumer groups %v (%v), want none", what, i, groups, err)
			}
		}
	}
	logLen := apiLogLen(t, tc, rdb)
	for _, c := range []struct{ name, prefix, group, field string }{
		{"group not UTF-8", "names", "\xff", "consumerGroup"},
		{"group with a brace", "names", "a{b", "consumerGroup"},
		{"prefix not UTF-8", "na\xffmes", "g", "streamPrefix"},
	} {
		r := apiSend(t, tc, apiMember, "POST", apiHBPath(c.prefix, c.group, "m1"), apiHBBody{Member: "m1"}.toMap(), nil)
		r.apiWantError(t, 400, "INVALID_REQUEST")
		if !strings.Contains(r.apiMsg(), c.field) {
			t.Errorf("%s: message %q does not name %s", c.name, r.apiMsg(), c.field)
		}
	}
	noGroups("heartbeats on bad names")
	r := apiSend(t, tc, apiMember, "POST", apiHBPath("names", "ghost", "m1"), apiHBBody{Member: "m1", Owned: []int{0, 1, 2}}.toMap(), nil)
	r.apiWantError(t, 400, "INVALID_REQUEST")
	noGroups("a first heartbeat with 3 shards on a 2-shard stream")
	if got := apiLogLen(t, tc, rdb); got != logLen {
		t.Fatalf("refused heartbeats appended %d events", got-logLen)
	}
	apiDo(t, tc, "GET", apiGroupPath("names", "ghost"), nil).apiWantError(t, 404, "GROUP_NOT_FOUND")
	// Within the span the same member registers the group.
	if hb := apiHeartbeat(t, tc, apiMember, "names", "ghost", "m1", apiHBBody{Member: "m1"}.toMap()); hb.Status != "OK" {
		t.Fatalf("first heartbeat: %s", hb.Body)
	}
}

// TestIntegrationBoundedInputs: a heartbeat with a 400 kB requestId and
// memberName was appended to the log as it was (+1.8 MB), and so was a create
// with a 400 kB requestedBy. Every string that can reach an event is bounded
// now: the limit is accepted, one byte more is a 400 naming the field, and a
// refused admin command's record keeps at most the limit.
func TestIntegrationBoundedInputs(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	rdb := apiRedis(t, tc)
	apiCreate(t, tc, "bounded", "g", 4).apiWant(t, 201)
	huge := strings.Repeat("x", 400<<10)
	at, over := strings.Repeat("r", 256), strings.Repeat("r", 257)

	logLen := apiLogLen(t, tc, rdb)
	for _, c := range []struct {
		name, field string
		body        map[string]any
	}{
		{"huge requestId", "requestId", apiHBBody{Member: "m1", RequestID: huge}.toMap()},
		{"requestId over the limit", "requestId", apiHBBody{Member: "m1", RequestID: over}.toMap()},
		{"huge memberName", "memberName", func() map[string]any { b := apiHBBody{Member: "m1"}.toMap(); b["memberName"] = huge; return b }()},
		{"control character in memberName", "memberName", func() map[string]any { b := apiHBBody{Member: "m1"}.toMap(); b["memberName"] = "a\nb"; return b }()},
		{"five shards in a four-shard group", "ownedShards", apiHBBody{Member: "m1", Epoch: 1, Owned: []int{0, 1, 2, 3, 4}}.toMap()},
		{"a shard listed twice", "ownedShards", apiHBBody{Member: "m1", Epoch: 1, Owned: []int{1, 1}}.toMap()},
		{"revoke report twice", "revokingShards", apiHBBody{Member: "m1", Epoch: 1, Revoking: []map[string]any{
			{"shard": map[string]any{"shardIndex": 1}, "state": "DRAINING", "inFlight": 1},
			{"shard": map[string]any{"shardIndex": 1}, "state": "REVOKED", "inFlight": 0}}}.toMap()},
		{"a null shard", "shardIndex", ownedRaw([]any{nil})},
		{"a shard without shardIndex", "shardIndex", ownedRaw([]any{map[string]any{}})},
		{"a negative shard", "shardIndex", ownedRaw([]any{map[string]any{"shardIndex": -1}})},
		{"progress with a bad id", "lastAckedId", apiHBBody{Member: "m1", Epoch: 1, Progress: []map[string]any{
			{"shard": map[string]any{"shardIndex": 1}, "streamKey": "bounded:1", "lastAckedId": "not-an-id"}}}.toMap()},
	} {
		r := apiSend(t, tc, apiMember, "POST", apiHBPath("bounded", "g", "m1"), c.body, nil)
		r.apiWantError(t, 400, "INVALID_REQUEST")
		if !strings.Contains(r.apiMsg(), c.field) {
			t.Errorf("%s: message %q does not name %s", c.name, r.apiMsg(), c.field)
		}
		if len(r.Body) > 4096 {
			t.Errorf("%s: the error body is %d bytes: it echoes the input", c.name, len(r.Body))
		}
	}
	longID := strings.Repeat("m", 201)
	apiSend(t, tc, apiMember, "POST", apiHBPath("bounded", "g", longID), apiHBBody{Member: longID}.toMap(), nil).apiWantError(t, 400, "INVALID_REQUEST")
	if got := apiLogLen(t, tc, rdb); got != logLen {
		t.Fatalf("refused heartbeats appended %d events", got-logLen)
	}
	// The limits themselves are accepted.
	okBody := apiHBBody{Member: strings.Repeat("m", 200), RequestID: at}.toMap()
	okBody["memberName"] = strings.Repeat("n", 256)
	if hb := apiHeartbeat(t, tc, apiMember, "bounded", "g", strings.Repeat("m", 200), okBody); hb.Status != "OK" {
		t.Fatalf("heartbeat at the limits: %s", hb.Body)
	}

	// Admin commands: requestedBy and reason.
	// (A group of the stream takes its shard count.)
	apiSend(t, tc, apiAdmin, "POST", apiGroupPath("bounded", "at-limit"), map[string]any{"requestedBy": at, "reason": at}, nil).apiWant(t, 201)
	for _, body := range []map[string]any{
		{"requestedBy": huge},
		{"requestedBy": over},
		{"requestedBy": "alice", "reason": over},
	} {
		before := apiLogLen(t, tc, rdb)
		r := apiSend(t, tc, apiAdmin, "POST", apiGroupPath("bounded", "over-limit"), body, nil)
		r.apiWantError(t, 400, "INVALID_REQUEST")
		if n := apiLogLen(t, tc, rdb) - before; n != 1 {
			t.Errorf("a refused create appended %d entries, want 1 (command.rejected)", n)
		}
		if size := lastEntryBytes(t, tc); size > 2048 {
			t.Errorf("the refused create's command.rejected is %d bytes", size)
		}
	}
	// The group was never created: its refusals are in the log, in no
	// group's history.
	refusals := 0
	for _, e := range apiAllEvents(t, tc, "/coord/v1/monitoring/events") {
		if e.Type != "command.rejected" || e.StreamPrefix != "bounded" || e.ConsumerGroup != "over-limit" {
			continue
		}
		refusals++
		if s := fmt.Sprint(e.Payload["requestedBy"]); len(s) > 256 {
			t.Errorf("command.rejected keeps a requestedBy of %d bytes", len(s))
		}
	}
	if refusals != 3 {
		t.Errorf("%d refused creates in the log, want 3", refusals)
	}
	apiSend(t, tc, apiAdmin, "POST", apiGroupPath("bounded", "g", "scale"), map[string]any{"targetShardCount": 2, "requestedBy": "alice", "reason": huge}, nil).apiWantError(t, 400, "INVALID_REQUEST")
}

// lastEntryBytes is the size of the log's last entry.
func lastEntryBytes(t *testing.T, tc *testCoordinator) int {
	t.Helper()
	msgs, err := apiRedis(t, tc).XRevRangeN(context.Background(), tc.Main.LogStream, "+", "-", 1).Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("read the last log entry: %v", err)
	}
	n := 0
	for k, v := range msgs[0].Values {
		n += len(k) + len(fmt.Sprint(v))
	}
	return n
}

// TestIntegrationClaimsOutsideAuthorityAreNotStored: shards a member may not
// hold keep the contract's outcome (the member is fenced) and nothing of the
// report is stored; progress reports name the shard's real stream key.
func TestIntegrationClaimsOutsideAuthorityAreNotStored(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	apiCreate(t, tc, "claims", "g", 4).apiWant(t, 201)
	epoch, mv, owned := apiJoinSteady(t, tc, "claims", "g", "a")
	jb := apiBeat(t, tc, "claims", "g", apiHBBody{Member: "b"})
	if jb.Status != "OK" {
		t.Fatalf("b join: %s", jb.Body)
	}
	// a reports progress with a made-up stream key on a shard it holds.
	hb := apiBeat(t, tc, "claims", "g", apiHBBody{Member: "a", Epoch: epoch, MV: mv, Owned: owned, Progress: []map[string]any{
		{"shard": map[string]any{"shardIndex": owned[0]}, "streamKey": "evil:key", "pendingCount": 3},
	}})
	if hb.Status != "OK" {
		t.Fatalf("progress: %s", hb.Body)
	}
	members := apiDo(t, tc, "GET", apiMonPath("claims", "g", "members"), nil).apiWant(t, 200)
	if strings.Contains(string(members.Body), "evil:key") {
		t.Errorf("a member-supplied stream key reached monitoring: %s", members.Body)
	}
	// b claims a shard it was never granted (b's target is pending on a).
	claim := apiBeat(t, tc, "claims", "g", apiHBBody{Member: "b", Epoch: jb.MemberEpoch, MV: jb.MetadataVersion, Owned: []int{owned[0]}})
	if claim.Status != "FENCED_MEMBER_EPOCH" {
		t.Fatalf("a claim outside authority answered %s, want FENCED_MEMBER_EPOCH", claim.Status)
	}
	members = apiDo(t, tc, "GET", apiMonPath("claims", "g", "members"), nil).apiWant(t, 200)
	for _, m := range apiArr(t, members.JSON, "members") {
		mm := m.(map[string]any)
		if mm["memberId"] == "b" && len(apiShards(t, mm["currentAssignment"])) != 0 {
			t.Errorf("the fenced claim was stored: %v", mm)
		}
	}
}

// TestIntegrationGracefulLeaveReleasesAtOnce: a leave that listed the member's
// owned shards kept them blocked until the rebalance timeout (60 s), slower
// than a crash (15 s lease). The contract (§3.2) releases them at once; only
// shards reported as DRAINING stay blocked until REVOKED.
func TestIntegrationGracefulLeaveReleasesAtOnce(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	apiCreate(t, tc, "leave", "g", 4).apiWant(t, 201)
	ea, mva, _ := apiJoinSteady(t, tc, "leave", "g", "a")
	jb := apiBeat(t, tc, "leave", "g", apiHBBody{Member: "b"})
	// a releases what b is to get; b then owns its half.
	ra := apiBeat(t, tc, "leave", "g", apiHBBody{Member: "a", Epoch: ea, MV: mva, Owned: []int{0, 1, 2, 3}})
	ra = apiBeat(t, tc, "leave", "g", apiHBBody{Member: "a", Epoch: ra.MemberEpoch, MV: ra.MetadataVersion, Owned: ra.Assigned})
	rb := apiBeat(t, tc, "leave", "g", apiHBBody{Member: "b", Epoch: jb.MemberEpoch, MV: jb.MetadataVersion})
	rb = apiBeat(t, tc, "leave", "g", apiHBBody{Member: "b", Epoch: rb.MemberEpoch, MV: rb.MetadataVersion, Owned: rb.Assigned})
	if len(ra.Assigned) != 2 || len(rb.Assigned) != 2 {
		t.Fatalf("not converged: a %v b %v", ra.Assigned, rb.Assigned)
	}
	// b leaves listing what it owns, without revoke reports (as the Python
	// client would if it left): released at once.
	lb := apiBeat(t, tc, "leave", "g", apiHBBody{Member: "b", Epoch: -1, MV: rb.MetadataVersion, Owned: rb.Assigned})
	if lb.Status != "OK" || lb.MemberEpoch != -1 {
		t.Fatalf("leave: %s", lb.Body)
	}
	next := apiBeat(t, tc, "leave", "g", apiHBBody{Member: "a", Epoch: ra.MemberEpoch, MV: ra.MetadataVersion, Owned: ra.Assigned})
	if next.Status != "OK" || len(next.Assigned) != 4 || len(next.Pending) != 0 {
		t.Fatalf("after b left, a's next heartbeat should own every shard at once: assigned %v pending %v", next.Assigned, next.Pending)
	}
	next = apiBeat(t, tc, "leave", "g", apiHBBody{Member: "a", Epoch: next.MemberEpoch, MV: next.MetadataVersion, Owned: next.Assigned})

	// A Spring-style leave that reports a shard as still DRAINING keeps it
	// blocked until its REVOKED report.
	jc := apiBeat(t, tc, "leave", "g", apiHBBody{Member: "c"})
	ra = apiBeat(t, tc, "leave", "g", apiHBBody{Member: "a", Epoch: next.MemberEpoch, MV: next.MetadataVersion, Owned: []int{0, 1, 2, 3}})
	ra = apiBeat(t, tc, "leave", "g", apiHBBody{Member: "a", Epoch: ra.MemberEpoch, MV: ra.MetadataVersion, Owned: ra.Assigned})
	rc := apiBeat(t, tc, "leave", "g", apiHBBody{Member: "c", Epoch: jc.MemberEpoch, MV: jc.MetadataVersion})
	rc = apiBeat(t, tc, "leave", "g", apiHBBody{Member: "c", Epoch: rc.MemberEpoch, MV: rc.MetadataVersion, Owned: rc.Assigned})
	if len(rc.Assigned) != 2 {
		t.Fatalf("c not converged: %s", rc.Body)
	}
	draining, done := rc.Assigned[0], rc.Assigned[1]
	apiBeat(t, tc, "leave", "g", apiHBBody{Member: "c", Epoch: -1, MV: rc.MetadataVersion, Owned: rc.Assigned, Revoking: []map[string]any{
		{"shard": map[string]any{"shardIndex": draining}, "state": "DRAINING", "inFlight": 1},
		{"shard": map[string]any{"shardIndex": done}, "state": "REVOKED", "inFlight": 0},
	}})
	na := apiBeat(t, tc, "leave", "g", apiHBBody{Member: "a", Epoch: ra.MemberEpoch, MV: ra.MetadataVersion, Owned: ra.Assigned})
	if !containsIntE2E(na.Pending, draining) || containsIntE2E(na.Assigned, draining) || !containsIntE2E(na.Assigned, done) {
		t.Fatalf("the DRAINING shard %d must stay pending and the REVOKED one %d be assigned: assigned %v pending %v", draining, done, na.Assigned, na.Pending)
	}
	apiBeat(t, tc, "leave", "g", apiHBBody{Member: "c", Epoch: -1, MV: rc.MetadataVersion, Revoking: []map[string]any{
		{"shard": map[string]any{"shardIndex": draining}, "state": "REVOKED", "inFlight": 0},
	}})
	na = apiBeat(t, tc, "leave", "g", apiHBBody{Member: "a", Epoch: na.MemberEpoch, MV: na.MetadataVersion, Owned: na.Assigned})
	if len(na.Assigned) != 4 {
		t.Fatalf("after c's REVOKED report a should own every shard: %v pending %v", na.Assigned, na.Pending)
	}
	// The last leave empties the group.
	apiBeat(t, tc, "leave", "g", apiHBBody{Member: "a", Epoch: -1, MV: na.MetadataVersion, Owned: na.Assigned})
	if st := apiGroup(t, tc, "leave", "g")["state"]; st != "EMPTY" {
		t.Fatalf("group state after the last leave: %v, want EMPTY", st)
	}
}

func containsIntE2E(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestIntegrationMemberCap: --max-members-per-group bounds a group's member
// records: the limit joins, one more is 409 GROUP_MAX_SIZE_REACHED, and a
// record that only remains for monitoring (a member that left) makes room.
func TestIntegrationMemberCap(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) { m.MaxMembersPerGroup = 3 })
	apiCreate(t, tc, "cap", "g", 4).apiWant(t, 201)
	for _, id := range []string{"m1", "m2", "m3"} {
		if hb := apiBeat(t, tc, "cap", "g", apiHBBody{Member: id}); hb.Status != "OK" {
			t.Fatalf("join %s: %s", id, hb.Body)
		}
	}
	r := apiSend(t, tc, apiMember, "POST", apiHBPath("cap", "g", "m4"), apiHBBody{Member: "m4"}.toMap(), nil)
	r.apiWantError(t, 409, "GROUP_MAX_SIZE_REACHED")
	// m3 leaves holding nothing: its record makes room for m4.
	j3 := apiBeat(t, tc, "cap", "g", apiHBBody{Member: "m3"})
	apiBeat(t, tc, "cap", "g", apiHBBody{Member: "m3", Epoch: -1, MV: j3.MetadataVersion})
	if hb := apiBeat(t, tc, "cap", "g", apiHBBody{Member: "m4"}); hb.Status != "OK" {
		t.Fatalf("join after a leave: %s", hb.Body)
	}
	var ids []string
	for _, m := range apiArr(t, apiDo(t, tc, "GET", apiMonPath("cap", "g", "members"), nil).apiWant(t, 200).JSON, "members") {
		ids = append(ids, m.(map[string]any)["memberId"].(string))
	}
	sort.Strings(ids)
	if strings.Join(ids, ",") != "m1,m2,m4" {
		t.Errorf("members %v, want m1,m2,m4 (m3's record pruned)", ids)
	}
}

// TestIntegrationSelfHealingShards: Redis losing a routed shard stream or the
// group's consumer group (a restart without persistence, an operator's
// mistake) is repaired by the next check, with an event and a metric; a
// retired stream stays deleted.
func TestIntegrationSelfHealingShards(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.ShardCheckInterval = 200 * time.Millisecond
		m.TickInterval = 100 * time.Millisecond
	})
	rdb := apiRedis(t, tc)
	ctx := context.Background()
	apiCreate(t, tc, "heal", "g", 4).apiWant(t, 201)
	// Entries on shard 1 survive the loss of its consumer group.
	for i := 0; i < 3; i++ {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "heal:1", Values: map[string]any{"n": i}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rdb.Del(ctx, "heal:0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.XGroupDestroy(ctx, "heal:1", "g").Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "heal:0 and its group, and heal:1's group, recreated", func() bool {
		g0, err0 := rdb.XInfoGroups(ctx, "heal:0").Result()
		g1, err1 := rdb.XInfoGroups(ctx, "heal:1").Result()
		return err0 == nil && err1 == nil && len(g0) == 1 && len(g1) == 1
	})
	g1, _ := rdb.XInfoGroups(ctx, "heal:1").Result()
	if g1[0].Lag != 3 && g1[0].EntriesRead == 3 {
		t.Errorf("the recreated group on heal:1 should read the 3 surviving entries again: %+v", g1[0])
	}
	repairs := hostileEvents(t, tc, "heal", "g", "group.shards_repaired")
	if len(repairs) == 0 {
		t.Fatal("no group.shards_repaired event")
	}
	metrics := string(apiSend(t, tc, apiNoAuth, "GET", "/metrics", nil, nil).apiWant(t, 200).Body)
	if !strings.Contains(metrics, `rsc_shards_repaired_total{consumer_group="g",stream_prefix="heal"} 2`) {
		t.Errorf("rsc_shards_repaired_total does not count the 2 shards:\n%s", grepLines(metrics, "rsc_shards_repaired"))
	}

	// Scale in to 2: shards 2 and 3 are retired and stay deleted.
	apiScale(t, tc, "heal", "g", 2).apiWant(t, 202)
	eventually(t, 15*time.Second, "the scale-in retires heal:2 and heal:3", func() bool {
		n, err := rdb.Exists(ctx, "heal:2", "heal:3").Result()
		return err == nil && n == 0
	})
	if n := tc.Main.Coordinator().RepairShards(ctx); n != 0 {
		t.Fatalf("a check after the retirement repaired %d shards", n)
	}
	if n, _ := rdb.Exists(ctx, "heal:2", "heal:3").Result(); n != 0 {
		t.Fatal("a retired stream was recreated")
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestIntegrationJoinLogGrowthFlat: every join appended an
// assignment.computed naming every live member, so the log grew 968 bytes per
// join from 0 to 100 members and 4,804 bytes per join from 100 to 1,000; and
// every member's next heartbeat recorded its new epoch. Events name what
// changed now: bytes per join stay flat as the group grows, and a round of
// heartbeats after a join records only the members whose grants changed.
func TestIntegrationJoinLogGrowthFlat(t *testing.T) {
	parallel(t)
	if testing.Short() {
		t.Skip("1,000 joins")
	}
	// Long leases: 2,000 requests under the race detector on a busy machine
	// must not expire the first members.
	// No churn budget: 1,000 joins of one principal in one group are what is
	// measured here (TestIntegrationChurnLoopIsBudgeted tests the budget).
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) { m.MemberLease, m.MemberChurnPerMinute, m.PrincipalChurnPerMinute = 10*time.Minute, 0, 0 })
	rdb := apiRedis(t, tc)
	ctx := context.Background()
	apiCreate(t, tc, "joins", "g", 128).apiWant(t, 201)
	usage := func() int64 {
		n, err := rdb.MemoryUsage(ctx, tc.Main.LogStream, 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	type state struct {
		epoch, mv int64
		owned     []int
	}
	members := map[string]*state{}
	join := func(i int) {
		id := fmt.Sprintf("m%04d", i)
		hb := apiBeat(t, tc, "joins", "g", apiHBBody{Member: id})
		if hb.Status != "OK" {
			t.Fatalf("join %s: %s", id, hb.Body)
		}
		members[id] = &state{hb.MemberEpoch, hb.MetadataVersion, hb.Assigned}
	}
	u0 := usage()
	for i := 0; i < 100; i++ {
		join(i)
	}
	u1 := usage()
	for i := 100; i < 1000; i++ {
		join(i)
	}
	u2 := usage()
	early, late := float64(u1-u0)/100, float64(u2-u1)/900
	t.Logf("log bytes per join: %.0f (0 -> 100 members), %.0f (100 -> 1000)", early, late)
	if late > 1.5*early {
		t.Errorf("bytes per join grew with the group: %.0f B at 100 -> 1000 members vs %.0f B at 0 -> 100", late, early)
	}
	// One heartbeat of every member, each reporting what it was granted.
	n0 := apiLogLen(t, tc, rdb)
	for id, m := range members {
		hb := apiBeat(t, tc, "joins", "g", apiHBBody{Member: id, Epoch: m.epoch, MV: m.mv, Owned: m.owned})
		if hb.Status != "OK" {
			t.Fatalf("heartbeat of %s: %s", id, hb.Body)
		}
	}
	if n := apiLogLen(t, tc, rdb) - n0; n > 50 {
		t.Errorf("one heartbeat of each of 1000 members appended %d events; only grant changes should be recorded", n)
	}
}
