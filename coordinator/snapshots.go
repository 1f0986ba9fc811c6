package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Log growth. Every snapshot makes the entries before it unnecessary for
// start-up, and the store keeps the newest few (Config.SnapshotKeep) so that an
// unreadable newest one falls back to an older one. With Config.TrimLog, every
// saved snapshot is followed by a trim of the log behind the OLDEST kept
// snapshot, so each kept snapshot still has its whole tail. Before the entries
// go, the resharding and admin history among them (every type ArchivedType
// selects) is copied to an archive under the same ids; membership chatter is
// dropped. What is lost is the ability to fold the state at a point before the
// oldest kept snapshot; the audit history of what operators and reshardings
// did, and every resharding's stateHistory (it is part of the projection),
// stay.

// snapshots are the kept snapshots of the projection: it saves them (one at
// a time), trims the log behind the oldest (Config.TrimLog) and picks the one
// a fold of the log can start from.
type snapshots struct {
	store   SnapshotStore // nil: no snapshots
	log     events.Log
	trimmer LogTrimmer // nil: the log is never trimmed
	keep    int        // Config.SnapshotKeep
	trim    bool       // Config.TrimLog
	logger  zerolog.Logger
	mu      sync.Mutex // one snapshot save at a time
}

// on reports whether snapshots are kept.
func (s *snapshots) on() bool { return s.store != nil }

// restore restores the newest kept snapshot that can start a fold of the log:
// it decodes, it is not ahead of the log (a log that was reset), it is not
// behind the trim point (the log holds its whole tail), and it holds no
// quarantine whose entry was removed from the log since (a repair lifts a
// quarantine: the prefix must be folded again from before the entry).
// Snapshots that cannot are logged and the next older one is tried. nil when
// none can.
func (s *snapshots) restore(ctx context.Context, trimmed string) (*projection.State, error) {
	st, _, err := s.restoreNoting(ctx, trimmed)
	return st, err
}

// restoreNoting is restore that also says which kept snapshot could not be
// decoded, if one could not ("" when none).
func (s *snapshots) restoreNoting(ctx context.Context, trimmed string) (*projection.State, string, error) {
	var undecodable string
	var lifted *projection.State // the newest snapshot whose quarantine the log lifted
	last, err := s.log.LastID(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("read log position: %w", err)
	}
	ids, err := s.store.Kept(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("list snapshots: %w", err)
	}
	legacy := len(ids) == 0
	if legacy {
		ids = []string{""} // one snapshot stored without its id
	}
	for _, id := range ids {
		var data []byte
		if legacy {
			data, err = s.store.Load(ctx)
		} else {
			data, err = s.store.LoadAt(ctx, id)
		}
		if err != nil {
			return nil, "", fmt.Errorf("load snapshot: %w", err)
		}
		if data == nil {
			if !legacy {
				s.logger.Warn().Str("snapshot", id).Msg("kept snapshot is gone; trying an older one")
			}
			continue
		}
		restored, err := projection.Restore(data)
		if err != nil {
			s.logger.Warn().Err(err).Str("snapshot", id).Msg("ignoring unreadable snapshot; trying an older one")
			if undecodable == "" {
				undecodable = orNewest(id)
			}
			continue
		}
		at := restored.LastID()
		if cmp, _ := events.CompareIDs(at, last); cmp > 0 {
			s.logger.Warn().Str("snapshot", at).Str("log", last).Msg("ignoring snapshot newer than the log; trying an older one")
			continue
		}
		if cmp, _ := events.CompareIDs(at, trimmed); cmp < 0 {
			s.logger.Warn().Str("snapshot", at).Str("trimmedTo", trimmed).Msg("ignoring snapshot older than the log's trim point")
			continue
		}
		if cmp, _ := events.CompareIDs(at, trimmed); cmp > 0 {
			// A failover can lose the entry a snapshot was taken at while the
			// log goes on past it (see logGuard.holdIfLogLost).
			held, err := s.log.Get(ctx, []string{at})
			if err != nil {
				return nil, "", fmt.Errorf("check the log holds snapshot %s: %w", at, err)
			}
			if len(held) == 0 {
				s.logger.Warn().Str("snapshot", at).Msg("ignoring snapshot taken at an entry the log no longer holds; trying an older one")
				continue
			}
		}
		gone, err := s.liftedQuarantine(ctx, restored, trimmed)
		if err != nil {
			return nil, "", err
		}
		if gone != nil {
			s.logger.Warn().Str("snapshot", at).Str("streamPrefix", gone.StreamPrefix).Str("entry", gone.EntryID).
				Msg("ignoring snapshot that holds a quarantine whose entry the log no longer holds (repaired, or deleted by hand); trying an older one, so the prefix is folded again")
			if lifted == nil {
				lifted = restored
			}
			continue
		}
		return restored, undecodable, nil
	}
	if lifted != nil && trimmed != events.ZeroID {
		// No older snapshot can start the fold, and the log cannot be folded
		// from zero: the quarantine stays until a snapshot from before its
		// entry is put back.
		s.logger.Warn().Str("snapshot", lifted.LastID()).Str("trimmedTo", trimmed).
			Msg("no kept snapshot from before the quarantining entry can start the fold of this trimmed log; restoring the one that holds the quarantine (the prefix stays quarantined)")
		return lifted, undecodable, nil
	}
	return nil, undecodable, nil
}

// liftedQuarantine returns a quarantine of st whose entry the log no longer
// holds (nil when there is none): the entry was removed after the trim point
// (replay repair, or XDEL), and a fold from a point before it lifts the
// quarantine.
func (s *snapshots) liftedQuarantine(ctx context.Context, st *projection.State, trimmed string) (*projection.Quarantine, error) {
	for _, q := range st.Quarantines() {
		if cmp, _ := events.CompareIDs(q.EntryID, trimmed); cmp <= 0 {
			continue // trimmed away: nothing can fold the prefix again
		}
		held, err := s.log.Get(ctx, []string{q.EntryID})
		if err != nil {
			return nil, fmt.Errorf("check the log holds quarantining entry %s: %w", q.EntryID, err)
		}
		if len(held) == 0 {
			return &q, nil
		}
	}
	return nil, nil
}

func orNewest(id string) string {
	if id == "" {
		return "the newest"
	}
	return id
}

// save encodes and stores a capture (outside every lock), then trims the log
// behind the oldest kept snapshot when configured.
func (s *snapshots) save(capture *projection.Capture) {
	if s.store == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := capture.Encode()
	if err != nil {
		s.logger.Error().Err(err).Msg("encode snapshot")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.store.Save(ctx, capture.LastID(), data, s.keep); err != nil {
		if errors.Is(err, events.ErrConflict) {
			s.logger.Info().Err(err).Msg("snapshot not saved: a newer one is stored")
			return
		}
		s.logger.Warn().Err(err).Msg("save snapshot")
		return
	}
	s.logger.Debug().Str("lastId", capture.LastID()).Int("bytes", len(data)).Msg("snapshot saved")
	s.trimLog()
}

// saveAt stores data as the snapshot at id (a restore's), one save at a time.
func (s *snapshots) saveAt(ctx context.Context, id string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.store.Save(ctx, id, data, s.keep)
}

// trimLog trims the log behind the oldest kept snapshot (Config.TrimLog), after
// a snapshot was saved.
func (s *snapshots) trimLog() {
	if !s.trim || s.trimmer == nil || s.store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids, err := s.store.Kept(ctx)
	if err != nil || len(ids) == 0 {
		if err != nil {
			s.logger.Warn().Err(err).Msg("trim log: list snapshots")
		}
		return
	}
	oldest := ids[len(ids)-1]
	n, removed, err := s.trimmer.TrimBefore(ctx, oldest, archived)
	if err != nil {
		s.logger.Warn().Err(err).Str("before", oldest).Msg("trim log")
		return
	}
	s.logger.Info().Str("before", oldest).Int64("archived", n).Int64("removed", removed).Msg("log trimmed behind the oldest kept snapshot")
}
