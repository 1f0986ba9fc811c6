package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/routing"
)

// Offset is Redis's view of one shard stream for monitoring. On a Redis
// Cluster, NodeEndpoint, NodeID and SlotStart..SlotEnd name the master serving
// the stream's slot and that master's slot range (from CLUSTER SLOTS, cached
// for a couple of seconds); on a single server they are empty.
type Offset struct {
	ShardIndex           int
	StreamKey            string
	Slot                 int
	Exists               bool
	Length               int64
	FirstID, LastID      string
	LastGeneratedID      string
	GroupLastDeliveredID string
	Pending              int64
	Lag                  *int64
	MemoryBytes          *int64
	NodeEndpoint         string
	NodeID               string
	SlotStart, SlotEnd   *int
}

// Offsets reads XINFO STREAM, XINFO GROUPS and MEMORY USAGE of each shard.
func (s *Shards) Offsets(ctx context.Context, prefix, group string, shards []int) ([]Offset, error) {
	pipe := s.rdb.Pipeline()
	type cmds struct {
		info   *redis.XInfoStreamCmd
		groups *redis.XInfoGroupsCmd
		mem    *redis.IntCmd
	}
	cs := make([]cmds, len(shards))
	for i, sh := range shards {
		key := routing.StreamKey(prefix, sh)
		// Groups before the stream: a group's last-delivered-id at or past the
		// last-generated-id read after it means nothing was left to read.
		groups := pipe.XInfoGroups(ctx, key)
		cs[i] = cmds{info: pipe.XInfoStream(ctx, key), groups: groups, mem: pipe.MemoryUsage(ctx, key)}
	}
	if len(shards) > 0 {
		_, _ = pipe.Exec(ctx)
	}
	out := make([]Offset, 0, len(shards))
	for i, sh := range shards {
		key := routing.StreamKey(prefix, sh)
		o := Offset{ShardIndex: sh, StreamKey: key, Slot: routing.Slot(key)}
		if r, ok := s.slots.lookup(ctx, s.rdb, o.Slot); ok {
			start, end := r.start, r.end
			o.NodeEndpoint, o.NodeID, o.SlotStart, o.SlotEnd = r.endpoint, r.nodeID, &start, &end
		}
		info, err := cs[i].info.Result()
		if err != nil && !isNoSuchKey(err) {
			return nil, fmt.Errorf("XINFO STREAM %s: %w", key, err)
		}
		if err == nil {
			o.Exists = true
			o.Length = info.Length
			o.FirstID, o.LastID = info.FirstEntry.ID, info.LastEntry.ID
			o.LastGeneratedID = info.LastGeneratedID
		}
		if groups, err := cs[i].groups.Result(); err == nil {
			for _, g := range groups {
				if g.Name == group {
					o.GroupLastDeliveredID = g.LastDeliveredID
					o.Pending = g.Pending
					if g.Lag >= 0 {
						l := g.Lag
						o.Lag = &l
					}
					// At or past the last id or the newest entry left, nothing
					// is left to read, whatever the engine's counter says (see
					// luaGroups).
					if o.Exists && (!idLess(g.LastDeliveredID, o.LastGeneratedID) || o.Length == 0 || !idLess(g.LastDeliveredID, o.LastID)) {
						l := int64(0)
						o.Lag = &l
					}
				}
			}
		}
		if mem, err := cs[i].mem.Result(); err == nil {
			o.MemoryBytes = &mem
		}
		out = append(out, o)
	}
	return out, nil
}

// Message is one stream entry.
type Message struct {
	ID     string
	Fields map[string]string
}

// Messages pages through a stream without touching consumer-group state; the
// cursor entry itself is skipped.
func (s *Shards) Messages(ctx context.Context, key string, forward bool, cursor string, limit int) ([]Message, bool, error) {
	var msgs []redis.XMessage
	var err error
	n := int64(limit + 1)
	if forward {
		start := "-"
		if cursor != "" {
			start = "(" + cursor
		}
		msgs, err = s.rdb.XRangeN(ctx, key, start, "+", n).Result()
	} else {
		end := "+"
		if cursor != "" {
			end = "(" + cursor
		}
		msgs, err = s.rdb.XRevRangeN(ctx, key, end, "-", n).Result()
	}
	if err != nil {
		return nil, false, err
	}
	more := len(msgs) > limit
	if more {
		msgs = msgs[:limit]
	}
	out := make([]Message, 0, len(msgs))
	for _, m := range msgs {
		f := map[string]string{}
		for k, v := range m.Values {
			f[k] = fmt.Sprint(v)
		}
		out = append(out, Message{ID: m.ID, Fields: f})
	}
	return out, more, nil
}

// Ping checks the connection.
func (s *Shards) Ping(ctx context.Context) error { return s.rdb.Ping(ctx).Err() }

// idLess orders stream ids ("ms-seq"); an id that does not parse is less.
func idLess(a, b string) bool {
	am, as, ok1 := parseID(a)
	bm, bs, ok2 := parseID(b)
	if !ok1 || !ok2 {
		return true
	}
	if am != bm {
		return am < bm
	}
	return as < bs
}

func parseID(id string) (uint64, uint64, bool) {
	ms, seq, ok := strings.Cut(id, "-")
	m, err1 := strconv.ParseUint(ms, 10, 64)
	s, err2 := strconv.ParseUint(seq, 10, 64)
	return m, s, ok && err1 == nil && err2 == nil
}

// IDMillis is the millisecond part of a stream id.
func IDMillis(id string) (int64, bool) {
	ms, _, _ := strings.Cut(id, "-")
	v, err := strconv.ParseInt(ms, 10, 64)
	return v, err == nil
}
