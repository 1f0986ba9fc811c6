package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/httpapi/guard"
	"github.com/rscoord/rsc/internal/streamread"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// StreamReader reads shard streams for monitoring; it never changes them.
// cmd/coordinator adapts redisstore.Shards to it. Offsets fills in each shard's
// prefix, group, index, Redis view and existence (not its owners nor whether
// it is routed); Messages fills in each record's key, id, fields, payload,
// times and fieldsTruncated (not the group nor the shard), within the query's
// bounds.
type StreamReader interface {
	Offsets(ctx context.Context, prefix, group string, shards []int) ([]wire.ShardOffset, error)
	Messages(ctx context.Context, key string, q MessagesQuery) (StreamPage, error)
	Ping(ctx context.Context) error
}

// MessagesQuery is one read of a shard stream, bounded in entries and bytes
// (the query redisstore.Shards.Messages answers).
type MessagesQuery = streamread.MessagesQuery

// StreamPage is what one read returned: More when records follow (Peek found
// one, or MaxBytes stopped the read), BytesCut when MaxBytes stopped it.
type StreamPage struct {
	Records  []wire.StreamRecord
	More     bool
	BytesCut bool
}

// monitoringAPI serves the monitoring views: health, session, groups, their
// members, assignments, consumption, offsets and messages (and, through
// grafanaAPI, Grafana's rows).
type monitoringAPI struct {
	kit
	// rt is the leader's memory, read when fwd.ToLeader did not relay.
	rt   Runtime
	fwd  *guard.Forwarder
	lead Leadership
	// streams reads shard streams (nil: offsets and messages answer 503);
	// offsets is its cache.
	streams StreamReader
	offsets *offsetCache
	// messages holds a slot per messages page in flight.
	messages chan struct{}
}

// registerMonitoringRoutes registers the monitoring routes, the monitoring
// twins of the group routes (served by groups) and the Grafana routes.
func (s *Server) registerMonitoringRoutes(h *monitoringAPI, groups *groupAPI) {
	r := s.router
	r.HandleFunc("/coord/v1/monitoring/health", h.handleHealth).Methods(http.MethodGet)
	r.HandleFunc("/coord/v1/monitoring/session", h.handleSession).Methods(http.MethodGet)
	r.HandleFunc("/coord/v1/monitoring/compatibility", h.handleCompatibility).Methods(http.MethodGet)
	r.HandleFunc("/coord/v1/monitoring/groups", h.handleListGroups).Methods(http.MethodGet)
	r.HandleFunc(monitoringGroupPath, groups.handleGetGroup).Methods(http.MethodGet)
	r.HandleFunc(monitoringGroupPath+"/members", h.handleMembers).Methods(http.MethodGet)
	r.HandleFunc(monitoringGroupPath+"/assignments", h.handleAssignments).Methods(http.MethodGet)
	r.HandleFunc(monitoringGroupPath+"/consumption", h.handleConsumption).Methods(http.MethodGet)
	r.HandleFunc(monitoringGroupPath+"/migrations", groups.handleListReshardings).Methods(http.MethodGet)
	r.HandleFunc(monitoringGroupPath+"/migrations/{reshardingId}", groups.handleGetResharding).Methods(http.MethodGet)
	r.HandleFunc(monitoringGroupPath+"/offsets", h.handleOffsets).Methods(http.MethodGet)
	r.HandleFunc(monitoringGroupPath+"/shards/{shardIndex}/messages", h.handleMessages).Methods(http.MethodGet)
	s.registerGrafanaRoutes(&grafanaAPI{s: h, guard: s.guard})
}

// handleHealth serves GET /coord/v1/monitoring/health.
func (h *monitoringAPI) handleHealth(w http.ResponseWriter, r *http.Request) {
	resp := wire.HealthResponse{Status: "UP", CoordinatorID: h.read.Config().CoordinatorID, Redis: "UP", Loop: "UP", Ready: h.read.Ready(), LastEventID: h.read.State().LastID()}
	resp.Role, resp.Leader, resp.LeaderURL = leadershipOf(h.lead)
	if !h.read.Healthy() {
		resp.Status, resp.Redis = "DEGRADED", "DOWN"
	}
	for _, q := range h.read.State().Quarantines() {
		if guard.Visible(r, q.StreamPrefix) {
			resp.Quarantined = append(resp.Quarantined, wire.Quarantine{StreamPrefix: q.StreamPrefix, EntryID: q.EntryID, Type: q.Type, Reason: q.Reason, SkippedEntries: q.Skipped})
		}
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleSession serves GET /coord/v1/monitoring/session.
func (h *monitoringAPI) handleSession(w http.ResponseWriter, r *http.Request) {
	resp := wire.SessionResponse{Roles: []string{}}
	if p := guard.PrincipalOf(r); p != nil {
		name := p.Username
		resp.Authenticated, resp.Username, resp.Roles, resp.Prefixes, resp.Groups = true, &name, p.Roles, p.Prefixes, p.Groups
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleCompatibility serves GET /coord/v1/monitoring/compatibility.
func (h *monitoringAPI) handleCompatibility(w http.ResponseWriter, r *http.Request) {
	cfg := h.read.Config()
	writeJSON(w, http.StatusOK, wire.CompatibilityResponse{
		CurrentCoordinationVersion:    wire.ProtocolVersion,
		SupportedCoordinationVersions: wire.VersionRange{Min: wire.ProtocolVersion, Max: wire.ProtocolVersion},
		CoordinationVersions: []wire.CoordinationVersion{{
			Version: wire.ProtocolVersion, Status: "ACTIVE",
			IntroducedIn:          wire.SemanticVersion{Major: 0, Minor: 1, Patch: 0, Version: "0.1.0"},
			MinimumSupportedUntil: wire.SemanticVersion{Major: 1, Minor: 0, Patch: 0, Version: "1.0.0"},
			TimingDefaults: wire.TimingDefaults{
				HeartbeatInterval: isoDuration(cfg.HeartbeatInterval),
				MemberLeaseTTL:    isoDuration(cfg.MemberLease),
				RebalanceTimeout:  isoDuration(cfg.RebalanceTimeout),
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

// handleListGroups serves GET /coord/v1/monitoring/groups: every group the
// principal's scope covers.
func (h *monitoringAPI) handleListGroups(w http.ResponseWriter, r *http.Request) {
	out := wire.GroupsResponse{Groups: []wire.Group{}}
	for _, g := range h.read.State().Groups() {
		if guard.Visible(r, g.Key.StreamPrefix) {
			out.Groups = append(out.Groups, GroupOf(g))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// memberEpoch is the epoch a live member was last answered with (the log
// records a member's epoch only when its granted set changes).
func memberEpoch(m *projection.Member, mr commands.MemberRuntime) int64 {
	if m.Live() && mr.Epoch > m.Epoch {
		return mr.Epoch
	}
	return m.Epoch
}

// MembersOf renders a group's members with their in-memory runtime.
func MembersOf(g *projection.Group, rt map[string]commands.MemberRuntime, rebalance time.Duration) []wire.MemberMetadata {
	out := []wire.MemberMetadata{}
	for _, id := range g.MemberIDs() {
		m := g.Member(id)
		mr := rt[id]
		active := m.MaxConcurrency - mr.Available
		if active < 0 {
			active = 0
		}
		mm := wire.MemberMetadata{
			MemberID: id, MemberName: m.Name, State: m.State, MemberEpoch: memberEpoch(m, mr), MetadataVersion: mr.ReportedMV,
			RuntimeMaxConcurrency: m.MaxConcurrency, ActiveConsumerWorkers: active,
			CurrentAssignment: sortedShardRefs(m.Current), GrantedAssignment: sortedShardRefs(m.Granted),
			TargetAssignment: sortedShardRefs(g.Target(id)), Revoking: sortedShardRefs(m.Revoking),
			LastHeartbeatAt: mr.LastHeartbeatAt.UTC(), MemberLeaseExpiresAt: mr.LeaseExpiresAt.UTC(),
			RebalanceTimeoutMs: rebalance.Milliseconds(), ShardProgress: mr.Progress, JoinedAt: m.JoinedAt.UTC(),
		}
		if mr.RebalanceDeadline != nil {
			d := mr.RebalanceDeadline.UTC()
			mm.RebalanceDeadlineAt = &d
		}
		if mm.ShardProgress == nil {
			mm.ShardProgress = []wire.ShardProgress{}
		}
		out = append(out, mm)
	}
	return out
}

// handleMembers serves GET /coord/v1/monitoring/streams/{p}/groups/{g}/members.
func (h *monitoringAPI) handleMembers(w http.ResponseWriter, r *http.Request) {
	g, ok := h.leaderGroup(h.fwd, w, r)
	if !ok {
		return
	}
	rt := h.rt
	writeJSON(w, http.StatusOK, wire.MembersResponse{Members: MembersOf(g, rt.MemberRuntimes(g.Key), h.read.Config().RebalanceTimeout)})
}

// handleAssignments serves GET /coord/v1/monitoring/streams/{p}/groups/{g}/assignments.
func (h *monitoringAPI) handleAssignments(w http.ResponseWriter, r *http.Request) {
	g, ok := h.loadGroup(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, projection.WireAssignments(projection.ViewAssignments(g)))
}

// handleConsumption serves GET /coord/v1/monitoring/streams/{p}/groups/{g}/consumption.
func (h *monitoringAPI) handleConsumption(w http.ResponseWriter, r *http.Request) {
	g, ok := h.leaderGroup(h.fwd, w, r)
	if !ok {
		return
	}
	memory := h.rt
	k := g.Key
	rt := memory.MemberRuntimes(k)
	out := wire.ConsumptionResponse{Progress: []wire.ConsumerShardProgress{}}
	for _, id := range g.MemberIDs() {
		m := g.Member(id)
		prog := append([]wire.ShardProgress(nil), rt[id].Progress...)
		sort.Slice(prog, func(i, j int) bool { return prog[i].Shard.ShardIndex < prog[j].Shard.ShardIndex })
		for _, p := range prog {
			out.Progress = append(out.Progress, wire.ConsumerShardProgress{
				StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, MemberID: id, MemberName: m.Name, MemberState: m.State,
				ShardProgress: p,
			})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleOffsets serves GET /coord/v1/monitoring/streams/{p}/groups/{g}/offsets:
// every routed or still-assigned shard with Redis's view of it, as the
// offsets cache last read it (asOf).
func (h *monitoringAPI) handleOffsets(w http.ResponseWriter, r *http.Request) {
	g, ok := h.loadGroup(w, r)
	if !ok {
		return
	}
	offs, _, err := h.readOffsets(r.Context(), g)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, offs)
}

// shardSpan is how many shard streams a group reads: the routed ones and,
// during a scale-in, the removed ones still assigned until drained.
func shardSpan(g *projection.Group) int {
	return max(g.ShardCount, g.AssignableCount)
}

// readOffsets is every shard of shardSpan as the offsets cache last read it
// from Redis (offsetcache.go), with its live owners (from the projection, as
// of now) and the group's totals, and each shard's rates since the read before.
func (h *monitoringAPI) readOffsets(ctx context.Context, g *projection.Group) (wire.OffsetsResponse, []shardRate, error) {
	if h.offsets == nil {
		return wire.OffsetsResponse{}, nil, commands.ErrRedisNotConfigured
	}
	k := g.Key
	read, err := h.offsets.get(ctx, g)
	if err != nil {
		if ctx.Err() != nil {
			return wire.OffsetsResponse{}, nil, err
		}
		return wire.OffsetsResponse{}, nil, streamsUnavailable(err)
	}
	offs := append([]wire.ShardOffset(nil), read.offs...) // the cache's stay as read
	if offs == nil {
		offs = []wire.ShardOffset{}
	}
	out := wire.OffsetsResponse{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, Shards: offs, MemoryUsageKnown: true, AsOf: read.at.UTC(),
		LagStatus: read.lagStatus}
	out.LagSeconds, out.OldestPendingSeconds = groupLagAges(offs)
	var totalLag int64
	lagKnown := true
	for i := range offs {
		o := &offs[i]
		o.OwnerMemberIDs = []string{}
		for _, id := range g.MemberIDs() {
			if g.Member(id).Holds(o.Shard.ShardIndex) {
				o.OwnerMemberIDs = append(o.OwnerMemberIDs, id)
			}
		}
		o.Routed = o.Shard.ShardIndex < g.ShardCount
		out.TotalStreamLength += o.StreamLength
		out.TotalPendingCount += o.PendingCount
		if o.Lag == nil {
			lagKnown = false
		} else {
			totalLag += *o.Lag
		}
		if o.MemoryUsageBytes == nil {
			out.MemoryUsageKnown = false
		} else {
			out.TotalMemoryUsageBytes += *o.MemoryUsageBytes
		}
	}
	if lagKnown {
		out.TotalLag = &totalLag
	}
	return out, read.rates, nil
}

// handleMessages serves GET .../shards/{shardIndex}/messages: a read-only page of
// a shard stream (XRANGE forward, XREVRANGE backward).
func (h *monitoringAPI) handleMessages(w http.ResponseWriter, r *http.Request) {
	g, ok := h.loadGroup(w, r)
	if !ok {
		return
	}
	k := g.Key
	rawIdx, _ := pathVar(r, "shardIndex")
	idx, err := parseShardIndex(g, rawIdx)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	direction, limit, err := parsePaging(r.URL.Query())
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	cursor := r.URL.Query().Get("cursor")
	if cursor != "" && !validStreamID(cursor) {
		h.writeError(w, r, badCursor(cursor, routing.StreamKey(k.StreamPrefix, idx), "a record id <ms>-<seq> or <ms>"))
		return
	}
	if msg := exclusiveBoundProblem(cursor, direction == "FORWARD"); cursor != "" && msg != "" {
		h.badRequest(w, r, "cursor: "+msg)
		return
	}
	release, ok := h.messagesSlot(w, r)
	if !ok {
		return
	}
	defer release()
	page, err := h.readPage(r.Context(), k, idx, answerQuery(direction == "FORWARD", cursor, limit))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	recs := page.Records
	n := fitJSON(len(recs), MaxMessagesAnswerBytes-answerEnvelopeBytes, func(i int) any { return recs[i] })
	truncated := page.BytesCut || n < len(recs)
	recs = recs[:n]
	var next *string
	if (page.More || truncated) && len(recs) > 0 {
		id := recs[len(recs)-1].RecordID
		next = &id
	}
	writeJSON(w, http.StatusOK, wire.MessagesPage{
		StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, Shard: wire.ShardRef{ShardIndex: idx},
		StreamKey: routing.StreamKey(k.StreamPrefix, idx), Direction: direction, Limit: limit, Records: recs, NextCursor: next,
		Truncated: truncated,
	})
}

// messagesSlot takes one of the MaxConcurrentMessageReads slots of messages
// pages for the rest of the request (release gives it back); false when
// every slot is taken and it answered 429.
func (h *monitoringAPI) messagesSlot(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	select {
	case h.messages <- struct{}{}:
		return func() { <-h.messages }, true
	default:
		w.Header().Set("Retry-After", "1")
		h.writeError(w, r, errTooManyMessageReads)
		return nil, false
	}
}

// answerQuery is the read of one page of at most limit records that one
// answer shows: its look-ahead, the answer's byte budget, the record bound.
func answerQuery(forward bool, cursor string, limit int) MessagesQuery {
	return MessagesQuery{Forward: forward, Cursor: cursor, Limit: limit, Peek: true, MaxBytes: MaxMessagesAnswerBytes, MaxRecordBytes: MaxRecordBytes}
}

// fitJSON is how many of n items, in order, fit in budget bytes of JSON (each
// encoded as writeJSON would, plus a separator); at least one when n > 0, as
// a page must move on. Each item is encoded once, on its own, so that
// counting never holds more than one item's encoding.
func fitJSON(n, budget int, item func(i int) any) int {
	used := 0
	for i := 0; i < n; i++ {
		data, err := json.Marshal(item(i))
		if err != nil {
			return max(i, 1)
		}
		if used += len(data) + 1; used > budget && i > 0 {
			return i
		}
	}
	return n
}

// parseShardIndex reads a shard index in [0, shardSpan).
func parseShardIndex(g *projection.Group, raw string) (int, error) {
	n := shardSpan(g)
	idx, err := strconv.Atoi(raw)
	if err != nil || idx < 0 || idx >= n {
		if n == 0 {
			return 0, commands.ErrInvalid.WithMessage("group has no shards")
		}
		return 0, commands.ErrInvalid.WithMessage("shardIndex must be between 0 and " + strconv.Itoa(n-1))
	}
	return idx, nil
}

// parsePaging reads direction (default BACKWARD, case-insensitive) and limit
// (default 25, clamped to [1, 1000]) of a messages page.
func parsePaging(q url.Values) (direction string, limit int, err error) {
	direction = strings.ToUpper(q.Get("direction"))
	if direction == "" {
		direction = "BACKWARD"
	}
	if direction != "FORWARD" && direction != "BACKWARD" {
		return "", 0, commands.ErrInvalid.WithMessage("direction must be FORWARD or BACKWARD")
	}
	limit = 25
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil {
			return "", 0, commands.ErrInvalid.WithMessage("limit must be an integer")
		}
	}
	return direction, min(max(limit, 1), 1000), nil
}

// readPage reads records of shard idx as q says (its cursor is exclusive,
// "" from the end the direction starts at; the caller checked its syntax).
// Any error of Redis is a 503 that does not show it.
func (h *monitoringAPI) readPage(ctx context.Context, k projection.GroupKey, idx int, q MessagesQuery) (StreamPage, error) {
	if h.streams == nil {
		return StreamPage{}, commands.ErrRedisNotConfigured
	}
	key := routing.StreamKey(k.StreamPrefix, idx)
	page, err := h.streams.Messages(ctx, key, q)
	if err != nil {
		return StreamPage{}, streamsUnavailable(fmt.Errorf("read %s: %w", key, err))
	}
	for i := range page.Records {
		page.Records[i].StreamPrefix, page.Records[i].ConsumerGroup, page.Records[i].Shard = k.StreamPrefix, k.ConsumerGroup, wire.ShardRef{ShardIndex: idx}
	}
	if page.Records == nil {
		page.Records = []wire.StreamRecord{}
	}
	return page, nil
}

// maxStreamID is the greatest stream id Redis has: no id follows it.
const maxStreamID = "18446744073709551615-18446744073709551615"

// exclusiveBoundProblem says why a read after id (forward) or before it
// (backward), id excluded, cannot be asked of Redis, whose range commands
// refuse an exclusive bound with no id beyond it: after the greatest id, or
// before 0-0. "" when it can. The caller checked id's syntax.
func exclusiveBoundProblem(id string, forward bool) string {
	ms, seq, full := parseStreamID(id)
	switch {
	case forward && full && ms == math.MaxUint64 && seq == math.MaxUint64:
		return "no stream id follows " + maxStreamID
	case !forward && full && ms == 0 && seq == 0:
		return "no stream id precedes 0-0"
	}
	return ""
}

// validStreamID reports a stream id as a cursor may give it: "<ms>-<seq>" or "<ms>".
func validStreamID(id string) bool {
	ms, seq, hasSeq := strings.Cut(id, "-")
	if _, err := strconv.ParseUint(ms, 10, 64); err != nil {
		return false
	}
	if hasSeq {
		if _, err := strconv.ParseUint(seq, 10, 64); err != nil {
			return false
		}
	}
	return true
}

// badCursor is the 400 of a cursor that is not one of the forms wanted.
func badCursor(cursor, of, wanted string) error {
	if len(cursor) > 64 {
		cursor = cursor[:64] + "..."
	}
	return commands.ErrInvalid.WithMessage("cursor " + strconv.Quote(cursor) + " of " + of + " is not " + wanted)
}

func groupKeyOf(p, g string) projection.GroupKey {
	return projection.GroupKey{StreamPrefix: p, ConsumerGroup: g}
}
