package producer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/routing"
)

// Idempotent publishing (Config.DedupWindow; client README, "Idempotent
// publishing"). Every entry written with an event id leaves a record next to
// its shard stream: the string key DedupKey(streamKey, eventID), in the
// stream's cluster slot, holding the entry's id and expiring after the
// writer's window (SET PX). DedupPublishScript looks the record up, and writes
// the entry and its record, in the same atomic step as the fence check; a
// record found answers the original entry instead. A record is removed by
// Redis's own expiry, at its own time whatever other producers' windows are,
// and costs no work on later publishes.
//
// A publish whose earlier attempt may have landed on another shard (a reply
// lost, then the routing changed), or whose event id comes from the caller
// while the routing lists previous layouts within the window, first reads
// the records on those other shards (one pipeline), with their fences: a
// record found is the answer; a fence at least as new as the layout change
// proves nothing routed with the older layout can land there any more.

const (
	// MaxEventIDLength bounds an event id, in bytes, when DedupWindow is set
	// (the id is part of a Redis key).
	MaxEventIDLength = 256
	// MaxDedupWindow bounds Config.DedupWindow: records live that long.
	MaxDedupWindow = 24 * time.Hour
	// maxPreviousLayouts bounds the previous layouts a routing answer may
	// list.
	maxPreviousLayouts = 64
	// maxLayoutShards bounds a previous layout's shard count (it is only
	// routed with, never allocated per shard).
	maxLayoutShards = 1 << 20
	// layoutSlack widens the window when choosing the previous layouts to
	// check: endedAt is the coordinator's clock, records expire by Redis's.
	layoutSlack = 10 * time.Second
	// maxKeysPerRead bounds the records one MGET of a check reads.
	maxKeysPerRead = 512
)

// DedupKey is the record of an event id written to a shard stream: a Redis
// string holding the entry id, "{" + streamKey + "}:dedup:" + eventID, in
// the stream's cluster slot.
func DedupKey(streamKey, eventID string) string {
	return dedupPrefix(streamKey) + eventID
}

func dedupPrefix(streamKey string) string { return "{" + streamKey + "}:dedup:" }

// DedupPublishScript is PublishScript with a record per entry. KEYS and ARGV
// are PublishScript's, except:
//
//	KEYS[3…] the record of each entry, in order (DedupKey of its event id)
//	ARGV[5]  the window, in milliseconds: how long a new record lives
//	ARGV[6]  a producer id: new entries are written with XADD … IDMP
//	         <producer id> <event id> (Redis 8.6's idempotent XADD; the
//	         event id is the record key's tail); "" for a plain XADD (the
//	         records path)
//	ARGV[7…] the entries, as PublishScript's ARGV[5…]
//
// After the fence check, the records are read (one MGET); each entry whose
// record exists, or whose id an earlier entry of the call has, is not
// written; the others are written as by PublishScript, each followed by SET
// record id PX window. The answer is {ids, dups}: ids[i] is entry i's id (the original
// one for a duplicate; false when the stream does not exist and the entry
// has no record), dups the 1-based positions of the entries that had a
// record. Nothing is written when the stream does not exist (NOMKSTREAM).
const DedupPublishScript = fenceLua + xaddLua + `local ttl, prefix = ARGV[5], 0
if ARGV[6] ~= '' then
  idmp, prefix = ARGV[6], #('{' .. KEYS[1] .. '}:dedup:')
end
local recs = redis.call('MGET', unpack(KEYS, 3, #KEYS))
local ids, dups, written, i, n, k, missing = {}, {}, {}, 7, #ARGV, 3, false
while i <= n do
  local first, last = i + 1, i + tonumber(ARGV[i])
  local id = recs[k - 2] or written[KEYS[k]]
  if id then
    dups[#dups + 1] = k - 2
  elseif not missing then
    id = xadd(first, last, idmp and string.sub(KEYS[k], prefix + 1))
    if id then
      redis.call('SET', KEYS[k], id, 'PX', ttl)
      written[KEYS[k]] = id
    else
      missing = true
    end
  end
  ids[k - 2] = id or false
  i = last + 1
  k = k + 1
end
return {ids, dups}
`

var dedupScript = redis.NewScript(DedupPublishScript)

// Errors of idempotent publishing; test with errors.Is.
var (
	// ErrInvalidEventID: with DedupWindow set, a message's event id is
	// empty, longer than MaxEventIDLength, or not a string, []byte or
	// integer.
	ErrInvalidEventID = errors.New("producer: invalid event id")
)

// eventIDOf returns the fields to write, the event id and whether the SDK
// generated it. With DedupWindow the id must be usable in a record's key.
func (p *Producer) eventIDOf(fields map[string]any) (map[string]any, string, bool, error) {
	name := p.cfg.EventIDField
	if name == "" {
		return fields, "", false, nil
	}
	v, ok := fields[name]
	if !ok {
		id := client.NewRequestID()
		out := make(map[string]any, len(fields)+1)
		for k, v := range fields {
			out[k] = v
		}
		out[name] = id
		return out, id, true, nil
	}
	if p.window <= 0 {
		return fields, fmt.Sprint(v), false, nil
	}
	// The record's key must hold the bytes Redis stores in the entry.
	var id string
	switch t := v.(type) {
	case string:
		id = t
	case []byte:
		id = string(t)
	case int:
		id = strconv.Itoa(t)
	case int64:
		id = strconv.FormatInt(t, 10)
	case int32:
		id = strconv.FormatInt(int64(t), 10)
	case uint64:
		id = strconv.FormatUint(t, 10)
	case uint32:
		id = strconv.FormatUint(uint64(t), 10)
	default:
		return nil, "", false, fmt.Errorf("%w: field %s is a %T (want a string, []byte or integer)", ErrInvalidEventID, name, v)
	}
	if id == "" || len(id) > MaxEventIDLength {
		return nil, "", false, fmt.Errorf("%w: field %s has %d bytes (want 1..%d)", ErrInvalidEventID, name, len(id), MaxEventIDLength)
	}
	return fields, id, false, nil
}

// prevLayout is a previous layout of a routing answer, as publishing uses it.
type prevLayout struct {
	shardCount int
	fence      int64
	endedAt    time.Time
}

// place is a shard where an event id may have landed, and the fence that
// proves nothing routed before the layout change can land there any more:
// writes routed with a version below it are refused.
type place struct {
	shard int
	fence int64
}

// addPlace adds a place, keeping one per shard with the highest fence.
func addPlace(ps []place, s int, fence int64) []place {
	for i := range ps {
		if ps[i].shard == s {
			ps[i].fence = max(ps[i].fence, fence)
			return ps
		}
	}
	return append(ps, place{shard: s, fence: fence})
}

// placesToCheck returns where an event id may have landed other than shard
// idx of route r: the shards of earlier attempts whose outcome is unknown
// (tried), and, for an id the caller gave (not generated), the shard it
// routed to under each previous layout of r within the window. Places in
// cleared were proven empty and fenced already.
func (p *Producer) placesToCheck(r *route, key string, idx int, generated bool, tried, cleared []place, now time.Time) []place {
	var out []place
	for _, t := range tried {
		if t.shard != idx {
			out = addPlace(out, t.shard, t.fence)
		}
	}
	if !generated {
		for _, l := range r.prev {
			if l.shardCount <= 0 || !l.endedAt.IsZero() && now.Sub(l.endedAt) > p.window+layoutSlack {
				continue
			}
			if s, err := routing.RouteKey(key, l.shardCount); err == nil && s != idx {
				out = addPlace(out, s, l.fence)
			}
		}
	}
	kept := out[:0]
	for _, pl := range out {
		if !clearedAt(cleared, pl) {
			kept = append(kept, pl)
		}
	}
	return kept
}

func clearedAt(cleared []place, pl place) bool {
	for _, c := range cleared {
		if c.shard == pl.shard && c.fence >= pl.fence {
			return true
		}
	}
	return false
}

// shardKeys returns the stream and fence keys of shard s for route r (the
// routing's own keys for a shard it has).
func (p *Producer) shardKeys(r *route, s int) (stream, fence string) {
	if s < len(r.keys) {
		return r.keys[s], r.scriptKeys[s][1]
	}
	stream = routing.StreamKey(p.cfg.StreamPrefix, s)
	return stream, routing.FenceKey(stream)
}

// check is one place's read for one event id.
type check struct {
	msg   int // the message's index (0 for a single publish)
	place place
	id    string // the event id
}

// checkOutcome is what a check found.
type checkOutcome struct {
	found  string // the entry id of a record, "" if none
	fenced bool   // the shard's fence is at least the place's
}

// readChecks reads, in one pipeline, each check's record and its shard's
// fence: per shard one HGET of the fence and MGETs of the records (a shard's
// keys share its slot). It fills out, in the order of checks.
func (p *Producer) readChecks(ctx context.Context, r *route, checks []check, out []checkOutcome) error {
	type shardRead struct {
		fence *redis.StringCmd
		keys  []string
		at    []int // indexes into checks, one per key
		gets  []*redis.SliceCmd
	}
	byShard := make(map[int]*shardRead, 4)
	var order []int
	for i, c := range checks {
		sr := byShard[c.place.shard]
		if sr == nil {
			sr = &shardRead{}
			byShard[c.place.shard] = sr
			order = append(order, c.place.shard)
		}
		stream, _ := p.shardKeys(r, c.place.shard)
		sr.keys = append(sr.keys, DedupKey(stream, c.id))
		sr.at = append(sr.at, i)
	}
	pipe := p.rdb.Pipeline()
	for _, s := range order {
		sr := byShard[s]
		_, fence := p.shardKeys(r, s)
		sr.fence = pipe.HGet(ctx, fence, p.fenceField)
		for from := 0; from < len(sr.keys); from += maxKeysPerRead {
			sr.gets = append(sr.gets, pipe.MGet(ctx, sr.keys[from:min(from+maxKeysPerRead, len(sr.keys))]...))
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read the dedup records of earlier layouts: %w", err)
	}
	for _, s := range order {
		sr := byShard[s]
		var fence int64 = -1
		if v, err := sr.fence.Result(); err == nil {
			if f, perr := strconv.ParseInt(v, 10, 64); perr == nil {
				fence = f
			}
		}
		for g, cmd := range sr.gets {
			vals, err := cmd.Result()
			if err != nil {
				return fmt.Errorf("read the dedup records of shard %d: %w", s, err)
			}
			for j, v := range vals {
				i := sr.at[g*maxKeysPerRead+j]
				o := checkOutcome{fenced: fence >= checks[i].place.fence}
				if id, ok := v.(string); ok {
					o.found = id
				}
				out[i] = o
			}
		}
	}
	return nil
}

// noteChecks counts the checks made and the unproven ones, and logs the
// latter at most once a minute.
func (p *Producer) noteChecks(n, unfenced int, example place) {
	p.layoutChecks.Add(int64(n))
	if unfenced == 0 {
		return
	}
	p.unfencedChecks.Add(int64(unfenced))
	now := time.Now().UnixNano()
	last := p.unfencedLogged.Load()
	if now-last > int64(time.Minute) && p.unfencedLogged.CompareAndSwap(last, now) {
		p.cfg.Logger.Warn("idempotent publish: a shard an event id may have landed on before a layout change has no fence that proves nothing routed before the change lands there any more (is the coordinator raising fences for this group?); publishing on the new layout anyway",
			"streamPrefix", p.cfg.StreamPrefix, "consumerGroup", p.cfg.ConsumerGroup, "shard", example.shard, "wantFence", example.fence)
	}
}

// noteLayoutWindow logs, once, that the routing's previous layouts do not
// cover the whole dedup window: an event id written before a layout change
// older than they reach is not looked for on its old shard (an earlier
// attempt of the same publish still is).
func (p *Producer) noteLayoutWindow(rt *client.Routing) {
	covered := time.Duration(rt.LayoutWindowMs) * time.Millisecond
	if covered >= p.window || p.windowLogged.Swap(true) {
		return
	}
	p.cfg.Logger.Info("idempotent publish: the coordinator lists previous layouts for less than the dedup window; across a layout change, an event id published again by another publish (a restarted process) is deduplicated only within what it lists",
		"streamPrefix", p.cfg.StreamPrefix, "consumerGroup", p.cfg.ConsumerGroup, "dedupWindow", p.window, "layoutWindow", covered)
}

// dedupReply reads DedupPublishScript's answer for n entries: each entry's id
// ("" when the stream does not exist), and which were duplicates.
func dedupReply(cmd *redis.Cmd, n int, ids []string, dup []bool) error {
	v, err := cmd.Result()
	if err != nil {
		return err
	}
	parts, ok := v.([]any)
	if !ok || len(parts) != 2 {
		return fmt.Errorf("%w: %T", ErrUnexpectedReply, v)
	}
	idv, ok1 := parts[0].([]any)
	dupv, ok2 := parts[1].([]any)
	if !ok1 || !ok2 || len(idv) != n || len(dupv) > n {
		return fmt.Errorf("%w: %d ids for %d entries", ErrUnexpectedReply, len(idv), n)
	}
	for i, x := range idv {
		switch t := x.(type) {
		case string:
			ids[i] = t
		case nil:
			ids[i] = ""
		default:
			return fmt.Errorf("%w: id %T", ErrUnexpectedReply, x)
		}
		dup[i] = false
	}
	for _, x := range dupv {
		k, ok := x.(int64)
		if !ok || k < 1 || int(k) > n || ids[k-1] == "" {
			return fmt.Errorf("%w: duplicate position %v", ErrUnexpectedReply, x)
		}
		dup[k-1] = true
	}
	return nil
}
