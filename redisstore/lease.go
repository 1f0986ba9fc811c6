package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
)

// The leader lease of a log is one Redis hash next to it (SameSlotKey(log,
// "leader")): holder, url, token (the fencing token of the current term),
// expires (Redis server time in ms) and fence (the last token ever issued, never
// reset, so tokens only grow). Every script reads the clock with TIME inside
// Redis, so replicas never compare their own clocks.
//
// A replica that holds the lease appends through FencedLog, whose script checks
// in the same atomic step that the lease is unexpired and carries the caller's
// token: a leader that was paused or partitioned past its lease, or replaced by
// a newer term, cannot append even if it still believes it leads.

// leaseClock is shared by the scripts: now in ms from Redis's clock.
const leaseClock = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// acquireScript: KEYS[1] lease; ARGV holder, url, ttl ms. Returns
// {token, holder, url, remaining ms, self (1/0)}.
var acquireScript = redis.NewScript(leaseClock + `
local h = redis.call('HMGET', KEYS[1], 'holder', 'url', 'token', 'expires')
local exp = tonumber(h[4] or '0') or 0
if h[1] and h[1] ~= '' and exp > now then
  if h[1] ~= ARGV[1] then
    return {tonumber(h[3]), h[1], h[2] or '', exp - now, 0}
  end
  redis.call('HSET', KEYS[1], 'url', ARGV[2], 'expires', now + tonumber(ARGV[3]))
  return {tonumber(h[3]), h[1], ARGV[2], tonumber(ARGV[3]), 1}
end
local tok = redis.call('HINCRBY', KEYS[1], 'fence', 1)
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'url', ARGV[2], 'token', tok, 'expires', now + tonumber(ARGV[3]))
return {tok, ARGV[1], ARGV[2], tonumber(ARGV[3]), 1}
`)

// renewScript: KEYS[1] lease; ARGV holder, token, ttl ms. 1 renewed, 0 lost.
var renewScript = redis.NewScript(leaseClock + `
local h = redis.call('HMGET', KEYS[1], 'holder', 'token', 'expires')
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] or (tonumber(h[3] or '0') or 0) <= now then
  return 0
end
redis.call('HSET', KEYS[1], 'expires', now + tonumber(ARGV[3]))
return 1
`)

// releaseScript: KEYS[1] lease; ARGV holder, token. Ends the term at once.
var releaseScript = redis.NewScript(`
local h = redis.call('HMGET', KEYS[1], 'holder', 'token')
if h[1] == ARGV[1] and h[2] == ARGV[2] then
  redis.call('HSET', KEYS[1], 'holder', '', 'url', '', 'expires', 0)
  return 1
end
return 0
`)

// leaderScript: KEYS[1] lease. {holder, url, token, remaining ms} or {} when
// nobody holds it.
var leaderScript = redis.NewScript(leaseClock + `
local h = redis.call('HMGET', KEYS[1], 'holder', 'url', 'token', 'expires')
local exp = tonumber(h[4] or '0') or 0
if not h[1] or h[1] == '' or exp <= now then return {} end
return {h[1], h[2] or '', tonumber(h[3]), exp - now}
`)

// leaseCheck opens every fenced script: it refuses with RSCFENCED and the
// lease's token unless the lease (KEYS[2]) is unexpired and carries the
// caller's token ARGV[1].
const leaseCheck = leaseClock + `
local h = redis.call('HMGET', KEYS[2], 'token', 'expires')
if h[1] ~= ARGV[1] or (tonumber(h[2] or '0') or 0) <= now then
  return redis.error_reply('RSCFENCED ' .. tostring(h[1]))
end
`

// fencedAppendScript is compare-and-append (appendScript) behind a lease check:
// KEYS[1] log, KEYS[2] lease; ARGV[1] token, ARGV[2] position, ARGV[3..] entries.
var fencedAppendScript = redis.NewScript(leaseCheck + compareAndAppendLua(2))

// SameSlotKey names a key that lives in the same Redis Cluster hash slot as
// key, so one script may touch both: "key:suffix" when key carries a hash tag,
// else "{key}:suffix". A key with a "}" but no hash tag (such as "a}b" or
// "x{}y") has no such name and is an error.
func SameSlotKey(key, suffix string) (string, error) {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key + ":" + suffix, nil
		}
	}
	if strings.ContainsRune(key, '}') {
		return "", fmt.Errorf("key %q has a '}' outside a hash tag: no key can share its cluster slot", key)
	}
	return "{" + key + "}:" + suffix, nil
}

// LeaseInfo describes the holder of a lease.
type LeaseInfo struct {
	Holder string        // replica identity ("" when nobody holds it)
	URL    string        // where the holder takes forwarded writes
	Token  int64         // fencing token of the holder's term
	TTL    time.Duration // remaining lease time by Redis's clock
	Self   bool          // the holder is this replica
}

// Lease is the leader lease of one log, held (or sought) by one replica
// (cmd/coordinator adapts it to commands.LeaderLease).
type Lease struct {
	rdb    redis.UniversalClient
	key    string
	holder string
	url    string
	repl   Replication // what a new term's token must reach before it counts

	mu    sync.Mutex
	token int64 // this replica's term; 0 while it does not lead
}

// NewLease returns the lease of the log at logKey for the replica named id
// (a random suffix makes every process a distinct holder, so a restarted
// replica never mistakes its predecessor's term for its own), which takes
// forwarded writes at url.
// The lease key shares the log's cluster slot (SameSlotKey), since every fenced
// append reads both in one script.
func NewLease(rdb redis.UniversalClient, logKey, id, url string) (*Lease, error) {
	if logKey == "" {
		logKey = DefaultLogStream
	}
	key, err := SameSlotKey(logKey, "leader")
	if err != nil {
		return nil, fmt.Errorf("leader lease of log %q: %w", logKey, err)
	}
	var nonce [4]byte
	_, _ = rand.Read(nonce[:])
	return &Lease{rdb: rdb, key: key, holder: id + "#" + hex.EncodeToString(nonce[:]), url: url}, nil
}

// SetURL changes the address this replica advertises from its next Acquire
// on (the listener's port may be known only after start).
func (l *Lease) SetURL(url string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.url = url
}

// Key is the lease's Redis key.
func (l *Lease) Key() string { return l.key }

// SetReplication makes Acquire wait for r.Replicas replicas to acknowledge the
// term it takes: a token only the old primary had would be issued again after
// a failover, to another replica, and two leaders would hold the same token.
// Call it before the first Acquire.
func (l *Lease) SetReplication(r Replication) error {
	return r.setOn(l.rdb, &l.repl)
}

// Holder is this replica's identity in the lease.
func (l *Lease) Holder() string { return l.holder }

// Token is this replica's fencing token (0 when it does not hold the lease).
func (l *Lease) Token() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token
}

func ms(d time.Duration) int64 {
	if d < time.Millisecond {
		return 1
	}
	return d.Milliseconds()
}

// Acquire takes the lease for ttl when nobody holds it, or extends it when this
// replica does; it reports the holder after the call.
func (l *Lease) Acquire(ctx context.Context, ttl time.Duration) (LeaseInfo, error) {
	l.mu.Lock()
	url := l.url
	l.mu.Unlock()
	res, err := l.repl.runScript(ctx, l.rdb, acquireScript, []string{l.key}, []any{l.holder, url, ms(ttl)}).Slice()
	if err != nil {
		return LeaseInfo{}, fmt.Errorf("acquire leader lease %s: %w", l.key, err)
	}
	if len(res) != 5 {
		return LeaseInfo{}, fmt.Errorf("acquire leader lease %s: unexpected answer %v", l.key, res)
	}
	info := LeaseInfo{Token: toInt(res[0]), Holder: toStr(res[1]), URL: toStr(res[2]), TTL: time.Duration(toInt(res[3])) * time.Millisecond, Self: toInt(res[4]) == 1}
	l.mu.Lock()
	if info.Self {
		l.token = info.Token
	} else {
		l.token = 0
	}
	l.mu.Unlock()
	return info, nil
}

// Renew extends this replica's term by ttl; false: the term is over.
func (l *Lease) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	tok := l.Token()
	if tok == 0 {
		return false, nil
	}
	n, err := renewScript.Run(ctx, l.rdb, []string{l.key}, l.holder, tok, ms(ttl)).Int()
	if err != nil {
		return false, fmt.Errorf("renew leader lease %s: %w", l.key, err)
	}
	if n != 1 {
		l.mu.Lock()
		if l.token == tok {
			l.token = 0
		}
		l.mu.Unlock()
		return false, nil
	}
	return true, nil
}

// Release ends this replica's term at once (graceful shutdown).
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	tok := l.token
	l.token = 0
	l.mu.Unlock()
	if tok == 0 {
		return nil
	}
	if err := releaseScript.Run(ctx, l.rdb, []string{l.key}, l.holder, tok).Err(); err != nil {
		return fmt.Errorf("release leader lease %s: %w", l.key, err)
	}
	return nil
}

// Leader reports who holds the lease now.
func (l *Lease) Leader(ctx context.Context) (LeaseInfo, error) {
	res, err := leaderScript.Run(ctx, l.rdb, []string{l.key}).Slice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return LeaseInfo{}, fmt.Errorf("read leader lease %s: %w", l.key, err)
	}
	if len(res) != 4 {
		return LeaseInfo{}, nil
	}
	info := LeaseInfo{Holder: toStr(res[0]), URL: toStr(res[1]), Token: toInt(res[2]), TTL: time.Duration(toInt(res[3])) * time.Millisecond}
	info.Self = info.Holder == l.holder && info.Token == l.Token()
	return info, nil
}

// FencedLog returns log whose appends succeed only while this lease is held:
// the token check and the compare-and-append are one atomic script.
func (l *Lease) FencedLog(log *Log) events.Log { return &fencedLog{Log: log, lease: l} }

type fencedLog struct {
	*Log
	lease *Lease
}

// fencedIndexedAppendScript is the indexed compare-and-append behind the lease
// check: KEYS[1] log, KEYS[2] lease, KEYS[3] index hash, KEYS[4..] index
// streams; ARGV[1] token, ARGV[2] position, then as indexedAppendLua.
var fencedIndexedAppendScript = redis.NewScript(leaseCheck + indexedAppendLua(2, 3))

// AppendIndexed is the fenced, indexed append (events.Indexed).
func (f *fencedLog) AppendIndexed(ctx context.Context, after string, batch []events.Draft) ([]string, error) {
	pos, tok, err := f.begin(after, len(batch))
	if err != nil || len(batch) == 0 {
		return nil, err
	}
	keys, args := f.index.appendArgs(batch, 2)
	res, err := f.repl.runScript(ctx, f.rdb, fencedIndexedAppendScript, append([]string{f.key, f.lease.key}, keys...), append([]any{tok, pos.String()}, args...)).StringSlice()
	if err != nil {
		return nil, appendError(err, f.key, after, len(batch), tok)
	}
	return res, nil
}

func (f *fencedLog) Append(ctx context.Context, after string, batch [][]byte) ([]string, error) {
	pos, tok, err := f.begin(after, len(batch))
	if err != nil || len(batch) == 0 {
		return nil, err
	}
	args := make([]any, 0, len(batch)+2)
	args = append(args, tok, pos.String())
	for _, b := range batch {
		args = append(args, b)
	}
	res, err := f.repl.runScript(ctx, f.rdb, fencedAppendScript, []string{f.key, f.lease.key}, args).StringSlice()
	if err != nil {
		return nil, appendError(err, f.key, after, len(batch), tok)
	}
	return res, nil
}

// begin checks an append's position and, for a batch of n > 0 entries,
// takes the lease's fencing token.
func (f *fencedLog) begin(after string, n int) (events.ID, int64, error) {
	pos, err := events.ParseID(after)
	if err != nil || n == 0 {
		return pos, 0, err
	}
	tok, err := f.token()
	return pos, tok, err
}

// token is the lease's fencing token, or ErrFenced when this replica does not
// hold the lease.
func (f *fencedLog) token() (int64, error) {
	tok := f.lease.Token()
	if tok == 0 {
		return 0, fmt.Errorf("%w: this replica does not hold the leader lease", events.ErrFenced)
	}
	return tok, nil
}

func toStr(v any) string {
	s, _ := v.(string)
	return s
}
