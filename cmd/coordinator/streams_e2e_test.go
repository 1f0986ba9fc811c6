package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
