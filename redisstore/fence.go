package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/routing"
)

// Ordered resharding (ordering KEY): fences, cutovers and barrier evidence.
// Every script touches one shard stream and, where it needs it, the stream's
// fence hash (routing.FenceKey), in the same cluster slot.

// cutoverScript raises a consumer group's fence on one shard (unless it is
// already at least that high) and reads, in the same atomic step, where the
// stream stands: its last generated id ("0-0" when missing) and whether the
// group has read and acknowledged everything up to it (its last delivered id
// is at or past it, and nothing up to it is pending).
//
// KEYS[1] stream, KEYS[2] fence hash; ARGV[1] group, ARGV[2] fence, ARGV[3]
// "1" to raise (else only read), ARGV[4] the stream's fence (raised under
// routing.StreamFenceField with the group's; "0": none). Returns {lastId,
// done (0/1)}.
var cutoverScript = redis.NewScript(luaIDLess + luaXInfo + `
if ARGV[3] == '1' then
  local cur = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0') or 0
  if cur < tonumber(ARGV[2]) then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
  local sf = tonumber(ARGV[4]) or 0
  if sf > 0 then
    local scur = tonumber(redis.call('HGET', KEYS[2], '` + routing.StreamFenceField + `') or '0') or 0
    if scur < sf then redis.call('HSET', KEYS[2], '` + routing.StreamFenceField + `', ARGV[4]) end
  end
end
if redis.call('EXISTS', KEYS[1]) == 0 then return {'0-0', 1} end
local last = streamInfo(KEYS[1])['last-generated-id'] or '0-0'
if last == '0-0' then return {last, 1} end
local g = groupInfo(KEYS[1], ARGV[1])
local delivered = g and g['last-delivered-id']
if not delivered or idLess(delivered, last) then return {last, 0} end
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', last, 1) > 0 then return {last, 0} end
return {last, 1}
`)

// Cutover raises group's fence to fence (and the stream's to streamFence,
// when it is above 0) on the shards marked Raise and reads every listed
// shard's cutover (one script per shard, pipelined).
func (s *Shards) Cutover(ctx context.Context, prefix, group string, fence, streamFence int64, shards []events.CutoverShard) ([]events.CutoverRead, error) {
	keys := make([][]string, len(shards))
	args := make([][]any, len(shards))
	for i, sh := range shards {
		k := routing.StreamKey(prefix, sh.Index)
		keys[i] = []string{k, routing.FenceKey(k)}
		raise := "0"
		if sh.Raise {
			raise = "1"
		}
		args[i] = []any{group, fence, raise, streamFence}
	}
	cmds := s.runEachKeys(ctx, cutoverScript, keys, args)
	out := make([]events.CutoverRead, len(shards))
	for i, sh := range shards {
		res, err := replyOf(cmds[i], 2, "cutover of "+keys[i][0])
		if err != nil {
			return nil, err
		}
		last, _ := res[0].(string)
		out[i] = events.CutoverRead{
			ShardCutover: events.ShardCutover{ShardIndex: sh.Index, StreamKey: keys[i][0], LastID: last, Fenced: sh.Raise},
			Done:         toInt(res[1]) == 1,
		}
	}
	return out, nil
}

// lowerFenceScript lowers a group's fence on one shard to ARGV[2] when it is
// higher (a fence raised for a layout change that was never recorded).
// Returns 1 when it lowered it.
var lowerFenceScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
if cur > tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0
`)

// LowerFences lowers group's fences on shards 0..count-1 that are above mv
// (the metadata version the group has). It returns how many it lowered.
func (s *Shards) LowerFences(ctx context.Context, prefix, group string, count int, mv int64) (int, error) {
	keys := make([][]string, count)
	args := make([][]any, count)
	for i := 0; i < count; i++ {
		keys[i] = []string{routing.FenceKey(routing.StreamKey(prefix, i))}
		args[i] = []any{group, mv}
	}
	n := 0
	for i, c := range s.runEachKeys(ctx, lowerFenceScript, keys, args) {
		v, err := c.Int()
		if err != nil {
			return n, fmt.Errorf("lower fence %s: %w", keys[i][0], err)
		}
		n += v
	}
	return n, nil
}

// Fences reads group's fence on shards 0..count-1 (0 where none is set).
func (s *Shards) Fences(ctx context.Context, prefix, group string, count int) ([]int64, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, count)
	for i := 0; i < count; i++ {
		cmds[i] = pipe.HGet(ctx, routing.FenceKey(routing.StreamKey(prefix, i)), group)
	}
	if count > 0 {
		_, _ = pipe.Exec(ctx)
	}
	out := make([]int64, count)
	for i, c := range cmds {
		v, err := c.Int64()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read fence of %s: %w", routing.StreamKey(prefix, i), err)
		}
		out[i] = v
	}
	return out, nil
}

// maxPendingShown bounds the pending entries a barrier proof counts (it only
// needs to know whether there is one).
const maxPendingShown = 100

// barrierScript reads whether a group read and acknowledged a stream up to a
// cutover id: KEYS[1] stream; ARGV[1] group, ARGV[2] cutover id. Returns
// {exists (0/1), last delivered id ("" without the group), pending up to the
// cutover (at most maxPendingShown), unfenced entries after the cutover
// among the next ARGV[4] from ARGV[3], the first of them, the last id scanned,
// the stream's last generated id}.
// An entry is unfenced when it lacks routing.FenceField.
var barrierScript = redis.NewScript("#!lua flags=no-writes\n" + luaXInfo + `
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, '', 0, 0, '', ARGV[3], ''} end
local generated = streamInfo(KEYS[1])['last-generated-id'] or ''
local g = groupInfo(KEYS[1], ARGV[1])
local delivered = g and g['last-delivered-id'] or ''
local pending = 0
if delivered ~= '' then
  pending = #redis.call('XPENDING', KEYS[1], ARGV[1], '-', ARGV[2], ` + strconv.Itoa(maxPendingShown) + `)
end
local unfenced, first, lastScanned = 0, '', ARGV[3]
local n = tonumber(ARGV[4])
if n > 0 then
  for _, e in ipairs(redis.call('XRANGE', KEYS[1], '(' .. ARGV[3], '+', 'COUNT', n)) do
    lastScanned = e[1]
    local fenced = false
    local f = e[2]
    for i = 1, #f, 2 do
      if f[i] == '` + routing.FenceField + `' then fenced = true break end
    end
    if not fenced then
      unfenced = unfenced + 1
      if first == '' then first = e[1] end
    end
  end
end
return {1, delivered, pending, unfenced, first, lastScanned, generated}
`)

// BarrierEvidence reads, atomically per source shard, whether group read and
// acknowledged it up to its cutover, and scans the entries after the cutover
// for unfenced ones.
func (s *Shards) BarrierEvidence(ctx context.Context, group string, sources []events.BarrierSource) ([]events.BarrierRead, error) {
	keys := make([][]string, len(sources))
	args := make([][]any, len(sources))
	for i, src := range sources {
		keys[i] = []string{src.StreamKey}
		from := src.ScanFrom
		if from == "" {
			from = src.CutoverID
		}
		args[i] = []any{group, src.CutoverID, from, src.Scan}
	}
	cmds := s.runEachKeys(ctx, barrierScript, keys, args)
	out := make([]events.BarrierRead, len(sources))
	for i, src := range sources {
		res, err := replyOf(cmds[i], 7, "barrier evidence of "+src.StreamKey)
		if err != nil {
			return nil, err
		}
		r := events.BarrierRead{BarrierProof: events.BarrierProof{
			ShardIndex: src.ShardIndex, StreamKey: src.StreamKey, CutoverID: src.CutoverID,
			Exists: toInt(res[0]) == 1,
		}}
		r.LastDelivered, _ = res[1].(string)
		r.Pending = toInt(res[2])
		r.Unfenced = toInt(res[3])
		r.FirstUnfenced, _ = res[4].(string)
		r.ScannedTo, _ = res[5].(string)
		r.LastGenerated, _ = res[6].(string)
		out[i] = r
	}
	return out, nil
}

// runEachKeys runs script once per key set, pipelined (a cluster client
// splits the pipeline by node; each key set is in one slot), and returns the
// commands in order.
func (s *Shards) runEachKeys(ctx context.Context, script *redis.Script, keys [][]string, args [][]any) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(keys))
	if len(keys) == 0 {
		return cmds
	}
	_ = script.Load(ctx, s.rdb).Err() // best effort; see runEach
	pipe := s.rdb.Pipeline()
	for i := range keys {
		cmds[i] = script.EvalSha(ctx, pipe, keys[i], args[i]...)
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range cmds {
		if err := c.Err(); err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
			cmds[i] = script.Run(ctx, s.rdb, keys[i], args[i]...)
		}
	}
	return cmds
}
