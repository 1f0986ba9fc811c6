package httpapi

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// Redis's view of a group's shard streams (length, first and last ids, the
// group's pending count and lag, memory) costs Redis one call per shard.
// Scrapers poll the routes that show it (every Grafana row, the offsets
// endpoint, and /metrics through cmd), so they read it from offsetCache, which
// a background loop refreshes every OffsetsRefresh: what they cost Redis does
// not grow with how often, or how many, scrapers ask.
//
//   - Bounded work: a refresh pass reads at most MaxShardReadsPerRefresh
//     shards, the groups read longest ago first (a larger group gets a pass
//     of its own). Bounded staleness: with S shards in all, every group is
//     read again within ceil(S / MaxShardReadsPerRefresh) passes.
//   - A group the cache has not read yet, or whose shard span changed (a
//     scale), is read at once by the first request that needs it, once, however
//     many ask at the same time; a failed read is kept (answered 503) until
//     the next pass, so a Redis outage is not hammered by scrapes.
//   - Rates (produced and consumed per second) are computed between two reads
//     of the cache, not between two scrapes.
//   - Without the background loop (a Server that was not Open-ed), entries
//     older than the refresh interval are read again on demand.

// DefaultOffsetsRefresh is the refresh interval when Config leaves it 0.
const DefaultOffsetsRefresh = 10 * time.Second

// MaxShardReadsPerRefresh bounds the shard streams one refresh pass reads.
const MaxShardReadsPerRefresh = 4096

// offsetsReadTimeout bounds one group's read.
const offsetsReadTimeout = 10 * time.Second

type offsetCache struct {
	streams StreamReader
	state   func() *projection.State
	every   time.Duration
	log     zerolog.Logger

	mu      sync.Mutex
	groups  map[projection.GroupKey]*groupOffsets
	reading map[projection.GroupKey]chan struct{} // reads in flight
	running bool                                  // the background loop runs
	failing bool                                  // the last pass failed a read (logged once)
	rates   *rateMemory
	lag     *lagMemory
}

// groupOffsets is one read of a group's shards.
type groupOffsets struct {
	span  int
	offs  []wire.ShardOffset
	rates []shardRate
	at    time.Time
	err   error
	// lagStatus is the group's (lagstatus.go); each shard's is in offs.
	lagStatus string
}

func newOffsetCache(streams StreamReader, state func() *projection.State, every time.Duration, log zerolog.Logger) *offsetCache {
	if every <= 0 {
		every = DefaultOffsetsRefresh
	}
	return &offsetCache{streams: streams, state: state, every: every, log: log,
		groups: map[projection.GroupKey]*groupOffsets{}, reading: map[projection.GroupKey]chan struct{}{}, rates: newRateMemory(),
		lag: newLagMemory(every)}
}

// get is the latest read of g's shards, reading them first when the cache
// has none for g's current span (or, without the loop, only an old one).
func (c *offsetCache) get(ctx context.Context, g *projection.Group) (groupOffsets, error) {
	span := shardSpan(g)
	for {
		c.mu.Lock()
		e := c.groups[g.Key]
		fresh := e != nil && e.span == span && (c.running || time.Since(e.at) < c.every)
		if fresh {
			out := *e
			c.mu.Unlock()
			return out, out.err
		}
		if ch, busy := c.reading[g.Key]; busy {
			c.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return groupOffsets{}, ctx.Err()
			}
		}
		ch := make(chan struct{})
		c.reading[g.Key] = ch
		c.mu.Unlock()
		c.read(context.WithoutCancel(ctx), g, ch)
	}
}

// read reads g's shards and keeps the result; done is closed when it is kept.
func (c *offsetCache) read(ctx context.Context, g *projection.Group, done chan struct{}) {
	span := shardSpan(g)
	idx := make([]int, span)
	for i := range idx {
		idx[i] = i
	}
	ctx, cancel := context.WithTimeout(ctx, offsetsReadTimeout)
	defer cancel()
	e := &groupOffsets{span: span, offs: []wire.ShardOffset{}}
	if span > 0 {
		e.offs, e.err = c.streams.Offsets(ctx, g.Key.StreamPrefix, g.Key.ConsumerGroup, idx)
	}
	e.at = time.Now()
	if e.err == nil {
		e.rates = c.rates.observe(g.Key.ConsumerGroup, e.offs, e.at)
		var shards []string
		shards, e.lagStatus = c.lag.observe(g, e.offs, e.at)
		for i := range e.offs {
			e.offs[i].LagStatus = shards[i]
		}
	}
	c.mu.Lock()
	c.groups[g.Key] = e
	delete(c.reading, g.Key)
	c.mu.Unlock()
	close(done)
}

// run refreshes the cache every interval until ctx ends.
func (c *offsetCache) run(ctx context.Context) {
	c.mu.Lock()
	c.running = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()
	t := time.NewTicker(c.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.pass(ctx)
		}
	}
}

// pass reads the groups read longest ago (never read first) until
// MaxShardReadsPerRefresh shards are read, and forgets deleted groups.
func (c *offsetCache) pass(ctx context.Context) {
	groups := c.state().Groups()
	live := make(map[projection.GroupKey]bool, len(groups))
	c.mu.Lock()
	at := make(map[projection.GroupKey]time.Time, len(groups))
	for _, g := range groups {
		live[g.Key] = true
		if e := c.groups[g.Key]; e != nil {
			at[g.Key] = e.at
		}
	}
	for k := range c.groups {
		if !live[k] {
			delete(c.groups, k)
		}
	}
	c.mu.Unlock()
	sort.SliceStable(groups, func(i, j int) bool { return at[groups[i].Key].Before(at[groups[j].Key]) })
	budget := MaxShardReadsPerRefresh
	failed, lastErr := 0, error(nil)
	defer func() { c.noteFailures(failed, lastErr) }()
	for i, g := range groups {
		span := shardSpan(g)
		if i > 0 && span > budget {
			break
		}
		budget -= span
		c.mu.Lock()
		_, busy := c.reading[g.Key]
		var ch chan struct{}
		if !busy {
			ch = make(chan struct{})
			c.reading[g.Key] = ch
		}
		c.mu.Unlock()
		if busy {
			continue // a request reads it now
		}
		if ctx.Err() != nil {
			c.mu.Lock()
			delete(c.reading, g.Key)
			c.mu.Unlock()
			close(ch)
			return
		}
		c.read(ctx, g, ch)
		if e := c.peek(g.Key); e != nil && e.err != nil && ctx.Err() == nil {
			failed, lastErr = failed+1, e.err
		}
	}
}

func (c *offsetCache) peek(k projection.GroupKey) *groupOffsets {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups[k]
}

// noteFailures logs the first pass that failed reads and the first one after
// that did not: once per outage, not once per group and pass.
func (c *offsetCache) noteFailures(failed int, err error) {
	c.mu.Lock()
	was := c.failing
	c.failing = failed > 0
	c.mu.Unlock()
	switch {
	case failed > 0 && !was:
		c.log.Warn().Err(err).Int("groups", failed).Msg("offsets cache: cannot read shard streams; those groups' rows answer 503 until a refresh reads them")
	case failed == 0 && was:
		c.log.Info().Msg("offsets cache: shard streams readable again")
	}
}

// ShardOffsets is Redis's view of a group's shards as the offsets cache last
// read it (read first when the cache has none for the group's span): what
// cmd gives /metrics's shard gauges, so that a scrape costs Redis nothing.
func (s *Server) ShardOffsets(ctx context.Context, k projection.GroupKey) ([]wire.ShardOffset, error) {
	if s.offsets == nil {
		return nil, commands.ErrRedisNotConfigured
	}
	g, ok := s.read.State().Group(k)
	if !ok {
		return nil, commands.ErrGroupNotFound
	}
	read, err := s.offsets.get(ctx, g)
	return append([]wire.ShardOffset(nil), read.offs...), err
}

// RefreshOffsets runs one refresh pass of the offsets cache now, as the
// background loop does every OffsetsRefresh (tests use it to observe rates
// between reads they choose).
func (s *Server) RefreshOffsets(ctx context.Context) {
	if s.offsets != nil {
		s.offsets.pass(ctx)
	}
}
