package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rscoord/rsc/wire"
)

// The lag in time of each shard and the lag status of each group, from the
// same refresh as rsc_shard_lag_entries (the HTTP server's cache of shard
// streams; docs/operations.md, "Lag and group status").
var (
	descShardLagSeconds = prometheus.NewDesc("rsc_shard_lag_seconds",
		"Age of the shard's oldest entry not yet delivered to the consumer group (0 when none), from its id and Redis's clock, as of the last refresh; absent when the stream or the group does not exist.", shardLabels, nil)
	descShardOldestPending = prometheus.NewDesc("rsc_shard_oldest_pending_seconds",
		"Age of the consumer group's oldest entry delivered and not yet acknowledged on the shard (0 when none), from its id and Redis's clock, as of the last refresh; absent when the stream or the group does not exist.", shardLabels, nil)
	descGroupLagStatus = prometheus.NewDesc("rsc_group_lag_status",
		"The group's lag status as of the last refresh: 0 OK, 1 WARN (falling further behind at every read), 2 STALL (entries wait and the group has not advanced for a whole window), 3 STOP (entries wait on a shard nobody owns); the worst of its shards.", groupLabels, nil)
)

// lagStatusValue is a lag status as rsc_group_lag_status encodes it.
var lagStatusValue = map[string]float64{wire.LagStatusOK: 0, wire.LagStatusWarn: 1, wire.LagStatusStall: 2, wire.LagStatusStop: 3}

func describeLag(ch chan<- *prometheus.Desc) {
	ch <- descShardLagSeconds
	ch <- descShardOldestPending
	ch <- descGroupLagStatus
}

// collectLag sends the lag series of one group's shards as last refreshed
// (none when they could not be read).
func collectLag(ch chan<- prometheus.Metric, prefix, group string, offs []ShardOffset) {
	if offs == nil {
		return
	}
	status := 0.0
	for _, o := range offs {
		shard := strconv.Itoa(o.ShardIndex)
		if o.LagSeconds != nil {
			ch <- prometheus.MustNewConstMetric(descShardLagSeconds, prometheus.GaugeValue, *o.LagSeconds, prefix, group, shard)
		}
		if o.OldestPendingSeconds != nil {
			ch <- prometheus.MustNewConstMetric(descShardOldestPending, prometheus.GaugeValue, *o.OldestPendingSeconds, prefix, group, shard)
		}
		status = max(status, lagStatusValue[o.LagStatus])
	}
	ch <- prometheus.MustNewConstMetric(descGroupLagStatus, prometheus.GaugeValue, status, prefix, group)
}
