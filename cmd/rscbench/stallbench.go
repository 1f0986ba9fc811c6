package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"
)

// stallFor is how long runStall holds Redis (CLIENT PAUSE ... ALL).
const stallFor = 1500 * time.Millisecond

// runStall measures what a slow Redis does to the reads the projection can
// answer: while Redis is paused for 1.5 s (CLIENT PAUSE ALL: a fork, a
// failover, a network hiccup) and a member join waits on its append, clients
// keep sending steady heartbeats and producer-routing GETs. Neither needs
// Redis; their worst latency during the stall is compared with the join's,
// which has to wait for Redis.
func (b *bench) runStall(ctx context.Context, rep *Report, url string, members []*member, bodies [][]byte) error {
	const readers = 8
	b.logf("heartbeat: %d clients send steady heartbeats and routing reads while Redis is paused for %s during a join", readers, stallFor)
	client := newHTTPClient(readers + 2)
	defer client.CloseIdleConnections()
	do := func(method, path string, body []byte) (time.Duration, int, error) {
		req, err := http.NewRequestWithContext(ctx, method, url+path, bytes.NewReader(body))
		if err != nil {
			return 0, 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.SetBasicAuth("admin", "password")
		t0 := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(t0), resp.StatusCode, nil
	}
	var (
		mu       sync.Mutex
		hbLat    []time.Duration
		routeLat []time.Duration
		failures []string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < readers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; ; i += readers {
				select {
				case <-stop:
					return
				default:
				}
				m := members[i%len(members)]
				d, status, err := do(http.MethodPost, m.path(), bodies[i%len(members)])
				r, rstatus, rerr := do(http.MethodGet, fmt.Sprintf("/coord/v1/streams/%s/groups/%s/producer-routing", m.prefix, m.group), nil)
				mu.Lock()
				if err != nil || status != 200 || rerr != nil || rstatus != 200 {
					failures = append(failures, fmt.Sprintf("%v %d %v %d", err, status, rerr, rstatus))
				} else {
					hbLat = append(hbLat, d)
					routeLat = append(routeLat, r)
				}
				mu.Unlock()
			}
		}(w)
	}
	time.Sleep(200 * time.Millisecond)
	paused := make(chan error, 1)
	go func() {
		paused <- b.st.rdb.Do(ctx, "CLIENT", "PAUSE", stallFor.Milliseconds(), "ALL").Err()
	}()
	time.Sleep(20 * time.Millisecond) // the pause reaches Redis first
	mu.Lock()
	hbLat, routeLat = hbLat[:0], routeLat[:0] // only what ran during the stall counts
	mu.Unlock()
	joiner := &member{id: "stall-joiner", prefix: members[0].prefix, group: members[0].group}
	joinStart := time.Now()
	_, joinStatus, joinErr := do(http.MethodPost, joiner.path(), mustJSON(joiner.request(false)))
	joinTime := time.Since(joinStart)
	if err := <-paused; err != nil {
		close(stop)
		wg.Wait()
		return fmt.Errorf("CLIENT PAUSE: %w", err)
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if joinErr != nil || joinStatus != 200 {
		return fmt.Errorf("the join during the stall: %v %d", joinErr, joinStatus)
	}
	if len(failures) > 0 {
		return fmt.Errorf("%d reads failed during the stall, e.g. %s", len(failures), failures[0])
	}
	worst := func(ds []time.Duration) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		if len(ds) == 0 {
			return 0
		}
		return ds[len(ds)-1]
	}
	s := rep.section("heartbeat.stall", "reads the projection answers while Redis is paused 1.5 s during a member join: steady heartbeats and producer-routing GETs vs the join, which waits for its append")
	s.param("stall", stallFor.String())
	s.param("readers", readers)
	s.param("members", len(members))
	s.baseline("member join during the stall", ms(joinTime), "ms")
	s.measured("worst steady heartbeat during the stall", ms(worst(hbLat)), "ms", "member join during the stall")
	s.measured("worst producer-routing GET during the stall", ms(worst(routeLat)), "ms", "member join during the stall")
	s.info("steady heartbeats answered during the stall", float64(len(hbLat)), "answers")
	s.info("routing GETs answered during the stall", float64(len(routeLat)), "answers")
	return nil
}

func mustJSON(v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return data
}
