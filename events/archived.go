package events

import (
	"context"
	"time"
)

// WithArchive is the readable history of a log whose head was trimmed: the
// entries of archive (kept with their log ids when they were trimmed) that lie
// below the log's first entry, then the log itself. An entry copied to the
// archive but not yet trimmed from the log is read once, from the log.
// Append, Tail and LastID are the log's.
func WithArchive(log, archive Log) Log { return &archived{log: log, archive: archive} }

type archived struct {
	log, archive Log
}

func (a *archived) Append(ctx context.Context, after string, batch [][]byte) ([]string, error) {
	return a.log.Append(ctx, after, batch)
}

// AppendIndexed is the log's (Indexed), or Append without the index.
func (a *archived) AppendIndexed(ctx context.Context, after string, batch []Draft) ([]string, error) {
	if ix, ok := a.log.(Indexed); ok {
		return ix.AppendIndexed(ctx, after, batch)
	}
	data := make([][]byte, len(batch))
	for i, d := range batch {
		data[i] = d.Data
	}
	return a.log.Append(ctx, after, data)
}

// History is the log's index: it keeps the ids of archived entries too.
func (a *archived) History(ctx context.Context, index, after string, limit int) ([]string, error) {
	if ix, ok := a.log.(Indexed); ok {
		return ix.History(ctx, index, after, limit)
	}
	return nil, nil
}

// Read reads the log first: every archived entry between after and the log's
// first entry after it was trimmed from the log by then, so a trim running
// concurrently can hide nothing from the page.
func (a *archived) Read(ctx context.Context, after string, count int) ([]Entry, error) {
	tail, err := a.log.Read(ctx, after, count)
	if err != nil {
		return nil, err
	}
	head, err := a.archive.Read(ctx, after, count)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(head)+len(tail))
	for _, e := range head {
		if len(tail) > 0 {
			if c, err := CompareIDs(e.ID, tail[0].ID); err != nil || c >= 0 {
				break
			}
		}
		out = append(out, e)
	}
	out = append(out, tail...)
	if count > 0 && len(out) > count {
		out = out[:count]
	}
	return out, nil
}

func (a *archived) Tail(ctx context.Context, after string, count int, block time.Duration) ([]Entry, error) {
	return a.log.Tail(ctx, after, count, block)
}

// Get returns the entries with the given ids from the log, or from the archive
// for those the log no longer holds, in the order asked.
func (a *archived) Get(ctx context.Context, ids []string) ([]Entry, error) {
	found, err := a.log.Get(ctx, ids)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]Entry, len(ids))
	for _, e := range found {
		byID[e.ID] = e
	}
	var missing []string
	for _, id := range ids {
		if _, ok := byID[canonicalID(id)]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		old, err := a.archive.Get(ctx, missing)
		if err != nil {
			return nil, err
		}
		for _, e := range old {
			byID[e.ID] = e
		}
	}
	out := make([]Entry, 0, len(byID))
	for _, id := range ids {
		if e, ok := byID[canonicalID(id)]; ok {
			out = append(out, e)
		}
	}
	return out, nil
}

func (a *archived) LastID(ctx context.Context) (string, error) { return a.log.LastID(ctx) }

// Len counts the log's entries and the archive's (an entry archived but not yet
// trimmed counts twice).
func (a *archived) Len(ctx context.Context) (int64, error) {
	n, err := a.log.Len(ctx)
	if err != nil {
		return 0, err
	}
	m, err := a.archive.Len(ctx)
	return n + m, err
}

// canonicalID is id as logs return it ("5" is "5-0"); a malformed id is kept
// as it is (Get of the log already refused it).
func canonicalID(id string) string {
	p, err := ParseID(id)
	if err != nil {
		return id
	}
	return p.String()
}
