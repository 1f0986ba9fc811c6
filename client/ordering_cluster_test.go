package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
)

// An ordered group on a Redis Cluster of three masters, the coordinator
// binary with --redis redis+cluster://...: every shard's fence hash lives in
// its stream's slot (so one script fences and adds, on the stream's master),
// the shards are spread over the masters, and a scale-out 4 -> 8 and a
// scale-in 8 -> 6, each cutting over with a backlog while producers publish,
// keep every key's order and lose nothing. A plain group (ordering NONE) goes
// through the same changes with the same workload beside it and must show
// inversions: otherwise the workload could not tell the two apart.
func TestIntegrationOrderedGroupOnRedisCluster(t *testing.T) {
	skipShort(t)
	cl := redistest.StartCluster(t, 3, 0)
	kv := cl.Client(t)
	c := bootCluster(t, cl.URL(), kv)
	ctx := context.Background()
	g := startPropGroup(t, c, "clustered", client.OrderingKey, false)
	plain := startPropGroup(t, c, "clusterplain", client.OrderingNone, false)
	groups := []*propGroup{g, plain}
	for _, pg := range groups {
		c.waitStable(pg.name, pg.name, pg.members...)
	}
	for _, pg := range groups {
		pg.pub = startKeyPublisher(pg.producers, propKeys, propRound, propFailEvery)
	}
	time.Sleep(time.Second)

	for _, to := range []int{8, 6} {
		from := g.shards
		before, err := c.Admin.Group(ctx, g.name, g.name)
		if err != nil {
			t.Fatal(err)
		}
		scaleAll(t, c, groups, to, nil)
		after, err := c.Admin.Group(ctx, g.name, g.name)
		if err != nil {
			t.Fatal(err)
		}
		masters := map[string]bool{}
		for i := 0; i < max(from, to); i++ {
			stream := routing.StreamKey(g.name, i)
			fence := routing.FenceKey(stream)
			if i < to {
				masters[cl.MasterFor(t, stream)] = true
			}
			if i >= from {
				continue // a new shard: its keys did not move away
			}
			if routing.Slot(fence) != routing.Slot(stream) || cl.MasterFor(t, fence) != cl.MasterFor(t, stream) {
				t.Fatalf("fence %s is not in the slot of %s (slots %d and %d)", fence, stream, routing.Slot(fence), routing.Slot(stream))
			}
			// Every shard of the layout before loses keys in both changes;
			// removed shards' fences go with their streams.
			v, err := kv.HGet(ctx, fence, g.name).Int64()
			if i >= to && err == redis.Nil {
				continue
			}
			if err != nil || v <= before.MetadataVersion || v > after.MetadataVersion {
				t.Fatalf("%s -> %s: fence of %s is %d (%v), want it raised above %d, at most %d",
					fmt.Sprint(from), fmt.Sprint(to), stream, v, err, before.MetadataVersion, after.MetadataVersion)
			}
		}
		if len(masters) < 2 {
			t.Fatalf("the %d shards live on %d master(s); the test wants several", to, len(masters))
		}
		t.Logf("%d -> %d: %s; shards on %d masters, fences in their slots", from, to, g.chk.stats(t), len(masters))
	}

	for _, pg := range groups {
		pub, failures, lastErr := pg.pub.halt()
		pg.published = pub
		if failures > 0 {
			t.Logf("%s: %d publish batches had failures (retried with the same sequence numbers), last: %v", pg.name, failures, lastErr)
		}
	}
	for _, pg := range groups {
		c.waitFor(60*time.Second, pg.name+": every published message handled", func() bool { return len(pg.chk.lost(t, pg.published)) == 0 })
	}
	st, ps := g.chk.stats(t), plain.chk.stats(t)
	if st.inversions() != 0 {
		t.Errorf("ordered group: %s; first ones:\n%s", st, joinLines(g.chk.examples(t)))
	}
	if ps.Reorder == 0 {
		t.Errorf("plain group: %s: the workload provoked no inversion from a resharding, so the check could not tell an ordered group from a plain one", ps)
	}
	t.Logf("ordered: %d published over %d keys, %s; members %+v", total(g.published), propKeys, st, g.local.Stats())
	t.Logf("plain:   %d published, %s; first inversions:\n%s", total(plain.published), ps, joinLines(plain.chk.examples(t)))
}
