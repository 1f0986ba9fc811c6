package httpapi

import (
	"net/http"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

const (
	streamPath = "/coord/v1/streams/{streamPrefix}"
	groupPath  = streamPath + "/groups/{consumerGroup}"
	// monitoringGroupPath is a group's monitoring route prefix.
	monitoringGroupPath = "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}"
)

func (s *Server) registerGroupRoutes() {
	r := s.router
	r.HandleFunc(streamPath, s.handleCreateStream).Methods(http.MethodPost)
	r.HandleFunc(streamPath+"/scale", s.handleScaleStream).Methods(http.MethodPost)
	r.HandleFunc(groupPath, s.handleCreateGroup).Methods(http.MethodPost)
	r.HandleFunc(groupPath, s.handleGetGroup).Methods(http.MethodGet)
	r.HandleFunc(groupPath, s.handleDeleteGroup).Methods(http.MethodDelete)
	r.HandleFunc(groupPath+"/producer-routing", s.handleProducerRouting).Methods(http.MethodGet)
	r.HandleFunc(groupPath+"/scale", s.handleScaleGroup).Methods(http.MethodPost)
	r.HandleFunc(groupPath+"/migrations", s.handleListMigrations).Methods(http.MethodGet)
	r.HandleFunc(groupPath+"/migrations/{reshardingId}", s.handleGetMigration).Methods(http.MethodGet)
	r.HandleFunc(groupPath+"/migrations/{reshardingId}/rollback", s.handleRollback).Methods(http.MethodPost)
}

// CreateRequest is CreateStreamRequest / CreateGroupRequest.
type CreateRequest struct {
	InitialShardCount *int   `json:"initialShardCount"`
	RequestedBy       string `json:"requestedBy"`
	Reason            string `json:"reason"`
}

// StreamCreateResponse answers POST /coord/v1/streams/{p}.
type StreamCreateResponse struct {
	StreamPrefix    string `json:"streamPrefix"`
	ShardCount      int    `json:"shardCount"`
	MetadataVersion int64  `json:"metadataVersion"`
}

// handleCreateStream serves POST /coord/v1/streams/{streamPrefix}: creates the
// group named after the prefix.
func (s *Server) handleCreateStream(w http.ResponseWriter, r *http.Request) {
	prefix, err := pathVar(r, "streamPrefix")
	if err != nil {
		s.badRequest(w, r, err.Error())
		return
	}
	var req CreateRequest
	if !s.decodeBody(w, r, &req, true) {
		return
	}
	if !s.allow(w, r, prefix, "*") {
		return
	}
	g, err := s.c.CreateGroup(r.Context(), meta(r), commands.CreateGroupInput{
		StreamPrefix: prefix, ConsumerGroup: prefix, InitialShardCount: req.InitialShardCount,
		RequestedBy: req.RequestedBy, Reason: req.Reason, StreamLevel: true,
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, StreamCreateResponse{StreamPrefix: g.StreamPrefix, ShardCount: g.ShardCount, MetadataVersion: g.MetadataVersion})
}

// handleCreateGroup serves POST /coord/v1/streams/{streamPrefix}/groups/{consumerGroup}.
func (s *Server) handleCreateGroup(w http.ResponseWriter, r *http.Request) {
	p, err1 := pathVar(r, "streamPrefix")
	g, err2 := pathVar(r, "consumerGroup")
	if err1 != nil || err2 != nil {
		s.badRequest(w, r, "invalid percent-encoding in path")
		return
	}
	var req CreateRequest
	if !s.decodeBody(w, r, &req, true) {
		return
	}
	if !s.allow(w, r, p, g) {
		return
	}
	view, err := s.c.CreateGroup(r.Context(), meta(r), commands.CreateGroupInput{
		StreamPrefix: p, ConsumerGroup: g, InitialShardCount: req.InitialShardCount,
		RequestedBy: req.RequestedBy, Reason: req.Reason,
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, view)
}

// handleGetGroup serves GET /coord/v1/streams/{streamPrefix}/groups/{consumerGroup}.
func (s *Server) handleGetGroup(w http.ResponseWriter, r *http.Request) {
	g, ok := s.loadGroup(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, projection.ViewGroup(g))
}

// DeleteRequest is DeleteGroupRequest.
type DeleteRequest struct {
	RequestedBy string `json:"requestedBy"`
	Reason      string `json:"reason"`
	Force       bool   `json:"force"`
}

// handleDeleteGroup serves DELETE /coord/v1/streams/{streamPrefix}/groups/{consumerGroup}.
func (s *Server) handleDeleteGroup(w http.ResponseWriter, r *http.Request) {
	groupMutation(s, w, r, http.StatusOK, func(k projection.GroupKey, req *DeleteRequest) (any, error) {
		return s.c.DeleteGroup(r.Context(), meta(r), k, commands.DeleteGroupInput{RequestedBy: req.RequestedBy, Reason: req.Reason, Force: req.Force})
	})
}

// groupMutation is the shape of every mutation on one group: resolve the path's
// group key, decode the required body, apply the rate limit, decide, answer.
func groupMutation[T any](s *Server, w http.ResponseWriter, r *http.Request, status int, do func(k projection.GroupKey, req *T) (any, error)) {
	k, ok := s.groupKey(w, r)
	if !ok {
		return
	}
	var req T
	if !s.decodeBody(w, r, &req, true) {
		return
	}
	if !s.allow(w, r, k.StreamPrefix, k.ConsumerGroup) {
		return
	}
	v, err := do(k, &req)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, status, v)
}

// RoutingShard is one shard of the producer routing.
type RoutingShard struct {
	ShardIndex int    `json:"shardIndex"`
	StreamKey  string `json:"streamKey"`
	RedisSlot  int    `json:"redisSlot"`
}

// ProducerRoutingResponse is the routing metadata producers cache.
type ProducerRoutingResponse struct {
	StreamPrefix     string         `json:"streamPrefix"`
	ConsumerGroup    string         `json:"consumerGroup"`
	MetadataVersion  int64          `json:"metadataVersion"`
	ShardCount       int            `json:"shardCount"`
	StreamKeyPattern string         `json:"streamKeyPattern"`
	Shards           []RoutingShard `json:"shards"`
}

// RoutingOf renders a group's producer routing.
func RoutingOf(g *projection.Group) ProducerRoutingResponse {
	resp := ProducerRoutingResponse{
		StreamPrefix: g.Key.StreamPrefix, ConsumerGroup: g.Key.ConsumerGroup, MetadataVersion: g.MetadataVersion,
		ShardCount: g.ShardCount, StreamKeyPattern: routing.KeyPattern(g.Key.StreamPrefix), Shards: []RoutingShard{},
	}
	for i := 0; i < g.ShardCount; i++ {
		key := routing.StreamKey(g.Key.StreamPrefix, i)
		resp.Shards = append(resp.Shards, RoutingShard{ShardIndex: i, StreamKey: key, RedisSlot: routing.Slot(key)})
	}
	return resp
}

// handleProducerRouting serves GET .../groups/{consumerGroup}/producer-routing.
// During a scale-in the removed shards are already gone from it.
func (s *Server) handleProducerRouting(w http.ResponseWriter, r *http.Request) {
	g, ok := s.loadGroup(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, RoutingOf(g))
}

// ScaleRequest is ScaleStreamRequest / ScaleGroupRequest.
type ScaleRequest struct {
	TargetShardCount *int    `json:"targetShardCount"`
	RequestedBy      string  `json:"requestedBy"`
	Reason           string  `json:"reason"`
	DeprecatedAfter  *string `json:"deprecatedAfter"`
}

// handleScaleStream serves POST /coord/v1/streams/{streamPrefix}/scale.
func (s *Server) handleScaleStream(w http.ResponseWriter, r *http.Request) {
	prefix, err := pathVar(r, "streamPrefix")
	if err != nil {
		s.badRequest(w, r, err.Error())
		return
	}
	var req ScaleRequest
	if !s.decodeBody(w, r, &req, true) {
		return
	}
	if !s.allow(w, r, prefix, "*") {
		return
	}
	res, err := s.c.ScaleStream(r.Context(), meta(r), prefix, commands.ScaleInput{TargetShardCount: req.TargetShardCount, RequestedBy: req.RequestedBy, Reason: req.Reason})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, res)
}

// handleScaleGroup serves POST .../groups/{consumerGroup}/scale.
func (s *Server) handleScaleGroup(w http.ResponseWriter, r *http.Request) {
	groupMutation(s, w, r, http.StatusAccepted, func(k projection.GroupKey, req *ScaleRequest) (any, error) {
		return s.c.Scale(r.Context(), meta(r), k, commands.ScaleInput{TargetShardCount: req.TargetShardCount, RequestedBy: req.RequestedBy, Reason: req.Reason})
	})
}

// MigrationsResponse lists a group's reshardings.
type MigrationsResponse struct {
	Migrations         []projection.ReshardingView `json:"migrations"`
	ActiveReshardingID *string                     `json:"activeReshardingId"`
}

// handleListMigrations serves GET .../groups/{consumerGroup}/migrations (and the
// monitoring twin).
func (s *Server) handleListMigrations(w http.ResponseWriter, r *http.Request) {
	g, ok := s.loadGroup(w, r)
	if !ok {
		return
	}
	resp := MigrationsResponse{Migrations: []projection.ReshardingView{}}
	for _, m := range g.Reshardings {
		resp.Migrations = append(resp.Migrations, s.migrationView(r, g, m))
	}
	if g.ActiveResharding != "" {
		id := g.ActiveResharding
		resp.ActiveReshardingID = &id
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleGetMigration serves GET .../groups/{consumerGroup}/migrations/{reshardingId}.
func (s *Server) handleGetMigration(w http.ResponseWriter, r *http.Request) {
	k, ok := s.groupKey(w, r)
	if !ok {
		return
	}
	id, err := pathVar(r, "reshardingId")
	if err != nil {
		s.badRequest(w, r, err.Error())
		return
	}
	g, found := s.c.State().Group(k)
	if !found {
		s.writeError(w, r, commands.ErrGroupNotFound)
		return
	}
	m := g.Resharding(id)
	if m == nil {
		s.writeError(w, r, commands.ErrReshardingNotFound)
		return
	}
	writeJSON(w, http.StatusOK, s.migrationView(r, g, m))
}

// migrationView adds what only memory and Redis know: live drain evidence,
// member-reported progress on removed shards and rollback eligibility.
func (s *Server) migrationView(r *http.Request, g *projection.Group, m *projection.Resharding) projection.ReshardingView {
	v := projection.ViewResharding(g, m)
	if g.ActiveResharding == m.ReshardingID {
		ev, at := s.c.DrainEvidence(g.Key)
		byShard := map[int]int{}
		for i, row := range v.Drain {
			byShard[row.Shard.ShardIndex] = i
		}
		if !at.IsZero() {
			for _, e := range ev {
				if i, ok := byShard[e.ShardIndex]; ok {
					projection.FillDrainRow(&v.Drain[i], e)
					v.Drain[i].EvidenceSource = "redis@" + at.UTC().Format(time.RFC3339)
				}
			}
		}
		for _, mr := range s.c.MemberRuntimes(g.Key) {
			for _, p := range mr.Progress {
				if i, ok := byShard[p.Shard.ShardIndex]; ok {
					pending := p.PendingCount
					v.Drain[i].MemberPending = &pending
					v.Drain[i].MemberAckedID = p.LastAckedID
				}
			}
		}
		ctx := r.Context()
		v.Rollback = s.c.RollbackEligibility(ctx, g, m)
	}
	return v
}

// RollbackRequest is RollbackMigrationRequest plus our policy.
type RollbackRequest struct {
	RequestedBy string `json:"requestedBy"`
	Reason      string `json:"reason"`
	Policy      string `json:"policy"`
}

// handleRollback serves POST .../migrations/{reshardingId}/rollback.
func (s *Server) handleRollback(w http.ResponseWriter, r *http.Request) {
	groupMutation(s, w, r, http.StatusAccepted, func(k projection.GroupKey, req *RollbackRequest) (any, error) {
		id, err := pathVar(r, "reshardingId")
		if err != nil {
			return nil, &commands.Error{Kind: commands.KindInvalid, Code: commands.ErrInvalid.Code, Message: err.Error()}
		}
		return s.c.Rollback(r.Context(), meta(r), k, id, commands.RollbackInput{RequestedBy: req.RequestedBy, Reason: req.Reason, Policy: req.Policy})
	})
}
