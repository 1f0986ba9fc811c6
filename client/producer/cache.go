package producer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/routing"
)

// route is one cached routing snapshot. It is immutable once published in
// cache.cur; a renewal stores a new route sharing the same keys.
type route struct {
	routing client.Routing
	*layout
	fetchedAt  time.Time
	refreshAt  time.Time // fetchedAt + TTL: refresh before the next use
	leaseUntil time.Time // fetchedAt + lease: never used after this
}

// layout is what publishing needs of a routing answer, computed once per
// answer and shared by the routes that renew it.
type layout struct {
	keys []string // keys[i] is the stream key of shard i
	// scriptKeys[i] is PublishScript's KEYS for shard i: its stream key and
	// its fence key.
	scriptKeys [][]string
	// tag: the group has ordering KEY, so entries carry routing.FenceField.
	tag string
	// dedupPrefix[i] is DedupKey(keys[i], "").
	dedupPrefix []string
	// prev are the routing's previous layouts, newest first.
	prev []prevLayout
}

func newLayout(rt *client.Routing) *layout {
	l := &layout{keys: make([]string, len(rt.Shards)), scriptKeys: make([][]string, len(rt.Shards)),
		dedupPrefix: make([]string, len(rt.Shards)), tag: "0"}
	for _, s := range rt.Shards {
		fence := s.FenceKey
		if fence == "" { // a coordinator that predates ordered groups
			fence = routing.FenceKey(s.StreamKey)
		}
		l.keys[s.ShardIndex] = s.StreamKey
		l.scriptKeys[s.ShardIndex] = []string{s.StreamKey, fence}
		l.dedupPrefix[s.ShardIndex] = dedupPrefix(s.StreamKey)
	}
	if rt.Ordering == client.OrderingKey {
		l.tag = "1"
	}
	for _, pl := range rt.PreviousLayouts {
		l.prev = append(l.prev, prevLayout{shardCount: pl.ShardCount, fence: pl.Fence, endedAt: pl.EndedAt})
	}
	return l
}

// sameLayouts reports whether two answers of the same version list the same
// previous layouts (a renewal may keep the cached layout only then).
func sameLayouts(a, b []client.RoutingLayout) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].ShardCount != b[i].ShardCount || a[i].Fence != b[i].Fence || !a[i].EndedAt.Equal(b[i].EndedAt) || a[i].MetadataVersion != b[i].MetadataVersion {
			return false
		}
	}
	return true
}

// refreshCall is one refresh in flight; concurrent callers wait for it.
type refreshCall struct {
	done chan struct{}
	r    *route // the route to use (after falling back within the lease)
	err  error  // the answer's error (after falling back)
	raw  error  // the refresh's own error, even when the fallback hid it
}

// cache is the routing cache of one group.
type cache struct {
	prefix, group string
	ttl, lease    time.Duration
	fetch         func(context.Context) (*client.Routing, error)
	log           *slog.Logger

	cur     atomic.Pointer[route]
	invalid atomic.Pointer[route] // a route a failed publish invalidated
	fetches atomic.Int64

	mu      sync.Mutex
	call    *refreshCall
	retryAt time.Time // no new fetch before this, after a failed one
	lastErr error
}

func newCache(prefix, group string, ttl, lease time.Duration, fetch func(context.Context) (*client.Routing, error), log *slog.Logger) *cache {
	return &cache{prefix: prefix, group: group, ttl: ttl, lease: lease, fetch: fetch, log: log}
}

// get returns the route to publish with, refreshing it first when its TTL has
// passed or a publish invalidated it.
func (c *cache) get(ctx context.Context) (*route, error) {
	r := c.cur.Load()
	if r != nil && c.invalid.Load() != r && time.Now().Before(r.refreshAt) {
		return r, nil
	}
	call := c.refresh(ctx, false)
	return call.r, call.err
}

// invalidate marks r as not to be used again without a refresh (a publish on
// it failed). A newer route stored meanwhile is not affected.
func (c *cache) invalidate(r *route) {
	if c.cur.Load() == r {
		c.invalid.Store(r)
	}
}

// refresh runs or joins a refresh. With force, it fetches even inside the
// back-off that follows a failed fetch.
func (c *cache) refresh(ctx context.Context, force bool) *refreshCall {
	c.mu.Lock()
	now := time.Now()
	r := c.cur.Load()
	if !force && r != nil && c.invalid.Load() != r && now.Before(r.refreshAt) {
		c.mu.Unlock()
		return &refreshCall{r: r} // another caller refreshed it meanwhile
	}
	if call := c.call; call != nil {
		c.mu.Unlock()
		select {
		case <-call.done:
			return call
		case <-ctx.Done():
			return &refreshCall{err: ctx.Err(), raw: ctx.Err()}
		}
	}
	if !force && now.Before(c.retryAt) {
		err := c.lastErr
		c.mu.Unlock()
		ans, aerr := c.fallback(r, now, err)
		return &refreshCall{r: ans, err: aerr, raw: err}
	}
	call := &refreshCall{done: make(chan struct{})}
	c.call = call
	c.mu.Unlock()

	c.fetchAndMerge(ctx, call)

	c.mu.Lock()
	c.call = nil
	if call.raw != nil {
		c.retryAt = time.Now().Add(c.backoff())
		c.lastErr = call.raw
	} else {
		c.retryAt, c.lastErr = time.Time{}, nil
	}
	c.mu.Unlock()
	close(call.done)
	return call
}

// backoff is how long to wait after a failed fetch before the next one; in
// between, publishes use the cached routing (within its lease) without
// waiting for the coordinator.
func (c *cache) backoff() time.Duration {
	b := c.ttl / 5
	if b > time.Second {
		b = time.Second
	}
	if b < 10*time.Millisecond {
		b = 10 * time.Millisecond
	}
	return b
}

// fetchAndMerge fetches the routing and merges it with the cache: only a newer
// metadataVersion replaces the cached routing; the same version renews it; an
// older one is ignored (as a failed refresh) while the cache lease lasts.
func (c *cache) fetchAndMerge(ctx context.Context, call *refreshCall) {
	c.fetches.Add(1)
	// One caller giving up must not fail the refresh the others wait for.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), client.DefaultTimeout)
	rt, err := c.fetch(fctx)
	cancel()
	if err == nil {
		err = c.validate(rt)
	}
	now := time.Now()
	cur := c.cur.Load()
	if err == nil && cur != nil && now.Before(cur.leaseUntil) && rt.MetadataVersion < cur.routing.MetadataVersion {
		err = fmt.Errorf("%w: the coordinator answered metadataVersion %d, older than the cached %d",
			ErrInvalidRouting, rt.MetadataVersion, cur.routing.MetadataVersion)
	}
	if err != nil {
		call.raw = err
		call.r, call.err = c.fallback(cur, now, err)
		if call.err == nil {
			c.log.Warn("producer routing refresh failed; publishing with the cached routing until its lease ends",
				"streamPrefix", c.prefix, "consumerGroup", c.group, "metadataVersion", cur.routing.MetadataVersion,
				"leaseUntil", cur.leaseUntil.Format(time.RFC3339Nano), "err", err)
		}
		return
	}
	switch {
	case cur == nil || !now.Before(cur.leaseUntil) || rt.MetadataVersion > cur.routing.MetadataVersion ||
		rt.Ordering != cur.routing.Ordering || !sameLayouts(rt.PreviousLayouts, cur.routing.PreviousLayouts):
		if cur != nil && (rt.MetadataVersion != cur.routing.MetadataVersion || rt.Ordering != cur.routing.Ordering) {
			c.log.Info("producer routing changed", "streamPrefix", c.prefix, "consumerGroup", c.group,
				"fromVersion", cur.routing.MetadataVersion, "toVersion", rt.MetadataVersion,
				"fromShards", cur.routing.ShardCount, "toShards", rt.ShardCount,
				"fromOrdering", cur.routing.Ordering, "toOrdering", rt.Ordering)
		}
		call.r = c.newRoute(*rt, newLayout(rt), now)
	default: // the same version: renew the lease, keep the snapshot
		call.r = c.newRoute(cur.routing, cur.layout, now)
	}
	c.cur.Store(call.r)
}

func (c *cache) newRoute(rt client.Routing, l *layout, now time.Time) *route {
	return &route{routing: rt, layout: l, fetchedAt: now, refreshAt: now.Add(c.ttl), leaseUntil: now.Add(c.lease)}
}

// fallback answers a failed refresh: the cached route while its lease lasts,
// else an error that says why publishing is impossible.
func (c *cache) fallback(cur *route, now time.Time, err error) (*route, error) {
	if cur != nil && now.Before(cur.leaseUntil) {
		return cur, nil
	}
	if cur != nil {
		return nil, fmt.Errorf("%w: routing of %s/%s (metadataVersion %d) fetched at %s, lease ended at %s: %w",
			ErrRoutingLeaseExpired, c.prefix, c.group, cur.routing.MetadataVersion,
			cur.fetchedAt.Format(time.RFC3339Nano), cur.leaseUntil.Format(time.RFC3339Nano), err)
	}
	return nil, fmt.Errorf("%w: %s/%s: %w", ErrRoutingUnavailable, c.prefix, c.group, err)
}

// validate checks a routing answer the way the Spring starter does, plus the
// stream keys members compute on their side.
func (c *cache) validate(rt *client.Routing) error {
	if rt.StreamPrefix != c.prefix || rt.ConsumerGroup != c.group {
		return fmt.Errorf("%w: asked for %s/%s, got %s/%s", ErrInvalidRouting, c.prefix, c.group, rt.StreamPrefix, rt.ConsumerGroup)
	}
	if rt.ShardCount < 0 || len(rt.Shards) != rt.ShardCount {
		return fmt.Errorf("%w: shardCount %d with %d shards", ErrInvalidRouting, rt.ShardCount, len(rt.Shards))
	}
	seen := make([]bool, rt.ShardCount)
	for _, s := range rt.Shards {
		if s.ShardIndex < 0 || s.ShardIndex >= rt.ShardCount || seen[s.ShardIndex] {
			return fmt.Errorf("%w: shard index %d is out of 0..%d or repeated", ErrInvalidRouting, s.ShardIndex, rt.ShardCount-1)
		}
		seen[s.ShardIndex] = true
		if want := routing.StreamKey(c.prefix, s.ShardIndex); s.StreamKey != want {
			return fmt.Errorf("%w: shard %d has stream key %q, members read %q", ErrInvalidRouting, s.ShardIndex, s.StreamKey, want)
		}
		// One script touches both keys: in a cluster they must share a slot.
		if s.FenceKey != "" && routing.Slot(s.FenceKey) != routing.Slot(s.StreamKey) {
			return fmt.Errorf("%w: shard %d has fence key %q, outside the slot of its stream %q", ErrInvalidRouting, s.ShardIndex, s.FenceKey, s.StreamKey)
		}
	}
	return validateLayouts(rt)
}

// validateLayouts checks the previous layouts: bounded in number and size,
// newest first: each ended (its fence) after it began and no later than the
// layout after it began.
func validateLayouts(rt *client.Routing) error {
	if len(rt.PreviousLayouts) > maxPreviousLayouts {
		return fmt.Errorf("%w: %d previous layouts (at most %d)", ErrInvalidRouting, len(rt.PreviousLayouts), maxPreviousLayouts)
	}
	next := rt.MetadataVersion + 1
	for i, l := range rt.PreviousLayouts {
		switch {
		case l.ShardCount < 0 || l.ShardCount > maxLayoutShards:
			return fmt.Errorf("%w: previous layout %d has shardCount %d (0..%d)", ErrInvalidRouting, i, l.ShardCount, maxLayoutShards)
		case l.Fence <= l.MetadataVersion || l.Fence >= next:
			return fmt.Errorf("%w: previous layout %d (metadataVersion %d, fence %d) is not fenced between its own version and %d", ErrInvalidRouting, i, l.MetadataVersion, l.Fence, next)
		}
		next = l.MetadataVersion + 1
	}
	return nil
}
