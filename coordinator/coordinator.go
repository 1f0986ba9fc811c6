package coordinator

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Coordinator wires the parts of the coordinator and runs their loops. Each
// part is built from the pieces it uses and none holds the Coordinator:
//   - the Service (service.go): the commands callers send (httpapi.Commands),
//     each gathering its evidence and submitting its decision; the members'
//     heartbeats are answered by its heartbeats part (heartbeat.go, hold.go);
//   - the decider (decider.go): the single writer: decisions, group commit,
//     catch-up;
//   - the rules (heartbeat.go, maintenance.go, resharding.go, ordering.go,
//     autoscale.go, admin.go): the decisions themselves, functions of a tx;
//   - the reconciler (reconciler.go, repair.go, ordering.go): every side
//     effect on shard streams and every Redis read a decision needs, outside
//     the writer; the autoscaler (autoscale.go) and the maintenance tick
//     (maintenance.go) beside it;
//   - the Replica (replica.go): load, follow, snapshots, trimming, and what
//     every replica can answer (httpapi.Reader), done by its parts: the log
//     with its trim point (trimmedlog.go), the snapshots (snapshots.go), the
//     loader (loader.go) and the guard of the log (guard.go, restore.go);
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
	holds *waiters // the held heartbeats, answered at once by Close
	// rearm re-arms every member's lease (a new term, a load).
	rearm func()

	wg       sync.WaitGroup
	writerWG sync.WaitGroup // the writer alone, so Close can hand over before the other loops end
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
	rep := newReplica(replicaDeps{cfg: cfg, log: log, snaps: snaps, state: state, life: life, rearm: rearm})
	lead := newLeadership(leadershipDeps{lease: cfg.Lease, ttl: cfg.LeaseTTL, id: cfg.CoordinatorID, life: life, logger: cfg.Logger, position: state.LastID,
		steppedDown: func() { holds.releaseAll(false) }})
	dec := newDecider(deciderDeps{
		log: log, state: state, table: table, life: life, lead: lead, clock: clock, rules: rules, logger: cfg.Logger,
		maxBatch: cfg.MaxBatch, snapshotEvery: cfg.SnapshotEvery, snapshotMinInterval: cfg.SnapshotMinInterval,
		afterAppend: cfg.AfterAppend, snapshot: rep.snaps.save, reload: rep.watch.check, fold: rep.load.foldLog,
		reloadRestored: rep.load.reloadFromSnapshot, noteApplied: rep.watch.noteAppended, holds: holds,
	})
	locks := newPrefixLocks()
	rec := newReconciler(reconcilerDeps{
		shards: shards, state: state, evidence: evidence, dec: dec, locks: locks, rules: rules,
		ready: life, lead: lead, now: now, logger: cfg.Logger,
	})
	committed := committedState{state: state, table: table, rules: rules, now: now, timers: timers, logger: cfg.Logger}
	beats := &heartbeats{heartbeatDeps: heartbeatDeps{
		rules: rules, state: state, committed: committed, table: table, dec: dec, reg: rec, locks: locks,
		lead: lead, life: life, timers: timers, logger: cfg.Logger, holds: holds, hold: holdRules{maxBound: cfg.MaxHeartbeatHold, grace: cfg.HeartbeatDropGrace},
	}}
	svc := newService(serviceDeps{
		rules: rules, state: state, committed: committed, dec: dec, rec: rec, locks: locks, evidence: evidence,
		lead: lead, life: life, now: now, timers: timers, logger: cfg.Logger, rejections: newRejectionLog(commands.PerMinute(cfg.RejectionsPerMinute)),
		restore: rep.watch.restoreLog, beats: beats,
	})
	return &Coordinator{
		Service: svc, Replica: rep, Leadership: lead, RuntimeView: RuntimeView{table, evidence},
		cfg: cfg, life: life, dec: dec, rec: rec, holds: holds, rearm: rearm,
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
		term := termStart{catchUp: c.dec.catchUpInWriter, backfill: c.Replica.tl.backfillIndex, rearm: c.rearm, mark: c.dec.markTerm}
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
	c.holds.releaseAll(true) // held heartbeats are answered at once
	c.life.cancel()
	// Once the writer finished the batch in progress nothing more is decided:
	// snapshot and hand the lease over before waiting for the other loops (the
	// follower's blocking read may take a second).
	c.writerWG.Wait()
	if c.IsLeader() {
		c.Replica.SaveSnapshot()
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

// guard runs the guard every Config.GuardInterval until Close: the Redis
// check, then, once loaded, the log check in the writer.
func (c *Coordinator) guard() {
	if c.cfg.GuardInterval < 0 {
		return
	}
	tk := time.NewTicker(c.cfg.GuardInterval)
	defer tk.Stop()
	for {
		c.Replica.watch.checkRedis(c.life.ctx)
		if c.life.ready.Load() {
			ctx, cancel := context.WithTimeout(c.life.ctx, c.cfg.GuardInterval+5*time.Second)
			var cerr error
			err := c.dec.runInWriter(ctx, func() { cerr = c.dec.reload(ctx) })
			cancel()
			if err == nil && cerr != nil && !errors.Is(cerr, commands.ErrLogLost) {
				c.cfg.Logger.Debug().Err(cerr).Msg("guard: check the log")
			}
		}
		select {
		case <-c.life.stop:
			return
		case <-tk.C:
		}
	}
}
