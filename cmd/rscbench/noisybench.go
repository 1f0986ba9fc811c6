package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/wire"
)

// runNoisy measures a noisy neighbour: the latency of a member join (one
// heartbeat with epoch 0, over HTTP) in a quiet group, while --churners
// connections flood another group, which holds --noisy-records member
// records, with joins and leaves of new member ids, against the same joins
// with nobody flooding. The phases alternate, --passes of each (10 by
// default, 200 joins each: on a shared machine a change in the other load
// then falls on both sides, and each side's p99 is read from 2,000 joins);
// the goal is a ratio near 1 (cost proportional to change: one group's churn costs the
// writer what it changes, not what the group holds). The per-principal churn
// budget is off here: it is what keeps a real flood small, not what this
// measures.
func (b *bench) runNoisy(ctx context.Context, rep *Report) error {
	o := b.o
	logKey := b.st.key("noisy-events")
	rlog := redisstore.NewLog(b.st.rdb, logKey)
	b.st.trackLog(rlog)
	coord, err := runCoordinator(ctx, coordinator.Config{
		MemberLease: benchLease, RebalanceTimeout: benchRebalanceTimeout, DisableProvisioning: true,
		SnapshotEvery: -1, ShardCheckInterval: -1, MemberChurnPerMinute: -1, PrincipalChurnPerMinute: -1, Logger: zerolog.Nop(),
	}, rlog, nil, nil, nil)
	if err != nil {
		return err
	}
	defer coord.Close()
	noisy := projection.GroupKey{StreamPrefix: b.st.prefix + "-noisy", ConsumerGroup: "workers"}
	quiet := projection.GroupKey{StreamPrefix: b.st.prefix + "-quiet", ConsumerGroup: "workers"}
	for _, g := range []struct {
		k      projection.GroupKey
		shards int
	}{{noisy, 128}, {quiet, 16}} {
		if err := createGroup(ctx, coord, g.k, g.shards, "benchmark"); err != nil {
			return err
		}
	}
	b.logf("noisy: %d member records in the noisy group (each joined and left)", o.noisyRecords)
	err = parallel(ctx, 8, o.noisyRecords, func(_, i int) error {
		m := &member{id: fmt.Sprintf("record-%05d", i), prefix: noisy.StreamPrefix, group: noisy.ConsumerGroup}
		return joinAndLeave(ctx, coord, m)
	})
	if err != nil {
		return err
	}
	srv, err := serveAPI(coord)
	if err != nil {
		return err
	}
	defer srv.Close(context.WithoutCancel(ctx))
	probeClient, floodClient := newHTTPClient(1), newHTTPClient(o.churners)
	defer probeClient.CloseIdleConnections()
	defer floodClient.CloseIdleConnections()

	var probes int
	// probe joins n new members to the quiet group one at a time and records
	// each join's latency; each leaves right after (not measured).
	probe := func(n int) ([]time.Duration, error) {
		lat := make([]time.Duration, 0, n)
		for i := 0; i < n; i++ {
			probes++
			m := &member{id: fmt.Sprintf("probe-%05d", probes), prefix: quiet.StreamPrefix, group: quiet.ConsumerGroup}
			t0 := time.Now()
			if err := httpBeat(ctx, probeClient, srv.URL(), m, false); err != nil {
				return nil, err
			}
			lat = append(lat, time.Since(t0))
			if err := httpBeat(ctx, probeClient, srv.URL(), m, true); err != nil {
				return nil, err
			}
		}
		return lat, nil
	}
	// flood runs the churners until stop, counting their joins and leaves.
	flood := func(stop <-chan struct{}) (wait func() (int64, error)) {
		var ops atomic.Int64
		var wg sync.WaitGroup
		errs := make([]error, o.churners)
		for w := 0; w < o.churners; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					m := &member{id: fmt.Sprintf("churn-%d-%06d", w, n), prefix: noisy.StreamPrefix, group: noisy.ConsumerGroup}
					for _, leave := range []bool{false, true} {
						if err := httpBeat(ctx, floodClient, srv.URL(), m, leave); err != nil {
							errs[w] = err
							return
						}
						ops.Add(1)
					}
				}
			}()
		}
		return func() (int64, error) {
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					return ops.Load(), err
				}
			}
			return ops.Load(), nil
		}
	}

	// Warm up both paths, then alternate: quiet joins alone, quiet joins
	// under the flood.
	if _, err := probe(min(20, o.noisyJoins)); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	var alone, flooded passResult
	var churnOps int64
	var churnTime time.Duration
	perPass := max(o.noisyJoins/o.noisyPasses, 1)
	for p := 0; p < o.noisyPasses; p++ {
		b.logf("noisy: pass %d/%d: %d joins alone, then %d while %d connections churn", p+1, o.noisyPasses, perPass, perPass, o.churners)
		runtime.GC()
		lat, err := probe(perPass)
		if err != nil {
			return fmt.Errorf("joins alone: %w", err)
		}
		alone.lat = append(alone.lat, lat...)
		runtime.GC()
		stop := make(chan struct{})
		start := time.Now()
		wait := flood(stop)
		time.Sleep(200 * time.Millisecond) // the flood reaches its pace first
		lat, err = probe(perPass)
		close(stop)
		ops, ferr := wait()
		churnOps += ops
		churnTime += time.Since(start)
		if err != nil {
			return fmt.Errorf("joins under the flood: %w", err)
		}
		if ferr != nil {
			return fmt.Errorf("flood: %w", ferr)
		}
		flooded.lat = append(flooded.lat, lat...)
	}
	g, _ := coord.State().Group(noisy)

	s := rep.section("noisy.neighbour", "a member join's latency in a quiet group while other connections flood a group of many member records with joins and leaves, vs the same joins with no flood")
	s.param("noisy records", o.noisyRecords)
	s.param("churners", o.churners)
	s.param("joins measured per phase", len(alone.lat))
	s.param("passes", o.noisyPasses)
	s.baseline("join p50, no flood", ms(alone.percentile(0.50)), "ms")
	s.measured("join p50, flood", ms(flooded.percentile(0.50)), "ms", "join p50, no flood")
	s.baseline("join p99, no flood", ms(alone.percentile(0.99)), "ms")
	s.measured("join p99, flood", ms(flooded.percentile(0.99)), "ms", "join p99, no flood")
	s.info("flood joins and leaves", rate(int(churnOps), churnTime), "ops/s")
	s.info("member records in the noisy group at the end", float64(g.MemberCount()), "records")
	s.note("one HTTP client per side; a join is one heartbeat with epoch 0 of a new member id, a leave one with epoch -1; --member-churn-per-minute off")
	return nil
}

// joinAndLeave joins member m and has it leave, in process.
func joinAndLeave(ctx context.Context, coord *coordinator.Coordinator, m *member) error {
	k := projection.GroupKey{StreamPrefix: m.prefix, ConsumerGroup: m.group}
	for _, leave := range []bool{false, true} {
		req := m.request(leave)
		resp, err := coord.Heartbeat(ctx, k, m.id, "", req)
		if err != nil {
			return fmt.Errorf("member %s: %w", m.id, err)
		}
		if err := m.adopt(req, resp); err != nil {
			return err
		}
	}
	return nil
}

// httpBeat sends member m's next heartbeat (a leave with leave) over HTTP and
// adopts the answer.
func httpBeat(ctx context.Context, client *http.Client, baseURL string, m *member, leave bool) error {
	req := m.request(leave)
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	var resp wire.HeartbeatResponse
	if _, err := post(ctx, client, baseURL+m.path(), body, &resp); err != nil {
		return err
	}
	return m.adopt(req, &resp)
}
