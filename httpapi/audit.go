package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi/guard"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// historyAPI serves the audit history (the log's events, of every group, a
// group or a stream) and replays (the state as of an event).
type historyAPI struct {
	kit
	// replays holds a slot per replay in flight.
	replays chan struct{}
	// stateAt folds the log up to an event (Config.StateAt, or the Reader's).
	stateAt func(ctx context.Context, until string) (*projection.State, error)
}

func (s *Server) registerAuditRoutes(h *historyAPI) {
	s.router.HandleFunc("/coord/v1/monitoring/events", h.handleAllEvents).Methods(http.MethodGet)
	s.router.HandleFunc(monitoringGroupPath+"/events", h.handleGroupEvents).Methods(http.MethodGet)
	s.router.HandleFunc(monitoringGroupPath+"/replay", h.handleReplay).Methods(http.MethodGet)
}

func toAudit(rec events.Record) wire.AuditEvent {
	a := wire.AuditEvent{ID: rec.ID, Type: rec.Type, Time: rec.Time.UTC(), Actor: rec.Actor, RequestID: rec.RequestID, StreamPrefix: rec.StreamPrefix, ConsumerGroup: rec.ConsumerGroup, Payload: rec.Event}
	if q, ok := rec.Event.(*events.Quarantined); ok {
		a.Payload, a.Unreadable = nil, q.Reason
	}
	return a
}

// decodeAudit decodes an entry for the audit history: an entry whose event
// cannot be read but whose envelope names its prefix is listed as
// unreadable (one bad entry does not hide the rest of the history).
func decodeAudit(e events.Entry) (events.Record, error) {
	rec, err := events.Decode(e.ID, e.Data)
	if err != nil {
		if q, ok := events.Confine(err); ok {
			return q, nil
		}
	}
	return rec, err
}

func (h *historyAPI) pageParams(w http.ResponseWriter, r *http.Request) (string, int, bool) {
	after := r.URL.Query().Get("after")
	if after == "" {
		after = events.ZeroID
	}
	if _, err := events.ParseID(after); err != nil {
		h.badRequest(w, r, "after: must be a stream id like 1700000000000-0")
		return "", 0, false
	}
	if msg := exclusiveBoundProblem(after, true); msg != "" {
		h.badRequest(w, r, "after: "+msg)
		return "", 0, false
	}
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		l, err := strconv.Atoi(v)
		if err != nil || l < 1 || l > 1000 {
			h.badRequest(w, r, "limit: must be an integer between 1 and 1000")
			return "", 0, false
		}
		limit = l
	}
	return after, limit, true
}

// decodeEntries answers a page of entries; next, when not empty, is the
// nextAfter of a full page.
func (h *historyAPI) decodeEntries(w http.ResponseWriter, r *http.Request, entries []events.Entry, next string) {
	page := wire.AuditPage{Events: []wire.AuditEvent{}}
	for _, e := range entries {
		rec, err := decodeAudit(e)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		page.Events = append(page.Events, toAudit(rec))
	}
	page.NextAfter = nonEmpty(next)
	writeJSON(w, http.StatusOK, page)
}

// maxScopedScan bounds the log entries one page of the whole log reads for a
// principal scoped to some prefixes, whose events may be far apart: the page
// then ends early, with nextAfter where the scan stopped.
const maxScopedScan = 10000

// handleAllEvents serves GET /coord/v1/monitoring/events?after=&limit=: the whole
// log, paged by event id; on a trimmed log (--trim-log) the archived resharding
// and admin events before its first entry, then the log. A principal scoped
// to some prefixes sees only the events of their groups.
func (h *historyAPI) handleAllEvents(w http.ResponseWriter, r *http.Request) {
	after, limit, ok := h.pageParams(w, r)
	if !ok {
		return
	}
	p := guard.PrincipalOf(r)
	if !p.Scoped() {
		entries, err := h.read.HistoryLog().Read(r.Context(), after, limit)
		if err != nil {
			h.writeError(w, r, logUnavailable(err))
			return
		}
		next := ""
		if len(entries) == limit {
			next = entries[len(entries)-1].ID
		}
		h.decodeEntries(w, r, entries, next)
		return
	}
	page := wire.AuditPage{Events: []wire.AuditEvent{}}
	cursor, scanned := after, 0
	for {
		entries, err := h.read.HistoryLog().Read(r.Context(), cursor, limit)
		if err != nil {
			h.writeError(w, r, logUnavailable(err))
			return
		}
		full := false
		for _, e := range entries {
			rec, err := decodeAudit(e)
			if err != nil {
				h.writeError(w, r, err)
				return
			}
			cursor = e.ID
			scanned++
			if rec.StreamPrefix != "" && p.Covers(rec.StreamPrefix) {
				page.Events = append(page.Events, toAudit(rec))
				if full = len(page.Events) == limit; full {
					break
				}
			}
		}
		if full || (len(entries) == limit && scanned >= maxScopedScan) {
			next := cursor
			page.NextAfter = &next
		} else if len(entries) == limit {
			continue // neither the page nor the scan is full: read on
		}
		break // full, scanned enough, or the end of the log
	}
	writeJSON(w, http.StatusOK, page)
}

// replayedAt says where the request's replay stopped, for a not-found
// answer: "at <until> (the log up to it ends at <last id of st>)".
func replayedAt(r *http.Request, st *projection.State) string {
	at := r.URL.Query().Get("until")
	if at == "" {
		at = st.LastID()
	}
	return "at " + at + " (the log up to it ends at " + st.LastID() + ")"
}

// replayState is the state after the request's until (the latest without
// it), folded from the nearest kept snapshot; false when it answered. At
// most MaxConcurrentReplays run at once (429 beyond).
func (h *historyAPI) replayState(w http.ResponseWriter, r *http.Request) (*projection.State, bool) {
	select {
	case h.replays <- struct{}{}:
		defer func() { <-h.replays }()
	default:
		w.Header().Set("Retry-After", "1")
		h.writeError(w, r, errTooManyReplays)
		return nil, false
	}
	until := r.URL.Query().Get("until")
	if until == "" {
		until = h.read.State().LastID()
	}
	if _, err := events.ParseID(until); err != nil {
		h.badRequest(w, r, "until: must be a stream id like 1700000000000-0")
		return nil, false
	}
	st, err := h.stateAt(r.Context(), until)
	if err != nil {
		var ce *commands.Error
		var de *events.DecodeError
		if !errors.As(err, &ce) && !errors.As(err, &de) {
			err = logUnavailable(err) // Redis failed the fold
		}
		h.writeError(w, r, err)
		return nil, false
	}
	return st, true
}

// handleGroupEvents serves GET /coord/v1/monitoring/streams/{p}/groups/{g}/events:
// a group's audit history (including refused commands), also after deletion. On
// a trimmed log the membership events before the trim point are gone; the page
// skips them (nextAfter still pages on by the history index).
func (h *historyAPI) handleGroupEvents(w http.ResponseWriter, r *http.Request) {
	k, ok := h.groupKey(w, r)
	if !ok {
		return
	}
	h.serveHistory(w, r, k, func() bool {
		_, exists := h.read.State().Group(k)
		return exists
	})
}

// serveHistory answers the request's page of k's history. exists, when not
// nil, is asked on an empty first page whether k exists (404 GROUP_NOT_FOUND
// when not).
func (h *historyAPI) serveHistory(w http.ResponseWriter, r *http.Request, k projection.GroupKey, exists func() bool) {
	after, limit, ok := h.pageParams(w, r)
	if !ok {
		return
	}
	entries, next, err := h.read.GroupHistory(r.Context(), k, after, limit)
	if err != nil {
		h.writeError(w, r, logUnavailable(err))
		return
	}
	if exists != nil && len(entries) == 0 && next == "" && after == events.ZeroID && !exists() {
		h.writeError(w, r, commands.ErrGroupNotFound)
		return
	}
	h.decodeEntries(w, r, entries, next)
}

// handleReplay serves GET /coord/v1/monitoring/streams/{p}/groups/{g}/replay?until=<id>:
// the log folded up to and including that event (on a trimmed log, from the
// newest kept snapshot before it; 422 LOG_TRIMMED before the oldest one). A
// fold reads the log from its start (or a snapshot), so at most
// MaxConcurrentReplays run at once; more answer 429 with Retry-After: 1.
func (h *historyAPI) handleReplay(w http.ResponseWriter, r *http.Request) {
	k, ok := h.groupKey(w, r)
	if !ok {
		return
	}
	st, ok := h.replayState(w, r)
	if !ok {
		return
	}
	g, found := st.Group(k)
	if !found {
		h.writeError(w, r, commands.ErrGroupNotFound.WithMessage("group did not exist "+replayedAt(r, st)))
		return
	}
	resp := wire.GroupReplay{Group: GroupOf(g), AsOf: st.LastID(), Members: MembersOf(g, nil, h.read.Config().RebalanceTimeout),
		Assignments: projection.WireAssignments(projection.ViewAssignments(g)), Migrations: []wire.Resharding{}}
	for _, m := range g.Reshardings {
		resp.Migrations = append(resp.Migrations, projection.WireResharding(projection.ViewResharding(g, m)))
	}
	writeJSON(w, http.StatusOK, resp)
}
