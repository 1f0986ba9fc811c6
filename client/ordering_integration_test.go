package client_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/wire"
)

// keyLog records, per partition key, the sequence numbers in the order the
// handlers first saw them (redeliveries are ignored: at least once).
type keyLog struct {
	mu    sync.Mutex
	seen  map[string]map[int]bool
	first map[string][]int
}

func (l *keyLog) handler(ctx context.Context, m member.Message) error {
	time.Sleep(time.Millisecond) // a little work, so shards drain at different speeds
	k := m.Field("k")
	n, _ := strconv.Atoi(m.Field("n"))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[k] == nil {
		l.seen[k] = map[int]bool{}
	}
	if !l.seen[k][n] {
		l.seen[k][n] = true
		l.first[k] = append(l.first[k], n)
	}
	return nil
}

// A group with ordering KEY keeps every key's order through a scale-out and
// a scale-in while producers publish each key's messages one after the
// other. The producer never refreshes its routing by itself (an hour's TTL):
// the fences tell it when to.
func TestIntegrationOrderedGroupKeepsKeyOrderThroughResharding(t *testing.T) {
	skipShort(t)
	c := startCluster(t)
	ctx := context.Background()
	const prefix, group, keys = "ordered", "g", 16
	ordering, shards := client.OrderingKey, 4
	if err := c.Admin.Do(ctx, http.MethodPost, client.GroupPath(prefix, group),
		wire.CreateRequest{RequestedBy: "test", InitialShardCount: &shards, Ordering: &ordering}, nil); err != nil {
		t.Fatal(err)
	}
	log := &keyLog{seen: map[string]map[int]bool{}, first: map[string][]int{}}
	rt, err := member.Start(ctx, member.Config{
		Coordinator: c.Member(), Redis: c.RDB, StreamPrefix: prefix, ConsumerGroup: group,
		MemberIDBase: "a", Concurrency: 2, Block: 100 * time.Millisecond, MemberLease: 2500 * time.Millisecond,
		HoldHeartbeatInterval: 100 * time.Millisecond,
	}, log.handler)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	p, err := producer.New(producer.Config{Coordinator: c.Reader(), Redis: c.RDB, StreamPrefix: prefix, ConsumerGroup: group, RefreshInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c.waitStable(prefix, group, "a-m0", "a-m1")

	stop := make(chan struct{})
	published := make([]int, keys)
	errs := make(chan error, keys)
	var wg sync.WaitGroup
	for k := 0; k < keys; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "key-" + strconv.Itoa(k)
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := p.Publish(ctx, key, map[string]any{"k": key, "n": strconv.Itoa(n)}); err != nil {
					errs <- err
					return
				}
				published[k] = n + 1
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	c.scale(prefix, group, 4, 8, nil)
	c.waitStable(prefix, group, "a-m0", "a-m1")
	time.Sleep(300 * time.Millisecond)
	c.scale(prefix, group, 8, 3, nil)
	c.waitStable(prefix, group, "a-m0", "a-m1")
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("publish: %v", err)
	}
	total := 0
	for _, n := range published {
		total += n
	}
	c.waitFor(30*time.Second, "every message handled", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		for k, n := range published {
			if len(log.first["key-"+strconv.Itoa(k)]) != n {
				return false
			}
		}
		return true
	})
	log.mu.Lock()
	defer log.mu.Unlock()
	for k := range published {
		key := "key-" + strconv.Itoa(k)
		for i, n := range log.first[key] {
			if n != i {
				t.Fatalf("%s: message %d first handled at position %d (sequence %v...)", key, n, i, log.first[key][max(0, i-5):min(len(log.first[key]), i+5)])
			}
		}
	}
	st := p.Stats()
	if st.StaleRetries == 0 {
		t.Fatalf("producer stats %+v: the fences should have refused publishes with the old routing", st)
	}
	t.Logf("%d messages over %d keys in order; producer %+v; members %+v", total, keys, st, rt.Stats())
}
