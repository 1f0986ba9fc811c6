package coordinator

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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

// Coordinator wires the parts of the coordinator and runs their loops. Each
// part is built from the pieces it uses and none holds the Coordinator:
//   - the Service (service.go): the commands callers send (httpapi.Commands),
//     each gathering its evidence and submitting its decision;
//   - the decider (decider.go): the single writer: decisions, group commit,
//     catch-up;
//   - the rules (heartbeat.go, maintenance.go, resharding.go, ordering.go,
//     autoscale.go, admin.go): the decisions themselves, functions of a tx;
//   - the reconciler (reconciler.go, repair.go, ordering.go): every side
//     effect on shard streams and every Redis read a decision needs, outside
//     the writer; the autoscaler (autoscale.go) and the maintenance tick
//     (maintenance.go) beside it;
//   - the Replica (replica.go): load, follow, snapshots, trimming, and what
//     every replica can answer (httpapi.Reader);
//   - the runtime table (runtime.go, rtoverlay.go) and the evidence table
//     (evidence.go): what lives only in memory (httpapi.Runtime, as
//     RuntimeView);
//   - the Leadership (leader.go): the leader lease among --ha replicas
//     (httpapi.Leadership).
//
// The parts that httpapi's interfaces name are embedded, so their methods
// are the Coordinator's too; cmd/coordinator hands the parts themselves to
// the HTTP server.
type Coordinator struct {
	*Service
	*Replica
	*Leadership
	RuntimeView

	cfg   Config
	life  *lifecycle
	dec   *decider
	rec   *reconciler
	auto  *autoscaler
	maint *maintenance
	// rearm re-arms every member's lease (a new term, a load).
	rearm func()

	wg       sync.WaitGroup
	writerWG sync.WaitGroup // the writer alone, so Close can hand over before the other loops end
}

// lifecycle is the state every part checks before it acts: loaded (ready),
// the last log operation succeeded (healthy), shutting down (closing, stop).
type lifecycle struct {
	// ctx ends at Close (cancel); stop is its Done channel. The leader's
	// loops run under ctx, so Close does not wait for a pass over every
	// group to finish.
	ctx     context.Context
	cancel  context.CancelFunc
	stop    <-chan struct{}
	ready   atomic.Bool
	healthy atomic.Bool
	closing atomic.Bool
	// corrupt is set while the log or the snapshot start-up depends on
	// cannot be decoded (nil: it can).
	corrupt atomic.Pointer[commands.Error]
	// lost is set while the log no longer holds what the projection
	// applied, evicting while Redis may evict the log (guard.go); safety
	// is the guard's last reading of Redis; the losses found, by cause.
	lost          atomic.Pointer[LogLoss]
	evicting      atomic.Pointer[commands.Error]
	safety        atomic.Pointer[RedisSafety]
	lossesGone    atomic.Int64
	lossesEntries atomic.Int64
}

// markCorrupt records that the state cannot be built without guessing: err
// names what could not be decoded (an *events.DecodeError names the
// entry). It reports whether err was such an error.
func (l *lifecycle) markCorrupt(err error) bool {
	var de *events.DecodeError
	if !errors.As(err, &de) {
		return false
	}
	l.corrupt.Store(commands.WithMsg(commands.ErrMetadataCorrupt, "%s: log entry %s cannot be decoded (%v); nothing is answered from a state built around it (docs/operations.md, Runbook: a corrupt log)", commands.ErrMetadataCorrupt.Message, de.ID, de.Err))
	return true
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// New builds a coordinator. shards may be nil (no Redis for shard streams: creating
// groups then fails with REDIS_NOT_CONFIGURED unless provisioning is disabled);
// snaps may be nil; clock nil means the system clock.
func New(cfg Config, log events.Log, shards ShardStore, snaps SnapshotStore, clock Clock) *Coordinator {
	cfg.setDefaults()
	if clock == nil {
		clock = systemClock{}
	}
	now, timers := wallClock(clock), timerClock(clock)
	state := projection.New()
	life := &lifecycle{}
	life.ctx, life.cancel = context.WithCancel(context.Background())
	life.stop = life.ctx.Done()
	rules := commands.NewRules(policyOf(cfg, shards != nil))
	table := commands.NewRuntimeTable()
	holds := newWaiters(cfg.MaxHeldHeartbeats, cfg.MaxHeldHeartbeatsPerPrincipal)
	evidence := newEvidenceTable(shards != nil)
	rearm := func() {
		table.Rearm(state, timers(), cfg.MemberLease)
		evidence.reset()
	}
	rep := newReplica(replicaDeps{cfg: cfg, log: log, snaps: snaps, state: state, life: life, rearm: rearm, recent: &recentIDs{}})
	lead := newLeadership(leadershipDeps{lease: cfg.Lease, ttl: cfg.LeaseTTL, id: cfg.CoordinatorID, life: life, logger: cfg.Logger, position: state.LastID,
		steppedDown: func() { holds.releaseAll(false) }})
	dec := newDecider(deciderDeps{
		log: log, state: state, table: table, life: life, lead: lead, clock: clock, rules: rules, logger: cfg.Logger,
		maxBatch: cfg.MaxBatch, snapshotEvery: cfg.SnapshotEvery, snapshotMinInterval: cfg.SnapshotMinInterval,
		afterAppend: cfg.AfterAppend, snapshot: rep.saveCapture, reload: rep.reload, fold: rep.foldLog,
		reloadRestored: rep.reloadFromSnapshot, noteApplied: rep.noteAppended, holds: holds,
	})
	locks := newPrefixLocks()
	rec := newReconciler(reconcilerDeps{
		shards: shards, state: state, evidence: evidence, dec: dec, locks: locks, rules: rules,
		ready: life, lead: lead, now: now, logger: cfg.Logger,
	})
	svc := newService(serviceDeps{
		rules: rules, state: state, dec: dec, rec: rec, locks: locks, table: table, evidence: evidence,
		lead: lead, life: life, now: now, timers: timers, logger: cfg.Logger, rejections: newRejectionLog(commands.PerMinute(cfg.RejectionsPerMinute)),
		restore: rep.restoreLog, holds: holds, hold: holdRules{maxBound: cfg.MaxHeartbeatHold, grace: cfg.HeartbeatDropGrace},
	})
	return &Coordinator{
		Service: svc, Replica: rep, Leadership: lead, RuntimeView: RuntimeView{table, evidence},
		cfg: cfg, life: life, dec: dec, rec: rec, rearm: rearm,
		auto: &autoscaler{sampler: shards, state: state, evidence: evidence, table: table, dec: dec, scale: svc.Scale,
			now: now, logger: cfg.Logger, afterEvaluate: cfg.AfterEvaluate},
		maint: &maintenance{state: state, table: table, evidence: evidence, dec: dec, rules: rules, now: now, timers: timers, logger: cfg.Logger},
	}
}

// Conflicts is the number of compare-and-append conflicts seen.
func (c *Coordinator) Conflicts() int64 { return c.dec.conflicts.Load() }

// Run starts the writer, the maintenance ticker, the reconciler, the shard
// check and the log follower. It returns at once; Close stops them.
func (c *Coordinator) Run() {
	c.wg.Add(8)
	c.writerWG.Add(1)
	go func() { defer c.wg.Done(); defer c.writerWG.Done(); c.dec.run() }()
	// The leader's loops. Maintenance and the reconciler run apart, so a slow
	// Redis never delays expiry; barriers are checked more often than the
	// rest of a resharding (members hold entries back until their release).
	go func() { defer c.wg.Done(); c.leaderLoop(c.cfg.TickInterval, c.maint.run) }()
	go func() { defer c.wg.Done(); c.leaderLoop(c.cfg.TickInterval, c.rec.pass) }()
	go func() {
		defer c.wg.Done()
		c.leaderLoop(c.cfg.ShardCheckInterval, func(ctx context.Context) { c.rec.repairShards(ctx) })
	}()
	go func() { defer c.wg.Done(); c.leaderLoop(c.cfg.BarrierCheckInterval, c.rec.proveBarriers) }()
	go func() { defer c.wg.Done(); c.leaderLoop(c.cfg.AutoscaleInterval, c.auto.run) }()
	go func() { defer c.wg.Done(); c.Replica.follow(c.dec.catchUpPast) }()
	go func() { defer c.wg.Done(); c.guard() }()
	if c.cfg.Lease != nil {
		// One round before returning, so a replica that finds the lease free
		// leads by the time its first request arrives.
		term := termStart{catchUp: c.dec.catchUpInWriter, backfill: c.Replica.backfillIndex, rearm: c.rearm, mark: c.dec.markTerm}
		c.Leadership.electOnce(c.cfg.LeaseTTL/3, term)
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.Leadership.elect(term) }()
	}
}

// Tick runs maintenance once and then one reconciler pass: member expiry,
// rebalance timeouts, overdue correction rounds, pruning, and the steps of a
// resharding that need no Redis; then resharding progress from Redis evidence
// (provisioning, drain checks, completion, retirement). A running coordinator
// does the two in separate loops, so a slow Redis never delays expiry;
// simulations call Tick with a virtual clock.
func (c *Coordinator) Tick(ctx context.Context) {
	c.maint.run(ctx)
	c.rec.proveBarriers(ctx)
	c.rec.pass(ctx)
}

// RepairShards runs the shard check once (tests call it directly) and
// returns how many shards it repaired (repair.go).
func (c *Coordinator) RepairShards(ctx context.Context) int { return c.rec.repairShards(ctx) }

// leaderLoop calls fn every interval while this replica is ready and leads,
// until Close (never for a non-positive interval). fn's context is cancelled
// by Close: a pass over every group stops between groups instead of holding
// Close (and the process's shutdown) until it ends.
func (c *Coordinator) leaderLoop(interval time.Duration, fn func(ctx context.Context)) {
	if interval <= 0 {
		return
	}
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for {
		select {
		case <-c.life.stop:
			return
		case <-tk.C:
			// Nothing is decided while the log is lost or Redis may evict
			// it: the loops would only be refused (and provision first).
			if c.life.ready.Load() && c.IsLeader() && c.life.refusal() == nil {
				fn(c.life.ctx)
			}
		}
	}
}

// Close stops accepting decisions, lets the one in progress finish, writes a
// snapshot (a leader or the only writer) and stops the background loops; a
// leader then releases its lease so a follower takes over at once.
func (c *Coordinator) Close() {
	if c.life.closing.Swap(true) {
		return
	}
	c.Service.holds.releaseAll(true) // held heartbeats are answered at once
	c.life.cancel()
	// Once the writer finished the batch in progress nothing more is decided:
	// snapshot and hand the lease over before waiting for the other loops (the
	// follower's blocking read may take a second).
	c.writerWG.Wait()
	if c.IsLeader() {
		c.Replica.saveSnapshot()
	}
	c.Leadership.release()
	c.wg.Wait()
}

// policyOf is what the rules take from the configuration; streams: a Redis
// holds the shard streams.
func policyOf(cfg Config, streams bool) commands.Policy {
	return commands.Policy{
		HeartbeatInterval: cfg.HeartbeatInterval, MemberLease: cfg.MemberLease, RebalanceTimeout: cfg.RebalanceTimeout,
		StaleMemberRetention: cfg.StaleMemberRetention, EmptyGroupRetention: cfg.EmptyGroupRetention,
		DefaultShardCount: cfg.DefaultShardCount, MaxShardCount: cfg.MaxShardCount,
		MaxMembersPerGroup: cfg.MaxMembersPerGroup, MaxGroups: cfg.MaxGroups, MaxTotalShards: cfg.MaxTotalShards,
		MemberChurnPerMinute:  cfg.MemberChurnPerMinute,
		MaxGroupsPerPrincipal: cfg.MaxGroupsPerPrincipal, MaxShardsPerPrincipal: cfg.MaxShardsPerPrincipal,
		MaxGroupsPerPrefix: cfg.MaxGroupsPerPrefix, MaxShardsPerPrefix: cfg.MaxShardsPerPrefix,
		MaxMembersPerPrincipal: cfg.MaxMembersPerPrincipal, PrincipalChurnPerMinute: cfg.PrincipalChurnPerMinute,
		Provisioning: !cfg.DisableProvisioning, Streams: streams, KeepRetiredStreams: cfg.KeepRetiredStreams,
	}
}
