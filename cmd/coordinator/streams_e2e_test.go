package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
)

// The calls the reference's Spring Boot starter makes at 0.3.5 (its
// CoordinatorClient and CoordinatorRoutingMetadataValidator, restated in
// ../shared/spec/CONTRACT-0.3.md): at bean creation of every producer and
// managed consumer the stream-scoped routing GET, checked by the validator;
// heartbeats with Basic credentials (never a token); the graceful leave on
// stop (memberEpoch -1, availableConcurrency 0). Producers XADD NOMKSTREAM to
// the shard routeV1 picks and refresh the routing on a failed XADD; members
// read their shards with XREADGROUP and XACK what they handled.

// starterRouting is the stream-scoped routing as the starter decodes it.
type starterRouting struct {
	StreamPrefix    string `json:"streamPrefix"`
	MetadataVersion int64  `json:"metadataVersion"`
	ShardCount      int    `json:"shardCount"`
	Shards          []struct {
		ShardIndex int    `json:"shardIndex"`
		StreamKey  string `json:"streamKey"`
		RedisSlot  int    `json:"redisSlot"`
	} `json:"shards"`
}

// starterGet is the starter's routing GET with its validator: the answer's
// streamPrefix equal to its own, shardCount > 0, shards exactly
// 0..shardCount-1 (a failure aborts the application's start-up).
func starterGet(tc *testCoordinator, user, pass, prefix string) (starterRouting, error) {
	var out starterRouting
	r, err := tc.TryDoAs(user, pass, "GET", "/coord/v1/streams/"+prefix+"/producer-routing", nil)
	if err != nil {
		return out, err
	}
	if r.Status != 200 {
		return out, fmt.Errorf("producer routing: HTTP %d %s", r.Status, r.Body)
	}
	if err := json.Unmarshal(r.Body, &out); err != nil {
		return out, err
	}
	if out.StreamPrefix != prefix {
		return out, fmt.Errorf("producer routing streamPrefix %s does not match configured %s", out.StreamPrefix, prefix)
	}
	if out.ShardCount <= 0 || len(out.Shards) == 0 {
		return out, fmt.Errorf("stream %s has no active shards", prefix)
	}
	seen := map[int]bool{}
	for _, s := range out.Shards {
		seen[s.ShardIndex] = true
	}
	for i := 0; i < out.ShardCount; i++ {
		if !seen[i] {
			return out, fmt.Errorf("stream %s active shard list does not match shardCount", prefix)
		}
	}
	if len(seen) != out.ShardCount {
		return out, fmt.Errorf("stream %s active shard list does not match shardCount", prefix)
	}
	return out, nil
}

// starterProducer publishes sequence numbers under keys, routed by the
// stream-scoped routing it refreshes every refresh and after a failed XADD.
type starterProducer struct {
	tc         *testCoordinator
	rdb        *redis.Client
	user, pass string
	prefix     string

	mu        sync.Mutex
	routing   starterRouting
	published map[int64]bool
	failures  int
}

func (p *starterProducer) refresh() error {
	rt, err := starterGet(p.tc, p.user, p.pass, p.prefix)
	if err != nil {
		return err
	}
	p.mu.Lock()
	if rt.MetadataVersion >= p.routing.MetadataVersion {
		p.routing = rt
	}
	p.mu.Unlock()
	return nil
}

// publish writes seq under its key, retrying after a refresh when the XADD
// finds no stream (a retired shard: NOMKSTREAM answers nil).
func (p *starterProducer) publish(ctx context.Context, seq int64) error {
	key := "key-" + strconv.FormatInt(seq%97, 10)
	for attempt := 0; attempt < 20; attempt++ {
		p.mu.Lock()
		count := p.routing.ShardCount
		p.mu.Unlock()
		shard, err := routing.RouteKey(key, count)
		if err != nil {
			return err
		}
		id, err := p.rdb.XAdd(ctx, &redis.XAddArgs{Stream: routing.StreamKey(p.prefix, shard), NoMkStream: true,
			Values: map[string]any{"seq": seq, "key": key}}).Result()
		if err == nil && id != "" {
			p.mu.Lock()
			p.published[seq] = true
			p.mu.Unlock()
			return nil
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		p.mu.Lock()
		p.failures++
		p.mu.Unlock()
		if err := p.refresh(); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("seq %d: no shard took it after 20 refreshes", seq)
}

// starterMember is one managed consumer: it heartbeats with Basic
// credentials, reads and acks the shards an OK grants, and when a shard is
// no longer assigned it stops reading it, acks what it read and reports it
// REVOKED once before it stops listing it.
type starterMember struct {
	tc         *testCoordinator
	rdb        *redis.Client
	user, pass string
	prefix     string
	group, id  string

	mu       sync.Mutex
	epoch    int64
	mv       int64
	owned    []int
	revoked  []int // released since the last heartbeat
	consumed map[int64]bool
	statuses map[string]int
	n        int
	stopped  chan struct{}
	cancel   context.CancelFunc
}

func (m *starterMember) body(epoch int64, available int) map[string]any {
	m.n++
	b := map[string]any{
		"protocolVersion": 1, "requestId": fmt.Sprintf("%s-%d", m.id, m.n), "memberId": m.id, "memberName": m.id,
		"memberEpoch": epoch, "metadataVersion": m.mv,
		"runtimeConsumerCapacity": map[string]any{"runtimeMaxConcurrency": 1, "availableConcurrency": available},
		"ownedShards":             []map[string]int{}, "revokingShards": []map[string]any{}, "shardProgress": []any{},
	}
	owned := make([]map[string]int, 0, len(m.owned))
	for _, s := range m.owned {
		owned = append(owned, map[string]int{"shardIndex": s})
	}
	b["ownedShards"] = owned
	rev := make([]map[string]any, 0, len(m.revoked))
	for _, s := range m.revoked {
		rev = append(rev, map[string]any{"shard": map[string]int{"shardIndex": s}, "state": "REVOKED", "inFlight": 0})
	}
	b["revokingShards"] = rev
	return b
}

func (m *starterMember) path() string {
	return fmt.Sprintf("/coord/v1/streams/%s/groups/%s/members/%s/heartbeat", m.prefix, m.group, m.id)
}

// beat sends one heartbeat and applies its answer.
func (m *starterMember) beat(ctx context.Context) {
	m.mu.Lock()
	body := m.body(m.epoch, 1)
	m.revoked = nil
	m.mu.Unlock()
	r, err := m.tc.TryDoAs(m.user, m.pass, "POST", m.path(), body)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.Status != 200 {
		m.statuses[fmt.Sprintf("HTTP %d", r.Status)]++
		return
	}
	hb := decodeHeartbeat(m.tc.t, r.Body)
	m.statuses[hb.Status]++
	switch hb.Status {
	case "OK":
		m.epoch, m.mv = hb.MemberEpoch, hb.MetadataVersion
		keep := map[int]bool{}
		for _, s := range hb.Assigned {
			keep[s] = true
		}
		var owned []int
		for _, s := range m.owned {
			if keep[s] {
				owned = append(owned, s)
			} else {
				// Everything read from it was acked right after it was
				// handled: the shard is released.
				m.revoked = append(m.revoked, s)
			}
		}
		for _, s := range hb.Assigned {
			if !containsIntE2E(owned, s) {
				owned = append(owned, s)
			}
		}
		sort.Ints(owned)
		m.owned = owned
	case "FENCED", "UNKNOWN_MEMBER_ID":
		m.epoch, m.owned, m.revoked = 0, nil, nil
	default:
		m.mv = hb.MetadataVersion
	}
}

// consume reads and acks up to 50 entries from every owned shard.
func (m *starterMember) consume(ctx context.Context) {
	m.mu.Lock()
	owned := append([]int(nil), m.owned...)
	m.mu.Unlock()
	for _, s := range owned {
		key := routing.StreamKey(m.prefix, s)
		res, err := m.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: m.group, Consumer: m.id, Streams: []string{key, ">"}, Count: 50, Block: -1}).Result()
		if err != nil {
			continue
		}
		for _, st := range res {
			for _, msg := range st.Messages {
				seq, _ := strconv.ParseInt(fmt.Sprint(msg.Values["seq"]), 10, 64)
				if err := m.rdb.XAck(ctx, key, m.group, msg.ID).Err(); err != nil {
					continue // read again after a redelivery claim; not expected here
				}
				m.mu.Lock()
				m.consumed[seq] = true
				m.mu.Unlock()
			}
		}
	}
}

func (m *starterMember) start(interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel, m.stopped = cancel, make(chan struct{})
	go func() {
		defer close(m.stopped)
		for ctx.Err() == nil {
			m.beat(ctx)
			m.consume(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}()
}

// stop is the starter's graceful stop: finish reading, then leave with
// memberEpoch -1 and availableConcurrency 0.
func (m *starterMember) stop() hbResult {
	m.cancel()
	<-m.stopped
	m.consume(context.Background())
	m.mu.Lock()
	body := m.body(-1, 0)
	m.mu.Unlock()
	r := m.tc.DoAs(m.user, m.pass, "POST", m.path(), body).MustStatus(m.tc.t, 200)
	return decodeHeartbeat(m.tc.t, r.Body)
}

// TestIntegrationSpringStarter035Workflow: the 0.3.5 way. A stream is
// created with POST /coord/v1/streams/{p} (no consumer group); consumers of
// two group names that were never created start (routing GET and its
// validator, heartbeats with Basic credentials) and register their groups
// on their first heartbeat; producers publish with XADD NOMKSTREAM by the
// stream-scoped routing. Under that load the stream scales out 4 -> 6, then
// in 6 -> 3 (drained, retired); every consumer leaves gracefully. Nothing is
// lost: each group consumed every published message.
func TestIntegrationSpringStarter035Workflow(t *testing.T) {
	parallel(t)
	users := apiUsersFile(t, []map[string]any{
		{"username": "admin", "password": "password", "roles": []string{"ADMIN"}},
		{"username": "spring", "password": "s-pw", "roles": []string{"MEMBER", "READ"}},
	})
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, func(m *Main) {
		fastTimings(m)
		m.UsersFile = users
	})
	rdb := rs.Client(t)
	ctx := context.Background()
	const prefix = "orders"

	// Before the stream exists the starter cannot start.
	if _, err := starterGet(tc, "spring", "s-pw", prefix); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("routing of a stream that does not exist: %v, want a 404", err)
	}
	tc.Do("POST", "/coord/v1/streams/"+prefix, map[string]any{"initialShardCount": 4, "requestedBy": "ops", "reason": "launch"}).MustStatus(t, 201)
	rt, err := starterGet(tc, "spring", "s-pw", prefix)
	if err != nil || rt.ShardCount != 4 || rt.MetadataVersion != 1 {
		t.Fatalf("start-up routing: %+v %v", rt, err)
	}

	var members []*starterMember
	for _, group := range []string{"billing", "audit"} {
		for i := 0; i < 2; i++ {
			m := &starterMember{tc: tc, rdb: rdb, user: "spring", pass: "s-pw", prefix: prefix, group: group, id: fmt.Sprintf("%s-%d", group, i),
				consumed: map[int64]bool{}, statuses: map[string]int{}}
			members = append(members, m)
			m.start(50 * time.Millisecond)
		}
	}
	defer func() {
		for _, m := range members {
			if m.cancel != nil {
				m.cancel()
			}
		}
	}()
	owned := func(group string) int {
		n := 0
		for _, m := range members {
			if m.group == group {
				m.mu.Lock()
				n += len(m.owned)
				m.mu.Unlock()
			}
		}
		return n
	}
	apiEventually(t, 20*time.Second, "both groups registered and their 4 shards owned", func() (bool, string) {
		return owned("billing") == 4 && owned("audit") == 4, fmt.Sprintf("billing %d, audit %d", owned("billing"), owned("audit"))
	})
	for _, group := range []string{"billing", "audit"} {
		g := tc.Do("GET", fmt.Sprintf("/coord/v1/streams/%s/groups/%s", prefix, group), nil).MustStatus(t, 200)
		if g.JSON["shardCount"] != 4.0 {
			t.Fatalf("registered group %s: %s", group, g.Body)
		}
	}

	p := &starterProducer{tc: tc, rdb: rdb, user: "spring", pass: "s-pw", prefix: prefix, published: map[int64]bool{}}
	if err := p.refresh(); err != nil {
		t.Fatal(err)
	}
	var seq atomic.Int64
	pctx, stopProducing := context.WithCancel(ctx)
	produced := make(chan error, 1)
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for pctx.Err() == nil {
			select {
			case <-tick.C:
				_ = p.refresh() // the starter's cache expiry, shortened
			default:
			}
			if err := p.publish(ctx, seq.Add(1)); err != nil {
				produced <- err
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
		produced <- nil
	}()

	waitStream := func(what string, count int, mv int64) {
		t.Helper()
		apiEventually(t, 30*time.Second, what, func() (bool, string) {
			st := tc.Do("GET", "/coord/v1/streams/"+prefix, nil).MustStatus(t, 200)
			done := st.JSON["shardCount"] == float64(count) && st.JSON["metadataVersion"] == float64(mv)
			for _, group := range []string{"billing", "audit"} {
				g := tc.Do("GET", fmt.Sprintf("/coord/v1/streams/%s/groups/%s", prefix, group), nil).MustStatus(t, 200)
				done = done && g.JSON["activeMigration"] == nil && g.JSON["shardCount"] == float64(count)
			}
			return done, string(st.Body)
		})
	}
	time.Sleep(time.Second) // under load
	r := tc.Do("POST", "/coord/v1/streams/"+prefix+"/scale", map[string]any{"targetShardCount": 6, "requestedBy": "ops", "reason": "peak"}).MustStatus(t, 202)
	if got := fmt.Sprint(r.JSON["affectedConsumerGroups"]); got != "[audit billing]" {
		t.Fatalf("the scale-out's groups %s", got)
	}
	waitStream("the scale-out to 6 completed for both groups", 6, 2)
	time.Sleep(time.Second) // under load
	tc.Do("POST", "/coord/v1/streams/"+prefix+"/scale", map[string]any{"targetShardCount": 3, "requestedBy": "ops", "reason": "night"}).MustStatus(t, 202)
	waitStream("the scale-in to 3 drained and completed for both groups", 3, 3)
	time.Sleep(time.Second) // under load
	stopProducing()
	if err := <-produced; err != nil {
		t.Fatalf("producer: %v", err)
	}
	apiEventually(t, 20*time.Second, "the retired shards deleted", func() (bool, string) {
		n := rdb.Exists(ctx, prefix+":3", prefix+":4", prefix+":5").Val()
		return n == 0, fmt.Sprintf("%d of orders:3..5 exist", n)
	})

	total := len(p.published)
	apiEventually(t, 20*time.Second, "every published message consumed by each group", func() (bool, string) {
		missing := map[string]int{}
		for _, group := range []string{"billing", "audit"} {
			got := map[int64]bool{}
			for _, m := range members {
				if m.group == group {
					m.mu.Lock()
					for s := range m.consumed {
						got[s] = true
					}
					m.mu.Unlock()
				}
			}
			for s := range p.published {
				if !got[s] {
					missing[group]++
				}
			}
		}
		return missing["billing"] == 0 && missing["audit"] == 0, fmt.Sprintf("%d published, missing %v", total, missing)
	})
	if total < 100 {
		t.Fatalf("only %d messages were published under the scales", total)
	}

	// The graceful leave on stop.
	for _, m := range members {
		hb := m.stop()
		if hb.Status != "OK" || hb.MemberEpoch != -1 {
			t.Errorf("%s's leave: %+v", m.id, hb)
		}
		m.mu.Lock()
		for st, n := range m.statuses {
			if st != "OK" && st != "REVOKE_PENDING" && st != "SYNC_METADATA" {
				t.Errorf("%s got %d × %s", m.id, n, st)
			}
		}
		m.mu.Unlock()
	}
	for _, group := range []string{"billing", "audit"} {
		ms := tc.Do("GET", fmt.Sprintf("/coord/v1/monitoring/streams/%s/groups/%s/members", prefix, group), nil).MustStatus(t, 200)
		for _, mm := range apiArr(t, ms.JSON, "members") {
			if s := mm.(map[string]any)["state"]; s != "LEAVING" {
				t.Errorf("%s member after the leave: %v", group, mm)
			}
		}
	}
	t.Logf("%d messages published (%d XADDs refused by a retired shard, refreshed and retried), none lost in either group", total, p.failures)

	// The log tells the story: the stream created, both groups registered by
	// a member's first heartbeat, with who and why.
	var registered []string
	for _, e := range apiAllEvents(t, tc, "/coord/v1/monitoring/events") {
		switch {
		case e.Type == "stream.created" && e.StreamPrefix == prefix:
			if e.ConsumerGroup != "" || e.Payload["requestedBy"] != "ops" || e.Payload["reason"] != "launch" {
				t.Errorf("stream.created %+v", e)
			}
		case e.Type == "group.created" && e.StreamPrefix == prefix:
			if e.Payload["requestedBy"] != "spring" || !strings.HasPrefix(fmt.Sprint(e.Payload["registeredBy"]), e.ConsumerGroup+"-") {
				t.Errorf("group.created %+v, want registered by a member of the group, requested by spring", e)
			}
			registered = append(registered, e.ConsumerGroup)
		}
	}
	sort.Strings(registered)
	if fmt.Sprint(registered) != "[audit billing]" {
		t.Errorf("groups registered %v, want audit and billing once each", registered)
	}
	// The stream's own history, and the stream as it was right after its
	// create (the replay endpoint).
	own := apiAllEvents(t, tc, "/coord/v1/monitoring/streams/"+prefix+"/events")
	if len(own) == 0 || own[0].Type != "stream.created" {
		t.Fatalf("the stream's history %+v, want stream.created first", own)
	}
	then := tc.Do("GET", "/coord/v1/monitoring/streams/"+prefix+"/replay?until="+own[0].ID, nil).MustStatus(t, 200)
	if st, _ := then.JSON["stream"].(map[string]any); st == nil || st["shardCount"] != 4.0 || st["metadataVersion"] != 1.0 || len(st["consumerGroups"].([]any)) != 0 {
		t.Fatalf("the stream right after its create: %s", then.Body)
	}
}

// TestIntegrationStreamRoutes: #21's items one by one over HTTP: the create
// and adopt answers, the stream-scoped routing (no consumerGroup; the
// stream's version, not a group's), a stream at 0 shards (routing with no
// shard, a first heartbeat joins with an empty assignment, no consumer
// group made), the caps, and a scoped principal seeing only its streams.
func TestIntegrationStreamRoutes(t *testing.T) {
	parallel(t)
	users := apiUsersFile(t, []map[string]any{
		{"username": "admin", "password": "password", "roles": []string{"ADMIN"}},
		{"username": "pay", "password": "p-pw", "roles": []string{"READ", "WRITE", "MEMBER"}, "prefixes": []string{"pay-*"}},
	})
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, func(m *Main) {
		fastTimings(m)
		m.UsersFile = users
		m.MaxGroups = 4
		m.MaxTotalShards = 40
	})
	rdb := rs.Client(t)
	ctx := context.Background()

	r := tc.Do("POST", "/coord/v1/streams/s1", map[string]any{"initialShardCount": 3, "requestedBy": "ops"}).MustStatus(t, 201)
	apiJSONEqual(t, r.Body, `{"streamPrefix":"s1","shardCount":3,"metadataVersion":1}`)
	rt := tc.Do("GET", "/coord/v1/streams/s1/producer-routing", nil).MustStatus(t, 200)
	if _, has := rt.JSON["consumerGroup"]; has || rt.JSON["shardCount"] != 3.0 || rt.JSON["metadataVersion"] != 1.0 || rt.JSON["streamKeyPattern"] != "s1:{shardIndex}" || len(apiArr(t, rt.JSON, "shards")) != 3 {
		t.Fatalf("stream routing: %s", rt.Body)
	}
	shard := apiArr(t, rt.JSON, "shards")[2].(map[string]any)
	if shard["shardIndex"] != 2.0 || shard["streamKey"] != "s1:2" || shard["redisSlot"] != float64(routing.Slot("s1:2")) {
		t.Fatalf("shard 2 of the routing: %v", shard)
	}
	tc.Do("GET", "/coord/v1/streams/none/producer-routing", nil).MustStatus(t, 404)
	if r := tc.Do("GET", "/coord/v1/streams/none/producer-routing", nil); r.JSON["errorCode"] != "STREAM_NOT_FOUND" {
		t.Fatalf("routing of nothing: %s", r.Body)
	}
	// A group's join moves the group's version, not the stream's.
	hb := tc.Heartbeat("s1", "g", "m1", 0, 0, nil)
	if hb.Status != "OK" || hb.MetadataVersion != 2 {
		t.Fatalf("first heartbeat of s1/g: %+v", hb)
	}
	if rt := tc.Do("GET", "/coord/v1/streams/s1/producer-routing", nil).MustStatus(t, 200); rt.JSON["metadataVersion"] != 1.0 {
		t.Fatalf("the stream's version after a join: %s", rt.Body)
	}
	if g := tc.Do("GET", "/coord/v1/streams/s1/groups/g/producer-routing", nil).MustStatus(t, 200); g.JSON["metadataVersion"] != 2.0 || g.JSON["consumerGroup"] != "g" {
		t.Fatalf("the group's routing after its join: %s", g.Body)
	}

	// Zero shards: a stream scaled to 0 routes nothing; a group registers
	// and joins with nothing assigned, no consumer group is made.
	tc.Do("POST", "/coord/v1/streams/zero", map[string]any{"initialShardCount": 1, "requestedBy": "ops"}).MustStatus(t, 201)
	tc.Do("POST", "/coord/v1/streams/zero/scale", map[string]any{"targetShardCount": 0, "requestedBy": "ops", "reason": "drain"}).MustStatus(t, 202)
	rt = tc.Do("GET", "/coord/v1/streams/zero/producer-routing", nil).MustStatus(t, 200)
	if rt.JSON["shardCount"] != 0.0 || len(apiArr(t, rt.JSON, "shards")) != 0 || rt.JSON["metadataVersion"] != 2.0 {
		t.Fatalf("routing at 0 shards: %s", rt.Body)
	}
	hb = tc.Heartbeat("zero", "g", "m1", 0, 0, nil)
	if hb.Status != "OK" || len(hb.Assigned) != 0 || len(hb.Pending) != 0 {
		t.Fatalf("a join at 0 shards: %+v", hb)
	}
	if groups, err := rdb.XInfoGroups(ctx, "zero:0").Result(); err != nil || len(groups) != 0 {
		t.Fatalf("zero:0 (kept by the scale to 0) has consumer groups %v (%v)", groups, err)
	}

	// Adopt: the answer, a key of another type, metadata already there.
	for i := 0; i < 2; i++ {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: fmt.Sprintf("theirs:%d", i), Values: map[string]any{"n": i}})
	}
	rdb.HSet(ctx, "typed:0", "f", "v")
	if r := tc.Do("POST", "/coord/v1/streams/typed/adopt", map[string]any{"shardCount": 1, "requestedBy": "ops"}); r.Status != 400 || !strings.Contains(fmt.Sprint(r.JSON["message"]), "typed:0 is a hash") {
		t.Fatalf("adopt of a hash: HTTP %d %s", r.Status, r.Body)
	}
	r = tc.Do("POST", "/coord/v1/streams/theirs/adopt", map[string]any{"shardCount": 2, "requestedBy": "ops", "reason": "migrate"}).MustStatus(t, 201)
	apiJSONEqual(t, r.Body, `{"streamPrefix":"theirs","shardCount":2,"metadataVersion":1}`)
	if r := tc.Do("POST", "/coord/v1/streams/theirs/adopt", map[string]any{"shardCount": 2, "requestedBy": "ops"}); r.Status != 409 || r.JSON["errorCode"] != "STREAM_PREFIX_ALREADY_EXISTS" {
		t.Fatalf("adopt again: HTTP %d %s", r.Status, r.Body)
	}
	st := tc.Do("GET", "/coord/v1/monitoring/streams/theirs", nil).MustStatus(t, 200)
	if st.JSON["origin"] != "ADOPTED" || fmt.Sprint(st.JSON["adoptedShards"]) != "[0 1]" || fmt.Sprint(st.JSON["createdShards"]) != "[]" {
		t.Fatalf("the adopted stream: %s", st.Body)
	}

	// The caps: 40 shards, 4 groups. Managed so far: s1/g's 3 shards, zero/g
	// at 0 (the shard its stream's scale to 0 kept does not count), theirs'
	// 2: 5 shards, 2 groups.
	if r := tc.Do("POST", "/coord/v1/streams/big", map[string]any{"initialShardCount": 36, "requestedBy": "ops"}); r.Status != 409 || r.JSON["errorCode"] != "SHARD_LIMIT_REACHED" {
		t.Fatalf("a stream past --max-total-shards: HTTP %d %s", r.Status, r.Body)
	}
	tc.Do("POST", "/coord/v1/streams/big", map[string]any{"initialShardCount": 35, "requestedBy": "ops"}).MustStatus(t, 201) // 40: the limit itself
	if r := tc.Do("POST", "/coord/v1/streams/c3/groups/g", map[string]any{"initialShardCount": 1, "requestedBy": "ops"}); r.Status != 409 || r.JSON["errorCode"] != "SHARD_LIMIT_REACHED" {
		t.Fatalf("a group past --max-total-shards: HTTP %d %s", r.Status, r.Body)
	}
	// A scale-in at the cap is never refused.
	tc.Do("POST", "/coord/v1/streams/big/scale", map[string]any{"targetShardCount": 33, "requestedBy": "ops", "reason": "room"}).MustStatus(t, 202)
	tc.Do("POST", "/coord/v1/streams/c3/groups/g", map[string]any{"initialShardCount": 1, "requestedBy": "ops"}).MustStatus(t, 201)
	tc.Do("POST", "/coord/v1/streams/c4/groups/g", map[string]any{"initialShardCount": 1, "requestedBy": "ops"}).MustStatus(t, 201) // 4 groups: the limit
	if r := tc.Do("POST", "/coord/v1/streams/c5/groups/g", map[string]any{"initialShardCount": 1, "requestedBy": "ops"}); r.Status != 409 || r.JSON["errorCode"] != "GROUP_LIMIT_REACHED" {
		t.Fatalf("a group past --max-groups: HTTP %d %s", r.Status, r.Body)
	}
	if r := tc.Do("POST", "/coord/v1/streams/s1/groups/new/members/m9/heartbeat", heartbeatBody("m9", 0, 0, nil, nil)); r.Status != 409 || r.JSON["errorCode"] != "GROUP_LIMIT_REACHED" {
		t.Fatalf("a registration past --max-groups: HTTP %d %s", r.Status, r.Body)
	}
	tc.Do("POST", "/coord/v1/streams/big/scale", map[string]any{"targetShardCount": 30, "requestedBy": "ops", "reason": "room"}).MustStatus(t, 202)

	// A scoped principal sees and registers only its own streams.
	tc.DoAs("pay", "p-pw", "POST", "/coord/v1/streams/pay-eu", map[string]any{"initialShardCount": 1, "requestedBy": "pay"}).MustStatus(t, 201)
	list := tc.DoAs("pay", "p-pw", "GET", "/coord/v1/monitoring/streams", nil).MustStatus(t, 200)
	if ss := apiArr(t, list.JSON, "streams"); len(ss) != 1 || ss[0].(map[string]any)["streamPrefix"] != "pay-eu" {
		t.Fatalf("pay's streams: %s", list.Body)
	}
	if r := tc.DoAs("pay", "p-pw", "GET", "/coord/v1/streams/s1/producer-routing", nil); r.Status != 403 {
		t.Fatalf("pay reading s1's routing: HTTP %d", r.Status)
	}
	if r := tc.DoAs("pay", "p-pw", "POST", "/coord/v1/streams/s1/groups/intruder/members/x/heartbeat", heartbeatBody("x", 0, 0, nil, nil)); r.Status != 403 {
		t.Fatalf("pay registering a group on s1: HTTP %d", r.Status)
	}
	all := tc.Do("GET", "/coord/v1/monitoring/streams", nil).MustStatus(t, 200)
	var prefixes []string
	for _, s := range apiArr(t, all.JSON, "streams") {
		prefixes = append(prefixes, s.(map[string]any)["streamPrefix"].(string))
	}
	if fmt.Sprint(prefixes) != "[big c3 c4 pay-eu s1 theirs zero]" {
		t.Fatalf("every stream: %v", prefixes)
	}
}

// TestIntegrationOldLogStreams: a log written by the build before stream
// metadata (events/testdata/old-log-v2.jsonl) loads with no stream metadata:
// stream-scoped routing answers from the groups when they agree and 409
// STREAM_SHARD_TOPOLOGY_CONFLICT when they do not; a first heartbeat there
// stays UNKNOWN_MEMBER_ID, and POST /streams/{p} is refused while its groups
// exist.
func TestIntegrationOldLogStreams(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	rdb := rs.Client(t)
	ctx := context.Background()
	const logKey = "old:events"
	data, err := os.ReadFile("../../events/testdata/old-log-v2.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var e struct{ ID, Data string }
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatal(err)
		}
		raw, err := base64.StdEncoding.DecodeString(e.Data)
		if err != nil {
			t.Fatal(err)
		}
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: logKey, ID: e.ID, Values: map[string]any{"e": raw}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	tc := startCoordinator(t, rs, func(m *Main) { m.LogStream = logKey })

	r := tc.Do("GET", "/coord/v1/streams/multi/producer-routing", nil)
	if r.Status != 409 || r.JSON["errorCode"] != "STREAM_SHARD_TOPOLOGY_CONFLICT" {
		t.Fatalf("routing of multi (groups at 3 and 2 shards): HTTP %d %s", r.Status, r.Body)
	}
	rt := tc.Do("GET", "/coord/v1/streams/legacy/producer-routing", nil).MustStatus(t, 200)
	if rt.JSON["shardCount"] != 3.0 || len(apiArr(t, rt.JSON, "shards")) != 3 {
		t.Fatalf("routing of legacy from its group: %s", rt.Body)
	}
	st := tc.Do("GET", "/coord/v1/monitoring/streams/multi", nil).MustStatus(t, 200)
	if st.JSON["hasMetadata"] != false || st.JSON["topologyConflict"] != true || st.JSON["shardCount"] != nil || fmt.Sprint(st.JSON["createdShards"]) != "[0 1 2]" {
		t.Fatalf("multi: %s", st.Body)
	}
	if wide := tc.Do("GET", "/coord/v1/streams/wide", nil).MustStatus(t, 200); fmt.Sprint(wide.JSON["createdShards"]) != "[0 1]" {
		t.Fatalf("wide (its scale-in retired 2 and 3): %s", wide.Body)
	}
	hb := tc.Heartbeat("legacy", "newcomer", "m1", 0, 0, nil)
	if hb.Status != "UNKNOWN_MEMBER_ID" {
		t.Fatalf("a first heartbeat on a prefix without stream metadata: %+v", hb)
	}
	if r := tc.Do("POST", "/coord/v1/streams/legacy", map[string]any{"requestedBy": "ops"}); r.Status != 409 || r.JSON["errorCode"] != "STREAM_PREFIX_ALREADY_EXISTS" {
		t.Fatalf("stream create over an old group: HTTP %d %s", r.Status, r.Body)
	}
}

// TestIntegrationRollbackOntoStreamsTheStreamCreated: shard streams the
// coordinator created empty, and kept when the stream (without groups then)
// scaled in, are used again by a later scale-out of its group; with nothing
// written to them since, that scale-out rolls back by metadata alone. They
// used to carry entries-added 1 (the entry that created them), which the
// rollback read as an entry a producer wrote: 422 ROLLBACK_NOT_ALLOWED
// ("kept:1 (1 entries)").
func TestIntegrationRollbackOntoStreamsTheStreamCreated(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, nil)
	rdb := rs.Client(t)

	tc.Do("POST", "/coord/v1/streams/kept", map[string]any{"initialShardCount": 3, "requestedBy": "ops"}).MustStatus(t, 201)
	tc.Do("POST", "/coord/v1/streams/kept/scale", map[string]any{"targetShardCount": 1, "requestedBy": "ops", "reason": "shrink"}).MustStatus(t, 202)
	for _, k := range []string{"kept:1", "kept:2"} {
		info, err := rdb.XInfoStream(context.Background(), k).Result()
		if err != nil || info.Length != 0 || info.EntriesAdded != 0 {
			t.Fatalf("%s after the stream's scale-in: %+v, %v; want kept, empty, never written", k, info, err)
		}
	}
	holdUnconverged(t, tc, "kept", "g") // registers g by its first heartbeat and keeps its scale-out ACTIVE
	id := scale(t, tc, "kept", "g", 3)
	r := tc.Do("POST", "/coord/v1/streams/kept/groups/g/migrations/"+id+"/rollback", map[string]any{"requestedBy": "ops", "reason": "undo"})
	if r.Status != 202 || r.JSON["state"] != "ROLLED_BACK" {
		t.Fatalf("rollback of the scale-out onto the kept streams: HTTP %d %s", r.Status, r.Body)
	}
	rt := tc.Do("GET", "/coord/v1/streams/kept/producer-routing", nil).MustStatus(t, 200)
	if rt.JSON["shardCount"] != 1.0 || rt.JSON["metadataVersion"] != 4.0 {
		t.Fatalf("stream routing after the rollback (create 1, scale-in 2, scale-out 3, rollback 4): %s", rt.Body)
	}
}
