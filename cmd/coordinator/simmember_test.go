package main

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// simMember is a Python-style member driven over HTTP: it adopts the assigned set
// of every OK answer, resets on FENCED/UNKNOWN, and (when consume is set) reads
// and acks what it owns with XREADGROUP/XACK.
type simMember struct {
	tc      *testCoordinator
	prefix  string
	group   string
	id      string
	rdb     *redis.Client
	consume bool

	mu       sync.Mutex
	epoch    int64
	mv       int64
	owned    []int
	statuses map[string]int
	acked    int
	cancel   context.CancelFunc
	done     chan struct{}
}

func newSimMember(tc *testCoordinator, prefix, group, id string, rdb *redis.Client, consume bool) *simMember {
	return &simMember{tc: tc, prefix: prefix, group: group, id: id, rdb: rdb, consume: consume, statuses: map[string]int{}}
}

// start runs the heartbeat (and consume) loop until stop.
func (m *simMember) start(interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel, m.done = cancel, make(chan struct{})
	go func() {
		defer close(m.done)
		for ctx.Err() == nil {
			m.beat()
			m.mu.Lock()
			consume := m.consume
			m.mu.Unlock()
			if consume {
				m.consumeOnce(ctx)
			}
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}()
}

// stop ends the loops without leaving (a crash, as far as the coordinator knows).
func (m *simMember) stop() {
	if m.cancel != nil {
		m.cancel()
		<-m.done
	}
}

func (m *simMember) beat() {
	m.mu.Lock()
	epoch, mv, owned := m.epoch, m.mv, append([]int(nil), m.owned...)
	m.mu.Unlock()
	r, err := m.tc.TryDoAs("admin", "password", "POST", fmt.Sprintf("/coord/v1/streams/%s/groups/%s/members/%s/heartbeat", m.prefix, m.group, m.id), heartbeatBody(m.id, epoch, mv, owned, nil))
	if err != nil || r.Status != 200 {
		return
	}
	hb := decodeHeartbeat(m.tc.t, r.Body)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.statuses[hb.Status]++
	switch hb.Status {
	case "OK":
		m.epoch, m.mv = hb.MemberEpoch, hb.MetadataVersion
		m.owned = hb.Assigned
	case "SYNC_METADATA", "REVOKE_PENDING":
		m.epoch, m.mv = hb.MemberEpoch, hb.MetadataVersion
		m.owned = intersectInts(m.owned, hb.Assigned)
	case "FENCED_MEMBER_EPOCH", "UNKNOWN_MEMBER_ID":
		m.epoch, m.mv, m.owned = 0, 0, nil
	}
}

func (m *simMember) consumeOnce(ctx context.Context) {
	m.mu.Lock()
	owned := append([]int(nil), m.owned...)
	m.mu.Unlock()
	for _, s := range owned {
		key := fmt.Sprintf("%s:%d", m.prefix, s)
		for _, start := range []string{"0", ">"} {
			res, err := m.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: m.group, Consumer: m.id, Streams: []string{key, start}, Count: 100, Block: -1}).Result()
			if err != nil {
				if !errors.Is(err, redis.Nil) && !strings.Contains(err.Error(), "NOGROUP") && ctx.Err() == nil {
					m.tc.t.Logf("%s: XREADGROUP %s: %v", m.id, key, err)
				}
				continue
			}
			for _, st := range res {
				for _, msg := range st.Messages {
					if err := m.rdb.XAck(ctx, key, m.group, msg.ID).Err(); err == nil {
						m.mu.Lock()
						m.acked++
						m.mu.Unlock()
					}
				}
			}
		}
	}
}

func (m *simMember) ackedNow() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.acked
}

func (m *simMember) setConsume(on bool) {
	m.mu.Lock()
	m.consume = on
	m.mu.Unlock()
}

func (m *simMember) ownedNow() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := append([]int(nil), m.owned...)
	sort.Ints(out)
	return out
}

func intersectInts(a, b []int) []int {
	var out []int
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
				break
			}
		}
	}
	return out
}

// migrationState reads the state of a group's only (or given) resharding.
func (tc *testCoordinator) migration(prefix, group, id string) map[string]any {
	tc.t.Helper()
	r := tc.Do("GET", fmt.Sprintf("/coord/v1/streams/%s/groups/%s/migrations/%s", prefix, group, id), nil).MustStatus(tc.t, 200)
	return r.JSON
}

func noOverlap(tb testing.TB, members ...*simMember) {
	tb.Helper()
	seen := map[int]string{}
	for _, m := range members {
		for _, s := range m.ownedNow() {
			if other, ok := seen[s]; ok {
				tb.Fatalf("shard %d owned by %s and %s at once", s, other, m.id)
			}
			seen[s] = m.id
		}
	}
}
