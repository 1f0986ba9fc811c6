package coordinator_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// The ordered simulation (issue #15): the simulation of sim_test.go on a
// group created with ordering KEY, with what the Go SDK does on both sides.
//
//   - Producers publish keyed entries (a pool of keys, a few hot ones), each
//     key's entries numbered in publish order. They route with routeV1 on a
//     routing (shard count and metadata version) refreshed from the
//     coordinator every 5 or 30 virtual seconds, stale on purpose, through the
//     publish script: refused while the group's fence on the shard is above
//     the routing version (the producer refreshes and publishes again),
//     tagged with the routing version (_rsc_rv) when the routing says KEY.
//   - Members run the Go SDK member runtime (goClient): Spring's protocol
//     (DRAINING, then REVOKED; a graceful leave), an assignment lease of 15 s
//     from each accepted answer's request outside which they read nothing,
//     each shard handled entry by entry in id order (a per-seed number of
//     entries per poll, so backlogs build up), acked on the next poll; in an
//     ordered group, no entry past a barrier of the last applied answer and no
//     entry tagged with a routing version above that answer's metadata
//     version (both wait, and the member heartbeats every second meanwhile),
//     and on taking a shard every pending entry claimed at once, in id order,
//     before anything new is read; a held entry no longer pending for the
//     reader (Redis lost the consumer group or the stream) makes it start
//     over. Members crash, restart, leave, stall and lose answers as in
//     TestSim; the operator scales (powers of two or not, down to 0) and
//     rolls back (both policies), the coordinator restarts on the same log,
//     and shard Redis has outages, hides lags and loses streams and consumer
//     groups.
//
// Invariants, on top of TestSim's (checked at every step):
//
//  7. Barrier. When a member handles entry e of shard t, published with
//     routing version rv, the coordinator's committed state at that moment
//     has no (unreleased) barrier B on t with e's id above B's After and
//     B's fence <= rv.
//     Why this statement: B exists for the keys its layout change moved into
//     t; their entries on the source shards up to the cutover must be
//     handled first. Every entry of such a key written on t after the
//     cutover carries rv >= B's fence: under any older routing the key
//     routes to a shard that lost it, whose fence (raised atomically with
//     the cutover read, and never lowered below a recorded change) refuses
//     the publish. An entry on t with rv below the fence passed t's fence
//     check, so t lost no keys at B's change: its key stayed on t, and B does
//     not concern it (the barriers of the earlier changes that moved its key
//     into t have fences <= rv and are checked for it). Such entries are
//     also exactly the ones a member may rightly handle before it knows B: it
//     learns B only from an answer at least as new as the cutover, and the
//     rv check makes it wait for such an answer for every entry B concerns.
//     So this is everything the barrier promises, and nothing a correct
//     member could not honour; invariant 8 is its end-to-end consequence.
//  8. Per-key order. When an entry of key k is handled for the first time,
//     every entry published for k before it has been handled (or was lost
//     with its stream by the shard Redis): first handlings follow publish
//     order, across reshardings, rollbacks, crashes and restarts. Repeated
//     handlings (redeliveries after a crash) are at least once, not order.
//  9. Nothing lost. Once the calm phase let everything settle (producers
//     publish for its first minute), every published entry was handled, unless
//     Redis lost its stream; no barrier waits and no fence on a routed shard
//     is above the group's metadata version.
//
// TestSimUnordered runs the same workload on a group with ordering NONE and
// requires inversions of invariant 8 to happen there (counted, not failed):
// the check can fail.
//
//	go test ./commands -run 'TestSimOrdered$'                              # 200 seeds, 150 steps
//	RSC_SIM_ORDERED_SEEDS=2000 go test ./commands -run 'TestSimOrdered$' -sim.steps=600 -timeout 1h
//	go test ./commands -count=1 -run 'TestSimOrdered$' -sim.seed=7 -sim.v  # replay one
//
// The bugs it found are reduced to the tests at the end of this file.

const (
	// sdkLease is the Go SDK's assignment lease (5 heartbeat intervals).
	sdkLease = 15 * time.Second
	// sdkHoldHeartbeat is the heartbeat interval while a reader holds entries
	// back (HoldHeartbeatInterval: 200 ms in the SDK; 1 s keeps the number of
	// steps down).
	sdkHoldHeartbeat = time.Second
	// sdkClaimMinIdle is the SDK's ClaimMinIdle (and its sweep's idle time).
	sdkClaimMinIdle = 5 * time.Second
	// sdkBatchSize is the SDK's XREADGROUP COUNT.
	sdkBatchSize = 10
	// ordCalmPublish is how many calm seconds producers keep publishing.
	ordCalmPublish = 60
	// ordCalmBudget is how many entries a reader handles per calm second.
	ordCalmBudget = 1000
)

// orderedRuns is how many seeds TestSimOrdered and TestSimUnordered run and
// how many random steps each (then the calm phase): RSC_SIM_ORDERED_SEEDS and
// -sim.steps override them.
func orderedRuns(seeds, steps, shortSteps int) (int, int) {
	n := seeds
	if testing.Short() {
		steps = shortSteps
	}
	if v, err := strconv.Atoi(os.Getenv("RSC_SIM_ORDERED_SEEDS")); err == nil && v > 0 {
		n = v
	}
	if *simSteps > 0 {
		steps = *simSteps
	}
	return n, steps
}

func TestSimOrdered(t *testing.T) {
	seeds, steps := orderedRuns(200, 150, 100)
	var bg sync.WaitGroup
	defer bg.Wait()
	if *simSeed != 0 {
		runOrderedSim(t, *simSeed, steps, *simOff, events.OrderingKey, &bg)
		return
	}
	t.Run("seeds", func(t *testing.T) {
		for seed := int64(1); seed <= int64(seeds); seed++ {
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
				t.Parallel()
				runOrderedSim(t, seed, steps, *simOff, events.OrderingKey, &bg)
			})
		}
	})
}

// TestSimUnordered runs TestSimOrdered's workload on a group without
// ordering: its entries are handled out of publish order (some seeds at least),
// or invariant 8 could not tell.
func TestSimUnordered(t *testing.T) {
	seeds, steps := orderedRuns(30, 100, 50)
	var bg sync.WaitGroup
	defer bg.Wait()
	if *simSeed != 0 {
		r := runOrderedSim(t, *simSeed, steps, *simOff, events.OrderingNone, &bg)
		t.Logf("seed %d: %d inversions", *simSeed, r.inversions)
		return
	}
	var mu sync.Mutex
	inversions, inverted := 0, 0
	t.Run("seeds", func(t *testing.T) {
		for seed := int64(1); seed <= int64(seeds); seed++ {
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
				t.Parallel()
				r := runOrderedSim(t, seed, steps, *simOff, events.OrderingNone, &bg)
				mu.Lock()
				defer mu.Unlock()
				inversions += r.inversions
				if r.inversions > 0 {
					inverted++
				}
			})
		}
	})
	t.Logf("ordering NONE: %d of %d seeds handled entries out of publish order (%d inversions)", inverted, seeds, inversions)
	if inversions == 0 {
		t.Fatalf("ordering NONE: no seed of %d handled an entry before an earlier one of its key; the per-key order check cannot fail on this workload", seeds)
	}
}

// TestSimOrderedDeterministic: one seed twice, the same transcript.
func TestSimOrderedDeterministic(t *testing.T) {
	var bg sync.WaitGroup
	defer bg.Wait()
	for _, seed := range []int64{4, 9} {
		a := runOrderedSim(t, seed, 150, "", events.OrderingKey, &bg)
		b := runOrderedSim(t, seed, 150, "", events.OrderingKey, &bg)
		if a.digest != b.digest {
			t.Fatalf("ordered seed %d is not deterministic: transcript digests %x vs %x", seed, a.digest, b.digest)
		}
	}
}

type orderedResult struct {
	digest     uint64
	inversions int
}

func runOrderedSim(t *testing.T, seed int64, steps int, off, ordering string, bg *sync.WaitGroup) orderedResult {
	t.Helper()
	s := newSim(t, seed, off, ordering)
	s.bg = bg
	s.run = "TestSimOrdered"
	if ordering != events.OrderingKey {
		s.run = "TestSimUnordered"
	}
	defer s.close()
	s.steps = steps
	for i := 0; i < steps; i++ {
		s.randomStep()
	}
	s.calmDown()
	s.finalChecks()
	o := s.ord
	s.hook.mu.Lock()
	cutovers, released := s.hook.counts["resharding.cutover"], s.hook.counts["resharding.barrier_released"]
	activated, rolledBack := s.hook.counts["resharding.activated"], s.hook.counts["resharding.rolled_back"]
	s.hook.mu.Unlock()
	t.Logf("seed %d (%s): %d steps, virtual time %s, %d keys, batch %d: %d entries published (%d refused by a fence first), %d handled again, %d lost with a stream, %d unhandled; %d reshardings, %d rollbacks, %d coordinator restarts, %d cutovers, %d barrier releases; holds: %d at a barrier, %d for a routing version; %d claimed on takeover; %d inversions",
		seed, ordering, s.step, s.clock.Now().Sub(s.start), len(o.keys), o.batch, len(o.entries), o.stats["stale"], o.stats["handled-again"], o.stats["lost"], o.stats["unhandled"],
		activated, rolledBack, s.stats["coordinator-restart"], cutovers, released, o.stats["hold-barrier"], o.stats["hold-rv"], o.stats["claimed"], o.inversions)
	return orderedResult{digest: s.digest, inversions: o.inversions}
}

// --- the ordered simulation's state ---

// ledgerEntry is what the simulation knows of one published entry.
type ledgerEntry struct {
	e       fakeEntry
	shard   int
	handled int  // times a member handled it
	lost    bool // vanished with its stream before anybody handled it
}

type orderSim struct {
	s        *sim
	ordering string
	keys     []string
	hot      int // the first hot keys get half of the publishes
	batch    int // entries a reader handles per poll
	extra    float64
	nextSeq  map[string]int
	entries  map[int64]*ledgerEntry
	byKey    map[string][]*ledgerEntry // by seq-1
	low      map[string]int            // per key: index of the first entry neither handled nor lost
	calmSec  int
	stats    map[string]int

	inversions int
	// The committed barriers (barriers()) of coordinator cacheC at log
	// position cacheID.
	cacheC    *coordinator.Coordinator
	cacheID   string
	cacheBars []*projection.Barrier
}

func newOrderSim(s *sim, ordering string) *orderSim {
	o := &orderSim{
		s: s, ordering: ordering, nextSeq: map[string]int{}, entries: map[int64]*ledgerEntry{},
		byKey: map[string][]*ledgerEntry{}, low: map[string]int{}, stats: map[string]int{},
	}
	n := 4 + s.rng.IntN(60)
	for i := 0; i < n; i++ {
		o.keys = append(o.keys, fmt.Sprintf("k%02d", i))
	}
	o.hot = min(n, 1+s.rng.IntN(4))
	o.batch = 1 + s.rng.IntN(8)
	o.extra = 0.05 + 0.2*s.rng.Float64()
	s.act(" ordering=%s keys=%d hot=%d batch=%d extra=%.2f", ordering, n, o.hot, o.batch, o.extra)
	return o
}

func (o *orderSim) ordered() bool { return o.ordering == events.OrderingKey }

func (o *orderSim) pickKey() string {
	if o.s.rng.IntN(2) == 0 {
		return o.keys[o.s.rng.IntN(o.hot)]
	}
	return o.keys[o.s.rng.IntN(len(o.keys))]
}

// step is, with probability extra, an action of the ordered simulation
// instead of TestSim's random step: a burst of publishes, a scale, a
// rollback or a coordinator restart (reshardings with backlogs at their
// cutovers). It reports whether it acted.
func (o *orderSim) step() bool {
	s := o.s
	if s.rng.Float64() >= o.extra {
		return false
	}
	switch r := s.rng.Float64(); {
	case r < 0.55:
		s.publish(s.producers[s.rng.IntN(len(s.producers))], 5+s.rng.IntN(40))
	case r < 0.8:
		if s.on("scale") {
			s.scale()
		}
	case r < 0.93:
		if s.on("rollback") {
			s.rollback()
		}
	default:
		if s.on("restart") {
			s.restartCoordinator()
		}
	}
	return true
}

// calmSecond is the ordered simulation's part of a calm second: producers
// publish for the first ordCalmPublish seconds, and members handle what they
// can (their readers run all the time).
func (o *orderSim) calmSecond(i int) {
	s := o.s
	o.calmSec = i + 1
	if i < ordCalmPublish {
		s.publish(s.producers[0], 1+s.rng.IntN(3))
	}
	for _, m := range s.members {
		if m.alive {
			s.consumeSDK(m, ordCalmBudget)
		}
	}
}

// settled reports, after calm second i, whether the simulation came to rest
// after the producers stopped: every entry handled, no resharding active, no
// barrier waiting, the group STABLE, every assignable shard read by exactly
// the member it is granted to, every process live for the coordinator. The
// calm phase ends there (the final checks then hold), not after
// simCalmSteps seconds.
func (o *orderSim) settled(i int) bool {
	s := o.s
	if i < ordCalmPublish+10 || o.stats["handled-first"]+o.stats["lost"] < len(o.entries) {
		return false
	}
	g, ok := s.c.State().Group(simKey)
	if !ok || g.Active() != nil || len(g.Barriers) > 0 || g.State() != "STABLE" {
		return false
	}
	readers := map[int][]string{}
	for _, m := range s.members {
		if !m.alive {
			continue
		}
		if pm := g.Member(m.id); pm == nil || !pm.Live() || len(m.draining) > 0 {
			return false
		}
		for _, sh := range m.readSet() {
			readers[sh] = append(readers[sh], m.id)
		}
	}
	for sh := 0; sh < g.AssignableCount; sh++ {
		if len(readers[sh]) != 1 {
			return false
		}
		if pm := g.Member(readers[sh][0]); !containsInt(pm.Granted, sh) {
			return false
		}
	}
	return len(readers) == g.AssignableCount
}

// endStep files the entries Redis lost with their streams.
func (o *orderSim) endStep() {
	for _, e := range o.s.fake.takeDropped() {
		if le := o.entries[e.id]; le != nil && le.handled == 0 && !le.lost {
			le.lost = true
			o.stats["lost"]++
			o.advanceLow(le.e.key)
		}
	}
}

func (o *orderSim) record(e fakeEntry, shard int) {
	le := &ledgerEntry{e: e, shard: shard}
	o.entries[e.id] = le
	o.byKey[e.key] = append(o.byKey[e.key], le)
	if len(o.byKey[e.key]) != e.seq {
		o.s.fail("ledger: entry %s of key %s has seq %d, but %d entries of the key are known", fakeID(e.id), e.key, e.seq, len(o.byKey[e.key]))
	}
}

func (o *orderSim) advanceLow(key string) {
	list := o.byKey[key]
	for o.low[key] < len(list) && (list[o.low[key]].handled > 0 || list[o.low[key]].lost) {
		o.low[key]++
	}
}

// barriers returns the unreleased barriers in the coordinator's committed
// state (the projection, folded from the log).
func (o *orderSim) barriers() []*projection.Barrier {
	c := o.s.c
	id := c.State().LastID()
	if o.cacheC != c || o.cacheID != id {
		g, ok := c.State().Group(simKey)
		if !ok {
			o.s.fail("the group disappeared")
		}
		o.cacheC, o.cacheID, o.cacheBars = c, id, g.Barriers
	}
	return o.cacheBars
}

func (o *orderSim) entryString(le *ledgerEntry) string {
	return fmt.Sprintf("%s #%d (%s on shard %d, rv %d)", le.e.key, le.e.seq, fakeID(le.e.id), le.shard, le.e.rv)
}

// handle is member m's handler called with entry e of shard sh: invariants
// 7 and 8.
func (o *orderSim) handle(m *simMember, sh int, e fakeEntry) {
	s := o.s
	le := o.entries[e.id]
	if le == nil {
		s.fail("%s handled %s on shard %d, which no producer published", m.id, fakeID(e.id), sh)
	}
	if o.ordered() {
		for _, b := range o.barriers() {
			if b.Shard == sh && b.Fence <= e.rv && e.id > fakeSeq(b.After) {
				var src []string
				for _, c := range b.Sources {
					src = append(src, fmt.Sprintf("%d up to %s", c.ShardIndex, c.LastID))
				}
				s.fail("invariant 7 (barrier): %s handled %s beyond the unreleased barrier on shard %d of %s (fence %d, after %s, waiting on shards %s); the member knows version %d, barriers %v",
					m.id, o.entryString(le), sh, s.hook.alias(b.ReshardingID), b.Fence, b.After, strings.Join(src, ", "), m.sdk.know.version, m.sdk.know.barriers)
			}
		}
	}
	le.handled++
	if le.handled > 1 {
		o.stats["handled-again"]++
		return
	}
	o.stats["handled-first"]++
	list := o.byKey[e.key]
	for j := o.low[e.key]; j < e.seq-1; j++ {
		prev := list[j]
		if prev.handled > 0 || prev.lost {
			continue
		}
		if o.ordered() {
			s.fail("invariant 8 (per-key order): %s handled %s before %s, which is %s",
				m.id, o.entryString(le), o.entryString(prev), s.fake.where(simKey.StreamPrefix, simKey.ConsumerGroup, prev.shard, prev.e.id))
		}
		o.inversions++
		break
	}
	o.advanceLow(e.key)
}

// finalChecks is invariant 9, after the calm phase.
func (o *orderSim) finalChecks(g *projection.Group) {
	s := o.s
	if o.ordered() {
		if len(g.Barriers) > 0 {
			s.fail("invariant 9: after %d calm seconds barriers still wait: %s", o.calmSec, barrierString(g.Barriers))
		}
		for sh := 0; sh < g.ShardCount; sh++ {
			if f := s.fake.fence(simKey.StreamPrefix, simKey.ConsumerGroup, sh); f > g.MetadataVersion {
				s.fail("invariant 9: after %d calm seconds the fence on shard %d is %d, above the metadata version %d: up-to-date producers are refused", o.calmSec, sh, f, g.MetadataVersion)
			}
		}
	}
	var missing []string
	n := 0
	for _, key := range sortedKeys(o.byKey) {
		for _, le := range o.byKey[key] {
			if le.handled > 0 || le.lost {
				continue
			}
			n++
			if len(missing) < 10 {
				missing = append(missing, o.entryString(le)+": "+s.fake.where(simKey.StreamPrefix, simKey.ConsumerGroup, le.shard, le.e.id))
			}
		}
	}
	o.stats["unhandled"] = n
	if n > 0 && o.ordered() {
		s.fail("invariant 9: after %d calm seconds %d of %d published entries were never handled:\n  %s", o.calmSec, n, len(o.entries), strings.Join(missing, "\n  "))
	}
}

func barrierString(bs []*projection.Barrier) string {
	var parts []string
	for _, b := range bs {
		var src []string
		for _, c := range b.Sources {
			src = append(src, fmt.Sprintf("%d<=%s", c.ShardIndex, c.LastID))
		}
		parts = append(parts, fmt.Sprintf("shard %d after %s fence %d since %s on [%s]", b.Shard, b.After, b.Fence, b.Since.Format("15:04:05"), strings.Join(src, " ")))
	}
	return strings.Join(parts, "; ")
}

func (o *orderSim) describe() string {
	s := o.s
	var b strings.Builder
	b.WriteString("--- ordering ---\n")
	if g, ok := s.c.State().Group(simKey); ok {
		fmt.Fprintf(&b, "  barriers: %s\n", barrierString(g.Barriers))
		var req []events.BarrierSource
		seen := map[string]bool{}
		for _, br := range g.Barriers {
			for _, c := range br.Sources {
				if key := c.StreamKey + " " + c.LastID; !seen[key] {
					seen[key] = true
					req = append(req, events.BarrierSource{ShardIndex: c.ShardIndex, StreamKey: c.StreamKey, CutoverID: c.LastID})
				}
			}
		}
		if reads, err := s.fake.BarrierEvidence(context.Background(), simKey.ConsumerGroup, req); err == nil {
			b.WriteString("  sources now:")
			for _, r := range reads {
				fmt.Fprintf(&b, " [%d<=%s exists=%v delivered=%q pending=%d proven=%v]", r.ShardIndex, r.CutoverID, r.Exists, r.LastDelivered, r.Pending, projection.SourceProven(r.BarrierProof))
			}
			b.WriteString("\n")
		}
		b.WriteString("  fences:")
		for sh := 0; sh < 16; sh++ {
			if f := s.fake.fence(simKey.StreamPrefix, simKey.ConsumerGroup, sh); f > 0 {
				fmt.Fprintf(&b, " %d:%d", sh, f)
			}
		}
		b.WriteString("\n")
	}
	for _, m := range s.members {
		if !m.alive || m.sdk == nil {
			continue
		}
		d := m.sdk
		lease := "none"
		if !d.leaseUntil.IsZero() {
			lease = "until " + s.elapsed(d.leaseUntil)
		}
		fmt.Fprintf(&b, "  %s knows version %d ordered=%v barriers=%v lease %s;", m.id, d.know.version, d.know.ordered, d.know.barriers, lease)
		for _, sh := range sortedInts(d.readers) {
			r := d.readers[sh]
			head := ""
			if len(r.queue) > 0 {
				head = fmt.Sprintf(" head %s rv %d", fakeID(r.queue[0].id), r.queue[0].rv)
			}
			fmt.Fprintf(&b, " [%d claimed=%v queue=%d%s inflight=%d held=%q]", sh, r.claimed, len(r.queue), head, len(r.inflight), r.held)
		}
		b.WriteString("\n")
	}
	for _, key := range sortedKeys(o.byKey) {
		if list := o.byKey[key]; o.low[key] < len(list) {
			fmt.Fprintf(&b, "  key %s: %d published, first unhandled %s\n", key, len(list), o.entryString(list[o.low[key]]))
		}
	}
	return b.String()
}

func sortedInts[V any](m map[int]V) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Ints(out)
	return out
}

// --- producers ---

// refreshRouting is GET .../producer-routing.
func (s *sim) refreshRouting(p *simProducer) {
	p.fetchedAt = s.now()
	g, ok := s.c.State().Group(simKey)
	if !ok {
		p.count = 0
		return
	}
	p.count, p.mv, p.ordered = g.ShardCount, g.MetadataVersion, g.Ordered()
}

// publishKeyed is the Go SDK producer publishing n entries, each of a key of
// the pool, one after the other.
func (s *sim) publishKeyed(p *simProducer, n int) {
	o := s.ord
	ok, stale, missing, failed := 0, 0, 0, 0
	for i := 0; i < n; i++ {
		key := o.pickKey()
		seq := o.nextSeq[key] + 1
		done := false
		for attempt := 0; attempt < 4 && !done; attempt++ {
			if (attempt == 0 && (s.calm || s.now().Sub(p.fetchedAt) >= p.refresh)) || p.count == 0 {
				s.refreshRouting(p)
			}
			if p.count == 0 {
				break
			}
			sh, err := routing.RouteKey(key, p.count)
			if err != nil {
				s.fail("route %s over %d shards: %v", key, p.count, err)
			}
			e, res := s.fake.publishFenced(simKey.StreamPrefix, simKey.ConsumerGroup, sh, p.mv, p.ordered, key, seq)
			switch res {
			case published:
				o.record(e, sh)
				o.nextSeq[key] = seq
				done = true
				ok++
			case publishStale:
				// RSCSTALE: refresh the routing, publish on the new layout.
				stale++
				o.stats["stale"]++
				s.refreshRouting(p)
			case publishNoStream:
				missing++
				s.refreshRouting(p)
			}
		}
		if !done {
			failed++
		}
	}
	s.act(" publish %d keyed (routing %d@%d; %d refused by a fence, %d NOMKSTREAM, %d failed)", ok, p.count, p.mv, stale, missing, failed)
	if failed > 0 && s.calm && o.calmSec > 30 && p.count > 0 {
		s.fail("invariant 9: %d publishes with fresh routing (%d shards, version %d) failed after %d calm seconds", failed, p.count, p.mv, o.calmSec)
	}
}

// --- the Go SDK member runtime ---

// sdkKnowledge is what the last applied answer said (client/member's gate).
type sdkKnowledge struct {
	version  int64
	ordered  bool
	barriers map[int]int64 // shard -> the lowest After listed
}

// judge is the gate's verdict on entry e of shard: "" (handle it), "rv" (its
// routing is newer than the knowledge) or "barrier".
func (k *sdkKnowledge) judge(shard int, e fakeEntry) string {
	if e.rv > k.version {
		return "rv"
	}
	if after, ok := k.barriers[shard]; ok && e.id > after {
		return "barrier"
	}
	return ""
}

// sdkReader is one shard's reader.
type sdkReader struct {
	claimed  bool        // the takeover claim went through
	queue    []fakeEntry // delivered to the reader and not handled yet, in id order
	inflight []int64     // handled, acked on the next poll
	held     string      // why the head of queue waits ("" when it does not)
}

// sdkState is a Go SDK member's runtime state besides the protocol state
// simMember keeps (reading, draining, revoked).
type sdkState struct {
	know       sdkKnowledge
	leaseUntil time.Time
	readers    map[int]*sdkReader // shards reading or draining
}

func newSDKState() *sdkState { return &sdkState{readers: map[int]*sdkReader{}} }

// reset is a protocol reset (FENCED, UNKNOWN_MEMBER_ID): every reader stops
// (what it held stays pending), the lease ends; the knowledge stays.
func (d *sdkState) reset() {
	d.readers = map[int]*sdkReader{}
	d.leaseUntil = time.Time{}
}

func (d *sdkState) holding() bool {
	for _, r := range d.readers {
		if r.held != "" {
			return true
		}
	}
	return false
}

// learn is gate.learn: an answer older than the knowledge is ignored.
func (d *sdkState) learn(resp *wire.HeartbeatResponse) {
	if resp.MetadataVersion < d.know.version {
		return
	}
	k := sdkKnowledge{version: resp.MetadataVersion, ordered: resp.Assignment.Ordering == events.OrderingKey}
	for _, b := range resp.Assignment.Barriers {
		if k.barriers == nil {
			k.barriers = map[int]int64{}
		}
		after := fakeSeq(b.After)
		if cur, ok := k.barriers[b.Shard.ShardIndex]; !ok || after < cur {
			k.barriers[b.Shard.ShardIndex] = after
		}
	}
	d.know = k
}

func (s *sim) ackInFlight(m *simMember, sh int) {
	if r := m.sdk.readers[sh]; r != nil {
		s.fake.ackIDs(simKey.StreamPrefix, simKey.ConsumerGroup, sh, r.inflight)
		r.inflight = nil
	}
}

// consumeSDK is the member's readers at work, each handling up to budget
// entries: draining shards finish (ack) what is in flight and are released;
// reading shards ack what is in flight and, while the lease lasts, go on.
// A stuck handler holds everything up.
func (s *sim) consumeSDK(m *simMember, budget int) {
	d := m.sdk
	if s.now().Before(m.slowUntil) {
		return
	}
	for _, sh := range setList(m.draining) {
		s.ackInFlight(m, sh)
		delete(d.readers, sh)
		delete(m.draining, sh)
		m.revoked[sh] = true
	}
	leased := s.now().Before(d.leaseUntil) && !m.leaving
	handled := 0
	for _, sh := range setList(m.reading) {
		r := d.readers[sh]
		if r == nil {
			s.fail("%s reads shard %d without a reader", m.id, sh)
		}
		s.ackInFlight(m, sh)
		if !leased {
			continue
		}
		handled += s.pollReader(m, sh, r, budget)
	}
	if handled > 0 {
		s.act(" (%s handled %d)", m.id, handled)
	}
}

// pollReader runs one shard's reader for up to budget entries (shard.go's
// run, claim and process) and returns how many it handled.
func (s *sim) pollReader(m *simMember, sh int, r *sdkReader, budget int) int {
	o := s.ord
	k := &m.sdk.know
	prefix, group := simKey.StreamPrefix, simKey.ConsumerGroup
	if !r.claimed {
		// Take over what a previous owner left pending: in an ordered group
		// all of it, whatever its idle time, before reading anything new.
		minIdle := sdkClaimMinIdle
		if k.ordered {
			minIdle = 0
		}
		got, ok := s.fake.claim(prefix, group, sh, m.id, minIdle, nil)
		r.claimed = true
		if !ok {
			s.checkMissing(m, sh)
			return 0
		}
		if len(got) > 0 {
			o.stats["claimed"] += len(got)
			s.act(" (%s claimed %d on %d)", m.id, len(got), sh)
		}
		r.queue = got
	}
	handled := 0
	for handled < budget {
		if len(r.queue) == 0 {
			// Between batches: the sweep of entries idle for ClaimMinIdle
			// (not the reader's own), then XREADGROUP.
			own := map[int64]bool{}
			for _, id := range r.inflight {
				own[id] = true
			}
			got, ok := s.fake.claim(prefix, group, sh, m.id, sdkClaimMinIdle, own)
			if ok && len(got) == 0 {
				got, ok = s.fake.readNew(prefix, group, sh, m.id, min(budget-handled, sdkBatchSize))
			} else if ok {
				o.stats["swept"] += len(got)
			}
			if !ok {
				s.checkMissing(m, sh)
				return handled
			}
			if len(got) == 0 {
				return handled
			}
			r.queue = got
		}
		e := r.queue[0]
		if why := k.judge(sh, e); why != "" {
			if r.held != "" && !s.fake.pendingFor(prefix, group, sh, m.id, e.id) {
				// The held entry is no longer pending for the reader: Redis
				// lost the consumer group (recreated at the stream's start)
				// or the stream. The reader starts over: it claims what is
				// pending and reads again from what the group delivers
				// (shard.go, wait).
				o.stats["hold-lost"]++
				s.act(" (%s: held %s on %d no longer pending; the reader starts over)", m.id, fakeID(e.id), sh)
				*r = sdkReader{}
				return handled
			}
			if r.held != why {
				o.stats["hold-"+why]++
				s.act(" (%s holds %s on %d: %s)", m.id, fakeID(e.id), sh, why)
			}
			r.held = why
			s.ackInFlight(m, sh) // the entries handled before it are acked before it waits
			return handled
		}
		r.held = ""
		r.queue = r.queue[1:]
		o.handle(m, sh, e)
		r.inflight = append(r.inflight, e.id)
		handled++
	}
	return handled
}

// checkMissing: a shard's stream or consumer group is missing (NOGROUP). The
// reader waits; a holder per the coordinator reading a shard that Redis did
// not lose is a coordinator error.
func (s *sim) checkMissing(m *simMember, sh int) {
	if s.fake.isLost(simKey.StreamPrefix, sh) {
		return
	}
	if g, ok := s.c.State().Group(simKey); ok {
		if pm := g.Member(m.id); pm != nil && pm.CanHold() {
			s.fail("member %s (a holder per the coordinator) reads shard %d whose stream or consumer group does not exist", m.id, sh)
		}
	}
}

// buildRequestSDK is the Go SDK's heartbeat body (member.go buildRequest; on
// leave, its shutdown: stop reading, release what has nothing in flight).
func (s *sim) buildRequestSDK(m *simMember) (*wire.HeartbeatRequest, bool) {
	s.reqN++
	d := m.sdk
	epoch, available := m.epoch, 1
	for _, sh := range sortedInts(d.readers) {
		if len(d.readers[sh].inflight) > 0 {
			available = 0
		}
	}
	if m.leaving {
		epoch, available = -1, 0
		for _, sh := range setList(m.reading) {
			s.stopReader(m, sh)
		}
	}
	req := &wire.HeartbeatRequest{
		ProtocolVersion: ptr(wire.ProtocolVersion),
		RequestID:       fmt.Sprintf("req-%d", s.reqN),
		MemberID:        m.id,
		MemberName:      ptr(m.id),
		MemberEpoch:     ptr(epoch),
		MetadataVersion: ptr(m.mv),
		RuntimeConsumerCapacity: &wire.Capacity{
			RuntimeMaxConcurrency: ptr(1), AvailableConcurrency: ptr(available),
		},
		OwnedShards:    []wire.ShardRef{},
		RevokingShards: []wire.RevokingReport{},
		ShardProgress:  []wire.ShardProgress{},
	}
	if epoch == 0 {
		return req, false // a join reports nothing
	}
	progress := func(sh int) wire.ShardProgress {
		return wire.ShardProgress{Shard: wire.ShardRef{ShardIndex: sh}, StreamKey: streamKey(simKey.StreamPrefix, sh),
			PendingCount: s.fake.pending(simKey.StreamPrefix, simKey.ConsumerGroup, sh)}
	}
	for _, sh := range setList(m.reading) {
		req.OwnedShards = append(req.OwnedShards, wire.ShardRef{ShardIndex: sh})
		req.ShardProgress = append(req.ShardProgress, progress(sh))
	}
	for _, sh := range setList(m.draining) {
		req.RevokingShards = append(req.RevokingShards, wire.RevokingReport{Shard: &wire.ShardRef{ShardIndex: sh}, State: wire.RevokeDraining, InFlight: max(1, len(d.readers[sh].inflight))})
		req.ShardProgress = append(req.ShardProgress, progress(sh))
	}
	at := s.now().Format(time.RFC3339Nano)
	for _, sh := range setList(m.revoked) {
		req.RevokingShards = append(req.RevokingShards, wire.RevokingReport{Shard: &wire.ShardRef{ShardIndex: sh}, State: wire.RevokeRevoked, AckedAt: ptr(at)})
	}
	// The SDK leaves with one request and exits, whatever is still draining.
	return req, m.leaving
}

// stopReader revokes a shard the member reads: it drains while entries are
// in flight (or a handler is stuck), else it is released at once; what the
// reader held back stays pending for the next owner.
func (s *sim) stopReader(m *simMember, sh int) {
	d := m.sdk
	delete(m.reading, sh)
	r := d.readers[sh]
	if r != nil {
		r.queue, r.held = nil, ""
	}
	if r != nil && len(r.inflight) > 0 || s.now().Before(m.slowUntil) {
		if r == nil {
			d.readers[sh] = &sdkReader{}
		}
		m.draining[sh] = true
		s.stats["drain-in-flight"]++
		return
	}
	delete(d.readers, sh)
	m.revoked[sh] = true
}

// applySDK is the Go SDK's reaction to an answer (member.go apply).
func (s *sim) applySDK(m *simMember, req *wire.HeartbeatRequest, resp *wire.HeartbeatResponse) {
	if m.leaving {
		return // the answer to the leave: the process exits
	}
	d := m.sdk
	assigned := map[int]bool{}
	for _, sh := range refInts(resp.Assignment.AssignedShards) {
		assigned[sh] = true
	}
	adopt := func() {
		s.adoptEpoch(m, resp)
		d.leaseUntil = s.now().Add(sdkLease)
		d.learn(resp)
		// The coordinator received the REVOKED reports: forget them.
		for _, rv := range req.RevokingShards {
			if rv.State == wire.RevokeRevoked {
				delete(m.revoked, rv.Shard.ShardIndex)
			}
		}
	}
	revokeUnassigned := func() {
		for _, sh := range setList(m.reading) {
			if !assigned[sh] {
				s.stopReader(m, sh)
			}
		}
	}
	switch resp.Status {
	case wire.StatusOK:
		adopt()
		revokeUnassigned()
		for _, sh := range refInts(resp.Assignment.AssignedShards) {
			switch {
			case m.reading[sh]:
			case m.draining[sh]:
				// Re-assigned while draining: a new reader once drained (it
				// acks what is in flight before it claims).
				delete(m.draining, sh)
				m.reading[sh] = true
				d.readers[sh] = &sdkReader{inflight: d.readers[sh].inflight}
			default:
				delete(m.revoked, sh)
				m.reading[sh] = true
				d.readers[sh] = &sdkReader{}
			}
		}
	case wire.StatusSyncMetadata, wire.StatusRevokePending:
		adopt()
		revokeUnassigned()
	case wire.StatusFenced, wire.StatusUnknownMember:
		leaving := m.leaving
		m.reset()
		m.mv = resp.MetadataVersion
		m.leaving = leaving
		s.act(" reset->%s#%d", m.kind, m.incarnation)
	}
}

// --- bugs the ordered simulation found, reduced to a few steps ---

// bugHarness is a coordinator on the fake shard Redis and a virtual clock,
// ticked by hand, for the reduced reproductions below.
type bugHarness struct {
	t     *testing.T
	clock *simClock
	fake  *fakeShards
	c     *coordinator.Coordinator
	n     int
}

func newBugHarness(t *testing.T, shards int, ordering string) *bugHarness {
	t.Helper()
	h := &bugHarness{t: t, clock: newSimClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	h.fake = newFakeShards(h.clock)
	h.c = coordinator.New(coordinator.Config{TickInterval: time.Hour, ShardCheckInterval: -1, BarrierCheckInterval: time.Hour, SnapshotEvery: -1}, events.NewMemLog(), h.fake, nil, h.clock)
	if err := h.c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	h.c.Run()
	t.Cleanup(h.c.Close)
	if _, err := h.c.CreateGroup(context.Background(), events.Meta{Actor: "test"}, commands.CreateGroupInput{
		StreamPrefix: simKey.StreamPrefix, ConsumerGroup: simKey.ConsumerGroup, InitialShardCount: &shards, RequestedBy: "test", Ordering: &ordering,
	}); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *bugHarness) group() *projection.Group {
	h.t.Helper()
	g, ok := h.c.State().Group(simKey)
	if !ok {
		h.t.Fatal("no group")
	}
	return g
}

// publish writes n entries of key to shard with the group's current routing version.
func (h *bugHarness) publish(shard, n int, key string) {
	h.t.Helper()
	mv := h.group().MetadataVersion
	for i := 0; i < n; i++ {
		h.n++
		if _, res := h.fake.publishFenced(simKey.StreamPrefix, simKey.ConsumerGroup, shard, mv, true, key, h.n); res != published {
			h.t.Fatalf("publish on shard %d: %v", shard, res)
		}
	}
}

func (h *bugHarness) scale(to int) string {
	h.t.Helper()
	mv, err := h.c.Scale(context.Background(), events.Meta{Actor: "test"}, simKey, commands.ScaleInput{TargetShardCount: &to, RequestedBy: "test", Reason: "test"})
	if err != nil {
		h.t.Fatalf("scale to %d: %v", to, err)
	}
	return mv.ReshardingID
}

func (h *bugHarness) tick() {
	h.clock.Advance(time.Second)
	h.c.Tick(context.Background())
}

func (h *bugHarness) heartbeat(id string, epoch int64, owned []int, revoked []int) (*wire.HeartbeatResponse, error) {
	h.n++
	req := &wire.HeartbeatRequest{
		ProtocolVersion: ptr(wire.ProtocolVersion), RequestID: fmt.Sprintf("r%d", h.n), MemberID: id, MemberName: ptr(id),
		MemberEpoch: ptr(epoch), MetadataVersion: ptr(h.group().MetadataVersion),
		RuntimeConsumerCapacity: &wire.Capacity{RuntimeMaxConcurrency: ptr(1), AvailableConcurrency: ptr(1)},
		OwnedShards:             shardIDs(owned), RevokingShards: []wire.RevokingReport{}, ShardProgress: []wire.ShardProgress{},
	}
	for _, sh := range revoked {
		req.RevokingShards = append(req.RevokingShards, wire.RevokingReport{Shard: &wire.ShardRef{ShardIndex: sh}, State: wire.RevokeRevoked, AckedAt: ptr(h.clock.Now().Format(time.RFC3339Nano))})
	}
	return h.c.Heartbeat(context.Background(), simKey, id, "", req)
}

// TestOrderedRollbackOfScaleInWithWaitingBarriers: rolling back a scale-in of
// an ordered group while the scale-in's barriers wait no longer deadlocks
// them (found by TestSimOrdered, seeds 5 and 6 at 600 steps).
//
// 2 -> 1 with a backlog on shard 1: the cutover's barrier holds shard 0
// after its cutover until shard 1 is read up to its own. The rollback
// (1 -> 2, by metadata) records a cutover with a barrier on shard 1 that
// waits on shard 0 up to its new cutover. That barrier used to start at
// "0-0" (every shard at or past the current shard count was taken for new
// and empty), so it held shard 1's backlog, which the first barrier waits
// for, while waiting for shard 0's entries, which the first barrier holds:
// nothing was ever released. It now starts after shard 1's last entry, read
// with the cutover.
func TestOrderedRollbackOfScaleInWithWaitingBarriers(t *testing.T) {
	h := newBugHarness(t, 2, events.OrderingKey)
	h.publish(0, 3, "a")
	h.publish(1, 3, "b")
	id := h.scale(1)
	if g := h.group(); len(g.Barriers) != 1 || g.Barriers[0].Shard != 0 {
		t.Fatalf("after 2 -> 1: want one barrier on shard 0, got %s", barrierString(g.Barriers))
	}
	h.publish(0, 2, "b") // b's keys now route to shard 0, after its cutover
	if _, err := h.c.Rollback(context.Background(), events.Meta{Actor: "test"}, simKey, id, commands.RollbackInput{RequestedBy: "test", Reason: "test"}); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	// One member reads both shards and handles everything the barriers let
	// through (the lowest After per shard, as heartbeat answers list them);
	// the coordinator proves barriers at every tick.
	for round := 0; round < 20 && len(h.group().Barriers) > 0; round++ {
		after := h.group().Barriers.ByShard()
		for sh := 0; sh < 2; sh++ {
			held, _ := h.fake.claim(simKey.StreamPrefix, simKey.ConsumerGroup, sh, "m", 0, nil) // held back before
			fresh, _ := h.fake.readNew(simKey.StreamPrefix, simKey.ConsumerGroup, sh, "m", 100)
			var ids []int64
			for _, e := range append(held, fresh...) {
				if a, ok := after[sh]; ok && e.id > fakeSeq(a) {
					break
				}
				ids = append(ids, e.id)
			}
			h.fake.ackIDs(simKey.StreamPrefix, simKey.ConsumerGroup, sh, ids)
		}
		h.tick()
	}
	if g := h.group(); len(g.Barriers) > 0 {
		t.Fatalf("after the rollback of the scale-in, every entry the barriers let through was handled and acked, yet they never release: %s", barrierString(g.Barriers))
	}
}

// TestRevokedReportAfterRetirementIsAnswered: a heartbeat that reports a
// shard REVOKED again, because the answer to the first report was lost, is
// answered after the scale-in that removed the shard retired it meanwhile.
// It was refused with 400 (the reports were counted against the group's
// current span), and the Go SDK, which keeps a REVOKED report until an answer
// is accepted, sent the same heartbeat forever: its lease lapsed, it never
// rejoined. The ordered simulation hit the same refusal for the DRAINING
// reports of a member fenced for a slow drain and for the owned shards of a
// member that stalled through the scale-in (seeds 79, 310 and 682 of
// TestSimOrdered -short; 1000 seeds). Shards past the span are now dropped
// from the report (withinSpan).
func TestRevokedReportAfterRetirementIsAnswered(t *testing.T) {
	h := newBugHarness(t, 3, events.OrderingNone)
	r, err := h.heartbeat("a", 0, nil, nil)
	if err != nil || r.Status != wire.StatusOK {
		t.Fatalf("join: %v %v", r, err)
	}
	epoch := r.MemberEpoch
	if r, err = h.heartbeat("a", epoch, refInts(r.Assignment.AssignedShards), nil); err != nil {
		t.Fatal(err)
	}
	epoch = r.MemberEpoch
	h.scale(1)
	for i := 0; i < 5 && containsInt(refInts(r.Assignment.AssignedShards), 1); i++ {
		h.tick()
		if r, err = h.heartbeat("a", epoch, []int{0, 1, 2}, nil); err != nil {
			t.Fatal(err)
		}
		epoch = r.MemberEpoch
	}
	if containsInt(refInts(r.Assignment.AssignedShards), 1) {
		t.Fatalf("after the scale-in, a's answer still assigns shard 1")
	}
	// a stops reading shards 1 and 2 and reports them REVOKED; the answer is lost.
	if _, err := h.heartbeat("a", epoch, []int{0}, []int{1, 2}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		h.tick()
	}
	g := h.group()
	if n := len(g.Reshardings); n == 0 || !g.Reshardings[n-1].Retired {
		t.Fatalf("the scale-in did not finish: %+v", g.Reshardings[n-1])
	}
	// a sends the same report again.
	if r, err := h.heartbeat("a", epoch, []int{0}, []int{1, 2}); err != nil {
		t.Fatalf("a REVOKED report sent again after a lost answer was refused: %v", err)
	} else {
		t.Logf("answered %s", r.Status)
	}
}

// TestLostConsumerGroupOfRemovedShardIsRepaired: Redis loses the group's
// consumer group on a shard a scale-in removed while an ordered group's
// barrier waits on it (found by TestSimOrdered, seeds 805 and 930 at 300
// steps). The shard check only repaired routed shards, and the proof wants
// the group's last delivered id, so the barrier (and the drain) waited
// forever. The check now recreates a lost consumer group on a removed shard
// that is not retired, at the stream's start: its entries are read again and
// the barrier is released.
func TestLostConsumerGroupOfRemovedShardIsRepaired(t *testing.T) {
	h := newBugHarness(t, 2, events.OrderingKey)
	h.publish(1, 3, "b")
	h.scale(1)
	if g := h.group(); len(g.Barriers) != 1 || g.Barriers[0].Shard != 0 {
		t.Fatalf("after 2 -> 1: want one barrier on shard 0, got %s", barrierString(g.Barriers))
	}
	if !h.fake.lose(simKey.StreamPrefix, simKey.ConsumerGroup, 1, false) {
		t.Fatal("shard 1 has no stream")
	}
	if n := h.c.RepairShards(context.Background()); n != 1 {
		t.Fatalf("the shard check repaired %d shards, want 1 (the removed shard's consumer group)", n)
	}
	for round := 0; round < 20 && len(h.group().Barriers) > 0; round++ {
		fresh, _ := h.fake.readNew(simKey.StreamPrefix, simKey.ConsumerGroup, 1, "m", 100)
		var ids []int64
		for _, e := range fresh {
			ids = append(ids, e.id)
		}
		h.fake.ackIDs(simKey.StreamPrefix, simKey.ConsumerGroup, 1, ids)
		h.tick()
	}
	if g := h.group(); len(g.Barriers) > 0 {
		t.Fatalf("shard 1's entries were read again and acked, yet the barrier waits: %s", barrierString(g.Barriers))
	}
	// A lost stream of a removed shard is not recreated: nothing is left to drain.
	h.fake.lose(simKey.StreamPrefix, simKey.ConsumerGroup, 1, true)
	if n := h.c.RepairShards(context.Background()); n != 0 {
		t.Fatalf("the shard check recreated %d lost streams of a removed shard", n)
	}
}

// TestDrainingReportPastTheSpanKeepsTheShard: a member still draining shards
// that a rolled-back scale-out removed reports them DRAINING while the next
// resharding is preparing, when the group's span (which only looks at the
// last resharding) no longer covers them. The report must keep them
// revoking: dropping the DRAINING reports as past the span released them
// while the member's reader still read them, and the next layout handed
// them to another member (TestSimOrdered seed 233 at 400 steps, with shard
// Redis answering late).
func TestDrainingReportPastTheSpanKeepsTheShard(t *testing.T) {
	h := newBugHarness(t, 2, events.OrderingNone)
	r, err := h.heartbeat("a", 0, nil, nil)
	if err != nil || r.Status != wire.StatusOK {
		t.Fatalf("join: %v %v", r, err)
	}
	id := h.scale(5)
	owned := refInts(r.Assignment.AssignedShards)
	for i := 0; i < 5 && len(owned) < 5; i++ {
		if r, err = h.heartbeat("a", r.MemberEpoch, owned, nil); err != nil {
			t.Fatal(err)
		}
		owned = refInts(r.Assignment.AssignedShards)
	}
	if len(owned) != 5 {
		t.Fatalf("a owns %v after the scale-out, want 5 shards", owned)
	}
	if _, err := h.c.Rollback(context.Background(), events.Meta{Actor: "test"}, simKey, id, commands.RollbackInput{RequestedBy: "test", Reason: "test"}); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	// a drains 2..4 (its handler is slow), and says so.
	drain := func(epoch int64, extra ...int) *wire.HeartbeatResponse {
		t.Helper()
		h.n++
		req := &wire.HeartbeatRequest{
			ProtocolVersion: ptr(wire.ProtocolVersion), RequestID: fmt.Sprintf("r%d", h.n), MemberID: "a", MemberName: ptr("a"),
			MemberEpoch: ptr(epoch), MetadataVersion: ptr(h.group().MetadataVersion),
			RuntimeConsumerCapacity: &wire.Capacity{RuntimeMaxConcurrency: ptr(1), AvailableConcurrency: ptr(1)},
			OwnedShards:             shardIDs([]int{0, 1}), ShardProgress: []wire.ShardProgress{},
		}
		for _, sh := range append([]int{2, 3, 4}, extra...) {
			req.RevokingShards = append(req.RevokingShards, wire.RevokingReport{Shard: &wire.ShardRef{ShardIndex: sh}, State: wire.RevokeDraining})
		}
		resp, err := h.c.Heartbeat(context.Background(), simKey, "a", "", req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	r = drain(r.MemberEpoch)
	if m := h.group().Member("a"); len(m.Revoking) != 3 {
		t.Fatalf("a drains 2..4, recorded revoking %v", m.Revoking)
	}
	// The next scale-out prepares (shard Redis refuses the provisioning
	// after the read of the new shards' keys: it stays PREPARING).
	h.fake.mu.Lock()
	h.fake.provisionDown = true
	h.fake.mu.Unlock()
	to := 3
	if _, err := h.c.Scale(context.Background(), events.Meta{Actor: "test"}, simKey, commands.ScaleInput{TargetShardCount: &to, RequestedBy: "test", Reason: "test"}); err == nil {
		t.Fatal("scale with shard Redis down succeeded")
	}
	if g := h.group(); g.Active() == nil || g.Active().State != projection.Preparing {
		t.Fatalf("want a PREPARING resharding, got %+v", g.Active())
	}
	drain(r.MemberEpoch)
	if m := h.group().Member("a"); !containsInt(m.Revoking, 3) || !containsInt(m.Revoking, 4) {
		t.Fatalf("a still drains 3 and 4, but the coordinator released them: revoking %v", m.Revoking)
	}
	// A report longer than the group (shards it never held besides): those
	// are dropped, the recorded ones kept.
	drain(r.MemberEpoch, 5, 6, 7, 8)
	if m := h.group().Member("a"); !containsInt(m.Revoking, 3) || !containsInt(m.Revoking, 4) || containsInt(m.Revoking, 5) {
		t.Fatalf("after a report past the span, recorded revoking %v, want 2..4 kept and nothing else", m.Revoking)
	}
}
