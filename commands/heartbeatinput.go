package commands

import (
	"fmt"
	"strings"

	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// What a heartbeat may say: every string bounded, every array within the
// limits and within the group's shard span. A failure is HTTP 400.

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
// failure is HTTP 400. Service.Heartbeat also checks the arrays against the
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
		return WithMsg(ErrInvalid, "%s", strings.Join(p, "; "))
	}
	return nil
}

// checkShardList refuses a shard array longer than max, naming a negative
// shard or naming a shard twice (shard(i) is nil for an entry without a
// shard, reported elsewhere). A shard past the group's span is the
// decision's to judge (checkCaller, then fencing): a group made before
// --max-shard-count was lowered still has its shards.
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
		if s.ShardIndex < 0 {
			return []string{fmt.Sprintf("%s[%d].shardIndex: must be greater than or equal to 0 (got %d)", field, i, s.ShardIndex)}
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
func withinSpan(req *wire.HeartbeatRequest, span int, m projection.ReadOnlyMember) *wire.HeartbeatRequest {
	keep := func(i int) bool { return i < span || m.Current().Contains(i) || m.Revoking().Contains(i) }
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

func CheckCaller(g projection.ReadOnlyGroup, id, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatRequest, error) {
	m := g.Member(id)
	if m.Exists() && m.Principal() != "" && m.Principal() != principal {
		return nil, WithMsg(ErrMemberPrincipal, "member %s was joined by another principal; only that principal may send its heartbeats", id)
	}
	span := ShardSpan(g)
	limit := span
	if m.Exists() {
		// A member that stalled through the end of a resharding still lists
		// what the log records it holding.
		limit = max(limit, m.Current().Len()+m.Revoking().Len())
	}
	if len(req.OwnedShards) <= limit && len(req.RevokingShards) <= limit && len(req.ShardProgress) <= limit {
		return req, nil
	}
	if !m.Exists() {
		// Nobody the group knows: no stale report explains more shards than
		// the group has.
		return nil, OverSpan(req, limit)
	}
	return withinSpan(req, span, m), nil
}

// overSpan is the 400 for a report with more shards than the group has, from
// a member the group does not know.
func OverSpan(req *wire.HeartbeatRequest, span int) error {
	var p []string
	for _, a := range []struct {
		field string
		n     int
	}{{"ownedShards", len(req.OwnedShards)}, {"revokingShards", len(req.RevokingShards)}, {"shardProgress", len(req.ShardProgress)}} {
		if a.n > span {
			p = append(p, fmt.Sprintf("%s: must not hold more shards than the group has (%d, got %d)", a.field, span, a.n))
		}
	}
	return WithMsg(ErrInvalid, "%s", strings.Join(p, "; "))
}

// shardSpan is how many shards a group's members can legitimately report: the
// routed ones, the removed ones still assigned until drained, and the ones
// the last resharding took out of use until they are retired (members release
// them after a rollback or a drain; retirement waits until nobody holds them).
func ShardSpan(g projection.ReadOnlyGroup) int {
	span := max(g.ShardCount(), g.AssignableCount())
	if last := g.LastResharding(); last.Exists() && !last.Retired() {
		_, hi := last.RemovedRange()
		span = max(span, hi)
	}
	return span
}
