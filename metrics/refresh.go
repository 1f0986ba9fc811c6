package metrics

import (
	"context"
	"fmt"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// maxApplyLag bounds the apply-lag read: a projection this far behind reports
// maxApplyLag ("at least"), not the exact count.
const maxApplyLag = 1000

// ShardOffset is what the metrics need of one shard stream. Lag is nil when Redis
// cannot tell (XINFO GROUPS lag is null, e.g. after XDEL or XTRIM).
type ShardOffset struct {
	ShardIndex int
	Pending    int64
	Lag        *int64
	// LagSeconds and OldestPendingSeconds are the ages of the oldest entry
	// not yet delivered and not yet acknowledged (nil when the stream or the
	// group does not exist); LagStatus is the shard's wire.LagStatus*.
	LagSeconds           *float64
	OldestPendingSeconds *float64
	LagStatus            string
}

// OffsetReader reads the consumer group's position on shard streams;
// cmd/coordinator adapts redisstore.Shards.Offsets to it.
type OffsetReader interface {
	Offsets(ctx context.Context, prefix, group string, shards []int) ([]ShardOffset, error)
}

// redisValues is the result of the last refresh; the collector only reads it.
type redisValues struct {
	logKnown  bool
	logLen    int64
	lastIDMs  int64
	applyLag  int64
	shards    map[projection.GroupKey][]ShardOffset
	logFailed bool // the previous log read failed (log once per outage)
	failing   map[projection.GroupKey]bool
}

// Run refreshes the Redis-derived values now and then every Config.Interval
// until ctx is done. It returns at once when the interval is negative or Watch
// was not called.
func (m *Metrics) Run(ctx context.Context) {
	m.mu.Lock()
	watched := m.coord != nil
	m.mu.Unlock()
	if m.cfg.Interval < 0 || !watched {
		return
	}
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		m.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh reads the log (length, last id, entries not yet applied) and every
// group's shard offsets once, and keeps the results for the next scrapes. A
// failed read drops the values it would have refreshed rather than keep stale
// ones, and counts in rsc_metrics_refresh_errors_total.
func (m *Metrics) Refresh(ctx context.Context) {
	m.mu.Lock()
	coord, offsets := m.coord, m.offsets
	m.mu.Unlock()
	if coord == nil {
		return
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(parent, m.cfg.RefreshTimeout)
	defer cancel()

	logLen, lastIDMs, applyLag, logErr := readLog(ctx, coord.Log(), coord.State().LastID())
	shards := map[projection.GroupKey][]ShardOffset{}
	shardErrs := map[projection.GroupKey]error{}
	if offsets != nil {
		for _, g := range spans(coord.State()) {
			idx := make([]int, g.n)
			for i := range idx {
				idx[i] = i
			}
			offs, err := offsets.Offsets(ctx, g.key.StreamPrefix, g.key.ConsumerGroup, idx)
			if err != nil {
				shardErrs[g.key] = err
				continue
			}
			shards[g.key] = offs
		}
	}
	if parent.Err() != nil {
		return // shutting down: keep the last values, count nothing
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	r := &m.redis
	if logErr != nil {
		m.refreshErrors.WithLabelValues("log").Inc()
		if !r.logFailed {
			m.cfg.Logger.Warn().Err(logErr).Msg("metrics: cannot read the event log; log gauges dropped until it can")
		}
		r.logKnown, r.logFailed = false, true
	} else {
		if r.logFailed {
			m.cfg.Logger.Info().Msg("metrics: event log readable again")
		}
		r.logKnown, r.logFailed = true, false
		r.logLen, r.lastIDMs, r.applyLag = logLen, lastIDMs, applyLag
	}
	failing := map[projection.GroupKey]bool{}
	for k, err := range shardErrs {
		m.refreshErrors.WithLabelValues("shards").Inc()
		if !r.failing[k] {
			m.cfg.Logger.Warn().Err(err).Str("streamPrefix", k.StreamPrefix).Str("consumerGroup", k.ConsumerGroup).
				Msg("metrics: cannot read shard offsets; shard gauges of the group dropped until it can")
		}
		failing[k] = true
	}
	r.failing = failing
	r.shards = shards
}

// groupSpan is a group and how many shards it routes or assigns.
type groupSpan struct {
	key projection.GroupKey
	n   int
}

// spans lists every group with shards, in creation order, read under the
// projection's read lock without copying any group.
func spans(st *projection.State) []groupSpan {
	return mapGroups(st, func(k projection.GroupKey, g projection.ReadOnlyGroup) (groupSpan, bool) {
		n := max(g.ShardCount(), g.AssignableCount())
		return groupSpan{key: k, n: n}, n > 0
	})
}

// mapGroups calls f on every group of st, in creation order, under the
// projection's read lock without copying any group, and returns what f
// keeps (never nil).
func mapGroups[T any](st *projection.State, f func(k projection.GroupKey, g projection.ReadOnlyGroup) (T, bool)) []T {
	var out []T
	st.Read(func(r projection.Reader) {
		keys := r.GroupKeys()
		out = make([]T, 0, len(keys))
		for _, k := range keys {
			if v, ok := f(k, r.Group(k)); ok {
				out = append(out, v)
			}
		}
	})
	return out
}

// readLog returns the log's length, the millisecond part of its last id and how
// many entries follow the projection's last applied id (at most maxApplyLag).
func readLog(ctx context.Context, l events.Log, applied string) (length, lastIDMs, lag int64, err error) {
	length, err = l.Len(ctx)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("log length: %w", err)
	}
	last, err := l.LastID(ctx)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("log last id: %w", err)
	}
	id, err := events.ParseID(last)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("log last id: %w", err)
	}
	pending, err := l.Read(ctx, applied, maxApplyLag)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read log after %s: %w", applied, err)
	}
	return length, int64(id.Ms), int64(len(pending)), nil
}
