package commands

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// terminal reports whether a revoke report releases its shard: REVOKED with
// nothing in flight.
func terminal(r wire.RevokingReport) bool { return r.State == wire.RevokeRevoked && r.InFlight == 0 }

// shardRefs converts indexes to their wire form, sorted (never nil).
func shardRefs(idx []int) []wire.ShardRef {
	out := make([]wire.ShardRef, 0, len(idx))
	for _, i := range projection.SortedInts(idx) {
		out = append(out, wire.ShardRef{ShardIndex: i})
	}
	return out
}

// ValidateHeartbeat checks the body with the default shard-count limit; a
// failure is HTTP 400. Coordinator.Heartbeat also checks the arrays against the
// group's shard span.
func ValidateHeartbeat(req *wire.HeartbeatRequest) error { return validateHeartbeat(req, 1024) }

// validateHeartbeat checks the body; a failure is HTTP 400. Every string that
// can reach the log or monitoring is bounded, and no array may hold more
// entries than maxShards or the same shard twice.
func validateHeartbeat(req *wire.HeartbeatRequest, maxShards int) error {
	var p []string
	if req.ProtocolVersion == nil {
		p = append(p, "protocolVersion: must not be null")
	} else if *req.ProtocolVersion < 1 {
		p = append(p, "protocolVersion: must be greater than or equal to 1")
	}
	if blank(req.RequestID) {
		p = append(p, "requestId: must not be blank")
	} else {
		p = appendProblem(p, checkText("requestId", req.RequestID))
	}
	if blank(req.MemberID) {
		p = append(p, "memberId: must not be blank")
	} else {
		p = appendProblem(p, checkMemberID("memberId", req.MemberID))
	}
	if req.MemberName != nil {
		p = appendProblem(p, checkText("memberName", *req.MemberName))
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
	p = append(p, checkShardList("ownedShards", len(req.OwnedShards), maxShards, func(i int) *wire.ShardRef { return &req.OwnedShards[i] })...)
	p = append(p, checkShardList("revokingShards", len(req.RevokingShards), maxShards, func(i int) *wire.ShardRef { return req.RevokingShards[i].Shard })...)
	p = append(p, checkShardList("shardProgress", len(req.ShardProgress), maxShards, func(i int) *wire.ShardRef { return &req.ShardProgress[i].Shard })...)
	for i, r := range req.RevokingShards {
		if r.Shard == nil {
			p = append(p, fmt.Sprintf("revokingShards[%d].shard: must not be null", i))
		}
		switch r.State {
		case wire.RevokeRevoking, wire.RevokeDraining, wire.RevokeRevoked:
		default:
			p = append(p, fmt.Sprintf("revokingShards[%d].state: must be one of REVOKING, DRAINING, REVOKED", i))
		}
		if r.InFlight < 0 {
			p = append(p, fmt.Sprintf("revokingShards[%d].inFlight: must be greater than or equal to 0", i))
		}
		if r.AckedAt != nil {
			p = appendProblem(p, checkText(fmt.Sprintf("revokingShards[%d].ackedAt", i), *r.AckedAt))
		}
	}
	for i, sp := range req.ShardProgress {
		if blank(sp.StreamKey) {
			p = append(p, fmt.Sprintf("shardProgress[%d].streamKey: must not be blank", i))
		} else {
			p = appendProblem(p, checkText(fmt.Sprintf("shardProgress[%d].streamKey", i), sp.StreamKey))
		}
		if sp.LastDeliveredID != nil {
			p = appendProblem(p, checkStreamID(fmt.Sprintf("shardProgress[%d].lastDeliveredId", i), *sp.LastDeliveredID))
		}
		if sp.LastAckedID != nil {
			p = appendProblem(p, checkStreamID(fmt.Sprintf("shardProgress[%d].lastAckedId", i), *sp.LastAckedID))
		}
		if sp.PendingCount < 0 {
			p = append(p, fmt.Sprintf("shardProgress[%d].pendingCount: must be greater than or equal to 0", i))
		}
	}
	if len(p) > 0 {
		return withMsg(ErrInvalid, "%s", strings.Join(p, "; "))
	}
	return nil
}

// checkShardList refuses a shard array longer than max or naming a shard twice
// (shard(i) is nil for an entry without a shard, reported elsewhere).
func checkShardList(field string, n, max int, shard func(i int) *wire.ShardRef) []string {
	if n > max {
		return []string{fmt.Sprintf("%s: must not hold more than %d shards (got %d)", field, max, n)}
	}
	seen := make(map[int]bool, n)
	for i := 0; i < n; i++ {
		s := shard(i)
		if s == nil {
			continue
		}
		if seen[s.ShardIndex] {
			return []string{fmt.Sprintf("%s: shard %d is listed twice", field, s.ShardIndex)}
		}
		seen[s.ShardIndex] = true
	}
	return nil
}

// withinSpan is applied to a report of a known member that lists more shards
// than the group has (its span, or what the log records the member holding,
// whichever is more; from a member the group does not know, such a report is
// refused, 400): it drops every shard at or past the span that the log does not
// record the member holding. Such a report is stale, not
// hostile: the Go SDK and Spring send a REVOKED report again until an answer
// is accepted, and after a lost answer the resharding may have retired the
// shards meanwhile; a member that stalled through a scale-in still lists the
// retired shards it owned. Refusing it (400) left the member retrying the
// same report forever. A shard the member is recorded holding is always
// kept: dropping a DRAINING report would release a shard its reader still
// reads. A report within the limit is left as it is (shards past the span
// that a member still reads must reach the decision). Indices are distinct
// (validateHeartbeat), so what is left is bounded by the span and the
// member's recorded shards: nothing a report brings into an event outgrows
// the group. req is not modified.
func withinSpan(req *wire.HeartbeatRequest, span int, m *projection.Member) *wire.HeartbeatRequest {
	keep := func(i int) bool { return i < span || containsInt(m.Current, i) || containsInt(m.Revoking, i) }
	out := *req
	out.OwnedShards = filterShards(req.OwnedShards, func(s wire.ShardRef) bool { return keep(s.ShardIndex) })
	out.RevokingShards = filterShards(req.RevokingShards, func(rv wire.RevokingReport) bool { return keep(rv.Shard.ShardIndex) })
	out.ShardProgress = filterShards(req.ShardProgress, func(p wire.ShardProgress) bool { return keep(p.Shard.ShardIndex) })
	return &out
}

// filterShards is the entries of in that keep accepts, in order.
func filterShards[T any](in []T, keep func(T) bool) []T {
	out := make([]T, 0, len(in))
	for _, v := range in {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}

func (c *Coordinator) rejected(req *wire.HeartbeatRequest, pathID, status string) *wire.HeartbeatResponse {
	var epoch int64
	if req.MemberEpoch != nil {
		epoch = *req.MemberEpoch
	}
	return &wire.HeartbeatResponse{
		ResponseTo: req.RequestID, Status: status, MemberID: pathID, MemberEpoch: epoch,
		HeartbeatIntervalMs: c.cfg.HeartbeatInterval.Milliseconds(), RebalanceTimeoutMs: c.cfg.RebalanceTimeout.Milliseconds(),
		Assignment: wire.HeartbeatAssignment{AssignedShards: []wire.ShardRef{}, PendingShards: []wire.ShardRef{}},
	}
}

func (c *Coordinator) respond(req *wire.HeartbeatRequest, pathID, status string, g *projection.Group, epoch int64, assigned, pending []int) *wire.HeartbeatResponse {
	res := &wire.HeartbeatResponse{
		ResponseTo: req.RequestID, Status: status, MemberID: pathID, MemberEpoch: epoch,
		HeartbeatIntervalMs: c.cfg.HeartbeatInterval.Milliseconds(), RebalanceTimeoutMs: c.cfg.RebalanceTimeout.Milliseconds(),
		GroupEpoch: g.GroupEpoch, AssignmentEpoch: g.AssignmentEpoch, MetadataVersion: g.MetadataVersion,
		Assignment: wire.HeartbeatAssignment{AssignedShards: shardRefs(assigned), PendingShards: shardRefs(pending), MetadataVersion: g.MetadataVersion},
	}
	if g.Ordered() {
		res.Assignment.Ordering = events.OrderingKey
	}
	// Every waiting barrier of the group (a member may still be reading a
	// shard it is releasing), from the same state as the answer's
	// metadataVersion: a member that knows this version knows every barrier
	// a cutover up to it set.
	if after := g.ShardBarriers(); len(after) > 0 {
		shards := make([]int, 0, len(after))
		for s := range after {
			shards = append(shards, s)
		}
		sort.Ints(shards)
		for _, s := range shards {
			res.Assignment.Barriers = append(res.Assignment.Barriers, wire.ShardBarrier{Shard: wire.ShardRef{ShardIndex: s}, After: after[s]})
		}
	}
	return res
}

// Heartbeat runs the member protocol: join, leave, fencing, ownership validation,
// revoke before assign. A heartbeat that changes nothing is answered from the
// projection without touching the log. principal is the authenticated user that
// sent it ("" when the member API is anonymous): a member id is bound to the
// principal that joined it, and a heartbeat for it from anyone else is refused
// (ErrMemberPrincipal, HTTP 403) before it can release or claim anything.
func (c *Coordinator) Heartbeat(ctx context.Context, k projection.GroupKey, pathID, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatResponse, error) {
	if err := validateHeartbeat(req, c.cfg.MaxShardCount); err != nil {
		return nil, err
	}
	if *req.ProtocolVersion != wire.ProtocolVersion {
		return c.rejected(req, pathID, wire.StatusUnsupportedProtocol), nil
	}
	if req.MemberID != pathID {
		return c.rejected(req, pathID, wire.StatusInvalidRequest), nil
	}
	if !c.IsLeader() {
		// Even a steady answer needs a running term: a deposed leader's view
		// may already be stale.
		return nil, ErrNotLeader
	}
	req, err := c.admissible(k, pathID, principal, req)
	if err != nil {
		return nil, err
	}
	if resp := c.steadyHeartbeat(k, pathID, req); resp != nil {
		c.issued(k, pathID, resp)
		return resp, nil
	}
	v, err := c.submit(ctx, events.Meta{Actor: pathID, RequestID: req.RequestID}, func(t *tx) (any, error) {
		return t.heartbeat(k, pathID, principal, req)
	})
	if err != nil {
		return nil, err
	}
	resp := v.(*wire.HeartbeatResponse)
	c.issued(k, pathID, resp)
	return resp, nil
}

// issued remembers the member epoch an accepted heartbeat was answered with
// (monitoring shows it; the log records epochs only with grants).
func (c *Coordinator) issued(k projection.GroupKey, id string, resp *wire.HeartbeatResponse) {
	switch resp.Status {
	case wire.StatusOK, wire.StatusSyncMetadata, wire.StatusRevokePending:
	default:
		return
	}
	c.rt.issued(k, id, resp.MemberEpoch)
}

// admissible refuses, from the recorded state, a heartbeat from another
// principal than the member's, and drops from the report the shards past the
// group's span (withinSpan). The decision does both again against the state
// it decides on.
func (c *Coordinator) admissible(k projection.GroupKey, id, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatRequest, error) {
	c.state.RLock()
	defer c.state.RUnlock()
	g := c.state.GroupLocked(k)
	if g == nil {
		return req, nil
	}
	return checkCaller(g, id, principal, req)
}

func checkCaller(g *projection.Group, id, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatRequest, error) {
	m := g.Members[id]
	if m != nil && m.Principal != "" && m.Principal != principal {
		return nil, withMsg(ErrMemberPrincipal, "member %s was joined by another principal; only that principal may send its heartbeats", id)
	}
	span := shardSpan(g)
	limit := span
	if m != nil {
		// A member that stalled through the end of a resharding still lists
		// what the log records it holding.
		limit = max(limit, len(m.Current)+len(m.Revoking))
	}
	if len(req.OwnedShards) <= limit && len(req.RevokingShards) <= limit && len(req.ShardProgress) <= limit {
		return req, nil
	}
	if m == nil {
		// Nobody the group knows: no stale report explains more shards than
		// the group has.
		return nil, overSpan(req, limit)
	}
	return withinSpan(req, span, m), nil
}

// overSpan is the 400 for a report with more shards than the group has, from
// a member the group does not know.
func overSpan(req *wire.HeartbeatRequest, span int) error {
	var p []string
	for _, a := range []struct {
		field string
		n     int
	}{{"ownedShards", len(req.OwnedShards)}, {"revokingShards", len(req.RevokingShards)}, {"shardProgress", len(req.ShardProgress)}} {
		if a.n > span {
			p = append(p, fmt.Sprintf("%s: must not hold more shards than the group has (%d, got %d)", a.field, span, a.n))
		}
	}
	return withMsg(ErrInvalid, "%s", strings.Join(p, "; "))
}

// shardSpan is how many shards a group's members can legitimately report: the
// routed ones, the removed ones still assigned until drained, and the ones
// the last resharding took out of use until they are retired (members release
// them after a rollback or a drain; retirement waits until nobody holds them).
func shardSpan(g *projection.Group) int {
	span := max(g.ShardCount, g.AssignableCount)
	if n := len(g.Reshardings); n > 0 && !g.Reshardings[n-1].Retired {
		_, hi := g.Reshardings[n-1].RemovedRange()
		span = max(span, hi)
	}
	return span
}

type report struct {
	owned, revoking, terminal []int
	progress                  []int
	name                      string
	maxConc, available        int
}

func parseReport(req *wire.HeartbeatRequest, m *projection.Member) report {
	r := report{maxConc: *req.RuntimeConsumerCapacity.RuntimeMaxConcurrency, available: *req.RuntimeConsumerCapacity.AvailableConcurrency}
	for _, s := range req.OwnedShards {
		r.owned = append(r.owned, s.ShardIndex)
	}
	r.owned = projection.SortedInts(r.owned)
	for _, rv := range req.RevokingShards {
		if terminal(rv) {
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

// progressWithin keeps the progress reports on shards within auth (nil auth:
// none), with the stream key the coordinator knows for the shard: nothing a
// member reports about a shard it may not hold is stored.
func progressWithin(k projection.GroupKey, req *wire.HeartbeatRequest, auth map[int]bool) []wire.ShardProgress {
	var out []wire.ShardProgress
	for _, sp := range req.ShardProgress {
		if !auth[sp.Shard.ShardIndex] {
			continue
		}
		sp.StreamKey = routing.StreamKey(k.StreamPrefix, sp.Shard.ShardIndex)
		out = append(out, sp)
	}
	return out
}

// renew records the in-memory part of a heartbeat: lease, capacity, progress.
func (c *Coordinator) renew(k projection.GroupKey, id string, req *wire.HeartbeatRequest, available int, progress []wire.ShardProgress) {
	c.rt.renew(k, id, c.now(), c.cfg.MemberLease, *req.MetadataVersion, available, progress)
}

// steadyHeartbeat answers a heartbeat that changes nothing under the read lock.
func (c *Coordinator) steadyHeartbeat(k projection.GroupKey, id string, req *wire.HeartbeatRequest) *wire.HeartbeatResponse {
	c.state.RLock()
	defer c.state.RUnlock()
	g := c.state.GroupLocked(k)
	if g == nil {
		return nil
	}
	m := g.Members[id]
	if m == nil || !m.Live() || !currentEpoch(g, m, *req.MemberEpoch) || *req.MetadataVersion > g.MetadataVersion {
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
	if c.rt.deadlinePassed(k, id, c.now()) {
		return nil
	}
	c.renew(k, id, req, r.available, progressWithin(k, req, auth))
	return c.respond(req, id, wire.StatusOK, g, g.AssignmentEpoch, assigned, pending)
}

// currentEpoch reports whether epoch is one the coordinator may have issued to
// the live member m: at least its recorded epoch and at most the assignment
// epoch. An accepted heartbeat is answered with the assignment epoch, but only
// a change of the granted set is recorded (member.synced): recording every
// member's adoption of a new epoch would append an event per member for every
// join, leave or expiry in the group. A stale epoch (below the recorded one)
// is fenced; one above the assignment epoch was never issued.
func currentEpoch(g *projection.Group, m *projection.Member, epoch int64) bool {
	return epoch >= 1 && epoch >= m.Epoch && epoch <= g.AssignmentEpoch
}

// heartbeat is the decision procedure inside the writer.
func (t *tx) heartbeat(k projection.GroupKey, id, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatResponse, error) {
	c := t.c
	g := t.group(k)
	if g == nil {
		return c.rejected(req, id, wire.StatusUnknownMember), nil
	}
	req, err := checkCaller(g, id, principal, req)
	if err != nil {
		return nil, err
	}
	t.expireLapsed(k)
	t.endOverdueRound(k)
	g = t.group(k)
	m := g.Members[id]
	// A correction round concerns members that carry state; a join or rejoin
	// (epoch 0 from a member that is not live) starts from nothing.
	syncable := m != nil && (m.Live() || (m.State == projection.MemberLeaving && *req.MemberEpoch == -1))
	r := parseReport(req, m)
	epoch := *req.MemberEpoch
	reqMV := *req.MetadataVersion
	if m != nil && m.State == projection.MemberLeaving && epoch > 0 {
		// It left (or a request with its principal said so): the epoch it
		// held before is no longer current, and it rejoins with epoch 0.
		// Accepting it answered OK with nothing assigned (or, in a
		// correction round, SYNC_METADATA with the leave's epoch -1, which
		// clients adopt), renewed its lease and kept it LEAVING for as long
		// as it heartbeat. The contract refuses it (INVALID_REQUEST, the
		// epoch is above the stored -1); FENCED tells every client to rejoin.
		return c.respond(req, id, wire.StatusFenced, g, m.Epoch, nil, nil), nil
	}

	// Metadata correction: a member that saw a newer metadata version than the log
	// holds means metadata was lost; the coordinator never raises its version to match.
	// A member (or principal) whose earlier round had to be ended by fencing it
	// does not open another: its higher version is taken for the stored one, and
	// ownership validation still fences it for any shard it may not hold.
	if syncable && reqMV > g.MetadataVersion {
		if !c.rt.round(k).open && c.rt.isQuarantined(k, id, principal, t.now) {
			reqMV = g.MetadataVersion
		} else if c.rt.openRound(k, t.now, g.MetadataVersion) {
			c.cfg.Logger.Warn().Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Str("member", id).Int64("reported", reqMV).Int64("stored", g.MetadataVersion).Msg("member reports a newer metadata version: correction round opened")
		}
	}
	round := c.rt.round(k).open
	if syncable && round && reqMV != g.MetadataVersion {
		// During the round, reports on shards outside the member's authority
		// are dropped (the contract), never stored.
		c.renew(k, id, req, r.available, progressWithin(k, req, authority(g, m)))
		target := g.Target(id)
		assignedNow, _ := g.Grantable(id)
		kept := intersect(r.owned, assignedNow)
		// The member keeps only kept and starts nothing new: what it was granted
		// and does not read is released, or the round could never close. What it
		// still reads (or drains) stays held until a heartbeat shows it released.
		stillRead := intersect(m.Granted, append(append([]int{}, r.owned...), r.revoking...))
		grant := projection.SortedInts(append(append([]int{}, kept...), stillRead...))
		effective := m.Epoch
		if m.Live() && currentEpoch(g, m, epoch) {
			effective = epoch
			if !projection.EqualSets(grant, m.Granted) {
				g = t.emit(k, &events.MemberSynced{MemberID: id, MemberEpoch: m.Epoch, Granted: grant})
			}
		}
		return c.respond(req, id, wire.StatusSyncMetadata, g, effective, kept, minus(target, kept)), nil
	}

	var progress []wire.ShardProgress
	switch {
	case epoch < -1:
		return c.rejected(req, id, wire.StatusInvalidRequest), nil
	case m == nil && epoch != 0:
		return c.rejected(req, id, wire.StatusUnknownMember), nil
	case m == nil:
		if err := t.makeRoom(k); err != nil {
			return nil, err
		}
		g = t.group(k)
		t.emit(k, &events.MemberJoined{MemberID: id, MemberName: r.name, MaxConcurrency: r.maxConc, Principal: principal, Epochs: bump(g)})
		t.reconcile(k)
	case epoch == 0 && !m.Live():
		t.emit(k, &events.MemberJoined{MemberID: id, MemberName: r.name, MaxConcurrency: r.maxConc, Rejoin: true, Principal: principal, Epochs: bump(g)})
		t.reconcile(k)
	case epoch == 0:
		if len(m.Current) > 0 || len(m.Revoking) > 0 || len(r.owned) > 0 || len(req.RevokingShards) > 0 || len(req.ShardProgress) > 0 {
			return c.rejected(req, id, wire.StatusInvalidRequest), nil
		}
		// Initial-join replay: the member lost our answer to its join.
	case m.State == projection.MemberFenced || m.State == projection.MemberExpired:
		return c.respond(req, id, wire.StatusFenced, g, m.Epoch, nil, nil), nil
	case epoch == -1:
		return t.leave(k, id, req, r), nil
	case epoch > g.AssignmentEpoch:
		return c.rejected(req, id, wire.StatusInvalidRequest), nil
	case epoch < m.Epoch:
		return c.respond(req, id, wire.StatusFenced, g, m.Epoch, nil, nil), nil
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
			if !auth[s] && !round {
				bad = append(bad, s)
			}
		}
		for _, s := range r.progress {
			if !auth[s] && !round {
				bad = append(bad, s)
			}
		}
		if len(bad) > 0 {
			g = t.fence(k, id, fmt.Sprintf("reported shards it may not hold: %v", projection.SortedInts(bad)))
			return c.respond(req, id, wire.StatusFenced, g, g.Members[id].Epoch, nil, nil), nil
		}
		progress = progressWithin(k, req, auth)
		revoking := r.revoking
		if round {
			revoking = intersect(revoking, keys(auth))
		}
		t.recordOwnership(k, id, r.owned, revoking)
	}

	g = t.group(k)
	m = g.Members[id]
	if r.name != m.Name || r.maxConc != m.MaxConcurrency {
		t.emit(k, &events.MemberUpdated{MemberID: id, MemberName: r.name, MaxConcurrency: r.maxConc})
	}
	c.renew(k, id, req, r.available, progress)
	t.reconcile(k)
	t.enforceRebalance(k)
	t.advance(k)
	g = t.group(k)
	m = g.Members[id]
	if m.State == projection.MemberFenced {
		return c.respond(req, id, wire.StatusFenced, g, m.Epoch, nil, nil), nil
	}

	if round && c.rt.round(k).open {
		if reqMV == g.MetadataVersion || epoch == 0 {
			c.rt.ackRound(k, id)
		}
		closed := t.roundClosed(k, g) && c.rt.closeRound(k)
		if closed {
			c.cfg.Logger.Info().Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Msg("metadata correction round closed")
		}
		if !closed {
			assignedNow, _ := g.Grantable(id)
			kept := intersect(m.Current, assignedNow)
			if !projection.EqualSets(kept, m.Granted) {
				g = t.emit(k, &events.MemberSynced{MemberID: id, MemberEpoch: g.AssignmentEpoch, Granted: kept})
			}
			return c.respond(req, id, wire.StatusRevokePending, g, g.AssignmentEpoch, kept, minus(g.Target(id), kept)), nil
		}
	}

	assigned, pending := g.Grantable(id)
	if !projection.EqualSets(assigned, m.Granted) {
		g = t.emit(k, &events.MemberSynced{MemberID: id, MemberEpoch: g.AssignmentEpoch, Granted: assigned})
	}
	return c.respond(req, id, wire.StatusOK, g, g.AssignmentEpoch, assigned, pending), nil
}

func keys(set map[int]bool) []int {
	out := make([]int, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	return projection.SortedInts(out)
}

func (t *tx) roundClosed(k projection.GroupKey, g *projection.Group) bool {
	for _, id := range g.MemberIDs() {
		m := g.Members[id]
		if roundParticipant(m) && !t.c.rt.roundAcked(k, id) {
			return false
		}
		if m.CanHold() && (len(m.Revoking) > 0 || len(g.Blocked(id)) > 0) {
			return false
		}
	}
	return true
}

// roundParticipant reports whether a correction round waits for the member:
// live members, and leaving members that still hold shards.
func roundParticipant(m *projection.Member) bool {
	return m.Live() || (m.State == projection.MemberLeaving && (len(m.Current) > 0 || len(m.Revoking) > 0))
}

// endOverdueRound ends a correction round that stayed open for the rebalance
// timeout: every participant that has not converged (never heartbeat with the
// stored metadata version, or still revoking) is fenced with a reason, and
// quarantined so that it cannot open another round for a while; the others
// proceed. One member, buggy or hostile, cannot hold the group in
// REVOKE_PENDING for longer than that.
func (t *tx) endOverdueRound(k projection.GroupKey) {
	c := t.c
	round := c.rt.round(k)
	if !round.open || t.now.Before(round.openedAt.Add(c.cfg.RebalanceTimeout)) {
		return
	}
	g := t.group(k)
	var late []string
	for _, id := range g.MemberIDs() {
		m := g.Members[id]
		if roundParticipant(m) && (!c.rt.roundAcked(k, id) || len(m.Revoking) > 0) {
			late = append(late, id)
		}
	}
	c.rt.closeRound(k)
	for _, id := range late {
		principal := g.Members[id].Principal
		t.fence(k, id, fmt.Sprintf("metadata correction round: did not converge on metadata version %d within the rebalance timeout (%s)", round.targetMV, c.cfg.RebalanceTimeout))
		c.rt.quarantine(k, id, principal, t.now.Add(c.quarantineFor()))
	}
	c.cfg.Logger.Warn().Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Strs("fenced", late).Msg("metadata correction round ended at the rebalance timeout")
}

// quarantineFor is how long a member fenced by an overdue correction round
// cannot open another one.
func (c *Coordinator) quarantineFor() time.Duration {
	if c.cfg.StaleMemberRetention > 0 {
		return c.cfg.StaleMemberRetention
	}
	return 10 * c.cfg.RebalanceTimeout
}

// makeRoom keeps a group within MaxMembersPerGroup member records: before a
// new member joins a full group, the terminal records (expired, fenced, or left
// holding nothing) are pruned, oldest first; if every record is a member that
// still takes part, the join is refused.
func (t *tx) makeRoom(k projection.GroupKey) error {
	g := t.group(k)
	limit := t.c.cfg.MaxMembersPerGroup
	if len(g.Members) < limit {
		return nil
	}
	var terminal []*projection.Member
	for _, m := range g.Members {
		if terminalMember(m) {
			terminal = append(terminal, m)
		}
	}
	need := len(g.Members) - limit + 1
	if len(terminal) < need {
		return withMsg(ErrGroupFull, "group %s already has %d members that take part (--max-members-per-group %d); a new member cannot join until one leaves or expires", k.ConsumerGroup, len(g.Members)-len(terminal), limit)
	}
	sort.Slice(terminal, func(i, j int) bool {
		if !terminal[i].UpdatedAt.Equal(terminal[j].UpdatedAt) {
			return terminal[i].UpdatedAt.Before(terminal[j].UpdatedAt)
		}
		return terminal[i].ID < terminal[j].ID
	})
	gone := make([]string, 0, need)
	for _, m := range terminal[:need] {
		gone = append(gone, m.ID)
	}
	t.pruneMembers(k, gone)
	return nil
}

// terminalMember reports whether a member record only remains for monitoring:
// expired, fenced, or left holding nothing.
func terminalMember(m *projection.Member) bool {
	return m.State == projection.MemberExpired || m.State == projection.MemberFenced ||
		(m.State == projection.MemberLeaving && len(m.Current) == 0 && len(m.Revoking) == 0)
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

// leave handles memberEpoch -1 (the contract's §3.2): the member is LEAVING and
// what it owned is released at once; only the shards it reports as still
// draining (a revoke report that is not REVOKED with nothing in flight) stay
// blocked for their new owners until released or the rebalance timeout. A
// report on a shard outside the member's authority is dropped.
func (t *tx) leave(k projection.GroupKey, id string, req *wire.HeartbeatRequest, r report) *wire.HeartbeatResponse {
	g := t.group(k)
	m := g.Members[id]
	held := intersect(r.revoking, keys(authority(g, m)))
	if m.State != projection.MemberLeaving {
		t.emit(k, &events.MemberLeft{MemberID: id, Epochs: bump(g)})
	}
	t.recordOwnership(k, id, []int{}, held)
	t.c.renew(k, id, req, 0, nil)
	t.reconcile(k)
	t.advance(k)
	g = t.group(k)
	return t.c.respond(req, id, wire.StatusOK, g, -1, nil, nil)
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
	t.c.rt.clearDeadline(k, id)
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
