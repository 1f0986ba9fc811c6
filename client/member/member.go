package member

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rscoord/rsc/client"
)

// shardState is where a shard is in a member's hands.
type shardState int

const (
	// shardReading: its reader runs (paused while the lease is lapsed); listed
	// in ownedShards.
	shardReading shardState = iota
	// shardDraining: revoked; its reader finishes in-flight messages and acks.
	// Reported as DRAINING, so the coordinator still counts it as held.
	shardDraining
	// shardRevoked: drained; reported REVOKED (inFlight 0) once, then forgotten.
	shardRevoked
	// shardAbandoned: dropped by a reset (fenced); its reader is stopping and
	// it is never reported again.
	shardAbandoned
)

// ownedShard is a shard a member holds; only the member's loop touches it.
type ownedShard struct {
	index     int
	state     shardState
	reader    *reader
	resume    bool // re-assigned by an OK while draining: read again once drained
	revokedAt time.Time
}

// member is one logical member: a heartbeat loop that owns its state, and one
// reader goroutine per shard it reads.
type member struct {
	rt   *Runtime
	id   string
	name string
	log  *slog.Logger

	// Owned by the loop goroutine.
	epoch    int64
	mv       int64
	interval time.Duration
	shards   map[int]*ownedShard
	lapsed   bool
	joined   bool

	// unheld counts the answers in a row that came at once although the
	// member had nothing to report (held heartbeats): after a few it waits
	// its interval, so a coordinator that keeps answering at once (a
	// correction round, say) is not asked in a loop.
	unheld int
	// graceRisk: a held heartbeat of this member ended without an answer
	// (it failed, or the member abandoned it). The coordinator that held it
	// expires the member after its drop grace (--heartbeat-drop-grace, 1 s)
	// unless a heartbeat gets through meanwhile: the next is sent at once
	// (once: retried), and while none got through the member reads nothing
	// (pausedLease is the lease it had), unless no coordinator listens at
	// all (every endpoint refused: none runs a grace), when the lease it had
	// applies again.
	graceRisk   bool
	retried     bool
	pausedLease int64

	leaseUntil atomic.Int64  // monotonic nanos since leaseEpoch; readers read only before it
	wake       chan struct{} // a reader exited or holds entries back: heartbeat now
	// gate is what the last applied answer said about ordering: the
	// readers hold entries back by it (gate.go).
	gate *gate
	// holding is the number of readers holding entries back: heartbeat
	// every HoldHeartbeatInterval meanwhile.
	holding atomic.Int32

	mu     sync.Mutex
	status MemberStatus
}

func newMember(rt *Runtime, id string) *member {
	name := rt.cfg.MemberName
	if name == "" {
		name = id
	}
	m := &member{
		rt: rt, id: id, name: name, log: rt.cfg.Logger.With("member", id),
		interval: rt.cfg.HeartbeatInterval, shards: map[int]*ownedShard{}, wake: make(chan struct{}, 1), gate: newGate(),
	}
	m.status = MemberStatus{MemberID: id, Owned: []int{}, Draining: []int{}}
	return m
}

// run is the heartbeat loop: heartbeat, apply the answer, wait for the next
// interval (or for a drained shard to report); on ctx done, leave.
func (m *member) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			m.shutdown()
			return
		case <-timer.C:
		case <-m.wake:
		}
		if ctx.Err() != nil {
			m.shutdown()
			return
		}
		m.housekeep()
		if m.hasAbandoned() {
			// Rejoin only once the readers of the fenced assignment stopped.
			timer.Reset(m.interval)
			continue
		}
		next := m.heartbeat(ctx)
		if m.holding.Load() > 0 {
			next = min(next, m.rt.cfg.HoldHeartbeatInterval)
		}
		timer.Reset(next)
	}
}

// poke asks the loop for an early heartbeat.
func (m *member) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// leaseEpoch is what lease ends are measured from: a time.Now reading that
// carries the monotonic clock, so that time.Since(leaseEpoch) is monotonic
// and a step of the wall clock (NTP) neither ends a lease nor extends one.
var leaseEpoch = time.Now()

func (m *member) leaseValid() bool {
	return int64(time.Since(leaseEpoch)) < m.leaseUntil.Load()
}

// lease is the local assignment lease.
func (m *member) lease() time.Duration {
	if m.rt.cfg.MemberLease > 0 {
		return m.rt.cfg.MemberLease
	}
	return leaseIntervals * m.interval
}

// housekeep moves drained shards on: to REVOKED, or back to reading when an OK
// re-assigned them meanwhile; and forgets abandoned shards whose reader stopped.
func (m *member) housekeep() {
	var released []int
	for _, idx := range m.sortedShards() {
		s := m.shards[idx]
		switch s.state {
		case shardDraining:
			if !s.reader.exited() {
				continue
			}
			if s.resume && m.leaseValid() {
				m.startReader(s)
				m.rt.emit(Event{MemberID: m.id, Kind: EventAssigned, Shards: []int{idx}, Detail: "re-assigned while draining"})
				continue
			}
			s.state, s.reader, s.resume, s.revokedAt = shardRevoked, nil, false, time.Now()
			released = append(released, idx)
		case shardAbandoned:
			if s.reader == nil || s.reader.exited() {
				delete(m.shards, idx)
			}
		}
	}
	if len(released) > 0 {
		m.log.Info("shards drained; reporting them revoked", "shards", released)
		m.rt.emit(Event{MemberID: m.id, Kind: EventReleased, Shards: released})
	}
	m.publishStatus("")
}

func (m *member) hasAbandoned() bool {
	for _, s := range m.shards {
		if s.state == shardAbandoned {
			return true
		}
	}
	return false
}

func (m *member) sortedShards() []int {
	idx := make([]int, 0, len(m.shards))
	for i := range m.shards {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	return idx
}

// buildRequest is the heartbeat body of the member's current state. A join
// (epoch 0) reports nothing: the coordinator only accepts an empty join.
func (m *member) buildRequest(epoch int64, available int) *client.HeartbeatRequest {
	req := &client.HeartbeatRequest{
		ProtocolVersion: new(client.ProtocolVersion), RequestID: client.NewRequestID(),
		MemberID: m.id, MemberName: new(m.name), MemberEpoch: new(epoch), MetadataVersion: new(m.mv),
		RuntimeConsumerCapacity: &client.Capacity{RuntimeMaxConcurrency: new(1), AvailableConcurrency: new(available)},
		OwnedShards:             []client.Shard{}, RevokingShards: []client.RevokeReport{}, ShardProgress: []client.ShardProgress{},
	}
	if epoch == 0 {
		return req
	}
	for _, idx := range m.sortedShards() {
		s := m.shards[idx]
		switch s.state {
		case shardReading:
			req.OwnedShards = append(req.OwnedShards, client.Shard{ShardIndex: idx})
			req.ShardProgress = append(req.ShardProgress, s.reader.progress())
		case shardDraining:
			req.RevokingShards = append(req.RevokingShards, client.RevokeReport{
				Shard: &client.Shard{ShardIndex: idx}, State: client.RevokeDraining, InFlight: max(1, int(s.reader.inFlight.Load())),
			})
			req.ShardProgress = append(req.ShardProgress, s.reader.progress())
		case shardRevoked:
			req.RevokingShards = append(req.RevokingShards, client.RevokeReport{
				Shard: &client.Shard{ShardIndex: idx}, State: client.RevokeRevoked, InFlight: 0,
				AckedAt: new(s.revokedAt.UTC().Format(time.RFC3339Nano)),
			})
		}
	}
	return req
}

// available is the free capacity reported: 0 while a handler runs.
func (m *member) available() int {
	for _, s := range m.shards {
		if s.reader != nil && s.reader.inFlight.Load() > 0 {
			return 0
		}
	}
	return 1
}

// heartbeat sends one heartbeat (held, when it may be), applies the answer,
// and returns the delay until the next one.
func (m *member) heartbeat(ctx context.Context) time.Duration {
	req := m.buildRequest(m.epoch, m.available())
	sent := time.Now()
	hold := m.holdFor(req)
	var resp *client.HeartbeatResponse
	var outcome string
	var err error
	woke := false
	if hold > 0 {
		resp, outcome, woke, err = m.held(ctx, req, hold)
	} else {
		hctx, cancel := context.WithTimeout(ctx, m.callTimeout())
		resp, err = m.rt.cfg.Coordinator.Heartbeat(hctx, m.rt.cfg.StreamPrefix, m.rt.cfg.ConsumerGroup, req)
		cancel()
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0 // stopping
		}
		if hold > 0 && client.Unanswered(err) {
			m.graceRisk = true
		}
		if woke {
			return 0 // a reader has news: heartbeat again at once
		}
		m.rt.stats.heartbeatFailures.Add(1)
		m.log.Warn("heartbeat failed; keeping the assignment while the lease lasts", "err", err, "leaseValid", m.leaseValid())
		m.graceLease(err)
		m.checkLease()
		m.publishStatus("")
		if m.graceRisk && !m.retried {
			m.retried = true
			return 0
		}
		return min(m.interval, time.Second)
	}
	m.graceRisk, m.retried, m.pausedLease = false, false, 0
	m.rt.stats.heartbeats.Add(1)
	if outcome == client.HoldWoken || outcome == client.HoldElapsed {
		m.rt.stats.heldHeartbeats.Add(1)
	}
	m.apply(req, resp, sent)
	m.checkLease()
	if woke {
		return 0
	}
	return m.nextDelay(hold > 0, outcome)
}

// graceLease pauses reading after a failed heartbeat while the coordinator
// may expire the member at the end of its drop grace (graceRisk), and
// gives the lease back when the failure shows no coordinator listens.
func (m *member) graceLease(err error) {
	switch {
	case !m.graceRisk:
	case client.Refused(err):
		if m.pausedLease != 0 {
			m.leaseUntil.Store(m.pausedLease)
			m.pausedLease = 0
		}
	case m.pausedLease == 0 && m.leaseValid():
		m.pausedLease = m.leaseUntil.Swap(int64(time.Since(leaseEpoch)))
	}
}

// holdFor is how long the heartbeat req may be held (0: send it plain):
// held heartbeats are on, the member has joined and reports nothing the
// coordinator must act on (a revoke report is answered at once anyway), and
// its lease is valid (the answer that renews it must come at once).
func (m *member) holdFor(req *client.HeartbeatRequest) time.Duration {
	if m.rt.cfg.PlainHeartbeats || !m.joined || *req.MemberEpoch <= 0 || len(req.RevokingShards) > 0 || !m.leaseValid() {
		return 0
	}
	hold := m.rt.cfg.HeartbeatHold
	if hold <= 0 {
		hold = m.interval
	}
	return min(hold, m.lease()/3)
}

// held sends req as a held heartbeat. A reader's news (a drained shard,
// entries held back) ends the wait: the call is abandoned (the coordinator
// sees its connection close; the heartbeat that follows at once keeps the
// member), and woke is true.
func (m *member) held(ctx context.Context, req *client.HeartbeatRequest, hold time.Duration) (resp *client.HeartbeatResponse, outcome string, woke bool, err error) {
	hctx, cancel := context.WithTimeout(ctx, hold+m.callTimeout())
	defer cancel()
	type answer struct {
		resp    *client.HeartbeatResponse
		outcome string
		err     error
	}
	ch := make(chan answer, 1)
	go func() {
		r, o, e := m.rt.cfg.Coordinator.HeldHeartbeat(hctx, m.rt.cfg.StreamPrefix, m.rt.cfg.ConsumerGroup, req, hold)
		ch <- answer{r, o, e}
	}()
	select {
	case a := <-ch:
		return a.resp, a.outcome, false, a.err
	case <-m.wake:
		cancel()
		a := <-ch // an answer that came meanwhile is applied
		return a.resp, a.outcome, true, a.err
	}
}

// nextDelay is the wait before the next heartbeat after an answer: none
// after a held one (the next is held in turn), nor after one that came at
// once with news while the member has nothing to report (a few in a row at
// most); the interval otherwise: plain heartbeats, a coordinator that holds
// none, a member with revoke reports to make (its readers wake it).
func (m *member) nextDelay(askedHold bool, outcome string) time.Duration {
	if m.rt.cfg.PlainHeartbeats {
		return m.interval
	}
	switch {
	case outcome == client.HoldWoken || outcome == client.HoldElapsed:
		m.unheld = 0
		return 0
	case outcome == client.HoldReleased:
		return min(m.interval, time.Second) // the coordinator stops or lost the lead
	case askedHold && outcome != client.HoldAnswered:
		return m.interval // limit, off, or a coordinator that holds no heartbeat
	case len(m.statesOf(shardDraining, shardRevoked)) > 0:
		return m.interval
	}
	m.unheld++
	if m.unheld <= maxUnheld {
		return 0
	}
	return m.interval
}

// maxUnheld is how many answers in a row may come at once before the member
// waits its interval (see member.unheld).
const maxUnheld = 3

func (m *member) callTimeout() time.Duration {
	return min(max(2*m.interval, time.Second), client.DefaultTimeout)
}

// checkLease reports lease lapses and restorations.
func (m *member) checkLease() {
	if !m.joined {
		return
	}
	valid := m.leaseValid()
	switch {
	case !valid && !m.lapsed:
		m.lapsed = true
		m.log.Warn("assignment lease lapsed: heartbeats failed for longer than the member lease, or a held heartbeat went unanswered (the coordinator may expire the member after its drop grace); reading of all shards paused", "lease", m.lease())
		m.rt.emit(Event{MemberID: m.id, Kind: EventLeaseLapsed, Shards: m.statesOf(shardReading)})
	case valid && m.lapsed:
		m.lapsed = false
		m.log.Info("assignment lease restored; reading resumes")
		m.rt.emit(Event{MemberID: m.id, Kind: EventLeaseRestored, Shards: m.statesOf(shardReading)})
	}
}

// apply is the status handling of CONTRACT §3.4.
func (m *member) apply(req *client.HeartbeatRequest, resp *client.HeartbeatResponse, sent time.Time) {
	switch resp.Status {
	case client.StatusOK:
		m.adopt(req, resp, sent)
		assigned := shardSet(resp.Assignment.AssignedShards)
		m.revokeUnassigned(assigned, true)
		var started []int
		for _, idx := range client.Indexes(resp.Assignment.AssignedShards) {
			s := m.shards[idx]
			switch {
			case s == nil:
				s = &ownedShard{index: idx}
				m.shards[idx] = s
				m.startReader(s)
				started = append(started, idx)
			case s.state == shardRevoked:
				// Drained after the request was built, and granted again.
				m.startReader(s)
				started = append(started, idx)
			}
		}
		if len(started) > 0 {
			sort.Ints(started)
			m.log.Info("reading newly assigned shards", "shards", started, "memberEpoch", m.epoch)
			m.rt.emit(Event{MemberID: m.id, Kind: EventAssigned, Shards: started})
		}
	case client.StatusSyncMetadata, client.StatusRevokePending:
		// Drain only: keep what is both owned and assigned, never start new shards.
		m.adopt(req, resp, sent)
		m.revokeUnassigned(shardSet(resp.Assignment.AssignedShards), false)
	case client.StatusFenced, client.StatusUnknownMember:
		m.log.Warn("coordinator no longer accepts this member; stopping every shard and rejoining", "status", resp.Status, "memberEpoch", *req.MemberEpoch)
		m.reset(resp)
	case client.StatusUnsupportedProtocol, client.StatusInvalidRequest:
		m.log.Error("coordinator rejected the heartbeat; keeping state and heartbeating", "status", resp.Status, "memberEpoch", *req.MemberEpoch)
	default:
		m.log.Debug("heartbeat status without action", "status", resp.Status)
	}
	m.publishStatus(resp.Status)
}

// adopt takes the epochs of an accepted answer, renews the lease and forgets
// the REVOKED reports the coordinator just received.
func (m *member) adopt(req *client.HeartbeatRequest, resp *client.HeartbeatResponse, sent time.Time) {
	if !m.joined || *req.MemberEpoch == 0 {
		m.log.Info("joined the group", "memberEpoch", resp.MemberEpoch, "metadataVersion", resp.MetadataVersion, "status", resp.Status)
		m.rt.emit(Event{MemberID: m.id, Kind: EventJoined, Detail: resp.Status})
	}
	m.joined = true
	m.epoch, m.mv = resp.MemberEpoch, resp.MetadataVersion
	if resp.HeartbeatIntervalMs > 0 {
		m.interval = time.Duration(resp.HeartbeatIntervalMs) * time.Millisecond
	}
	m.leaseUntil.Store(int64(sent.Add(m.lease()).Sub(leaseEpoch)))
	if m.gate.learn(resp.MetadataVersion, resp.Assignment.Ordering, resp.Assignment.Barriers) {
		if k := m.gate.load(); len(k.barriers) > 0 || k.ordered {
			m.log.Debug("ordering knowledge", "metadataVersion", k.version, "ordered", k.ordered, "barriers", k.barriers)
		}
	}
	for _, r := range req.RevokingShards {
		if s := m.shards[r.Shard.ShardIndex]; r.State == client.RevokeRevoked && s != nil && s.state == shardRevoked {
			delete(m.shards, r.Shard.ShardIndex)
		}
	}
}

// revokeUnassigned stops reading owned shards missing from assigned. With
// fromOK, a draining shard that is assigned again resumes once drained.
func (m *member) revokeUnassigned(assigned map[int]bool, fromOK bool) {
	var revoking []int
	for _, idx := range m.sortedShards() {
		s := m.shards[idx]
		switch s.state {
		case shardReading:
			if !assigned[idx] {
				s.state = shardDraining
				s.reader.stop()
				revoking = append(revoking, idx)
			}
		case shardDraining:
			s.resume = fromOK && assigned[idx]
		}
	}
	if len(revoking) > 0 {
		m.log.Info("revoked: stop reading, finish in-flight messages, then release", "shards", revoking)
		m.rt.emit(Event{MemberID: m.id, Kind: EventRevoking, Shards: revoking})
	}
}

// reset stops every shard at once and starts over with epoch 0.
func (m *member) reset(resp *client.HeartbeatResponse) {
	lost := m.statesOf(shardReading, shardDraining)
	for idx, s := range m.shards {
		if s.reader != nil && !s.reader.exited() {
			s.reader.stop()
			s.state = shardAbandoned
			continue
		}
		delete(m.shards, idx)
	}
	m.epoch, m.mv = 0, resp.MetadataVersion
	m.leaseUntil.Store(0)
	m.joined, m.lapsed = false, false
	m.rt.emit(Event{MemberID: m.id, Kind: EventFenced, Shards: lost, Detail: resp.Status})
}

func (m *member) startReader(s *ownedShard) {
	s.reader = newReader(m, s.index)
	s.state, s.resume = shardReading, false
	m.rt.readers.Add(1)
	go func(r *reader) {
		defer m.rt.readers.Done()
		r.run()
	}(s.reader)
}

func (m *member) statesOf(states ...shardState) []int {
	var out []int
	for _, idx := range m.sortedShards() {
		for _, st := range states {
			if m.shards[idx].state == st {
				out = append(out, idx)
			}
		}
	}
	return out
}

// shutdown is the graceful stop: stop reading, finish and ack in-flight
// messages, then leave with memberEpoch -1 and a revoke report per shard.
func (m *member) shutdown() {
	for _, idx := range m.sortedShards() {
		s := m.shards[idx]
		s.resume = false
		if s.state == shardReading {
			s.state = shardDraining
			s.reader.stop()
		}
	}
	deadline := time.Now().Add(m.rt.cfg.ShutdownTimeout)
	for _, s := range m.shards {
		if s.reader == nil {
			continue
		}
		select {
		case <-s.reader.done:
		case <-time.After(time.Until(deadline)):
		}
	}
	m.housekeep()
	if m.epoch <= 0 {
		return // never joined (or fenced): nothing to leave
	}
	req := m.buildRequest(-1, 0)
	for attempt := 0; attempt < 3; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), m.callTimeout())
		resp, err := m.rt.cfg.Coordinator.Heartbeat(ctx, m.rt.cfg.StreamPrefix, m.rt.cfg.ConsumerGroup, req)
		cancel()
		if err == nil {
			m.log.Info("left the group", "status", resp.Status, "released", m.statesOf(shardRevoked), "stillDraining", m.statesOf(shardDraining))
			m.rt.emit(Event{MemberID: m.id, Kind: EventLeft, Shards: m.statesOf(shardRevoked), Detail: resp.Status})
			m.publishStatus(resp.Status)
			return
		}
		if time.Now().After(deadline) || errors.Is(err, context.Canceled) {
			break
		}
		m.log.Warn("leave heartbeat failed; retrying", "err", err)
		time.Sleep(200 * time.Millisecond)
	}
	m.log.Warn("could not leave the group; the coordinator will expire this member after its lease")
}

// publishStatus refreshes the snapshot Runtime.Members returns.
func (m *member) publishStatus(status string) {
	st := MemberStatus{
		MemberID: m.id, MemberEpoch: m.epoch, MetadataVersion: m.mv,
		Owned: m.statesOf(shardReading), Draining: m.statesOf(shardDraining), LeaseValid: m.leaseValid(),
	}
	if st.Owned == nil {
		st.Owned = []int{}
	}
	if st.Draining == nil {
		st.Draining = []int{}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	st.LastStatus = m.status.LastStatus
	if status != "" {
		st.LastStatus = status
	}
	m.status = st
}

func (m *member) snapshot() MemberStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.status
	st.Owned = append([]int(nil), st.Owned...)
	st.Draining = append([]int(nil), st.Draining...)
	st.LeaseValid = m.leaseValid()
	return st
}

func shardSet(shards []client.Shard) map[int]bool {
	set := make(map[int]bool, len(shards))
	for _, s := range shards {
		set[s.ShardIndex] = true
	}
	return set
}
