package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/internal/faultproxy"
	"github.com/rscoord/rsc/routing"
)

// The exactly-once demo (--exactly-once, make demo-exactly-once): two
// groups side by side, each fed by producers that publish every event with
// its own event id and publish it again until one publish succeeds (what an
// application does when a publish fails). Between each group's producers and
// Redis sits a TCP proxy (internal/faultproxy) that loses 5% of the publish
// scripts' replies after Redis ran them and closes the connection, so
// go-redis resends the command and the application retries. One group's
// producers publish with DedupWindow, the other's without; both groups are
// scaled 4 -> 8 -> 12 while they publish, and producer processes restart
// (a new Producer re-publishing what it did not see acknowledged). At the
// end it counts, per group, the event ids with more than one stream entry:
// 0 with DedupWindow (the check that must hold, with nothing lost), and what
// the plain producers wrote twice.

// eoSide is one group of the exactly-once demo and what its producers did.
type eoSide struct {
	label  string
	prefix string
	window time.Duration
	proxy  *faultproxy.Proxy
	rdb    *redis.Client

	mu      sync.Mutex
	acked   map[string]bool
	retries int
}

// eoShardsMax is the largest shard count the demo scales to.
const eoShardsMax = 12

func (d *demo) runExactlyOnce(ctx context.Context) error {
	fmt.Fprintf(d.out, "rsc demo, exactly once: the same load published with and without DedupWindow, through lost replies and reshardings.\n")
	fmt.Fprintf(d.out, "each group: %d producers at ~%d msgs/s together; a proxy loses 5%% of the publish replies after Redis ran them.\n",
		d.o.producers, d.o.ratePerSecond)
	d.section("Set-up")
	if err := d.setup(ctx); err != nil {
		return err
	}
	sides := []*eoSide{
		{label: "DedupWindow 10m", prefix: d.o.prefix + "-dedup", window: 10 * time.Minute},
		{label: "no DedupWindow", prefix: d.o.prefix + "-plain"},
	}
	for i, s := range sides {
		s.acked = map[string]bool{}
		if _, err := d.admin.CreateGroup(ctx, s.prefix, d.o.group, 4, "demo"); err != nil {
			return err
		}
		opts := d.rdb.Options()
		for _, src := range []string{producer.PublishScript, producer.DedupPublishScript} {
			if err := d.rdb.ScriptLoad(ctx, src).Err(); err != nil { // a lost reply is then a script's that ran
				return err
			}
		}
		px, err := faultproxy.Listen(opts.Addr)
		if err != nil {
			return err
		}
		px.DropRandom(0.05, int64(i+1), "EVALSHA", "EVAL")
		s.proxy = px
		popts := *opts
		popts.Addr = px.Addr()
		s.rdb = redis.NewClient(&popts) // go-redis's own retries on: as in production
		d.say("setup", "group %s/%s (4 shards): producers with %s, through a proxy at %s", s.prefix, d.o.group, s.label, px.Addr())
	}
	defer func() {
		for _, s := range sides {
			_ = s.rdb.Close()
			s.proxy.Close()
		}
	}()

	d.section("Publish, lose replies, scale 4 → 8 → 12 while publishing")
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) * float64(d.o.producers) / float64(d.o.ratePerSecond))
	for _, s := range sides {
		for w := 0; w < d.o.producers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d.eoProduce(loadCtx, s, w, interval)
			}()
		}
	}
	fail := func(err error) error {
		stopLoad()
		wg.Wait()
		return err
	}
	if err := d.pause(ctx, 2*time.Second); err != nil {
		return fail(err)
	}
	for _, to := range []int{8, 12} {
		for _, s := range sides {
			m, err := d.admin.Scale(ctx, s.prefix, d.o.group, to, "demo", fmt.Sprintf("demo: scale to %d", to))
			if err != nil {
				return fail(err)
			}
			d.say("admin", "%s: POST .../scale {\"targetShardCount\":%d} → %s %d → %d, %s", s.label, to, shortID(m.ReshardingID), m.FromShardCount, m.ToShardCount, m.State)
		}
		if err := d.pause(ctx, 2*time.Second); err != nil {
			return fail(err)
		}
	}
	stopLoad()
	wg.Wait()

	d.section("Count each event id's stream entries")
	var problems []error
	for _, s := range sides {
		entries, dupIDs, extra, err := d.eoCount(ctx, s.prefix)
		if err != nil {
			return err
		}
		st := s.proxy.Stats()
		missing := 0
		for id := range s.acked {
			if entries[id] == 0 {
				missing++
			}
		}
		d.say("result", "%-16s %d events acknowledged, %d replies lost, %d application retries → %d event ids written twice or more (%d extra entries), %d missing",
			s.label+":", len(s.acked), st.Dropped, s.retries, dupIDs, extra, missing)
		if s.window > 0 && (dupIDs > 0 || missing > 0) {
			problems = append(problems, fmt.Errorf("%s: %d event ids duplicated, %d missing", s.label, dupIDs, missing))
		}
		if s.window > 0 {
			d.orderedSummary = fmt.Sprintf("with DedupWindow %d events, 0 duplicated", len(s.acked))
		} else {
			d.orderedSummary += fmt.Sprintf("; without it %d of %d event ids written twice or more", dupIDs, len(s.acked))
		}
	}
	return errors.Join(problems...)
}

// eoProduce is one producer process of a side: event ids p<w>-<n>, each
// published again until a publish succeeds; every 200 events the process
// restarts (a new Producer) and re-publishes the last event it published.
func (d *demo) eoProduce(ctx context.Context, s *eoSide, w int, interval time.Duration) {
	newProducer := func() *producer.Producer {
		p, err := producer.New(producer.Config{Coordinator: d.admin, Redis: s.rdb, StreamPrefix: s.prefix, ConsumerGroup: d.o.group,
			EventIDField: "eventId", DedupWindow: s.window, RefreshInterval: time.Second})
		if err != nil {
			panic(err) // a config error of the demo itself
		}
		return p
	}
	p := newProducer()
	publish := func(id string) {
		for attempt := 0; ctx.Err() == nil; attempt++ {
			if attempt > 0 {
				s.mu.Lock()
				s.retries++
				s.mu.Unlock()
			}
			if _, err := p.Publish(ctx, "customer-"+id, map[string]any{"eventId": id, "type": "order.created"}); err == nil {
				s.mu.Lock()
				s.acked[id] = true
				s.mu.Unlock()
				return
			}
		}
	}
	for n := 0; ctx.Err() == nil; n++ {
		id := fmt.Sprintf("p%d-%d", w, n)
		publish(id)
		if n%200 == 199 {
			p = newProducer()
			publish(id) // a restarted process re-publishes what it last sent
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

// eoCount counts each event id's entries over every shard of prefix; it
// returns them, the event ids with more than one, and the entries beyond
// the first.
func (d *demo) eoCount(ctx context.Context, prefix string) (map[string]int, int, int, error) {
	entries := map[string]int{}
	for s := 0; s < eoShardsMax; s++ {
		key := routing.StreamKey(prefix, s)
		msgs, err := d.rdb.XRange(ctx, key, "-", "+").Result()
		if err != nil {
			return nil, 0, 0, fmt.Errorf("read %s: %w", key, err)
		}
		for _, m := range msgs {
			if id, ok := m.Values["eventId"].(string); ok {
				entries[id]++
			}
		}
	}
	dupIDs, extra := 0, 0
	for _, n := range entries {
		if n > 1 {
			dupIDs++
			extra += n - 1
		}
	}
	return entries, dupIDs, extra, nil
}
