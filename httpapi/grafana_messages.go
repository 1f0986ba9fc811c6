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
	row := func(rec wire.StreamRecord, next *string, cut bool) wire.GrafanaMessageRow {
		return wire.GrafanaMessageRow{
			StreamPrefix: rec.StreamPrefix, ConsumerGroup: rec.ConsumerGroup, ShardIndex: rec.Shard.ShardIndex,
			ShardSelector: selector, ShardLabel: shardLabel(rec.Shard.ShardIndex), StreamKey: rec.StreamKey,
			RecordID: rec.RecordID, Payload: rec.Payload, FieldsJSON: fieldsJSON(rec.Fields),
			PageDirection: direction, PageLimit: limit, PageNextCursor: next,
			RecordTimestampMs: rec.RecordTimestampMs, RecordTime: rec.RecordTime, FieldsTruncated: rec.FieldsTruncated, PageTruncated: cut,
		}
	}
	// Rows are fitted to the byte budget before the cursor is known: each is
	// measured with a cursor as long as the longest this selection can have.
	longest := strings.Repeat("x", 64+48*len(shards))
	fit := func(recs []wire.StreamRecord) int {
		return fitJSON(len(recs), MaxMessagesAnswerBytes-answerEnvelopeBytes, func(i int) any { return row(recs[i], &longest, true) })
	}
	release, ok := a.s.messagesSlot(w, r)
	if !ok {
		return
	}
	defer release()
	pr := pageRead{s: a.s, k: g.Key, shards: shards, forward: direction == "FORWARD", limit: limit, budget: &readBudget{left: MaxEntriesPerRequest}, fit: fit}
	var recs []wire.StreamRecord
	var next *string
	var total int64
	cut := false
	if len(shards) > 0 {
		if total, err = a.s.totalLength(r.Context(), g.Key, shards); err == nil {
			recs, next, cut, err = pr.read(r.Context(), recordID, cursor, total)
		}
	}
	if err != nil {
		a.s.writeError(w, r, err)
		return
	}
	out := make([]wire.GrafanaMessageRow, 0, len(recs))
	for _, rec := range recs {
		rw := row(rec, next, cut)
		rw.PageTotalMessages = total
		out = append(out, rw)
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
func (h *monitoringAPI) totalLength(ctx context.Context, k projection.GroupKey, shards []int) (int64, error) {
	if h.streams == nil {
		return 0, commands.ErrRedisNotConfigured
	}
	offs, err := h.streams.Offsets(ctx, k.StreamPrefix, k.ConsumerGroup, shards)
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

// pageRead reads a page of messages of one or more shards of a group, within
// the request's entry budget and the answer's byte budget.
type pageRead struct {
	s       *monitoringAPI
	k       projection.GroupKey
	shards  []int
	forward bool
	limit   int
	budget  *readBudget
	// fit is how many of a page's records, in order, its answer can hold.
	fit func([]wire.StreamRecord) int
}

// readBudget is what is left of a request's MaxEntriesPerRequest.
type readBudget struct{ left int }

// page reads one shard through readPage, charging the entries it may read
// (the limit, and the look-ahead when it peeks) to the budget.
func (p pageRead) page(ctx context.Context, idx int, q MessagesQuery) (StreamPage, error) {
	n := q.Limit
	if q.Peek {
		n++
	}
	if p.budget.left < n {
		return StreamPage{}, errReadBudget
	}
	p.budget.left -= n
	return p.s.readPage(ctx, p.k, idx, q)
}

// shareOf is each of n shards' share of the answer's byte budget, and the
// record bound within it (a merged page over many shards shows shorter
// records rather than more bytes).
func shareOf(n int) (maxBytes, maxRecord int) {
	maxBytes = MaxMessagesAnswerBytes / max(n, 1)
	return maxBytes, min(MaxRecordBytes, maxBytes)
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
// cut says the page holds fewer records than it would have without the byte
// budget.
func (p pageRead) read(ctx context.Context, recordID, cursor string, total int64) (recs []wire.StreamRecord, next *string, cut bool, err error) {
	if recordID != "" {
		recs, cut, err := p.search(ctx, recordID)
		return recs, nil, cut, err
	}
	if distance, ok := parseTailCursor(cursor); ok {
		return p.tail(ctx, total, distance)
	}
	if len(p.shards) == 1 {
		return p.one(ctx, cursor)
	}
	return p.merged(ctx, cursor)
}

// one reads a page of one shard.
func (p pageRead) one(ctx context.Context, cursor string) ([]wire.StreamRecord, *string, bool, error) {
	pg, err := p.page(ctx, p.shards[0], answerQuery(p.forward, cursor, p.limit))
	if err != nil {
		return nil, nil, false, err
	}
	recs := pg.Records
	n := p.fit(recs)
	cut := pg.BytesCut || n < len(recs)
	recs = recs[:n]
	if (!pg.More && !cut) || len(recs) == 0 {
		return recs, nil, cut, nil
	}
	id := recs[len(recs)-1].RecordID
	return recs, &id, cut, nil
}

// search finds the records with exactly this id, on every shard.
func (p pageRead) search(ctx context.Context, recordID string) ([]wire.StreamRecord, bool, error) {
	ms, seq, ok := parseStreamID(recordID)
	if !ok {
		return nil, false, commands.ErrInvalid.WithMessage("recordId must be a stream record id <ms>-<seq>, got " + strconv.Quote(recordID))
	}
	out := []wire.StreamRecord{}
	if ms == 0 && seq == 0 {
		return out, false, nil // no entry has id 0-0
	}
	before := idBefore(ms, seq)
	maxBytes, maxRecord := shareOf(len(p.shards))
	for _, idx := range p.shards {
		pg, err := p.page(ctx, idx, MessagesQuery{Forward: true, Cursor: before, Limit: 1, MaxBytes: maxBytes, MaxRecordBytes: maxRecord})
		if err != nil {
			return nil, false, err
		}
		if len(pg.Records) == 1 && pg.Records[0].RecordID == recordID {
			out = append(out, pg.Records[0])
		}
	}
	n := p.fit(out)
	return out[:n], n < len(out), nil
}

// merged reads the next limit records across shards, ordered by id (then shard
// index); the cursor keeps the last id read of every shard. Each shard reads
// its share of the byte budget; a shard whose share ran out stops the merged
// order at its last record read, since what follows it there was not read.
func (p pageRead) merged(ctx context.Context, cursor string) ([]wire.StreamRecord, *string, bool, error) {
	after, _ := parseMergedCursor(cursor)
	maxBytes, maxRecord := shareOf(len(p.shards))
	var all []wire.StreamRecord
	more, stopped := false, ""
	for _, idx := range p.shards {
		pg, err := p.page(ctx, idx, MessagesQuery{Forward: p.forward, Cursor: after[idx], Limit: p.limit, Peek: true, MaxBytes: maxBytes, MaxRecordBytes: maxRecord})
		if err != nil {
			return nil, nil, false, err
		}
		all = append(all, pg.Records...)
		more = more || pg.More
		if pg.BytesCut && len(pg.Records) > 0 {
			if last := pg.Records[len(pg.Records)-1].RecordID; stopped == "" || p.beyond(stopped, last) {
				stopped = last
			}
		}
	}
	sortRecords(all, p.forward)
	valid := all
	if stopped != "" {
		n := 0
		for n < len(valid) && !p.beyond(valid[n].RecordID, stopped) {
			n++
		}
		valid = valid[:n]
	}
	page := valid[:min(len(valid), p.limit)]
	cut := len(page) < min(len(all), p.limit)
	if n := p.fit(page); n < len(page) {
		page, cut = page[:n], true
	}
	more = more || len(all) > len(page)
	if !more || len(page) == 0 {
		return page, nil, cut, nil
	}
	for _, rec := range page {
		after[rec.Shard.ShardIndex] = rec.RecordID
	}
	next := encodeMergedCursor(after)
	return page, &next, cut, nil
}

// beyond reports whether id a comes after id b in the page direction.
func (p pageRead) beyond(a, b string) bool {
	c := compareIDs(a, b)
	if !p.forward {
		c = -c
	}
	return c > 0
}

// tail reads the page distance pages before the last one: the ids of the
// window from the end first (no fields), then the page's records, a run of
// consecutive entries per shard, within the byte budget.
func (p pageRead) tail(ctx context.Context, total int64, distance int) ([]wire.StreamRecord, *string, bool, error) {
	win := tailWindow(total, p.limit, distance)
	if win.size == 0 {
		return []wire.StreamRecord{}, nil, false, nil
	}
	if len(p.shards)*win.read+win.size > p.budget.left {
		return nil, nil, false, commands.ErrInvalid.WithMessage("this tail page lies deeper than " + strconv.Itoa(MaxEntriesPerRequest) + " entries read from Redis reach; page from the start with cursors, or select one shard")
	}
	var ids []wire.StreamRecord
	for _, idx := range p.shards {
		pg, err := p.page(ctx, idx, MessagesQuery{Forward: !p.forward, Limit: win.read, MaxBytes: math.MaxInt32, MaxRecordBytes: 0})
		if err != nil {
			return nil, nil, false, err
		}
		ids = append(ids, pg.Records...)
	}
	sortRecords(ids, !p.forward)
	ids = ids[:min(len(ids), win.read)]
	window := append([]wire.StreamRecord{}, ids[min(len(ids), win.skip):]...)
	window = window[:min(len(window), win.size)]
	sortRecords(window, p.forward)
	runs := map[int][]string{} // per shard, its ids in the page direction
	for _, rec := range window {
		runs[rec.Shard.ShardIndex] = append(runs[rec.Shard.ShardIndex], rec.RecordID)
	}
	maxBytes, maxRecord := shareOf(len(runs))
	var page []wire.StreamRecord
	for _, idx := range p.shards {
		run := runs[idx]
		if len(run) == 0 {
			continue
		}
		pg, err := p.page(ctx, idx, MessagesQuery{Forward: p.forward, Cursor: idJustBefore(run[0], p.forward), Limit: len(run), MaxBytes: maxBytes, MaxRecordBytes: maxRecord})
		if err != nil {
			return nil, nil, false, err
		}
		want := map[string]bool{}
		for _, id := range run {
			want[id] = true
		}
		for _, rec := range pg.Records {
			if want[rec.RecordID] {
				page = append(page, rec)
			}
		}
	}
	sortRecords(page, p.forward)
	cut := len(page) < len(window)
	if n := p.fit(page); n < len(page) {
		page, cut = page[:n], true
	}
	var next *string
	if win.distance > 0 {
		c := tailCursorPrefix + strconv.Itoa(win.distance-1)
		next = &c
	}
	return page, next, cut, nil
}

// idJustBefore is the exclusive cursor from which a read in the direction
// starts at id itself.
func idJustBefore(id string, forward bool) string {
	ms, seq, _ := parseStreamID(id)
	switch {
	case forward:
		return idBefore(ms, seq)
	case seq < math.MaxUint64:
		return strconv.FormatUint(ms, 10) + "-" + strconv.FormatUint(seq+1, 10)
	case ms < math.MaxUint64:
		return strconv.FormatUint(ms+1, 10) + "-0"
	}
	return "" // the greatest id: reading backward from the end starts there
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
