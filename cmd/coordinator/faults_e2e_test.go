package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
)

// linkProxy is a TCP proxy between the coordinator and Redis whose link can be cut
// (every connection reset, new ones refused) and restored.
type linkProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func newLinkProxy(t *testing.T, target string) *linkProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &linkProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	return p
}

func (p *linkProxy) addr() string { return p.ln.Addr().String() }

func (p *linkProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); up.Close(); c.Close() }()
		go func() { _, _ = io.Copy(c, up); up.Close(); c.Close() }()
	}
}

func (p *linkProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for c := range p.conns {
			c.Close()
		}
		p.conns = map[net.Conn]bool{}
	}
}

// TestIntegrationRedisLinkCut: while the coordinator cannot reach Redis it reports
// unready, refuses decisions with 503 (a joining member is not answered from state
// that was not persisted), and it recovers by itself when the link returns.
func TestIntegrationRedisLinkCut(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t)
	proxy := newLinkProxy(t, rs.Addr())
	tc := startCoordinator(t, rs, func(m *Main) {
		fastTimings(m)
		m.RedisURL = "redis://" + proxy.addr() + "/0"
	})
	createGroup(t, tc, "cut", "g", 2)
	proxy.setCut(true)
	eventually(t, 10*time.Second, "/readyz 503 while Redis is unreachable", func() bool {
		r, err := tc.TryDoAs("", "", "GET", "/readyz", nil)
		return err == nil && r.Status == 503
	})
	r := tc.Do("POST", "/coord/v1/streams/cut/groups/g2", map[string]any{"initialShardCount": 2, "requestedBy": "t"})
	if r.Status != 503 {
		t.Fatalf("create while Redis is down: %d %s, want 503", r.Status, r.Body)
	}
	hb := tc.Do("POST", "/coord/v1/streams/cut/groups/g/members/m1/heartbeat", heartbeatBody("m1", 0, 0, nil, nil))
	if hb.Status != 503 {
		t.Fatalf("join while Redis is down: %d %s, want 503 (nothing unpersisted may be promised)", hb.Status, hb.Body)
	}
	proxy.setCut(false)
	eventually(t, 15*time.Second, "/readyz 200 after the link returns", func() bool {
		r, err := tc.TryDoAs("", "", "GET", "/readyz", nil)
		return err == nil && r.Status == 200
	})
	tc.Do("POST", "/coord/v1/streams/cut/groups/g2", map[string]any{"initialShardCount": 2, "requestedBy": "t"}).MustStatus(t, 201)
	if got := tc.Heartbeat("cut", "g", "m1", 0, 0, nil); got.Status != "OK" || len(got.Assigned) != 2 {
		t.Fatalf("join after recovery: %+v", got)
	}
}

// TestIntegrationRedisRestartMidResharding: Redis (AOF on) restarts during a
// scale-in with members consuming; the resharding completes and nothing is lost.
func TestIntegrationRedisRestartMidResharding(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t, redistest.WithArgs("--appendonly", "yes", "--appendfsync", "always"))
	tc := startCoordinator(t, rs, fastTimings)
	ctx := context.Background()
	createGroup(t, tc, "rr", "g", 4)
	rdb := rs.Client(t)
	m := newSimMember(tc, "rr", "g", "m", rdb, false)
	m.start(100 * time.Millisecond)
	defer m.stop()
	eventually(t, 10*time.Second, "member owns all shards", func() bool { return len(m.ownedNow()) == 4 })
	for i := 0; i < 40; i++ {
		rdb.XAdd(ctx, &redis.XAddArgs{Stream: fmt.Sprintf("rr:%d", i%4), Values: map[string]any{"n": i}})
	}
	id := scale(t, tc, "rr", "g", 2)
	rs.Restart(t)
	m.setConsume(true)
	waitState(t, tc, "rr", "g", id, "DEPRECATED", 30*time.Second)
	if m.ackedNow() != 40 {
		t.Fatalf("acked %d of 40 entries", m.ackedNow())
	}
	eventually(t, 10*time.Second, "ready again", func() bool {
		r, err := tc.TryDoAs("", "", "GET", "/readyz", nil)
		return err == nil && r.Status == 200
	})
}
