package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis 8.6's idempotent XADD (XADD key IDMP <producer> <id> * …) keeps, per
// stream and per producer id, the ids it added in the last IDMP-DURATION
// seconds, at most IDMP-MAXSIZE of them (defaults 100 s and 100; XCFGSET
// key IDMP-DURATION 1..86400 IDMP-MAXSIZE 1..10000 changes them, and clears
// the stream's map when a value changes). Producers with a DedupWindow use it
// where the server has it; the coordinator sets the two values on the shard
// streams it created, so that the map keeps what the window promises.

// MaxIDMPDuration and MaxIDMPMaxSize are the largest IDMP-DURATION and
// IDMP-MAXSIZE Redis accepts.
const (
	MaxIDMPDuration = 86400 * time.Second
	MaxIDMPMaxSize  = 10000
)

// IDMPSettings are the IDMP-DURATION (whole seconds) and IDMP-MAXSIZE the
// coordinator sets on its shard streams; the zero value sets nothing.
type IDMPSettings struct {
	Duration time.Duration
	MaxSize  int
}

// Off reports whether s sets nothing.
func (s IDMPSettings) Off() bool { return s.Duration == 0 }

// Check returns an error for settings Redis would refuse.
func (s IDMPSettings) Check() error {
	if s.Off() {
		return nil
	}
	if s.Duration < time.Second || s.Duration > MaxIDMPDuration || s.Duration%time.Second != 0 {
		return fmt.Errorf("IDMP-DURATION must be whole seconds between 1s and %s, not %s", MaxIDMPDuration, s.Duration)
	}
	if s.MaxSize < 1 || s.MaxSize > MaxIDMPMaxSize {
		return fmt.Errorf("IDMP-MAXSIZE must be between 1 and %d, not %d", MaxIDMPMaxSize, s.MaxSize)
	}
	return nil
}

// SupportsIDMP reports whether the server behind rdb (every master of a
// Redis Cluster) has Redis 8.6's idempotent XADD: whether COMMAND INFO knows
// XCFGSET, which came with it. A server that refuses COMMAND INFO is taken
// as one without.
func SupportsIDMP(ctx context.Context, rdb redis.UniversalClient) (bool, error) {
	has := func(ctx context.Context, c *redis.Client) (bool, error) {
		res, err := c.Do(ctx, "COMMAND", "INFO", "XCFGSET").Slice()
		if err != nil {
			var rerr redis.Error
			if errors.As(err, &rerr) {
				return false, nil
			}
			return false, err
		}
		return len(res) == 1 && res[0] != nil, nil
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		var all atomic.Bool
		all.Store(true)
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			ok, err := has(ctx, n)
			if err == nil && !ok {
				all.Store(false)
			}
			return err
		})
		return err == nil && all.Load(), err
	case *redis.Client:
		return has(ctx, c)
	default:
		return false, fmt.Errorf("%w: client %T", ErrUnsupportedEngine, rdb)
	}
}

// ErrIDMPMapLive: a shard stream's IDMP settings differ from those wanted,
// but its map holds ids (producers use it): XCFGSET would clear it, so the
// stream is left as it is (ConfigureIDMP).
var ErrIDMPMapLive = errors.New("the stream's IDMP map holds ids: its settings are left as they are")

// idmpScript sets IDMP-DURATION ARGV[1] and IDMP-MAXSIZE ARGV[2] on stream
// KEYS[1] when they differ and its map is empty, atomically with the read:
// 1 set, 0 already so, -1 no stream (nothing created), -2 a server without
// IDMP (XINFO STREAM has no idmp-duration), -3 left because its map holds ids.
var idmpScript = redis.NewScript(luaXInfo + `
if redis.call('TYPE', KEYS[1])['ok'] ~= 'stream' then return -1 end
local f = streamInfo(KEYS[1])
if f['idmp-duration'] == nil or f['idmp-maxsize'] == nil then return -2 end
if tonumber(f['idmp-duration']) == tonumber(ARGV[1]) and tonumber(f['idmp-maxsize']) == tonumber(ARGV[2]) then return 0 end
if (tonumber(f['iids-tracked']) or 0) > 0 then return -3 end
redis.call('XCFGSET', KEYS[1], 'IDMP-DURATION', ARGV[1], 'IDMP-MAXSIZE', ARGV[2])
return 1
`)

// idmpState is what Shards knows of the server's IDMP: the settings wanted
// and whether the server has it (probed once, when first needed).
type idmpState struct {
	mu       sync.Mutex
	settings IDMPSettings
	probed   bool
	has      bool
}

// SetIDMP sets the IDMP settings ConfigureIDMP applies (zero: none).
func (s *Shards) SetIDMP(settings IDMPSettings) error {
	if err := settings.Check(); err != nil {
		return err
	}
	s.idmp.mu.Lock()
	defer s.idmp.mu.Unlock()
	s.idmp.settings = settings
	return nil
}

// DetectIDMP probes the server for IDMP (SupportsIDMP) and remembers the
// answer for ConfigureIDMP; until a probe succeeds, ConfigureIDMP probes
// again. The coordinator calls it at start.
func (s *Shards) DetectIDMP(ctx context.Context) (bool, error) {
	has, err := SupportsIDMP(ctx, s.rdb)
	if err != nil {
		return false, err
	}
	s.idmp.mu.Lock()
	defer s.idmp.mu.Unlock()
	s.idmp.probed, s.idmp.has = true, has
	return has, nil
}

// ConfigureIDMP sets the IDMP settings (SetIDMP) on the shard streams of
// prefix in shards, which the caller created (never pass a stream someone
// else made: its producers chose its settings): on a server with IDMP only
// (nothing is sent to one without), on each stream whose settings differ,
// and only while its map is empty (XCFGSET clears it): one whose map holds
// ids is left as it is, and the error (ErrIDMPMapLive) names it. A missing
// stream is not created. It returns the keys it set.
func (s *Shards) ConfigureIDMP(ctx context.Context, prefix string, shards []int) ([]string, error) {
	s.idmp.mu.Lock()
	settings, probed, has := s.idmp.settings, s.idmp.probed, s.idmp.has
	s.idmp.mu.Unlock()
	if settings.Off() || len(shards) == 0 {
		return nil, nil
	}
	if !probed {
		var err error
		if has, err = s.DetectIDMP(ctx); err != nil {
			return nil, fmt.Errorf("probe the server for IDMP: %w", err)
		}
	}
	if !has {
		return nil, nil
	}
	keys := shardKeys(prefix, shards)
	secs, size := int64(settings.Duration/time.Second), settings.MaxSize
	var set, live []string
	var errs []error
	for i, c := range s.runEach(ctx, idmpScript, keys, secs, size) {
		n, err := c.Int()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("IDMP settings of %s: %w", keys[i], err))
		case n == 1:
			set = append(set, keys[i])
		case n == -3:
			live = append(live, keys[i])
		}
	}
	if len(live) > 0 {
		errs = append(errs, fmt.Errorf("%w: %s (wanted IDMP-DURATION %d IDMP-MAXSIZE %d)", ErrIDMPMapLive, strings.Join(live, ", "), secs, size))
	}
	return set, errors.Join(errs...)
}
