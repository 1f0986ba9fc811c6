package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
)

// groupInfo is one consumer group as XINFO GROUPS reports it; Lag is nil when
// Redis reports lag null.
type groupInfo struct {
	Pending     int64
	Lag         *int64
	EntriesRead *int64
}

// MustXInfoGroups reads XINFO GROUPS with a raw command, so the test sees what
// Redis says rather than what a client library makes of it.
func MustXInfoGroups(tb testing.TB, rdb redis.UniversalClient, key string) map[string]groupInfo {
	tb.Helper()
	res, err := rdb.Do(context.Background(), "XINFO", "GROUPS", key).Result()
	if err != nil {
		tb.Fatalf("XINFO GROUPS %s: %v", key, err)
	}
	out := map[string]groupInfo{}
	list, _ := res.([]any)
	for _, g := range list {
		fields := map[string]any{}
		switch t := g.(type) {
		case map[any]any:
			for k, v := range t {
				fields[fmt.Sprint(k)] = v
			}
		case []any:
			for i := 0; i+1 < len(t); i += 2 {
				fields[fmt.Sprint(t[i])] = t[i+1]
			}
		default:
			tb.Fatalf("XINFO GROUPS %s: unexpected reply %T", key, g)
		}
		asInt := func(v any) *int64 {
			if n, ok := v.(int64); ok {
				return &n
			}
			return nil
		}
		if _, ok := fields["lag"]; !ok {
			tb.Fatalf("XINFO GROUPS %s: no lag field (Redis < 7?)", key)
		}
		pending := asInt(fields["pending"])
		if pending == nil {
			tb.Fatalf("XINFO GROUPS %s: pending = %v", key, fields["pending"])
		}
		out[fmt.Sprint(fields["name"])] = groupInfo{Pending: *pending, Lag: asInt(fields["lag"]), EntriesRead: asInt(fields["entries-read"])}
	}
	return out
}

// MustXAdd adds n entries to a stream and returns their ids.
func MustXAdd(tb testing.TB, rdb redis.UniversalClient, key string, n int) []string {
	tb.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		id, err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: key, Values: []any{"k", fmt.Sprint(i)}}).Result()
		if err != nil {
			tb.Fatalf("XADD %s: %v", key, err)
		}
		ids = append(ids, id)
	}
	return ids
}

// MustConsume reads every new entry of key as group/consumer and, if ack, acks them.
func MustConsume(tb testing.TB, rdb redis.UniversalClient, key, group string, ack bool) []string {
	tb.Helper()
	ctx := context.Background()
	streams, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c-1", Streams: []string{key, ">"}, Count: 1000, Block: -1}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		tb.Fatalf("XREADGROUP %s %s: %v", key, group, err)
	}
	var ids []string
	for _, s := range streams {
		for _, m := range s.Messages {
			ids = append(ids, m.ID)
		}
	}
	if ack && len(ids) > 0 {
		if err := rdb.XAck(ctx, key, group, ids...).Err(); err != nil {
			tb.Fatalf("XACK: %v", err)
		}
	}
	return ids
}

// MustDrain returns the drain evidence of one shard.
func MustDrain(tb testing.TB, sh *redisstore.Shards, prefix string, shard int) events.ShardDrain {
	tb.Helper()
	ev, err := sh.DrainEvidence(context.Background(), prefix, []int{shard})
	if err != nil {
		tb.Fatalf("DrainEvidence %s:%d: %v", prefix, shard, err)
	}
	if len(ev) != 1 || ev[0].ShardIndex != shard || ev[0].StreamKey != fmt.Sprintf("%s:%d", prefix, shard) {
		tb.Fatalf("DrainEvidence %s:%d = %+v", prefix, shard, ev)
	}
	return ev[0]
}

// groupDrain finds a consumer group in drain evidence.
func groupDrain(tb testing.TB, d events.ShardDrain, name string) events.GroupDrain {
	tb.Helper()
	for _, g := range d.Groups {
		if g.Name == name {
			return g
		}
	}
	tb.Fatalf("group %q missing from evidence %+v", name, d)
	return events.GroupDrain{}
}

func MustProvision(tb testing.TB, sh *redisstore.Shards, prefix, group string, from, to int) {
	tb.Helper()
	if _, err := sh.Provision(context.Background(), prefix, group, from, to); err != nil {
		tb.Fatalf("Provision %s %s [%d, %d): %v", prefix, group, from, to, err)
	}
}

func TestIntegrationShards(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)
	sh := redisstore.NewShards(rdb)
	const group = "billing"

	t.Run("provision creates streams with the group at lag 0", func(t *testing.T) {
		prefix := uniqueKey("orders")
		MustProvision(t, sh, prefix, group, 0, 4)
		for i := 0; i < 4; i++ {
			key := fmt.Sprintf("%s:%d", prefix, i)
			groups := MustXInfoGroups(t, rdb, key)
			g, ok := groups[group]
			if !ok || len(groups) != 1 {
				t.Fatalf("%s groups = %+v, want only %s", key, groups, group)
			}
			if g.Pending != 0 || g.Lag == nil || *g.Lag != 0 {
				t.Errorf("%s: pending %d lag %v, want 0 and 0", key, g.Pending, g.Lag)
			}
			if n, _ := rdb.XLen(ctx, key).Result(); n != 0 {
				t.Errorf("%s has %d entries", key, n)
			}
		}
		if n, _ := rdb.Exists(ctx, prefix+":4").Result(); n != 0 {
			t.Error("provisioned a stream past the range")
		}
	})

	t.Run("provisioning twice is fine", func(t *testing.T) {
		prefix := uniqueKey("orders")
		MustProvision(t, sh, prefix, group, 0, 2)
		MustXAdd(t, rdb, prefix+":0", 2)
		MustProvision(t, sh, prefix, group, 0, 2) // BUSYGROUP counts as success
		MustProvision(t, sh, prefix, group, 1, 3) // overlapping range
		MustProvision(t, sh, prefix, group, 3, 3) // empty range
		MustProvision(t, sh, prefix, group, 5, 2) // reversed range
		for i := 0; i < 3; i++ {
			if groups := MustXInfoGroups(t, rdb, fmt.Sprintf("%s:%d", prefix, i)); len(groups) != 1 {
				t.Errorf("shard %d groups = %+v", i, groups)
			}
		}
		// The second Provision did not move the existing group: its lag is the 2 entries.
		if g := MustXInfoGroups(t, rdb, prefix+":0")[group]; g.Lag == nil || *g.Lag != 2 {
			t.Errorf("re-provisioned group lag = %v, want 2", g.Lag)
		}
	})

	t.Run("provision on a stream with entries starts at its end", func(t *testing.T) {
		prefix := uniqueKey("orders")
		MustXAdd(t, rdb, prefix+":0", 3)
		MustProvision(t, sh, prefix, group, 0, 1)
		g := MustXInfoGroups(t, rdb, prefix+":0")[group]
		if g.Pending != 0 || g.Lag == nil || *g.Lag != 0 || g.EntriesRead == nil || *g.EntriesRead != 3 {
			t.Errorf("group on a stream with 3 entries: pending %d lag %v entries-read %v; want 0, 0, 3", g.Pending, g.Lag, g.EntriesRead)
		}
		if d := MustDrain(t, sh, prefix, 0); !projection.ShardDrained(d) {
			t.Errorf("freshly provisioned shard not drained: %+v", d)
		}
	})

	t.Run("provision names the consumer groups it found; destroy removes only the named one", func(t *testing.T) {
		prefix := uniqueKey("orders")
		MustProvision(t, sh, prefix, group, 1, 2)
		MustProvision(t, sh, prefix, "stranger", 0, 2)
		existed, err := sh.Provision(ctx, prefix, group, 0, 3)
		if err != nil || !reflect.DeepEqual(existed, []int{1}) {
			t.Fatalf("Provision found %v (%v), want [1]", existed, err)
		}
		MustXAdd(t, rdb, prefix+":0", 2)
		// Shard 3 has no stream, shard 2 no other group: both are success.
		if err := sh.DestroyGroups(ctx, prefix, group, []int{0, 1, 2, 3}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			groups := MustXInfoGroups(t, rdb, fmt.Sprintf("%s:%d", prefix, i))
			if _, ok := groups[group]; ok {
				t.Errorf("shard %d still has %s", i, group)
			}
			if _, ok := groups["stranger"]; ok != (i < 2) {
				t.Errorf("shard %d: stranger's consumer group present %v", i, ok)
			}
		}
		if n, _ := rdb.XLen(ctx, prefix+":0").Result(); n != 2 {
			t.Errorf("the stream lost entries: %d", n)
		}
		if n, _ := rdb.Exists(ctx, prefix+":3").Result(); n != 0 {
			t.Error("destroy created a stream")
		}
		if err := sh.DestroyGroups(ctx, prefix, group, []int{0, 1}); err != nil {
			t.Fatalf("destroying again: %v", err)
		}
	})

	t.Run("a second consumer group joins the first", func(t *testing.T) {
		prefix := uniqueKey("orders")
		MustProvision(t, sh, prefix, group, 0, 1)
		MustProvision(t, sh, prefix, "analytics", 0, 1)
		groups := MustXInfoGroups(t, rdb, prefix+":0")
		if _, ok := groups["analytics"]; !ok || len(groups) != 2 {
			t.Errorf("groups = %+v", groups)
		}
	})

	t.Run("provision fails on a key of another type", func(t *testing.T) {
		prefix := uniqueKey("orders")
		if err := rdb.Set(ctx, prefix+":1", "not a stream", 0).Err(); err != nil {
			t.Fatal(err)
		}
		_, err := sh.Provision(ctx, prefix, group, 0, 2)
		if err == nil {
			t.Fatal("Provision over a string key succeeded")
		}
		if !strings.Contains(err.Error(), prefix+":1") {
			t.Errorf("error %q does not name the key", err)
		}
	})

	t.Run("key types", func(t *testing.T) {
		prefix := uniqueKey("orders")
		keys := []string{prefix, prefix + ":0", prefix + ":1", prefix + ":2", prefix + ":3"}
		types, err := sh.KeyTypes(ctx, keys)
		if err != nil || !reflect.DeepEqual(types, []string{"none", "none", "none", "none", "none"}) {
			t.Fatalf("KeyTypes before provisioning = %v, %v", types, err)
		}
		MustProvision(t, sh, prefix, group, 1, 3)
		if err := rdb.Set(ctx, prefix, "plain key named like the prefix", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.HSet(ctx, prefix+":3", "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		types, err = sh.KeyTypes(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"string", "none", "stream", "stream", "hash"}; !reflect.DeepEqual(types, want) {
			t.Errorf("KeyTypes = %v, want %v", types, want)
		}
	})

	t.Run("create streams: empty, without groups, refusing what exists and leaving nothing behind", func(t *testing.T) {
		prefix := uniqueKey("fresh")
		keys := []string{prefix + ":0", prefix + ":1"}
		existed, err := sh.CreateStreams(ctx, keys)
		if err != nil || len(existed) != 0 {
			t.Fatalf("CreateStreams = %v, %v", existed, err)
		}
		for _, k := range keys {
			info, err := rdb.XInfoStream(ctx, k).Result()
			if err != nil || info.Length != 0 || info.EntriesAdded != 0 {
				t.Errorf("%s: %+v, %v; want an empty stream that never had an entry", k, info, err)
			}
			if groups, err := rdb.XInfoGroups(ctx, k).Result(); err != nil || len(groups) != 0 {
				t.Errorf("%s has groups %v, %v", k, groups, err)
			}
		}
		// A stranger's key among them: nothing of this call is left.
		other := uniqueKey("mixed")
		MustXAdd(t, rdb, other+":1", 2)
		existed, err = sh.CreateStreams(ctx, []string{other + ":0", other + ":1", other + ":2"})
		if err != nil || !reflect.DeepEqual(existed, []string{other + ":1"}) {
			t.Fatalf("CreateStreams over a stranger's stream = %v, %v", existed, err)
		}
		for _, k := range []string{other + ":0", other + ":2"} {
			if n := rdb.Exists(ctx, k).Val(); n != 0 {
				t.Errorf("%s was left behind", k)
			}
		}
		if n := rdb.XLen(ctx, other+":1").Val(); n != 2 {
			t.Errorf("the stranger's stream holds %d entries, want its 2", n)
		}
	})

	t.Run("drain evidence follows the group's lag and pending", func(t *testing.T) {
		prefix := uniqueKey("orders")
		MustProvision(t, sh, prefix, group, 0, 1)
		key := prefix + ":0"

		d := MustDrain(t, sh, prefix, 0)
		if !d.Exists || !projection.ShardDrained(d) {
			t.Fatalf("empty provisioned shard: %+v, drained %v", d, projection.ShardDrained(d))
		}

		MustXAdd(t, rdb, key, 3)
		d = MustDrain(t, sh, prefix, 0)
		if g := groupDrain(t, d, group); g.Lag != 3 || g.Pending != 0 {
			t.Errorf("after 3 entries: %+v, want lag 3 pending 0", g)
		}
		if projection.ShardDrained(d) {
			t.Error("shard with lag 3 counts as drained")
		}

		MustConsume(t, rdb, key, group, false)
		d = MustDrain(t, sh, prefix, 0)
		if g := groupDrain(t, d, group); g.Lag != 0 || g.Pending != 3 {
			t.Errorf("after reading: %+v, want lag 0 pending 3", g)
		}
		if projection.ShardDrained(d) {
			t.Error("shard with 3 pending entries counts as drained")
		}

		pending, err := rdb.XPending(ctx, key, group).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: group, Start: "-", End: "+", Count: 100}).Result()
		if err != nil || int64(len(ids)) != pending.Count {
			t.Fatalf("XPENDING: %v, %v", ids, err)
		}
		for _, p := range ids {
			if err := rdb.XAck(ctx, key, group, p.ID).Err(); err != nil {
				t.Fatal(err)
			}
		}
		d = MustDrain(t, sh, prefix, 0)
		if g := groupDrain(t, d, group); g.Lag != 0 || g.Pending != 0 {
			t.Errorf("after acking: %+v, want lag 0 pending 0", g)
		}
		if !projection.ShardDrained(d) {
			t.Errorf("read and acked shard not drained: %+v", d)
		}
	})

	t.Run("a foreign group's pending entry keeps the shard from draining", func(t *testing.T) {
		prefix := uniqueKey("orders")
		MustProvision(t, sh, prefix, group, 0, 1)
		key := prefix + ":0"
		if err := rdb.XGroupCreate(ctx, key, "audit", "0").Err(); err != nil {
			t.Fatal(err)
		}
		MustXAdd(t, rdb, key, 1)
		MustConsume(t, rdb, key, group, true)
		ids := MustConsume(t, rdb, key, "audit", false)

		d := MustDrain(t, sh, prefix, 0)
		if g := groupDrain(t, d, group); g.Lag != 0 || g.Pending != 0 {
			t.Errorf("our group: %+v, want done", g)
		}
		if g := groupDrain(t, d, "audit"); g.Pending != 1 || g.Lag != 0 {
			t.Errorf("audit: %+v, want pending 1 lag 0", g)
		}
		if projection.ShardDrained(d) {
			t.Error("shard drained while another consumer group holds a pending entry")
		}
		if err := rdb.XAck(ctx, key, "audit", ids...).Err(); err != nil {
			t.Fatal(err)
		}
		if d := MustDrain(t, sh, prefix, 0); !projection.ShardDrained(d) {
			t.Errorf("not drained after audit acked: %+v", d)
		}
	})

	t.Run("lag null is unknown, not drained", func(t *testing.T) {
		prefix := uniqueKey("orders")
		MustProvision(t, sh, prefix, group, 0, 1)
		key := prefix + ":0"
		ids := MustXAdd(t, rdb, key, 3)
		// A group created at 0 without ENTRIESREAD has no entries-read counter,
		// and a deleted entry in the middle stops Redis from estimating one.
		if err := rdb.XGroupCreate(ctx, key, "legacy", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rdb.XDel(ctx, key, ids[1]).Err(); err != nil {
			t.Fatal(err)
		}
		raw := MustXInfoGroups(t, rdb, key)
		if raw["legacy"].Lag != nil {
			t.Fatalf("test setup: Redis reports legacy lag %d, want null", *raw["legacy"].Lag)
		}

		// Our group reads and acks everything: its lag is known again (0).
		MustConsume(t, rdb, key, group, true)
		d := MustDrain(t, sh, prefix, 0)
		if g := groupDrain(t, d, "legacy"); g.Lag != -1 || g.Pending != 0 {
			t.Errorf("legacy: %+v, want lag -1 (null) pending 0", g)
		}
		if g := groupDrain(t, d, group); g.Lag != 0 || g.Pending != 0 {
			t.Errorf("%s: %+v, want lag 0 pending 0", group, g)
		}
		if projection.ShardDrained(d) {
			t.Error("shard with a consumer group of unknown lag counts as drained")
		}
		row := projection.ShardDrainRow{}
		projection.FillDrainRow(&row, d)
		if row.RedisLag != nil || row.Drained {
			t.Errorf("drain row lag %v drained %v, want null and false", row.RedisLag, row.Drained)
		}
	})

	t.Run("our own group with lag null", func(t *testing.T) {
		prefix := uniqueKey("orders")
		MustProvision(t, sh, prefix, group, 0, 1)
		key := prefix + ":0"
		ids := MustXAdd(t, rdb, key, 3)
		if err := rdb.XDel(ctx, key, ids[1]).Err(); err != nil {
			t.Fatal(err)
		}
		if raw := MustXInfoGroups(t, rdb, key)[group]; raw.Lag != nil {
			t.Fatalf("test setup: Redis reports lag %d after a deletion ahead of the group, want null", *raw.Lag)
		}
		d := MustDrain(t, sh, prefix, 0)
		if g := groupDrain(t, d, group); g.Lag != -1 {
			t.Errorf("%s: %+v, want lag -1", group, g)
		}
		if projection.ShardDrained(d) {
			t.Error("unknown lag counts as drained")
		}
	})

	t.Run("missing stream is drained", func(t *testing.T) {
		prefix := uniqueKey("orders")
		d := MustDrain(t, sh, prefix, 7)
		if d.Exists || len(d.Groups) != 0 || d.Groups == nil {
			t.Errorf("missing stream evidence = %+v, want Exists=false and no groups", d)
		}
		if !projection.ShardDrained(d) {
			t.Error("a missing stream does not count as drained")
		}
	})

	t.Run("evidence for several shards keeps their order", func(t *testing.T) {
		prefix := uniqueKey("orders")
		MustProvision(t, sh, prefix, group, 0, 3)
		MustXAdd(t, rdb, prefix+":2", 1)
		ev, err := sh.DrainEvidence(ctx, prefix, []int{2, 5, 0})
		if err != nil {
			t.Fatal(err)
		}
		if len(ev) != 3 || ev[0].ShardIndex != 2 || ev[1].ShardIndex != 5 || ev[2].ShardIndex != 0 {
			t.Fatalf("evidence = %+v", ev)
		}
		if projection.ShardDrained(ev[0]) || !projection.ShardDrained(ev[1]) || !projection.ShardDrained(ev[2]) {
			t.Errorf("drained = %v %v %v, want false true true", projection.ShardDrained(ev[0]), projection.ShardDrained(ev[1]), projection.ShardDrained(ev[2]))
		}
		if ev, err := sh.DrainEvidence(ctx, prefix, nil); err != nil || len(ev) != 0 {
			t.Errorf("DrainEvidence of no shards = %v, %v", ev, err)
		}
	})

	t.Run("drain evidence on a key of another type is an error", func(t *testing.T) {
		prefix := uniqueKey("orders")
		if err := rdb.Set(ctx, prefix+":0", "x", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if ev, err := sh.DrainEvidence(ctx, prefix, []int{0}); err == nil {
			t.Errorf("DrainEvidence on a string key = %+v, want an error", ev)
		}
	})

	t.Run("entries added counts every entry ever added", func(t *testing.T) {
		prefix := uniqueKey("orders")
		MustProvision(t, sh, prefix, group, 0, 2)
		ids := MustXAdd(t, rdb, prefix+":0", 3)
		if err := rdb.XDel(ctx, prefix+":0", ids[0]).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := sh.EntriesAdded(ctx, prefix, []int{0, 1, 9})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[int]int64{0: 3, 1: 0, 9: 0}; !reflect.DeepEqual(got, want) {
			t.Errorf("EntriesAdded = %v, want %v", got, want)
		}
		if got, err := sh.EntriesAdded(ctx, prefix, nil); err != nil || len(got) != 0 {
			t.Errorf("EntriesAdded of no shards = %v, %v", got, err)
		}
	})

	t.Run("delete", func(t *testing.T) {
		prefix := uniqueKey("orders")
		MustProvision(t, sh, prefix, group, 0, 3)
		if err := sh.Delete(ctx, []string{prefix + ":1", prefix + ":2", prefix + ":7"}); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		types, err := sh.KeyTypes(ctx, []string{prefix + ":0", prefix + ":1", prefix + ":2"})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"stream", "none", "none"}; !reflect.DeepEqual(types, want) {
			t.Errorf("KeyTypes after Delete = %v, want %v", types, want)
		}
		if d := MustDrain(t, sh, prefix, 1); d.Exists || !projection.ShardDrained(d) {
			t.Errorf("deleted shard evidence = %+v", d)
		}
		if err := sh.Delete(ctx, nil); err != nil {
			t.Errorf("Delete(nil) = %v", err)
		}
	})

	t.Run("delete refuses a stream with unread entries", func(t *testing.T) {
		prefix := uniqueKey("orders")
		MustProvision(t, sh, prefix, group, 0, 2)
		MustXAdd(t, rdb, prefix+":1", 1) // a stale producer wrote after the drain check
		err := sh.Delete(ctx, []string{prefix + ":0", prefix + ":1"})
		if !errors.Is(err, redisstore.ErrNotDrained) || !strings.Contains(err.Error(), prefix+":1") {
			t.Fatalf("Delete of an undrained stream: %v, want ErrNotDrained naming it", err)
		}
		types, _ := sh.KeyTypes(ctx, []string{prefix + ":0", prefix + ":1"})
		if want := []string{"none", "stream"}; !reflect.DeepEqual(types, want) {
			t.Errorf("after Delete: types %v, want only the undrained %s:1 left", types, prefix)
		}
	})
}

func TestIntegrationSnapshotStore(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)
	logKey := uniqueKey("test:events")
	store := redisstore.NewSnapshotStore(rdb, logKey)
	if store.Key() != logKey+":snapshot" {
		t.Errorf("Key() = %q, want %q", store.Key(), logKey+":snapshot")
	}
	if got := redisstore.NewSnapshotStore(rdb, "").Key(); got != redisstore.DefaultLogStream+":snapshot" {
		t.Errorf("default Key() = %q", got)
	}

	data, err := store.Load(ctx)
	if err != nil || data != nil {
		t.Fatalf("Load with no snapshot = %q, %v; want nil, nil", data, err)
	}

	s := projection.New()
	var n int
	rec := func(k projection.GroupKey, ev events.Event) events.Record {
		n++
		return events.Record{ID: fmt.Sprintf("%d-0", n), Type: ev.EventType(), Schema: events.SchemaVersion, Event: ev,
			Meta: events.Meta{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup}}
	}
	orders := projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "billing"}
	for _, r := range []events.Record{
		rec(orders, &events.GroupCreated{ShardCount: 4}),
		rec(orders, &events.MemberJoined{MemberID: "m-1", Epochs: events.Epochs{GroupEpoch: 2, MetadataVersion: 2}}),
	} {
		if err := s.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"projection snapshot", snap},
		{"every byte value", func() []byte {
			b := make([]byte, 512)
			for i := range b {
				b[i] = byte(i)
			}
			return b
		}()},
		{"overwrite with a smaller one", []byte{0x00}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := store.Save(ctx, fmt.Sprintf("%d-0", i+1), tc.data, 1); err != nil {
				t.Fatalf("Save: %v", err)
			}
			got, err := store.Load(ctx)
			if err != nil || string(got) != string(tc.data) {
				t.Fatalf("Load = %d bytes, %v; want the %d bytes saved", len(got), err, len(tc.data))
			}
		})
	}

	if err := store.Save(ctx, "100-0", snap, 1); err != nil {
		t.Fatal(err)
	}
	got, err := store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	restored, err := projection.Restore(got)
	if err != nil {
		t.Fatalf("Restore from the stored snapshot: %v", err)
	}
	if restored.LastID() != "2-0" {
		t.Errorf("restored lastID = %s, want 2-0", restored.LastID())
	}
	if g, ok := restored.Group(orders); !ok || g.MemberCount() != 1 {
		t.Errorf("restored group = %+v, %v", g, ok)
	}
	if err := rdb.Set(ctx, store.Key()+"x", "other", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if other, err := redisstore.NewSnapshotStore(rdb, uniqueKey("other")).Load(ctx); err != nil || other != nil {
		t.Errorf("another log's snapshot = %q, %v; want none", other, err)
	}
}
