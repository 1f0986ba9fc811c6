package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/internal/faultproxy"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
)

// Exactly once across layout changes, end to end: the real coordinator
// (in-process, against a real Redis), the Go SDK's idempotent producer, and
// a TCP proxy between the producer and Redis that loses a publish's reply
// after Redis ran it (README, "Exactly once across layout changes").

const eventIDField = "eventId"

// eoFixture is one coordinator and Redis for the exactly-once tests.
type eoFixture struct {
	tc    *testCoordinator
	rdb   *redis.Client // direct, for the test's own reads
	coord *client.Client
}

func newEOFixture(t *testing.T) eoFixture {
	t.Helper()
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, fastTimings)
	rdb := rs.Client(t)
	// The scripts are loaded first, so that a dropped reply is that of a
	// script that ran, not a NOSCRIPT answer.
	for _, src := range []string{producer.PublishScript, producer.DedupPublishScript} {
		if err := rdb.ScriptLoad(context.Background(), src).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return eoFixture{tc: tc, rdb: rdb, coord: client.New(tc.URL, client.BasicAuth{Username: "admin", Password: "password"})}
}

// proxied is a proxy in front of the fixture's Redis and a client through it
// that never retries by itself (go-redis MaxRetries -1), so a lost reply
// reaches the producer as an error.
func (fx eoFixture) proxied(t *testing.T) (*faultproxy.Proxy, *redis.Client) {
	t.Helper()
	px := faultproxy.Start(t, fx.rdb.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: px.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return px, c
}

// producer is an idempotent producer of prefix/group (group "" routes by
// the stream) with a one-minute window.
func (fx eoFixture) producer(t *testing.T, rdb redis.UniversalClient, prefix, group string, more ...func(*producer.Config)) *producer.Producer {
	t.Helper()
	cfg := producer.Config{Coordinator: fx.coord, Redis: rdb, StreamPrefix: prefix, ConsumerGroup: group,
		EventIDField: eventIDField, DedupWindow: time.Minute}
	for _, m := range more {
		m(&cfg)
	}
	p, err := producer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

// entriesOf lists "<stream key>/<entry id>" of every entry of event id on
// shards 0..n-1 of prefix.
func (fx eoFixture) entriesOf(t *testing.T, prefix string, n int, eventID string) []string {
	t.Helper()
	var out []string
	for s := 0; s < n; s++ {
		key := routing.StreamKey(prefix, s)
		for _, e := range fx.rdb.XRange(context.Background(), key, "-", "+").Val() {
			if e.Values[eventIDField] == eventID {
				out = append(out, key+"/"+e.ID)
			}
		}
	}
	return out
}

// fence is field's fence on shard s of prefix (0 when none).
func (fx eoFixture) fence(t *testing.T, prefix string, s int, field string) int64 {
	t.Helper()
	v, err := fx.rdb.HGet(context.Background(), routing.FenceKey(routing.StreamKey(prefix, s)), field).Int64()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	return v
}

// keyOn is a partition key that routes to shard from under n shards and
// elsewhere under m.
func keyOn(t *testing.T, from, n, m int) (key string, to int) {
	t.Helper()
	for i := 0; i < 10000; i++ {
		k := "key-" + strconv.Itoa(i)
		a, _ := routing.RouteKey(k, n)
		b, _ := routing.RouteKey(k, m)
		if a == from && b != from {
			return k, b
		}
	}
	t.Fatalf("no key on shard %d of %d that moves under %d", from, n, m)
	return "", 0
}

// eoCase is one layout change of the design text's scenario: the group
// starts with initial shards (and, when before is set, is scaled to it
// first), E is published on shard from, its reply lost, and change moves
// the group to final shards.
type eoCase struct {
	name           string
	initial        int
	before         int // 0: none
	from, final    int
	change         func(t *testing.T, fx eoFixture, prefix, group, lastID string)
	previousShards int // the shard count E was published under
}

func eoCases() []eoCase {
	scaleTo := func(n int) func(t *testing.T, fx eoFixture, prefix, group, _ string) {
		return func(t *testing.T, fx eoFixture, prefix, group, _ string) { scale(t, fx.tc, prefix, group, n) }
	}
	return []eoCase{
		{name: "scale-out 4 to 8", initial: 4, from: 2, final: 8, change: scaleTo(8), previousShards: 4},
		{name: "scale-in 8 to 4", initial: 8, from: 6, final: 4, change: scaleTo(4), previousShards: 8},
		{name: "rollback 8 to 4", initial: 4, before: 8, from: 6, final: 4, previousShards: 8,
			change: func(t *testing.T, fx eoFixture, prefix, group, id string) {
				// E landed on a new shard: only a draining rollback may go back.
				fx.tc.Do("POST", fmt.Sprintf("/coord/v1/streams/%s/groups/%s/migrations/%s/rollback", prefix, group, id),
					map[string]any{"requestedBy": "test", "reason": "e2e", "policy": "drain"}).MustStatus(t, 202)
			}},
	}
}

// TestIntegrationExactlyOnceAcrossLayoutChange is the design text's
// scenario, literally, for a plain and an ordered group: E is published
// routed to its shard, Redis runs the write and the reply is lost; the
// layout changes through the admin API (scale-out 4 -> 8, scale-in 8 -> 4,
// rollback of 4 -> 8); the same producer's retry and a fresh Producer both
// get the original entry back (Duplicate, its shard), and E exists exactly
// once. The old shard's fence was raised to the layout change's version
// (no check published past an unfenced shard). Without the previous
// layouts in the routing the fresh producer writes a second entry; without
// the fence raise for plain groups the checks are unfenced.
func TestIntegrationExactlyOnceAcrossLayoutChange(t *testing.T) {
	parallel(t)
	fx := newEOFixture(t)
	ctx := context.Background()
	for _, ordering := range []string{"NONE", "KEY"} {
		for i, c := range eoCases() {
			t.Run(ordering+"/"+c.name, func(t *testing.T) {
				prefix, group := fmt.Sprintf("eo%s%d", strings.ToLower(ordering), i), "g"
				fx.tc.Do("POST", fmt.Sprintf("/coord/v1/streams/%s/groups/%s", prefix, group),
					map[string]any{"initialShardCount": c.initial, "requestedBy": "test", "ordering": ordering}).MustStatus(t, 201)
				var lastID string
				if c.before > 0 {
					// A member that never reports its shards keeps the
					// scale-out from converging, so it is still ACTIVE (and
					// may be rolled back) when the change comes: with no
					// member it completes at the next tick (100 ms), which a
					// loaded machine let pass first.
					holdUnconverged(t, fx.tc, prefix, group)
					lastID = scale(t, fx.tc, prefix, group, c.before)
				}
				key, to := keyOn(t, c.from, c.previousShards, c.final)
				px, rdb := fx.proxied(t)
				p := fx.producer(t, rdb, prefix, group, func(cfg *producer.Config) { cfg.MaxAttempts = 1 })
				px.DropNext(1, "EVALSHA", "EVAL")
				if _, err := p.Publish(ctx, key, map[string]any{eventIDField: "E", "n": 1}); err == nil {
					t.Fatal("the lost reply reached the producer")
				}
				span := max(c.initial, c.before, c.final)
				if got := fx.entriesOf(t, prefix, span, "E"); len(got) != 1 || !strings.HasPrefix(got[0], routing.StreamKey(prefix, c.from)+"/") {
					t.Fatalf("after the lost reply: %v, want one entry on shard %d", got, c.from)
				}
				c.change(t, fx, prefix, group, lastID)
				g := fx.tc.Do("GET", fmt.Sprintf("/coord/v1/streams/%s/groups/%s", prefix, group), nil).MustStatus(t, 200)
				if n := int(g.JSON["shardCount"].(float64)); n != c.final {
					t.Fatalf("group has %d shards after the change, want %d", n, c.final)
				}
				fresh := fx.producer(t, fx.rdb, prefix, group)
				if err := p.Refresh(ctx); err != nil {
					t.Fatal(err)
				}
				for _, pr := range []struct {
					name string
					p    *producer.Producer
				}{{"same producer", p}, {"fresh producer", fresh}} {
					res, err := pr.p.Publish(ctx, key, map[string]any{eventIDField: "E", "n": 1})
					if err != nil {
						t.Fatalf("%s: %v", pr.name, err)
					}
					if !res.Duplicate || res.ShardIndex != c.from || res.StreamKey != routing.StreamKey(prefix, c.from) {
						t.Fatalf("%s: %+v, want the original on shard %d (the key now routes to %d)", pr.name, res, c.from, to)
					}
					if st := pr.p.Stats(); st.LayoutChecks < 1 || st.UnfencedChecks != 0 || st.Duplicates != 1 {
						t.Fatalf("%s: stats %+v", pr.name, st)
					}
				}
				if got := fx.entriesOf(t, prefix, span, "E"); len(got) != 1 {
					t.Fatalf("E has %d entries: %v", len(got), got)
				}
				rt, err := fx.coord.ProducerRouting(ctx, prefix, group)
				if err != nil {
					t.Fatal(err)
				}
				if len(rt.PreviousLayouts) == 0 || rt.PreviousLayouts[0].ShardCount != c.previousShards {
					t.Fatalf("routing lists previous layouts %+v, want the %d-shard one first", rt.PreviousLayouts, c.previousShards)
				}
				if f := fx.fence(t, prefix, c.from, group); f < rt.PreviousLayouts[0].Fence {
					t.Fatalf("fence of shard %d is %d, want at least %d (the change's version)", c.from, f, rt.PreviousLayouts[0].Fence)
				}
				// A new event id on that key goes to its new shard.
				res, err := fresh.Publish(ctx, key, map[string]any{eventIDField: "F"})
				if err != nil || res.Duplicate || res.ShardIndex != to {
					t.Fatalf("a new event: %+v, %v; want shard %d", res, err, to)
				}
			})
		}
	}
}

// TestIntegrationLateOldLayoutWriteRefused: the write with the old layout
// that arrives after the layout change (a producer still on the old
// routing) is what the fence raise is for. After 4 -> 8 a fresh producer
// writes E to its new shard (the old shard holds no record, and its fence
// proves nothing routed before the change lands there); then a producer
// still on the 4-shard routing publishes E: the fence refuses it, it
// refreshes and gets the original. E exists once, for a plain group as for
// an ordered one. Without the fence raise for plain groups the late write
// lands on the old shard: two entries.
func TestIntegrationLateOldLayoutWriteRefused(t *testing.T) {
	parallel(t)
	fx := newEOFixture(t)
	ctx := context.Background()
	for _, ordering := range []string{"NONE", "KEY"} {
		t.Run(ordering, func(t *testing.T) {
			prefix, group := "late"+strings.ToLower(ordering), "g"
			fx.tc.Do("POST", fmt.Sprintf("/coord/v1/streams/%s/groups/%s", prefix, group),
				map[string]any{"initialShardCount": 4, "requestedBy": "test", "ordering": ordering}).MustStatus(t, 201)
			key, to := keyOn(t, 2, 4, 8)
			late := fx.producer(t, fx.rdb, prefix, group, func(cfg *producer.Config) { cfg.RefreshInterval, cfg.Lease = time.Hour, time.Hour })
			scale(t, fx.tc, prefix, group, 8)
			fresh := fx.producer(t, fx.rdb, prefix, group)
			res, err := fresh.Publish(ctx, key, map[string]any{eventIDField: "E"})
			if err != nil || res.Duplicate || res.ShardIndex != to {
				t.Fatalf("fresh producer: %+v, %v; want a new entry on shard %d", res, err, to)
			}
			if rt, _ := late.Routing(ctx); rt.ShardCount != 4 {
				t.Fatalf("the late producer's routing has %d shards, want the old 4", rt.ShardCount)
			}
			res, err = late.Publish(ctx, key, map[string]any{eventIDField: "E"})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Duplicate || res.ShardIndex != to {
				t.Fatalf("late producer: %+v, want the original on shard %d; entries %v", res, to, fx.entriesOf(t, prefix, 8, "E"))
			}
			if st := late.Stats(); st.StaleRetries < 1 {
				t.Fatalf("late producer stats %+v: want its old-layout publish refused by the fence", st)
			}
			if got := fx.entriesOf(t, prefix, 8, "E"); len(got) != 1 {
				t.Fatalf("E has %d entries: %v", len(got), got)
			}
			if st := fresh.Stats(); st.LayoutChecks != 1 || st.UnfencedChecks != 0 {
				t.Fatalf("fresh producer stats %+v: want one fenced check of shard 2", st)
			}
		})
	}
}

// TestIntegrationStreamProducerExactlyOnce: a producer without a consumer
// group routes by the stream (its stream-scoped routing) and is fenced by
// the stream's fence field: the design text's scenario through a stream
// scale 4 -> 8, for a stream without groups (stream.scaled) and one with a
// plain group (the group's activation moves the stream): the retry and a
// fresh stream producer get the original, E exists once, and the stream
// fence of the old shard is at least the change's stream version.
func TestIntegrationStreamProducerExactlyOnce(t *testing.T) {
	parallel(t)
	fx := newEOFixture(t)
	ctx := context.Background()
	for i, withGroup := range []bool{false, true} {
		name := "bare stream"
		if withGroup {
			name = "stream with a group"
		}
		t.Run(name, func(t *testing.T) {
			prefix := fmt.Sprintf("eostream%d", i)
			fx.tc.Do("POST", "/coord/v1/streams/"+prefix, map[string]any{"initialShardCount": 4, "requestedBy": "test"}).MustStatus(t, 201)
			if withGroup {
				fx.tc.Do("POST", fmt.Sprintf("/coord/v1/streams/%s/groups/g", prefix), map[string]any{"requestedBy": "test"}).MustStatus(t, 201)
			}
			key, to := keyOn(t, 2, 4, 8)
			px, rdb := fx.proxied(t)
			p := fx.producer(t, rdb, prefix, "", func(cfg *producer.Config) { cfg.MaxAttempts = 1 })
			px.DropNext(1, "EVALSHA", "EVAL")
			if _, err := p.Publish(ctx, key, map[string]any{eventIDField: "E"}); err == nil {
				t.Fatal("the lost reply reached the producer")
			}
			fx.tc.Do("POST", "/coord/v1/streams/"+prefix+"/scale", map[string]any{"targetShardCount": 8, "requestedBy": "test", "reason": "e2e"}).MustStatus(t, 202)
			fresh := fx.producer(t, fx.rdb, prefix, "")
			if err := p.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			for _, pr := range []*producer.Producer{p, fresh} {
				res, err := pr.Publish(ctx, key, map[string]any{eventIDField: "E"})
				if err != nil || !res.Duplicate || res.ShardIndex != 2 {
					t.Fatalf("%+v, %v: want the original on shard 2 (the key now routes to %d); entries %v", res, err, to, fx.entriesOf(t, prefix, 8, "E"))
				}
				if st := pr.Stats(); st.UnfencedChecks != 0 || st.LayoutChecks < 1 {
					t.Fatalf("stats %+v", st)
				}
			}
			if got := fx.entriesOf(t, prefix, 8, "E"); len(got) != 1 {
				t.Fatalf("E has %d entries: %v", len(got), got)
			}
			sr, err := fx.coord.StreamProducerRouting(ctx, prefix)
			if err != nil {
				t.Fatal(err)
			}
			if len(sr.PreviousLayouts) != 1 || sr.PreviousLayouts[0].ShardCount != 4 {
				t.Fatalf("stream routing previous layouts %+v", sr.PreviousLayouts)
			}
			if f := fx.fence(t, prefix, 2, routing.StreamFenceField); f < sr.PreviousLayouts[0].Fence {
				t.Fatalf("stream fence of shard 2 is %d, want at least %d", f, sr.PreviousLayouts[0].Fence)
			}
			res, err := fresh.Publish(ctx, key, map[string]any{eventIDField: "F"})
			if err != nil || res.Duplicate || res.ShardIndex != to {
				t.Fatalf("a new event: %+v, %v; want shard %d", res, err, to)
			}
		})
	}
}

// TestIntegrationRetiredShardKeepsFenceAndRecords: a scale-in's retirement
// deletes the removed shard's stream only: its fence hash (which the
// previous layout names) and the records of what landed there stay, so a
// fresh producer re-publishing E after the retirement still gets the
// original (on the deleted stream's shard) instead of writing it again; and
// when a scale-out provisions the index again its fence is not lowered below
// the one the listed layout names.
func TestIntegrationRetiredShardKeepsFenceAndRecords(t *testing.T) {
	parallel(t)
	fx := newEOFixture(t)
	ctx := context.Background()
	const prefix, group = "eoretire", "g"
	createGroup(t, fx.tc, prefix, group, 8)
	key, to := keyOn(t, 6, 8, 4)
	p := fx.producer(t, fx.rdb, prefix, group)
	if res, err := p.Publish(ctx, key, map[string]any{eventIDField: "E"}); err != nil || res.ShardIndex != 6 {
		t.Fatalf("publish E: %+v, %v", res, err)
	}
	readAll(t, fx.rdb, prefix, group, 6, false) // drained: the retirement may delete it
	id := scale(t, fx.tc, prefix, group, 4)
	eventually(t, 20*time.Second, "the scale-in to retire shards 4..7", func() bool {
		m := fx.tc.migration(prefix, group, id)
		ret, _ := m["retirement"].(map[string]any)
		return m["state"] == "DEPRECATED" && ret != nil && ret["retired"] == true
	})
	if n := fx.rdb.Exists(ctx, routing.StreamKey(prefix, 6)).Val(); n != 0 {
		t.Fatalf("shard 6's stream was not deleted")
	}
	rt, err := fx.coord.ProducerRouting(ctx, prefix, group)
	if err != nil || len(rt.PreviousLayouts) != 1 || rt.PreviousLayouts[0].ShardCount != 8 {
		t.Fatalf("routing %+v, %v", rt, err)
	}
	want := rt.PreviousLayouts[0].Fence
	if f := fx.fence(t, prefix, 6, group); f < want {
		t.Fatalf("fence of retired shard 6 is %d, want at least %d", f, want)
	}
	fresh := fx.producer(t, fx.rdb, prefix, group)
	res, err := fresh.Publish(ctx, key, map[string]any{eventIDField: "E"})
	if err != nil || !res.Duplicate || res.ShardIndex != 6 {
		t.Fatalf("re-publish after the retirement: %+v, %v; want the original on shard 6 (the key routes to %d)", res, err, to)
	}
	if st := fresh.Stats(); st.UnfencedChecks != 0 {
		t.Fatalf("stats %+v", st)
	}
	if got := fx.entriesOf(t, prefix, 8, "E"); len(got) != 0 {
		t.Fatalf("E was written again: %v", got)
	}

	scale(t, fx.tc, prefix, group, 8) // shard 6 provisioned again
	if f := fx.fence(t, prefix, 6, group); f < want {
		t.Fatalf("fence of shard 6 provisioned again is %d, want at least %d", f, want)
	}
	res, err = fresh.Publish(ctx, key, map[string]any{eventIDField: "G"})
	if err != nil || res.Duplicate || res.ShardIndex != 6 {
		t.Fatalf("a new event on shard 6 provisioned again: %+v, %v", res, err)
	}
}

// TestIntegrationPreviousLayoutsSurviveRestart: the previous layouts are
// the log's (folded, and carried by snapshots): a coordinator started again
// on the same log, from its snapshot or folding the whole log, lists the
// same ones, and a fresh producer still finds E on its old shard.
func TestIntegrationPreviousLayoutsSurviveRestart(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	stream := fmt.Sprintf("coordinator:events:eorestart:%d", time.Now().UnixNano())
	same := func(m *Main) {
		fastTimings(m)
		m.LogStream, m.SnapshotEvery, m.SnapshotMinInterval = stream, 1, -1
	}
	first := startCoordinator(t, rs, same)
	const prefix, group = "eorestart", "g"
	createGroup(t, first, prefix, group, 4)
	scale(t, first, prefix, group, 8)
	key, _ := keyOn(t, 2, 4, 8)
	rdb := rs.Client(t)
	if err := rdb.Set(context.Background(), producer.DedupKey(routing.StreamKey(prefix, 2), "E"), "1-1", time.Minute).Err(); err != nil {
		t.Fatal(err) // E landed on shard 2 before the scale
	}
	before := first.Do("GET", fmt.Sprintf("/coord/v1/streams/%s/groups/%s/producer-routing", prefix, group), nil).MustStatus(t, 200)
	if layouts, _ := before.JSON["previousLayouts"].([]any); len(layouts) != 1 {
		t.Fatalf("routing before the restart: %s", before.Body)
	}
	eventually(t, 10*time.Second, "a snapshot", func() bool {
		n, _ := rdb.Exists(context.Background(), stream+":snapshot").Result()
		return n > 0
	})
	if err := first.Main.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ignore := range []bool{false, true} {
		tc := startCoordinator(t, rs, func(m *Main) { same(m); m.IgnoreSnapshot = ignore })
		after := tc.Do("GET", fmt.Sprintf("/coord/v1/streams/%s/groups/%s/producer-routing", prefix, group), nil).MustStatus(t, 200)
		apiJSONEqual(t, mustJSON(t, after.JSON["previousLayouts"]), string(mustJSON(t, before.JSON["previousLayouts"])))
		fx := eoFixture{tc: tc, rdb: rdb, coord: client.New(tc.URL, client.BasicAuth{Username: "admin", Password: "password"})}
		res, err := fx.producer(t, rdb, prefix, group).Publish(context.Background(), key, map[string]any{eventIDField: "E"})
		if err != nil || !res.Duplicate || res.ShardIndex != 2 {
			t.Fatalf("ignoreSnapshot=%v: %+v, %v; want the record on shard 2", ignore, res, err)
		}
		if err := tc.Main.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDedupLayoutWindowFlag: 1 h by default; 0 (off), 1s and 168h are
// accepted; a negative window, one below 1s and one above 168h are refused,
// naming the flag.
func TestDedupLayoutWindowFlag(t *testing.T) {
	m := NewMain()
	m.Stderr = &apiSyncBuffer{}
	if err := m.ParseFlags(nil); err != nil || m.DedupLayoutWindow != time.Hour {
		t.Fatalf("default: %v, %v", m.DedupLayoutWindow, err)
	}
	for _, c := range []struct {
		value string
		ok    bool
	}{{"0", true}, {"1s", true}, {"168h", true}, {"-1s", false}, {"999ms", false}, {"168h0m1s", false}} {
		m := NewMain()
		m.Stderr = &apiSyncBuffer{}
		err := m.ParseFlags([]string{"--dedup-layout-window", c.value})
		if c.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "--dedup-layout-window") {
			t.Errorf("--dedup-layout-window %s: %v", c.value, err)
		}
	}
}

// TestIntegrationStuckStreamFenceLowered: a stream fence above the version
// of a stream without groups (a scale whose record never landed) refuses
// up-to-date stream producers; the shard check lowers it.
func TestIntegrationStuckStreamFenceLowered(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	tc := startCoordinator(t, rs, func(m *Main) {
		fastTimings(m)
		m.ShardCheckInterval = 200 * time.Millisecond
	})
	rdb := rs.Client(t)
	tc.Do("POST", "/coord/v1/streams/ssf", map[string]any{"initialShardCount": 2, "requestedBy": "test"}).MustStatus(t, 201)
	if err := rdb.HSet(context.Background(), routing.FenceKey("ssf:1"), routing.StreamFenceField, 8).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the stuck stream fence to be lowered to the stream's version", func() bool {
		return fenceOf(t, rdb, "ssf", routing.StreamFenceField, 1) == 1
	})
}

// holdUnconverged joins a member that heartbeats every 200 ms until the test
// ends without ever reporting a shard: the group stays unconverged (for up
// to the rebalance timeout, 5 s with fastTimings).
func holdUnconverged(t *testing.T, tc *testCoordinator, prefix, group string) {
	t.Helper()
	j := apiBeat(t, tc, prefix, group, apiHBBody{Member: "holder"})
	if j.Status != "OK" {
		t.Fatalf("join holder: %s", j.Body)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			_, _ = tc.TryDoAs("admin", "password", "POST", apiHBPath(prefix, group, "holder"),
				apiHBBody{Member: "holder", Epoch: j.MemberEpoch, MV: j.MetadataVersion}.toMap())
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}
