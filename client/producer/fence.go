package producer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/routing"
)

// PublishScript is the Lua script every publish runs, whatever the group's
// ordering (a group switched to ordering KEY is then covered even before a
// producer's cached routing says so). One call writes one or more entries to
// one shard; a batch sends one call per shard and chunk of up to
// maxEntriesPerCall messages, pipelined.
//
//	KEYS[1]  the shard stream
//	KEYS[2]  its fence hash (routing.FenceKey, same cluster slot)
//	ARGV[1]  the consumer group: the fence hash's field
//	ARGV[2]  the routing metadataVersion the publish was routed with
//	ARGV[3]  "1" to add the field routing.FenceField (_rsc_rv) = ARGV[2] to
//	         every entry (the routing says ordering KEY), "0" not to
//	ARGV[4]  N of MAXLEN ~ N, "0" for no trimming
//	ARGV[5…] per entry: the number c of field and value arguments, then
//	         those c arguments
//
// A fence above ARGV[2] means the coordinator is making a newer shard layout
// visible: the script writes nothing and answers the error "RSCSTALE
// <fence>". Otherwise each entry is written with XADD KEYS[1] NOMKSTREAM
// [MAXLEN ~ N] * [_rsc_rv ARGV[2]] field value …, and the answer is the array
// of their ids, in order; or nil, with nothing written, when the stream does
// not exist (NOMKSTREAM). A fence that is not a decimal integer is refused
// with an "ERR" error rather than ignored. The fence field comes first in a
// tagged entry: readers do not depend on field order.
const PublishScript = fenceLua + xaddLua + `local ids, i, n = {}, 5, #ARGV
while i <= n do
  local last = i + tonumber(ARGV[i])
  local id = xadd(i + 1, last)
  if not id then
    return false
  end
  ids[#ids + 1] = id
  i = last + 1
end
return ids
`

// fenceLua starts both scripts: the fence check (KEYS[2], ARGV[1], ARGV[2]).
const fenceLua = `local fence = redis.call('HGET', KEYS[2], ARGV[1])
if fence then
  local f = tonumber(fence)
  if f == nil then
    return redis.error_reply('ERR rsc: fence ' .. KEYS[2] .. ' ' .. ARGV[1] .. ' is not a number: ' .. fence)
  end
  if f > tonumber(ARGV[2]) then
    return redis.error_reply('RSCSTALE ' .. fence)
  end
end
`

// xaddLua defines, for both scripts, xadd(first, last, iid): the XADD of
// one entry whose field and value arguments are ARGV[first..last], to
// KEYS[1], NOMKSTREAM, trimmed and tagged as ARGV[3] and ARGV[4] say, and,
// when the script set idmp to a producer id, with IDMP idmp iid (Redis 8.6's
// idempotent XADD: an iid the stream's map has answers its entry's id and
// writes nothing). It answers the entry's id, or false when the stream does
// not exist.
const xaddLua = `local tag, maxlen, rv, idmp = ARGV[3] == '1', ARGV[4], ARGV[2], false
local function xadd(first, last, iid)
  if idmp then
    if maxlen == '0' then
      if tag then
        return redis.call('XADD', KEYS[1], 'NOMKSTREAM', 'IDMP', idmp, iid, '*', '` + routing.FenceField + `', rv, unpack(ARGV, first, last))
      end
      return redis.call('XADD', KEYS[1], 'NOMKSTREAM', 'IDMP', idmp, iid, '*', unpack(ARGV, first, last))
    end
    if tag then
      return redis.call('XADD', KEYS[1], 'NOMKSTREAM', 'IDMP', idmp, iid, 'MAXLEN', '~', maxlen, '*', '` + routing.FenceField + `', rv, unpack(ARGV, first, last))
    end
    return redis.call('XADD', KEYS[1], 'NOMKSTREAM', 'IDMP', idmp, iid, 'MAXLEN', '~', maxlen, '*', unpack(ARGV, first, last))
  end
  if maxlen == '0' then
    if tag then
      return redis.call('XADD', KEYS[1], 'NOMKSTREAM', '*', '` + routing.FenceField + `', rv, unpack(ARGV, first, last))
    end
    return redis.call('XADD', KEYS[1], 'NOMKSTREAM', '*', unpack(ARGV, first, last))
  end
  if tag then
    return redis.call('XADD', KEYS[1], 'NOMKSTREAM', 'MAXLEN', '~', maxlen, '*', '` + routing.FenceField + `', rv, unpack(ARGV, first, last))
  end
  return redis.call('XADD', KEYS[1], 'NOMKSTREAM', 'MAXLEN', '~', maxlen, '*', unpack(ARGV, first, last))
end
`

// maxEntriesPerCall bounds the entries of one script call: Redis runs a
// script without serving other clients, and a pipeline of XADDs would not
// hold them up.
const maxEntriesPerCall = 64

// staleErrPrefix starts the script's answer when a fence refused a publish.
const staleErrPrefix = "RSCSTALE"

var publishScript = redis.NewScript(PublishScript)

// Back-off between routing refreshes while a refreshed routing is still older
// than a fence that refused a publish: the coordinator raises fences right
// before it makes the new layout visible, so the wait is usually milliseconds.
const (
	staleMinBackoff = 5 * time.Millisecond
	staleMaxBackoff = 200 * time.Millisecond
)

// StaleError is a publish a shard's fence refused: the routing it used is
// older than the fence (a resharding of an ordered group is under way), and
// no routing at least as new as the fence came within Config.StaleTimeout.
// Nothing was written. It matches ErrStaleRouting.
type StaleError struct {
	StreamKey string
	// Fence is the fence's version; MetadataVersion the routing's.
	Fence, MetadataVersion int64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("producer: %s is fenced at metadataVersion %d, above the routing's %d (a resharding is under way); nothing was written",
		e.StreamKey, e.Fence, e.MetadataVersion)
}

// Is matches ErrStaleRouting.
func (e *StaleError) Is(target error) bool { return target == ErrStaleRouting }

// staleFence reports whether err is the script's RSCSTALE answer, and the
// fence it named (the routing's version + 1 when it cannot be read).
func staleFence(err error, key string, mv int64) (*StaleError, bool) {
	if err == nil || !redis.HasErrorPrefix(err, staleErrPrefix) {
		return nil, false
	}
	msg := strings.TrimPrefix(err.Error(), "ERR ")
	f, perr := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(msg, staleErrPrefix)), 10, 64)
	if perr != nil || f <= mv {
		f = mv + 1
	}
	return &StaleError{StreamKey: key, Fence: f, MetadataVersion: mv}, true
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// staleWait is one publish's (or batch's) state after a fence refused it.
type staleWait struct {
	last     *StaleError // the latest refusal; nil before the first
	deadline time.Time
	backoff  time.Duration
}

// refused records a refusal; the first one starts the timeout.
func (s *staleWait) refused(e *StaleError, timeout time.Duration) {
	if s.last == nil {
		s.deadline = time.Now().Add(timeout)
	}
	if s.last == nil || e.Fence >= s.last.Fence {
		s.last = e
	}
	s.backoff = 0
}

// behind reports whether r is older than the fence that refused the publish:
// publishing with it again would be refused too.
func (s *staleWait) behind(r *route) bool {
	return s.last != nil && r.routing.MetadataVersion < s.last.Fence
}

// wait sleeps before the next routing refresh; it returns the refusal once
// the timeout is over, or ctx's error.
func (s *staleWait) wait(ctx context.Context) error {
	left := time.Until(s.deadline)
	if left <= 0 {
		return s.last
	}
	s.backoff = min(max(2*s.backoff, staleMinBackoff), staleMaxBackoff)
	t := time.NewTimer(min(s.backoff, left))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w (waiting for a routing at least as new as the fence: %w)", ctx.Err(), s.last)
	}
}
