package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/routing"
)

// Shards runs the shard-stream operations on the Redis (or Redis Cluster) that
// holds the shard streams. Every operation touches one key per command, so it works
// unchanged on a cluster.
type Shards struct {
	rdb redis.UniversalClient
}

// NewShards returns the shard operations on rdb.
func NewShards(rdb redis.UniversalClient) *Shards { return &Shards{rdb: rdb} }

// provisionScript creates the consumer group at the stream's end with entries-read
// equal to entries-added, atomically, so Redis reports a known lag of 0 for a
// group that has nothing to read (and never a made-up lag if entries race in).
var provisionScript = redis.NewScript(`
local added = 0
if redis.call('EXISTS', KEYS[1]) == 1 then
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  for i = 1, #info, 2 do
    if info[i] == 'entries-added' then added = info[i+1] end
  end
end
local ok, err = pcall(redis.call, 'XGROUP', 'CREATE', KEYS[1], ARGV[1], '$', 'MKSTREAM', 'ENTRIESREAD', added)
if ok then return 1 end
local msg = type(err) == 'table' and err.err or tostring(err)
if string.find(msg, 'BUSYGROUP', 1, true) then return 0 end
return redis.error_reply(msg)
`)

// Provision creates prefix:from..prefix:to-1 with the consumer group on each.
func (s *Shards) Provision(ctx context.Context, prefix, group string, from, to int) error {
	if to <= from {
		return nil
	}
	if err := provisionScript.Load(ctx, s.rdb).Err(); err != nil {
		return fmt.Errorf("load provisioning script: %w", err)
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, 0, to-from)
	for i := from; i < to; i++ {
		cmds = append(cmds, provisionScript.EvalSha(ctx, pipe, []string{routing.StreamKey(prefix, i)}, group))
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			if strings.Contains(err.Error(), "NOSCRIPT") {
				// A cluster node that never saw the script: run it directly.
				if err2 := provisionScript.Run(ctx, s.rdb, []string{routing.StreamKey(prefix, from+i)}, group).Err(); err2 == nil {
					continue
				} else {
					err = err2
				}
			}
			return fmt.Errorf("provision %s group %s: %w", routing.StreamKey(prefix, from+i), group, err)
		}
	}
	return nil
}

// ExistingKeys returns which of prefix and prefix:0..count-1 exist.
func (s *Shards) ExistingKeys(ctx context.Context, prefix string, count int) ([]string, error) {
	keys := []string{prefix}
	for i := 0; i < count; i++ {
		keys = append(keys, routing.StreamKey(prefix, i))
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Exists(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("check keys of %s: %w", prefix, err)
	}
	var out []string
	for i, c := range cmds {
		if c.Val() > 0 {
			out = append(out, keys[i])
		}
	}
	return out, nil
}

func isNoSuchKey(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "no such key") || errors.Is(err, redis.Nil))
}

// DrainEvidence reads XINFO GROUPS of every shard stream.
func (s *Shards) DrainEvidence(ctx context.Context, prefix string, shards []int) ([]events.ShardDrain, error) {
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.Cmd, len(shards))
	for i, sh := range shards {
		cmds[i] = pipe.Do(ctx, "XINFO", "GROUPS", routing.StreamKey(prefix, sh))
	}
	if len(shards) > 0 {
		_, _ = pipe.Exec(ctx)
	}
	out := make([]events.ShardDrain, 0, len(shards))
	for i, sh := range shards {
		d := events.ShardDrain{ShardIndex: sh, StreamKey: routing.StreamKey(prefix, sh), Exists: true, Groups: []events.GroupDrain{}}
		res, err := cmds[i].Result()
		if isNoSuchKey(err) {
			d.Exists = false
			out = append(out, d)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("XINFO GROUPS %s: %w", d.StreamKey, err)
		}
		groups, _ := res.([]any)
		for _, gr := range groups {
			fields := toMap(gr)
			gd := events.GroupDrain{Name: fmt.Sprint(fields["name"]), Pending: toInt(fields["pending"]), Lag: -1}
			if lag, ok := fields["lag"]; ok && lag != nil {
				gd.Lag = toInt(lag)
			}
			d.Groups = append(d.Groups, gd)
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
// pending 0 and a known lag of 0, in one atomic step: an entry a stale producer
// adds after the drain check can never be deleted unread.
var deleteIfDrainedScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local groups = redis.call('XINFO', 'GROUPS', KEYS[1])
for _, g in ipairs(groups) do
  local pending, lag = nil, nil
  for i = 1, #g, 2 do
    if g[i] == 'pending' then pending = g[i+1] end
    if g[i] == 'lag' then lag = g[i+1] end
  end
  if pending ~= 0 or lag ~= 0 then return 0 end
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

func toMap(v any) map[string]any {
	out := map[string]any{}
	switch t := v.(type) {
	case map[any]any:
		for k, val := range t {
			out[fmt.Sprint(k)] = val
		}
	case []any:
		for i := 0; i+1 < len(t); i += 2 {
			out[fmt.Sprint(t[i])] = t[i+1]
		}
	}
	return out
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
