// Command rscbench measures the coordinator's hot paths, each against a
// baseline measured in the same run, and prints the absolute figures with the
// ratio to the baseline (tables, or JSON with -json):
//
//	rscbench log        append (Lua compare-and-append vs plain XADD), fold from
//	                    memory, replay from Redis (FoldLog vs raw XRANGE),
//	                    start-up (snapshot + empty tail vs the whole log) and
//	                    start-up from the snapshot on a trimmed vs untrimmed log
//	rscbench heartbeat  steady heartbeats over the real HTTP server vs a bare
//	                    net/http JSON handler, then rebalance
//	rscbench rebalance  rounds and shard moves when members join and leave
//	rscbench joins      log bytes a member join appends as the group grows,
//	                    early vs late in the growth
//	rscbench ordering   ordered groups: the pause a resharding causes against
//	                    the backlog at the cutover (vs handling the backlog
//	                    without one), and the fenced publish vs plain XADD
//	rscbench publish    the Go SDK's publish paths (single, batches of 64,
//	                    async; plain and idempotent; a dedup hit) vs plain
//	                    XADD, and the memory of a dedup record
//	rscbench noisy      a join's latency in a quiet group while other
//	                    connections flood a group of many member records
//	                    with joins and leaves, vs the same joins alone
//	rscbench latency    publish-to-handle latency through the SDK in steady
//	                    state and through a scale-out, a scale-in, a rolling
//	                    restart and a killed member process, with held and
//	                    with plain heartbeats; the memory of a held heartbeat
//	rscbench all        everything but latency (it takes minutes)
//
// It starts a throwaway redis-server (--save "" --appendonly no) on a free
// loopback port unless --redis names a server, and removes what it wrote.
// --quick runs smaller sizes; `make bench` runs `rscbench all --quick`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/procs"
)

const usage = `usage: rscbench <command> [flags]

Measures the coordinator against baselines measured in the same run and prints
absolute figures with the ratio to each baseline.

commands:
  log        Log.Append vs XADD; fold from memory; FoldLog from Redis vs raw
             XRANGE; start-up from a snapshot vs from the whole log; start-up
             from the snapshot with the log trimmed (--trim-log) vs untrimmed
  heartbeat  steady heartbeats over HTTP vs a bare net/http JSON handler
             (throughput, p50/p99, events per steady heartbeat), then rebalance
  rebalance  rounds until stable and shards moved when members join and leave
  joins      log bytes per member join at 0->100 vs 100->1000 members
  ordering   ordered groups: pause per resharding (cutover -> barriers
             released) against the backlog at the cutover, 4->8 and 4->6,
             vs handling that backlog without a resharding; fenced publish
             vs plain XADD (single and batches of 64)
  publish    the Go SDK's publish paths vs plain XADD: single (fenced, with a
             dedup window, a dedup hit), batches of 64, async from one
             goroutine; the memory of a dedup record
  noisy      a join's latency (p50, p99) in a quiet group while --churners
             connections flood a group of --noisy-records member records
             with joins and leaves, vs the same joins with no flood
  latency    publish-to-handle latency (p50, p99, max) through the SDK,
             steady and through a scale-out, a scale-in, a rolling restart
             and a member process killed, with held heartbeats and with
             plain ones (p99 vs the steady p99 of the same mode); and the
             memory of a held heartbeat vs an idle connection
  all        everything but latency

common flags: --quick (smaller sizes), -json, --redis URL (instead of a
throwaway redis-server). Run "rscbench <command> -h" for a command's flags.
`

func main() {
	// go-redis logs every failed dial; the errors we return say it once.
	redis.SetLogger(quietLogger{})
	if os.Getenv(latencyMemberEnv) != "" {
		os.Exit(runLatencyMember())
	}
	procs.Main(run)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// options are the flags of every command; zero sizes take the full or quick default.
type options struct {
	quick      bool
	json       bool
	redisURL   string
	seed       int64
	cpuProfile string

	// log
	events       int
	appendSlice  time.Duration
	appendRounds int
	reps         int

	// heartbeat
	members     int
	groups      int
	shards      int
	concurrency int
	requests    int
	passes      int

	// rebalance
	rbMembers int
	rbShards  int
	rbLeavers int

	// joins
	joins      int
	joinsEarly int
	joinShards int

	// ordering
	backlogs      intList
	orderingLoad  int
	orderingReps  int
	publishSlice  time.Duration
	publishRounds int

	// noisy
	noisyRecords int
	churners     int
	noisyJoins   int
	noisyPasses  int

	// latency
	latRate        int
	latKeys        int
	latMembers     int
	fromShards     int
	toShards       int
	phase          time.Duration
	restartSpacing time.Duration
	latRounds      int
	heldRequests   int
	latModes       string
}

var commandNames = []string{"log", "heartbeat", "rebalance", "joins", "ordering", "publish", "noisy", "latency", "all"}

// newOptions returns the defaults that do not depend on --quick; a command's
// flags start from them, and the flags it does not have keep them.
func newOptions() *options {
	return &options{seed: 1, appendRounds: 3, reps: 3, shards: 128, concurrency: 64, passes: 2, rbMembers: 100, rbShards: 256, rbLeavers: 10,
		joins: 1000, joinsEarly: 100, joinShards: 128, orderingLoad: 500, churners: 2,
		latKeys: 10000, latMembers: 4, fromShards: 4, toShards: 8, restartSpacing: 3 * time.Second, latRounds: 1, latModes: "held,plain"}
}

func (o *options) register(fs *flag.FlagSet, cmd string) {
	fs.BoolVar(&o.quick, "quick", false, "smaller sizes (what make bench runs)")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of tables")
	fs.Int64Var(&o.seed, "seed", o.seed, "seed of the generated event log")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	if cmd != "rebalance" {
		fs.StringVar(&o.redisURL, "redis", "", "Redis URL to use instead of a throwaway redis-server (keys are namespaced per run and removed)")
	}
	if cmd == "log" || cmd == "all" {
		fs.IntVar(&o.events, "events", 0, "events in the generated log (default 1000000; quick 100000)")
		fs.DurationVar(&o.appendSlice, "append-slice", 0, "duration of one append measurement slice (default 500ms; quick 150ms)")
		fs.IntVar(&o.appendRounds, "append-rounds", o.appendRounds, "append slices per variant, alternating which of variant and baseline runs first")
		fs.IntVar(&o.reps, "reps", o.reps, "repetitions of the fold, replay and start-up measurements (alternating with their baselines; the best of each is reported)")
	}
	if cmd == "heartbeat" || cmd == "all" {
		fs.IntVar(&o.members, "members", 0, "live members in the steady-heartbeat benchmark (default 10000; quick 2000)")
		fs.IntVar(&o.groups, "groups", 0, "groups the members are spread over (default 100; quick 20)")
		fs.IntVar(&o.shards, "shards", o.shards, "shards per group in the steady-heartbeat benchmark")
		fs.IntVar(&o.concurrency, "concurrency", o.concurrency, "concurrent client goroutines")
		fs.IntVar(&o.requests, "requests", 0, "steady heartbeats measured, and as many baseline requests (default 100000; quick 10000)")
		fs.IntVar(&o.passes, "passes", o.passes, "alternating baseline/coordinator passes the requests are split into")
	}
	if cmd == "joins" || cmd == "all" {
		fs.IntVar(&o.joins, "joins", o.joins, "members that join the group, one at a time")
		fs.IntVar(&o.joinsEarly, "joins-early", o.joinsEarly, "joins of the early phase the later bytes per join are compared with")
		fs.IntVar(&o.joinShards, "join-shards", o.joinShards, "shards of the joined group")
	}
	if cmd == "publish" {
		fs.DurationVar(&o.publishSlice, "publish-slice", 0, "duration of one measurement slice of a variant (default 500ms; quick 100ms)")
		fs.IntVar(&o.publishRounds, "publish-rounds", 0, "slices per variant, rotating which runs first (default 4; quick 2)")
	}
	if cmd == "ordering" || cmd == "all" {
		fs.Var(&o.backlogs, "backlogs", "comma-separated backlogs at the cutover, in entries (default 0,1000,10000,50000; quick 0,1000)")
		fs.IntVar(&o.orderingLoad, "ordering-load", o.orderingLoad, "steady publish rate during the pause measurements, msgs/s")
		fs.IntVar(&o.orderingReps, "ordering-reps", 0, "repetitions of each pause measurement, a fresh group each; medians are reported (default 3; quick 1)")
		fs.DurationVar(&o.publishSlice, "publish-slice", 0, "duration of one fenced-publish or XADD measurement slice (default 500ms; quick 100ms)")
		fs.IntVar(&o.publishRounds, "publish-rounds", 0, "slices per variant, alternating which runs first (default 4; quick 2)")
	}
	if cmd == "noisy" || cmd == "all" {
		fs.IntVar(&o.noisyRecords, "noisy-records", 0, "member records (joined and left) in the flooded group (default 3000; quick 500)")
		fs.IntVar(&o.churners, "churners", o.churners, "connections flooding the noisy group with joins and leaves")
		fs.IntVar(&o.noisyJoins, "noisy-joins", 0, "joins measured in the quiet group, alone and under the flood each (default 2000; quick 60)")
		if cmd == "noisy" {
			fs.IntVar(&o.noisyPasses, "passes", 0, "alternating alone/flooded phases the joins are split into (default 10; quick 2)")
		}
	}
	if cmd == "latency" {
		fs.IntVar(&o.latRate, "rate", 0, "messages published a second (default 500; quick 200)")
		fs.IntVar(&o.latKeys, "keys", o.latKeys, "partition keys the messages are spread over")
		fs.IntVar(&o.latMembers, "lat-members", o.latMembers, "member processes")
		fs.IntVar(&o.fromShards, "from-shards", o.fromShards, "shards of the group, scaled out to --to-shards and back")
		fs.IntVar(&o.toShards, "to-shards", o.toShards, "shards of the scale-out")
		fs.DurationVar(&o.phase, "phase", 0, "length of each phase; a message counts in the phase it was published in (default 15s; quick 5s)")
		fs.DurationVar(&o.restartSpacing, "restart-spacing", o.restartSpacing, "time between two members' restarts in the rolling restart")
		fs.IntVar(&o.latRounds, "rounds", o.latRounds, "rounds of both modes, alternating which runs first; the phases' figures pool every round")
		fs.IntVar(&o.heldRequests, "held-requests", 0, "held heartbeats whose memory is measured (default 2000; quick 200)")
		fs.StringVar(&o.latModes, "modes", o.latModes, "heartbeat modes measured, comma-separated: held (the SDK's default), plain")
	}
	if cmd == "heartbeat" || cmd == "rebalance" || cmd == "all" {
		fs.IntVar(&o.rbMembers, "rebalance-members", o.rbMembers, "members joining the rebalance group")
		fs.IntVar(&o.rbShards, "rebalance-shards", o.rbShards, "shards of the rebalance group")
		fs.IntVar(&o.rbLeavers, "leavers", o.rbLeavers, "members leaving gracefully after the group is stable")
	}
}

// resolve fills the sizes left at zero and checks them.
func (o *options) resolve() error {
	pick := func(v *int, full, quick int) {
		if *v == 0 {
			*v = full
			if o.quick {
				*v = quick
			}
		}
	}
	pick(&o.events, 1_000_000, 100_000)
	pick(&o.members, 10_000, 2_000)
	pick(&o.groups, 100, 20)
	pick(&o.requests, 100_000, 10_000)
	pick(&o.publishRounds, 4, 2)
	pick(&o.orderingReps, 3, 1)
	pick(&o.noisyRecords, 3000, 500)
	pick(&o.noisyJoins, 2000, 60)
	pick(&o.noisyPasses, 10, 2)
	pick(&o.latRate, 500, 200)
	pick(&o.heldRequests, 2000, 200)
	if o.phase == 0 {
		o.phase = 15 * time.Second
		if o.quick {
			o.phase = 5 * time.Second
		}
	}
	if o.publishSlice == 0 {
		o.publishSlice = 500 * time.Millisecond
		if o.quick {
			o.publishSlice = 100 * time.Millisecond
		}
	}
	if o.backlogs == nil {
		o.backlogs = intList{0, 1000, 10_000, 50_000}
		if o.quick {
			o.backlogs = intList{0, 1000}
		}
	}
	if o.appendSlice == 0 {
		o.appendSlice = 500 * time.Millisecond
		if o.quick {
			o.appendSlice = 150 * time.Millisecond
		}
	}
	var problems []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Errorf(format, args...))
		}
	}
	check(o.events >= 100, "--events must be at least 100")
	check(o.appendSlice > 0 && o.appendRounds > 0 && o.reps > 0, "--append-slice, --append-rounds and --reps must be positive")
	check(o.groups > 0 && o.members >= o.groups, "--members must be at least --groups (and --groups positive)")
	check(o.shards > 0 && o.concurrency > 0 && o.passes > 0 && o.requests >= o.passes, "--shards, --concurrency, --passes and --requests must be positive")
	check(o.rbMembers > 0 && o.rbShards > 0, "--rebalance-members and --rebalance-shards must be positive")
	check(o.rbLeavers >= 0 && o.rbLeavers < o.rbMembers, "--leavers must be between 0 and --rebalance-members-1")
	check(o.joinsEarly > 0 && o.joins > o.joinsEarly && o.joinShards > 0, "--joins must exceed --joins-early, both and --join-shards positive")
	check(len(o.backlogs) > 0, "--backlogs must list at least one backlog")
	for _, n := range o.backlogs {
		check(n >= 0, "--backlogs must not be negative")
	}
	check(o.noisyRecords >= 0 && o.churners > 0 && o.noisyPasses > 0 && o.noisyJoins >= o.noisyPasses, "--noisy-records must not be negative, --churners and the noisy --passes positive and --noisy-joins at least --passes")
	check(o.orderingLoad >= 0 && o.orderingReps > 0 && o.publishSlice > 0 && o.publishRounds > 0, "--ordering-load must not be negative, --ordering-reps, --publish-slice and --publish-rounds must be positive")
	check(o.latRate > 0 && o.latKeys > 0 && o.latMembers > 0 && o.latRounds > 0 && o.heldRequests > 0, "--rate, --keys, --lat-members, --rounds and --held-requests must be positive")
	check(o.fromShards > 0 && o.toShards > o.fromShards, "--to-shards must exceed --from-shards, both positive")
	for _, m := range strings.Split(o.latModes, ",") {
		check(m == "held" || m == "plain", "--modes lists held or plain, not %q", m)
	}
	check(o.phase >= time.Second && o.restartSpacing >= 0, "--phase must be at least 1s and --restart-spacing not negative")
	return errors.Join(problems...)
}

// bench is one run: options, where progress goes, and Redis when a command needs it.
type bench struct {
	o        *options
	progress io.Writer
	st       *store
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "rscbench: "+format+"\n", args...)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd := args[0]
	known := false
	for _, n := range commandNames {
		known = known || n == cmd
	}
	if !known {
		fmt.Fprintf(stderr, "rscbench: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	o := newOptions()
	fs := flag.NewFlagSet("rscbench "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.register(fs, cmd)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rscbench %s: unexpected arguments %v\n", cmd, fs.Args())
		return 2
	}
	if err := o.resolve(); err != nil {
		fmt.Fprintf(stderr, "rscbench %s: %v\n", cmd, err)
		return 2
	}

	rep := &Report{Command: cmd, Quick: o.quick, Env: Env{
		GoVersion: runtime.Version(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Started: time.Now().UTC(),
	}}
	b := &bench{o: o, progress: &lockedWriter{w: stderr}}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "rscbench %s: %v\n", cmd, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "rscbench %s: %v\n", cmd, err)
			return 1
		}
	}
	err := b.runCommand(ctx, cmd, rep)
	if o.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	rep.Env.ElapsedSeconds = time.Since(rep.Env.Started).Seconds()
	// What was measured is printed even when a later step failed.
	var perr error
	if o.json {
		perr = rep.writeJSON(stdout)
	} else {
		perr = rep.writeTable(stdout)
	}
	if err = errors.Join(err, perr); err != nil {
		fmt.Fprintf(stderr, "rscbench %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

func (b *bench) runCommand(ctx context.Context, cmd string, rep *Report) (err error) {
	if cmd != "rebalance" {
		b.st, err = openStore(ctx, b.o.redisURL)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, b.st.close(ctx)) }()
		rep.Env.Redis, rep.Env.RedisSource = b.st.version, b.st.source()
	}
	// The sections each command runs, in order.
	type run = func(*bench, context.Context, *Report) error
	runs, ok := map[string][]run{
		"log":       {(*bench).runLog},
		"heartbeat": {(*bench).runHeartbeat, (*bench).runRebalance},
		"rebalance": {(*bench).runRebalance},
		"joins":     {(*bench).runJoins},
		"ordering":  {(*bench).runOrdering},
		"publish":   {(*bench).runPublish},
		"noisy":     {(*bench).runNoisy},
		"latency":   {(*bench).runLatency},
		"all": {(*bench).runLog, (*bench).runHeartbeat, (*bench).runJoins, (*bench).runOrdering,
			(*bench).runPublish, (*bench).runNoisy, (*bench).runRebalance},
	}[cmd]
	if !ok {
		return fmt.Errorf("unknown command %q", cmd)
	}
	for _, r := range runs {
		if err := r(b, ctx, rep); err != nil {
			return err
		}
	}
	return nil
}

// lockedWriter serializes writes to w: the latency benchmark's member
// processes write their stderr to the progress writer at once.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// intList is a comma-separated list of integers (a flag).
type intList []int

func (l *intList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, n := range *l {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (l *intList) Set(v string) error {
	*l = (*l)[:0]
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("%q is not an integer", f)
		}
		*l = append(*l, n)
	}
	return nil
}
