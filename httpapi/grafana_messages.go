package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// Grafana's message table pages one shard or every shard merged by record id,
// and can jump to the last pages; see handleMessages.

// handleMessages serves GET /coord/v1/monitoring/grafana/messages: a page of
// one shard (shardIndex, default 0) or of every shard merged by record id
// (shardIndex all, .*, __all or $__all), or the records with one id
// (recordId, searched on every shard; cursor is then ignored). Cursors: a record
// id on one shard, "all:<i>=<id>,..." across shards, and "__rsc_last__" or
// "__rsc_tail__:<n>" for the last page or the n-th page before it. [] when
// streamPrefix or consumerGroup is blank. A request reads at most
// MaxEntriesPerRequest entries from Redis: a merged page holds at most
// MaxEntriesPerRequest/shards-1 rows (its pageLimit says so), and a tail page
// deeper than that allows is a 400.
func (a *grafanaAPI) handleMessages(w http.ResponseWriter, r *http.Request) {
	g, ok := a.oneGroup(w, r)
	if !ok || g == nil {
		return
	}
	q := r.URL.Query()
	direction, limit, err := parsePaging(q)
	if err != nil {
		a.s.writeError(w, r, err)
		return
	}
	recordID := strings.TrimSpace(q.Get("recordId"))
	selector := strings.TrimSpace(q.Get("shardIndex"))
	switch {
	case recordID != "":
		selector = "all"
	case selector == "":
		selector = "0"
	}
	shards, err := selectShards(g, selector)
	if err != nil {
		a.s.writeError(w, r, err)
		return
	}
	cursor := strings.TrimSpace(q.Get("cursor"))
	if recordID == "" {
		if err := checkGrafanaCursor(cursor, g.Key, shards, direction == "FORWARD"); err != nil {
			a.s.writeError(w, r, err)
			return
		}
	}
	limit, err = pageLimit(limit, len(shards))
	if err != nil {
		a.s.writeError(w, r, err)
		return
	}
	pr := pageRead{s: a.s, k: g.Key, shards: shards, forward: direction == "FORWARD", limit: limit, budget: &readBudget{left: MaxEntriesPerRequest}}
	var recs []wire.StreamRecord
	var next *string
	var total int64
	if len(shards) > 0 {
		if total, err = a.s.totalLength(r.Context(), g.Key, shards); err == nil {
			recs, next, err = pr.read(r.Context(), recordID, cursor, total)
		}
	}
	if err != nil {
		a.s.writeError(w, r, err)
		return
	}
	out := make([]wire.GrafanaMessageRow, 0, len(recs))
	for _, rec := range recs {
		out = append(out, wire.GrafanaMessageRow{
			StreamPrefix: rec.StreamPrefix, ConsumerGroup: rec.ConsumerGroup, ShardIndex: rec.Shard.ShardIndex,
			ShardSelector: selector, ShardLabel: shardLabel(rec.Shard.ShardIndex), StreamKey: rec.StreamKey,
			RecordID: rec.RecordID, Payload: rec.Payload, FieldsJSON: fieldsJSON(rec.Fields),
			PageDirection: direction, PageLimit: limit, PageNextCursor: next, PageTotalMessages: total,
			RecordTimestampMs: rec.RecordTimestampMs, RecordTime: rec.RecordTime,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// selectShards resolves a shardIndex selector: one index or every shard.
func selectShards(g *projection.Group, selector string) ([]int, error) {
	switch {
	case strings.EqualFold(selector, "all"), selector == ".*", selector == "__all", selector == "$__all":
		all := make([]int, shardSpan(g))
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	idx, err := parseShardIndex(g, selector)
	if err != nil {
		return nil, err
	}
	return []int{idx}, nil
}

// totalLength is the sum of the shards' stream lengths.
func (s *Server) totalLength(ctx context.Context, k projection.GroupKey, shards []int) (int64, error) {
	if s.streams == nil {
		return 0, commands.ErrRedisNotConfigured
	}
	offs, err := s.streams.Offsets(ctx, k.StreamPrefix, k.ConsumerGroup, shards)
	if err != nil {
		return 0, streamsUnavailable(err)
	}
	var total int64
	for _, o := range offs {
		total += o.StreamLength
	}
	return total, nil
}

func fieldsJSON(f map[string]string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if f == nil {
		f = map[string]string{}
	}
	_ = enc.Encode(f)
	return strings.TrimSuffix(b.String(), "\n")
}

// Cursors besides a record id. Tail cursors page from the end: __rsc_last__ is
// the last page, and __rsc_tail__:<n> the n-th page before it, pages being cut
// from the start of the selection in the page direction. A merged cursor is
// "all:" followed by <shard>=<last id read>, comma-separated.
const (
	lastPageCursor   = "__rsc_last__"
	tailCursorPrefix = "__rsc_tail__:"
	mergedPrefix     = "all:"
)

// pageRead reads a page of messages of one or more shards of a group.
type pageRead struct {
	s       *Server
	k       projection.GroupKey
	shards  []int
	forward bool
	limit   int
	budget  *readBudget
}

// readBudget is what is left of a request's MaxEntriesPerRequest.
type readBudget struct{ left int }

// page reads one shard through readPage, charging limit+1 entries (the page
// and the look-ahead that tells whether more follow) to the budget.
func (p pageRead) page(ctx context.Context, idx int, forward bool, cursor string, limit int) ([]wire.StreamRecord, *string, error) {
	if p.budget.left < limit+1 {
		return nil, nil, errReadBudget
	}
	p.budget.left -= limit + 1
	return p.s.readPage(ctx, p.k, idx, forward, cursor, limit)
}

// pageLimit is the page size for limit rows over n shards: a merged page
// reads a page of every shard, so it holds at most MaxEntriesPerRequest/n-1
// rows (a page plus its look-ahead per shard).
func pageLimit(limit, n int) (int, error) {
	if n <= 1 {
		return min(limit, MaxEntriesPerRequest-1), nil
	}
	per := MaxEntriesPerRequest/n - 1
	if per < 1 {
		return 0, commands.ErrInvalid.WithMessage("cannot merge " + strconv.Itoa(n) + " shards in one page (at most " + strconv.Itoa(MaxEntriesPerRequest/2) + "); select one shard")
	}
	return min(limit, per), nil
}

// checkGrafanaCursor checks a cursor's syntax before anything is read: a
// record id, a tail cursor, or (over several shards) a merged cursor.
func checkGrafanaCursor(cursor string, k projection.GroupKey, shards []int, forward bool) error {
	if cursor == "" {
		return nil
	}
	if validStreamID(cursor) {
		if msg := exclusiveBoundProblem(cursor, forward); msg != "" {
			return commands.ErrInvalid.WithMessage("cursor: " + msg)
		}
		return nil
	}
	if _, ok := parseTailCursor(cursor); ok {
		return nil
	}
	if len(shards) <= 1 {
		key := "the selection"
		if len(shards) == 1 {
			key = routing.StreamKey(k.StreamPrefix, shards[0])
		}
		return badCursor(cursor, key, "a record id <ms>-<seq> or <ms>, "+lastPageCursor+" or "+tailCursorPrefix+"<n>")
	}
	after, ok := parseMergedCursor(cursor)
	if !ok {
		return badCursor(cursor, "the merged shards", "a record id, "+mergedPrefix+"<shard>=<id>,..., "+lastPageCursor+" or "+tailCursorPrefix+"<n>")
	}
	for i, id := range after {
		if msg := exclusiveBoundProblem(id, forward); msg != "" {
			return commands.ErrInvalid.WithMessage("cursor of shard " + strconv.Itoa(i) + ": " + msg)
		}
	}
	return nil
}

// read answers a recordId search, a tail page, a one-shard page or a merged
// page; total is the selection's length (tail pages are counted from it).
func (p pageRead) read(ctx context.Context, recordID, cursor string, total int64) ([]wire.StreamRecord, *string, error) {
	if recordID != "" {
		recs, err := p.search(ctx, recordID)
		return recs, nil, err
	}
	if distance, ok := parseTailCursor(cursor); ok {
		return p.tail(ctx, total, distance)
	}
	if len(p.shards) == 1 {
		return p.page(ctx, p.shards[0], p.forward, cursor, p.limit)
	}
	return p.merged(ctx, cursor)
}

// search finds the records with exactly this id, on every shard.
func (p pageRead) search(ctx context.Context, recordID string) ([]wire.StreamRecord, error) {
	ms, seq, ok := parseStreamID(recordID)
	if !ok {
		return nil, commands.ErrInvalid.WithMessage("recordId must be a stream record id <ms>-<seq>, got " + strconv.Quote(recordID))
	}
	out := []wire.StreamRecord{}
	if ms == 0 && seq == 0 {
		return out, nil // no entry has id 0-0
	}
	before := idBefore(ms, seq)
	for _, idx := range p.shards {
		recs, _, err := p.page(ctx, idx, true, before, 1)
		if err != nil {
			return nil, err
		}
		if len(recs) == 1 && recs[0].RecordID == recordID {
			out = append(out, recs[0])
		}
	}
	return out, nil
}

// merged reads the next limit records across shards, ordered by id (then shard
// index); the cursor keeps the last id read of every shard.
func (p pageRead) merged(ctx context.Context, cursor string) ([]wire.StreamRecord, *string, error) {
	after, _ := parseMergedCursor(cursor)
	var all []wire.StreamRecord
	more := false
	for _, idx := range p.shards {
		recs, next, err := p.page(ctx, idx, p.forward, after[idx], p.limit)
		if err != nil {
			return nil, nil, err
		}
		all = append(all, recs...)
		more = more || next != nil
	}
	sortRecords(all, p.forward)
	more = more || len(all) > p.limit
	page := all[:min(len(all), p.limit)]
	if !more || len(page) == 0 {
		return page, nil, nil
	}
	for _, rec := range page {
		after[rec.Shard.ShardIndex] = rec.RecordID
	}
	next := encodeMergedCursor(after)
	return page, &next, nil
}

// tail reads the page distance pages before the last one.
func (p pageRead) tail(ctx context.Context, total int64, distance int) ([]wire.StreamRecord, *string, error) {
	win := tailWindow(total, p.limit, distance)
	if win.size == 0 {
		return []wire.StreamRecord{}, nil, nil
	}
	if len(p.shards)*(win.read+1) > p.budget.left {
		return nil, nil, commands.ErrInvalid.WithMessage("this tail page lies deeper than " + strconv.Itoa(MaxEntriesPerRequest) + " entries read from Redis reach; page from the start with cursors, or select one shard")
	}
	var all []wire.StreamRecord
	for _, idx := range p.shards {
		recs, _, err := p.page(ctx, idx, !p.forward, "", win.read)
		if err != nil {
			return nil, nil, err
		}
		all = append(all, recs...)
	}
	sortRecords(all, !p.forward)
	all = all[:min(len(all), win.read)]
	page := append([]wire.StreamRecord{}, all[min(len(all), win.skip):]...)
	page = page[:min(len(page), win.size)]
	sortRecords(page, p.forward)
	var next *string
	if win.distance > 0 {
		c := tailCursorPrefix + strconv.Itoa(win.distance-1)
		next = &c
	}
	return page, next, nil
}

// tailPage is where a page counted from the last one lies, read from the end:
// skip records, then size records; read = skip + size.
type tailPage struct {
	distance, skip, size, read int
}

func tailWindow(total int64, limit, distance int) tailPage {
	if total <= 0 {
		return tailPage{}
	}
	pages := int((total + int64(limit) - 1) / int64(limit))
	last := pages - 1
	target := max(last-max(distance, 0), 0)
	lastSize := int(total % int64(limit))
	if lastSize == 0 {
		lastSize = limit
	}
	w := tailPage{distance: last - target, size: limit}
	if target == last {
		w.size = lastSize
	} else {
		w.skip = lastSize + (last-target-1)*limit
	}
	w.read = w.skip + w.size
	return w
}

func parseTailCursor(cursor string) (int, bool) {
	if cursor == lastPageCursor {
		return 0, true
	}
	rest, ok := strings.CutPrefix(cursor, tailCursorPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	if err != nil {
		return 0, false
	}
	return max(n, 0), true
}

// parseMergedCursor reads "all:<i>=<id>,..." (ok false when it is not one);
// anything else, a record id included, starts every shard from its beginning.
func parseMergedCursor(cursor string) (map[int]string, bool) {
	out := map[int]string{}
	rest, ok := strings.CutPrefix(cursor, mergedPrefix)
	if !ok {
		return out, false
	}
	for _, tok := range strings.Split(rest, ",") {
		i, id, ok := strings.Cut(tok, "=")
		idx, err := strconv.Atoi(strings.TrimSpace(i))
		if !ok || err != nil || idx < 0 || !validStreamID(id) {
			return map[int]string{}, false
		}
		out[idx] = id
	}
	return out, true
}

func encodeMergedCursor(after map[int]string) string {
	idx := make([]int, 0, len(after))
	for i := range after {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	parts := make([]string, len(idx))
	for n, i := range idx {
		parts[n] = strconv.Itoa(i) + "=" + after[i]
	}
	return mergedPrefix + strings.Join(parts, ",")
}

// sortRecords orders records by id (ascending when forward, else descending),
// then by shard index.
func sortRecords(recs []wire.StreamRecord, forward bool) {
	sort.SliceStable(recs, func(i, j int) bool {
		c := compareIDs(recs[i].RecordID, recs[j].RecordID)
		if !forward {
			c = -c
		}
		if c != 0 {
			return c < 0
		}
		return recs[i].Shard.ShardIndex < recs[j].Shard.ShardIndex
	})
}

// compareIDs orders stream ids "<ms>-<seq>"; a part that does not parse counts as 0.
func compareIDs(a, b string) int {
	am, as, _ := parseStreamID(a)
	bm, bs, _ := parseStreamID(b)
	if c := cmp.Compare(am, bm); c != 0 {
		return c
	}
	return cmp.Compare(as, bs)
}

func parseStreamID(id string) (ms, seq uint64, ok bool) {
	m, s, found := strings.Cut(id, "-")
	ms, err1 := strconv.ParseUint(m, 10, 64)
	seq, err2 := strconv.ParseUint(s, 10, 64)
	return ms, seq, found && err1 == nil && err2 == nil
}

// idBefore is the greatest stream id below <ms>-<seq> (not 0-0), so that
// reading after it (exclusive) starts at that id itself.
func idBefore(ms, seq uint64) string {
	if seq > 0 {
		return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq-1, 10)
	}
	return strconv.FormatUint(ms-1, 10) + "-" + strconv.FormatUint(math.MaxUint64, 10)
}
