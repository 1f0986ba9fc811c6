package commands

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

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
	AfterEvaluate func(k projection.GroupKey, v Verdict, outcome string)
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
	if c.MaxMembersPerGroup <= 0 {
		c.MaxMembersPerGroup = 4096
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
}

// Coordinator wires the parts of the coordinator together and is what the
// HTTP server calls:
//   - the decider (decider.go): the single writer, decisions, group commit;
//   - the reconciler (reconciler.go, repair.go): every side effect on shard
//     streams and every Redis read a decision needs, outside the writer;
//   - the replica (replica.go): load, follow, snapshots, trimming;
//   - the runtime (runtime.go): what lives only in memory (leases, progress,
//     correction rounds, the latest Redis evidence);
//   - the leadership (leader.go): the leader lease among --ha replicas.
//
// The public methods that serve a command (CreateGroup, Scale, Rollback, ...)
// gather the evidence the command needs and submit its decision.
type Coordinator struct {
	cfg    Config
	log    events.Log
	shards ShardStore
	snaps  SnapshotStore
	clock  Clock
	state  *projection.State
	rt     *runtimeState
	dec    *decider
	rep    *replica
	rec    *reconciler
	lead   leadership

	stop     chan struct{}
	wg       sync.WaitGroup
	writerWG sync.WaitGroup // the writer alone, so Close can hand over before the other loops end
	ready    atomic.Bool
	healthy  atomic.Bool
	closing  atomic.Bool
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
	c := &Coordinator{
		cfg: cfg, log: log, shards: shards, snaps: snaps, clock: clock,
		state: projection.New(),
		rt:    newRuntimeState(),
		stop:  make(chan struct{}),
	}
	c.dec = newDecider(c)
	c.rep = &replica{c: c}
	c.rec = newReconciler(c)
	return c
}

// Config returns the effective configuration.
func (c *Coordinator) Config() Config { return c.cfg }

// State is the projection (read through its copying methods).
func (c *Coordinator) State() *projection.State { return c.state }

// Log is the event log.
func (c *Coordinator) Log() events.Log { return c.log }

// Ready reports whether the coordinator loaded the log and can append.
func (c *Coordinator) Ready() bool { return c.ready.Load() && c.healthy.Load() && !c.closing.Load() }

// Healthy reports whether the last log operation succeeded.
func (c *Coordinator) Healthy() bool { return c.healthy.Load() }

// Conflicts is the number of compare-and-append conflicts seen.
func (c *Coordinator) Conflicts() int64 { return c.dec.conflicts.Load() }

// Run starts the writer, the maintenance ticker, the reconciler, the shard
// check and the log follower. It returns at once; Close stops them.
func (c *Coordinator) Run() {
	c.wg.Add(7)
	c.writerWG.Add(1)
	go func() { defer c.wg.Done(); defer c.writerWG.Done(); c.dec.run() }()
	// The leader's loops. Maintenance and the reconciler run apart, so a slow
	// Redis never delays expiry; barriers are checked more often than the
	// rest of a resharding (members hold entries back until their release).
	go func() { defer c.wg.Done(); c.leaderLoop(c.cfg.TickInterval, c.maintain) }()
	go func() { defer c.wg.Done(); c.leaderLoop(c.cfg.TickInterval, c.rec.pass) }()
	go func() { defer c.wg.Done(); c.leaderLoop(c.cfg.ShardCheckInterval, c.repairShards) }()
	go func() { defer c.wg.Done(); c.leaderLoop(c.cfg.BarrierCheckInterval, c.rec.proveBarriers) }()
	go func() { defer c.wg.Done(); c.leaderLoop(c.cfg.AutoscaleInterval, c.rec.autoscale) }()
	go func() { defer c.wg.Done(); c.rep.follow() }()
	if c.cfg.Lease != nil {
		// One round before returning, so a replica that finds the lease free
		// leads by the time its first request arrives.
		c.electOnce(c.cfg.LeaseTTL / 3)
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.elect() }()
	}
}

// leaderLoop calls fn every interval while this replica is ready and leads,
// until Close (never for a non-positive interval).
func (c *Coordinator) leaderLoop(interval time.Duration, fn func(ctx context.Context)) {
	if interval <= 0 {
		return
	}
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-tk.C:
			if c.ready.Load() && c.IsLeader() {
				fn(context.Background())
			}
		}
	}
}

// Close stops accepting decisions, lets the one in progress finish, writes a
// snapshot (a leader or the only writer) and stops the background loops; a
// leader then releases its lease so a follower takes over at once.
func (c *Coordinator) Close() {
	if c.closing.Swap(true) {
		return
	}
	close(c.stop)
	// Once the writer finished the batch in progress nothing more is decided:
	// snapshot and hand the lease over before waiting for the other loops (the
	// follower's blocking read may take a second).
	c.writerWG.Wait()
	if c.IsLeader() {
		c.rep.saveSnapshot()
	}
	c.releaseLease()
	c.wg.Wait()
}

func (c *Coordinator) now() time.Time { return time.Unix(0, c.clock.Now().UnixNano()).UTC() }
