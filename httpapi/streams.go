package httpapi

import (
	"net/http"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/httpapi/guard"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// Streams: a stream prefix's metadata (its one layout), its create, adopt
// and scale, its stream-scoped producer routing, and its monitoring views.

// monitoringStreamPath is a stream's monitoring route.
const monitoringStreamPath = "/coord/v1/monitoring/streams/{streamPrefix}"

// streamAPI serves the stream prefixes: create, adopt, scale, read, and
// their producer routing.
type streamAPI struct {
	kit
	dec   Commands
	limit *guard.RateLimiter
	// layoutWindow is Config.LayoutWindow.
	layoutWindow time.Duration
}

// registerStreamRoutes registers the stream routes, and a stream's history
// (events and replay, served by hist).
func (s *Server) registerStreamRoutes(h *streamAPI, hist *historyAPI) {
	r := s.router
	r.HandleFunc(streamPath, h.handleCreateStream).Methods(http.MethodPost)
	r.HandleFunc(streamPath, h.handleGetStream).Methods(http.MethodGet)
	r.HandleFunc(streamPath+"/adopt", h.handleAdoptStream).Methods(http.MethodPost)
	r.HandleFunc(streamPath+"/scale", h.handleScaleStream).Methods(http.MethodPost)
	r.HandleFunc(streamPath+"/producer-routing", h.handleStreamRouting).Methods(http.MethodGet)
	r.HandleFunc("/coord/v1/monitoring/streams", h.handleListStreams).Methods(http.MethodGet)
	r.HandleFunc(monitoringStreamPath, h.handleGetStream).Methods(http.MethodGet)
	r.HandleFunc(monitoringStreamPath+"/events", hist.handleStreamEvents).Methods(http.MethodGet)
	r.HandleFunc(monitoringStreamPath+"/replay", hist.handleStreamReplay).Methods(http.MethodGet)
}

// streamPrefixOf is the path's stream prefix, validated (false: answered).
func (h *kit) streamPrefixOf(w http.ResponseWriter, r *http.Request) (string, bool) {
	prefix, ok := h.pathPrefix(w, r)
	if !ok {
		return "", false
	}
	if err := routing.ValidatePrefix(prefix); err != nil {
		h.badRequest(w, r, err.Error())
		return "", false
	}
	return prefix, true
}

// streamMutation is the shape of every mutation on one stream prefix: read
// the path's prefix, decode the required body, apply the rate limit, decide,
// answer.
func streamMutation[T any](h *streamAPI, w http.ResponseWriter, r *http.Request, status int, do func(prefix string, req *T) (any, error)) {
	mutation(&h.kit, h.limit, w, r, status, h.pathPrefix, do)
}

// pathPrefix is the path's stream prefix as it stands (false: answered).
func (h *kit) pathPrefix(w http.ResponseWriter, r *http.Request) (string, bool) {
	prefix, err := pathVar(r, "streamPrefix")
	if err != nil {
		h.badRequest(w, r, err.Error())
		return "", false
	}
	return prefix, true
}

// streamCreated is the answer to a stream's create or adopt.
func streamCreated(v projection.StreamView) wire.StreamCreateResponse {
	return wire.StreamCreateResponse{StreamPrefix: v.StreamPrefix, ShardCount: v.ShardCount, MetadataVersion: v.MetadataVersion}
}

// handleCreateStream serves POST /coord/v1/streams/{streamPrefix}: the
// stream's shard streams, empty and without consumer groups, and its
// metadata at version 1 (201).
func (h *streamAPI) handleCreateStream(w http.ResponseWriter, r *http.Request) {
	streamMutation(h, w, r, http.StatusCreated, func(prefix string, req *wire.CreateRequest) (any, error) {
		return answer(streamCreated)(h.dec.CreateStream(r.Context(), meta(r), commands.CreateStreamInput{
			StreamPrefix: prefix, InitialShardCount: req.InitialShardCount, RequestedBy: req.RequestedBy, Reason: req.Reason, Ordering: req.Ordering,
		}))
	})
}

// handleAdoptStream serves POST /coord/v1/streams/{streamPrefix}/adopt:
// takes over existing shard streams without creating anything (201).
func (h *streamAPI) handleAdoptStream(w http.ResponseWriter, r *http.Request) {
	streamMutation(h, w, r, http.StatusCreated, func(prefix string, req *wire.AdoptRequest) (any, error) {
		return answer(streamCreated)(h.dec.AdoptStream(r.Context(), meta(r), commands.AdoptStreamInput{StreamPrefix: prefix, ShardCount: req.ShardCount, RequestedBy: req.RequestedBy, Reason: req.Reason}))
	})
}

// handleScaleStream serves POST /coord/v1/streams/{streamPrefix}/scale: a
// stream without groups changes its layout at once (empty
// affectedConsumerGroups and migrations); otherwise every group scales.
func (h *streamAPI) handleScaleStream(w http.ResponseWriter, r *http.Request) {
	streamMutation(h, w, r, http.StatusAccepted, func(prefix string, req *wire.ScaleRequest) (any, error) {
		res, err := h.dec.ScaleStream(r.Context(), meta(r), prefix, commands.ScaleInput{TargetShardCount: req.TargetShardCount, RequestedBy: req.RequestedBy, Reason: req.Reason})
		if err != nil {
			return nil, err
		}
		out := wire.StreamScaleResult{StreamPrefix: res.StreamPrefix, TargetShardCount: res.TargetShardCount,
			AffectedConsumerGroups: res.AffectedConsumerGroups, Migrations: make([]wire.Resharding, 0, len(res.Reshardings))}
		for _, v := range res.Reshardings {
			out.Migrations = append(out.Migrations, projection.WireResharding(v))
		}
		return out, nil
	})
}

// StreamRoutingOf renders a stream-scoped producer routing of count shards
// at metadata version mv.
func StreamRoutingOf(prefix string, count int, mv int64) wire.StreamRoutingResponse {
	resp := wire.StreamRoutingResponse{StreamPrefix: prefix, MetadataVersion: mv, ShardCount: count,
		StreamKeyPattern: routing.KeyPattern(prefix), Shards: make([]wire.RoutingShard, 0, count), FenceField: routing.StreamFenceField}
	for i := 0; i < count; i++ {
		key := routing.StreamKey(prefix, i)
		resp.Shards = append(resp.Shards, wire.RoutingShard{ShardIndex: i, StreamKey: key, RedisSlot: routing.Slot(key), FenceKey: routing.FenceKey(key)})
	}
	return resp
}

// handleStreamRouting serves GET /coord/v1/streams/{streamPrefix}/producer-routing:
// the stream's layout when it has metadata; else its groups' when they
// agree (409 STREAM_SHARD_TOPOLOGY_CONFLICT when they do not); 404
// STREAM_NOT_FOUND with neither.
func (h *streamAPI) handleStreamRouting(w http.ResponseWriter, r *http.Request) {
	prefix, ok := h.streamPrefixOf(w, r)
	if !ok {
		return
	}
	st, groups := h.read.State().StreamWithGroups(prefix)
	count, mv, found, conflict := projection.StreamLayout(st, groups)
	switch {
	case conflict:
		h.writeError(w, r, commands.ErrTopologyConflict)
	case !found:
		h.writeError(w, r, commands.ErrStreamNotFound.WithMessage("No coordinator metadata or groups exist for stream prefix "+prefix))
	default:
		resp := StreamRoutingOf(prefix, count, mv)
		if st != nil && st.Metadata {
			resp.PreviousLayouts, resp.LayoutWindowMs = routingLayouts(st.PreviousLayouts, time.Now(), h.layoutWindow)
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

// streamView is the view of a prefix's stream, false when the coordinator
// knows neither metadata nor a group of it.
func (h *streamAPI) streamView(prefix string) (projection.StreamView, bool) {
	st, groups := h.read.State().StreamWithGroups(prefix)
	if (st == nil || !st.Metadata) && len(groups) == 0 {
		return projection.StreamView{}, false
	}
	return projection.ViewStream(prefix, st, groups), true
}

// handleGetStream serves GET /coord/v1/streams/{streamPrefix} and its
// monitoring twin: the stream's metadata, groups and shard record.
func (h *streamAPI) handleGetStream(w http.ResponseWriter, r *http.Request) {
	prefix, ok := h.streamPrefixOf(w, r)
	if !ok {
		return
	}
	v, found := h.streamView(prefix)
	if !found {
		h.writeError(w, r, commands.ErrStreamNotFound.WithMessage("No coordinator metadata or groups exist for stream prefix "+prefix))
		return
	}
	writeJSON(w, http.StatusOK, projection.WireStream(v))
}

// handleListStreams serves GET /coord/v1/monitoring/streams: every stream
// with metadata or groups that the principal's scope covers, by prefix.
func (h *streamAPI) handleListStreams(w http.ResponseWriter, r *http.Request) {
	out := wire.StreamsResponse{Streams: []wire.Stream{}}
	for _, v := range projection.StreamViews(h.read.State()) {
		if guard.Visible(r, v.StreamPrefix) {
			out.Streams = append(out.Streams, projection.WireStream(v))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleStreamEvents serves GET /coord/v1/monitoring/streams/{streamPrefix}/events:
// the stream's own audit history (created, adopted, scaled, refused), paged
// like a group's.
func (h *historyAPI) handleStreamEvents(w http.ResponseWriter, r *http.Request) {
	prefix, ok := h.streamPrefixOf(w, r)
	if !ok {
		return
	}
	h.serveHistory(w, r, projection.GroupKey{StreamPrefix: prefix}, nil)
}

// handleStreamReplay serves GET /coord/v1/monitoring/streams/{streamPrefix}/replay?until=:
// the stream as it was right after event until (the log folded up to it;
// the latest state without until), as the group replay does for a group.
func (h *historyAPI) handleStreamReplay(w http.ResponseWriter, r *http.Request) {
	prefix, ok := h.streamPrefixOf(w, r)
	if !ok {
		return
	}
	st, ok := h.replayState(w, r)
	if !ok {
		return
	}
	stream, groups := st.StreamWithGroups(prefix)
	if (stream == nil || !stream.Metadata) && len(groups) == 0 {
		h.writeError(w, r, commands.ErrStreamNotFound.WithMessage("stream "+prefix+" had neither metadata nor groups "+replayedAt(r, st)))
		return
	}
	writeJSON(w, http.StatusOK, wire.StreamReplay{AsOf: st.LastID(), Stream: projection.WireStream(projection.ViewStream(prefix, stream, groups))})
}
