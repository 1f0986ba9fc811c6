package coordinator

import (
	"context"
	"errors"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// Heartbeat runs the member protocol: join, leave, fencing, ownership validation,
// revoke before assign. A heartbeat that changes nothing is answered from the
// projection without touching the log. principal is the authenticated user that
// sent it ("" when the member API is anonymous): a member id is bound to the
// principal that joined it, and a heartbeat for it from anyone else is refused
// (ErrMemberPrincipal, HTTP 403) before it can release or claim anything.
//
// A first heartbeat (epoch 0) for a group that does not exist, on a stream
// with metadata, registers the group: its consumer group is provisioned on
// every shard of the stream (at the stream's end, outside the writer; a
// failure is 503 and records nothing), then one decision records
// group.created with the stream's layout and joins the member.
func (s *Service) Heartbeat(ctx context.Context, k projection.GroupKey, pathID, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatResponse, error) {
	req, resp, err := commands.Screen(s.rules, pathID, req)
	if resp != nil || err != nil {
		return resp, err
	}
	if !s.lead.IsLeader() {
		// Even a steady answer needs a running term: a deposed leader's view
		// may already be stale.
		return nil, commands.ErrNotLeader
	}
	req, err = s.admissible(k, pathID, principal, req)
	if err != nil {
		return nil, err
	}
	if resp := s.steadyHeartbeat(k, pathID, req); resp != nil {
		s.issued(k, pathID, resp)
		return resp, nil
	}
	reg, unlock, err := s.registration(ctx, k, principal, req)
	if err != nil {
		return nil, err
	}
	// A registration holds its prefix's lock from its provisioning to its
	// decision (removal.go).
	defer unlock()
	var refused error
	resp, err = submitFor(ctx, s.dec, k, events.Meta{Actor: pathID, RequestID: req.RequestID}, func(t *commands.Tx) (*wire.HeartbeatResponse, error) {
		resp, err := commands.RegisterAndBeat(t, k, pathID, principal, req, reg)
		refused = err
		return resp, err
	})
	if refused != nil && reg != nil {
		s.rec.unprovision(ctx, k, reg.Prov)
	}
	if err != nil {
		return nil, err
	}
	s.issued(k, pathID, resp)
	return resp, nil
}

// registration provisions the consumer group of a heartbeat that registers
// its group (nil when it does not: the group exists, the epoch is not 0, or
// the stream has no metadata), refusing first what the decision would: the
// quotas of the principal and the prefix among them, before anything is
// provisioned. With provisioning it returns holding the prefix's lock (call
// unlock after the decision), having finished first a pending removal of
// the consumer groups of a deleted group of this name.
func (s *Service) registration(ctx context.Context, k projection.GroupKey, principal string, req *wire.HeartbeatRequest) (reg *commands.Registration, unlock func(), err error) {
	unlock = func() {}
	if *req.MemberEpoch != 0 || !s.unregistered(k) || commands.ValidateKey(k) != nil {
		return nil, unlock, nil // the group exists, or UNKNOWN_MEMBER_ID
	}
	by := commands.OwnerOfCaller(principal)
	var plan commands.GroupPlan
	found := false
	check := func(t *commands.Tx) (err error) {
		found = false
		if t.Group(k) != nil {
			return nil
		}
		st := t.B.Overlay.Stream(k.StreamPrefix)
		if st == nil || !st.Metadata {
			return nil
		}
		found = true
		if plan, err = commands.PlanGroup(t, k, nil, st.ShardCount, by); err != nil {
			return err
		}
		// The member is new to a new group: a report with more shards than
		// the stream has is refused by the decision (checkCaller), so it is
		// refused here, before a consumer group is provisioned for it; so
		// is a join past the principal's member quota or churn budget (the
		// peek's runtime overlay is dropped: this spends nothing).
		if len(req.OwnedShards) > plan.Count || len(req.RevokingShards) > plan.Count || len(req.ShardProgress) > plan.Count {
			return commands.OverSpan(req, plan.Count)
		}
		if err := commands.WithinMemberQuota(t, principal); err != nil {
			return err
		}
		return commands.SpendChurn(t, k, principal)
	}
	if s.rules.Provisioning {
		// Refused by the committed state: no lock taken, nothing touched.
		if err := s.peek(func(t *commands.Tx) error {
			if err := check(t); err != nil && !errors.Is(err, commands.ErrStateConflict) {
				return err
			}
			return nil
		}); err != nil || !found {
			return nil, unlock, err
		}
		// Again with the prefix's side effects serialised: a concurrent
		// first heartbeat of the group may have registered it meanwhile.
		unlock = s.locks.lock(k.StreamPrefix)
		if err := s.rec.finishRemovalLocked(ctx, k); err != nil {
			unlock()
			return nil, func() {}, err
		}
	}
	if err := s.peek(check); err != nil || !found {
		unlock()
		return nil, func() {}, err
	}
	reg = &commands.Registration{Count: plan.Count, MV: plan.MV}
	if s.rules.Provisioning && plan.Count > 0 {
		prov, err := s.rec.provisionGroup(ctx, k, plan)
		if err != nil {
			unlock()
			return nil, func() {}, err
		}
		reg.Prov = prov
	}
	return reg, unlock, nil
}

// unregistered reports, under the read lock only, whether k does not exist
// and its stream has metadata (a first heartbeat then registers it): the
// joins of existing groups pay one map lookup for it.
func (s *Service) unregistered(k projection.GroupKey) bool {
	var unregistered bool
	s.state.Read(func(r projection.Reader) {
		st := r.Stream(k.StreamPrefix)
		unregistered = r.Group(k) == nil && st != nil && st.Metadata
	})
	return unregistered
}

// issued remembers the member epoch an accepted heartbeat was answered with
// (monitoring shows it; the log records epochs only with grants).
func (s *Service) issued(k projection.GroupKey, id string, resp *wire.HeartbeatResponse) {
	switch resp.Status {
	case wire.StatusOK, wire.StatusSyncMetadata, wire.StatusRevokePending:
	default:
		return
	}
	s.table.Issued(k, id, resp.MemberEpoch)
}

// admissible refuses, from the recorded state, a heartbeat from another
// principal than the member's, and drops from the report the shards past the
// group's span (withinSpan). The decision does both again against the state
// it decides on.
func (s *Service) admissible(k projection.GroupKey, id, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatRequest, error) {
	var err error
	s.state.Read(func(st projection.Reader) {
		if g := st.Group(k); g != nil {
			req, err = commands.CheckCaller(g, id, principal, req)
		}
	})
	return req, err
}

// steadyHeartbeat answers a heartbeat that changes nothing under the read
// lock, without the writer (nil: the writer must decide).
func (s *Service) steadyHeartbeat(k projection.GroupKey, id string, req *wire.HeartbeatRequest) *wire.HeartbeatResponse {
	var resp *wire.HeartbeatResponse
	s.state.Read(func(st projection.Reader) {
		resp = commands.Steady(s.rules, s.table, st.Group(k), k, id, req, s.timers())
	})
	return resp
}
