package main

import (
	"context"
	"fmt"
	"time"

	"github.com/rscoord/rsc/redisstore"
)

// Redis 8.6's idempotent XADD keeps a map per shard stream of the ids each
// producer added (redisstore/idmp.go). The coordinator sets its size and
// lifetime on the shard streams it creates, so that it holds what producers'
// DedupWindow promises: --idmp-duration (default: --dedup-layout-window, at
// most 24 h, the longest Redis keeps) and --idmp-maxsize (default 10000, the
// most Redis keeps per producer).

// DefaultIDMPMaxSize is --idmp-maxsize's default: the largest Redis accepts.
const DefaultIDMPMaxSize = redisstore.MaxIDMPMaxSize

// checkIDMPFlags refuses --idmp-duration and --idmp-maxsize values Redis
// would refuse.
func (m *Main) checkIDMPFlags() error {
	if d := m.IDMPDuration; d > 0 && (d < time.Second || d > redisstore.MaxIDMPDuration || d%time.Second != 0) {
		return fmt.Errorf("--idmp-duration must be whole seconds between 1s and %s (0: --dedup-layout-window, negative: off), not %s", redisstore.MaxIDMPDuration, d)
	}
	if m.IDMPMaxSize < 1 || m.IDMPMaxSize > redisstore.MaxIDMPMaxSize {
		return fmt.Errorf("--idmp-maxsize must be between 1 and %d, not %d", redisstore.MaxIDMPMaxSize, m.IDMPMaxSize)
	}
	return nil
}

// idmpSettings are the IDMP settings of the flags: --idmp-duration, or when
// it is 0 --dedup-layout-window rounded up to whole seconds and at most 24 h
// (none when that is 0 too, or --idmp-duration is negative).
func (m *Main) idmpSettings() redisstore.IDMPSettings {
	d := m.IDMPDuration
	if d == 0 {
		d = min((m.DedupLayoutWindow + time.Second - 1).Truncate(time.Second), redisstore.MaxIDMPDuration)
	}
	if d <= 0 {
		return redisstore.IDMPSettings{}
	}
	return redisstore.IDMPSettings{Duration: d, MaxSize: m.IDMPMaxSize}
}

// setupIDMP gives shards the IDMP settings and probes the server for IDMP,
// logging what it found. A server that does not answer yet is probed again
// at the first provisioning.
func (m *Main) setupIDMP(ctx context.Context, shards *redisstore.Shards) error {
	s := m.idmpSettings()
	if err := shards.SetIDMP(s); err != nil {
		return fmt.Errorf("--idmp-duration, --idmp-maxsize: %w", err)
	}
	if s.Off() {
		m.logger.Info().Msg("IDMP settings off (--idmp-duration, --dedup-layout-window): shard streams keep Redis' own")
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, redisCheckWait)
	defer cancel()
	has, err := shards.DetectIDMP(pctx)
	switch {
	case err != nil:
		m.logger.Warn().Err(err).Msg("cannot ask the Redis server for IDMP yet: asked again at the next provisioning")
	case has:
		m.logger.Info().Int64("idmpDuration", int64(s.Duration/time.Second)).Int("idmpMaxSize", s.MaxSize).
			Msg("redis has IDMP (idempotent XADD): shard streams the coordinator creates get these IDMP-DURATION (seconds) and IDMP-MAXSIZE")
	default:
		m.logger.Info().Msg("redis has no IDMP (idempotent XADD, Redis 8.6): nothing to set on shard streams")
	}
	return nil
}
