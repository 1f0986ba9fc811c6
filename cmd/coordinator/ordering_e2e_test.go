package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// Ordered resharding against a real Redis: the coordinator's half (fences,
// cutovers, barriers and their release from Redis evidence). The SDK's half
// (fenced publishes, members holding entries) has its own tests in client/.

func createOrderedGroup(t *testing.T, tc *testCoordinator, prefix, group string, shards int) {
	t.Helper()
	r := tc.Do("POST", fmt.Sprintf("/coord/v1/streams/%s/groups/%s", prefix, group), map[string]any{"initialShardCount": shards, "requestedBy": "test", "ordering": "KEY"}).MustStatus(t, 201)
	if r.JSON["ordering"] != "KEY" {
		t.Fatalf("created group shows ordering %v, want KEY: %s", r.JSON["ordering"], r.Body)
	}
}

// heartbeatAnswer posts a heartbeat and decodes the whole answer.
func heartbeatAnswer(t *testing.T, tc *testCoordinator, prefix, group, member string, epoch, mv int64, owned []int) wire.HeartbeatResponse {
	t.Helper()
	r := tc.Do("POST", fmt.Sprintf("/coord/v1/streams/%s/groups/%s/members/%s/heartbeat", prefix, group, member), heartbeatBody(member, epoch, mv, owned, nil)).MustStatus(t, 200)
	var res wire.HeartbeatResponse
	if err := json.Unmarshal(r.Body, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

// converge heartbeats one member until it owns every shard it is assigned
// and none is pending; it returns the last answer.
func converge(t *testing.T, tc *testCoordinator, prefix, group, member string) wire.HeartbeatResponse {
	t.Helper()
	var last wire.HeartbeatResponse
	var owned []int
	epoch := int64(0)
	eventually(t, 10*time.Second, member+" to converge", func() bool {
		last = heartbeatAnswer(t, tc, prefix, group, member, epoch, last.MetadataVersion, owned)
		epoch = last.MemberEpoch
		owned = owned[:0]
		for _, s := range last.Assignment.AssignedShards {
			owned = append(owned, s.ShardIndex)
		}
		return last.Status == wire.StatusOK && len(last.Assignment.PendingShards) == 0
	})
	return last
}

func barrierShards(res wire.HeartbeatResponse) map[int]string {
	out := map[int]string{}
	for _, b := range res.Assignment.Barriers {
		out[b.Shard.ShardIndex] = b.After
	}
	return out
}

// fill adds n entries to a shard the way the fenced SDK publish does (with
// the routing version) and returns the last id.
func fill(t *testing.T, rdb *redis.Client, prefix string, shard, n int, mv int64) string {
	t.Helper()
	var id string
	for i := 0; i < n; i++ {
		var err error
		id, err = rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: routing.StreamKey(prefix, shard), Values: []any{"n", i, routing.FenceField, mv}}).Result()
		if err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// readAll reads every entry of a shard for the group and acknowledges them
// unless keep.
func readAll(t *testing.T, rdb *redis.Client, prefix, group string, shard int, keep bool) []string {
	t.Helper()
	ctx := context.Background()
	key := routing.StreamKey(prefix, shard)
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{key, ">"}, Count: 1000, Block: -1}).Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	var ids []string
	for _, st := range res {
		for _, m := range st.Messages {
			ids = append(ids, m.ID)
		}
	}
	if !keep && len(ids) > 0 {
		if err := rdb.XAck(ctx, key, group, ids...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func ackAll(t *testing.T, rdb *redis.Client, prefix, group string, shard int, ids []string) {
	t.Helper()
	if err := rdb.XAck(context.Background(), routing.StreamKey(prefix, shard), group, ids...).Err(); err != nil {
		t.Fatal(err)
	}
}

func fenceOf(t *testing.T, rdb *redis.Client, prefix, group string, shard int) int64 {
	t.Helper()
	v, err := rdb.HGet(context.Background(), routing.FenceKey(routing.StreamKey(prefix, shard)), group).Int64()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestIntegrationOrderedScaleOut: 4 -> 8 shards (powers of two: new shard
// 4+i gets keys only from shard i). Shards 0, 2 and 3 are read to the end
// before the scale, shard 1 has entries in flight: only shard 5 waits, on
// shard 1, until those entries are acknowledged; the resharding completes
// only then.
func TestIntegrationOrderedScaleOut(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	rdb := rs.Client(t)
	createOrderedGroup(t, tc, "ord", "g", 4)
	routing0 := tc.Do("GET", "/coord/v1/streams/ord/groups/g/producer-routing", nil).MustStatus(t, 200)
	if routing0.JSON["ordering"] != "KEY" || !strings.Contains(string(routing0.Body), `"fenceKey":"{ord:0}:fence"`) {
		t.Fatalf("routing of an ordered group: %s", routing0.Body)
	}
	mv0 := int64(routing0.JSON["metadataVersion"].(float64))
	for s := 0; s < 4; s++ {
		fill(t, rdb, "ord", s, 5, mv0)
	}
	for _, s := range []int{0, 2, 3} {
		readAll(t, rdb, "ord", "g", s, false)
	}
	inFlight := readAll(t, rdb, "ord", "g", 1, true)
	converge(t, tc, "ord", "g", "a")

	id := scale(t, tc, "ord", "g", 8)
	g := tc.Do("GET", "/coord/v1/streams/ord/groups/g", nil).MustStatus(t, 200)
	mv := int64(g.JSON["metadataVersion"].(float64))
	for s := 0; s < 4; s++ {
		if f := fenceOf(t, rdb, "ord", "g", s); f < mv-1 || f > mv {
			t.Fatalf("fence of shard %d is %d, want the activation's metadata version (group at %d)", s, f, mv)
		}
	}
	res := converge(t, tc, "ord", "g", "a")
	if got := barrierShards(res); len(got) != 1 || got[5] != "0-0" {
		t.Fatalf("barriers in the heartbeat answer: %v, want only shard 5 (after 0-0)", res.Assignment.Barriers)
	}
	if res.Assignment.Ordering != "KEY" {
		t.Fatalf("heartbeat answer ordering %q", res.Assignment.Ordering)
	}
	m := tc.migration("ord", "g", id)
	bs, _ := m["barriers"].([]any)
	if len(bs) != 1 {
		t.Fatalf("resharding view barriers: %v", m["barriers"])
	}
	b := bs[0].(map[string]any)
	src := b["waitingOn"].([]any)[0].(map[string]any)
	if src["streamKey"] != "ord:1" || src["cutoverId"] != inFlight[len(inFlight)-1] {
		t.Fatalf("barrier waits on %v, want ord:1 up to %s", src, inFlight[len(inFlight)-1])
	}
	consistently(t, 500*time.Millisecond, "the scale-out waits for its barrier", func() bool {
		return tc.migration("ord", "g", id)["state"] == "ACTIVE"
	})
	apiEventually(t, 5*time.Second, "the resharding view to show what Redis said of ord:1", func() (bool, string) {
		m := tc.migration("ord", "g", id)
		bs, _ := m["barriers"].([]any)
		if len(bs) == 0 {
			return false, "no barrier"
		}
		src := bs[0].(map[string]any)["waitingOn"].([]any)[0].(map[string]any)
		return src["checkedAt"] != nil && src["proven"] == false && src["pendingToCutover"] == float64(len(inFlight)), fmt.Sprint(src)
	})

	ackAll(t, rdb, "ord", "g", 1, inFlight)
	waitState(t, tc, "ord", "g", id, "DEPRECATED", 10*time.Second)
	res = converge(t, tc, "ord", "g", "a")
	if len(res.Assignment.Barriers) != 0 {
		t.Fatalf("barriers after the release: %v", res.Assignment.Barriers)
	}
	h := tc.Do("GET", "/coord/v1/monitoring/streams/ord/groups/g/events?limit=200", nil).MustStatus(t, 200)
	for _, want := range []string{"resharding.cutover", "resharding.barrier_released"} {
		if !strings.Contains(string(h.Body), want) {
			t.Fatalf("history has no %s: %s", want, h.Body)
		}
	}
}

// TestIntegrationOrderedRollbackAndGuards: an ordered 4 -> 5 scale-out rolled
// back by metadata goes back to 4 shards through a second cutover; while its
// barriers wait, a new scale and an ordering switch are refused (409); once
// released both are accepted. Bad ordering values are 400s.
func TestIntegrationOrderedRollbackAndGuards(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	rdb := rs.Client(t)
	createOrderedGroup(t, tc, "rb", "g", 4)
	for s := 0; s < 4; s++ {
		fill(t, rdb, "rb", s, 3, 1)
	}
	// Shard 2's entries stay in flight: every shard of the 5-shard layout
	// (4 and 5 are not powers of two) waits on it.
	inFlight := readAll(t, rdb, "rb", "g", 2, true)
	for _, s := range []int{0, 1, 3} {
		readAll(t, rdb, "rb", "g", s, false)
	}
	id := scale(t, tc, "rb", "g", 5)
	r := tc.Do("POST", fmt.Sprintf("/coord/v1/streams/rb/groups/g/migrations/%s/rollback", id), map[string]any{"requestedBy": "test", "reason": "back"}).MustStatus(t, 202)
	if r.JSON["state"] != "ROLLED_BACK" {
		t.Fatalf("rollback: %s", r.Body)
	}
	g := tc.Do("GET", "/coord/v1/streams/rb/groups/g", nil).MustStatus(t, 200)
	bs, _ := g.JSON["barriers"].([]any)
	if len(bs) == 0 {
		t.Fatalf("no barrier after an ordered rollback: %s", g.Body)
	}
	r = tc.Do("POST", "/coord/v1/streams/rb/groups/g/scale", map[string]any{"targetShardCount": 6, "requestedBy": "test", "reason": "again"}).MustStatus(t, 409)
	if r.JSON["errorCode"] != "ACTIVE_MIGRATION_EXISTS" || !strings.Contains(string(r.Body), "barrier") {
		t.Fatalf("scale while barriers wait: %s", r.Body)
	}
	r = tc.Do("PUT", "/coord/v1/streams/rb/groups/g/ordering", map[string]any{"ordering": "NONE", "requestedBy": "test"}).MustStatus(t, 409)
	for _, bad := range []any{"key", "SOME", 1, nil} {
		r = tc.Do("PUT", "/coord/v1/streams/rb/groups/g/ordering", map[string]any{"ordering": bad, "requestedBy": "test"}).MustStatus(t, 400)
		if r.JSON["errorCode"] != "INVALID_REQUEST" {
			t.Fatalf("ordering %v: %s", bad, r.Body)
		}
	}
	tc.Do("POST", "/coord/v1/streams/rb/groups/other", map[string]any{"requestedBy": "test", "ordering": "FIFO"}).MustStatus(t, 400)

	ackAll(t, rdb, "rb", "g", 2, inFlight)
	apiEventually(t, 10*time.Second, "the rollback's barriers to be released", func() (bool, string) {
		g := tc.Do("GET", "/coord/v1/streams/rb/groups/g", nil).MustStatus(t, 200)
		bs, _ := g.JSON["barriers"].([]any)
		return len(bs) == 0, string(g.Body)
	})
	r = tc.Do("PUT", "/coord/v1/streams/rb/groups/g/ordering", map[string]any{"ordering": "NONE", "requestedBy": "test", "reason": "done"}).MustStatus(t, 200)
	if r.JSON["ordering"] != "NONE" {
		t.Fatalf("switch to NONE: %s", r.Body)
	}
	routing := tc.Do("GET", "/coord/v1/streams/rb/groups/g/producer-routing", nil).MustStatus(t, 200)
	if routing.JSON["ordering"] != "NONE" {
		t.Fatalf("routing after the switch: %s", routing.Body)
	}
	// Unordered now: a scale records no cutover.
	id2 := scale(t, tc, "rb", "g", 8)
	m := tc.migration("rb", "g", id2)
	if bs, _ := m["barriers"].([]any); len(bs) != 0 {
		t.Fatalf("an unordered scale has barriers: %v", m["barriers"])
	}
}

// TestIntegrationStuckFenceLowered: a fence above the group's metadata
// version (a layout change that was never recorded) refuses up-to-date
// producers; the shard check lowers it.
func TestIntegrationStuckFenceLowered(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, func(m *Main) {
		fastTimings(m)
		m.ShardCheckInterval = 200 * time.Millisecond
	})
	rdb := rs.Client(t)
	createOrderedGroup(t, tc, "sf", "g", 2)
	g := tc.Do("GET", "/coord/v1/streams/sf/groups/g", nil).MustStatus(t, 200)
	mv := int64(g.JSON["metadataVersion"].(float64))
	if err := rdb.HSet(context.Background(), routing.FenceKey("sf:1"), "g", mv+7).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the stuck fence to be lowered to the group's metadata version", func() bool {
		return fenceOf(t, rdb, "sf", "g", 1) == mv
	})
}

// TestIntegrationUnfencedWritesCounted: entries a producer adds to a fenced
// shard after its cutover without the fence check (as the reference Python
// client does) are counted: a resharding.unfenced_writes event and
// rsc_unfenced_writes_total. Fenced entries are not.
func TestIntegrationUnfencedWritesCounted(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	rdb := rs.Client(t)
	ctx := context.Background()
	createOrderedGroup(t, tc, "uf", "g", 2)
	fill(t, rdb, "uf", 0, 3, 1)
	fill(t, rdb, "uf", 1, 3, 1)
	readAll(t, rdb, "uf", "g", 0, false)
	inFlight := readAll(t, rdb, "uf", "g", 1, true) // shard 3 waits on shard 1
	scale(t, tc, "uf", "g", 4)
	g := tc.Do("GET", "/coord/v1/streams/uf/groups/g", nil).MustStatus(t, 200)
	mv := int64(g.JSON["metadataVersion"].(float64))
	for i := 0; i < 3; i++ {
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "uf:1", Values: []any{"python", i}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	fill(t, rdb, "uf", 1, 2, mv) // fenced publishes with the new routing: not counted
	ackAll(t, rdb, "uf", "g", 1, inFlight)
	apiEventually(t, 10*time.Second, "resharding.unfenced_writes with the 3 unfenced entries", func() (bool, string) {
		h := tc.Do("GET", "/coord/v1/monitoring/streams/uf/groups/g/events?limit=200", nil).MustStatus(t, 200)
		var page struct {
			Events []struct {
				Type    string         `json:"type"`
				Payload map[string]any `json:"payload"`
			} `json:"events"`
		}
		_ = json.Unmarshal(h.Body, &page)
		var total float64
		for _, e := range page.Events {
			if e.Type != "resharding.unfenced_writes" {
				continue
			}
			for _, s := range e.Payload["shards"].([]any) {
				total += s.(map[string]any)["count"].(float64)
			}
		}
		return total == 3, fmt.Sprintf("counted %v: %s", total, h.Body)
	})
	r := tc.Do("GET", "/metrics", nil).MustStatus(t, 200)
	if !strings.Contains(string(r.Body), `rsc_unfenced_writes_total{consumer_group="g",stream_prefix="uf"} 3`) {
		t.Fatalf("metrics: %s", grepLines(string(r.Body), "unfenced"))
	}
}
