package member_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
)

// holdingCoordinator answers heartbeats like fakeCoordinator, but holds
// every heartbeat that asks to be held (X-Rsc-Hold-Ms) until the test
// releases it (answered "woken") or its caller goes away.
type holdingCoordinator struct {
	srv *httptest.Server

	mu      sync.Mutex
	reply   reply
	reqs    []client.HeartbeatRequest
	holds   []string // X-Rsc-Hold-Ms of each request ("" for none)
	release chan struct{}
	held    int  // requests held now
	drop    bool // close every request's connection without an answer
}

func newHoldingCoordinator(t *testing.T, r reply) *holdingCoordinator {
	t.Helper()
	f := &holdingCoordinator{reply: r, release: make(chan struct{})}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		var req client.HeartbeatRequest
		if err := json.NewDecoder(hr.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		hold := hr.Header.Get("X-Rsc-Hold-Ms")
		f.mu.Lock()
		f.reqs = append(f.reqs, req)
		f.holds = append(f.holds, hold)
		release, drop := f.release, f.drop
		f.mu.Unlock()
		if drop {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		outcome := ""
		if hold != "" {
			outcome = client.HoldAnswered
			f.mu.Lock()
			f.held++
			f.mu.Unlock()
			select {
			case <-release:
				outcome = client.HoldWoken
			case <-hr.Context().Done():
			}
			f.mu.Lock()
			f.held--
			f.mu.Unlock()
			if hr.Context().Err() != nil {
				return
			}
		}
		f.mu.Lock()
		rep := f.reply
		f.mu.Unlock()
		resp, _ := rep(req)
		resp.ResponseTo, resp.MemberID = req.RequestID, req.MemberID
		resp.HeartbeatIntervalMs = time.Minute.Milliseconds()
		if resp.Assignment.AssignedShards == nil {
			resp.Assignment.AssignedShards = []client.Shard{}
		}
		resp.Assignment.PendingShards = []client.Shard{}
		if outcome != "" {
			w.Header().Set("X-Rsc-Hold", outcome)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// wake answers the held heartbeats with r.
func (f *holdingCoordinator) wake(r reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reply = r
	close(f.release)
	f.release = make(chan struct{})
}

func (f *holdingCoordinator) heldNow() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

func (f *holdingCoordinator) last() (client.HeartbeatRequest, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		return client.HeartbeatRequest{}, ""
	}
	return f.reqs[len(f.reqs)-1], f.holds[len(f.holds)-1]
}

// TestHeldHeartbeatsByDefault: with the defaults a member that joined asks
// for its heartbeats to be held for the coordinator's interval (a minute
// here), and a held answer that revokes a shard is acted on at once: the
// shard is reported released, and the member holds its next heartbeat
// again, without waiting a minute for either.
func TestHeldHeartbeatsByDefault(t *testing.T) {
	e := setup(t, 2, nil)
	f := newHoldingCoordinator(t, answer(client.StatusOK, 2, 0, 1))
	var got received
	cfg := e.config(func(c *member.Config) {
		c.Coordinator = client.New(f.srv.URL, nil)
		c.PlainHeartbeats = false
		c.HeartbeatInterval = time.Minute
	})
	rt := e.start(t, cfg, got.handler)
	eventually(t, "a held heartbeat reporting both shards", func() bool {
		req, hold := f.last()
		return hold == "60000" && equalInts(owned(req), []int{0, 1}) && f.heldNow() == 1
	})
	f.wake(answer(client.StatusOK, 3, 0))
	eventually(t, "shard 1 reported REVOKED", func() bool {
		for _, req := range func() []client.HeartbeatRequest {
			f.mu.Lock()
			defer f.mu.Unlock()
			return append([]client.HeartbeatRequest(nil), f.reqs...)
		}() {
			if st, _ := revokeState(req, 1); st == client.RevokeRevoked {
				return true
			}
		}
		return false
	})
	eventually(t, "a held heartbeat again, reading shard 0 only", func() bool {
		req, hold := f.last()
		return hold != "" && equalInts(owned(req), []int{0}) && len(req.RevokingShards) == 0 && f.heldNow() == 1
	})
	if s := rt.Stats(); s.HeldHeartbeats < 1 {
		t.Fatalf("stats %+v: no held heartbeat counted", s)
	}
}

// TestRevokedShardReleasedWithoutWaitingForTheBlock: a revoked shard's
// reader blocked in XREADGROUP is unblocked at once (CLIENT UNBLOCK), so
// the shard is reported released long before its block (a minute) would
// have ended.
func TestRevokedShardReleasedWithoutWaitingForTheBlock(t *testing.T) {
	e := setup(t, 2, answer(client.StatusOK, 2, 0, 1))
	var got received
	e.start(t, e.config(func(c *member.Config) { c.Block = time.Minute }), got.handler)
	eventually(t, "both shards owned", func() bool { return equalInts(owned(e.coord.last("w")), []int{0, 1}) })
	// Let the readers block.
	e.heartbeats(t, "w", 3)
	e.coord.set(answer(client.StatusOK, 3, 0))
	eventually(t, "shard 1 reported REVOKED", func() bool {
		for _, req := range e.coord.requests("w") {
			if st, _ := revokeState(req, 1); st == client.RevokeRevoked {
				return true
			}
		}
		return false
	})
	// Shard 0 is still read.
	id := e.publish(t, 0, "after")
	eventually(t, "shard 0 still read", func() bool { return got.has("after") && e.delivered(t, 0, id) })
}

func (f *holdingCoordinator) dropping(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drop = on
	if on {
		close(f.release) // the held heartbeat is dropped too (answered "woken", then closed)
		f.release = make(chan struct{})
	}
}

// TestDroppedHeldHeartbeatPausesReading: while the connection of a held
// heartbeat, and of the heartbeats after it, close without an answer (a
// link that resets them), the coordinator may expire the member at the end
// of its drop grace, a second: the member stops reading until a heartbeat
// gets through (its lease of five minutes notwithstanding), then reads on.
func TestDroppedHeldHeartbeatPausesReading(t *testing.T) {
	e := setup(t, 1, nil)
	f := newHoldingCoordinator(t, answer(client.StatusOK, 2, 0))
	var got received
	rt := e.start(t, e.config(func(c *member.Config) {
		c.Coordinator = client.New(f.srv.URL, nil)
		c.PlainHeartbeats = false
		c.HeartbeatInterval = time.Minute
	}), got.handler)
	eventually(t, "a held heartbeat", func() bool { return f.heldNow() == 1 })
	f.dropping(true)
	eventually(t, "reading paused", func() bool { return !rt.Members()[0].LeaseValid })
	f.dropping(false)
	eventually(t, "reading again", func() bool { return rt.Members()[0].LeaseValid })
	e.publish(t, 0, "after")
	eventually(t, "the entry handled", func() bool { return got.has("after") })
}

// TestHeldHeartbeatRefusedKeepsReading: when the coordinator goes away (its
// port refuses connections) nobody can expire the member at the end of a
// drop grace: the member keeps reading on its lease, as with plain
// heartbeats.
func TestHeldHeartbeatRefusedKeepsReading(t *testing.T) {
	e := setup(t, 1, nil)
	f := newHoldingCoordinator(t, answer(client.StatusOK, 2, 0))
	var got received
	rt := e.start(t, e.config(func(c *member.Config) {
		c.Coordinator = client.New(f.srv.URL, nil)
		c.PlainHeartbeats = false
		c.HeartbeatInterval = time.Minute
	}), got.handler)
	eventually(t, "a held heartbeat", func() bool { return f.heldNow() == 1 })
	f.srv.CloseClientConnections()
	f.srv.Listener.Close() // refuses from now on
	e.publish(t, 0, "while down")
	eventually(t, "the entry handled while the coordinator is down", func() bool { return got.has("while down") })
	if !rt.Members()[0].LeaseValid {
		t.Fatal("reading paused although no coordinator listens")
	}
}
