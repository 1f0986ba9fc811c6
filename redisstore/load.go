package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/routing"
)

// loadScript reads, atomically per shard stream, what the autoscaler needs:
// KEYS[1] stream, ARGV[1] group. Returns {exists (0/1), entries-added, the
// group's lag (-1 when Redis cannot tell or the group is missing), the Unix
// ms of the oldest entry not delivered to the group (0: none), Redis's clock
// in Unix ms}.
var loadScript = redis.NewScript("#!lua flags=no-writes\n" + luaXInfo + `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('EXISTS', KEYS[1]) == 0 then return {0, 0, 0, 0, now} end
local added = streamInfo(KEYS[1])['entries-added'] or 0
local lag, delivered = -1, nil
local g = groupInfo(KEYS[1], ARGV[1])
if g then lag, delivered = g['lag'] or -1, g['last-delivered-id'] end
local oldest = 0
if delivered then
  local next = redis.call('XRANGE', KEYS[1], '(' .. delivered, '+', 'COUNT', 1)
  if #next > 0 then
    oldest = tonumber(string.match(next[1][1], '^(%d+)-')) or 0
  end
end
return {1, added, lag, oldest, now}
`)

// Load reads the load evidence of group's shards (one script per shard,
// pipelined).
func (s *Shards) Load(ctx context.Context, prefix, group string, shards []int) ([]events.ShardSample, error) {
	keys := make([][]string, len(shards))
	args := make([][]any, len(shards))
	for i, sh := range shards {
		keys[i] = []string{routing.StreamKey(prefix, sh)}
		args[i] = []any{group}
	}
	cmds := s.runEachKeys(ctx, loadScript, keys, args)
	out := make([]events.ShardSample, len(shards))
	for i, sh := range shards {
		res, err := replyOf(cmds[i], 5, "load of "+keys[i][0])
		if err != nil {
			return nil, err
		}
		out[i] = events.ShardSample{ShardIndex: sh, Exists: toInt(res[0]) == 1, EntriesAdded: toInt(res[1]), Lag: toInt(res[2]), OldestUnreadMs: toInt(res[3]), NowMs: toInt(res[4])}
	}
	return out, nil
}
