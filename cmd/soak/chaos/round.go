package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// Options configure a Round.
type Options struct {
	// Coordinator is the coordinator process (or a ReplicaSet of them),
	// running; the round kills and restarts it.
	Coordinator Process
	// RedisURL is the Redis the coordinator and everybody else use.
	RedisURL string
	// RestartRedis restarts Redis (with persistence); nil: no Redis faults.
	RestartRedis func() error
	// MemberCommand returns a command that runs MemberProcessMain; nil: no
	// member process (only the in-process runtime).
	MemberCommand func() *exec.Cmd
	// MemberStderr receives the member processes' logs (default: discarded).
	MemberStderr io.Writer
	// Rand draws every random choice (seed it to replay a run's choices).
	Rand *rand.Rand
	// Logf narrates (default: silent). Called from the round's goroutine only.
	Logf func(format string, args ...any)

	Prefix, Group string
	InitialShards int

	// InProcessConcurrency and ProcessConcurrency are the logical members of
	// the in-process runtime (base "a") and of the member process (base "sub").
	InProcessConcurrency, ProcessConcurrency int
	// Producers publish Batch messages every Every each.
	Producers int
	Batch     int
	Every     time.Duration

	// Downtime bounds how long a killed coordinator stays down, [min, max).
	DowntimeMin, DowntimeMax time.Duration
	// StepTimeout bounds each resharding, and the final waits.
	StepTimeout time.Duration
}

func (o *Options) setDefaults() {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.MemberStderr == nil {
		o.MemberStderr = io.Discard
	}
	if o.Rand == nil {
		o.Rand = rand.New(rand.NewSource(1))
	}
	if o.InitialShards == 0 {
		o.InitialShards = 4
	}
	if o.InProcessConcurrency == 0 {
		o.InProcessConcurrency = 3
	}
	if o.ProcessConcurrency == 0 {
		o.ProcessConcurrency = 2
	}
	if o.Producers == 0 {
		o.Producers = 2
	}
	if o.Batch == 0 {
		o.Batch = 5
	}
	if o.Every == 0 {
		o.Every = 25 * time.Millisecond
	}
	if o.DowntimeMax == 0 {
		o.DowntimeMin, o.DowntimeMax = 200*time.Millisecond, 2500*time.Millisecond
	}
	if o.StepTimeout == 0 {
		o.StepTimeout = 60 * time.Second
	}
}

// Member leases: the coordinator expires a member after 2s (CoordinatorTimings);
// members stop reading after 1.5s without an answered heartbeat.
const memberLease = 1500 * time.Millisecond

// Round is one group under fault injection: producers, an in-process member
// runtime, a member process, and the operations and faults applied to it.
// Its methods are called from one goroutine.
type Round struct {
	o      Options
	key    projection.GroupKey
	rdb    *redis.Client // producers and checks
	mrdb   *redis.Client // in-process members
	admin  *client.Client
	rec    *Recorder
	load   *load
	inproc *member.Runtime
	proc   *MemberProcess
	procN  int
	start  time.Time
	// crashedBeforeKill counts crash-hook exits KillCoordinator found (and
	// restarted) before its kill.
	crashedBeforeKill int

	shards    int // shard count after the last finished resharding
	maxShards int // highest shard count ever (streams up to it must be retired)
	// rejoin holds the members of a killed process: the group is not stable
	// until each is live with a heartbeat accepted after rejoinAfter (a
	// member that held shards rejoins with a new epoch once the old one
	// expired; one that held none is taken back as a replay of its join).
	rejoin      map[string]bool
	rejoinAfter time.Time

	// Report is this round's report.
	Report *Report
}

// NewRound creates the group, starts the members and the producers, and
// waits until the group is STABLE.
func NewRound(ctx context.Context, o Options) (*Round, error) {
	o.setDefaults()
	r := &Round{o: o, key: projection.GroupKey{StreamPrefix: o.Prefix, ConsumerGroup: o.Group}, rec: NewRecorder(),
		Report: NewReport(), start: time.Now(), shards: o.InitialShards, maxShards: o.InitialShards}
	r.Report.Rounds = 1
	r.Report.Operations[OpRound] = 1
	opts, err := redis.ParseURL(o.RedisURL)
	if err != nil {
		return nil, err
	}
	opts.PoolSize = 32
	r.rdb = redis.NewClient(opts)
	mopts := *opts
	mopts.PoolSize = 64
	r.mrdb = redis.NewClient(&mopts)
	// Short timeouts: calls to a killed coordinator fail fast.
	r.admin = &client.Client{BaseURL: o.Coordinator.URL(), Credentials: adminCredentials,
		HTTPClient: &http.Client{Timeout: 3 * time.Second}}

	if err := r.retry(ctx, "create the group", func() error {
		_, err := r.admin.CreateGroup(ctx, o.Prefix, o.Group, o.InitialShards, "chaos")
		var apiErr *client.APIError
		if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusConflict {
			return nil // created by an attempt whose answer was lost
		}
		return err
	}); err != nil {
		r.Close()
		return nil, err
	}
	r.o.Logf("group %s/%s created with %d shards", o.Prefix, o.Group, o.InitialShards)
	r.inproc, err = StartMembers(context.Background(), r.spec("a", o.InProcessConcurrency, time.Millisecond), r.mrdb, r.rec, "inproc")
	if err != nil {
		r.Close()
		return nil, err
	}
	if o.MemberCommand != nil {
		if err := r.startProcess(); err != nil {
			r.Close()
			return nil, err
		}
	}
	if err := r.WaitStable(ctx); err != nil {
		r.Close()
		return nil, err
	}
	var producers []*producer.Producer
	for i := 0; i < o.Producers; i++ {
		p, err := producer.New(producer.Config{Coordinator: r.admin, Redis: r.rdb, StreamPrefix: o.Prefix, ConsumerGroup: o.Group,
			EventIDField: EventIDField, RefreshInterval: time.Second})
		if err != nil {
			r.Close()
			return nil, err
		}
		// Fetch the routing before publishing (the producer's start-up step, docs/sdk.md): a
		// producer that never had a routing cannot ride out an outage.
		if err := r.retry(ctx, "fetch the producer routing", func() error { return p.Refresh(ctx) }); err != nil {
			r.Close()
			return nil, err
		}
		producers = append(producers, p)
	}
	r.load = startLoad(producers, o.Batch, o.Every, o.Rand.Int63())
	r.o.Logf("%d producers publish %d messages every %s each; members %v", o.Producers, o.Batch, o.Every, r.memberIDs())
	return r, nil
}

// Shards is the shard count after the last finished resharding.
func (r *Round) Shards() int { return r.shards }

func (r *Round) spec(base string, n int, sleep time.Duration) MemberSpec {
	return MemberSpec{CoordinatorURL: r.o.Coordinator.URL(), RedisURL: r.o.RedisURL, Prefix: r.o.Prefix, Group: r.o.Group,
		Base: base, Concurrency: n, HandlerSleep: sleep, Lease: memberLease}
}

// startProcess starts (a new incarnation of) the member process. Its handler
// takes 5ms a message, so a batch of 10 is in flight for 50ms.
func (r *Round) startProcess() error {
	r.procN++
	p, err := StartMemberProcess(r.o.MemberCommand(), r.spec("sub", r.o.ProcessConcurrency, 5*time.Millisecond),
		"sub#"+strconv.Itoa(r.procN), r.rec, r.o.MemberStderr)
	if err != nil {
		return err
	}
	r.proc = p
	return nil
}

func (r *Round) memberIDs() []string {
	ids := r.inproc.MemberIDs()
	if r.proc != nil {
		ids = append(ids, r.proc.MemberIDs()...)
	}
	return ids
}

func (r *Round) violation(format string, args ...any) {
	v := fmt.Sprintf("%s: %s", r.o.Prefix, fmt.Sprintf(format, args...))
	r.Report.Violations = append(r.Report.Violations, v)
	r.o.Logf("VIOLATION %s", v)
}

// retry calls fn until it succeeds, for StepTimeout (the coordinator may be
// down or restarting meanwhile).
func (r *Round) retry(ctx context.Context, what string, fn func() error) error {
	deadline := time.Now().Add(r.o.StepTimeout)
	for {
		if _, err := r.watch(ctx); err != nil {
			return err
		}
		err := fn()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if err := Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// Sleep waits d, or until ctx ends (its error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (r *Round) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.o.Rand.Int63n(int64(hi-lo)))
}

// WaitStable waits until the group is STABLE with every member of the round
// reading and every shard read.
func (r *Round) WaitStable(ctx context.Context) error {
	want := r.memberIDs()
	sort.Strings(want)
	var last string
	deadline := time.Now().Add(r.o.StepTimeout)
	for {
		if _, err := r.watch(ctx); err != nil {
			return err
		}
		if len(r.rejoin) > 0 {
			if ms, err := r.admin.Members(ctx, r.o.Prefix, r.o.Group); err == nil {
				for _, m := range ms {
					if r.rejoin[m.MemberID] && m.LastHeartbeatAt.After(r.rejoinAfter) && (m.State == "ACTIVE" || m.State == "STARTING") {
						delete(r.rejoin, m.MemberID)
					}
				}
			}
			last = fmt.Sprintf("killed members not rejoined yet: %v", r.rejoin)
		}
		g, err := r.admin.Group(ctx, r.o.Prefix, r.o.Group)
		if err == nil && len(r.rejoin) == 0 {
			last = fmt.Sprintf("state %s, targets %v", g.State, g.TargetAssignmentSummary)
			if g.State == "STABLE" && len(g.TargetAssignmentSummary) == len(want) {
				a, err := r.admin.Assignments(ctx, r.o.Prefix, r.o.Group)
				if err == nil {
					total := 0
					for _, id := range want {
						total += len(a.CurrentAssignments[id])
					}
					if total == g.ShardCount {
						return nil
					}
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the group did not become STABLE with members %v in %s (last: %s)", want, r.o.StepTimeout, last)
		}
		if err := Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// KillCoordinator kills the coordinator with SIGKILL, keeps it down for a
// random time within the options' bounds, and restarts it.
func (r *Round) KillCoordinator(ctx context.Context, why string) error {
	// A coordinator that exited by itself since the last look (its crash hook
	// fired) is counted as that before anything is killed: the kill would
	// hide the exit.
	if restarted, err := r.watch(ctx); err != nil {
		return err
	} else if restarted {
		r.crashedBeforeKill++
	}
	down := r.between(r.o.DowntimeMin, r.o.DowntimeMax)
	r.o.Logf("kill -9 the coordinator %s; down for %s", why, down.Round(time.Millisecond))
	r.o.Coordinator.Kill()
	r.Report.Faults[FaultCoordinatorKill]++
	if err := Sleep(ctx, down); err != nil {
		return err
	}
	return r.o.Coordinator.Start(ctx)
}

// ArmCoordinatorCrash kills the coordinator (SIGKILL) and restarts it with the
// --crash-after-event hook armed: it exits with status 137 right after it
// appends the next event of this type (for a resharding event, with the
// request that caused it still unanswered). The round restarts it after that
// crash (see watch).
func (r *Round) ArmCoordinatorCrash(ctx context.Context, eventType string) error {
	r.o.Coordinator.ArmCrash(eventType)
	return r.KillCoordinator(ctx, "to arm its crash hook (--crash-after-event "+eventType+")")
}

// watch restarts a coordinator that exited by itself: expected after an armed
// crash hook (a fault), a violation otherwise. It reports whether it restarted one.
func (r *Round) watch(ctx context.Context) (bool, error) {
	exited, status, armed := r.o.Coordinator.Exited()
	if !exited {
		return false, nil
	}
	down := r.between(r.o.DowntimeMin, r.o.DowntimeMax)
	if armed != "" && strings.Contains(status, "137") {
		r.Report.Faults[FaultCrashHook]++
		r.o.Logf("the coordinator crashed right after appending %s (its crash hook); down for %s", armed, down.Round(time.Millisecond))
	} else {
		r.violation("the coordinator exited by itself (%s); its log:\n%s", status, r.o.Coordinator.Tail(30))
	}
	if err := Sleep(ctx, down); err != nil {
		return true, err
	}
	return true, r.o.Coordinator.Start(ctx)
}

// RestartRedis restarts Redis (SIGTERM, AOF fsynced, start again).
func (r *Round) RestartRedis(ctx context.Context) error {
	if r.o.RestartRedis == nil {
		return nil
	}
	r.o.Logf("restart redis")
	r.Report.Faults[FaultRedisRestart]++
	return r.o.RestartRedis()
}

// KillMemberProcess waits until the member process has entries in flight,
// kills it with SIGKILL, and restarts it (same member ids) after a while. It
// returns how many entries the killed process left pending. The process may
// ack its batch between the check and the kill (the window is a few
// milliseconds, wider on a loaded machine): then it is killed again once it
// reads again, up to killAttempts times.
func (r *Round) KillMemberProcess(ctx context.Context) (int64, error) {
	if r.proc == nil {
		return 0, nil
	}
	const killAttempts = 3
	for attempt := 1; ; attempt++ {
		orphaned, holding, err := r.killMemberProcessOnce(ctx)
		if err != nil || orphaned > 0 || holding == 0 || attempt == killAttempts {
			return orphaned, err
		}
		// Wait until the restarted process reads again before the next try.
		ids := r.proc.MemberIDs()
		deadline := time.Now().Add(15 * time.Second)
		for r.holdingOf(ctx, ids) == 0 && time.Now().Before(deadline) {
			if err := Sleep(ctx, 20*time.Millisecond); err != nil {
				return 0, err
			}
		}
	}
}

// holdingOf is how many shards the coordinator records ids reading.
func (r *Round) holdingOf(ctx context.Context, ids []string) int {
	holding := 0
	if a, err := r.admin.Assignments(ctx, r.o.Prefix, r.o.Group); err == nil {
		for _, id := range ids {
			holding += len(a.CurrentAssignments[id])
		}
	}
	return holding
}

// killMemberProcessOnce is one kill and restart of KillMemberProcess; it
// returns the entries left pending and how many shards the process read.
func (r *Round) killMemberProcessOnce(ctx context.Context) (int64, int, error) {
	ids := r.proc.MemberIDs()
	// Kill it mid-batch: when entries were delivered to it and not acked yet
	// (unless it reads no shard: more members than shards).
	holding := r.holdingOf(ctx, ids)
	deadline := time.Now().Add(10 * time.Second)
	for holding > 0 && r.pendingOf(ctx, ids) == 0 && time.Now().Before(deadline) {
		if err := Sleep(ctx, 2*time.Millisecond); err != nil {
			return 0, holding, err
		}
	}
	r.proc.Kill()
	r.Report.Faults[FaultMemberKill]++
	orphaned := r.pendingOf(ctx, ids)
	r.Report.OrphanedAtKill += orphaned
	down := r.between(300*time.Millisecond, 1500*time.Millisecond)
	r.o.Logf("kill -9 member process %s (%v, reading %d shards) with %d entries in flight; restart in %s", r.proc.Proc, ids, holding, orphaned, down.Round(time.Millisecond))
	if err := Sleep(ctx, down); err != nil {
		return orphaned, holding, err
	}
	r.rejoin, r.rejoinAfter = map[string]bool{}, time.Now()
	for _, id := range ids {
		r.rejoin[id] = true
	}
	return orphaned, holding, r.startProcess()
}

// pendingOf sums the entries pending for these consumers on every shard stream.
func (r *Round) pendingOf(ctx context.Context, consumers []string) int64 {
	cmds := make([]*redis.XPendingCmd, r.maxShards)
	_, _ = r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range cmds {
			cmds[i] = p.XPending(ctx, routing.StreamKey(r.o.Prefix, i), r.o.Group)
		}
		return nil
	})
	var n int64
	for _, c := range cmds {
		p, err := c.Result()
		if err != nil {
			continue
		}
		for _, id := range consumers {
			n += p.Consumers[id]
		}
	}
	return n
}

// reshardings lists the group's reshardings, oldest first.
func (r *Round) reshardings(ctx context.Context) ([]client.Migration, error) {
	list, err := r.admin.Migrations(ctx, r.o.Prefix, r.o.Group)
	if err != nil {
		return nil, err
	}
	return list.Migrations, nil
}

// scaleRequest sends a scale request and, when it is accepted, refreshes the
// producers' routing (the runbook step after a resharding).
func (r *Round) scaleRequest(ctx context.Context, target int) error {
	_, err := r.admin.Scale(ctx, r.o.Prefix, r.o.Group, target, "chaos", fmt.Sprintf("chaos scale to %d", target))
	if err == nil {
		r.load.refresh(ctx)
	}
	return err
}

// ScalePlan is one resharding and the faults injected while it runs.
type ScalePlan struct {
	Target int
	// Kills is how many times the coordinator is killed with SIGKILL at random
	// moments of the resharding (the first may fall while the request is in flight).
	Kills int
	// RedisRestarts is how many times Redis is restarted during it.
	RedisRestarts int
	// Rollback, if set, asks for a rollback with this policy ("metadata" or
	// "drain") as soon as the resharding is seen unfinished.
	Rollback string
}

// Scale reshards as planned, re-sends the request if a crash swallowed it,
// and waits until the resharding is finished (DEPRECATED or ROLLED_BACK,
// removed streams retired). It returns how many coordinator crashes fell
// while the resharding was unfinished.
func (r *Round) Scale(ctx context.Context, plan ScalePlan) (int, error) {
	from, target := r.shards, plan.Target
	op := OpScaleOut
	if target < from {
		op = OpScaleIn
	}
	r.Report.Operations[op]++
	var before []client.Migration
	if err := r.retry(ctx, "list reshardings", func() (err error) { before, err = r.reshardings(ctx); return err }); err != nil {
		return 0, err
	}
	n0 := len(before)
	faults := make([]string, 0, plan.Kills+plan.RedisRestarts)
	for i := 0; i < plan.Kills; i++ {
		faults = append(faults, FaultCoordinatorKill)
	}
	for i := 0; i < plan.RedisRestarts; i++ {
		faults = append(faults, FaultRedisRestart)
	}
	r.o.Rand.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
	desc := fmt.Sprintf("%s %d -> %d", op, from, target)
	r.o.Logf("%s (faults planned: %v%s)", desc, faults, map[bool]string{true: "; rollback " + plan.Rollback, false: ""}[plan.Rollback != ""])
	send := func() chan error {
		ch := make(chan error, 1)
		go func() { ch <- r.scaleRequest(ctx, target) }()
		return ch
	}
	answer, sentAt := send(), time.Now()
	var answered bool
	var ours *client.Migration
	during, rolledBack := 0, false
	nextFault := time.Now().Add(r.between(0, 60*time.Millisecond))
	deadline := time.Now().Add(r.o.StepTimeout)
	for {
		if !answered {
			select {
			case err := <-answer:
				answered = true
				if err != nil {
					r.o.Logf("scale request answered: %v", err)
				}
			default:
			}
		}
		finished := ours != nil && ours.Phase == "done"
		restarted, err := r.watch(ctx)
		if err != nil {
			return during, err
		}
		if restarted && !finished {
			during++
			r.Report.KillsDuringResharding++
		}
		if len(faults) > 0 && !time.Now().Before(nextFault) {
			if finished {
				r.o.Logf("the resharding finished before faults %v", faults)
				faults = nil
			} else {
				phase := "request in flight"
				if answered {
					phase = "request answered, resharding state not read yet"
				}
				if ours != nil {
					phase = ours.State + "/" + ours.Phase
				}
				var err error
				switch faults[0] {
				case FaultCoordinatorKill:
					crashed := r.crashedBeforeKill
					err = r.KillCoordinator(ctx, fmt.Sprintf("during %s (%s)", desc, phase))
					during += 1 + r.crashedBeforeKill - crashed
					r.Report.KillsDuringResharding += 1 + r.crashedBeforeKill - crashed
				case FaultRedisRestart:
					r.o.Logf("during %s (%s):", desc, phase)
					err = r.RestartRedis(ctx)
				}
				if err != nil {
					return during, err
				}
				faults = faults[1:]
				nextFault = time.Now().Add(r.between(100*time.Millisecond, 600*time.Millisecond))
				continue
			}
		}
		if rs, err := r.reshardings(ctx); err == nil {
			if len(rs) > n0 {
				m := rs[n0]
				ours = &m
			} else if answered && time.Since(sentAt) > time.Second {
				// The coordinator is up and knows nothing of the request: a
				// crash swallowed it. Send it again (409/422 would be fine).
				r.Report.Operations[OpResent]++
				r.o.Logf("the scale request was lost in a crash; sending it again")
				answer, sentAt, answered = send(), time.Now(), false
			}
		}
		if ours != nil && ours.ToShardCount != target {
			return during, fmt.Errorf("resharding %s goes %d -> %d, want -> %d", ours.ReshardingID, ours.FromShardCount, ours.ToShardCount, target)
		}
		if plan.Rollback != "" && !rolledBack && ours != nil && ours.State != "DEPRECATED" && ours.State != "ROLLED_BACK" {
			rolledBack = true
			r.Report.Operations[OpRollback]++
			err := r.admin.Do(ctx, http.MethodPost, client.GroupPath(r.o.Prefix, r.o.Group)+"/migrations/"+ours.ReshardingID+"/rollback",
				wire.RollbackRequest{RequestedBy: "chaos", Reason: "chaos rollback", Policy: plan.Rollback}, nil)
			r.o.Logf("rollback (%s) of %s in %s/%s: %s", plan.Rollback, ours.ReshardingID, ours.State, ours.Phase, errOrOK(err))
			if err == nil {
				r.load.refresh(ctx)
			}
		}
		if ours != nil && ours.Phase == "done" && answered {
			if len(faults) > 0 {
				r.o.Logf("the resharding finished before the faults %v", faults)
			}
			break
		}
		if time.Now().After(deadline) {
			last := "not in the log"
			if ours != nil {
				last = ours.State + "/" + ours.Phase
				// Its streams count for the final checks whatever state it is in.
				r.maxShards = max(r.maxShards, ours.ToShardCount)
			}
			r.violation("%s did not finish in %s (last seen: %s)", desc, r.o.StepTimeout, last)
			return during, nil
		}
		if err := Sleep(ctx, 20*time.Millisecond); err != nil {
			return during, err
		}
	}
	r.shards = ours.ToShardCount
	if ours.State == "ROLLED_BACK" {
		r.shards = ours.FromShardCount
	}
	r.maxShards = max(r.maxShards, ours.ToShardCount)
	r.o.Logf("resharding %s: %s (shard count %d)", ours.ReshardingID, ours.State, r.shards)
	return during, nil
}

func errOrOK(err error) string {
	if err == nil {
		return "accepted"
	}
	return err.Error()
}

func (r *Round) stopMembers() {
	if r.inproc != nil {
		_ = r.inproc.Close()
		r.inproc = nil
	}
	if r.proc != nil {
		r.proc.Stop(15 * time.Second)
		r.proc = nil
	}
}

// Close stops whatever is still running (after a failure; Finish stops it all).
func (r *Round) Close() {
	if r.load != nil {
		r.load.halt()
	}
	r.stopMembers()
	_ = r.rdb.Close()
	_ = r.mrdb.Close()
}
