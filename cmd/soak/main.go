// Command soak runs the chaos scenario (package cmd/soak/chaos) in a loop for
// --duration with seeded random faults, and prints a summary table:
// operations done, faults injected by kind, invariant violations (must be
// 0: exit status 1 otherwise), messages published / consumed / duplicated /
// lost.
//
// It starts its own redis-server (AOF on, restarted as a fault) and the
// coordinator binary (built into a temporary directory with go build, or
// --coordinator-bin), and runs rounds: each round creates a group, starts
// producers, an in-process member runtime and a member process (this program
// started again), applies random operations and faults (scale to a random
// shard count, rollbacks, coordinator kill -9, crashes right after a chosen
// event, member process kill -9 mid-batch, Redis restarts, some of them
// during a resharding), then stops producing and checks everything.
//
//	make soak                         # 5 minutes
//	go run ./cmd/soak --duration 2m --seed 42 -v
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/rscoord/rsc/cmd/soak/chaos"
	"github.com/rscoord/rsc/internal/procs"
)

func main() {
	if chaos.IsMemberProcess() {
		os.Exit(chaos.MemberProcessMain())
	}
	procs.Main(run)
}

type options struct {
	duration       time.Duration
	seed           int64
	coordinatorBin string
	verbose        bool
	keep           bool
	faults         map[string]bool
	replicas       int
}

// faultKinds are the values of --faults.
var faultKinds = []string{"coordinator", "crash", "member", "redis", "rollback"}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", 5*time.Minute, "how long to run rounds (the round in progress finishes)")
	fs.Int64Var(&o.seed, "seed", 0, "seed of every random choice (0: from the clock; printed, to replay a run's choices)")
	fs.StringVar(&o.coordinatorBin, "coordinator-bin", "", "coordinator `binary` (default: go build ./cmd/coordinator into a temporary directory, else bin/coordinator)")
	fs.BoolVar(&o.verbose, "v", false, "narrate every operation and fault")
	fs.IntVar(&o.replicas, "replicas", 1, "coordinator processes: 1 runs one; more run them with --ha on one log, and a coordinator kill kills the leader")
	fs.BoolVar(&o.keep, "keep", false, "keep the work directory (logs, Redis data) even when every check passed")
	faults := fs.String("faults", strings.Join(faultKinds, ","), "comma-separated `kinds` of faults to inject: coordinator (kill -9), crash (exit right after an event), member (member process kill -9), redis (restart with AOF), rollback")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.replicas < 1 {
		return o, fmt.Errorf("--replicas must be at least 1")
	}
	o.faults = map[string]bool{}
	for _, f := range strings.Split(*faults, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		if !slices.Contains(faultKinds, f) {
			return o, fmt.Errorf("--faults: unknown kind %q (kinds: %s)", f, strings.Join(faultKinds, ", "))
		}
		o.faults[f] = true
	}
	if o.seed == 0 {
		o.seed = time.Now().UnixNano()
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "soak:", err)
		return 2
	}
	dir, err := os.MkdirTemp("", "rsc-soak-")
	if err != nil {
		fmt.Fprintln(stderr, "soak:", err)
		return 2
	}
	s := &soak{o: o, out: stdout, dir: dir, start: time.Now(), total: chaos.NewReport(), rng: rand.New(rand.NewSource(o.seed))}
	err = s.run(ctx)
	s.cleanup()
	s.total.Elapsed = time.Since(s.start)
	fmt.Fprintf(stdout, "\nsoak summary (seed %d, %s):\n", o.seed, s.total.Elapsed.Round(time.Second))
	s.total.WriteTable(stdout)
	failed := err != nil || len(s.total.Violations) > 0
	if err != nil {
		fmt.Fprintln(stdout, "\nsoak: stopped:", err)
	}
	if failed || o.keep {
		fmt.Fprintf(stdout, "\nlogs kept in %s (coordinator.log, members.log, redis/redis.log)\n", dir)
	} else {
		_ = os.RemoveAll(dir)
	}
	if failed {
		fmt.Fprintln(stdout, "\nRESULT: FAIL")
		return 1
	}
	fmt.Fprintln(stdout, "\nRESULT: PASS (0 invariant violations)")
	return 0
}

// soak is one run: the processes it started and the rounds' reports.
type soak struct {
	o     options
	out   io.Writer
	dir   string
	start time.Time
	rng   *rand.Rand
	total *chaos.Report

	redis   *chaos.RedisServer
	coord   chaos.Process
	stop    func()
	members *os.File
}

func (s *soak) logf(format string, args ...any) {
	fmt.Fprintf(s.out, "[%6.1fs] %s\n", time.Since(s.start).Seconds(), fmt.Sprintf(format, args...))
}

func (s *soak) remaining() time.Duration { return s.o.duration - time.Since(s.start) }

func (s *soak) run(ctx context.Context) error {
	s.logf("soak for %s, seed %d, faults %v, work directory %s", s.o.duration, s.o.seed, enabled(s.o.faults), s.dir)
	bin, err := s.coordinatorBinary()
	if err != nil {
		return err
	}
	redisDir := filepath.Join(s.dir, "redis")
	if err := os.MkdirAll(redisDir, 0o755); err != nil {
		return err
	}
	if s.redis, err = chaos.StartRedis(redisDir); err != nil {
		return err
	}
	port, err := procs.FreePort()
	if err != nil {
		return err
	}
	if s.o.replicas > 1 {
		set, err := chaos.NewReplicaSet(bin, s.redis.URL(), "soak:events", s.dir, s.o.replicas)
		if err != nil {
			return err
		}
		s.coord, s.stop = set, set.Stop
	} else {
		one := &chaos.CoordinatorProcess{Bin: bin, RedisURL: s.redis.URL(), LogStream: "soak:events",
			Addr: fmt.Sprintf("127.0.0.1:%d", port), LogPath: filepath.Join(s.dir, "coordinator.log")}
		s.coord, s.stop = one, one.Stop
	}
	if err := s.coord.Start(ctx); err != nil {
		return err
	}
	if s.members, err = os.Create(filepath.Join(s.dir, "members.log")); err != nil {
		return err
	}
	s.logf("redis-server %s (appendonly yes), coordinator %s at %s (%v)", s.redis.URL(), bin, s.coord.URL(), chaos.CoordinatorTimings)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	for round := 1; round == 1 || s.remaining() > 10*time.Second; round++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := s.round(ctx, round, exe); err != nil {
			return err
		}
	}
	return nil
}

// round runs one group through random operations and faults, then checks it.
func (s *soak) round(ctx context.Context, n int, exe string) error {
	rng := rand.New(rand.NewSource(s.rng.Int63()))
	logf := func(string, ...any) {}
	if s.o.verbose {
		logf = func(format string, args ...any) { s.logf("  r%d %s", n, fmt.Sprintf(format, args...)) }
	}
	prefix := fmt.Sprintf("soak%d", n)
	initial := 2 + rng.Intn(5)
	s.logf("round %d: group %s/g with %d shards", n, prefix, initial)
	r, err := chaos.NewRound(ctx, chaos.Options{
		Coordinator: s.coord, RedisURL: s.redis.URL(), RestartRedis: s.redis.Restart,
		MemberCommand: func() *exec.Cmd { return exec.Command(exe) }, MemberStderr: s.members,
		Rand: rng, Logf: logf, Prefix: prefix, Group: "g", InitialShards: initial, StepTimeout: 30 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("round %d: %w", n, err)
	}
	defer r.Close()
	ops := 3 + rng.Intn(4)
	for i := 0; i < ops && s.remaining() > 5*time.Second; i++ {
		if err := s.operation(ctx, r, rng); err != nil {
			return fmt.Errorf("round %d: %w", n, err)
		}
		if len(r.Report.Violations) > 0 {
			break // the group is off the rails: check what can be checked
		}
		if err := r.WaitStable(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.Report.Violations = append(r.Report.Violations, fmt.Sprintf("%s: %v", prefix, err))
			break
		}
	}
	if err := r.Finish(ctx); err != nil {
		return fmt.Errorf("round %d: %w", n, err)
	}
	rep := r.Report
	s.total.Add(rep)
	s.logf("round %d done: %d operations, %d faults; %s", n, rep.TotalOperations(), rep.TotalFaults(), rep.Summary())
	for _, v := range rep.Violations {
		s.logf("  VIOLATION %s", v)
	}
	return nil
}

// crashEvents are the event types a coordinator may be armed to crash after.
var crashEvents = []string{
	"resharding.preparing", "resharding.activated", "resharding.draining", "resharding.drained",
	"resharding.completed", "resharding.retired", "resharding.rolled_back", "member.synced", "member.expired",
}

func enabled(faults map[string]bool) []string {
	var out []string
	for _, f := range faultKinds {
		if faults[f] {
			out = append(out, f)
		}
	}
	return out
}

// operation applies one random operation or fault (a disabled fault is a pause).
func (s *soak) operation(ctx context.Context, r *chaos.Round, rng *rand.Rand) error {
	on := s.o.faults
	switch p := rng.Intn(100); {
	case p < 45:
		target := 1 + rng.Intn(10)
		for target == r.Shards() {
			target = 1 + rng.Intn(10)
		}
		plan := chaos.ScalePlan{Target: target}
		if on["coordinator"] {
			plan.Kills = rng.Intn(3)
		}
		if on["redis"] && rng.Intn(100) < 15 {
			plan.RedisRestarts = 1
		}
		if on["rollback"] && rng.Intn(100) < 25 {
			plan.Rollback = []string{"metadata", "drain"}[rng.Intn(2)]
		}
		if on["crash"] && rng.Intn(100) < 20 {
			if err := r.ArmCoordinatorCrash(ctx, crashEvents[rng.Intn(len(crashEvents))]); err != nil {
				return err
			}
		}
		_, err := r.Scale(ctx, plan)
		return err
	case p < 60 && on["coordinator"]:
		return r.KillCoordinator(ctx, "at a random moment")
	case p >= 60 && p < 75 && on["member"]:
		_, err := r.KillMemberProcess(ctx)
		return err
	case p >= 75 && p < 88 && on["redis"]:
		return r.RestartRedis(ctx)
	default:
		return chaos.Sleep(ctx, time.Duration(1000+rng.Intn(2000))*time.Millisecond)
	}
}

// coordinatorBinary is --coordinator-bin, else a fresh go build of
// ./cmd/coordinator (so the soak tests the source), else bin/coordinator.
func (s *soak) coordinatorBinary() (string, error) {
	if s.o.coordinatorBin != "" {
		return s.o.coordinatorBin, nil
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(s.dir, "coordinator")
	msg, err := exec.Command(goBin, "build", "-o", out, "github.com/rscoord/rsc/cmd/coordinator").CombinedOutput()
	if err == nil {
		return out, nil
	}
	if st, serr := os.Stat("bin/coordinator"); serr == nil && !st.IsDir() {
		s.logf("go build failed (%v); using bin/coordinator", err)
		return "bin/coordinator", nil
	}
	return "", fmt.Errorf("go build ./cmd/coordinator: %v\n%s", err, msg)
}

func (s *soak) cleanup() {
	if s.stop != nil {
		s.stop()
	}
	if s.redis != nil {
		s.redis.Stop()
	}
	if s.members != nil {
		_ = s.members.Close()
	}
}
