package commands

import (
	"fmt"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// screen is what a heartbeat is refused for before any state is read
// (CONTRACT.md §3.2 steps 0-2): a body that fails validation (HTTP 400), a
// protocol version other than 1, a member id other than the path's. A
// missing protocolVersion is 1 and a missing runtimeConsumerCapacity is
// {1, 1} (the reference's 0.3.5 defaults): it returns the request with them.
// A nil answer and error: the heartbeat goes on.
func Screen(r Rules, pathID string, req *wire.HeartbeatRequest) (*wire.HeartbeatRequest, *wire.HeartbeatResponse, error) {
	req = withDefaults(req)
	if err := validateHeartbeat(req, r.MaxShardCount); err != nil {
		return req, nil, err
	}
	if *req.ProtocolVersion != wire.ProtocolVersion {
		return req, r.rejected(req, pathID, wire.StatusUnsupportedProtocol), nil
	}
	if req.MemberID != pathID {
		return req, r.rejected(req, pathID, wire.StatusInvalidRequest), nil
	}
	return req, nil, nil
}

// withDefaults is req with the fields a 0.3.5 client may leave out filled
// in (req itself when it has them).
func withDefaults(req *wire.HeartbeatRequest) *wire.HeartbeatRequest {
	if req.ProtocolVersion != nil && req.RuntimeConsumerCapacity != nil {
		return req
	}
	out := *req
	if out.ProtocolVersion == nil {
		v := wire.ProtocolVersion
		out.ProtocolVersion = &v
	}
	if out.RuntimeConsumerCapacity == nil {
		one, avail := 1, 1
		out.RuntimeConsumerCapacity = &wire.Capacity{RuntimeMaxConcurrency: &one, AvailableConcurrency: &avail}
	}
	return &out
}

// registration is what a first heartbeat's registration of its group was
// decided on: the stream's layout when the consumer groups were provisioned,
// the shards whose streams that created, and those where the group's
// consumer group was someone else's.
type Registration struct {
	Count int
	MV    int64
	Prov  Provisioned
}

// registerAndBeat is a heartbeat's decision: with a registration (its
// consumer groups provisioned), a group that still does not exist is
// created on its stream first (a race with another first heartbeat finds it
// created: it is re-read and joined), then the member protocol decides.
func RegisterAndBeat(t *Tx, k projection.GroupKey, id, principal string, req *wire.HeartbeatRequest, reg *Registration) (*wire.HeartbeatResponse, error) {
	if reg != nil && t.Group(k) == nil && *req.MemberEpoch == 0 {
		if err := register(t, k, id, principal, reg); err != nil {
			return nil, err
		}
	}
	return heartbeat(t, k, id, principal, req)
}

// register records group.created for a group registered by member id's
// first heartbeat, at the layout its consumer groups were provisioned for.
func register(t *Tx, k projection.GroupKey, id, principal string, reg *Registration) error {
	st := t.B.Overlay.Stream(k.StreamPrefix)
	if st == nil || !st.Metadata {
		return nil // the heartbeat is UNKNOWN_MEMBER_ID
	}
	by := OwnerOfCaller(principal)
	plan, err := PlanGroup(t, k, nil, st.ShardCount, by)
	if err != nil {
		return err
	}
	if plan.Count != reg.Count || plan.MV != reg.MV {
		return WithMsg(ErrStateConflict, "stream %s changed while group %s was registered; retry", k.StreamPrefix, k.ConsumerGroup)
	}
	requestedBy := principal
	if requestedBy == "" {
		requestedBy = id
	}
	t.emit(k, &events.GroupCreated{ShardCount: plan.Count, Provisioned: t.Rules.Provisioning, RequestedBy: Truncate(requestedBy, MaxTextBytes),
		Reason: Truncate("registered by the first heartbeat of member "+id, MaxTextBytes), MetadataVersion: plan.MV, RegisteredBy: id,
		KeysChecked: true, CreatedShards: reg.Prov.Created, Principal: by.Principal, Anonymous: by.Anonymous, ForeignShards: reg.Prov.Foreign})
	return nil
}

// steady is the answer to a heartbeat that changes nothing: the member is
// live with a current epoch, reports exactly what the log records it
// holding, its grant is what the assignment gives it, no correction round is
// open and no rebalance deadline passed. It renews the lease in the runtime
// table directly; nil when the heartbeat needs a decision. Its answer is the
// decision's (the rules table checks it, heartbeat_rules_test.go).
func Steady(r Rules, table *RuntimeTable, g projection.ReadOnlyGroup, k projection.GroupKey, id string, req *wire.HeartbeatRequest, now time.Time) *wire.HeartbeatResponse {
	if !g.Exists() {
		return nil
	}
	m := g.Member(id)
	if !m.Exists() || !m.Live() || !currentEpoch(g, m, *req.MemberEpoch) || *req.MetadataVersion > g.MetadataVersion() {
		return nil
	}
	if table.Round(k).Open {
		return nil
	}
	rep := parseReport(req, m)
	if !m.Current().Equal(rep.owned) || !m.Revoking().Equal(rep.revoking) || rep.name != m.Name() || rep.maxConc != m.MaxConcurrency() {
		return nil
	}
	assigned, pending := g.Grantable(id)
	if !m.Granted().Equal(assigned) {
		return nil
	}
	auth := authority(g, m)
	for _, sh := range rep.progress {
		if !auth[sh] {
			return nil
		}
	}
	if table.deadlinePassed(k, id, now) {
		return nil
	}
	table.renew(k, id, renewal{at: now, lease: r.MemberLease, reportedMV: *req.MetadataVersion, available: rep.available, progress: progressWithin(k, req, auth)})
	return r.respond(req, id, wire.StatusOK, g, g.AssignmentEpoch(), assigned, pending)
}

// --- the decision procedure (CONTRACT.md §3.2) ---

// heartbeat is the decision procedure inside the writer: expiry and an
// overdue round first (the heartbeat may be what notices them), then the
// member's case, each a function below: a left member's old epoch, a
// metadata correction, join and rejoin, leave, fencing, ownership
// validation, and what every accepted heartbeat settles.
func heartbeat(t *Tx, k projection.GroupKey, id, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatResponse, error) {
	g := t.Group(k)
	if g == nil {
		return t.Rules.rejected(req, id, wire.StatusUnknownMember), nil
	}
	req, err := CheckCaller(g.ReadOnly(), id, principal, req)
	if err != nil {
		return nil, err
	}
	expireLapsed(t, k)
	endOverdueRound(t, k)
	g = t.Group(k)
	m := g.Member(id)
	hb := heartbeatCase{k: k, id: id, principal: principal, req: req, r: parseReport(req, m.ReadOnly()), epoch: *req.MemberEpoch, mv: *req.MetadataVersion}
	// A correction round concerns members that carry state; a join or rejoin
	// (epoch 0 from a member that is not live) starts from nothing.
	hb.syncable = m != nil && (m.Live() || (m.State == projection.MemberLeaving && hb.epoch == -1))
	if m != nil && m.State == projection.MemberLeaving && hb.epoch > 0 {
		return leftWithOldEpoch(t, hb, g, m), nil
	}
	reportsNewerMetadata(t, &hb, g)
	hb.round = t.RT.round(k).Open
	if hb.syncable && hb.round && hb.mv != g.MetadataVersion {
		return syncMetadata(t, hb, g, m), nil
	}
	resp, progress, err := admit(t, hb, g, m)
	if resp != nil || err != nil {
		return resp, err
	}
	return settle(t, hb, progress), nil
}

// heartbeatCase is one heartbeat as the decision reads it.
type heartbeatCase struct {
	k             projection.GroupKey
	id, principal string
	req           *wire.HeartbeatRequest
	r             report
	epoch         int64
	// mv is the reported metadata version as the decision takes it (a
	// quarantined member's is taken for the stored one).
	mv       int64
	syncable bool // a correction round concerns the member
	round    bool // a correction round is open
}

// leftWithOldEpoch: a member that left (or a request with its principal said
// so) heartbeats with the epoch it held before. That epoch is no longer
// current; it rejoins with epoch 0. Accepting it answered OK with nothing
// assigned (or, in a correction round, SYNC_METADATA with the leave's epoch
// -1, which clients adopt), renewed its lease and kept it LEAVING for as
// long as it heartbeat. The contract refuses it (INVALID_REQUEST, the epoch
// is above the stored -1); FENCED tells every client to rejoin.
func leftWithOldEpoch(t *Tx, hb heartbeatCase, g *projection.Group, m *projection.Member) *wire.HeartbeatResponse {
	return t.Rules.respond(hb.req, hb.id, wire.StatusFenced, g.ReadOnly(), m.Epoch, nil, nil)
}

// reportsNewerMetadata: a member that saw a newer metadata version than the
// log holds means metadata was lost; the coordinator never raises its
// version to match, it opens a correction round. A member (or principal)
// whose earlier round had to be ended by fencing it does not open another:
// its higher version is taken for the stored one, and ownership validation
// still fences it for any shard it may not hold.
func reportsNewerMetadata(t *Tx, hb *heartbeatCase, g *projection.Group) {
	if !hb.syncable || hb.mv <= g.MetadataVersion {
		return
	}
	if !t.RT.round(hb.k).Open && t.RT.isQuarantined(hb.k, hb.id, hb.principal) {
		hb.mv = g.MetadataVersion
		return
	}
	if t.RT.openRound(hb.k, g.MetadataVersion) {
		t.Log.Warn().Str("prefix", hb.k.StreamPrefix).Str("group", hb.k.ConsumerGroup).Str("member", hb.id).Int64("reported", hb.mv).Int64("stored", g.MetadataVersion).Msg("member reports a newer metadata version: correction round opened")
	}
}

// syncMetadata answers a member that has not converged on the stored
// metadata version during a round: SYNC_METADATA with what it may keep.
// Reports on shards outside its authority are dropped (the contract), never
// stored. It keeps only the shards it owns that it may be granted and starts
// nothing new: what it was granted and does not read is released, or the
// round could never close; what it still reads (or drains) stays held until
// a heartbeat shows it released.
func syncMetadata(t *Tx, hb heartbeatCase, g *projection.Group, m *projection.Member) *wire.HeartbeatResponse {
	k, id := hb.k, hb.id
	t.renew(k, id, hb.req, hb.r.available, progressWithin(k, hb.req, authority(g.ReadOnly(), m.ReadOnly())))
	target := g.Target(id)
	assignedNow, _ := g.Grantable(id)
	kept := intersect(hb.r.owned, assignedNow)
	stillRead := intersect(m.Granted, append(append([]int{}, hb.r.owned...), hb.r.revoking...))
	grant := projection.SortedInts(append(append([]int{}, kept...), stillRead...))
	effective := m.Epoch
	if m.Live() && currentEpoch(g.ReadOnly(), m.ReadOnly(), hb.epoch) {
		effective = hb.epoch
		if !projection.EqualSets(grant, m.Granted) {
			g = t.emit(k, &events.MemberSynced{MemberID: id, MemberEpoch: m.Epoch, Granted: grant})
		}
	}
	return t.Rules.respond(hb.req, id, wire.StatusSyncMetadata, g.ReadOnly(), effective, kept, minus(target, kept))
}

// admit sorts the heartbeat by its epoch: an answer when the protocol ends
// here (a refusal, a fence, a leave), else the accepted member's progress
// reports, with a join, a rejoin or its ownership report recorded.
func admit(t *Tx, hb heartbeatCase, g *projection.Group, m *projection.Member) (*wire.HeartbeatResponse, []wire.ShardProgress, error) {
	k, id, req, r, epoch := hb.k, hb.id, hb.req, hb.r, hb.epoch
	switch {
	case epoch < -1:
		return t.Rules.rejected(req, id, wire.StatusInvalidRequest), nil, nil
	case m == nil && epoch != 0:
		return t.Rules.rejected(req, id, wire.StatusUnknownMember), nil, nil
	case m == nil:
		if err := WithinMemberQuota(t, hb.principal); err != nil {
			return nil, nil, err
		}
		if err := SpendChurn(t, k, hb.principal); err != nil {
			return nil, nil, err
		}
		if err := makeRoom(t, k); err != nil {
			return nil, nil, err
		}
		g = t.Group(k)
		t.emit(k, &events.MemberJoined{MemberID: id, MemberName: r.name, MaxConcurrency: r.maxConc, Principal: hb.principal, Epochs: bump(g)})
		reconcile(t, k)
	case epoch == 0 && !m.Live():
		if !m.Active() {
			if err := WithinMemberQuota(t, hb.principal); err != nil {
				return nil, nil, err
			}
		}
		if err := SpendChurn(t, k, hb.principal); err != nil {
			return nil, nil, err
		}
		t.emit(k, &events.MemberJoined{MemberID: id, MemberName: r.name, MaxConcurrency: r.maxConc, Rejoin: true, Principal: hb.principal, Epochs: bump(g)})
		reconcile(t, k)
	case epoch == 0:
		if len(m.Current) > 0 || len(m.Revoking) > 0 || len(r.owned) > 0 || len(req.RevokingShards) > 0 || len(req.ShardProgress) > 0 {
			return t.Rules.rejected(req, id, wire.StatusInvalidRequest), nil, nil
		}
		// Initial-join replay: the member lost our answer to its join.
	case m.State == projection.MemberFenced || m.State == projection.MemberExpired:
		return t.Rules.respond(req, id, wire.StatusFenced, g.ReadOnly(), m.Epoch, nil, nil), nil, nil
	case epoch == -1:
		resp, err := leave(t, hb)
		return resp, nil, err
	case epoch > g.AssignmentEpoch:
		return t.Rules.rejected(req, id, wire.StatusInvalidRequest), nil, nil
	case epoch < m.Epoch:
		return t.Rules.respond(req, id, wire.StatusFenced, g.ReadOnly(), m.Epoch, nil, nil), nil, nil
	default:
		return validateOwnership(t, hb, g, m)
	}
	return nil, nil, nil
}

// validateOwnership checks what an accepted member says it holds against its
// authority: a shard outside it fences the member (during a correction round
// only owned shards count: revoking and progress reports outside it are
// dropped). What passes is recorded (recordOwnership).
func validateOwnership(t *Tx, hb heartbeatCase, g *projection.Group, m *projection.Member) (*wire.HeartbeatResponse, []wire.ShardProgress, error) {
	k, id, r := hb.k, hb.id, hb.r
	auth := authority(g.ReadOnly(), m.ReadOnly())
	var bad []int
	for _, s := range r.owned {
		if !auth[s] {
			bad = append(bad, s)
		}
	}
	for _, s := range append(append([]int{}, r.revoking...), r.progress...) {
		if !auth[s] && !hb.round {
			bad = append(bad, s)
		}
	}
	if len(bad) > 0 {
		g = fence(t, k, id, fmt.Sprintf("reported shards it may not hold: %v", projection.SortedInts(bad)))
		return t.Rules.respond(hb.req, id, wire.StatusFenced, g.ReadOnly(), g.Member(id).Epoch, nil, nil), nil, nil
	}
	revoking := r.revoking
	if hb.round {
		revoking = intersect(revoking, keys(auth))
	}
	recordOwnership(t, k, id, r.owned, revoking)
	return nil, progressWithin(k, hb.req, auth), nil
}

// settle finishes an accepted heartbeat: a changed name or capacity is
// recorded, the lease renewed, the assignment reconciled, rebalance deadlines
// enforced and the resharding advanced; then, in a correction round, the
// member's convergence is acknowledged and the round closes once everyone
// converged (until then REVOKE_PENDING with what it may keep); otherwise the
// member is granted what is grantable (revoke before assign: a shard another
// member still holds stays pending).
func settle(t *Tx, hb heartbeatCase, progress []wire.ShardProgress) *wire.HeartbeatResponse {
	k, id, r := hb.k, hb.id, hb.r
	g := t.Group(k)
	m := g.Member(id)
	if r.name != m.Name || r.maxConc != m.MaxConcurrency {
		t.emit(k, &events.MemberUpdated{MemberID: id, MemberName: r.name, MaxConcurrency: r.maxConc})
	}
	t.renew(k, id, hb.req, r.available, progress)
	reconcile(t, k)
	enforceRebalance(t, k)
	advance(t, k)
	g = t.Group(k)
	m = g.Member(id)
	if m.State == projection.MemberFenced {
		return t.Rules.respond(hb.req, id, wire.StatusFenced, g.ReadOnly(), m.Epoch, nil, nil)
	}
	if hb.round && t.RT.round(k).Open {
		if resp := convergeInRound(t, hb, g, m); resp != nil {
			return resp
		}
	}
	assigned, pending := g.Grantable(id)
	if !projection.EqualSets(assigned, m.Granted) {
		g = t.emit(k, &events.MemberSynced{MemberID: id, MemberEpoch: g.AssignmentEpoch, Granted: assigned})
	}
	return t.Rules.respond(hb.req, id, wire.StatusOK, g.ReadOnly(), g.AssignmentEpoch, assigned, pending)
}

// convergeInRound acknowledges a member that converged on the stored
// metadata version (or joined) and closes the round once every participant
// did and nothing is being revoked; while it stays open the member gets
// REVOKE_PENDING with the shards it holds and may keep (nil: the round
// closed, answer as usual).
func convergeInRound(t *Tx, hb heartbeatCase, g *projection.Group, m *projection.Member) *wire.HeartbeatResponse {
	k, id := hb.k, hb.id
	if hb.mv == g.MetadataVersion || hb.epoch == 0 {
		t.RT.ackRound(k, id)
	}
	if roundClosed(t, k, g) && t.RT.closeRound(k) {
		t.Log.Info().Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Msg("metadata correction round closed")
		return nil
	}
	assignedNow, _ := g.Grantable(id)
	kept := intersect(m.Current, assignedNow)
	if !projection.EqualSets(kept, m.Granted) {
		g = t.emit(k, &events.MemberSynced{MemberID: id, MemberEpoch: g.AssignmentEpoch, Granted: kept})
	}
	return t.Rules.respond(hb.req, id, wire.StatusRevokePending, g.ReadOnly(), g.AssignmentEpoch, kept, minus(g.Target(id), kept))
}

func keys(set map[int]bool) []int {
	out := make([]int, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	return projection.SortedInts(out)
}

// roundClosed reports whether every participant converged and nobody
// revokes or blocks anything.
func roundClosed(t *Tx, k projection.GroupKey, g *projection.Group) bool {
	// Only active members can take part, revoke or wait for a shard: a
	// terminal record holds nothing and has no target.
	for _, id := range g.ActiveMemberIDs() {
		m := g.Member(id)
		if roundParticipant(m) && !t.RT.roundAcked(k, id) {
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
func roundParticipant(m *projection.Member) bool { return m.Active() }

// endOverdueRound ends a correction round that stayed open for the rebalance
// timeout: every participant that has not converged (never heartbeat with the
// stored metadata version, or still revoking) is fenced with a reason, and
// quarantined so that it cannot open another round for a while; the others
// proceed. One member, buggy or hostile, cannot hold the group in
// REVOKE_PENDING for longer than that.
func endOverdueRound(t *Tx, k projection.GroupKey) {
	round := t.RT.round(k)
	if !round.Open || t.timers().Before(round.OpenedAt.Add(t.Rules.RebalanceTimeout)) {
		return
	}
	g := t.Group(k)
	var late []string
	for _, id := range g.ActiveMemberIDs() {
		m := g.Member(id)
		if roundParticipant(m) && (!t.RT.roundAcked(k, id) || len(m.Revoking) > 0) {
			late = append(late, id)
		}
	}
	t.RT.closeRound(k)
	for _, id := range late {
		principal := g.Member(id).Principal
		fence(t, k, id, fmt.Sprintf("metadata correction round: did not converge on metadata version %d within the rebalance timeout (%s)", round.TargetMV, t.Rules.RebalanceTimeout))
		t.RT.quarantine(k, id, principal, t.timers().Add(t.Rules.quarantineFor()))
	}
	t.Log.Warn().Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Strs("fenced", late).Msg("metadata correction round ended at the rebalance timeout")
}

// makeRoom keeps a group within MaxMembersPerGroup member records: before a
// new member joins a full group, the terminal records (expired, fenced, or left
// holding nothing) are pruned, oldest first; if every record is a member that
// still takes part, the join is refused.
func makeRoom(t *Tx, k projection.GroupKey) error {
	g := t.Group(k)
	limit := t.Rules.MaxMembers
	count := g.MemberCount()
	if count < limit {
		return nil
	}
	need := count - limit + 1
	oldest := g.OldestTerminal(need, nil)
	if len(oldest) < need {
		return WithMsg(ErrGroupFull, "group %s already has %d members that take part (--max-members-per-group %d); a new member cannot join until one leaves or expires", k.ConsumerGroup, count-len(oldest), limit)
	}
	gone := make([]string, 0, need)
	for _, m := range oldest {
		gone = append(gone, m.ID)
	}
	pruneMembers(t, k, gone)
	return nil
}

// terminalMember reports whether a member record only remains for monitoring:
// expired, fenced, or left holding nothing.
func terminalMember(m *projection.Member) bool { return !m.Active() }

// recordOwnership records a changed owned/revoking report and acknowledges
// revokes the member completed.
func recordOwnership(t *Tx, k projection.GroupKey, id string, owned, revoking []int) *projection.Group {
	g := t.Group(k)
	m := g.Member(id)
	if projection.EqualSets(owned, m.Current) && projection.EqualSets(revoking, m.Revoking) {
		return g
	}
	before := projection.SortedInts(append(append([]int{}, m.Current...), m.Revoking...))
	after := projection.SortedInts(append(append([]int{}, owned...), revoking...))
	released := minus(before, after)
	g = t.emit(k, &events.OwnershipReported{MemberID: id, Owned: owned, Revoking: revoking})
	var acked []int
	for _, s := range released {
		if !ContainsInt(g.Target(id), s) {
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
func leave(t *Tx, hb heartbeatCase) (*wire.HeartbeatResponse, error) {
	k, id, req, r := hb.k, hb.id, hb.req, hb.r
	g := t.Group(k)
	m := g.Member(id)
	var held []int
	if len(r.revoking) > 0 { // a member that reports nothing draining needs no authority
		held = intersect(r.revoking, keys(authority(g.ReadOnly(), m.ReadOnly())))
	}
	if m.State != projection.MemberLeaving {
		if err := SpendChurn(t, k, hb.principal); err != nil {
			return nil, err
		}
		t.emit(k, &events.MemberLeft{MemberID: id, Epochs: bump(g)})
	}
	recordOwnership(t, k, id, []int{}, held)
	t.renew(k, id, req, 0, nil)
	reconcile(t, k)
	advance(t, k)
	g = t.Group(k)
	return t.Rules.respond(req, id, wire.StatusOK, g.ReadOnly(), -1, nil, nil), nil
}

// spendChurn spends one of the principal's joins and leaves in the group,
// and one of its joins and leaves across all its groups, where a join or a
// leave is about to be recorded (a steady heartbeat, a replayed join and a
// repeated leave record nothing and spend nothing); the refusal when either
// has none left, saying when to retry: the heartbeat appends nothing (and a
// refused decision spends nothing).
func SpendChurn(t *Tx, k projection.GroupKey, principal string) error {
	who := principal
	if who == "" {
		who = "anonymous"
	}
	if b := t.Rules.quotas.churn; b.On() {
		if ok, wait := t.RT.takePrincipalChurn(principal, b); !ok {
			return WithMsg(ErrRateLimited, "too many member joins and leaves by %s across its groups (at most %.0f a minute, --principal-churn-per-minute); retry in %s",
				who, b.Rate*60, wait.Round(time.Millisecond)).WithRetryAfter(wait)
		}
	}
	b := t.Rules.churn
	if !b.On() {
		return nil
	}
	ok, wait := t.RT.takeChurn(k, principal, b)
	if ok {
		return nil
	}
	return WithMsg(ErrRateLimited, "too many member joins and leaves by %s in group %s/%s (at most %.0f a minute, --member-churn-per-minute); retry in %s",
		who, k.StreamPrefix, k.ConsumerGroup, b.Rate*60, wait.Round(time.Millisecond)).WithRetryAfter(wait)
}

// fence records that a member lost its shards.
func fence(t *Tx, k projection.GroupKey, id, reason string) *projection.Group {
	g := t.Group(k)
	m := g.Member(id)
	epoch := g.GroupEpoch + 1
	if m.Epoch+1 > epoch {
		epoch = m.Epoch + 1
	}
	t.emitAs(Actor, k, &events.MemberFenced{MemberID: id, Reason: reason, MemberEpoch: epoch, Epochs: bump(g)})
	t.RT.clearDeadline(k, id)
	return reconcile(t, k)
}

type report struct {
	owned, revoking, terminal []int
	progress                  []int
	name                      string
	maxConc, available        int
}

func parseReport(req *wire.HeartbeatRequest, m projection.ReadOnlyMember) report {
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
	} else if m.Exists() {
		r.name = m.Name()
	}
	return r
}

// authority is what a member may report holding: what it holds already, plus
// what it may be granted now.
func authority(g projection.ReadOnlyGroup, m projection.ReadOnlyMember) map[int]bool {
	a := map[int]bool{}
	for _, set := range [...]projection.ReadOnlyInts{m.Current(), m.Revoking(), m.Granted()} {
		for i := range set.Len() {
			a[set.At(i)] = true
		}
	}
	// What the member already holds stays within its authority even after a
	// scale-in removed the shard: it is being revoked, not stolen.
	assigned, _ := g.Grantable(m.ID())
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

// currentEpoch reports whether epoch is one the coordinator may have issued to
// the live member m: at least its recorded epoch and at most the assignment
// epoch. An accepted heartbeat is answered with the assignment epoch, but only
// a change of the granted set is recorded (member.synced): recording every
// member's adoption of a new epoch would append an event per member for every
// join, leave or expiry in the group. A stale epoch (below the recorded one)
// is fenced; one above the assignment epoch was never issued.
func currentEpoch(g projection.ReadOnlyGroup, m projection.ReadOnlyMember, epoch int64) bool {
	return epoch >= 1 && epoch >= m.Epoch() && epoch <= g.AssignmentEpoch()
}

func intersect(a, b []int) []int {
	var out []int
	for _, x := range a {
		if ContainsInt(b, x) {
			out = append(out, x)
		}
	}
	return projection.SortedInts(out)
}

func minus(a, b []int) []int {
	var out []int
	for _, x := range a {
		if !ContainsInt(b, x) {
			out = append(out, x)
		}
	}
	return projection.SortedInts(out)
}

func ContainsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
