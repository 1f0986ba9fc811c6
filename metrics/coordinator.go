package metrics

import (
	"strconv"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/projection"
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
func (m *Metrics) Watch(c *commands.Coordinator, offsets OffsetReader) {
	m.mu.Lock()
	m.coord, m.offsets = c, offsets
	m.mu.Unlock()
	m.reg.MustRegister(coordinatorCollector{m})
}

// coordinatorCollector builds its metrics at scrape time from the projection and
// from the last refresh.
type coordinatorCollector struct{ m *Metrics }

func (coordinatorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descReady, descLeader, descConflicts, descLogLost, descLogLostEntries, descLogLosses, descRedisEvicting, descRedisPersistence, descLogLength, descLogLastID, descApplyLag,
		descEpoch, descAssignmentEpoch, descMetadataVersion, descShardCount, descLiveMembers,
		descRevoking, descResharding, descReshardingAge, descBarriers, descBarrierAge, descAutoscaling, descAutoscaleMin, descAutoscaleMax, descAutoscaleRec, descAutoscaleSamples, descCorrection, descShardLag, descShardPending,
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
	for _, cause := range []string{commands.LossLogGone, commands.LossEntriesLost} {
		on := loss != nil && loss.Cause == cause
		ch <- prometheus.MustNewConstMetric(descLogLost, prometheus.GaugeValue, boolValue(on), cause)
		if on && cause == commands.LossEntriesLost {
			lostEntries = float64(loss.LostEntries)
		}
	}
	ch <- prometheus.MustNewConstMetric(descLogLostEntries, prometheus.GaugeValue, lostEntries)
	gone, entries := c.LogLosses()
	ch <- prometheus.MustNewConstMetric(descLogLosses, prometheus.CounterValue, float64(gone), commands.LossLogGone)
	ch <- prometheus.MustNewConstMetric(descLogLosses, prometheus.CounterValue, float64(entries), commands.LossEntriesLost)
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
	for _, g := range c.State().Groups() {
		p, cg := labelValue(g.Key.StreamPrefix), labelValue(g.Key.ConsumerGroup)
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, p, cg)
		}
		gauge(descEpoch, float64(g.GroupEpoch))
		gauge(descAssignmentEpoch, float64(g.AssignmentEpoch))
		gauge(descMetadataVersion, float64(g.MetadataVersion))
		gauge(descShardCount, float64(g.ShardCount))
		gauge(descLiveMembers, float64(len(g.LiveMemberIDs())))
		gauge(descRevoking, float64(revokingShards(g)))
		active, age := 0.0, 0.0
		if mig := g.Active(); mig != nil {
			active = 1
			age = max(now.Sub(mig.CreatedAt).Seconds(), 0)
		}
		gauge(descResharding, active)
		gauge(descReshardingAge, age)
		oldest := 0.0
		for _, b := range g.Barriers {
			oldest = max(oldest, now.Sub(b.Since).Seconds())
		}
		gauge(descBarriers, float64(len(g.ShardBarriers())))
		gauge(descBarrierAge, oldest)
		gauge(descAutoscaling, boolValue(g.AutoscalingEnabled()))
		if a := g.Autoscaling; a != nil {
			gauge(descAutoscaleMin, float64(a.Policy.MinShards))
			gauge(descAutoscaleMax, float64(a.Policy.MaxShards))
			if ev, ok := c.LastEvaluation(g.Key); ok && a.Policy.Enabled {
				gauge(descAutoscaleRec, float64(ev.Verdict.Recommended))
			}
			if a.Policy.Enabled {
				gauge(descAutoscaleSamples, float64(c.LoadSamples(g.Key)))
			}
		}
		gauge(descCorrection, boolValue(c.CorrectionOpen(g.Key)))

		for _, o := range r.shards[g.Key] {
			shard := strconv.Itoa(o.ShardIndex)
			ch <- prometheus.MustNewConstMetric(descShardPending, prometheus.GaugeValue, float64(o.Pending), p, cg, shard)
			if o.Lag != nil {
				ch <- prometheus.MustNewConstMetric(descShardLag, prometheus.GaugeValue, float64(*o.Lag), p, cg, shard)
			}
		}
		collectLag(ch, p, cg, r.shards[g.Key])
	}
}

// revokingShards counts the distinct shards that members which may still hold
// them list as revoking.
func revokingShards(g *projection.Group) int {
	seen := map[int]bool{}
	for _, mb := range g.Members {
		if !mb.CanHold() {
			continue
		}
		for _, s := range mb.Revoking {
			seen[s] = true
		}
	}
	return len(seen)
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
