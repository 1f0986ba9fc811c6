package metrics

import (
	"time"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// What a scrape costs does not grow with what the tenants register. The
// per-group values are read from the projection's live groups under its read
// lock, a few numbers per group from the indexes the projection keeps (no
// group is copied), at most once per Config.CacheFor: scrapes in between get
// the same values. Only the oldest Config.MaxGroups groups get series of
// their own; the others are added up in series labelled
// stream_prefix="*", consumer_group="*" (no group can be named "*"), so a
// scrape has a bounded number of series whatever the number of groups.

// DefaultMaxGroups is how many groups get series of their own by default
// (--metrics-max-groups), and DefaultMaxShards how many of their shards
// (--metrics-max-shards): a scrape then has at most 100 x 19 per-group and
// 1024 x 4 per-shard series, whatever the number of groups and shards.
const (
	DefaultMaxGroups = 100
	DefaultMaxShards = 1024
)

// DefaultCacheFor is how long the per-group values of a scrape are reused.
const DefaultCacheFor = time.Second

// OtherLabel is the stream_prefix and consumer_group of the series that add
// up the groups beyond Config.MaxGroups, and the shard of their lag and
// pending (added up over every shard of those groups).
const OtherLabel = "*"

// groupSummary is what a scrape shows of one group.
type groupSummary struct {
	key                               projection.GroupKey
	epoch, assignmentEpoch, mv        int64
	shardCount, liveMembers, revoking int
	resharding                        bool
	reshardingSince                   time.Time
	barriers                          int
	oldestBarrier                     time.Time
	autoscaling                       bool
	policy                            *events.AutoscalingConfigured // a copy; nil without a policy
	recommended                       int
	hasRecommendation                 bool
	samples                           int
	correction                        bool
}

// summaryCache is the last per-group read and when it was taken.
type summaryCache struct {
	at   time.Time
	sums []groupSummary
}

// summaries returns the per-group values (cached for Config.CacheFor), in
// the groups' creation order.
func (m *Metrics) summaries(c *coordinator.Coordinator) []groupSummary {
	now := time.Now()
	m.cacheMu.Lock()
	defer m.cacheMu.Unlock()
	if m.cache.sums != nil && now.Sub(m.cache.at) < m.cfg.CacheFor {
		return m.cache.sums
	}
	sums := mapGroups(c.State(), func(k projection.GroupKey, g projection.ReadOnlyGroup) (groupSummary, bool) {
		s := groupSummary{
			key: k, epoch: g.GroupEpoch(), assignmentEpoch: g.AssignmentEpoch(), mv: g.MetadataVersion(), shardCount: g.ShardCount(),
			liveMembers: g.LiveCount(), revoking: g.RevokingShardCount(), barriers: len(g.BarriersByShard()),
			autoscaling: g.AutoscalingEnabled(), oldestBarrier: g.OldestBarrier(),
		}
		if p, ok := g.AutoscalingPolicy(); ok {
			s.policy = &p
		}
		if mig := g.Active(); mig.Exists() {
			s.resharding, s.reshardingSince = true, mig.CreatedAt()
		}
		return s, true
	})
	// What memory (not the log) knows, outside the projection's lock.
	for i := range sums {
		s := &sums[i]
		if s.policy != nil && s.policy.Enabled {
			if ev, ok := c.LastEvaluation(s.key); ok {
				s.recommended, s.hasRecommendation = ev.Verdict.Recommended, true
			}
			s.samples = c.LoadSamples(s.key)
		}
		s.correction = c.CorrectionOpen(s.key)
	}
	m.cache = summaryCache{at: now, sums: sums}
	return sums
}

// bounded reports whether the i-th group (creation order) has series of its
// own.
func (m *Metrics) bounded(i int) bool { return m.cfg.MaxGroups <= 0 || i < m.cfg.MaxGroups }
