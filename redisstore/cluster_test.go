package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/events/eventstest"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/internal/redisurl"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/routing"
)

// MustClusterClient starts a Redis Cluster and returns it with the client the
// coordinator would build from its URL.
func MustClusterClient(tb testing.TB, masters, replicas int) (*redistest.Cluster, *redis.ClusterClient) {
	tb.Helper()
	c := redistest.StartCluster(tb, masters, replicas)
	rdb, err := redisstore.NewClient(c.URL(), redisurl.TLSFiles{})
	if err != nil {
		tb.Fatalf("NewClient(%s): %v", c.URL(), err)
	}
	tb.Cleanup(func() { _ = rdb.Close() })
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		tb.Fatalf("NewClient(%s) = %T, want a cluster client", c.URL(), rdb)
	}
	return c, cc
}

// retry runs f until it succeeds or timeout passes: right after a failover a
// cluster client may still send a slot to the dead master until it re-reads
// the slot map (redisstore.ClusterStateReloadInterval).
func retry(tb testing.TB, timeout time.Duration, what string, f func() error) {
	tb.Helper()
	var err error
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: still failing after %s: %v", what, timeout, err)
		}
	}
}

// Every shard operation works on a Redis Cluster, with a group's shards spread
// over every master, and keeps working after a master's replica took over.
func TestIntegrationShardsOnCluster(t *testing.T) {
	ctx := context.Background()
	c, rdb := MustClusterClient(t, 3, 1)
	sh := redisstore.NewShards(rdb)
	const prefix, group, shards = "orders", "billing", 16

	MustProvision(t, sh, prefix, group, 0, shards)
	masters := c.Masters(t)
	byMaster := map[string][]int{}
	for i := range shards {
		key := routing.StreamKey(prefix, i)
		byMaster[c.MasterFor(t, key)] = append(byMaster[c.MasterFor(t, key)], i)
		g, ok := MustXInfoGroups(t, rdb, key)[group]
		if !ok || g.Pending != 0 || g.Lag == nil || *g.Lag != 0 {
			t.Fatalf("%s: group %+v (found %v), want pending 0 lag 0", key, g, ok)
		}
	}
	t.Logf("shards by master: %v", byMaster)
	if len(byMaster) != len(masters) {
		t.Fatalf("%d shards landed on %d of %d masters", shards, len(byMaster), len(masters))
	}

	t.Run("drain evidence and entries added on every master", func(t *testing.T) {
		MustXAdd(t, rdb, routing.StreamKey(prefix, 1), 2)
		MustXAdd(t, rdb, routing.StreamKey(prefix, 2), 3)
		MustConsume(t, rdb, routing.StreamKey(prefix, 2), group, false)
		all := make([]int, 0, shards+1)
		for i := range shards {
			all = append(all, i)
		}
		all = append(all, 99) // never provisioned
		moved := movedReplies(t, rdb)
		ev, err := sh.DrainEvidence(ctx, prefix, all)
		if err != nil {
			t.Fatal(err)
		}
		if after := movedReplies(t, rdb); after != moved {
			t.Errorf("DrainEvidence drew %d MOVED replies: its XINFO GROUPS went to the wrong masters", after-moved)
		}
		for _, d := range ev {
			g := events.GroupDrain{}
			if d.Exists {
				g = groupDrain(t, d, group)
			}
			switch d.ShardIndex {
			case 1:
				if g.Lag != 2 || g.Pending != 0 {
					t.Errorf("shard 1: %+v, want lag 2 pending 0", g)
				}
			case 2:
				if g.Lag != 0 || g.Pending != 3 {
					t.Errorf("shard 2: %+v, want lag 0 pending 3", g)
				}
			case 99:
				if d.Exists {
					t.Errorf("shard 99 exists: %+v", d)
				}
			default:
				if !d.Exists || !projection.ShardDrained(d) {
					t.Errorf("shard %d not drained: %+v", d.ShardIndex, d)
				}
			}
		}
		added, err := sh.EntriesAdded(ctx, prefix, []int{0, 1, 2, 99})
		if err != nil {
			t.Fatal(err)
		}
		if want := map[int]int64{0: 0, 1: 2, 2: 3, 99: 0}; fmt.Sprint(added) != fmt.Sprint(want) {
			t.Errorf("EntriesAdded = %v, want %v", added, want)
		}
		var keys []string
		for i := 0; i < shards+2; i++ {
			keys = append(keys, fmt.Sprintf("%s:%d", prefix, i))
		}
		types, err := sh.KeyTypes(ctx, keys)
		streams := 0
		for _, typ := range types {
			if typ == "stream" {
				streams++
			}
		}
		if err != nil || streams != shards {
			t.Errorf("KeyTypes = %v, %v; want the %d shard streams", types, err, shards)
		}
	})

	t.Run("offsets name the master and its slot range", func(t *testing.T) {
		checkOffsets(t, c, sh, prefix, group, shards)
	})

	t.Run("delete on every master, with and without the script loaded", func(t *testing.T) {
		// A master that never ran the script answers NOSCRIPT; Delete falls back to EVAL.
		if err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() }); err != nil {
			t.Fatal(err)
		}
		var doomed []string
		for _, idxs := range byMaster {
			doomed = append(doomed, routing.StreamKey(prefix, idxs[len(idxs)-1]))
		}
		doomed = append(doomed, routing.StreamKey(prefix, 1)) // 2 unread entries
		err := sh.Delete(ctx, doomed)
		if !errors.Is(err, redisstore.ErrNotDrained) {
			t.Fatalf("Delete with an undrained stream: %v, want ErrNotDrained", err)
		}
		for _, k := range doomed {
			n, _ := rdb.Exists(ctx, k).Result()
			undrained := k == routing.StreamKey(prefix, 1)
			if undrained != (n == 1) {
				t.Errorf("%s: exists %d after Delete (undrained: %v)", k, n, undrained)
			}
		}
		MustProvision(t, sh, prefix, group, 0, shards) // put them back
	})

	t.Run("after a master failover", func(t *testing.T) {
		victim := c.MasterFor(t, routing.StreamKey(prefix, 0))
		promoted := c.Failover(t, victim)
		t.Logf("killed master %s; %s took over", victim, promoted)
		lost := byMaster[victim]
		// Provisioning reaches the promoted master (which may lack the script).
		retry(t, 10*time.Second, "provision after the failover", func() error {
			_, err := sh.Provision(ctx, prefix, group, shards, shards+8)
			return err
		})
		for i := range shards + 8 {
			key := routing.StreamKey(prefix, i)
			if _, ok := MustXInfoGroups(t, rdb, key)[group]; !ok {
				t.Errorf("%s has no group %s after the failover", key, group)
			}
		}
		// The entries on the failed master's shards survived.
		if ev := MustDrain(t, sh, prefix, 2); groupDrain(t, ev, group).Pending != 3 {
			t.Errorf("shard 2 after the failover: %+v, want 3 pending", ev)
		}
		checkOffsets(t, c, sh, prefix, group, shards+8)
		offs, err := sh.Offsets(ctx, prefix, group, lost)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range offs {
			if o.NodeEndpoint != promoted {
				t.Errorf("%s served by %s after the failover, want %s", o.StreamKey, o.NodeEndpoint, promoted)
			}
		}
		if err := sh.Delete(ctx, []string{routing.StreamKey(prefix, lost[0])}); err != nil {
			t.Errorf("Delete on the promoted master: %v", err)
		}
	})
}

// movedReplies is the number of MOVED replies the masters have sent.
func movedReplies(tb testing.TB, rdb *redis.ClusterClient) int64 {
	tb.Helper()
	var mu sync.Mutex
	var total int64
	err := rdb.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		info, err := m.Info(ctx, "errorstats").Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_MOVED:count="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				mu.Lock()
				total += n
				mu.Unlock()
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("INFO errorstats: %v", err)
	}
	return total
}

// checkOffsets: every shard's offset names the master serving its slot.
func checkOffsets(t *testing.T, c *redistest.Cluster, sh *redisstore.Shards, prefix, group string, shards int) {
	t.Helper()
	idx := make([]int, shards)
	for i := range idx {
		idx[i] = i
	}
	var offs []redisstore.Offset
	// The slot map is cached briefly: wait for it to show the current masters.
	retry(t, 5*time.Second, "offsets", func() error {
		var err error
		if offs, err = sh.Offsets(context.Background(), prefix, group, idx); err != nil {
			return err
		}
		for _, o := range offs {
			if want := c.MasterFor(t, o.StreamKey); o.NodeEndpoint != want {
				return fmt.Errorf("%s: node %s, want %s", o.StreamKey, o.NodeEndpoint, want)
			}
		}
		return nil
	})
	for _, o := range offs {
		if o.NodeID == "" || o.SlotStart == nil || o.SlotEnd == nil || *o.SlotStart > o.Slot || o.Slot > *o.SlotEnd || o.Slot != routing.Slot(o.StreamKey) {
			t.Errorf("%s: node %q slot %d range %v..%v", o.StreamKey, o.NodeID, o.Slot, o.SlotStart, o.SlotEnd)
		}
	}
}

// The event log and the snapshots live on a cluster like on one server: the
// log is one key, the snapshots share the newest's slot (rotated in one
// transaction), the archive is written by commands of its own.
func TestIntegrationLogOnCluster(t *testing.T) {
	_, rdb := MustClusterClient(t, 3, 0)
	eventstest.RunLogSuite(t, func(t *testing.T) events.Log {
		return redisstore.NewLog(rdb, uniqueKey("test:events"))
	})
	ctx := context.Background()
	l := redisstore.NewLog(rdb, uniqueKey("test:events"))
	snaps := redisstore.NewSnapshotStore(rdb, l.Key())
	ids := MustAppend(t, l, events.ZeroID, []byte("a"), []byte("b"))
	for _, id := range ids {
		if err := snaps.Save(ctx, id, []byte(id), 2); err != nil {
			t.Fatal(err)
		}
	}
	got, err := snaps.Load(ctx)
	if err != nil || string(got) != ids[1] {
		t.Fatalf("snapshot Load = %q, %v", got, err)
	}
	if older, err := snaps.LoadAt(ctx, ids[0]); err != nil || string(older) != ids[0] {
		t.Fatalf("older snapshot LoadAt = %q, %v", older, err)
	}
	// Trimming touches the log and the archive, each in its own command.
	if _, _, err := l.TrimBefore(ctx, ids[1], func(events.Entry) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if n, err := l.Archive().Len(ctx); err != nil || n != 1 {
		t.Fatalf("archive after the trim: %d entries, %v; want 1", n, err)
	}
	t.Logf("log %s in slot %d, snapshot %s in slot %d", l.Key(), routing.Slot(l.Key()), snaps.Key(), routing.Slot(snaps.Key()))
}

// Offsets on one server leave the cluster fields empty.
func TestIntegrationOffsetsSingleServerHaveNoNode(t *testing.T) {
	rs := redistest.StartProcess(t)
	sh := redisstore.NewShards(rs.Client(t))
	MustProvision(t, sh, "one", "g", 0, 1)
	offs, err := sh.Offsets(context.Background(), "one", "g", []int{0})
	if err != nil {
		t.Fatal(err)
	}
	if o := offs[0]; o.NodeEndpoint != "" || o.NodeID != "" || o.SlotStart != nil || o.SlotEnd != nil || o.Slot != routing.Slot("one:0") {
		t.Fatalf("offset on one server: %+v", o)
	}
}
