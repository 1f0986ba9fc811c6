package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/internal/consumed"
	"github.com/rscoord/rsc/routing"
)

// demo is one run: what it started, and what it published.
type demo struct {
	o     options
	out   io.Writer
	start time.Time

	outMu sync.Mutex

	tmp         string
	redisProc   *process
	redisURL    string
	rdb         *redis.Client
	coordProc   *process
	coordURL    string
	coordLog    string
	logStream   string
	admin       *client.Client
	memberProc  *process
	memberDone  chan struct{}
	memberIDs   []string
	consumedKey string
	memberLease time.Duration // 0: the member runtime's default

	producers []*producer.Producer
	stopLoad  chan struct{}

	// --ordered (ordered.go): the two groups, and the final figures.
	sides          []*side
	orderedSummary string
	loadDone       sync.WaitGroup
	pubMu          sync.Mutex
	published      []string
	pubErrs        []error
}

func newDemo(o options, out io.Writer) *demo {
	return &demo{o: o, out: out, start: time.Now()}
}

// say prints one narrated line: elapsed time, a topic, the text.
func (d *demo) say(topic, format string, args ...any) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.out, "[%5.1fs] %-10s %s\n", time.Since(d.start).Seconds(), topic, fmt.Sprintf(format, args...))
}

func (d *demo) section(title string) {
	d.outMu.Lock()
	defer d.outMu.Unlock()
	fmt.Fprintf(d.out, "\n== %s\n", title)
}

func (d *demo) run(ctx context.Context) error {
	fmt.Fprintf(d.out, "rsc demo: a coordinator for sharded Redis Streams, end to end.\n")
	fmt.Fprintf(d.out, "group %s/%s; %d producers at ~%d msgs/s; one member process with concurrency %d.\n",
		d.o.prefix, d.o.group, d.o.producers, d.o.ratePerSecond, d.o.concurrency)

	d.section("Set-up")
	if err := d.setup(ctx); err != nil {
		return err
	}
	if err := d.createGroup(ctx, 4); err != nil {
		return err
	}

	d.section("Consumers join, producers start (4 shards)")
	if err := d.startMember(); err != nil {
		return err
	}
	if err := d.waitStable(ctx, d.memberIDs...); err != nil {
		return err
	}
	if err := d.startProducers(ctx); err != nil {
		return err
	}
	if err := d.pause(ctx, 2500*time.Millisecond); err != nil {
		return err
	}
	d.progress(ctx)

	d.section("Scale out 4 → 8 while publishing")
	if err := d.reshard(ctx, 4, 8); err != nil {
		return err
	}
	if err := d.pause(ctx, 2*time.Second); err != nil {
		return err
	}
	d.progress(ctx)

	d.section("Scale in 8 → 3 while publishing (removed shards drain first)")
	if err := d.reshard(ctx, 8, 3); err != nil {
		return err
	}
	if err := d.pause(ctx, time.Second); err != nil {
		return err
	}

	d.section("Stop producing; check every message")
	d.stopProducers()
	if err := d.verify(ctx, 3); err != nil {
		return err
	}

	d.section("Shut the member process down (graceful leave)")
	if err := d.stopMember(ctx); err != nil {
		return err
	}

	d.section("Replay: the group's resharding history, folded from the coordinator's event log")
	return d.history(ctx)
}

func (d *demo) setup(ctx context.Context) error {
	var err error
	d.consumedKey = "rsc-demo:" + d.o.prefix + ":consumed"
	d.logStream = "coordinator:events"
	if d.o.redisURL == "" || d.o.coordinatorURL == "" {
		if d.tmp, err = os.MkdirTemp("", "rsc-demo-"); err != nil {
			return err
		}
	}
	switch {
	case d.o.redisURL == "":
		if d.redisProc, d.redisURL, err = startRedis(ctx, d.tmp); err != nil {
			return err
		}
		d.say("setup", "started a throwaway redis-server at %s (no persistence; stopped at the end)", d.redisURL)
	case d.o.coordinatorURL == "":
		d.redisURL = d.o.redisURL
		// Our own coordinator on someone's Redis: its own event log.
		d.logStream = "rsc-demo:" + d.o.prefix + ":events"
		d.say("setup", "using Redis %s (event log %s)", d.redisURL, d.logStream)
	default:
		d.redisURL = d.o.redisURL
		d.logStream = d.o.logStream
		d.say("setup", "using Redis %s", d.redisURL)
	}
	opts, err := redis.ParseURL(d.redisURL)
	if err != nil {
		return fmt.Errorf("--redis: %w", err)
	}
	opts.PoolSize = 64
	d.rdb = redis.NewClient(opts)
	if err := d.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis %s: %w", d.redisURL, err)
	}
	if d.o.coordinatorURL != "" {
		d.coordURL = strings.TrimRight(d.o.coordinatorURL, "/")
		d.say("setup", "using the coordinator at %s (its own timings: handovers take a few heartbeat intervals)", d.coordURL)
	} else {
		bin, built, err := ensureBinary(d.o.coordinatorBin, "coordinator", "github.com/rscoord/rsc/cmd/coordinator", d.tmp)
		if err != nil {
			return err
		}
		if built {
			d.say("setup", "built the coordinator (%s was missing)", d.o.coordinatorBin)
		}
		d.coordLog = filepath.Join(d.tmp, "coordinator.log")
		if d.coordProc, d.coordURL, err = startCoordinator(ctx, bin, d.redisURL, d.logStream, d.coordLog); err != nil {
			return err
		}
		// Below the coordinator's 3 s member lease.
		d.memberLease = 2 * time.Second
		d.say("setup", "coordinator %s serving %s (%s); its log: %s", bin, d.coordURL, strings.Join(coordinatorTimings, " "), d.coordLog)
	}
	d.admin = client.New(d.coordURL, client.BasicAuth{Username: d.o.adminUser, Password: d.o.adminPassword})
	return nil
}

func (d *demo) createGroup(ctx context.Context, shards int) error {
	g, err := d.admin.CreateGroup(ctx, d.o.prefix, d.o.group, shards, "demo")
	if err != nil {
		return err
	}
	d.say("admin", "POST %s {\"initialShardCount\":%d} → group created: %d shards %s:0..%d, metadataVersion %d; the coordinator created consumer group %q on each",
		client.GroupPath(d.o.prefix, d.o.group), shards, g.ShardCount, d.o.prefix, g.ShardCount-1, g.MetadataVersion, d.o.group)
	return nil
}

// startMember starts the member process and narrates its events.
func (d *demo) startMember() error {
	env := memberEnv(d.coordURL, d.o.adminUser, d.o.adminPassword, d.redisURL, d.o.prefix, d.o.group, "worker", d.o.concurrency, d.consumedKey, d.memberLease)
	var err error
	if d.memberProc, d.memberDone, err = startMemberProcess("member", env, d.narrateMember); err != nil {
		return err
	}
	d.memberIDs = member.MemberIDs("worker", d.o.concurrency)
	d.say("member", "started a member process (pid %d) using client/member with concurrency %d: logical members %s",
		d.memberProc.Cmd.Process.Pid, d.o.concurrency, strings.Join(d.memberIDs, ", "))
	return nil
}

func (d *demo) narrateMember(e memberEvent) {
	switch e.Kind {
	case string(member.EventJoined):
		d.say("member", "%s joined the group (heartbeat answered %s)", e.Member, e.Detail)
	case string(member.EventAssigned):
		d.say("member", "%s starts reading %s", e.Member, shardList(d.o.prefix, e.Shards))
	case string(member.EventRevoking):
		d.say("member", "%s was revoked %s: stops reading, finishes in-flight messages and acks them", e.Member, shardList(d.o.prefix, e.Shards))
	case string(member.EventReleased):
		d.say("member", "%s drained %s: reports REVOKED, so the coordinator may hand it on", e.Member, shardList(d.o.prefix, e.Shards))
	case string(member.EventClaimed):
		d.say("member", "%s claimed %d entries a previous owner left pending on %s", e.Member, e.Count, shardList(d.o.prefix, e.Shards))
	case string(member.EventFenced):
		d.say("member", "%s was told %s: stopped everything, rejoining", e.Member, e.Detail)
	case string(member.EventLeaseLapsed):
		d.say("member", "%s: heartbeats failing longer than its lease, reading paused", e.Member)
	case string(member.EventLeaseRestored):
		d.say("member", "%s: heartbeats answered again, reading resumes", e.Member)
	case string(member.EventLeft):
		d.say("member", "%s left the group (memberEpoch -1), releasing %s", e.Member, shardList(d.o.prefix, e.Shards))
	}
}

func shardList(prefix string, shards []int) string {
	if len(shards) == 0 {
		return "no shards"
	}
	keys := make([]string, len(shards))
	for i, s := range shards {
		keys[i] = routing.StreamKey(prefix, s)
	}
	if len(keys) == 1 {
		return "shard " + keys[0]
	}
	return "shards " + strings.Join(keys, ", ")
}

// waitStable waits until the group is STABLE with these members reading
// every shard, and prints who reads what.
func (d *demo) waitStable(ctx context.Context, members ...string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		g, gerr := d.admin.Group(ctx, d.o.prefix, d.o.group)
		a, aerr := d.admin.Assignments(ctx, d.o.prefix, d.o.group)
		if gerr == nil && aerr == nil && g.State == "STABLE" && len(g.TargetAssignmentSummary) == len(members) {
			total := 0
			for _, m := range members {
				total += len(a.CurrentAssignments[m])
			}
			if total == g.ShardCount {
				d.say("group", "STABLE at groupEpoch %d, %d shards; assignment: %s", g.GroupEpoch, g.ShardCount, formatAssignment(a, members))
				return nil
			}
		}
		if err := d.pause(ctx, 50*time.Millisecond); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the group did not become STABLE with members %v in 60s", members)
		}
	}
}

func formatAssignment(a *client.Assignments, members []string) string {
	parts := make([]string, 0, len(members))
	for _, m := range members {
		idx := client.Indexes(a.CurrentAssignments[m])
		sort.Ints(idx)
		s := make([]string, len(idx))
		for i, v := range idx {
			s[i] = strconv.Itoa(v)
		}
		if len(s) == 0 {
			s = []string{"-"}
		}
		parts = append(parts, m+"=["+strings.Join(s, " ")+"]")
	}
	return strings.Join(parts, "  ")
}

func (d *demo) startProducers(ctx context.Context) error {
	d.stopLoad = make(chan struct{})
	const batch = 10
	every := time.Duration(float64(time.Second) * batch * float64(d.o.producers) / float64(d.o.ratePerSecond))
	for i := 0; i < d.o.producers; i++ {
		p, err := producer.New(producer.Config{
			Coordinator: d.admin, Redis: d.rdb, StreamPrefix: d.o.prefix, ConsumerGroup: d.o.group,
			EventIDField: "eventId", RefreshInterval: time.Second,
		})
		if err != nil {
			return err
		}
		rt, err := p.Routing(ctx)
		if err != nil {
			return err
		}
		d.producers = append(d.producers, p)
		if i == 0 {
			d.say("producers", "%d producers using client/producer: routing v%d (%d shards) cached for 1s, routeV1 on the partition key, XADD NOMKSTREAM MAXLEN ~ %d, batches of %d every %s",
				d.o.producers, rt.MetadataVersion, rt.ShardCount, producer.DefaultMaxLen, batch, every)
		}
		id := i
		d.load(ctx, every, func(n int) {
			msgs := make([]producer.Message, batch)
			for j := range msgs {
				k := n*batch + j
				msgs[j] = producer.Message{
					PartitionKey: "customer-" + strconv.Itoa((k*7+id)%500),
					Fields:       map[string]any{"producer": strconv.Itoa(id), "seq": strconv.Itoa(k), "amount": strconv.Itoa(k % 100)},
				}
			}
			res, err := p.PublishBatch(context.Background(), msgs)
			d.pubMu.Lock()
			for _, r := range res {
				if r.Err == nil {
					d.published = append(d.published, r.EventID)
				}
			}
			if err != nil {
				d.pubErrs = append(d.pubErrs, err)
			}
			d.pubMu.Unlock()
		})
	}
	return nil
}

// load calls batch every interval, on a goroutine of its own, until the
// load stops (stopProducers) or ctx ends; n counts the calls from 0.
func (d *demo) load(ctx context.Context, every time.Duration, batch func(n int)) {
	d.loadDone.Add(1)
	go func() {
		defer d.loadDone.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for n := 0; ; n++ {
			select {
			case <-d.stopLoad:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			batch(n)
		}
	}()
}

// stopLoading ends the load goroutines (load) and waits for them; false
// when none run.
func (d *demo) stopLoading() bool {
	if d.stopLoad == nil {
		return false
	}
	close(d.stopLoad)
	d.loadDone.Wait()
	d.stopLoad = nil
	return true
}

func (d *demo) stopProducers() {
	if !d.stopLoading() {
		return
	}
	d.pubMu.Lock()
	n, errs := len(d.published), len(d.pubErrs)
	d.pubMu.Unlock()
	d.say("producers", "stopped: %d messages published, %d publish errors", n, errs)
}

func (d *demo) publishedCount() int {
	d.pubMu.Lock()
	defer d.pubMu.Unlock()
	return len(d.published)
}

// progress prints published / consumed / pending counts.
func (d *demo) progress(ctx context.Context) {
	consumed, _ := d.rdb.SCard(ctx, d.consumedKey).Result()
	g, err := d.admin.Group(ctx, d.o.prefix, d.o.group)
	if err != nil {
		return
	}
	var pending int64
	for i := 0; i < max(g.ShardCount, g.AssignableShardCount); i++ {
		if p, err := d.rdb.XPending(ctx, routing.StreamKey(d.o.prefix, i), d.o.group).Result(); err == nil {
			pending += p.Count
		}
	}
	by, _ := d.rdb.HGetAll(ctx, d.consumedKey+":by-member").Result()
	d.say("progress", "published %d, consumed %d distinct, %d pending (delivered, not yet acked); handled per member: %s",
		d.publishedCount(), consumed, pending, formatCounts(by, d.memberIDs))
}

func formatCounts(by map[string]string, members []string) string {
	parts := make([]string, 0, len(members))
	for _, m := range members {
		n := by[m]
		if n == "" {
			n = "0"
		}
		parts = append(parts, m+"="+n)
	}
	return strings.Join(parts, " ")
}

// reshard scales the group and narrates the resharding until it is done.
func (d *demo) reshard(ctx context.Context, from, to int) error {
	m, err := d.admin.Scale(ctx, d.o.prefix, d.o.group, to, "demo", fmt.Sprintf("demo: scale %d -> %d", from, to))
	if err != nil {
		return err
	}
	d.say("admin", "POST .../scale {\"targetShardCount\":%d} → resharding %s %d → %d, state %s (%s)",
		to, m.ReshardingID, m.FromShardCount, m.ToShardCount, m.State, m.Phase)
	for _, p := range d.producers {
		if err := p.Refresh(ctx); err != nil {
			return err
		}
	}
	rt, _ := d.producers[0].Routing(ctx)
	if to < from {
		d.say("producers", "refreshed routing (the runbook step after a resharding): v%d, %d shards; %s keep being read until they are empty",
			rt.MetadataVersion, rt.ShardCount, rangeKeys(d.o.prefix, to, from))
	} else {
		d.say("producers", "refreshed routing (the runbook step after a resharding): v%d, %d shards", rt.MetadataVersion, rt.ShardCount)
	}
	last := m.State + "/" + m.Phase
	deadline := time.Now().Add(60 * time.Second)
	for {
		cur, err := d.admin.Migration(ctx, d.o.prefix, d.o.group, m.ReshardingID)
		if err == nil {
			if now := cur.State + "/" + cur.Phase; now != last {
				d.say("reshard", "%s: %s → %s%s", shortID(m.ReshardingID), last, now, phaseNote(cur.Phase, d.o.prefix, to, from))
				last = now
			}
			if cur.State == "DEPRECATED" && cur.Phase == "done" {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("resharding %s did not finish in 60s (last %s)", m.ReshardingID, last)
		}
		if err := d.pause(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	if to < from {
		n, err := d.rdb.Exists(ctx, keysIn(d.o.prefix, to, from)...).Result()
		if err != nil {
			return err
		}
		d.say("reshard", "%d of %d removed shard streams still exist in Redis (retired streams are deleted)", n, from-to)
	}
	return d.waitStable(ctx, d.memberIDs...)
}

func phaseNote(phase, prefix string, lo, hi int) string {
	switch phase {
	case "converging":
		return "  (members take over the new assignment, revoke before assign)"
	case "draining":
		return "  (waiting until Redis shows nothing pending or unread on " + rangeKeys(prefix, lo, hi) + ")"
	case "revoking":
		return "  (drained: members release the removed shards)"
	case "retiring":
		return "  (deleting the retired shard streams)"
	case "done":
		return "  (complete)"
	}
	return ""
}

func shortID(id string) string {
	if len(id) > 16 {
		return id[:16] + "…"
	}
	return id
}

func keysIn(prefix string, lo, hi int) []string {
	var keys []string
	for i := lo; i < hi; i++ {
		keys = append(keys, routing.StreamKey(prefix, i))
	}
	return keys
}

func rangeKeys(prefix string, lo, hi int) string {
	if hi-lo == 1 {
		return routing.StreamKey(prefix, lo)
	}
	return fmt.Sprintf("%s..%d", routing.StreamKey(prefix, lo), hi-1)
}

// verify waits until every published message was consumed, then checks that
// nothing is pending or unread on any shard.
func (d *demo) verify(ctx context.Context, shards int) error {
	d.pubMu.Lock()
	ids := append([]string(nil), d.published...)
	pubErrs := append([]error(nil), d.pubErrs...)
	d.pubMu.Unlock()
	if len(pubErrs) > 0 {
		return fmt.Errorf("%d publishes failed, first: %v", len(pubErrs), pubErrs[0])
	}
	var missing []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		if missing, err = consumed.Missing(ctx, d.rdb, d.consumedKey, ids); err != nil {
			return err
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		if err := d.pause(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	consumed, _ := d.rdb.SCard(ctx, d.consumedKey).Result()
	by, _ := d.rdb.HGetAll(ctx, d.consumedKey+":by-member").Result()
	handled := 0
	for _, v := range by {
		n, _ := strconv.Atoi(v)
		handled += n
	}
	if len(missing) > 0 {
		return fmt.Errorf("%d of %d published messages were never consumed (e.g. eventId %s)", len(missing), len(ids), missing[0])
	}
	d.say("check", "consumed: all %d published messages were handled (%d distinct event ids; %d handler calls, %d redeliveries) ✓",
		len(ids), consumed, handled, handled-int(consumed))
	d.say("check", "handled per member: %s", formatCounts(by, d.memberIDs))
	var problems []string
	for i := 0; i < shards; i++ {
		key := routing.StreamKey(d.o.prefix, i)
		p, err := d.rdb.XPending(ctx, key, d.o.group).Result()
		if err != nil {
			return fmt.Errorf("XPENDING %s: %w", key, err)
		}
		groups, err := d.rdb.XInfoGroups(ctx, key).Result()
		if err != nil {
			return fmt.Errorf("XINFO GROUPS %s: %w", key, err)
		}
		lag := int64(-1)
		for _, g := range groups {
			if g.Name == d.o.group {
				lag = g.Lag
			}
		}
		length, _ := d.rdb.XLen(ctx, key).Result()
		d.say("check", "%s: %d entries, pending %d, lag %d", key, length, p.Count, lag)
		if p.Count != 0 || lag != 0 {
			problems = append(problems, fmt.Sprintf("%s pending %d lag %d", key, p.Count, lag))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("messages left unacked or unread: %s", strings.Join(problems, "; "))
	}
	d.say("check", "acked: nothing pending and nothing unread on any shard ✓")
	return nil
}

// stopMember sends SIGTERM: the runtime finishes in-flight messages, acks,
// and every logical member leaves.
func (d *demo) stopMember(ctx context.Context) error {
	d.say("member", "SIGTERM to the member process (pid %d)", d.memberProc.Cmd.Process.Pid)
	d.memberProc.Stop(15 * time.Second)
	<-d.memberDone
	if code := d.memberProc.Cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("the member process exited with status %d", code)
	}
	ms, err := d.admin.Members(ctx, d.o.prefix, d.o.group)
	if err != nil {
		return err
	}
	var states []string
	for _, m := range ms {
		states = append(states, m.MemberID+"="+m.State)
	}
	d.say("member", "process exited 0; the coordinator's view: %s", strings.Join(states, " "))
	g, err := d.admin.Group(ctx, d.o.prefix, d.o.group)
	if err != nil {
		return err
	}
	d.say("group", "%s with no live members; shard count %d, metadataVersion %d", g.State, g.ShardCount, g.MetadataVersion)
	return nil
}

// history prints `replay history -o text` for the group.
func (d *demo) history(ctx context.Context) error {
	args := []string{"history", "-o", "text", "--redis", d.redisURL, "--stream-prefix", d.o.prefix, "--group", d.o.group}
	if d.logStream != "coordinator:events" {
		args = append(args, "--log-stream", d.logStream)
	}
	shown := "go run ./cmd/replay " + strings.Join(args, " ")
	var cmd *exec.Cmd
	if bin := findBinary(d.o.replayBin, "replay"); bin != "" {
		cmd = exec.CommandContext(ctx, bin, args...)
	} else if goBin := goCommand(); goBin != "" {
		cmd = exec.CommandContext(ctx, goBin, append([]string{"run", "github.com/rscoord/rsc/cmd/replay"}, args...)...)
	} else {
		d.say("replay", "skipped: no replay binary and no go tool here; run it yourself: %s", shown)
		return nil
	}
	d.say("replay", "$ %s", shown)
	out, err := cmd.CombinedOutput()
	d.outMu.Lock()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		fmt.Fprintf(d.out, "           | %s\n", line)
	}
	d.outMu.Unlock()
	if err != nil {
		return fmt.Errorf("replay history: %w", err)
	}
	return nil
}

// pause sleeps, or returns the context's error.
func (d *demo) pause(ctx context.Context, dur time.Duration) error {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return errors.New("interrupted")
	case <-t.C:
		return nil
	}
}

// cleanup stops what the demo started, in reverse order.
func (d *demo) cleanup() {
	if d.stopLoad != nil {
		close(d.stopLoad)
		d.loadDone.Wait()
		d.stopLoad = nil
	}
	var stopped []string
	if d.memberProc != nil && !d.memberProc.Exited() {
		d.memberProc.Stop(10 * time.Second)
		stopped = append(stopped, "member process")
	}
	for _, s := range d.sides {
		if s.proc != nil && !s.proc.Exited() {
			s.proc.Stop(10 * time.Second)
			stopped = append(stopped, s.label+" member process")
		}
	}
	if d.coordProc != nil {
		d.coordProc.Stop(10 * time.Second)
		stopped = append(stopped, "coordinator")
	}
	if d.rdb != nil {
		_ = d.rdb.Close()
	}
	if d.redisProc != nil {
		d.redisProc.Stop(5 * time.Second)
		stopped = append(stopped, "redis-server")
	}
	if d.tmp != "" {
		_ = os.RemoveAll(d.tmp)
		stopped = append(stopped, "removed "+d.tmp)
	}
	if len(stopped) > 0 {
		d.say("cleanup", "stopped %s", strings.Join(stopped, ", "))
	}
}
