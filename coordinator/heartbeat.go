package coordinator

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// heartbeats answers the members' heartbeats (Service.Heartbeat), and holds
// those that asked to wait for news (hold.go).
type heartbeats struct {
	heartbeatDeps
	// graces counts the graces of dropped held heartbeats running (hold.go).
	graces atomic.Int64
}

// heartbeatDeps is what the heartbeats are built from.
type heartbeatDeps struct {
	rules     commands.Rules
	state     *projection.State
	committed committedState
	table     *commands.RuntimeTable
	dec       writer
	// reg provisions the consumer group of a first heartbeat that registers
	// its group (the reconciler).
	reg   registrar
	locks *prefixLocks
	lead  interface{ IsLeader() bool }
	life  *lifecycle
	// timers is the reading leases are measured against (Clock).
	timers func() time.Time
	logger zerolog.Logger
	// holds are the held heartbeats and hold their tunables (hold.go).
	holds *waiters
	hold  holdRules
}

// holdRules are the tunables of held heartbeats (Config).
type holdRules struct {
	maxBound time.Duration
	grace    time.Duration
}

// registrar is the reconciler's side of a registering heartbeat.
type registrar interface {
	finishRemovalLocked(ctx context.Context, k projection.GroupKey) error
	provisionGroup(ctx context.Context, k projection.GroupKey, p commands.GroupPlan) (commands.Provisioned, error)
	unprovision(ctx context.Context, k projection.GroupKey, p commands.Provisioned)
}

// beat answers a heartbeat (Service.Heartbeat).
func (hb *heartbeats) beat(ctx context.Context, k projection.GroupKey, pathID, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatResponse, error) {
	req, resp, err := commands.Screen(hb.rules, pathID, req)
	if resp != nil || err != nil {
		return resp, err
	}
	if !hb.lead.IsLeader() {
		// Even a steady answer needs a running term: a deposed leader's view
		// may already be stale.
		return nil, commands.ErrNotLeader
	}
	req, err = hb.admissible(k, pathID, principal, req)
	if err != nil {
		return nil, err
	}
	if resp := hb.steadyHeartbeat(k, pathID, req); resp != nil {
		hb.issued(k, pathID, resp)
		return resp, nil
	}
	reg, unlock, err := hb.registration(ctx, k, principal, req)
	if err != nil {
		return nil, err
	}
	// A registration holds its prefix's lock from its provisioning to its
	// decision (removal.go).
	defer unlock()
	var refused error
	resp, err = submitFor(ctx, hb.dec, k, events.Meta{Actor: pathID, RequestID: req.RequestID}, func(t *commands.Tx) (*wire.HeartbeatResponse, error) {
		resp, err := commands.RegisterAndBeat(t, k, pathID, principal, req, reg)
		refused = err
		return resp, err
	})
	if refused != nil && reg != nil {
		hb.reg.unprovision(ctx, k, reg.Prov)
	}
	if err != nil {
		return nil, err
	}
	hb.issued(k, pathID, resp)
	return resp, nil
}

// registration provisions the consumer group of a heartbeat that registers
// its group (nil when it does not: the group exists, the epoch is not 0, or
// the stream has no metadata), refusing first what the decision would: the
// quotas of the principal and the prefix among them, before anything is
// provisioned. With provisioning it returns holding the prefix's lock (call
// unlock after the decision), having finished first a pending removal of
// the consumer groups of a deleted group of this name.
func (hb *heartbeats) registration(ctx context.Context, k projection.GroupKey, principal string, req *wire.HeartbeatRequest) (reg *commands.Registration, unlock func(), err error) {
	unlock = func() {}
	if *req.MemberEpoch != 0 || !hb.unregistered(k) || commands.ValidateKey(k) != nil {
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
	if hb.rules.Provisioning {
		// Refused by the committed state: no lock taken, nothing touched.
		if err := hb.committed.peek(func(t *commands.Tx) error {
			if err := check(t); err != nil && !errors.Is(err, commands.ErrStateConflict) {
				return err
			}
			return nil
		}); err != nil || !found {
			return nil, unlock, err
		}
		// Again with the prefix's side effects serialised: a concurrent
		// first heartbeat of the group may have registered it meanwhile.
		unlock = hb.locks.lock(k.StreamPrefix)
		if err := hb.reg.finishRemovalLocked(ctx, k); err != nil {
			unlock()
			return nil, func() {}, err
		}
	}
	if err := hb.committed.peek(check); err != nil || !found {
		unlock()
		return nil, func() {}, err
	}
	reg = &commands.Registration{Count: plan.Count, MV: plan.MV}
	if hb.rules.Provisioning && plan.Count > 0 {
		prov, err := hb.reg.provisionGroup(ctx, k, plan)
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
func (hb *heartbeats) unregistered(k projection.GroupKey) bool {
	var unregistered bool
	hb.state.Read(func(r projection.Reader) {
		st := r.Stream(k.StreamPrefix)
		unregistered = !r.Group(k).Exists() && st.Exists() && st.Metadata()
	})
	return unregistered
}

// issued remembers the member epoch an accepted heartbeat was answered with
// (monitoring shows it; the log records epochs only with grants).
func (hb *heartbeats) issued(k projection.GroupKey, id string, resp *wire.HeartbeatResponse) {
	switch resp.Status {
	case wire.StatusOK, wire.StatusSyncMetadata, wire.StatusRevokePending:
	default:
		return
	}
	hb.table.Issued(k, id, resp.MemberEpoch)
}

// admissible refuses, from the recorded state, a heartbeat from another
// principal than the member's, and drops from the report the shards past the
// group's span (withinSpan). The decision does both again against the state
// it decides on.
func (hb *heartbeats) admissible(k projection.GroupKey, id, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatRequest, error) {
	var err error
	hb.state.Read(func(st projection.Reader) {
		if g := st.Group(k); g.Exists() {
			req, err = commands.CheckCaller(g, id, principal, req)
		}
	})
	return req, err
}

// steadyHeartbeat answers a heartbeat that changes nothing under the read
// lock, without the writer (nil: the writer must decide).
func (hb *heartbeats) steadyHeartbeat(k projection.GroupKey, id string, req *wire.HeartbeatRequest) *wire.HeartbeatResponse {
	var resp *wire.HeartbeatResponse
	hb.state.Read(func(st projection.Reader) {
		resp = commands.Steady(hb.rules, hb.table, st.Group(k), k, id, req, hb.timers())
	})
	return resp
}
