package metrics

import (
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rscoord/rsc/coordinator"
)

var (
	groupLabels = []string{"stream_prefix", "consumer_group"}
	shardLabels = []string{"stream_prefix", "consumer_group", "shard"}

	descReady = prometheus.NewDesc("rsc_ready",
		"1 when the coordinator has loaded the log and can append (what /readyz reports), else 0.", nil, nil)
	descLeader = prometheus.NewDesc("rsc_leader",
		"1 while this coordinator may decide: it holds the leader lease (--ha), or it is the only writer; 0 on a follower.", nil, nil)
	descConflicts = prometheus.NewDesc("rsc_log_append_conflicts_total",
		"Compare-and-append conflicts: another writer appended to the log first.", nil, nil)

	descLogLost = prometheus.NewDesc("rsc_log_lost",
		"1 while the event log no longer holds what this coordinator applied (/readyz LOG_LOST), by cause: LOG_GONE (the log key is gone or empty: a Redis restart without persistence, FLUSHALL, eviction) or ENTRIES_LOST (a failover lost the newest entries); else 0.", []string{"cause"}, nil)
	descLogLostEntries = prometheus.NewDesc("rsc_log_lost_entries",
		"While ENTRIES_LOST: entries this coordinator applied after the newest one the log still holds (a lower bound past 1023); else 0.", nil, nil)
	descLogLosses = prometheus.NewDesc("rsc_log_losses_total",
		"Losses of the event log this coordinator found, by cause (LOG_GONE, ENTRIES_LOST).", []string{"cause"}, nil)
	descRedisEvicting = prometheus.NewDesc("rsc_redis_evicting",
		"1 when the maxmemory-policy of a Redis holding the coordinator's keys can evict them (writes refused unless --allow-redis-eviction), else 0; absent before the first check.", nil, nil)
	descRedisPersistence = prometheus.NewDesc("rsc_redis_persistence_enabled",
		"1 when the Redis holding the log persists it (AOF or RDB save points), 0 when it does not (a restart loses the log); absent when unknown.", nil, nil)

	descLogLength = prometheus.NewDesc("rsc_log_length_entries",
		"Entries in the event log stream (XLEN), as of the last refresh.", nil, nil)
	descLogLastID = prometheus.NewDesc("rsc_log_last_id_ms",
		"Millisecond part of the event log's last entry id (0 for an empty log), as of the last refresh.", nil, nil)
	descApplyLag = prometheus.NewDesc("rsc_projection_apply_lag_entries",
		"Log entries after the projection's last applied id, as of the last refresh; capped at 1000.", nil, nil)

	descEpoch = prometheus.NewDesc("rsc_group_epoch",
		"Group epoch.", groupLabels, nil)
	descAssignmentEpoch = prometheus.NewDesc("rsc_group_assignment_epoch",
		"Epoch of the group's current target assignment.", groupLabels, nil)
	descMetadataVersion = prometheus.NewDesc("rsc_group_metadata_version",
		"Group metadata version.", groupLabels, nil)
	descShardCount = prometheus.NewDesc("rsc_group_shard_count",
		"Shards producers route to.", groupLabels, nil)
	descLiveMembers = prometheus.NewDesc("rsc_group_live_members",
		"Members taking part in assignment (ACTIVE or STARTING).", groupLabels, nil)
	descRevoking = prometheus.NewDesc("rsc_group_revoking_shards",
		"Distinct shards some member is still revoking.", groupLabels, nil)
	descResharding = prometheus.NewDesc("rsc_group_active_resharding",
		"1 while a resharding of the group is in progress, else 0.", groupLabels, nil)
	descReshardingAge = prometheus.NewDesc("rsc_group_active_resharding_age_seconds",
		"Seconds since the active resharding was requested (0 when none is active).", groupLabels, nil)

	descBarriers = prometheus.NewDesc("rsc_group_barriers_waiting",
		"Shards of an ordered group whose entries after a cutover wait for a barrier (0 when none).", groupLabels, nil)
	descBarrierAge = prometheus.NewDesc("rsc_group_barrier_wait_seconds",
		"Seconds the oldest waiting barrier of an ordered group has waited (0 when none): how long members hold entries back.", groupLabels, nil)

	descAutoscaling = prometheus.NewDesc("rsc_autoscaling_enabled",
		"1 while the autoscaler manages the group's shard count (a dry-run policy included), else 0.", groupLabels, nil)
	descAutoscaleMin = prometheus.NewDesc("rsc_autoscaling_min_shards",
		"The autoscaling policy's minShards (absent without a policy).", groupLabels, nil)
	descAutoscaleMax = prometheus.NewDesc("rsc_autoscaling_max_shards",
		"The autoscaling policy's maxShards (absent without a policy).", groupLabels, nil)
	descAutoscaleRec = prometheus.NewDesc("rsc_autoscaling_recommended_shards",
		"The shard count the autoscaler's latest evaluation recommends (absent before the first since this process leads).", groupLabels, nil)
	descAutoscaleSamples = prometheus.NewDesc("rsc_autoscaling_load_samples",
		"Load samples the autoscaler keeps in memory for the group (at most 66, whatever the evaluation window; each holds one count per shard).", groupLabels, nil)

	descGroups = prometheus.NewDesc("rsc_groups",
		"Consumer groups the coordinator manages.", nil, nil)
	descAggregated = prometheus.NewDesc("rsc_metrics_groups_aggregated",
		"Groups beyond --metrics-max-groups (the newest): their series are added up under stream_prefix=\"*\", consumer_group=\"*\" (their shards' with shard=\"*\").", nil, nil)

	descCorrection = prometheus.NewDesc("rsc_group_metadata_correction_open",
		"1 while a metadata-correction round is open: a member reported a metadata version newer than the coordinator's (alert on it), else 0.", groupLabels, nil)

	descShardLag = prometheus.NewDesc("rsc_shard_lag_entries",
		"Entries of the shard stream not yet delivered to the consumer group (XINFO GROUPS lag), as of the last refresh; absent when Redis cannot tell.", shardLabels, nil)
	descShardPending = prometheus.NewDesc("rsc_shard_pending_entries",
		"Entries delivered to the consumer group and not yet acknowledged (XINFO GROUPS pending), as of the last refresh.", shardLabels, nil)
)

// Watch registers the metrics that read the coordinator: readiness, append
// conflicts, per-group gauges from the projection at scrape time, and the values
// Run refreshes from Redis. offsets may be nil (no per-shard gauges). Call it once.
func (m *Metrics) Watch(c *coordinator.Coordinator, offsets OffsetReader) {
	m.mu.Lock()
	m.coord, m.offsets = c, offsets
	m.mu.Unlock()
	m.reg.MustRegister(coordinatorCollector{m})
	m.watchHeld(c)
}

// coordinatorCollector builds its metrics at scrape time from the projection and
// from the last refresh.
type coordinatorCollector struct{ m *Metrics }

func (coordinatorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descReady, descLeader, descConflicts, descLogLost, descLogLostEntries, descLogLosses, descRedisEvicting, descRedisPersistence, descLogLength, descLogLastID, descApplyLag,
		descEpoch, descAssignmentEpoch, descMetadataVersion, descShardCount, descLiveMembers,
		descRevoking, descResharding, descReshardingAge, descBarriers, descBarrierAge, descAutoscaling, descAutoscaleMin, descAutoscaleMax, descAutoscaleRec, descAutoscaleSamples, descCorrection, descShardLag, descShardPending, descGroups, descAggregated,
	} {
		ch <- d
	}
	describeLag(ch)
}

func (cc coordinatorCollector) Collect(ch chan<- prometheus.Metric) {
	m := cc.m
	m.mu.Lock()
	c := m.coord
	r := m.redis
	m.mu.Unlock()
	// r.shards is replaced, never mutated, by Refresh: reading it unlocked is safe.

	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, boolValue(c.Ready()))
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, boolValue(c.IsLeader()))
	ch <- prometheus.MustNewConstMetric(descConflicts, prometheus.CounterValue, float64(c.Conflicts()))
	loss := c.LogLoss()
	lostEntries := 0.0
	for _, cause := range []string{coordinator.LossLogGone, coordinator.LossEntriesLost} {
		on := loss != nil && loss.Cause == cause
		ch <- prometheus.MustNewConstMetric(descLogLost, prometheus.GaugeValue, boolValue(on), cause)
		if on && cause == coordinator.LossEntriesLost {
			lostEntries = float64(loss.LostEntries)
		}
	}
	ch <- prometheus.MustNewConstMetric(descLogLostEntries, prometheus.GaugeValue, lostEntries)
	gone, entries := c.LogLosses()
	ch <- prometheus.MustNewConstMetric(descLogLosses, prometheus.CounterValue, float64(gone), coordinator.LossLogGone)
	ch <- prometheus.MustNewConstMetric(descLogLosses, prometheus.CounterValue, float64(entries), coordinator.LossEntriesLost)
	if rs, ok := c.RedisSafety(); ok {
		ch <- prometheus.MustNewConstMetric(descRedisEvicting, prometheus.GaugeValue, boolValue(rs.Evicts))
		switch rs.Persistence {
		case "off":
			ch <- prometheus.MustNewConstMetric(descRedisPersistence, prometheus.GaugeValue, 0)
		case "aof", "rdb", "aof+rdb":
			ch <- prometheus.MustNewConstMetric(descRedisPersistence, prometheus.GaugeValue, 1)
		}
	}
	if r.logKnown {
		ch <- prometheus.MustNewConstMetric(descLogLength, prometheus.GaugeValue, float64(r.logLen))
		ch <- prometheus.MustNewConstMetric(descLogLastID, prometheus.GaugeValue, float64(r.lastIDMs))
		ch <- prometheus.MustNewConstMetric(descApplyLag, prometheus.GaugeValue, float64(r.applyLag))
	}

	now := m.cfg.Now()
	var other otherGroups
	shardBudget := m.cfg.MaxShards // shards left with series of their own (negative: no limit)
	sums := m.summaries(c)
	for i, g := range sums {
		if !m.bounded(i) {
			other.add(g, r.shards[g.key], now)
			continue
		}
		p, cg := labelValue(g.key.StreamPrefix), labelValue(g.key.ConsumerGroup)
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, p, cg)
		}
		gauge(descEpoch, float64(g.epoch))
		gauge(descAssignmentEpoch, float64(g.assignmentEpoch))
		gauge(descMetadataVersion, float64(g.mv))
		gauge(descShardCount, float64(g.shardCount))
		gauge(descLiveMembers, float64(g.liveMembers))
		gauge(descRevoking, float64(g.revoking))
		active, age := 0.0, 0.0
		if g.resharding {
			active = 1
			age = max(now.Sub(g.reshardingSince).Seconds(), 0)
		}
		gauge(descResharding, active)
		gauge(descReshardingAge, age)
		oldest := 0.0
		if !g.oldestBarrier.IsZero() {
			oldest = max(now.Sub(g.oldestBarrier).Seconds(), 0)
		}
		gauge(descBarriers, float64(g.barriers))
		gauge(descBarrierAge, oldest)
		gauge(descAutoscaling, boolValue(g.autoscaling))
		if a := g.policy; a != nil {
			gauge(descAutoscaleMin, float64(a.MinShards))
			gauge(descAutoscaleMax, float64(a.MaxShards))
			if g.hasRecommendation {
				gauge(descAutoscaleRec, float64(g.recommended))
			}
			if a.Enabled {
				gauge(descAutoscaleSamples, float64(g.samples))
			}
		}
		gauge(descCorrection, boolValue(g.correction))

		offs := r.shards[g.key]
		if shardBudget < 0 || len(offs) <= shardBudget {
			if shardBudget >= 0 {
				shardBudget -= len(offs)
			}
			for _, o := range offs {
				shard := strconv.Itoa(o.ShardIndex)
				ch <- prometheus.MustNewConstMetric(descShardPending, prometheus.GaugeValue, float64(o.Pending), p, cg, shard)
				if o.Lag != nil {
					ch <- prometheus.MustNewConstMetric(descShardLag, prometheus.GaugeValue, float64(*o.Lag), p, cg, shard)
				}
			}
			collectLag(ch, p, cg, offs)
		} else if offs != nil {
			// Past the shard budget: the group's shards added up.
			var t shardTotals
			t.add(offs)
			t.collect(ch, p, cg)
		}
	}
	ch <- prometheus.MustNewConstMetric(descGroups, prometheus.GaugeValue, float64(len(sums)))
	ch <- prometheus.MustNewConstMetric(descAggregated, prometheus.GaugeValue, float64(other.groups))
	other.collect(ch)
}

// shardTotals adds up shards: lag and pending summed (no lag when one is
// unknown), the lag ages the oldest, the lag status the worst.
type shardTotals struct {
	n                         int
	pending, lag              int64
	lagUnknown                bool
	lagSeconds, oldestPending *float64
	status                    float64
}

func maxOf(cur, v *float64) *float64 {
	if v == nil || (cur != nil && *cur >= *v) {
		return cur
	}
	x := *v
	return &x
}

func (t *shardTotals) add(offs []ShardOffset) {
	for _, s := range offs {
		t.n++
		t.pending += s.Pending
		if s.Lag != nil {
			t.lag += *s.Lag
		} else {
			t.lagUnknown = true
		}
		t.lagSeconds, t.oldestPending = maxOf(t.lagSeconds, s.LagSeconds), maxOf(t.oldestPending, s.OldestPendingSeconds)
		t.status = max(t.status, lagStatusValue[s.LagStatus])
	}
}

// collect emits the totals as one shard, shard="*", of prefix/group, and
// the group's lag status.
func (t *shardTotals) collect(ch chan<- prometheus.Metric, prefix, group string) {
	if t.n > 0 {
		ch <- prometheus.MustNewConstMetric(descShardPending, prometheus.GaugeValue, float64(t.pending), prefix, group, OtherLabel)
		if !t.lagUnknown {
			ch <- prometheus.MustNewConstMetric(descShardLag, prometheus.GaugeValue, float64(t.lag), prefix, group, OtherLabel)
		}
		if t.lagSeconds != nil {
			ch <- prometheus.MustNewConstMetric(descShardLagSeconds, prometheus.GaugeValue, *t.lagSeconds, prefix, group, OtherLabel)
		}
		if t.oldestPending != nil {
			ch <- prometheus.MustNewConstMetric(descShardOldestPending, prometheus.GaugeValue, *t.oldestPending, prefix, group, OtherLabel)
		}
	}
	ch <- prometheus.MustNewConstMetric(descGroupLagStatus, prometheus.GaugeValue, t.status, prefix, group)
}

// otherGroups adds up the groups beyond Config.MaxGroups.
type otherGroups struct {
	groups, liveMembers, revoking, reshardings, barriers int
	reshardingAge, barrierAge                            float64
	shards                                               shardTotals
}

func (o *otherGroups) add(g groupSummary, shards []ShardOffset, now time.Time) {
	o.groups++
	o.liveMembers += g.liveMembers
	o.revoking += g.revoking
	o.barriers += g.barriers
	if g.resharding {
		o.reshardings++
		o.reshardingAge = max(o.reshardingAge, now.Sub(g.reshardingSince).Seconds())
	}
	if !g.oldestBarrier.IsZero() {
		o.barrierAge = max(o.barrierAge, now.Sub(g.oldestBarrier).Seconds())
	}
	o.shards.add(shards)
}

// collect emits the added-up series (none when no group is beyond the
// bound): the additive gauges summed, the ages the oldest, and their shards
// added up (shardTotals).
func (o *otherGroups) collect(ch chan<- prometheus.Metric) {
	if o.groups == 0 {
		return
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, OtherLabel, OtherLabel)
	}
	gauge(descLiveMembers, float64(o.liveMembers))
	gauge(descRevoking, float64(o.revoking))
	gauge(descResharding, float64(o.reshardings))
	gauge(descReshardingAge, o.reshardingAge)
	gauge(descBarriers, float64(o.barriers))
	gauge(descBarrierAge, o.barrierAge)
	o.shards.collect(ch, OtherLabel, OtherLabel)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// labelValue is a name as a label value. Names are valid UTF-8 (since
// routing.ErrInvalidUTF8), but a log written earlier may hold one that is
// not, and Prometheus refuses such a label value: the whole scrape failed.
// Such a name is shown quoted (\xff escapes), which no valid name collides
// with in practice.
func labelValue(name string) string {
	if utf8.ValidString(name) {
		return name
	}
	return strconv.Quote(name)
}
