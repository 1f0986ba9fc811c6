package chaos

import (
	"context"
	"math/rand"
	"strconv"
	"sync"
	"time"

	"github.com/rscoord/rsc/client/producer"
)

// load is the producers publishing in the background.
type load struct {
	producers []*producer.Producer
	stop      chan struct{}
	wg        sync.WaitGroup
	once      sync.Once

	mu     sync.Mutex
	ids    []string
	failed int64
	errs   map[string]int // publish errors by message, counted
}

func startLoad(producers []*producer.Producer, batch int, every time.Duration, seed int64) *load {
	l := &load{producers: producers, stop: make(chan struct{}), errs: map[string]int{}}
	for i, p := range producers {
		rng := rand.New(rand.NewSource(seed + int64(i)))
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			t := time.NewTicker(every)
			defer t.Stop()
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				case <-t.C:
				}
				msgs := make([]producer.Message, batch)
				for j := range msgs {
					msgs[j] = producer.Message{PartitionKey: "key-" + strconv.Itoa(rng.Intn(1000)),
						Fields: map[string]any{"producer": strconv.Itoa(i), "seq": strconv.Itoa(n*batch + j)}}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				res, _ := p.PublishBatch(ctx, msgs)
				cancel()
				l.mu.Lock()
				for _, r := range res {
					if r.Err == nil {
						l.ids = append(l.ids, r.EventID)
					} else {
						l.failed++
						l.errs[r.Err.Error()]++
					}
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// refresh refreshes every producer's routing now (errors: the routing stays
// usable within its lease).
func (l *load) refresh(ctx context.Context) {
	for _, p := range l.producers {
		_ = p.Refresh(ctx)
	}
}

// halt stops publishing and returns the acknowledged ids, the failure count
// and the failures by error.
func (l *load) halt() ([]string, int64, map[string]int) {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := make(map[string]int, len(l.errs))
	for k, v := range l.errs {
		errs[k] = v
	}
	return append([]string(nil), l.ids...), l.failed, errs
}
