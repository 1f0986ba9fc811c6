package commands

import (
	"context"
	"fmt"
	"strings"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Heartbeat statuses, as on the wire.
const (
	StatusOK                  = "OK"
	StatusRetry               = "RETRY"
	StatusSyncMetadata        = "SYNC_METADATA"
	StatusRevokePending       = "REVOKE_PENDING"
	StatusUnknownMember       = "UNKNOWN_MEMBER_ID"
	StatusFenced              = "FENCED_MEMBER_EPOCH"
	StatusUnsupportedProtocol = "UNSUPPORTED_PROTOCOL"
	StatusInvalidRequest      = "INVALID_REQUEST"
)

// ProtocolVersion is the only coordination protocol version.
const ProtocolVersion = 1

// HeartbeatRequest is the wire body of a member heartbeat.
type HeartbeatRequest struct {
	ProtocolVersion         *int             `json:"protocolVersion"`
	RequestID               string           `json:"requestId"`
	MemberID                string           `json:"memberId"`
	MemberName              *string          `json:"memberName"`
	MemberEpoch             *int64           `json:"memberEpoch"`
	MetadataVersion         *int64           `json:"metadataVersion"`
	RuntimeConsumerCapacity *Capacity        `json:"runtimeConsumerCapacity"`
	OwnedShards             []ShardID        `json:"ownedShards"`
	RevokingShards          []RevokingReport `json:"revokingShards"`
	ShardProgress           []ShardProgress  `json:"shardProgress"`
}

// Capacity is a member's local worker capacity (recorded, not used for assignment).
type Capacity struct {
	RuntimeMaxConcurrency *int `json:"runtimeMaxConcurrency"`
	AvailableConcurrency  *int `json:"availableConcurrency"`
}

// RevokingReport is a member's revoke progress on one shard.
type RevokingReport struct {
	Shard    *ShardID `json:"shard"`
	State    string   `json:"state"`
	InFlight int      `json:"inFlight"`
	AckedAt  *string  `json:"ackedAt"`
}

func (r RevokingReport) terminal() bool { return r.State == "REVOKED" && r.InFlight == 0 }

// HeartbeatResponse is the wire answer.
type HeartbeatResponse struct {
	ResponseTo          string             `json:"responseTo"`
	Status              string             `json:"status"`
	MemberID            string             `json:"memberId"`
	MemberEpoch         int64              `json:"memberEpoch"`
	HeartbeatIntervalMs int64              `json:"heartbeatIntervalMs"`
	RebalanceTimeoutMs  int64              `json:"rebalanceTimeoutMs"`
	GroupEpoch          int64              `json:"groupEpoch"`
	AssignmentEpoch     int64              `json:"assignmentEpoch"`
	MetadataVersion     int64              `json:"metadataVersion"`
	Assignment          AssignmentResponse `json:"assignment"`
}

// AssignmentResponse is the assignment part of a heartbeat answer.
type AssignmentResponse struct {
	AssignedShards  []projection.ShardRef `json:"assignedShards"`
	PendingShards   []projection.ShardRef `json:"pendingShards"`
	MetadataVersion int64                 `json:"metadataVersion"`
}

// ValidateHeartbeat checks the body; a failure is HTTP 400.
func ValidateHeartbeat(req *HeartbeatRequest) error {
	var p []string
	if req.ProtocolVersion == nil {
		p = append(p, "protocolVersion: must not be null")
	} else if *req.ProtocolVersion < 1 {
		p = append(p, "protocolVersion: must be greater than or equal to 1")
	}
	if blank(req.RequestID) {
		p = append(p, "requestId: must not be blank")
	}
	if blank(req.MemberID) {
		p = append(p, "memberId: must not be blank")
	}
	if req.MemberEpoch == nil {
		p = append(p, "memberEpoch: must not be null")
	}
	if req.MetadataVersion == nil {
		p = append(p, "metadataVersion: must not be null")
	}
	if c := req.RuntimeConsumerCapacity; c == nil {
		p = append(p, "runtimeConsumerCapacity: must not be null")
	} else {
		if c.RuntimeMaxConcurrency == nil || *c.RuntimeMaxConcurrency < 1 {
			p = append(p, "runtimeConsumerCapacity.runtimeMaxConcurrency: must be greater than or equal to 1")
		}
		if c.AvailableConcurrency == nil || *c.AvailableConcurrency < 0 {
			p = append(p, "runtimeConsumerCapacity.availableConcurrency: must be greater than or equal to 0")
		}
	}
	for i, r := range req.RevokingShards {
		if r.Shard == nil {
			p = append(p, fmt.Sprintf("revokingShards[%d].shard: must not be null", i))
		}
		switch r.State {
		case "REVOKING", "DRAINING", "REVOKED":
		default:
			p = append(p, fmt.Sprintf("revokingShards[%d].state: must be one of REVOKING, DRAINING, REVOKED", i))
		}
	}
	for i, sp := range req.ShardProgress {
		if blank(sp.StreamKey) {
			p = append(p, fmt.Sprintf("shardProgress[%d].streamKey: must not be blank", i))
		}
	}
	if len(p) > 0 {
		return withMsg(ErrInvalid, "%s", strings.Join(p, "; "))
	}
	return nil
}

func (c *Coordinator) rejected(req *HeartbeatRequest, pathID, status string) *HeartbeatResponse {
	var epoch int64
	if req.MemberEpoch != nil {
		epoch = *req.MemberEpoch
	}
	return &HeartbeatResponse{
		ResponseTo: req.RequestID, Status: status, MemberID: pathID, MemberEpoch: epoch,
		HeartbeatIntervalMs: c.cfg.HeartbeatInterval.Milliseconds(), RebalanceTimeoutMs: c.cfg.RebalanceTimeout.Milliseconds(),
		Assignment: AssignmentResponse{AssignedShards: []projection.ShardRef{}, PendingShards: []projection.ShardRef{}},
	}
}

func (c *Coordinator) respond(req *HeartbeatRequest, pathID, status string, g *projection.Group, epoch int64, assigned, pending []int) *HeartbeatResponse {
	return &HeartbeatResponse{
		ResponseTo: req.RequestID, Status: status, MemberID: pathID, MemberEpoch: epoch,
		HeartbeatIntervalMs: c.cfg.HeartbeatInterval.Milliseconds(), RebalanceTimeoutMs: c.cfg.RebalanceTimeout.Milliseconds(),
		GroupEpoch: g.GroupEpoch, AssignmentEpoch: g.AssignmentEpoch, MetadataVersion: g.MetadataVersion,
		Assignment: AssignmentResponse{AssignedShards: projection.Shards(assigned), PendingShards: projection.Shards(pending), MetadataVersion: g.MetadataVersion},
	}
}

// Heartbeat runs the member protocol: join, leave, fencing, ownership validation,
// revoke before assign. A heartbeat that changes nothing is answered from the
// projection without touching the log.
func (c *Coordinator) Heartbeat(ctx context.Context, k projection.GroupKey, pathID string, req *HeartbeatRequest) (*HeartbeatResponse, error) {
	if err := ValidateHeartbeat(req); err != nil {
		return nil, err
	}
	if *req.ProtocolVersion != ProtocolVersion {
		return c.rejected(req, pathID, StatusUnsupportedProtocol), nil
	}
	if req.MemberID != pathID {
		return c.rejected(req, pathID, StatusInvalidRequest), nil
	}
	if !c.IsLeader() {
		// Even a steady answer needs a running term: a deposed leader's view
		// may already be stale.
		return nil, ErrNotLeader
	}
	if resp := c.steadyHeartbeat(k, pathID, req); resp != nil {
		return resp, nil
	}
	v, err := c.submit(ctx, events.Meta{Actor: pathID, RequestID: req.RequestID}, false, func(t *tx) (any, error) {
		return t.heartbeat(k, pathID, req), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*HeartbeatResponse), nil
}

type report struct {
	owned, revoking, terminal []int
	progress                  []int
	name                      string
	maxConc, available        int
}

func parseReport(req *HeartbeatRequest, m *projection.Member) report {
	r := report{maxConc: *req.RuntimeConsumerCapacity.RuntimeMaxConcurrency, available: *req.RuntimeConsumerCapacity.AvailableConcurrency}
	for _, s := range req.OwnedShards {
		r.owned = append(r.owned, s.ShardIndex)
	}
	r.owned = projection.SortedInts(r.owned)
	for _, rv := range req.RevokingShards {
		if rv.terminal() {
			r.terminal = append(r.terminal, rv.Shard.ShardIndex)
		} else {
			r.revoking = append(r.revoking, rv.Shard.ShardIndex)
		}
	}
	r.revoking = projection.SortedInts(r.revoking)
	r.terminal = projection.SortedInts(r.terminal)
	for _, sp := range req.ShardProgress {
		r.progress = append(r.progress, sp.Shard.ShardIndex)
	}
	r.name = req.MemberID
	if req.MemberName != nil && *req.MemberName != "" {
		r.name = *req.MemberName
	} else if m != nil {
		r.name = m.Name
	}
	return r
}

// authority is what a member may report holding: what it holds already, plus
// what it may be granted now.
func authority(g *projection.Group, m *projection.Member) map[int]bool {
	a := map[int]bool{}
	for _, set := range [][]int{m.Current, m.Revoking, m.Granted} {
		for _, s := range set {
			a[s] = true
		}
	}
	// What the member already holds stays within its authority even after a
	// scale-in removed the shard: it is being revoked, not stolen.
	assigned, _ := g.Grantable(m.ID)
	for _, s := range assigned {
		a[s] = true
	}
	return a
}

// renew records the in-memory part of a heartbeat: lease, capacity, progress.
func (c *Coordinator) renew(k projection.GroupKey, id string, req *HeartbeatRequest, available int) {
	now := c.now()
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	mr := c.rt.member(k, id, now, c.cfg.MemberLease)
	mr.leaseExpiresAt = now.Add(c.cfg.MemberLease)
	mr.lastHeartbeatAt = now
	mr.reportedMV = *req.MetadataVersion
	mr.available = available
	mr.progress = append(mr.progress[:0:0], req.ShardProgress...)
}

// steadyHeartbeat answers a heartbeat that changes nothing under the read lock.
func (c *Coordinator) steadyHeartbeat(k projection.GroupKey, id string, req *HeartbeatRequest) *HeartbeatResponse {
	c.state.RLock()
	defer c.state.RUnlock()
	g := c.state.GroupLocked(k)
	if g == nil {
		return nil
	}
	m := g.Members[id]
	if m == nil || !m.Live() || *req.MemberEpoch != m.Epoch || m.Epoch != g.AssignmentEpoch || *req.MetadataVersion > g.MetadataVersion {
		return nil
	}
	if c.CorrectionOpen(k) {
		return nil
	}
	r := parseReport(req, m)
	if !projection.EqualSets(r.owned, m.Current) || !projection.EqualSets(r.revoking, m.Revoking) || r.name != m.Name || r.maxConc != m.MaxConcurrency {
		return nil
	}
	assigned, pending := g.Grantable(id)
	if !projection.EqualSets(assigned, m.Granted) {
		return nil
	}
	auth := authority(g, m)
	for _, s := range r.progress {
		if !auth[s] {
			return nil
		}
	}
	c.rt.mu.Lock()
	mr := c.rt.groups[k]
	var due bool
	if mr != nil && mr.members[id] != nil && !mr.members[id].rebalanceDeadline.IsZero() && !c.now().Before(mr.members[id].rebalanceDeadline) {
		due = true
	}
	c.rt.mu.Unlock()
	if due {
		return nil
	}
	c.renew(k, id, req, r.available)
	return c.respond(req, id, StatusOK, g, m.Epoch, assigned, pending)
}

// heartbeat is the decision procedure inside the writer.
func (t *tx) heartbeat(k projection.GroupKey, id string, req *HeartbeatRequest) *HeartbeatResponse {
	c := t.c
	g := t.group(k)
	if g == nil {
		return c.rejected(req, id, StatusUnknownMember)
	}
	t.expireLapsed(k)
	g = t.group(k)
	m := g.Members[id]
	// A correction round concerns members that carry state; a join or rejoin
	// (epoch 0 from a member that is not live) starts from nothing.
	syncable := m != nil && (m.Live() || (m.State == projection.MemberLeaving && *req.MemberEpoch != 0))
	r := parseReport(req, m)
	epoch := *req.MemberEpoch
	reqMV := *req.MetadataVersion

	// Metadata correction: a member that saw a newer metadata version than the log
	// holds means metadata was lost; the coordinator never raises its version to match.
	c.rt.mu.Lock()
	gr := c.rt.group(k)
	if syncable && reqMV > g.MetadataVersion {
		if gr.correction == nil {
			gr.correction = &correctionRound{acked: map[string]bool{}}
			c.cfg.Logger.Warn().Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Str("member", id).Int64("reported", reqMV).Int64("stored", g.MetadataVersion).Msg("member reports a newer metadata version: correction round opened")
		}
		gr.correction.targetMV = g.MetadataVersion
	}
	round := gr.correction
	c.rt.mu.Unlock()
	if syncable && round != nil && reqMV != g.MetadataVersion {
		c.renew(k, id, req, r.available)
		target := g.Target(id)
		assignedNow, _ := g.Grantable(id)
		kept := intersect(r.owned, assignedNow)
		// The member keeps only kept and starts nothing new: what it was granted
		// and does not read is released, or the round could never close. What it
		// still reads (or drains) stays held until a heartbeat shows it released.
		stillRead := intersect(m.Granted, append(append([]int{}, r.owned...), r.revoking...))
		grant := projection.SortedInts(append(append([]int{}, kept...), stillRead...))
		if m.Live() && !projection.EqualSets(grant, m.Granted) && *req.MemberEpoch == m.Epoch {
			g = t.emit(k, &events.MemberSynced{MemberID: id, MemberEpoch: m.Epoch, Granted: grant})
		}
		return c.respond(req, id, StatusSyncMetadata, g, m.Epoch, kept, minus(target, kept))
	}

	switch {
	case epoch < -1:
		return c.rejected(req, id, StatusInvalidRequest)
	case m == nil && epoch != 0:
		return c.rejected(req, id, StatusUnknownMember)
	case m == nil:
		g = t.emit(k, &events.MemberJoined{MemberID: id, MemberName: r.name, MaxConcurrency: r.maxConc, Epochs: bump(g)})
		g = t.reconcile(k)
	case epoch == 0 && !m.Live():
		g = t.emit(k, &events.MemberJoined{MemberID: id, MemberName: r.name, MaxConcurrency: r.maxConc, Rejoin: true, Epochs: bump(g)})
		g = t.reconcile(k)
	case epoch == 0:
		if len(m.Current) > 0 || len(m.Revoking) > 0 || len(r.owned) > 0 || len(req.RevokingShards) > 0 || len(req.ShardProgress) > 0 {
			return c.rejected(req, id, StatusInvalidRequest)
		}
		// Initial-join replay: the member lost our answer to its join.
	case m.State == projection.MemberFenced || m.State == projection.MemberExpired:
		return c.respond(req, id, StatusFenced, g, m.Epoch, nil, nil)
	case epoch == -1:
		return t.leave(k, id, req, r)
	case epoch > m.Epoch:
		return c.rejected(req, id, StatusInvalidRequest)
	case epoch < m.Epoch:
		return c.respond(req, id, StatusFenced, g, m.Epoch, nil, nil)
	default:
		// Accepted: validate what the member says it holds.
		auth := authority(g, m)
		var bad []int
		for _, s := range r.owned {
			if !auth[s] {
				bad = append(bad, s)
			}
		}
		for _, s := range r.revoking {
			if !auth[s] && round == nil {
				bad = append(bad, s)
			}
		}
		for _, s := range r.progress {
			if !auth[s] && round == nil {
				bad = append(bad, s)
			}
		}
		if len(bad) > 0 {
			g = t.fence(k, id, fmt.Sprintf("reported shards it may not hold: %v", projection.SortedInts(bad)))
			return c.respond(req, id, StatusFenced, g, g.Members[id].Epoch, nil, nil)
		}
		g = t.recordOwnership(k, id, r.owned, r.revoking)
	}

	g = t.group(k)
	m = g.Members[id]
	if r.name != m.Name || r.maxConc != m.MaxConcurrency {
		g = t.emit(k, &events.MemberUpdated{MemberID: id, MemberName: r.name, MaxConcurrency: r.maxConc})
	}
	c.renew(k, id, req, r.available)
	g = t.reconcile(k)
	t.enforceRebalance(k)
	t.advance(k)
	g = t.group(k)
	m = g.Members[id]
	if m.State == projection.MemberFenced {
		return c.respond(req, id, StatusFenced, g, m.Epoch, nil, nil)
	}

	if round != nil {
		c.rt.mu.Lock()
		if reqMV == g.MetadataVersion || epoch == 0 {
			round.acked[id] = true
		}
		closed := t.roundClosed(g, round)
		if closed {
			gr.correction = nil
			c.cfg.Logger.Info().Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Msg("metadata correction round closed")
		}
		c.rt.mu.Unlock()
		if !closed {
			assignedNow, _ := g.Grantable(id)
			kept := intersect(m.Current, assignedNow)
			if m.Epoch != g.AssignmentEpoch || !projection.EqualSets(kept, m.Granted) {
				g = t.emit(k, &events.MemberSynced{MemberID: id, MemberEpoch: g.AssignmentEpoch, Granted: kept})
			}
			return c.respond(req, id, StatusRevokePending, g, g.AssignmentEpoch, kept, minus(g.Target(id), kept))
		}
	}

	assigned, pending := g.Grantable(id)
	if m.Epoch != g.AssignmentEpoch || !projection.EqualSets(assigned, m.Granted) {
		g = t.emit(k, &events.MemberSynced{MemberID: id, MemberEpoch: g.AssignmentEpoch, Granted: assigned})
	}
	return c.respond(req, id, StatusOK, g, g.AssignmentEpoch, assigned, pending)
}

func (t *tx) roundClosed(g *projection.Group, round *correctionRound) bool {
	for _, id := range g.MemberIDs() {
		m := g.Members[id]
		participant := m.Live() || (m.State == projection.MemberLeaving && (len(m.Current) > 0 || len(m.Revoking) > 0))
		if participant && !round.acked[id] {
			return false
		}
		if m.CanHold() && (len(m.Revoking) > 0 || len(g.Blocked(id)) > 0) {
			return false
		}
	}
	return true
}

// recordOwnership records a changed owned/revoking report and acknowledges
// revokes the member completed.
func (t *tx) recordOwnership(k projection.GroupKey, id string, owned, revoking []int) *projection.Group {
	g := t.group(k)
	m := g.Members[id]
	if projection.EqualSets(owned, m.Current) && projection.EqualSets(revoking, m.Revoking) {
		return g
	}
	before := projection.SortedInts(append(append([]int{}, m.Current...), m.Revoking...))
	after := projection.SortedInts(append(append([]int{}, owned...), revoking...))
	released := minus(before, after)
	g = t.emit(k, &events.OwnershipReported{MemberID: id, Owned: owned, Revoking: revoking})
	var acked []int
	for _, s := range released {
		if !containsInt(g.Target(id), s) {
			acked = append(acked, s)
		}
	}
	if len(acked) > 0 {
		g = t.emit(k, &events.RevokeAcknowledged{MemberID: id, Shards: acked})
	}
	return g
}

// leave handles memberEpoch -1: the member is LEAVING; what it still reads (owned
// without a REVOKED report, or reported as draining) stays blocked for its new
// owners until released.
func (t *tx) leave(k projection.GroupKey, id string, req *HeartbeatRequest, r report) *HeartbeatResponse {
	g := t.group(k)
	m := g.Members[id]
	held := projection.SortedInts(append(minus(r.owned, r.terminal), r.revoking...))
	if m.State != projection.MemberLeaving {
		g = t.emit(k, &events.MemberLeft{MemberID: id, Epochs: bump(g)})
	}
	g = t.recordOwnership(k, id, []int{}, held)
	t.c.renew(k, id, req, 0)
	g = t.reconcile(k)
	t.advance(k)
	g = t.group(k)
	return t.c.respond(req, id, StatusOK, g, -1, nil, nil)
}

// fence records that a member lost its shards.
func (t *tx) fence(k projection.GroupKey, id, reason string) *projection.Group {
	g := t.group(k)
	m := g.Members[id]
	epoch := g.GroupEpoch + 1
	if m.Epoch+1 > epoch {
		epoch = m.Epoch + 1
	}
	t.emitAs(Actor, k, &events.MemberFenced{MemberID: id, Reason: reason, MemberEpoch: epoch, Epochs: bump(g)})
	t.c.rt.mu.Lock()
	if gr := t.c.rt.groups[k]; gr != nil && gr.members[id] != nil {
		gr.members[id].rebalanceDeadline = timeZero
	}
	t.c.rt.mu.Unlock()
	return t.reconcile(k)
}

func intersect(a, b []int) []int {
	var out []int
	for _, x := range a {
		if containsInt(b, x) {
			out = append(out, x)
		}
	}
	return projection.SortedInts(out)
}

func minus(a, b []int) []int {
	var out []int
	for _, x := range a {
		if !containsInt(b, x) {
			out = append(out, x)
		}
	}
	return projection.SortedInts(out)
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
