package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/streamread"
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
	// OldestUndeliveredID is the first entry after the group's last-delivered
	// id, OldestPendingID the group's oldest entry delivered and not yet
	// acknowledged ("" when there is none, or no group); RedisTimeMs is
	// Redis's clock when they were read (see LagAge).
	OldestUndeliveredID string
	OldestPendingID     string
	RedisTimeMs         int64
}

// offsetsScript reads one shard stream for monitoring in one call: XINFO
// STREAM without the first and last entries it returns (an entry may be
// megabytes: only their ids leave Redis), the group's line of XINFO GROUPS,
// MEMORY USAGE, and for the lag in time the id of the first entry after the
// group's last-delivered id (XRANGE (id + COUNT 1) and of the group's oldest
// pending entry (XPENDING - + 1), each read only when there is one, with
// Redis's clock (TIME) in the same call. Every read is O(log N) or bounded by
// the stream's groups: nothing scans the stream. KEYS[1] stream; ARGV[1]
// consumer group. Returns {0} when the stream does not exist, else {1,
// length, first id, last id, last-generated id, group found (1/0), group
// last-delivered id, pending, lag (-1 when Redis cannot tell), memory bytes
// (-1 when unknown), oldest undelivered id ("" when none), oldest pending id
// ("" when none), Redis's clock in Unix ms}.
var offsetsScript = redis.NewScript("#!lua flags=no-writes\n" + luaIDLess + luaXInfo + `
if redis.call('EXISTS', KEYS[1]) == 0 then return {0} end
local t = streamInfo(KEYS[1])
local first, last = '', ''
if t['first-entry'] then first = t['first-entry'][1] end
if t['last-entry'] then last = t['last-entry'][1] end
local found, delivered, pending, lag = 0, '', 0, -1
local g = groupInfo(KEYS[1], ARGV[1])
if g then found, delivered, pending, lag = 1, g['last-delivered-id'] or '', g['pending'] or 0, g['lag'] or -1 end
local mem = redis.call('MEMORY', 'USAGE', KEYS[1]) or -1
local undelivered, oldestPending = '', ''
if found == 1 and last ~= '' and idLess(delivered, last) then
  local nx = redis.call('XRANGE', KEYS[1], '(' .. delivered, '+', 'COUNT', 1)
  if #nx > 0 then undelivered = nx[1][1] end
end
if found == 1 and pending > 0 then
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1)
  if #p > 0 then oldestPending = p[1][1] end
end
local now = redis.call('TIME')
local nowMs = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
return {1, t['length'], first, last, t['last-generated-id'] or '', found, delivered, pending, lag, mem, undelivered, oldestPending, nowMs}
`)

// Offsets reads each shard's stream, the group's reading of it and its memory
// (offsetsScript, one call per shard, pipelined).
func (s *Shards) Offsets(ctx context.Context, prefix, group string, shards []int) ([]Offset, error) {
	keys := shardKeys(prefix, shards)
	cmds := s.runEach(ctx, offsetsScript, keys, group)
	out := make([]Offset, 0, len(shards))
	for i, sh := range shards {
		key := keys[i]
		o := Offset{ShardIndex: sh, StreamKey: key, Slot: routing.Slot(key)}
		if r, ok := s.slots.lookup(ctx, s.rdb, o.Slot); ok {
			start, end := r.start, r.end
			o.NodeEndpoint, o.NodeID, o.SlotStart, o.SlotEnd = r.endpoint, r.nodeID, &start, &end
		}
		res, err := cmds[i].Slice()
		if err != nil {
			return nil, fmt.Errorf("read offsets of %s: %w", key, err)
		}
		if len(res) == 0 || toInt(res[0]) == 0 {
			out = append(out, o)
			continue
		}
		if len(res) != 13 {
			return nil, fmt.Errorf("read offsets of %s: %d values, want 13", key, len(res))
		}
		str := func(v any) string { s, _ := v.(string); return s }
		o.Exists = true
		o.Length = toInt(res[1])
		o.FirstID, o.LastID, o.LastGeneratedID = str(res[2]), str(res[3]), str(res[4])
		if toInt(res[5]) == 1 {
			o.GroupLastDeliveredID, o.Pending = str(res[6]), toInt(res[7])
			if lag := toInt(res[8]); lag >= 0 {
				o.Lag = &lag
			}
			// At or past the last id or the newest entry left, nothing is
			// left to read, whatever the engine's counter says (see
			// luaGroups).
			if !idLess(o.GroupLastDeliveredID, o.LastGeneratedID) || o.Length == 0 || !idLess(o.GroupLastDeliveredID, o.LastID) {
				l := int64(0)
				o.Lag = &l
			}
		}
		if mem := toInt(res[9]); mem >= 0 {
			o.MemoryBytes = &mem
		}
		o.OldestUndeliveredID, o.OldestPendingID, o.RedisTimeMs = str(res[10]), str(res[11]), toInt(res[12])
		out = append(out, o)
	}
	return out, nil
}

// Message is one stream entry, as Messages read it: Truncated says its field
// names or values were cut (or some fields dropped) to MessagesQuery's
// MaxRecordBytes.
type Message struct {
	ID        string
	Fields    map[string]string
	Truncated bool
}

// MessagesQuery is one page of a stream, bounded in entries and in bytes (the
// query of httpapi.StreamReader's Messages).
type MessagesQuery = streamread.MessagesQuery

// messagesScript pages a stream one entry at a time inside Redis, so that
// neither Redis's reply nor the coordinator ever holds more than the byte
// budget plus one entry: XRANGE (or XREVRANGE) with COUNT 1 from the cursor
// on, each entry cut to the record bound, until the limit or the budget.
// KEYS[1] stream; ARGV forward (1/0), cursor, limit, peek (1/0), max bytes,
// max record bytes. Returns {entries, more (1/0), cut (1/0)}, each entry
// {id, {field, value, ...}, truncated (1/0)}. It reads only.
var messagesScript = redis.NewScript("#!lua flags=no-writes\n" + `
local fwd = ARGV[1] == '1'
local limit = tonumber(ARGV[3])
local peek = ARGV[4] == '1'
local maxBytes = tonumber(ARGV[5])
local maxRecord = tonumber(ARGV[6])
local bound
if ARGV[2] == '' then
  if fwd then bound = '-' else bound = '+' end
else
  bound = '(' .. ARGV[2]
end
local out, used, more, cut = {}, 0, 0, 0
while true do
  if #out >= limit and not peek then break end
  local r
  if fwd then
    r = redis.call('XRANGE', KEYS[1], bound, '+', 'COUNT', 1)
  else
    r = redis.call('XREVRANGE', KEYS[1], bound, '-', 'COUNT', 1)
  end
  if #r == 0 then break end
  if #out >= limit then more = 1; break end
  local id, fields = r[1][1], r[1][2]
  local size, kept, trunc = #id, {}, 0
  for i = 1, #fields, 2 do
    local name, value = fields[i], fields[i + 1] or ''
    local room = maxRecord - size
    if room <= 0 then trunc = 1; break end
    if #name > room then
      kept[#kept + 1] = string.sub(name, 1, room)
      kept[#kept + 1] = ''
      size = maxRecord
      trunc = 1
      break
    end
    size = size + #name
    room = maxRecord - size
    if #value > room then
      value = string.sub(value, 1, room)
      trunc = 1
    end
    size = size + #value
    kept[#kept + 1] = name
    kept[#kept + 1] = value
  end
  if #out > 0 and used + size > maxBytes then more = 1; cut = 1; break end
  used = used + size
  out[#out + 1] = {id, kept, trunc}
  bound = '(' .. id
end
return {out, more, cut}
`)

// Messages pages through a stream without touching consumer-group state
// (messagesScript); the cursor entry itself is skipped. more says entries
// follow the page (Peek found one, or the byte budget stopped the read), cut
// that the byte budget stopped it.
func (s *Shards) Messages(ctx context.Context, key string, q MessagesQuery) (msgs []Message, more, cut bool, err error) {
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	res, err := messagesScript.Run(ctx, s.rdb, []string{key}, flag(q.Forward), q.Cursor, q.Limit, flag(q.Peek), q.MaxBytes, q.MaxRecordBytes).Slice()
	if err != nil {
		return nil, false, false, err
	}
	if len(res) != 3 {
		return nil, false, false, fmt.Errorf("messages script: %d values, want 3", len(res))
	}
	entries, _ := res[0].([]any)
	msgs = make([]Message, 0, len(entries))
	for _, e := range entries {
		parts, _ := e.([]any)
		if len(parts) != 3 {
			return nil, false, false, fmt.Errorf("messages script: malformed entry %v", e)
		}
		id, _ := parts[0].(string)
		kv, _ := parts[1].([]any)
		m := Message{ID: id, Fields: make(map[string]string, len(kv)/2), Truncated: parts[2] == int64(1)}
		for i := 0; i+1 < len(kv); i += 2 {
			k, _ := kv[i].(string)
			v, _ := kv[i+1].(string)
			m.Fields[k] = v
		}
		msgs = append(msgs, m)
	}
	return msgs, res[1] == int64(1), res[2] == int64(1), nil
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
