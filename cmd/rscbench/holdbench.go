package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// runHoldMemory measures what a held heartbeat costs the coordinator in
// memory: --held-requests members each hold one heartbeat (a raw TCP
// connection that sent it and reads nothing), against the baseline of as
// many idle keep-alive connections whose heartbeat was answered at once.
// Both are measured in this process after a GC (heap and stacks in use);
// the client side of a raw connection is a few hundred bytes, in both.
func (b *bench) runHoldMemory(ctx context.Context, rep *Report) error {
	n := b.o.heldRequests
	coord, err := runCoordinator(ctx, coordinator.Config{
		MemberLease: benchLease, RebalanceTimeout: benchRebalanceTimeout, DisableProvisioning: true, SnapshotEvery: -1,
		ShardCheckInterval: -1, MemberChurnPerMinute: -1, PrincipalChurnPerMinute: -1, MaxMembersPerPrincipal: -1,
		MaxHeartbeatHold: benchLease, HeartbeatDropGrace: -1,
		MaxHeldHeartbeats: n, MaxHeldHeartbeatsPerPrincipal: n, Logger: zerolog.Nop(),
	}, events.NewMemLog(), nil, nil, nil)
	if err != nil {
		return err
	}
	defer coord.Close()
	const perGroup = 100
	b.logf("latency: %d members settle in %d groups, to hold a heartbeat each", n, (n+perGroup-1)/perGroup)
	var members []*member
	for gi := 0; len(members) < n; gi++ {
		k := projection.GroupKey{StreamPrefix: fmt.Sprintf("%s-held%03d", b.st.prefix, gi), ConsumerGroup: "workers"}
		if err := createGroup(ctx, coord, k, perGroup, "benchmark"); err != nil {
			return err
		}
		for i := 0; i < perGroup && len(members) < n; i++ {
			members = append(members, &member{id: fmt.Sprintf("m%05d", len(members)), prefix: k.StreamPrefix, group: k.ConsumerGroup})
		}
	}
	for round := 0; ; round++ {
		steady := 0
		if err := parallel(ctx, 8, len(members), func(_, i int) error {
			m := members[i]
			req := m.request(false)
			resp, err := coord.Heartbeat(ctx, projection.GroupKey{StreamPrefix: m.prefix, ConsumerGroup: m.group}, m.id, "admin", req)
			if err != nil {
				return err
			}
			return m.adopt(req, resp)
		}); err != nil {
			return err
		}
		for _, m := range members {
			if m.steady {
				steady++
			}
		}
		if steady == len(members) {
			break
		}
		if round == maxConvergeRounds {
			return fmt.Errorf("held-memory members did not settle in %d rounds", round)
		}
	}
	srv, err := serveAPI(coord)
	if err != nil {
		return err
	}
	defer srv.Close(context.WithoutCancel(ctx))
	addr := srv.URL()[len("http://"):]

	raw := func(m *member, hold bool) ([]byte, error) {
		body, err := json.Marshal(m.request(false))
		if err != nil {
			return nil, err
		}
		h := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Basic %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n",
			m.path(), addr, base64.StdEncoding.EncodeToString([]byte("admin:password")), len(body))
		if hold {
			h += wire.HeaderHold + ": " + fmt.Sprint(benchLease.Milliseconds()) + "\r\n"
		}
		return append([]byte(h+"\r\n"), body...), nil
	}
	open := func(hold bool) ([]net.Conn, error) {
		conns := make([]net.Conn, len(members))
		err := parallel(ctx, 8, len(members), func(_, i int) error {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return err
			}
			conns[i] = c
			msg, err := raw(members[i], hold)
			if err != nil {
				return err
			}
			if _, err := c.Write(msg); err != nil {
				return err
			}
			if hold {
				return nil
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("heartbeat of %s: HTTP %d", members[i].id, resp.StatusCode)
			}
			return nil
		})
		return conns, err
	}
	closeAll := func(conns []net.Conn) {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}

	b.logf("latency: %d idle keep-alive connections, then %d held heartbeats", n, n)
	before := memInUse()
	idle, err := open(false)
	if err != nil {
		closeAll(idle)
		return err
	}
	perIdle := perConn(before, memInUse(), n)
	closeAll(idle)
	time.Sleep(200 * time.Millisecond) // the server's connection goroutines end
	before = memInUse()
	held, err := open(true)
	defer closeAll(held)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for coord.HeldHeartbeats() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d heartbeats held after 30s", coord.HeldHeartbeats(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	perHeld := perConn(before, memInUse(), n)

	s := rep.section("latency.holds", "memory of a held heartbeat in the coordinator, vs an idle keep-alive connection")
	s.param("held heartbeats", n)
	s.baseline("idle keep-alive connection", perIdle/1024, "KiB")
	s.measured("held heartbeat", perHeld/1024, "KiB", "idle keep-alive connection")
	s.info(fmt.Sprintf("%d held heartbeats", n), perHeld*float64(n)/(1<<20), "MiB")
	s.note("heap and stacks in use after a GC, divided by the connections; with --max-held-heartbeats %d (the default) the holds take at most %.0f MiB", coordinator.DefaultMaxHeldHeartbeats, perHeld*coordinator.DefaultMaxHeldHeartbeats/(1<<20))
	return nil
}

// perConn is the memory each of n connections added between before and after.
func perConn(before, after uint64, n int) float64 {
	if after < before {
		return 0
	}
	return float64(after-before) / float64(n)
}

// memInUse is the heap and stack memory in use after a collection.
func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}
