package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

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

// RedisGuard reads whether the Redis servers holding the coordinator's keys
// can drop them (cmd adapts redisstore.CheckDurability).
type RedisGuard interface {
	CheckRedis(ctx context.Context) (RedisSafety, error)
}

// RedisSafety is what a RedisGuard found.
type RedisSafety struct {
	// Policy is the maxmemory-policy that matters (the evicting one, else
	// that of the server holding the log); Node its server ("" for one).
	Policy string
	Node   string
	// Evicts reports a policy that can evict the coordinator's keys; Why
	// says how.
	Evicts bool
	Why    string
	// Persistence of the server holding the log: aof, rdb, aof+rdb, off or
	// unknown.
	Persistence string
	// Allowed: Evicts, accepted by Config.AllowEviction.
	Allowed bool
	// CheckedAt is when it was read.
	CheckedAt time.Time
}

// Causes of a LogLoss.
const (
	// LossLogGone: the log key is gone or empty.
	LossLogGone = "LOG_GONE"
	// LossEntriesLost: the log holds entries, but not the last one the
	// projection applied (a failover lost the newest).
	LossEntriesLost = "ENTRIES_LOST"
)

// LogLoss is what a replica found when the log no longer held the last entry
// its projection applied.
type LogLoss struct {
	Cause string
	// ProjectionLastID is the position of the state kept; LogLastID and
	// LogLength what the log held when the loss was found.
	ProjectionLastID string
	LogLastID        string
	LogLength        int64
	// LostEntries (ENTRIES_LOST) is how many entries the projection applied
	// after the newest one the log still holds, counted among the last
	// recentIDsKept it applied; AtLeast when the count reached that bound.
	LostEntries int64
	AtLeast     bool
	Since       time.Time
	// RestoredAt and RestoredFrom name a restore the leader wrote of
	// another state; Longer reports that this replica's projection is past
	// the restored position (it holds entries the restored log lacks).
	RestoredAt   string
	RestoredFrom string
	Longer       bool
}

// Message says what happened and what to do.
func (l *LogLoss) Message() string {
	var what string
	switch l.Cause {
	case LossLogGone:
		what = fmt.Sprintf("the event log is gone (its key is missing or empty: a Redis restart without persistence, FLUSHALL, eviction) while this coordinator holds the state up to %s", l.ProjectionLastID)
	default:
		n := fmt.Sprint(l.LostEntries)
		if l.AtLeast {
			n = "at least " + n
		}
		what = fmt.Sprintf("a Redis failover lost %s log entries this coordinator applied (the log ends at %s, this state at %s)", n, l.LogLastID, l.ProjectionLastID)
	}
	if l.Longer {
		return fmt.Sprintf("%s; the leader restored the log at %s from the state at %s, before this replica's: this replica holds entries the restored log lacks. Restart it to follow the restored log, or stop the other replicas so that it leads and restore the log from it (POST /coord/v1/log/restore)", what, l.RestoredAt, l.RestoredFrom)
	}
	return what + ": reads and steady heartbeats are served from it and nothing is recorded; restore the log from it (POST /coord/v1/log/restore, rscctl log restore), or restart the coordinator to serve what the log holds instead"
}

// recentIDsKept bounds the applied ids a replica remembers to count the
// entries a failover lost.
const recentIDsKept = 1024

// recentIDs are the ids of the last entries the projection applied, oldest
// first (at most recentIDsKept).
type recentIDs struct {
	mu  sync.Mutex
	ids []string
}

func (r *recentIDs) note(ids ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, ids...)
	if over := len(r.ids) - recentIDsKept; over > 0 {
		r.ids = append(r.ids[:0], r.ids[over:]...)
	}
}

// reset forgets them (the projection was replaced); ids are the new ones.
func (r *recentIDs) reset(ids ...string) {
	r.mu.Lock()
	r.ids = r.ids[:0]
	r.mu.Unlock()
	r.note(ids...)
}

func (r *recentIDs) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// noteAppended notes the ids of entries this process appended, once
// applied; answered: their append said they landed (in the writer).
func (r *Replica) noteAppended(answered bool, ids ...string) {
	r.recent.note(ids...)
	if answered && len(ids) > 0 {
		r.answered = ids[len(ids)-1]
	}
}

// notingLog is a log whose reads note the ids they return: what a fold read
// is what it applied.
type notingLog struct {
	events.Log
	recent *recentIDs
}

func (n notingLog) Read(ctx context.Context, after string, count int) ([]events.Entry, error) {
	entries, err := n.Log.Read(ctx, after, count)
	if len(entries) > 0 {
		ids := make([]string, len(entries))
		for i, e := range entries {
			ids[i] = e.ID
		}
		n.recent.note(ids...)
	}
	return entries, err
}

// refusal is why decisions that would append are refused now (nil: they
// are not): a lost log, or a Redis that may evict it.
func (l *lifecycle) refusal() error {
	if loss := l.lost.Load(); loss != nil {
		return commands.WithMsg(commands.ErrLogLost, "%s", loss.Message())
	}
	if e := l.evicting.Load(); e != nil {
		return e
	}
	return nil
}

// LogLoss is the loss this replica is in (nil: the log holds its state).
func (r *Replica) LogLoss() *LogLoss {
	if l := r.life.lost.Load(); l != nil {
		c := *l
		return &c
	}
	return nil
}

// LogLosses counts the losses this replica found, by cause.
func (r *Replica) LogLosses() (gone, entries int64) {
	return r.life.lossesGone.Load(), r.life.lossesEntries.Load()
}

// RedisSafety is the guard's last reading of Redis (false: none yet).
func (r *Replica) RedisSafety() (RedisSafety, bool) {
	if s := r.life.safety.Load(); s != nil {
		return *s, true
	}
	return RedisSafety{}, false
}

// Refusal is why this coordinator refuses decisions that would append
// (ErrLogLost, ErrEvictionPolicy), nil when it does not.
func (r *Replica) Refusal() error { return r.life.refusal() }

// guard runs the guard every Config.GuardInterval until Close: the Redis
// check, then, once loaded, the log check in the writer.
func (c *Coordinator) guard() {
	if c.cfg.GuardInterval < 0 {
		return
	}
	tk := time.NewTicker(c.cfg.GuardInterval)
	defer tk.Stop()
	for {
		c.Replica.checkRedis(c.life.ctx)
		if c.life.ready.Load() {
			ctx, cancel := context.WithTimeout(c.life.ctx, c.cfg.GuardInterval+5*time.Second)
			var cerr error
			err := c.dec.runInWriter(ctx, func() { cerr = c.dec.reload(ctx) })
			cancel()
			if err == nil && cerr != nil && !errors.Is(cerr, commands.ErrLogLost) {
				c.cfg.Logger.Debug().Err(cerr).Msg("guard: check the log")
			}
		}
		select {
		case <-c.life.stop:
			return
		case <-tk.C:
		}
	}
}

// checkRedis reads the Redis guard once and refuses appends while it
// reports a policy that can evict the log (unless Config.AllowEviction).
func (r *Replica) checkRedis(ctx context.Context) {
	if r.cfg.RedisGuard == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	s, err := r.cfg.RedisGuard.CheckRedis(cctx)
	cancel()
	if err != nil {
		r.cfg.Logger.Debug().Err(err).Msg("guard: read Redis's eviction policy")
		return
	}
	s.Allowed = s.Evicts && r.cfg.AllowEviction
	s.CheckedAt = time.Now()
	prev := r.life.safety.Swap(&s)
	was := prev != nil && prev.Evicts
	switch {
	case s.Evicts && s.Allowed:
		r.life.evicting.Store(nil)
		if !was {
			r.cfg.Logger.Warn().Str("maxmemoryPolicy", s.Policy).Str("node", s.Node).Msg("--allow-redis-eviction: " + s.Why + "; the coordinator goes on, and Redis may drop the log")
		}
	case s.Evicts:
		r.life.evicting.Store(commands.WithMsg(commands.ErrEvictionPolicy, "Redis can evict the event log: %s. Nothing is recorded until it is noeviction (CONFIG SET maxmemory-policy noeviction); reads and steady heartbeats go on", s.Why))
		if !was {
			r.cfg.Logger.Error().Str("maxmemoryPolicy", s.Policy).Str("node", s.Node).Msg("Redis can evict the event log: " + s.Why + "; refusing every decision that would append (503 REDIS_EVICTION_POLICY, /readyz 503) until maxmemory-policy is noeviction")
		}
	default:
		if r.life.evicting.Swap(nil) != nil {
			r.cfg.Logger.Info().Str("maxmemoryPolicy", s.Policy).Msg("Redis no longer evicts the event log: deciding again")
		}
	}
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
func (r *Replica) holdIfLogLost(ctx context.Context) error {
	at := r.state.LastID()
	if at == events.ZeroID {
		return nil
	}
	trimmed, err := r.TrimmedTo(ctx)
	if err != nil {
		return err
	}
	if cmp, _ := events.CompareIDs(at, trimmed); cmp <= 0 {
		return nil // trimmed away: reloadIfTrimmedPast's case
	}
	held, err := r.log.Get(ctx, []string{at})
	if err != nil {
		return fmt.Errorf("check the log still holds %s: %w", at, err)
	}
	if len(held) == 1 {
		if r.life.lost.Swap(nil) != nil {
			r.cfg.Logger.Info().Str("lastId", at).Msg("the log holds this projection's last entry again: deciding again")
		}
		return nil
	}
	restore, err := r.restoreNotApplied(ctx)
	if err != nil {
		return err
	}
	if restore != nil {
		if cmp, _ := events.CompareIDs(restore.From, at); cmp >= 0 {
			return r.followRestore(ctx, *restore, at)
		}
	}
	loss := r.life.lost.Load()
	if loss == nil || (restore != nil && loss.RestoredAt != restore.ID) {
		fresh, err := r.measureLoss(ctx, at)
		if err != nil {
			return err
		}
		if loss == nil && restore == nil {
			within, err := r.withinReplicasWindow(ctx, fresh)
			if err != nil {
				return err
			}
			if within {
				r.cfg.Logger.Warn().Str("lastId", at).Str("logLastId", fresh.LogLastID).Int64("lostEntries", fresh.LostEntries).Str("answered", r.answered).
					Msg("a Redis failover lost log entries no replica had acknowledged (--log-replicas): no decision answered is among them; reloading the projection from the log")
				return r.reloadFromLog(ctx)
			}
		}
		if loss != nil {
			fresh.Since = loss.Since
		} else {
			r.noteLoss(fresh)
		}
		if restore != nil {
			fresh.RestoredAt, fresh.RestoredFrom, fresh.Longer = restore.ID, restore.From, true
			r.cfg.Logger.Error().Str("lastId", at).Str("restoredAt", restore.ID).Str("restoredFrom", restore.From).Msg("the leader restored the log from a state before this replica's: this replica holds entries the restored log lacks and stays LOG_LOST (restart it to follow the log, or restore from it)")
		}
		r.life.lost.Store(fresh)
		loss = fresh
	}
	return commands.WithMsg(commands.ErrLogLost, "%s", loss.Message())
}

// noteLoss logs and counts a loss found now.
func (r *Replica) noteLoss(l *LogLoss) {
	ev := r.cfg.Logger.Error().Str("cause", l.Cause).Str("lastId", l.ProjectionLastID).Str("logLastId", l.LogLastID).Int64("logLength", l.LogLength)
	switch l.Cause {
	case LossLogGone:
		r.life.lossesGone.Add(1)
		ev.Msg("log lost: the event log is gone; keeping the state this coordinator holds, serving reads and steady heartbeats, recording nothing (LOG_LOST) until it is restored (POST /coord/v1/log/restore)")
	default:
		r.life.lossesEntries.Add(1)
		ev.Int64("lostEntries", l.LostEntries).Bool("atLeast", l.AtLeast).Msg("a Redis failover lost log entries this coordinator applied; keeping its state, serving reads and steady heartbeats, recording nothing (LOG_LOST) until the log is restored (POST /coord/v1/log/restore)")
	}
}

// measureLoss reads what the log holds now: gone or empty, or how many of
// the entries the projection applied last it lost (a failover loses the
// newest: those after the newest one it still holds).
func (r *Replica) measureLoss(ctx context.Context, at string) (*LogLoss, error) {
	last, err := r.log.LastID(ctx)
	if err != nil {
		return nil, fmt.Errorf("read log position: %w", err)
	}
	n, err := r.log.Len(ctx)
	if err != nil {
		return nil, err
	}
	l := &LogLoss{Cause: LossLogGone, ProjectionLastID: at, LogLastID: last, LogLength: n, Since: time.Now().UTC()}
	if n == 0 {
		return l, nil
	}
	l.Cause = LossEntriesLost
	ids := r.recent.list()
	kept, err := r.log.Get(ctx, ids)
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
func (r *Replica) withinReplicasWindow(ctx context.Context, l *LogLoss) (bool, error) {
	if r.cfg.LogReplicas <= 0 || l.Cause != LossEntriesLost {
		return false, nil
	}
	if r.answered == "" {
		return true, nil
	}
	held, err := r.log.Get(ctx, []string{r.answered})
	if err != nil {
		return false, fmt.Errorf("check the log still holds %s: %w", r.answered, err)
	}
	return len(held) == 1, nil
}

// reloadFromLog replaces the projection with the replay of the log as it is
// (the newest kept snapshot the log still holds, plus the tail; or the whole
// log). It runs in the writer.
func (r *Replica) reloadFromLog(ctx context.Context) error {
	trimmed, err := r.TrimmedTo(ctx)
	if err != nil {
		return err
	}
	st := projection.New()
	if r.snaps != nil {
		snap, err := r.restoreSnapshot(ctx, trimmed)
		if err != nil {
			return err
		}
		if snap != nil {
			st = snap
		}
	}
	if st.LastID() == events.ZeroID {
		if err := r.checkFoldable(trimmed, true); err != nil {
			return err
		}
	}
	r.recent.reset()
	if _, err := r.foldLog(ctx, st); err != nil {
		return err
	}
	r.state.Swap(st)
	r.rearm()
	return nil
}

// restoreNotApplied is the log's last restore when the log still holds it
// and this projection has not applied it (nil otherwise).
func (r *Replica) restoreNotApplied(ctx context.Context) (*projection.RestoreMark, error) {
	rs, ok := r.log.(events.Restorable)
	if !ok {
		return nil, nil
	}
	id, err := rs.LastRestore(ctx)
	if err != nil || id == "" || id == r.state.LastRestore().ID {
		return nil, err
	}
	entries, err := r.log.Get(ctx, []string{id})
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
func (r *Replica) followRestore(ctx context.Context, restore projection.RestoreMark, at string) error {
	r.cfg.Logger.Warn().Str("lastId", at).Str("restoredAt", restore.ID).Str("restoredFrom", restore.From).Msg("the log was restored from this replica's state or a longer one: reloading from the restore's snapshot")
	if err := r.reloadFromSnapshot(ctx); err != nil {
		return err
	}
	if r.life.lost.Swap(nil) != nil {
		r.cfg.Logger.Info().Str("lastId", r.state.LastID()).Msg("the log was restored: deciding again")
	}
	return nil
}

// reloadFromSnapshot replaces the projection with the newest usable kept
// snapshot and the log after it (the log was restored from a state this
// projection cannot fold to). It runs in the writer.
func (r *Replica) reloadFromSnapshot(ctx context.Context) error {
	if r.snaps == nil {
		return fmt.Errorf("the log was restored from a snapshot and this coordinator reads none")
	}
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	trimmed, err := r.TrimmedTo(ctx)
	if err != nil {
		return err
	}
	st, err := r.restoreSnapshot(ctx, trimmed)
	if err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("the log was restored from a snapshot and no kept snapshot reaches the restore")
	}
	r.recent.reset()
	if _, err := r.foldLog(ctx, st); err != nil {
		return err
	}
	r.state.Swap(st)
	r.rearm()
	return nil
}
