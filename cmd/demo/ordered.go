package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// The ordered demo (--ordered, make demo-ordered): two groups side by side,
// one created with "ordering": "KEY" and one without (NONE), get the same
// load and the same reshardings at the same moments. Producers publish each
// key's messages with a sequence number, the next only after the previous
// publish returned; a member process per group records, in Redis, the order
// in which its handlers first saw each key's messages. Before each change
// the handlers stall for a moment (a slow downstream), so the change cuts
// over while the shards that lose keys still hold a backlog: the plain
// group then handles some keys' new messages before their old ones
// (inversions); the ordered group holds the new ones back until the old
// ones are done.

// orderedKeys is how many partition keys each group's producers publish.
const orderedKeys = 200

// stalls returns how long the handlers stall before a change (the backlog it
// cuts over with: two rounds of every key) and after it (at least one round
// published on the new layout before the handlers go on).
func (d *demo) stalls() (before, after time.Duration) {
	round := time.Duration(float64(time.Second) * orderedKeys / float64(d.o.ratePerSecond))
	return 2 * round, round + 200*time.Millisecond
}

// seqScript records one handled message of the ordered demo. KEYS: stall
// flag, the key's seen set, per-key highest sequence handled (hash),
// counters (hash). ARGV: key, sequence. Returns -1 while stalled (nothing
// recorded), 0 for a redelivery, 1 in order, 2 for an inversion (the key's
// message handled for the first time after a later one).
var seqScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
if redis.call('SADD', KEYS[2], ARGV[2]) == 0 then
  redis.call('HINCRBY', KEYS[4], 'duplicates', 1)
  return 0
end
redis.call('HINCRBY', KEYS[4], 'handled', 1)
local n = tonumber(ARGV[2])
local m = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '-1')
if n < m then
  redis.call('HINCRBY', KEYS[4], 'inversions', 1)
  return 2
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
return 1
`)

// seqKeys are the keys of a group's sequence records; they share a hash tag.
type seqKeys string

func (s seqKeys) key(name string) string { return string(s) + ":" + name }

// seqHandler is the member process's handler in the ordered demo.
func seqHandler(rdb redis.UniversalClient, ns seqKeys) member.Handler {
	return func(ctx context.Context, m member.Message) error {
		time.Sleep(time.Millisecond) // a little work
		k := m.Field("k")
		keys := []string{ns.key("stall"), ns.key("seen:" + k), ns.key("max"), ns.key("stats")}
		for {
			res, err := seqScript.Run(ctx, rdb, keys, k, m.Field("n")).Int()
			if err != nil {
				return err
			}
			if res != -1 {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// side is one of the two groups of the ordered demo.
type side struct {
	label     string // "ordered" or "plain"
	prefix    string
	ordering  string
	ns        seqKeys
	shards    int
	base      string
	members   []string
	producers []*producer.Producer
	proc      *process
	procDone  chan struct{}

	mu      sync.Mutex
	next    map[string]int // per key: the sequence numbers published are 0..next-1
	pubErrs int
	lastErr error
}

type seqCounts struct{ handled, duplicates, inversions int64 }

func (s *side) counts(ctx context.Context, rdb *redis.Client) seqCounts {
	h, _ := rdb.HGetAll(ctx, s.ns.key("stats")).Result()
	n := func(f string) int64 { v, _ := strconv.ParseInt(h[f], 10, 64); return v }
	return seqCounts{handled: n("handled"), duplicates: n("duplicates"), inversions: n("inversions")}
}

func (s *side) published() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := 0
	for _, n := range s.next {
		t += n
	}
	return t
}

func (d *demo) runOrdered(ctx context.Context) error {
	fmt.Fprintf(d.out, "rsc demo, ordered groups: a group with \"ordering\": \"KEY\" and a plain one, side by side, same load, same reshardings.\n")
	fmt.Fprintf(d.out, "each group: %d keys published in sequence by %d producers at ~%d msgs/s; one member process with concurrency %d.\n",
		orderedKeys, d.o.producers, d.o.ratePerSecond, d.o.concurrency)

	d.section("Set-up")
	if err := d.setup(ctx); err != nil {
		return err
	}
	d.sides = []*side{
		{label: "ordered", prefix: d.o.prefix + "-ordered", ordering: client.OrderingKey, base: "ordered-worker"},
		{label: "plain", prefix: d.o.prefix + "-plain", ordering: client.OrderingNone, base: "plain-worker"},
	}
	for _, s := range d.sides {
		s.ns = seqKeys("{rsc-demo:" + s.prefix + "}")
		s.next = map[string]int{}
		shards, ordering := 4, s.ordering
		var g client.Group
		if err := d.admin.Do(ctx, http.MethodPost, client.GroupPath(s.prefix, d.o.group),
			wire.CreateRequest{RequestedBy: "demo", Reason: "ordered demo", InitialShardCount: &shards, Ordering: &ordering}, &g); err != nil {
			return err
		}
		s.shards = g.ShardCount
		d.say("admin", "POST %s {\"initialShardCount\":4,\"ordering\":%q} → %s group: %d shards, ordering %s",
			client.GroupPath(s.prefix, d.o.group), s.ordering, s.label, g.ShardCount, g.Ordering)
	}

	d.section("Consumers join, producers start (4 shards each)")
	for _, s := range d.sides {
		if err := d.startSideMember(s); err != nil {
			return err
		}
	}
	for _, s := range d.sides {
		if err := d.waitGroupStable(ctx, s.prefix, s.members...); err != nil {
			return err
		}
	}
	if err := d.startSideProducers(ctx); err != nil {
		return err
	}
	d.say("producers", "each group: %d producers publish one message of each of their keys per round, a key's message n+1 only after the publish of n returned (fields k, n)", d.o.producers)
	if err := d.pause(ctx, 2*time.Second); err != nil {
		return err
	}
	d.orderedProgress(ctx)

	d.section("Scale out 4 → 7 while publishing (not a power of two: keys move between every pair of shards)")
	if err := d.reshardBoth(ctx, 7); err != nil {
		return err
	}
	d.orderedProgress(ctx)

	d.section("Scale in 7 → 3 while publishing")
	if err := d.reshardBoth(ctx, 3); err != nil {
		return err
	}
	if err := d.pause(ctx, time.Second); err != nil {
		return err
	}

	d.section("Stop producing; check every key's sequence")
	d.stopSideProducers()
	if err := d.verifyOrdered(ctx); err != nil {
		return err
	}

	d.section("Shut the member processes down (graceful leave)")
	for _, s := range d.sides {
		d.say("member", "SIGTERM to the %s group's member process (pid %d)", s.label, s.proc.Cmd.Process.Pid)
		s.proc.Stop(15 * time.Second)
		<-s.procDone
		if code := s.proc.Cmd.ProcessState.ExitCode(); code != 0 {
			return fmt.Errorf("the %s group's member process exited with status %d", s.label, code)
		}
	}
	d.say("member", "both exited 0")
	return nil
}

// startSideMember starts a group's member process with the sequence
// recording handler, and narrates its events.
func (d *demo) startSideMember(s *side) error {
	env := append(memberEnv(d.coordURL, d.o.adminUser, d.o.adminPassword, d.redisURL, s.prefix, d.o.group, s.base, d.o.concurrency, d.consumedKey, d.memberLease),
		"RSC_DEMO_CHECK="+string(s.ns))
	var err error
	if s.proc, s.procDone, err = startMemberProcess(s.label+" member", env, func(e memberEvent) { d.narrateSide(s, e) }); err != nil {
		return err
	}
	s.members = member.MemberIDs(s.base, d.o.concurrency)
	d.say("member", "%s group: member process (pid %d), logical members %s", s.label, s.proc.Cmd.Process.Pid, strings.Join(s.members, ", "))
	return nil
}

func (d *demo) narrateSide(s *side, e memberEvent) {
	switch e.Kind {
	case string(member.EventHeld):
		d.say("member", "%s holds back %d entries of %s: %s", e.Member, e.Count, shardList(s.prefix, e.Shards), e.Detail)
	case string(member.EventResumed):
		d.say("member", "%s resumes %s: the held entries from %s are handled now", e.Member, shardList(s.prefix, e.Shards), e.Detail)
	case string(member.EventClaimed):
		d.say("member", "%s claimed %d entries a previous owner left pending on %s, handles them first", e.Member, e.Count, shardList(s.prefix, e.Shards))
	case string(member.EventFenced):
		d.say("member", "%s was told %s: stopped everything, rejoining", e.Member, e.Detail)
	}
}

// waitGroupStable waits until a group is STABLE with these members reading
// every shard.
func (d *demo) waitGroupStable(ctx context.Context, prefix string, members ...string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		g, gerr := d.admin.Group(ctx, prefix, d.o.group)
		a, aerr := d.admin.Assignments(ctx, prefix, d.o.group)
		if gerr == nil && aerr == nil && g.State == "STABLE" && len(g.TargetAssignmentSummary) == len(members) && len(g.Barriers) == 0 {
			total := 0
			for _, m := range members {
				total += len(a.CurrentAssignments[m])
			}
			if total == g.ShardCount {
				d.say("group", "%s: STABLE, %d shards; %s", prefix, g.ShardCount, formatAssignment(a, members))
				return nil
			}
		}
		if err := d.pause(ctx, 50*time.Millisecond); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not become STABLE with members %v in 60s", prefix, members)
		}
	}
}

func (d *demo) startSideProducers(ctx context.Context) error {
	d.stopLoad = make(chan struct{})
	for _, s := range d.sides {
		for i := 0; i < d.o.producers; i++ {
			p, err := producer.New(producer.Config{Coordinator: d.admin, Redis: d.rdb, StreamPrefix: s.prefix, ConsumerGroup: d.o.group, RefreshInterval: time.Second})
			if err != nil {
				return err
			}
			s.producers = append(s.producers, p)
			var own []string
			for k := i; k < orderedKeys; k += d.o.producers {
				own = append(own, "customer-"+strconv.Itoa(k))
			}
			// Every key once per round: the group publishes ratePerSecond.
			every := time.Duration(float64(time.Second) * orderedKeys / float64(d.o.ratePerSecond))
			seq := make([]int, len(own))
			d.load(ctx, every, func(int) {
				msgs := make([]producer.Message, len(own))
				for j, k := range own {
					msgs[j] = producer.Message{PartitionKey: k, Fields: map[string]any{"k": k, "n": strconv.Itoa(seq[j])}}
				}
				res, err := p.PublishBatch(context.Background(), msgs)
				s.mu.Lock()
				for j, r := range res {
					if r.Err == nil {
						seq[j]++
						s.next[own[j]] = seq[j]
					}
				}
				if err != nil {
					s.pubErrs++
					s.lastErr = err
				}
				s.mu.Unlock()
			})
		}
	}
	return nil
}

func (d *demo) stopSideProducers() {
	if !d.stopLoading() {
		return
	}
	for _, s := range d.sides {
		d.say("producers", "%s group: stopped, %d messages published (%d publish calls failed, retried with the same sequence numbers)", s.label, s.published(), s.pubErrs)
	}
}

// stall makes the handlers of both groups wait (or go on again).
func (d *demo) stall(ctx context.Context, on bool) error {
	for _, s := range d.sides {
		var err error
		if on {
			err = d.rdb.Set(ctx, s.ns.key("stall"), "1", 0).Err()
		} else {
			err = d.rdb.Del(ctx, s.ns.key("stall")).Err()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// reshardBoth scales both groups to `to` at the same moment, cutting over
// with a backlog, and waits until both changes are complete.
func (d *demo) reshardBoth(ctx context.Context, to int) error {
	stallBefore, stallAfter := d.stalls()
	d.say("stall", "the handlers of both groups stall for %s (a slow downstream) while producers go on: a backlog builds up", stallBefore)
	if err := d.stall(ctx, true); err != nil {
		return err
	}
	defer func() { _ = d.stall(context.WithoutCancel(ctx), false) }()
	if err := d.pause(ctx, stallBefore); err != nil {
		return err
	}
	ids := map[*side]string{}
	for _, s := range d.sides {
		m, err := d.admin.Scale(ctx, s.prefix, d.o.group, to, "demo", fmt.Sprintf("ordered demo: %d -> %d", s.shards, to))
		if err != nil {
			return err
		}
		ids[s] = m.ReshardingID
		for _, p := range s.producers {
			if err := p.Refresh(ctx); err != nil {
				return err
			}
		}
		d.say("admin", "%s group: POST .../scale {\"targetShardCount\":%d} → %s %d → %d", s.label, to, shortID(m.ReshardingID), s.shards, to)
	}
	if g, err := d.admin.Group(ctx, d.sides[0].prefix, d.o.group); err == nil && len(g.Barriers) > 0 {
		var shards []int
		for _, b := range g.Barriers {
			shards = append(shards, b.Shard.ShardIndex)
		}
		d.say("ordering", "ordered group: fences raised at the cutover; %s hold entries published after it (barriers) until Redis shows the backlog of the shards their keys came from acked",
			shardList(d.sides[0].prefix, shards))
	}
	if err := d.pause(ctx, stallAfter); err != nil {
		return err
	}
	d.say("stall", "handlers go on; producers published on the new layout meanwhile")
	if err := d.stall(ctx, false); err != nil {
		return err
	}
	for _, s := range d.sides {
		deadline := time.Now().Add(60 * time.Second)
		for {
			m, err := d.admin.Migration(ctx, s.prefix, d.o.group, ids[s])
			if err == nil && m.State == "DEPRECATED" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s group: resharding %s did not finish in 60s", s.label, ids[s])
			}
			if err := d.pause(ctx, 50*time.Millisecond); err != nil {
				return err
			}
		}
		for i := to; i < s.shards; i++ {
			key := routing.StreamKey(s.prefix, i)
			for n, _ := d.rdb.Exists(ctx, key).Result(); n != 0; n, _ = d.rdb.Exists(ctx, key).Result() {
				if err := d.pause(ctx, 50*time.Millisecond); err != nil {
					return err
				}
			}
		}
		s.shards = to
		d.say("reshard", "%s group: %s DEPRECATED (done)", s.label, shortID(ids[s]))
		if err := d.waitGroupStable(ctx, s.prefix, s.members...); err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) orderedProgress(ctx context.Context) {
	for _, s := range d.sides {
		c := s.counts(ctx, d.rdb)
		d.say("progress", "%-7s group: published %d, handled %d, inversions so far %d", s.label, s.published(), c.handled, c.inversions)
	}
}

// verifyOrdered waits until every published message of both groups was
// handled, then prints both groups' figures side by side. It fails if the
// ordered group shows an inversion or either group lost a message.
func (d *demo) verifyOrdered(ctx context.Context) error {
	lost := map[*side]int{}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range d.sides {
		for {
			n, err := d.lost(ctx, s)
			if err != nil {
				return err
			}
			lost[s] = n
			if n == 0 || time.Now().After(deadline) {
				break
			}
			if err := d.pause(ctx, 100*time.Millisecond); err != nil {
				return err
			}
		}
	}
	d.outMu.Lock()
	fmt.Fprintf(d.out, "\n   %-8s %-8s %10s %10s %6s %12s %11s\n", "group", "ordering", "published", "handled", "lost", "redelivered", "inversions")
	for _, s := range d.sides {
		c := s.counts(ctx, d.rdb)
		fmt.Fprintf(d.out, "   %-8s %-8s %10d %10d %6d %12d %11d\n", s.label, s.ordering, s.published(), c.handled, lost[s], c.duplicates, c.inversions)
	}
	fmt.Fprintf(d.out, "\n   inversion: a key's message handled for the first time after a later message of the same key\n\n")
	d.outMu.Unlock()
	ordered, plain := d.sides[0], d.sides[1]
	oc, pc := ordered.counts(ctx, d.rdb), plain.counts(ctx, d.rdb)
	d.orderedSummary = fmt.Sprintf("ordered group: %d messages, %d lost, %d inversions; plain group: %d messages, %d lost, %d inversions",
		ordered.published(), lost[ordered], oc.inversions, plain.published(), lost[plain], pc.inversions)
	for _, s := range d.sides {
		if lost[s] > 0 {
			return fmt.Errorf("%s group: %d published messages were never handled", s.label, lost[s])
		}
	}
	if oc.inversions > 0 {
		return fmt.Errorf("the ordered group handled %d messages after a later message of their key", oc.inversions)
	}
	d.say("check", "ordered group: every key's messages handled in the order they were published ✓")
	if pc.inversions > 0 {
		d.say("check", "plain group: %d messages handled after a later one of their key (the reshardings moved keys while their old messages waited)", pc.inversions)
	} else {
		d.say("check", "plain group: no inversion this time (the backlogs were handled before the keys' new messages)")
	}
	return nil
}

// lost counts a group's published messages never handled.
func (d *demo) lost(ctx context.Context, s *side) (int, error) {
	s.mu.Lock()
	next := make(map[string]int, len(s.next))
	for k, n := range s.next {
		next[k] = n
	}
	s.mu.Unlock()
	lost := 0
	for k, n := range next {
		if n == 0 {
			continue
		}
		members := make([]any, n)
		for i := range members {
			members[i] = strconv.Itoa(i)
		}
		found, err := d.rdb.SMIsMember(ctx, s.ns.key("seen:"+k), members...).Result()
		if err != nil {
			return 0, err
		}
		for _, ok := range found {
			if !ok {
				lost++
			}
		}
	}
	return lost, nil
}
