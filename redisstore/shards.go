package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/routing"
)

// Shards runs the shard-stream operations on the Redis (or Redis Cluster) that
// holds the shard streams. Every operation touches one key per command (the
// stream keys carry no hash tag, so a group's shards spread over the cluster's
// slots), and pipelines are split by node by the cluster client.
type Shards struct {
	rdb   redis.UniversalClient
	slots slotMap
	idmp  idmpState
}

// NewShards returns the shard operations on rdb.
func NewShards(rdb redis.UniversalClient) *Shards { return &Shards{rdb: rdb} }

// provisionScript creates the consumer group at the stream's end with entries-read
// equal to entries-added, atomically, so Redis reports a known lag of 0 for a
// group that has nothing to read (and never a made-up lag if entries race in).
var provisionScript = redis.NewScript(luaXInfo + `
local added = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  added = streamInfo(KEYS[1])['entries-added'] or added
end
local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], '$', 'MKSTREAM', 'ENTRIESREAD', added)
if ok then return 1 end
local msg = type(err) == 'table' and err.err or tostring(err)
if string.find(msg, 'BUSYGROUP', 1, true) then return 0 end
return redis.error_reply(msg)
`)

// Provision creates prefix:from..prefix:to-1 with the consumer group on each,
// and returns the shards on which the consumer group existed already.
func (s *Shards) Provision(ctx context.Context, prefix, group string, from, to int) ([]int, error) {
	if to <= from {
		return nil, nil
	}
	keys := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		keys = append(keys, routing.StreamKey(prefix, i))
	}
	var existed []int
	for i, c := range s.runEach(ctx, provisionScript, keys, group) {
		n, err := c.Int()
		if err != nil {
			return nil, fmt.Errorf("provision %s group %s: %w", keys[i], group, err)
		}
		if n == 0 {
			existed = append(existed, from+i)
		}
	}
	return existed, nil
}

// destroyScript destroys consumer group ARGV[1] of KEYS[1]: 1 when it did, 0
// when the stream or the consumer group was missing.
var destroyScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then return 0 end
return redis.call('XGROUP', 'DESTROY', KEYS[1], ARGV[1])
`)

// DestroyGroups destroys consumer group group on each shard stream (one
// pipelined script per key: cluster-safe); a missing stream or consumer
// group is success.
func (s *Shards) DestroyGroups(ctx context.Context, prefix, group string, shards []int) error {
	return s.runEachOK(ctx, destroyScript, shardKeys(prefix, shards), func(key string) string {
		return fmt.Sprintf("destroy consumer group %s of %s", group, key)
	}, group)
}

// shardKeys are the stream keys of prefix's shards.
func shardKeys(prefix string, shards []int) []string {
	keys := make([]string, len(shards))
	for i, sh := range shards {
		keys[i] = routing.StreamKey(prefix, sh)
	}
	return keys
}

// runEachOK is runEach for a script whose answer only tells success: the
// first failure in key order, described by describe(its key).
func (s *Shards) runEachOK(ctx context.Context, script *redis.Script, keys []string, describe func(key string) string, args ...any) error {
	for i, c := range s.runEach(ctx, script, keys, args...) {
		if err := c.Err(); err != nil {
			return fmt.Errorf("%s: %w", describe(keys[i]), err)
		}
	}
	return nil
}

// replyOf is a script's reply of n values; an error or another reply is
// told as what failed.
func replyOf(cmd *redis.Cmd, n int, what string) ([]any, error) {
	res, err := cmd.Slice()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(res) != n {
		return nil, fmt.Errorf("%s: unexpected reply %v", what, res)
	}
	return res, nil
}

// runEach runs script once per key, pipelined (a cluster client splits the
// pipeline by node), and returns the commands in key order.
func (s *Shards) runEach(ctx context.Context, script *redis.Script, keys []string, args ...any) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(keys))
	if len(keys) == 0 {
		return cmds
	}
	// Best effort: on a cluster SCRIPT LOAD goes to every node, and one node
	// being down (a replica, or a master before its failover) must not stop
	// the others; a node without the script answers NOSCRIPT and gets the
	// script itself below.
	_ = script.Load(ctx, s.rdb).Err()
	pipe := s.rdb.Pipeline()
	for i, k := range keys {
		cmds[i] = script.EvalSha(ctx, pipe, []string{k}, args...)
	}
	_, _ = pipe.Exec(ctx) // per-command results below
	for i, c := range cmds {
		if err := c.Err(); err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
			// A node that never saw the script (or a replica promoted since).
			cmds[i] = script.Run(ctx, s.rdb, []string{keys[i]}, args...)
		}
	}
	return cmds
}

// KeyTypes returns the TYPE of each key, in order ("none" for a missing
// one), in one pipeline (split by node on a cluster).
func (s *Shards) KeyTypes(ctx context.Context, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.StatusCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Type(ctx, k)
	}
	_, _ = pipe.Exec(ctx) // per-command results below
	out := make([]string, len(keys))
	for i, c := range cmds {
		t, err := c.Result()
		if err != nil {
			return nil, fmt.Errorf("TYPE %s: %w", keys[i], err)
		}
		out[i] = t
	}
	return out, nil
}

// createStreamScript creates KEYS[1] as an empty stream without consumer
// groups, refusing a key that exists: returns 1 when it created it, 0 when
// the key existed (and is left as it was). It makes the stream with a
// consumer group it destroys at once rather than with an entry it trims: the
// stream then has entries-added 0, so that a rollback of a later scale-out
// onto it, which reads entries-added as what producers wrote to its new
// shards, does not take the creation for a write.
var createStreamScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('XGROUP', 'CREATE', KEYS[1], '_rsc_init', '$', 'MKSTREAM')
redis.call('XGROUP', 'DESTROY', KEYS[1], '_rsc_init')
return 1
`)

// dropEmptyScript deletes KEYS[1] only while it is a stream with no entry
// and no consumer group (a stream createStreamScript made and nobody used).
var dropEmptyScript = redis.NewScript(`
if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then return 0 end
if redis.call('XLEN', KEYS[1]) ~= 0 then return 0 end
if #redis.call('XINFO', 'GROUPS', KEYS[1]) ~= 0 then return 0 end
return redis.call('DEL', KEYS[1])
`)

// CreateStreams creates each key as an empty stream without consumer groups,
// refusing, atomically per key, one that exists: it returns the keys that
// existed. When any existed or a command failed, it deletes again the
// streams it created in this call (while they are still empty and without
// consumer groups), so nothing of it is left behind.
func (s *Shards) CreateStreams(ctx context.Context, keys []string) (existed []string, err error) {
	var created []string
	for i, c := range s.runEach(ctx, createStreamScript, keys) {
		n, cerr := c.Int()
		switch {
		case cerr != nil && err == nil:
			err = fmt.Errorf("create stream %s: %w", keys[i], cerr)
		case cerr == nil && n == 1:
			created = append(created, keys[i])
		case cerr == nil:
			existed = append(existed, keys[i])
		}
	}
	if err != nil || len(existed) > 0 {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		s.runEach(cctx, dropEmptyScript, created)
	}
	return existed, err
}

func isNoSuchKey(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "no such key") || errors.Is(err, redis.Nil))
}

// luaIDLess compares two stream ids ("ms-seq") exactly, as decimal strings
// (Lua numbers are doubles). An id it cannot parse compares less, which only
// ever keeps a lag that Redis reported.
const luaIDLess = `
local function idLess(a, b)
  local am, as = string.match(a or '', '^(%d+)-(%d+)$')
  local bm, bs = string.match(b or '', '^(%d+)-(%d+)$')
  if not am or not bm then return true end
  if #am ~= #bm then return #am < #bm end
  if am ~= bm then return am < bm end
  if #as ~= #bs then return #as < #bs end
  return as < bs
end
`

// luaXInfo reads XINFO replies by field name: fields turns a reply's name,
// value pairs into a table (a nil value, such as a lag Redis cannot tell,
// is false), streamInfo is XINFO STREAM of key and groupInfo the line of
// XINFO GROUPS of key for group name (nil when the stream has no such group).
const luaXInfo = `
local function fields(reply)
  local t = {}
  for i = 1, #reply, 2 do t[reply[i]] = reply[i+1] end
  return t
end
local function streamInfo(key) return fields(redis.call('XINFO', 'STREAM', key)) end
local function groupInfo(key, name)
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
    local t = fields(g)
    if t['name'] == name then return t end
  end
  return nil
end
`

// luaGroups reads XINFO STREAM and XINFO GROUPS of KEYS[1] (which must exist)
// into groups = {{name, pending, lag}, ...}, lag -1 when Redis reports none.
//
// A group whose last-delivered-id is at or past the stream's
// last-generated-id, or at or past its newest remaining entry (or whose
// stream is empty), has nothing left to read, whatever Redis says its lag is.
// Redis's own rule when it estimates a lag is the first half (a group at the
// last id has lag 0); the engines differ on the rest and on what they count:
//   - before Redis 7.2.4, XREADGROUP did not replicate the group's
//     entries-read (redis/redis#12898), so on a replica promoted by a failover
//     every group that read since the last full sync reports a lag above 0 for
//     ever;
//   - Redis 7.0 reports a lag above 0 for a group that read everything left
//     after an XTRIM removed entries it had not read;
//   - Redis 7.0 and Valkey 8.1 and 9.1 report the count of entries trimmed
//     away unread as lag for ever once a stream was trimmed empty (Redis 8.0
//     reports 0).
//
// In each case a drained shard would never count as drained and its
// resharding would never end. What was trimmed away unread is gone by the
// trim, not by retiring the shard. (TestIntegrationDrainProofWithTombstonesAndTrims
// runs these cases on every engine of the matrix.)
const luaGroups = luaIDLess + luaXInfo + `
local info = streamInfo(KEYS[1])
local last, newest = info['last-generated-id'] or '0-0', nil
if info['last-entry'] then newest = info['last-entry'][1] end
local groups = {}
for _, line in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local g = fields(line)
  local name, pending, lag, delivered = g['name'] or '', g['pending'] or -1, g['lag'] or -1, g['last-delivered-id']
  if delivered and (not idLess(delivered, last) or not newest or not idLess(delivered, newest)) then lag = 0 end
  groups[#groups+1] = {name, pending, lag}
end
`

// drainScript returns the groups of KEYS[1] (see luaGroups), or nil when the
// stream does not exist; one script, so no entry can slip in between reading
// the stream and reading its groups.
var drainScript = redis.NewScript("#!lua flags=no-writes\n" + `
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
` + luaGroups + `
return groups
`)

// DrainEvidence reads, atomically per shard stream, whether it exists and each
// consumer group's pending count and lag (see luaGroups for the lag rule).
func (s *Shards) DrainEvidence(ctx context.Context, prefix string, shards []int) ([]events.ShardDrain, error) {
	keys := shardKeys(prefix, shards)
	cmds := s.runEach(ctx, drainScript, keys)
	out := make([]events.ShardDrain, 0, len(shards))
	for i, sh := range shards {
		d := events.ShardDrain{ShardIndex: sh, StreamKey: keys[i], Exists: true, Groups: []events.GroupDrain{}}
		res, err := cmds[i].Slice()
		if errors.Is(err, redis.Nil) {
			d.Exists = false
			out = append(out, d)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("drain evidence of %s: %w", d.StreamKey, err)
		}
		for _, gr := range res {
			f, _ := gr.([]any)
			if len(f) != 3 {
				return nil, fmt.Errorf("drain evidence of %s: unexpected group %v", d.StreamKey, gr)
			}
			d.Groups = append(d.Groups, events.GroupDrain{Name: fmt.Sprint(f[0]), Pending: toInt(f[1]), Lag: toInt(f[2])})
		}
		out = append(out, d)
	}
	return out, nil
}

// EntriesAdded reads entries-added of every shard stream (0 when missing).
func (s *Shards) EntriesAdded(ctx context.Context, prefix string, shards []int) (map[int]int64, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.XInfoStreamCmd, len(shards))
	for i, sh := range shards {
		cmds[i] = pipe.XInfoStream(ctx, routing.StreamKey(prefix, sh))
	}
	if len(shards) > 0 {
		_, _ = pipe.Exec(ctx)
	}
	out := map[int]int64{}
	for i, sh := range shards {
		info, err := cmds[i].Result()
		if isNoSuchKey(err) {
			out[sh] = 0
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("XINFO STREAM %s: %w", routing.StreamKey(prefix, sh), err)
		}
		out[sh] = info.EntriesAdded
	}
	return out, nil
}

// deleteIfDrainedScript deletes a stream only if every consumer group on it has
// pending 0 and a known lag of 0 (see luaGroups for the lag rule), in one
// atomic step: an entry a stale producer adds after the drain check can never
// be deleted unread.
var deleteIfDrainedScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
` + luaGroups + `
for _, g in ipairs(groups) do
  if g[2] ~= 0 or g[3] ~= 0 then return 0 end
end
redis.call('DEL', KEYS[1])
return 1
`)

// ErrNotDrained: a stream to retire had entries pending or unread.
var ErrNotDrained = errors.New("stream not drained")

// Delete removes shard streams that are (still) drained, one key per script
// (cluster-safe). A stream that is not drained is kept and reported.
func (s *Shards) Delete(ctx context.Context, keys []string) error {
	var kept []string
	for _, k := range keys {
		n, err := deleteIfDrainedScript.Run(ctx, s.rdb, []string{k}).Int()
		if err != nil {
			return fmt.Errorf("delete %s: %w", k, err)
		}
		if n == 0 {
			kept = append(kept, k)
		}
	}
	if len(kept) > 0 {
		return fmt.Errorf("%w: %v", ErrNotDrained, kept)
	}
	return nil
}

func toInt(v any) int64 {
	switch t := v.(type) {
	case int64:
		return t
	case int:
		return int64(t)
	case string:
		var n int64
		fmt.Sscan(t, &n)
		return n
	}
	return 0
}

// healthScript reports whether KEYS[1] exists and has consumer group ARGV[1]:
// {exists, hasGroup} as 0/1.
var healthScript = redis.NewScript("#!lua flags=no-writes\n" + luaXInfo + `
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0} end
if groupInfo(KEYS[1], ARGV[1]) then return {1, 1} end
return {1, 0}
`)

// Damage reports the shards whose stream, or the group's consumer group on
// it, Redis no longer has (one pipelined script per key); healthy shards are
// not listed.
func (s *Shards) Damage(ctx context.Context, prefix, group string, shards []int) ([]events.ShardRepair, error) {
	keys := shardKeys(prefix, shards)
	cmds := s.runEach(ctx, healthScript, keys, group)
	var out []events.ShardRepair
	for i, sh := range shards {
		res, err := cmds[i].Int64Slice()
		if err != nil {
			return nil, fmt.Errorf("inspect %s: %w", keys[i], err)
		}
		if len(res) != 2 {
			return nil, fmt.Errorf("inspect %s: unexpected answer %v", keys[i], res)
		}
		if res[0] == 1 && res[1] == 1 {
			continue
		}
		out = append(out, events.ShardRepair{ShardIndex: sh, StreamKey: keys[i], StreamMissing: res[0] == 0, GroupMissing: res[1] == 0})
	}
	return out, nil
}

// repairScript recreates what Redis lost of a routed shard: a missing stream
// comes back (empty) with the consumer group at its end; a consumer group
// missing on a surviving stream is created at the stream's start, so whatever
// is still in the stream is read again (at least once, never lost). An
// existing group is left alone (BUSYGROUP).
var repairScript = redis.NewScript(`
local created
if redis.call('EXISTS', KEYS[1]) == 0 then
  created = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], '$', 'MKSTREAM', 'ENTRIESREAD', 0)
else
  created = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], '0')
end
return created and 1 or 0
`)

// Repair recreates the lost streams and consumer groups of the given shards
// (see repairScript); it reports the first failure.
func (s *Shards) Repair(ctx context.Context, prefix, group string, shards []int) error {
	return s.runEachOK(ctx, repairScript, shardKeys(prefix, shards), func(key string) string {
		return fmt.Sprintf("repair %s group %s", key, group)
	}, group)
}
