package httpapi

import (
	"context"
	"github.com/rscoord/rsc/httpapi/guard"
	"net/http"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

const (
	streamPath = "/coord/v1/streams/{streamPrefix}"
	groupPath  = streamPath + "/groups/{consumerGroup}"
	// monitoringGroupPath is a group's monitoring route prefix.
	monitoringGroupPath = "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}"
)

// groupAPI serves the consumer groups: create, read, delete, ordering,
// producer routing, scaling and its reshardings.
type groupAPI struct {
	kit
	dec Commands
	// rt is the leader's memory, read when fwd.ToLeader did not relay.
	rt    Runtime
	fwd   *guard.Forwarder
	limit *guard.RateLimiter
	// layoutWindow is Config.LayoutWindow.
	layoutWindow time.Duration
}

func (s *Server) registerGroupRoutes(h *groupAPI) {
	r := s.router
	r.HandleFunc(groupPath, h.handleCreateGroup).Methods(http.MethodPost)
	r.HandleFunc(groupPath, h.handleGetGroup).Methods(http.MethodGet)
	r.HandleFunc(groupPath, h.handleDeleteGroup).Methods(http.MethodDelete)
	r.HandleFunc(groupPath+"/producer-routing", h.handleProducerRouting).Methods(http.MethodGet)
	r.HandleFunc(groupPath+"/ordering", h.handleSetOrdering).Methods(http.MethodPut)
	r.HandleFunc(groupPath+"/scale", h.handleScaleGroup).Methods(http.MethodPost)
	r.HandleFunc(groupPath+"/migrations", h.handleListReshardings).Methods(http.MethodGet)
	r.HandleFunc(groupPath+"/migrations/{reshardingId}", h.handleGetResharding).Methods(http.MethodGet)
	r.HandleFunc(groupPath+"/migrations/{reshardingId}/rollback", h.handleRollback).Methods(http.MethodPost)
}

// handleCreateGroup serves POST /coord/v1/streams/{streamPrefix}/groups/{consumerGroup}.
func (h *groupAPI) handleCreateGroup(w http.ResponseWriter, r *http.Request) {
	p, err1 := pathVar(r, "streamPrefix")
	g, err2 := pathVar(r, "consumerGroup")
	if err1 != nil || err2 != nil {
		h.badRequest(w, r, "invalid percent-encoding in path")
		return
	}
	var req wire.CreateRequest
	if !h.admit(h.limit, w, r, &req, true) {
		return
	}
	view, err := h.dec.CreateGroup(r.Context(), meta(r), commands.CreateGroupInput{
		StreamPrefix: p, ConsumerGroup: g, InitialShardCount: req.InitialShardCount,
		RequestedBy: req.RequestedBy, Reason: req.Reason, Ordering: req.Ordering,
	})
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, projection.WireGroup(view))
}

// handleGetGroup serves GET /coord/v1/streams/{streamPrefix}/groups/{consumerGroup}.
func (h *groupAPI) handleGetGroup(w http.ResponseWriter, r *http.Request) {
	g, ok := h.loadGroup(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, GroupOf(g))
}

// handleDeleteGroup serves DELETE /coord/v1/streams/{streamPrefix}/groups/{consumerGroup}.
func (h *groupAPI) handleDeleteGroup(w http.ResponseWriter, r *http.Request) {
	groupMutation(&h.kit, h.limit, w, r, http.StatusOK, func(k projection.GroupKey, req *wire.DeleteRequest) (any, error) {
		return answer(projection.WireGroup)(h.dec.DeleteGroup(r.Context(), meta(r), k, commands.DeleteGroupInput{RequestedBy: req.RequestedBy, Reason: req.Reason, Force: req.Force}))
	})
}

// handleSetOrdering serves PUT .../groups/{consumerGroup}/ordering.
func (h *groupAPI) handleSetOrdering(w http.ResponseWriter, r *http.Request) {
	groupMutation(&h.kit, h.limit, w, r, http.StatusOK, func(k projection.GroupKey, req *wire.OrderingRequest) (any, error) {
		return answer(projection.WireGroup)(h.dec.SetOrdering(r.Context(), meta(r), k, commands.OrderingInput{Ordering: req.Ordering, RequestedBy: req.RequestedBy, Reason: req.Reason}))
	})
}

// groupMutation is the shape of every mutation on one group: resolve the path's
// group key, decode the required body, apply the rate limit, decide, answer.
func groupMutation[T any](h *kit, limit *guard.RateLimiter, w http.ResponseWriter, r *http.Request, status int, do func(k projection.GroupKey, req *T) (any, error)) {
	mutation(h, limit, w, r, status, h.groupKey, do)
}

// answer renders a decision's result with render, or passes its error on,
// for a mutation's do: answer(projection.WireGroup)(h.dec.DeleteGroup(...)).
func answer[V, W any](render func(V) W) func(V, error) (any, error) {
	return func(v V, err error) (any, error) {
		if err != nil {
			return nil, err
		}
		return render(v), nil
	}
}

// mutation resolves what the path names with key (false: it answered),
// decodes the required body, applies the rate limit, decides with do and
// answers status with what it returned.
func mutation[K, T any](h *kit, limit *guard.RateLimiter, w http.ResponseWriter, r *http.Request, status int,
	key func(http.ResponseWriter, *http.Request) (K, bool), do func(k K, req *T) (any, error)) {
	k, ok := key(w, r)
	if !ok {
		return
	}
	var req T
	if !h.admit(limit, w, r, &req, true) {
		return
	}
	v, err := do(k, &req)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, status, v)
}

// RoutingOf renders a group's producer routing, with the layouts that ended
// within window before now (none when window is 0).
func RoutingOf(g *projection.Group, now time.Time, window time.Duration) wire.ProducerRoutingResponse {
	resp := wire.ProducerRoutingResponse{
		StreamPrefix: g.Key.StreamPrefix, ConsumerGroup: g.Key.ConsumerGroup, MetadataVersion: g.MetadataVersion,
		ShardCount: g.ShardCount, StreamKeyPattern: routing.KeyPattern(g.Key.StreamPrefix), Shards: []wire.RoutingShard{},
		Ordering: projection.OrderingName(g.Ordering),
	}
	for i := 0; i < g.ShardCount; i++ {
		key := routing.StreamKey(g.Key.StreamPrefix, i)
		resp.Shards = append(resp.Shards, wire.RoutingShard{ShardIndex: i, StreamKey: key, RedisSlot: routing.Slot(key), FenceKey: routing.FenceKey(key)})
	}
	resp.PreviousLayouts, resp.LayoutWindowMs = routingLayouts(g.PreviousLayouts, now, window)
	return resp
}

// routingLayouts is the previous layouts a routing answer lists: those that
// ended within window before now, newest first, and the window in ms (none
// and 0 when window is 0).
func routingLayouts(prev []projection.Layout, now time.Time, window time.Duration) ([]wire.RoutingLayout, int64) {
	if window <= 0 {
		return nil, 0
	}
	var out []wire.RoutingLayout
	for _, l := range projection.LayoutsSince(prev, now.Add(-window)) {
		out = append(out, wire.RoutingLayout{MetadataVersion: l.MetadataVersion, ShardCount: l.ShardCount, Fence: l.Fence, EndedAt: l.EndedAt.UTC()})
	}
	return out, window.Milliseconds()
}

// handleProducerRouting serves GET .../groups/{consumerGroup}/producer-routing.
// During a scale-in the removed shards are already gone from it.
func (h *groupAPI) handleProducerRouting(w http.ResponseWriter, r *http.Request) {
	g, ok := h.loadGroup(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, RoutingOf(g, time.Now(), h.layoutWindow))
}

// handleScaleGroup serves POST .../groups/{consumerGroup}/scale.
func (h *groupAPI) handleScaleGroup(w http.ResponseWriter, r *http.Request) {
	groupMutation(&h.kit, h.limit, w, r, http.StatusAccepted, func(k projection.GroupKey, req *wire.ScaleRequest) (any, error) {
		return answer(projection.WireResharding)(h.dec.Scale(r.Context(), meta(r), k, commands.ScaleInput{TargetShardCount: req.TargetShardCount, RequestedBy: req.RequestedBy, Reason: req.Reason}))
	})
}

// handleListReshardings serves GET .../groups/{consumerGroup}/migrations (and
// the monitoring twin): the group's reshardings, oldest first.
func (h *groupAPI) handleListReshardings(w http.ResponseWriter, r *http.Request) {
	g, ok := h.leaderGroup(h.fwd, w, r)
	if !ok {
		return
	}
	rt := h.rt
	resp := wire.ReshardingsResponse{Migrations: []wire.Resharding{}}
	for _, m := range g.Reshardings {
		resp.Migrations = append(resp.Migrations, reshardingLive(r.Context(), rt, g, m))
	}
	resp.ActiveReshardingID = nonEmpty(g.ActiveResharding)
	writeJSON(w, http.StatusOK, resp)
}

// handleGetResharding serves GET .../groups/{consumerGroup}/migrations/{reshardingId}.
func (h *groupAPI) handleGetResharding(w http.ResponseWriter, r *http.Request) {
	if h.fwd.ToLeader(w, r) {
		return
	}
	rt := h.rt
	k, ok := h.groupKey(w, r)
	if !ok {
		return
	}
	id, err := pathVar(r, "reshardingId")
	if err != nil {
		h.badRequest(w, r, err.Error())
		return
	}
	g, found := h.read.State().Group(k)
	if !found {
		h.writeError(w, r, commands.ErrGroupNotFound)
		return
	}
	m := g.Resharding(id)
	if m == nil {
		h.writeError(w, r, commands.ErrReshardingNotFound)
		return
	}
	writeJSON(w, http.StatusOK, reshardingLive(r.Context(), rt, g, m))
}

// reshardingLive renders a resharding with what only memory and Redis know
// when it is the active one: live drain evidence, member-reported progress on
// removed shards and rollback eligibility.
func reshardingLive(ctx context.Context, rt Runtime, g *projection.Group, m *projection.Resharding) wire.Resharding {
	v := projection.ViewResharding(g, m)
	if g.ActiveResharding == m.ReshardingID {
		ev, at := rt.DrainEvidence(g.Key)
		byShard := map[int]int{}
		for i, row := range v.Drain {
			byShard[row.Shard] = i
		}
		if !at.IsZero() {
			for _, e := range ev {
				if i, ok := byShard[e.ShardIndex]; ok {
					projection.FillDrainRow(&v.Drain[i], e)
					v.Drain[i].EvidenceSource = "redis@" + at.UTC().Format(time.RFC3339)
				}
			}
		}
		for _, mr := range rt.MemberRuntimes(g.Key) {
			for _, p := range mr.Progress {
				if i, ok := byShard[p.Shard.ShardIndex]; ok {
					pending := p.PendingCount
					v.Drain[i].MemberPending = &pending
					v.Drain[i].MemberAckedID = p.LastAckedID
				}
			}
		}
		v.Rollback = rt.RollbackEligibility(ctx, g, m)
	}
	fillBarrierReads(v.Barriers, rt.BarrierReads(g.Key))
	return projection.WireResharding(v)
}

// fillBarrierReads adds to barrier views what the reconciler last read of
// their source shards.
func fillBarrierReads(bs []projection.BarrierView, reads map[string]coordinator.BarrierRead) {
	for i := range bs {
		for j := range bs[i].WaitingOn {
			src := &bs[i].WaitingOn[j]
			rd, ok := reads[src.StreamKey+" "+src.CutoverID]
			if !ok {
				continue
			}
			delivered, pending, at := rd.LastDelivered, rd.Pending, rd.At.UTC()
			src.Proven = projection.SourceProven(rd.BarrierProof)
			src.LastDeliveredID, src.PendingToCutover, src.CheckedAt = &delivered, &pending, &at
		}
	}
}

// handleRollback serves POST .../migrations/{reshardingId}/rollback.
func (h *groupAPI) handleRollback(w http.ResponseWriter, r *http.Request) {
	groupMutation(&h.kit, h.limit, w, r, http.StatusAccepted, func(k projection.GroupKey, req *wire.RollbackRequest) (any, error) {
		id, err := pathVar(r, "reshardingId")
		if err != nil {
			return nil, commands.ErrInvalid.WithMessage(err.Error())
		}
		return answer(projection.WireResharding)(h.dec.Rollback(r.Context(), meta(r), k, id, commands.RollbackInput{RequestedBy: req.RequestedBy, Reason: req.Reason, Policy: req.Policy}))
	})
}
