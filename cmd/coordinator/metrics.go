package main

import (
	"context"
	"time"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/metrics"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// newMetrics builds the Prometheus metrics (served at GET /metrics, public
// unless --metrics-auth) refreshed from Redis every --metrics-interval, with
// series of their own for at most --metrics-max-groups groups and
// --metrics-max-shards of their shards.
func (m *Main) newMetrics() *metrics.Metrics {
	return metrics.New(metrics.Config{Interval: m.MetricsInterval, Logger: m.logger, MaxGroups: offIfZero(m.MetricsMaxGroups), MaxShards: offIfZero(m.MetricsMaxShards)})
}

// thenAlso returns a hook that runs first and then next (either may be nil).
func thenAlso(first, next func(events.Record)) func(events.Record) {
	switch {
	case first == nil:
		return next
	case next == nil:
		return first
	}
	return func(rec events.Record) {
		first(rec)
		next(rec)
	}
}

// offsetsRefresh is the HTTP server's refresh interval of its cache of shard
// streams: --metrics-interval, or the default when that is negative (the
// gauges are then off, the Grafana rows still need fresh values).
func (m *Main) offsetsRefresh() time.Duration {
	if m.MetricsInterval < 0 {
		return httpapi.DefaultOffsetsRefresh
	}
	return m.MetricsInterval
}

// shardOffsets adapts the HTTP server's cache of shard streams to
// metrics.OffsetReader: the shard gauges show what the cache last read, so
// neither a scrape nor the metrics' own refresh costs Redis anything (the
// cache's refresh reads each shard once per interval for every reader).
type shardOffsets struct{ s *httpapi.Server }

func (a shardOffsets) Offsets(ctx context.Context, prefix, group string, shards []int) ([]metrics.ShardOffset, error) {
	offs, err := a.s.ShardOffsets(ctx, projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: group})
	if err != nil {
		return nil, err
	}
	out := make([]metrics.ShardOffset, len(offs))
	for i, o := range offs {
		out[i] = metrics.ShardOffset{ShardIndex: o.Shard.ShardIndex, Pending: o.PendingCount, Lag: o.Lag,
			LagSeconds: o.LagSeconds, OldestPendingSeconds: o.OldestPendingSeconds, LagStatus: o.LagStatus}
	}
	return out, nil
}

// countedHeartbeats is the coordinator's Commands with every heartbeat
// answer counted on its way out (rsc_heartbeats_total), while it is still a
// value: the protocol status is in the body of an HTTP 200.
type countedHeartbeats struct {
	httpapi.Commands
	answered func(*wire.HeartbeatResponse, error)
}

func (c countedHeartbeats) Heartbeat(ctx context.Context, k projection.GroupKey, memberID, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatResponse, error) {
	resp, err := c.Commands.Heartbeat(ctx, k, memberID, principal, req)
	c.answered(resp, err)
	return resp, err
}

// HeldHeartbeat counts the answer a held heartbeat got (none when its caller
// went away).
func (c countedHeartbeats) HeldHeartbeat(ctx context.Context, k projection.GroupKey, memberID, principal string, req *wire.HeartbeatRequest, h coordinator.HoldRequest) (*wire.HeartbeatResponse, coordinator.HoldOutcome, error) {
	resp, why, err := c.Commands.HeldHeartbeat(ctx, k, memberID, principal, req, h)
	if why != coordinator.HoldDropped {
		c.answered(resp, err)
	}
	return resp, why, err
}
