package projection

import (
	"strings"
	"time"
)

// MaxPreviousLayouts bounds the previous layouts a group (or a stream) keeps:
// the fold drops the oldest beyond it, so the state and its snapshots do not
// grow with the number of reshardings. Producers that publish idempotently
// refuse a routing answer listing more (client/producer).
const MaxPreviousLayouts = 64

// Layout is a shard layout a group (or a stream) had before its current one:
// the version at which it became current, its shard count, the version the
// change away from it took the group (or the stream) to, which is the fence
// that change raised on the layout's shards that lost keys, and when that
// change was recorded.
type Layout struct {
	MetadataVersion int64     `msgpack:"mv"`
	ShardCount      int       `msgpack:"shards"`
	Fence           int64     `msgpack:"fence"`
	EndedAt         time.Time `msgpack:"endedAt"`
}

// layoutChanged records, in a newest-first list bounded by
// MaxPreviousLayouts, that the layout of from shards current since version
// since ended at the record time at with the change to version fence. since
// 0 (a state restored from a snapshot that did not record it) is taken as
// the version just before the change: producers only read the shard count,
// the fence and the time.
func layoutChanged(prev []Layout, since int64, from int, fence int64, at time.Time) []Layout {
	if since <= 0 || since >= fence {
		since = max(fence-1, 0)
	}
	out := make([]Layout, 0, min(len(prev)+1, MaxPreviousLayouts)) // a new slice: a clone shares the old one
	out = append(out, Layout{MetadataVersion: since, ShardCount: from, Fence: fence, EndedAt: at})
	for _, l := range prev {
		if len(out) == MaxPreviousLayouts {
			break
		}
		out = append(out, l)
	}
	return out
}

// LayoutsSince is the previous layouts that ended after since (newest
// first; the list is ordered by the fold, so the first older one ends it).
func LayoutsSince(prev []Layout, since time.Time) []Layout {
	for i, l := range prev {
		if !l.EndedAt.After(since) {
			return prev[:i:i]
		}
	}
	return prev
}

// derivedLayouts rebuilds a group's previous layouts from its reshardings'
// histories, for a snapshot written before the projection kept them: each
// activation changed the layout from its From count to its To count, a
// rollback after one back to From. It returns them newest first, and the
// version at which the current layout became current (0 when no
// resharding changed it).
func derivedLayouts(g *Group) ([]Layout, int64) {
	var prev []Layout
	var since int64
	count := -1 // the layout before the first recorded change is its From count
	for _, m := range g.Reshardings {
		activated := false
		for _, c := range m.History {
			switch {
			case c.Phase == "activated":
				activated = true
				if count < 0 {
					count = m.From
				}
				if m.To != count {
					prev = layoutChanged(prev, since, count, c.MetadataVersion, c.At)
					since, count = c.MetadataVersion, m.To
				}
			case activated && strings.HasPrefix(c.Phase, "rollback requested"):
				if m.From != count {
					prev = layoutChanged(prev, since, count, c.MetadataVersion, c.At)
					since, count = c.MetadataVersion, m.From
				}
			}
		}
	}
	return prev, since
}
