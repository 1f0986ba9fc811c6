package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
)

// A group at the stream's last id has nothing left to read, even when Redis's
// entries-read counter is behind (as on a replica of Redis < 7.2.4 promoted by
// a failover): drain evidence, offsets and Delete say lag 0. A group before
// the last id keeps the lag Redis reports.
func TestIntegrationStaleEntriesReadCounter(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartProcess(t).Client(t)
	sh := redisstore.NewShards(rdb)
	prefix, group := uniqueKey("stale"), "g"
	MustProvision(t, sh, prefix, group, 0, 2)
	for _, k := range []string{prefix + ":0", prefix + ":1"} {
		MustXAdd(t, rdb, k, 3)
		MustConsume(t, rdb, k, group, true)
	}
	// The counter a promoted replica would have: the cursor at the last id,
	// entries-read 1 of 3.
	last, err := rdb.XInfoStream(ctx, prefix+":0").Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "XGROUP", "SETID", prefix+":0", group, last.LastGeneratedID, "ENTRIESREAD", 1).Err(); err != nil {
		t.Fatal(err)
	}
	if g := MustXInfoGroups(t, rdb, prefix+":0")[group]; g.Lag == nil || *g.Lag != 2 {
		t.Fatalf("precondition: Redis reports lag %v, want 2 from the stale counter", g.Lag)
	}
	// Shard 1: one entry not read yet, so the cursor is before the last id.
	MustXAdd(t, rdb, prefix+":1", 1)

	ev, err := sh.DrainEvidence(ctx, prefix, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if g := groupDrain(t, ev[0], group); g.Lag != 0 || g.Pending != 0 || !projection.ShardDrained(ev[0]) {
		t.Errorf("shard 0 at the last id: %+v, want drained with lag 0", ev[0])
	}
	if g := groupDrain(t, ev[1], group); g.Lag != 1 || projection.ShardDrained(ev[1]) {
		t.Errorf("shard 1 with an unread entry: %+v, want lag 1, not drained", ev[1])
	}
	offs, err := sh.Offsets(ctx, prefix, group, []int{0, 1})
	if err != nil {
		t.Fatal(err)
	}
	if offs[0].Lag == nil || *offs[0].Lag != 0 || offs[1].Lag == nil || *offs[1].Lag != 1 {
		t.Errorf("offsets lag %v and %v, want 0 and 1", offs[0].Lag, offs[1].Lag)
	}
	err = sh.Delete(ctx, []string{prefix + ":0", prefix + ":1"})
	if !errors.Is(err, redisstore.ErrNotDrained) || !strings.Contains(err.Error(), prefix+":1") || strings.Contains(err.Error(), prefix+":0]") {
		t.Errorf("Delete = %v, want shard 1 kept as not drained", err)
	}
	if n, _ := rdb.Exists(ctx, prefix+":0", prefix+":1").Result(); n != 1 {
		t.Errorf("%d of the two streams exist after Delete, want 1 (shard 1)", n)
	}
}

// The same on a real promoted replica: whatever the Redis version, a shard
// the group read to the end before the failover is drained on the new master.
func TestIntegrationDrainedOnPromotedReplica(t *testing.T) {
	ctx := context.Background()
	master := redistest.StartProcess(t, redistest.WithArgs("--repl-diskless-sync-delay", "0"))
	replica := redistest.StartProcess(t, redistest.WithArgs("--replicaof", strings.Replace(master.Addr(), ":", " ", 1)))
	mc, rc := master.Client(t), replica.Client(t)
	prefix, group := uniqueKey("promoted"), "g"
	MustProvision(t, redisstore.NewShards(mc), prefix, group, 0, 1)
	key := prefix + ":0"
	MustXAdd(t, mc, key, 5)
	MustConsume(t, mc, key, group, true)
	if err := mc.Do(ctx, "WAIT", 1, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		groups, err := rc.XInfoGroups(ctx, key).Result()
		if err == nil && len(groups) == 1 && groups[0].Pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica did not catch up: %v %v", groups, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := rc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	raw := MustXInfoGroups(t, rc, key)[group]
	show := func(p *int64) any {
		if p == nil {
			return "null"
		}
		return *p
	}
	t.Logf("the promoted replica's own view: pending %d lag %v entries-read %v", raw.Pending, show(raw.Lag), show(raw.EntriesRead))
	d := MustDrain(t, redisstore.NewShards(rc), prefix, 0)
	if !projection.ShardDrained(d) {
		t.Fatalf("drain evidence on the promoted replica: %+v, want drained", d)
	}
	if err := redisstore.NewShards(rc).Delete(ctx, []string{key}); err != nil {
		t.Fatalf("Delete on the promoted replica: %v", err)
	}
}
