package httpapi

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// shardReads counts the shards an Offsets caller asked for, per group.
type shardReads struct {
	mu    sync.Mutex
	reads map[string]int
	calls int
	gate  chan struct{} // when set, Offsets waits on it
}

func (f *shardReads) Offsets(_ context.Context, prefix, group string, shards []int) ([]wire.ShardOffset, error) {
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	f.reads[prefix] += len(shards)
	f.calls++
	f.mu.Unlock()
	out := make([]wire.ShardOffset, len(shards))
	for i, s := range shards {
		out[i] = wire.ShardOffset{StreamPrefix: prefix, ConsumerGroup: group, Shard: wire.ShardRef{ShardIndex: s}}
	}
	return out, nil
}

func (f *shardReads) Messages(context.Context, string, MessagesQuery) (StreamPage, error) {
	return StreamPage{}, nil
}
func (f *shardReads) Ping(context.Context) error { return nil }

func (f *shardReads) take() (map[string]int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, c := f.reads, f.calls
	f.reads, f.calls = map[string]int{}, 0
	return r, c
}

func cacheFixture(t *testing.T, shards ...int) (*coordinator.Coordinator, []*projection.Group) {
	t.Helper()
	c := coordinator.New(coordinator.Config{DisableProvisioning: true, MaxShardCount: 2048, Logger: zerolog.Nop()}, events.NewMemLog(), nil, nil, nil)
	if err := c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c.Run()
	t.Cleanup(c.Close)
	var gs []*projection.Group
	for i, n := range shards {
		k := projection.GroupKey{StreamPrefix: fmt.Sprintf("p%d", i), ConsumerGroup: "g"}
		if _, err := c.CreateGroup(context.Background(), events.Meta{}, commands.CreateGroupInput{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, InitialShardCount: &n, RequestedBy: "t"}); err != nil {
			t.Fatal(err)
		}
		g, _ := c.State().Group(k)
		gs = append(gs, g)
	}
	return c, gs
}

// TestOffsetCacheReadsOncePerMiss: concurrent requests for a group the cache
// has not read cause one read; later ones none while the loop runs.
func TestOffsetCacheReadsOncePerMiss(t *testing.T) {
	c, gs := cacheFixture(t, 8)
	f := &shardReads{reads: map[string]int{}, gate: make(chan struct{})}
	cache := newOffsetCache(f, c.State, 0, zerolog.Nop())
	cache.running = true
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := cache.get(context.Background(), gs[0]); err != nil {
				t.Error(err)
			}
		}()
	}
	close(f.gate)
	wg.Wait()
	for i := 0; i < 20; i++ {
		_, _ = cache.get(context.Background(), gs[0])
	}
	if reads, calls := f.take(); calls != 1 || reads["p0"] != 8 {
		t.Fatalf("20 concurrent and 20 later gets: %d reads (%v), want 1 of 8 shards", calls, reads)
	}
}

// TestOffsetCachePassIsBounded: a pass reads at most MaxShardReadsPerRefresh
// shards, the groups read longest ago first, and forgets deleted groups.
func TestOffsetCachePassIsBounded(t *testing.T) {
	c, gs := cacheFixture(t, 1024, 1024, 1024, 1024, 1024, 3)
	f := &shardReads{reads: map[string]int{}}
	cache := newOffsetCache(f, c.State, 0, zerolog.Nop())
	total := 0
	seen := map[string]int{}
	for pass := 0; pass < 3; pass++ {
		cache.pass(context.Background())
		reads, _ := f.take()
		n := 0
		for p, r := range reads {
			n += r
			seen[p]++
		}
		if n > MaxShardReadsPerRefresh {
			t.Fatalf("pass %d read %d shards, more than %d", pass, n, MaxShardReadsPerRefresh)
		}
		total += n
	}
	for _, g := range gs {
		if seen[g.Key.StreamPrefix] == 0 {
			t.Fatalf("%s never read in 3 passes: %v", g.Key.StreamPrefix, seen)
		}
	}
	if _, err := c.DeleteGroup(context.Background(), events.Meta{}, gs[0].Key, commands.DeleteGroupInput{RequestedBy: "t", Reason: "r", Force: true}); err != nil {
		t.Fatal(err)
	}
	cache.pass(context.Background())
	if cache.peek(gs[0].Key) != nil {
		t.Fatal("a deleted group's read is kept")
	}
}
