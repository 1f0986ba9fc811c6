package coordinator

import (
	"time"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Config holds the coordinator's tunables. Zero values take the defaults below.
type Config struct {
	HeartbeatInterval    time.Duration // 3s: heartbeatIntervalMs in responses
	MemberLease          time.Duration // 15s
	RebalanceTimeout     time.Duration // 60s
	TickInterval         time.Duration // 1s: expiry, timeouts, resharding progress
	StaleMemberRetention time.Duration // 10m: pruning of terminal members (<0 disables)
	DefaultShardCount    int           // 12
	MaxShardCount        int           // 1024
	// MaxMembersPerGroup bounds a group's member records (4096): a join into a
	// full group first prunes terminal records, then is refused (ErrGroupFull).
	MaxMembersPerGroup int
	// MaxGroups bounds the consumer groups the coordinator manages (1024): a
	// create or a registration by heartbeat past it is refused
	// (ErrGroupLimit). MaxTotalShards bounds the shards of every group and
	// of every stream without groups, added up (65536; ErrShardLimit).
	MaxGroups      int
	MaxTotalShards int
	// MemberChurnPerMinute is the budget of joins and leaves per principal
	// and group (DefaultMemberChurnPerMinute; <0: none): a join or leave beyond
	// it is refused (ErrRateLimited, with when to retry) and appends nothing.
	MemberChurnPerMinute int
	// Quotas per principal and per stream prefix (quota.go; the Default*
	// constants there; <0: off): groups a principal created or registered
	// and their shards, groups and shards of a prefix, member records that
	// take part per principal, and joins and leaves per principal across
	// its groups a minute.
	MaxGroupsPerPrincipal   int
	MaxShardsPerPrincipal   int
	MaxGroupsPerPrefix      int
	MaxShardsPerPrefix      int
	MaxMembersPerPrincipal  int
	PrincipalChurnPerMinute int
	// EmptyGroupRetention is how long a group that registered itself by a
	// member's first heartbeat may have no live member before it is
	// removed with its consumer groups (7 days; <0: never; expiry.go).
	EmptyGroupRetention time.Duration
	// RejectionsPerMinute is how many refused admin commands are recorded
	// (command.rejected) per principal and minute (DefaultRejectionsPerMinute;
	// <0: every one); the next record counts those that were not.
	RejectionsPerMinute int
	// ShardCheckInterval is how often the leader checks that Redis still has
	// every routed shard stream and consumer group, and recreates what it lost
	// (10s; <0 disables; repair.go).
	ShardCheckInterval time.Duration
	// BarrierCheckInterval is how often the leader reads Redis for the
	// barriers of ordered groups that wait (100ms; only groups with a
	// waiting barrier are read; ordering.go).
	BarrierCheckInterval time.Duration
	// AutoscaleInterval is how often the leader samples the shards of
	// autoscaled groups and evaluates their policies (TickInterval).
	AutoscaleInterval time.Duration
	// AfterEvaluate, if set, is called with every autoscaling evaluation
	// (metrics).
	AfterEvaluate func(k projection.GroupKey, v commands.Verdict, outcome string)
	// DisableProvisioning turns off stream and consumer-group creation (on by default).
	DisableProvisioning bool
	// KeepRetiredStreams keeps removed shard streams after a resharding finishes
	// instead of deleting them.
	KeepRetiredStreams bool
	SnapshotEvery      int // events between snapshots (10000); <0 disables
	// SnapshotMinInterval spaces periodic snapshots in time (30s; <0: no minimum).
	SnapshotMinInterval time.Duration
	MaxBatch            int // decisions folded into one append (256)
	CoordinatorID       string
	// Lease, if set, makes this coordinator one replica of several on the log:
	// it decides only while it holds the leader lease (see leader.go). The log
	// given to New must then be fenced by the same lease. nil: the only writer.
	Lease LeaderLease
	// LeaseTTL is how long a lease lasts without renewal (5s); it is renewed
	// every LeaseTTL/3.
	LeaseTTL time.Duration
	Logger   zerolog.Logger
	// AfterAppend, if set, is called with every appended record (metrics, test hooks).
	AfterAppend func(rec events.Record)
	// SnapshotKeep is how many snapshots the store keeps (2); start-up falls
	// back to an older one when the newest cannot be restored.
	SnapshotKeep int
	// TrimLog trims the log behind the oldest kept snapshot after each snapshot,
	// archiving its resharding and admin history first (trim.go).
	TrimLog bool
	// Trimmer trims the log and reads its archive (the unfenced redisstore.Log);
	// nil: the log is never trimmed and has no archive.
	Trimmer LogTrimmer
	// MaxHeartbeatHold bounds how long a heartbeat that asks to be held is
	// held (30s; never more than half the member lease: hold.go).
	MaxHeartbeatHold time.Duration
	// MaxHeldHeartbeats bounds the heartbeats held at once (10000), and
	// MaxHeldHeartbeatsPerPrincipal those of one principal (2500;
	// anonymous members count as one principal); past either a heartbeat
	// is answered at once. Negative: no heartbeat is held.
	MaxHeldHeartbeats             int
	MaxHeldHeartbeatsPerPrincipal int
	// HeartbeatDropGrace is how long a member whose held heartbeat's
	// connection closed without an answer has to heartbeat again before it
	// is expired (1s; negative: the lease alone applies).
	HeartbeatDropGrace time.Duration
	// RedisGuard, if set, tells whether Redis can evict the log (guard.go);
	// GuardInterval is how often it is asked and the log is checked for a
	// loss (5s; <0: never). AllowEviction accepts an evicting policy
	// (logged) instead of refusing every decision that would append.
	RedisGuard    RedisGuard
	GuardInterval time.Duration
	AllowEviction bool
	// LogReplicas is how many replicas acknowledge every append before a
	// decision is answered (the log given to New waits for them): a failover
	// that loses only entries after the last one they acknowledged lost no
	// answered decision, and the projection reloads from the log instead of
	// holding (guard.go).
	LogReplicas int
}

func (c *Config) setDefaults() {
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 3 * time.Second
	}
	if c.MemberLease <= 0 {
		c.MemberLease = 15 * time.Second
	}
	if c.RebalanceTimeout <= 0 {
		c.RebalanceTimeout = 60 * time.Second
	}
	if c.TickInterval <= 0 {
		c.TickInterval = time.Second
	}
	if c.StaleMemberRetention == 0 {
		c.StaleMemberRetention = 10 * time.Minute
	}
	if c.DefaultShardCount <= 0 {
		c.DefaultShardCount = 12
	}
	if c.MaxShardCount <= 0 {
		c.MaxShardCount = 1024
	}
	// What the API accepts, every fold must accept (events/bounds.go).
	c.MaxShardCount = min(c.MaxShardCount, events.MaxShardCount)
	if c.MaxMembersPerGroup <= 0 {
		c.MaxMembersPerGroup = 4096
	}
	if c.MaxGroups <= 0 {
		c.MaxGroups = 1024
	}
	if c.MaxTotalShards <= 0 {
		c.MaxTotalShards = 65536
	}
	if c.MemberChurnPerMinute == 0 {
		c.MemberChurnPerMinute = commands.DefaultMemberChurnPerMinute
	}
	if c.RejectionsPerMinute == 0 {
		c.RejectionsPerMinute = commands.DefaultRejectionsPerMinute
	}
	commands.DefaultTo(&c.MaxGroupsPerPrincipal, commands.DefaultMaxGroupsPerPrincipal)
	commands.DefaultTo(&c.MaxShardsPerPrincipal, commands.DefaultMaxShardsPerPrincipal)
	commands.DefaultTo(&c.MaxGroupsPerPrefix, commands.DefaultMaxGroupsPerPrefix)
	commands.DefaultTo(&c.MaxShardsPerPrefix, commands.DefaultMaxShardsPerPrefix)
	commands.DefaultTo(&c.MaxMembersPerPrincipal, commands.DefaultMaxMembersPerPrincipal)
	commands.DefaultTo(&c.PrincipalChurnPerMinute, commands.DefaultPrincipalChurnPerMinute)
	if c.EmptyGroupRetention == 0 {
		c.EmptyGroupRetention = commands.DefaultEmptyGroupRetention
	}
	if c.ShardCheckInterval == 0 {
		c.ShardCheckInterval = 10 * time.Second
	}
	if c.AutoscaleInterval <= 0 {
		c.AutoscaleInterval = c.TickInterval
	}
	if c.BarrierCheckInterval <= 0 {
		c.BarrierCheckInterval = 100 * time.Millisecond
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = 10000
	}
	if c.SnapshotMinInterval == 0 {
		c.SnapshotMinInterval = 30 * time.Second
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 256
	}
	if c.CoordinatorID == "" {
		c.CoordinatorID = "local-coordinator"
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 5 * time.Second
	}
	if c.SnapshotKeep <= 0 {
		c.SnapshotKeep = 2
	}
	if c.MaxHeartbeatHold <= 0 {
		c.MaxHeartbeatHold = DefaultMaxHeartbeatHold
	}
	if c.MaxHeldHeartbeats == 0 {
		c.MaxHeldHeartbeats = DefaultMaxHeldHeartbeats
	}
	if c.MaxHeldHeartbeatsPerPrincipal == 0 {
		c.MaxHeldHeartbeatsPerPrincipal = DefaultMaxHeldHeartbeatsPerPrincipal
	}
	if c.HeartbeatDropGrace == 0 {
		c.HeartbeatDropGrace = DefaultHeartbeatDropGrace
	}
	if c.GuardInterval == 0 {
		c.GuardInterval = 5 * time.Second
	}
}

// Defaults of held heartbeats (Config).
const (
	DefaultMaxHeartbeatHold              = 30 * time.Second
	DefaultMaxHeldHeartbeats             = 10000
	DefaultMaxHeldHeartbeatsPerPrincipal = 2500
	DefaultHeartbeatDropGrace            = time.Second
)
