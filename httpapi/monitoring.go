package httpapi

import (
	"context"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

// StreamReader reads shard streams for monitoring; it never changes them.
// redisstore.Shards implements it.
type StreamReader interface {
	Offsets(ctx context.Context, prefix, group string, shards []int) ([]ShardOffset, error)
	Messages(ctx context.Context, key string, forward bool, cursor string, limit int) (records []StreamRecord, more bool, err error)
	Ping(ctx context.Context) error
}

// ShardOffset is the contract's StreamShardOffset.
type ShardOffset struct {
	StreamPrefix            string   `json:"streamPrefix"`
	ConsumerGroup           string   `json:"consumerGroup"`
	Shard                   shardRef `json:"shard"`
	StreamKey               string   `json:"streamKey"`
	RedisSlot               int      `json:"redisSlot"`
	RedisNodeEndpoint       *string  `json:"redisNodeEndpoint"`
	RedisNodeID             *string  `json:"redisNodeId"`
	RedisSlotRangeStart     *int     `json:"redisSlotRangeStart"`
	RedisSlotRangeEnd       *int     `json:"redisSlotRangeEnd"`
	StreamLength            int64    `json:"streamLength"`
	FirstRecordID           *string  `json:"firstRecordId"`
	LastRecordID            *string  `json:"lastRecordId"`
	LastGeneratedID         *string  `json:"lastGeneratedId"`
	GroupLastDeliveredID    *string  `json:"groupLastDeliveredId"`
	ConsumerLastDeliveredID *string  `json:"consumerLastDeliveredId"`
	ConsumerLastAckedID     *string  `json:"consumerLastAckedId"`
	PendingCount            int64    `json:"pendingCount"`
	Lag                     *int64   `json:"lag"`
	MemoryUsageBytes        *int64   `json:"memoryUsageBytes"`
	OwnerMemberIDs          []string `json:"ownerMemberIds"`
	Exists                  bool     `json:"exists"`
	Routed                  bool     `json:"routed"`
}

type shardRef = projection.ShardRef

// StreamRecord is one message of a shard stream.
type StreamRecord struct {
	StreamPrefix      string            `json:"streamPrefix"`
	ConsumerGroup     string            `json:"consumerGroup"`
	Shard             shardRef          `json:"shard"`
	StreamKey         string            `json:"streamKey"`
	RecordID          string            `json:"recordId"`
	Fields            map[string]string `json:"fields"`
	Payload           *string           `json:"payload"`
	RecordTimestampMs *int64            `json:"recordTimestampMs"`
	RecordTime        *time.Time        `json:"recordTime"`
}

func (s *Server) registerMonitoringRoutes() {
	r := s.router
	const mg = "/coord/v1/monitoring/streams/{streamPrefix}/groups/{consumerGroup}"
	r.HandleFunc("/coord/v1/monitoring/health", s.handleHealth).Methods(http.MethodGet)
	r.HandleFunc("/coord/v1/monitoring/session", s.handleSession).Methods(http.MethodGet)
	r.HandleFunc("/coord/v1/monitoring/compatibility", s.handleCompatibility).Methods(http.MethodGet)
	r.HandleFunc("/coord/v1/monitoring/groups", s.handleListGroups).Methods(http.MethodGet)
	r.HandleFunc(mg, s.handleGetGroup).Methods(http.MethodGet)
	r.HandleFunc(mg+"/members", s.handleMembers).Methods(http.MethodGet)
	r.HandleFunc(mg+"/assignments", s.handleAssignments).Methods(http.MethodGet)
	r.HandleFunc(mg+"/consumption", s.handleConsumption).Methods(http.MethodGet)
	r.HandleFunc(mg+"/migrations", s.handleListMigrations).Methods(http.MethodGet)
	r.HandleFunc(mg+"/migrations/{reshardingId}", s.handleGetMigration).Methods(http.MethodGet)
	r.HandleFunc(mg+"/offsets", s.handleOffsets).Methods(http.MethodGet)
	r.HandleFunc(mg+"/shards/{shardIndex}/messages", s.handleMessages).Methods(http.MethodGet)
}

// HealthResponse is the contract's health body.
type HealthResponse struct {
	Status        string `json:"status"`
	CoordinatorID string `json:"coordinatorId"`
	Redis         string `json:"redis"`
	Loop          string `json:"loop"`
	Ready         bool   `json:"ready"`
	LastEventID   string `json:"lastEventId"`
	// Role, Leader and LeaderURL: as in Readiness.
	Role      string `json:"role"`
	Leader    string `json:"leader"`
	LeaderURL string `json:"leaderUrl"`
}

// handleHealth serves GET /coord/v1/monitoring/health.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	resp := HealthResponse{Status: "UP", CoordinatorID: s.c.Config().CoordinatorID, Redis: "UP", Loop: "UP", Ready: s.c.Ready(), LastEventID: s.c.State().LastID()}
	resp.Role, resp.Leader, resp.LeaderURL = s.leadership()
	if !s.c.Healthy() {
		resp.Status, resp.Redis = "DEGRADED", "DOWN"
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleSession serves GET /coord/v1/monitoring/session.
func (s *Server) handleSession(w http.ResponseWriter, r *http.Request) {
	p := principalOf(r)
	resp := map[string]any{"authenticated": p != nil, "username": nil, "roles": []string{}}
	if p != nil {
		resp["username"] = p.Username
		resp["roles"] = p.Roles
	}
	writeJSON(w, http.StatusOK, resp)
}

type semver struct {
	Major     int     `json:"major"`
	Minor     int     `json:"minor"`
	Patch     int     `json:"patch"`
	Qualifier *string `json:"qualifier"`
	Version   string  `json:"version"`
}

// handleCompatibility serves GET /coord/v1/monitoring/compatibility.
func (s *Server) handleCompatibility(w http.ResponseWriter, r *http.Request) {
	cfg := s.c.Config()
	writeJSON(w, http.StatusOK, map[string]any{
		"currentCoordinationVersion":    commands.ProtocolVersion,
		"supportedCoordinationVersions": map[string]int{"min": 1, "max": 1},
		"coordinationVersions": []map[string]any{{
			"version": 1, "status": "ACTIVE",
			"introducedIn":          semver{0, 1, 0, nil, "0.1.0"},
			"deprecatedIn":          nil,
			"minimumSupportedUntil": semver{1, 0, 0, nil, "1.0.0"},
			"removedIn":             nil,
			"timingDefaults": map[string]string{
				"heartbeatInterval": isoDuration(cfg.HeartbeatInterval),
				"memberLeaseTtl":    isoDuration(cfg.MemberLease),
				"rebalanceTimeout":  isoDuration(cfg.RebalanceTimeout),
			},
		}},
	})
}

func isoDuration(d time.Duration) string {
	if d%time.Minute == 0 && d >= time.Minute && d < time.Hour {
		return "PT" + strconv.Itoa(int(d/time.Minute)) + "M"
	}
	secs := d.Seconds()
	return "PT" + strconv.FormatFloat(secs, 'f', -1, 64) + "S"
}

// handleListGroups serves GET /coord/v1/monitoring/groups.
func (s *Server) handleListGroups(w http.ResponseWriter, r *http.Request) {
	out := []projection.GroupView{}
	for _, g := range s.c.State().Groups() {
		out = append(out, projection.ViewGroup(g))
	}
	writeJSON(w, http.StatusOK, map[string]any{"groups": out})
}

// MemberMetadata is the contract's member view.
type MemberMetadata struct {
	MemberID              string                   `json:"memberId"`
	MemberName            string                   `json:"memberName"`
	State                 string                   `json:"state"`
	MemberEpoch           int64                    `json:"memberEpoch"`
	MetadataVersion       int64                    `json:"metadataVersion"`
	RuntimeMaxConcurrency int                      `json:"runtimeMaxConcurrency"`
	ActiveConsumerWorkers int                      `json:"activeConsumerWorkers"`
	CurrentAssignment     []shardRef               `json:"currentAssignment"`
	GrantedAssignment     []shardRef               `json:"grantedAssignment"`
	TargetAssignment      []shardRef               `json:"targetAssignment"`
	Revoking              []shardRef               `json:"revoking"`
	LastHeartbeatAt       time.Time                `json:"lastHeartbeatAt"`
	MemberLeaseExpiresAt  time.Time                `json:"memberLeaseExpiresAt"`
	RebalanceTimeoutMs    int64                    `json:"rebalanceTimeoutMs"`
	RebalanceDeadlineAt   *time.Time               `json:"rebalanceDeadlineAt"`
	ShardProgress         []commands.ShardProgress `json:"shardProgress"`
	JoinedAt              time.Time                `json:"joinedAt"`
}

// MembersOf renders a group's members with their in-memory runtime.
func MembersOf(g *projection.Group, rt map[string]commands.MemberRuntime, rebalance time.Duration) []MemberMetadata {
	out := []MemberMetadata{}
	for _, id := range g.MemberIDs() {
		m := g.Members[id]
		mr := rt[id]
		active := m.MaxConcurrency - mr.Available
		if active < 0 {
			active = 0
		}
		mm := MemberMetadata{
			MemberID: id, MemberName: m.Name, State: m.State, MemberEpoch: m.Epoch, MetadataVersion: mr.ReportedMV,
			RuntimeMaxConcurrency: m.MaxConcurrency, ActiveConsumerWorkers: active,
			CurrentAssignment: projection.Shards(m.Current), GrantedAssignment: projection.Shards(m.Granted),
			TargetAssignment: projection.Shards(g.Targets[id]), Revoking: projection.Shards(m.Revoking),
			LastHeartbeatAt: mr.LastHeartbeatAt.UTC(), MemberLeaseExpiresAt: mr.LeaseExpiresAt.UTC(),
			RebalanceTimeoutMs: rebalance.Milliseconds(), ShardProgress: mr.Progress, JoinedAt: m.JoinedAt.UTC(),
		}
		if mr.RebalanceDeadline != nil {
			d := mr.RebalanceDeadline.UTC()
			mm.RebalanceDeadlineAt = &d
		}
		if mm.ShardProgress == nil {
			mm.ShardProgress = []commands.ShardProgress{}
		}
		out = append(out, mm)
	}
	return out
}

// handleMembers serves GET /coord/v1/monitoring/streams/{p}/groups/{g}/members.
func (s *Server) handleMembers(w http.ResponseWriter, r *http.Request) {
	g, ok := s.loadGroup(w, r)
	if !ok {
		return
	}
	k := g.Key
	writeJSON(w, http.StatusOK, map[string]any{"members": MembersOf(g, s.c.MemberRuntimes(k), s.c.Config().RebalanceTimeout)})
}

// handleAssignments serves GET /coord/v1/monitoring/streams/{p}/groups/{g}/assignments.
func (s *Server) handleAssignments(w http.ResponseWriter, r *http.Request) {
	g, ok := s.loadGroup(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, projection.ViewAssignments(g))
}

// ConsumerShardProgress is one row of the consumption endpoint.
type ConsumerShardProgress struct {
	StreamPrefix    string     `json:"streamPrefix"`
	ConsumerGroup   string     `json:"consumerGroup"`
	MemberID        string     `json:"memberId"`
	MemberName      string     `json:"memberName"`
	MemberState     string     `json:"memberState"`
	Shard           shardRef   `json:"shard"`
	StreamKey       string     `json:"streamKey"`
	LastDeliveredID *string    `json:"lastDeliveredId"`
	LastAckedID     *string    `json:"lastAckedId"`
	PendingCount    int64      `json:"pendingCount"`
	UpdatedAt       *time.Time `json:"updatedAt"`
}

// handleConsumption serves GET /coord/v1/monitoring/streams/{p}/groups/{g}/consumption.
func (s *Server) handleConsumption(w http.ResponseWriter, r *http.Request) {
	g, ok := s.loadGroup(w, r)
	if !ok {
		return
	}
	k := g.Key
	rt := s.c.MemberRuntimes(k)
	out := []ConsumerShardProgress{}
	for _, id := range g.MemberIDs() {
		m := g.Members[id]
		prog := append([]commands.ShardProgress(nil), rt[id].Progress...)
		sort.Slice(prog, func(i, j int) bool { return prog[i].Shard.ShardIndex < prog[j].Shard.ShardIndex })
		for _, p := range prog {
			out = append(out, ConsumerShardProgress{
				StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, MemberID: id, MemberName: m.Name, MemberState: m.State,
				Shard: shardRef{ShardIndex: p.Shard.ShardIndex}, StreamKey: p.StreamKey, LastDeliveredID: p.LastDeliveredID,
				LastAckedID: p.LastAckedID, PendingCount: p.PendingCount, UpdatedAt: p.UpdatedAt,
			})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"progress": out})
}

// handleOffsets serves GET /coord/v1/monitoring/streams/{p}/groups/{g}/offsets:
// every routed or still-assigned shard with Redis's view of it.
func (s *Server) handleOffsets(w http.ResponseWriter, r *http.Request) {
	g, ok := s.loadGroup(w, r)
	if !ok {
		return
	}
	k := g.Key
	if s.streams == nil {
		s.writeError(w, r, commands.ErrRedisNotConfigured)
		return
	}
	n := g.ShardCount
	if g.AssignableCount > n {
		n = g.AssignableCount
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	offs, err := s.streams.Offsets(r.Context(), k.StreamPrefix, k.ConsumerGroup, idx)
	if err != nil {
		s.writeError(w, r, &commands.Error{Kind: commands.KindUnavailable, Code: "REDIS_UNAVAILABLE", Message: "cannot read shard streams: " + err.Error()})
		return
	}
	var totalLen, totalPending, totalLag, totalMem int64
	lagKnown, memKnown := true, true
	for i := range offs {
		o := &offs[i]
		o.OwnerMemberIDs = []string{}
		for _, id := range g.MemberIDs() {
			if g.Members[id].Holds(o.Shard.ShardIndex) {
				o.OwnerMemberIDs = append(o.OwnerMemberIDs, id)
			}
		}
		o.Routed = o.Shard.ShardIndex < g.ShardCount
		totalLen += o.StreamLength
		totalPending += o.PendingCount
		if o.Lag == nil {
			lagKnown = false
		} else {
			totalLag += *o.Lag
		}
		if o.MemoryUsageBytes == nil {
			memKnown = false
		} else {
			totalMem += *o.MemoryUsageBytes
		}
	}
	resp := map[string]any{
		"streamPrefix": k.StreamPrefix, "consumerGroup": k.ConsumerGroup, "shards": offs,
		"totalStreamLength": totalLen, "totalPendingCount": totalPending, "totalLag": nil,
		"totalMemoryUsageBytes": totalMem, "memoryUsageKnown": memKnown,
	}
	if lagKnown {
		resp["totalLag"] = totalLag
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleMessages serves GET .../shards/{shardIndex}/messages: a read-only page of
// a shard stream (XRANGE forward, XREVRANGE backward).
func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	g, ok := s.loadGroup(w, r)
	if !ok {
		return
	}
	k := g.Key
	rawIdx, _ := pathVar(r, "shardIndex")
	idx, err := strconv.Atoi(rawIdx)
	n := g.ShardCount
	if g.AssignableCount > n {
		n = g.AssignableCount
	}
	if err != nil || idx < 0 || idx >= n {
		msg := "shardIndex must be between 0 and " + strconv.Itoa(n-1)
		if n == 0 {
			msg = "group has no shards"
		}
		s.badRequest(w, r, msg)
		return
	}
	q := r.URL.Query()
	direction := strings.ToUpper(q.Get("direction"))
	if direction == "" {
		direction = "BACKWARD"
	}
	if direction != "FORWARD" && direction != "BACKWARD" {
		s.badRequest(w, r, "direction must be FORWARD or BACKWARD")
		return
	}
	limit := 25
	if v := q.Get("limit"); v != "" {
		l, err := strconv.Atoi(v)
		if err != nil {
			s.badRequest(w, r, "limit must be an integer")
			return
		}
		limit = l
	}
	if limit < 1 {
		limit = 1
	}
	if limit > 1000 {
		limit = 1000
	}
	if s.streams == nil {
		s.writeError(w, r, commands.ErrRedisNotConfigured)
		return
	}
	key := routing.StreamKey(k.StreamPrefix, idx)
	recs, more, err := s.streams.Messages(r.Context(), key, direction == "FORWARD", q.Get("cursor"), limit)
	if err != nil {
		s.writeError(w, r, &commands.Error{Kind: commands.KindInvalid, Code: "INVALID_REQUEST", Message: "read " + key + ": " + err.Error()})
		return
	}
	for i := range recs {
		recs[i].StreamPrefix, recs[i].ConsumerGroup, recs[i].Shard = k.StreamPrefix, k.ConsumerGroup, shardRef{ShardIndex: idx}
	}
	var next *string
	if more && len(recs) > 0 {
		id := recs[len(recs)-1].RecordID
		next = &id
	}
	if recs == nil {
		recs = []StreamRecord{}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"streamPrefix": k.StreamPrefix, "consumerGroup": k.ConsumerGroup, "shard": shardRef{ShardIndex: idx},
		"streamKey": key, "direction": direction, "limit": limit, "records": recs, "nextCursor": next,
	})
}

func groupKeyOf(p, g string) projection.GroupKey {
	return projection.GroupKey{StreamPrefix: p, ConsumerGroup: g}
}
