package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/rs/zerolog"
	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// The guard: the log is what the coordinator guards most. Two things can take
// it from under a running coordinator, and neither may pass silently:
//
//   - A Redis that may evict it. Every few seconds (Config.GuardInterval) the
//     guard asks Config.RedisGuard for the maxmemory-policy of the servers
//     holding the coordinator's keys: one that can evict them makes every
//     decision that would append refused (REDIS_EVICTION_POLICY, /readyz
//     503) until it is fixed, unless Config.AllowEviction. Persistence off is
//     reported, not refused.
//   - A log that lost what the projection applied: a Redis restart without
//     persistence, FLUSHALL, eviction, a failover that lost acknowledged
//     entries. The replica notices that the log no longer holds its
//     projection's last entry (at every catch-up, and every GuardInterval)
//     and keeps the state it holds: reads and steady heartbeats go on, every
//     decision that would append is refused (LOG_LOST), /readyz says
//     LOG_LOST, until an operator restores the log from that state
//     (Service.RestoreLog: a snapshot and a log.restored entry) or the log
//     holds the entry again. Nothing is ever folded onto a state whose last
//     entries the log no longer has, and nothing is thrown away because Redis
//     lost its copy.
//
// A follower in LOG_LOST follows a restore the leader wrote: it reloads from
// the restore's snapshot when that restored its own state or a longer one,
// and stays LOG_LOST, saying so, when its own projection is longer than the
// one restored (restart it to follow the log, or restore from it).

// logGuard is the guard of the log (above): it reads Redis's eviction
// policy, holds the projection when the log lost what it applied, follows a
// restore the leader wrote and restores the log from the projection
// (restore.go). It reloads through the loader.
type logGuard struct {
	tl     *trimmedLog
	snaps  *snapshots
	load   *loader
	state  *projection.State
	life   *lifecycle
	recent *recentIDs
	// answered is the last entry this process appended whose append
	// answered that it landed, acknowledged by Config.LogReplicas replicas
	// ("" none; the writer's alone).
	answered string
	// redis, allowEviction, logReplicas, coordinatorID and afterAppend are
	// Config's RedisGuard, AllowEviction, LogReplicas, CoordinatorID and
	// AfterAppend.
	redis         RedisGuard
	allowEviction bool
	logReplicas   int
	coordinatorID string
	afterAppend   func(rec events.Record)
	logger        zerolog.Logger
}

// noteAppended notes the ids of entries this process appended, once
// applied; answered: their append said they landed (in the writer).
func (g *logGuard) noteAppended(answered bool, ids ...string) {
	g.recent.note(ids...)
	if answered && len(ids) > 0 {
		g.answered = ids[len(ids)-1]
	}
}

// checkRedis reads the Redis guard once and refuses appends while it
// reports a policy that can evict the log (unless Config.AllowEviction).
func (g *logGuard) checkRedis(ctx context.Context) {
	if g.redis == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	s, err := g.redis.CheckRedis(cctx)
	cancel()
	if err != nil {
		g.logger.Debug().Err(err).Msg("guard: read Redis's eviction policy")
		return
	}
	s.Allowed = s.Evicts && g.allowEviction
	s.CheckedAt = time.Now()
	prev := g.life.safety.Swap(&s)
	was := prev != nil && prev.Evicts
	switch {
	case s.Evicts && s.Allowed:
		g.life.evicting.Store(nil)
		if !was {
			g.logger.Warn().Str("maxmemoryPolicy", s.Policy).Str("node", s.Node).Msg("--allow-redis-eviction: " + s.Why + "; the coordinator goes on, and Redis may drop the log")
		}
	case s.Evicts:
		g.life.evicting.Store(commands.WithMsg(commands.ErrEvictionPolicy, "Redis can evict the event log: %s. Nothing is recorded until it is noeviction (CONFIG SET maxmemory-policy noeviction); reads and steady heartbeats go on", s.Why))
		if !was {
			g.logger.Error().Str("maxmemoryPolicy", s.Policy).Str("node", s.Node).Msg("Redis can evict the event log: " + s.Why + "; refusing every decision that would append (503 REDIS_EVICTION_POLICY, /readyz 503) until maxmemory-policy is noeviction")
		}
	default:
		if g.life.evicting.Swap(nil) != nil {
			g.logger.Info().Str("maxmemoryPolicy", s.Policy).Msg("Redis no longer evicts the event log: deciding again")
		}
	}
}

// check reloads the projection before a catch-up when the log was trimmed
// past it, and holds it when the log no longer holds its last entry
// (holdIfLogLost: ErrLogLost).
func (g *logGuard) check(ctx context.Context) error {
	if err := g.load.reloadIfTrimmedPast(ctx); err != nil {
		return err
	}
	return g.holdIfLogLost(ctx)
}

// holdIfLogLost keeps the projection when the log no longer holds its last
// entry, and says why (ErrLogLost): Redis replicates asynchronously, and a
// failover that promoted a replica which had not received the newest entries
// leaves the log behind (its last id below the projection's position) or,
// once another writer appended, holding other entries after the same point;
// a Redis restarted without persistence, a FLUSHALL or an eviction leaves no
// log at all. Folding on would build on entries the log no longer has, and
// reloading from the log would throw away the only full copy of the state:
// the replica does neither. It leaves the loss when the log holds the entry
// again, or when the leader restored the log from this state (or a longer
// one): it then reloads from the restore's snapshot.
func (g *logGuard) holdIfLogLost(ctx context.Context) error {
	at := g.state.LastID()
	if at == events.ZeroID {
		return nil
	}
	trimmed, err := g.tl.TrimmedTo(ctx)
	if err != nil {
		return err
	}
	if cmp, _ := events.CompareIDs(at, trimmed); cmp <= 0 {
		return nil // trimmed away: reloadIfTrimmedPast's case
	}
	held, err := g.tl.log.Get(ctx, []string{at})
	if err != nil {
		return fmt.Errorf("check the log still holds %s: %w", at, err)
	}
	if len(held) == 1 {
		if g.life.lost.Swap(nil) != nil {
			g.logger.Info().Str("lastId", at).Msg("the log holds this projection's last entry again: deciding again")
		}
		return nil
	}
	restore, err := g.restoreNotApplied(ctx)
	if err != nil {
		return err
	}
	if restore != nil {
		if cmp, _ := events.CompareIDs(restore.From, at); cmp >= 0 {
			return g.followRestore(ctx, *restore, at)
		}
	}
	loss := g.life.lost.Load()
	if loss == nil || (restore != nil && loss.RestoredAt != restore.ID) {
		fresh, err := g.measureLoss(ctx, at)
		if err != nil {
			return err
		}
		if loss == nil && restore == nil {
			within, err := g.withinReplicasWindow(ctx, fresh)
			if err != nil {
				return err
			}
			if within {
				g.logger.Warn().Str("lastId", at).Str("logLastId", fresh.LogLastID).Int64("lostEntries", fresh.LostEntries).Str("answered", g.answered).
					Msg("a Redis failover lost log entries no replica had acknowledged (--log-replicas): no decision answered is among them; reloading the projection from the log")
				return g.load.reloadFromLog(ctx)
			}
		}
		if loss != nil {
			fresh.Since = loss.Since
		} else {
			g.noteLoss(fresh)
		}
		if restore != nil {
			fresh.RestoredAt, fresh.RestoredFrom, fresh.Longer = restore.ID, restore.From, true
			g.logger.Error().Str("lastId", at).Str("restoredAt", restore.ID).Str("restoredFrom", restore.From).Msg("the leader restored the log from a state before this replica's: this replica holds entries the restored log lacks and stays LOG_LOST (restart it to follow the log, or restore from it)")
		}
		g.life.lost.Store(fresh)
		loss = fresh
	}
	return commands.WithMsg(commands.ErrLogLost, "%s", loss.Message())
}

// noteLoss logs and counts a loss found now.
func (g *logGuard) noteLoss(l *LogLoss) {
	ev := g.logger.Error().Str("cause", l.Cause).Str("lastId", l.ProjectionLastID).Str("logLastId", l.LogLastID).Int64("logLength", l.LogLength)
	switch l.Cause {
	case LossLogGone:
		g.life.lossesGone.Add(1)
		ev.Msg("log lost: the event log is gone; keeping the state this coordinator holds, serving reads and steady heartbeats, recording nothing (LOG_LOST) until it is restored (POST /coord/v1/log/restore)")
	default:
		g.life.lossesEntries.Add(1)
		ev.Int64("lostEntries", l.LostEntries).Bool("atLeast", l.AtLeast).Msg("a Redis failover lost log entries this coordinator applied; keeping its state, serving reads and steady heartbeats, recording nothing (LOG_LOST) until the log is restored (POST /coord/v1/log/restore)")
	}
}

// measureLoss reads what the log holds now: gone or empty, or how many of
// the entries the projection applied last it lost (a failover loses the
// newest: those after the newest one it still holds).
func (g *logGuard) measureLoss(ctx context.Context, at string) (*LogLoss, error) {
	last, err := g.tl.log.LastID(ctx)
	if err != nil {
		return nil, fmt.Errorf("read log position: %w", err)
	}
	n, err := g.tl.log.Len(ctx)
	if err != nil {
		return nil, err
	}
	l := &LogLoss{Cause: LossLogGone, ProjectionLastID: at, LogLastID: last, LogLength: n, Since: time.Now().UTC()}
	if n == 0 {
		return l, nil
	}
	l.Cause = LossEntriesLost
	ids := g.recent.list()
	kept, err := g.tl.log.Get(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("count the entries the log lost: %w", err)
	}
	newest := -1 // index in ids of the newest entry the log still holds
	j := 0
	for i, id := range ids {
		if j < len(kept) && kept[j].ID == id {
			newest = i
			j++
		}
	}
	l.LostEntries = int64(len(ids) - 1 - newest)
	l.AtLeast = newest < 0 && len(ids) > 0
	if len(ids) == 0 || ids[len(ids)-1] != at {
		// The ids noted do not end at the projection's position (a
		// projection loaded without folding, say): the count is a floor.
		l.LostEntries = max(l.LostEntries, 1)
		l.AtLeast = true
	}
	return l, nil
}

// withinReplicasWindow reports whether a loss lost only entries no replica
// had acknowledged (Config.LogReplicas): the log lost entries but still
// holds the last one this process appended and had acknowledged, so no
// decision it answered is among those lost. A decision answered
// --log-replicas 0 is answered by the primary alone: every loss counts.
func (g *logGuard) withinReplicasWindow(ctx context.Context, l *LogLoss) (bool, error) {
	if g.logReplicas <= 0 || l.Cause != LossEntriesLost {
		return false, nil
	}
	if g.answered == "" {
		return true, nil
	}
	held, err := g.tl.log.Get(ctx, []string{g.answered})
	if err != nil {
		return false, fmt.Errorf("check the log still holds %s: %w", g.answered, err)
	}
	return len(held) == 1, nil
}

// restoreNotApplied is the log's last restore when the log still holds it
// and this projection has not applied it (nil otherwise).
func (g *logGuard) restoreNotApplied(ctx context.Context) (*projection.RestoreMark, error) {
	rs, ok := g.tl.log.(events.Restorable)
	if !ok {
		return nil, nil
	}
	id, err := rs.LastRestore(ctx)
	if err != nil || id == "" || id == g.state.LastRestore().ID {
		return nil, err
	}
	entries, err := g.tl.log.Get(ctx, []string{id})
	if err != nil || len(entries) == 0 {
		return nil, err
	}
	rec, err := events.Decode(entries[0].ID, entries[0].Data)
	if err != nil {
		return nil, err
	}
	ev, ok := rec.Event.(*events.LogRestored)
	if !ok {
		return nil, nil
	}
	return &projection.RestoreMark{ID: rec.ID, From: ev.RestoredFrom}, nil
}

// followRestore reloads the projection from the newest kept snapshot (the
// restore's or a later one) and the log after it: the leader restored the
// log from this replica's state, or from a longer one.
func (g *logGuard) followRestore(ctx context.Context, restore projection.RestoreMark, at string) error {
	g.logger.Warn().Str("lastId", at).Str("restoredAt", restore.ID).Str("restoredFrom", restore.From).Msg("the log was restored from this replica's state or a longer one: reloading from the restore's snapshot")
	if err := g.load.reloadFromSnapshot(ctx); err != nil {
		return err
	}
	if g.life.lost.Swap(nil) != nil {
		g.logger.Info().Str("lastId", g.state.LastID()).Msg("the log was restored: deciding again")
	}
	return nil
}
