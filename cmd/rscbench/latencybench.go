package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

// runLatency measures what a user feels of a rebalance: the age of a
// message when a member handles it. A producer (the Go SDK) publishes
// --rate messages a second over --keys partition keys, each carrying the
// time it was published; --lat-members member processes (the Go SDK with
// its defaults) handle them and print when. The coordinator runs in this
// process with its defaults (3 s heartbeat interval, 15 s lease). Each mode
// (held heartbeats, the SDK's default; plain heartbeats, as the reference
// clients) gets a fresh group and goes through the same phases of --phase
// each, a message counting in the phase it was published in:
//
//   - steady, on --from-shards shards;
//   - a scale-out to --to-shards (the window starts with the request);
//   - a scale-in back (removed shards drain first);
//   - a rolling restart: every member in turn leaves gracefully (SIGTERM)
//     and a new member process starts, --restart-spacing apart;
//   - a member process killed (SIGKILL).
//
// Each phase's p50, p99 and max are reported with the ratio of its p99 to
// the steady p99 of the same mode; nothing published may be lost. The
// modes alternate which runs first over --rounds rounds, so a shared
// machine's load falls on both. Before them, latency.holds measures the
// memory of a held heartbeat (holdbench.go).
func (b *bench) runLatency(ctx context.Context, rep *Report) error {
	if err := b.runHoldMemory(ctx, rep); err != nil {
		return err
	}
	o := b.o
	coord, _, srv, done, err := b.serveRedisCoordinator(ctx, "lat-events", coordinator.Config{Logger: zerolog.Nop()})
	if err != nil {
		return err
	}
	defer done()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	results := map[string]map[string]*phaseStats{}
	modes := strings.Split(o.latModes, ",")
	for round := 0; round < o.latRounds; round++ {
		order := slices.Clone(modes)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, mode := range order {
			run := &latencyRun{b: b, coord: coord, url: srv.URL(), redisURL: b.st.url, exe: exe, mode: mode,
				k: projection.GroupKey{StreamPrefix: fmt.Sprintf("%s-lat-%s-%d", b.st.prefix, mode, round), ConsumerGroup: "workers"}}
			stats, err := run.run(ctx)
			if err != nil {
				return fmt.Errorf("%s heartbeats, round %d: %w", mode, round+1, err)
			}
			if results[mode] == nil {
				results[mode] = map[string]*phaseStats{}
			}
			for name, st := range stats {
				if results[mode][name] == nil {
					results[mode][name] = &phaseStats{}
				}
				results[mode][name].add(st)
			}
		}
	}
	b.reportLatency(rep, results)
	return nil
}

// Phases of a mode, in order.
var latencyPhases = []string{"steady", "scale-out", "scale-in", "rolling restart", "member killed"}

// phaseStats are the messages published in one phase.
type phaseStats struct {
	lat       []time.Duration // publish to first handling
	unhandled int
}

func (p *phaseStats) add(o *phaseStats) {
	p.lat = append(p.lat, o.lat...)
	p.unhandled += o.unhandled
}

func (p *phaseStats) percentile(q float64) time.Duration { return percentile(p.lat, q) }

func (p *phaseStats) max() time.Duration {
	if len(p.lat) == 0 {
		return 0
	}
	return slices.Max(p.lat)
}

// latencyRun is one mode's run: its group, its member processes, what
// they handled.
type latencyRun struct {
	b        *bench
	coord    *coordinator.Coordinator
	url      string
	redisURL string
	exe      string
	mode     string
	k        projection.GroupKey

	procs   []*latencyProc
	nextID  int
	readers sync.WaitGroup
	// stopping are the ids of the member processes sent SIGTERM: no longer
	// expected in the group.
	stopping map[string]bool

	mu      sync.Mutex
	pubAt   []int64            // publish time (unix ns) of message n at n-1
	first   map[int64][2]int64 // message number -> published, first handled (unix ns)
	handled int64              // handlings, duplicates included

	published atomic.Int64
	pubErrors atomic.Int64
	windows   []latencyWindow
}

type latencyWindow struct {
	name     string
	from, to int64 // unix ns
}

type latencyProc struct {
	id   string
	cmd  *exec.Cmd
	done chan struct{}
}

func (r *latencyRun) logf(format string, args ...any) {
	r.b.logf("latency (%s heartbeats): "+format, append([]any{r.mode}, args...)...)
}

func (r *latencyRun) run(ctx context.Context) (map[string]*phaseStats, error) {
	o := r.b.o
	r.first = map[int64][2]int64{}
	r.stopping = map[string]bool{}
	for s := 0; s < max(o.fromShards, o.toShards); s++ {
		key := routing.StreamKey(r.k.StreamPrefix, s)
		r.b.st.track(key, routing.FenceKey(key))
	}
	from := o.fromShards
	if err := createGroup(ctx, r.coord, r.k, from, "latency benchmark"); err != nil {
		return nil, err
	}
	defer r.stopAll()
	for i := 0; i < o.latMembers; i++ {
		if err := r.start(ctx); err != nil {
			return nil, err
		}
	}
	if err := r.waitStable(ctx, o.latMembers, from, time.Minute); err != nil {
		return nil, err
	}
	p, err := producer.New(producer.Config{Coordinator: client.New(r.url, client.BasicAuth{Username: "admin", Password: "password"}),
		Redis: r.b.st.rdb, StreamPrefix: r.k.StreamPrefix, ConsumerGroup: r.k.ConsumerGroup})
	if err != nil {
		return nil, err
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() { defer close(loadDone); r.load(loadCtx, p) }()
	defer func() { stopLoad(); <-loadDone }()
	r.logf("%d members on %d shards; %d msgs/s", o.latMembers, from, o.latRate)
	if !sleepCtx(ctx, min(3*time.Second, o.phase/3)) {
		return nil, ctx.Err()
	}

	r.logf("steady")
	r.window(ctx, "steady", nil)

	r.logf("scale-out %d -> %d", from, o.toShards)
	if err := r.window(ctx, "scale-out", func() error { return r.scale(ctx, o.toShards) }); err != nil {
		return nil, err
	}
	if err := r.waitStable(ctx, o.latMembers, o.toShards, 2*time.Minute); err != nil {
		return nil, err
	}

	r.logf("scale-in %d -> %d", o.toShards, from)
	if err := r.window(ctx, "scale-in", func() error { return r.scale(ctx, from) }); err != nil {
		return nil, err
	}
	if err := r.waitStable(ctx, o.latMembers, from, 2*time.Minute); err != nil {
		return nil, err
	}

	r.logf("rolling restart, %s apart", o.restartSpacing)
	if err := r.window(ctx, "rolling restart", func() error {
		old := append([]*latencyProc(nil), r.procs...)
		for i, pr := range old {
			if i > 0 && !sleepCtx(ctx, o.restartSpacing) {
				return ctx.Err()
			}
			r.stopping[pr.id] = true
			_ = pr.cmd.Process.Signal(syscall.SIGTERM) // leaves gracefully
			if err := r.start(ctx); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := r.waitStable(ctx, o.latMembers, from, 2*time.Minute); err != nil {
		return nil, err
	}

	r.logf("a member process killed")
	live := r.live()
	victim := live[len(live)-1] // one of the restarted ones (the old ones may still be exiting)
	if g, ok := r.coord.State().Group(r.k); ok {
		if m := g.Member(victim.id); m != nil {
			r.logf("killing %s, which reads shards %v", victim.id, m.Current)
		}
	}
	if err := r.window(ctx, "member killed", func() error { return victim.cmd.Process.Signal(syscall.SIGKILL) }); err != nil {
		return nil, err
	}
	stopLoad()
	<-loadDone
	r.logf("draining: every published message handled")
	deadline := time.Now().Add(time.Minute)
	for r.unhandled() > 0 && time.Now().Before(deadline) {
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
	return r.stats(), nil
}

// window runs one phase: act at its start, then wait for the phase's end.
func (r *latencyRun) window(ctx context.Context, name string, act func() error) error {
	w := latencyWindow{name: name, from: time.Now().UnixNano()}
	if act != nil {
		if err := act(); err != nil {
			return err
		}
	}
	if !sleepCtx(ctx, time.Until(time.Unix(0, w.from).Add(r.b.o.phase))) {
		return ctx.Err()
	}
	w.to = time.Now().UnixNano()
	r.windows = append(r.windows, w)
	return nil
}

func (r *latencyRun) scale(ctx context.Context, to int) error {
	_, err := r.coord.Scale(ctx, events.Meta{Actor: "rscbench"}, r.k, commands.ScaleInput{TargetShardCount: &to, RequestedBy: "rscbench", Reason: "latency benchmark"})
	return err
}

// load publishes --rate messages a second until ctx ends, each with its
// number and the time it was published.
func (r *latencyRun) load(ctx context.Context, p *producer.Producer) {
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	owed := 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		owed += float64(r.b.o.latRate) * tick.Seconds()
		for ; owed >= 1; owed-- {
			now := time.Now().UnixNano()
			r.mu.Lock()
			r.pubAt = append(r.pubAt, now)
			n := int64(len(r.pubAt))
			r.mu.Unlock()
			key := "k" + strconv.Itoa(rand.IntN(r.b.o.latKeys))
			fields := map[string]any{"n": strconv.FormatInt(n, 10), "t": strconv.FormatInt(now, 10)}
			_, err := p.Publish(ctx, key, fields)
			if err == nil {
				r.published.Add(1)
				continue
			}
			r.mu.Lock()
			r.pubAt[n-1] = 0 // not written (or not known to be): not counted
			r.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			r.pubErrors.Add(1)
		}
	}
}

// start runs a new member process.
func (r *latencyRun) start(ctx context.Context) error {
	id := fmt.Sprintf("%s-m%02d", r.mode, r.nextID)
	r.nextID++
	cmd := exec.CommandContext(ctx, r.exe)
	plain := "0"
	if r.mode == "plain" {
		plain = "1"
	}
	cmd.Env = append(os.Environ(), latencyMemberEnv+"=1", "RSCBENCH_COORDINATOR="+r.url, "RSCBENCH_REDIS="+r.redisURL,
		"RSCBENCH_PREFIX="+r.k.StreamPrefix, "RSCBENCH_GROUP="+r.k.ConsumerGroup, "RSCBENCH_MEMBER="+id, "RSCBENCH_PLAIN="+plain)
	cmd.Stderr = r.b.progress
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start member process: %w", err)
	}
	pr := &latencyProc{id: id, cmd: cmd, done: make(chan struct{})}
	r.procs = append(r.procs, pr)
	r.readers.Add(1)
	go func() {
		defer r.readers.Done()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			r.record(sc.Text())
		}
		_ = cmd.Wait()
		close(pr.done)
	}()
	return nil
}

// record takes one line of a member process.
func (r *latencyRun) record(line string) {
	f := strings.Fields(line)
	if len(f) != 3 {
		return
	}
	var v [3]int64
	for i, s := range f {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return
		}
		v[i] = n
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handled++
	if _, seen := r.first[v[0]]; !seen {
		r.first[v[0]] = [2]int64{v[1], v[2]}
	}
}

// live lists the member processes still running.
func (r *latencyRun) live() []*latencyProc {
	var out []*latencyProc
	for _, pr := range r.procs {
		select {
		case <-pr.done:
		default:
			out = append(out, pr)
		}
	}
	return out
}

// stopAll stops every member process gracefully (killing what outlives the
// SDK's shutdown) and waits for their output.
func (r *latencyRun) stopAll() {
	for _, pr := range r.live() {
		_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(40 * time.Second)
	for _, pr := range r.procs {
		select {
		case <-pr.done:
		case <-deadline:
			_ = pr.cmd.Process.Kill()
			<-pr.done
		}
	}
	r.readers.Wait()
}

// waitStable waits until the group is STABLE on shards shards, its live
// members the member processes running and not stopping (members of them),
// and no resharding in progress.
func (r *latencyRun) waitStable(ctx context.Context, members, shards int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var want []string
	for _, pr := range r.live() {
		if !r.stopping[pr.id] {
			want = append(want, pr.id)
		}
	}
	slices.Sort(want)
	if len(want) != members {
		return fmt.Errorf("%d member processes running, want %d", len(want), members)
	}
	for {
		if g, ok := r.coord.State().Group(r.k); ok && g.ActiveResharding == "" && g.ShardCount == shards && slices.Equal(g.LiveMemberIDs(), want) && g.State() == "STABLE" {
			return nil
		}
		if time.Now().After(deadline) {
			g, _ := r.coord.State().Group(r.k)
			state := "no group"
			if g != nil {
				state = fmt.Sprintf("%s, %d shards, %d live members, resharding %q", g.State(), g.ShardCount, len(g.LiveMemberIDs()), g.ActiveResharding)
			}
			return fmt.Errorf("group not STABLE on %d shards with %d members after %s: %s", shards, members, timeout, state)
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func (r *latencyRun) unhandled() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.published.Load() - int64(len(r.first))
}

// stats sorts the messages into the phases they were published in.
func (r *latencyRun) stats() map[string]*phaseStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]*phaseStats{}
	for _, w := range r.windows {
		out[w.name] = &phaseStats{}
	}
	for i, at := range r.pubAt {
		if at == 0 {
			continue
		}
		for _, w := range r.windows {
			if at < w.from || at >= w.to {
				continue
			}
			if h, ok := r.first[int64(i+1)]; ok {
				out[w.name].lat = append(out[w.name].lat, time.Duration(h[1]-at))
			} else {
				out[w.name].unhandled++
			}
		}
	}
	r.logf("published %d (%d publish errors), handled %d (%d more than once)", r.published.Load(), r.pubErrors.Load(), len(r.first), r.handled-int64(len(r.first)))
	return out
}

func (b *bench) reportLatency(rep *Report, results map[string]map[string]*phaseStats) {
	o := b.o
	s := rep.section("latency.phases", "publish-to-handle latency through the SDK: held heartbeats (the default) vs plain ones")
	s.param("rate", fmt.Sprintf("%d msgs/s over %d keys", o.latRate, o.latKeys))
	s.param("members", fmt.Sprintf("%d processes (SDK defaults)", o.latMembers))
	s.param("shards", fmt.Sprintf("%d, scaled to %d and back", o.fromShards, o.toShards))
	s.param("phase", o.phase)
	s.param("rolling restart", fmt.Sprintf("every member, %s apart", o.restartSpacing))
	s.param("coordinator", "defaults: heartbeat interval 3s, member lease 15s, drop grace 1s")
	s.param("rounds", o.latRounds)
	var modes []string
	head := fmt.Sprintf("%-16s", "phase")
	for _, mode := range []string{"held", "plain"} {
		if results[mode] != nil {
			modes = append(modes, mode)
			head += fmt.Sprintf(" %28s", mode+" p50 / p99 / max (ms)")
		}
	}
	rows := []string{head}
	for _, ph := range latencyPhases {
		line := fmt.Sprintf("%-16s", ph)
		for _, mode := range modes {
			st := results[mode][ph]
			if st == nil {
				st = &phaseStats{}
			}
			name := mode + ": " + ph
			if ph == "steady" {
				s.baseline(name+" p99", ms(st.percentile(0.99)), "ms")
			} else {
				s.measured(name+" p99", ms(st.percentile(0.99)), "ms", mode+": steady p99")
			}
			s.info(name+" p50", ms(st.percentile(0.50)), "ms")
			s.info(name+" max", ms(st.max()), "ms")
			s.info(name+" messages", float64(len(st.lat)), "")
			if st.unhandled > 0 {
				s.info(name+" never handled", float64(st.unhandled), "")
			}
			line += fmt.Sprintf(" %28s", fmt.Sprintf("%s / %s / %s", formatNumber(ms(st.percentile(0.50))), formatNumber(ms(st.percentile(0.99))), formatNumber(ms(st.max()))))
		}
		rows = append(rows, line)
	}
	for _, row := range rows {
		s.note("%s", row)
	}
	held := results["held"]
	if held == nil || held["steady"] == nil {
		return
	}
	limit := 2*held["steady"].percentile(0.99) + 50*time.Millisecond
	for _, ph := range []string{"scale-out", "scale-in", "rolling restart"} {
		if st := held[ph]; st != nil {
			s.note("goal, held %s p99 <= 2 x steady p99 + 50 ms = %s: %s (%s)", ph, limit.Round(time.Millisecond/10), verdict(st.percentile(0.99) <= limit), st.percentile(0.99).Round(time.Millisecond/10))
		}
	}
	if st := held["member killed"]; st != nil {
		s.note("goal, held member killed p99 <= 2 s: %s (%s)", verdict(st.percentile(0.99) <= 2*time.Second), st.percentile(0.99).Round(time.Millisecond))
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// sleepCtx sleeps d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
