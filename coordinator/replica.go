package coordinator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/replay"
)

// The replica keeps this process's projection in step with the log: it loads
// it at start (the newest usable kept snapshot plus the tail), follows the log
// for entries another process appended (a --ha leader's, seen by a follower),
// saves snapshots, trims the log behind the oldest kept one (--trim-log),
// reloads from a snapshot when the log was trimmed past its position, and
// holds the projection when the log lost what it applied (guard.go). Every
// fold goes through projection.Fold, and every change to a running projection
// goes through the writer (decider.go).
//
// It answers what every replica knows alike (httpapi.Reader): the projection,
// a past state, a group's history, readiness and the configuration. The work
// is done by its parts, each built from what it uses and none holding one
// above it: the log with its trim point, archive and history index
// (trimmedlog.go), the kept snapshots and the trim behind them
// (snapshots.go), the loader that folds them (loader.go) and the guard of
// the log (guard.go, restore.go), which reloads through the loader. The
// writer is handed the parts' methods it calls (New).
type Replica struct {
	cfg    Config // the effective configuration
	state  *projection.State
	life   *lifecycle
	tl     *trimmedLog
	snaps  *snapshots
	load   *loader
	watch  *logGuard
	states stateCache
}

// replicaDeps is what the replica is built from.
type replicaDeps struct {
	cfg   Config // the effective configuration
	log   events.Log
	snaps SnapshotStore // nil: no snapshots
	state *projection.State
	life  *lifecycle
	// rearm gives every member a fresh lease after a load or a reload.
	rearm func()
}

// newReplica builds the replica's parts, each from what it uses: the log
// with its trim point (trimmedLog), the snapshots, the loader that folds
// them, and the guard that holds the projection when the log lost it.
func newReplica(deps replicaDeps) *Replica {
	cfg := deps.cfg
	recent := &recentIDs{}
	tl := &trimmedLog{log: deps.log, trimmer: cfg.Trimmer, logger: cfg.Logger}
	snaps := &snapshots{store: deps.snaps, log: deps.log, trimmer: cfg.Trimmer, keep: cfg.SnapshotKeep, trim: cfg.TrimLog, logger: cfg.Logger}
	load := &loader{tl: tl, snaps: snaps, state: deps.state, life: deps.life, recent: recent, rearm: deps.rearm, logger: cfg.Logger}
	watch := &logGuard{tl: tl, snaps: snaps, load: load, state: deps.state, life: deps.life, recent: recent,
		redis: cfg.RedisGuard, allowEviction: cfg.AllowEviction, logReplicas: cfg.LogReplicas,
		coordinatorID: cfg.CoordinatorID, afterAppend: cfg.AfterAppend, logger: cfg.Logger}
	return &Replica{cfg: cfg, state: deps.state, life: deps.life, tl: tl, snaps: snaps, load: load, watch: watch}
}

// State is the projection (read through its copying methods).
func (r *Replica) State() *projection.State { return r.state }

// Config returns the effective configuration.
func (r *Replica) Config() Config { return r.cfg }

// Log is the event log.
func (r *Replica) Log() events.Log { return r.tl.log }

// Ready reports whether the coordinator loaded the log and can append: not
// while the log is lost or Redis may evict it (Refusal).
func (r *Replica) Ready() bool {
	return r.life.ready.Load() && r.life.healthy.Load() && !r.life.closing.Load() && r.life.refusal() == nil
}

// Healthy reports whether the last log operation succeeded.
func (r *Replica) Healthy() bool { return r.life.healthy.Load() }

// Corrupt is COORDINATOR_METADATA_CORRUPT naming what cannot be decoded,
// while the log holds an entry this build cannot decode (at start-up, or
// written by another replica since); nil otherwise.
func (r *Replica) Corrupt() error {
	if e := r.life.corrupt.Load(); e != nil {
		return e
	}
	return nil
}

// Quarantined is COORDINATOR_METADATA_CORRUPT naming the entry while prefix
// is quarantined (an entry of it cannot be read: see
// projection.Quarantine); nil otherwise. Every other prefix is served.
func (r *Replica) Quarantined(prefix string) error {
	q, ok := r.state.Quarantined(prefix)
	if !ok {
		return nil
	}
	return quarantineError(q)
}

// TrimmedTo is the highest id trimmed from the log (events.ZeroID when it never
// was, or no trimmer is configured).
func (r *Replica) TrimmedTo(ctx context.Context) (string, error) { return r.tl.TrimmedTo(ctx) }

// GroupHistory pages a group's audit history (trimmedLog.GroupHistory).
func (r *Replica) GroupHistory(ctx context.Context, k projection.GroupKey, after string, limit int) ([]events.Entry, string, error) {
	return r.tl.GroupHistory(ctx, k, after, limit)
}

// HistoryLog is the log to read the audit history from: the archive below the
// log's first entry, then the log (just the log when nothing archives).
func (r *Replica) HistoryLog() events.Log { return r.tl.HistoryLog() }

// StateAt is the projection after entry until (inclusive), for the replay
// endpoint: the replay library folds it from the newest kept snapshot at or
// before until, so its cost depends on the distance to that snapshot, not on
// the log's length; a few recent answers are cached (a point's state never
// changes). On a trimmed log a point before the oldest kept snapshot is
// ErrLogTrimmed, naming the oldest point that can still be replayed. The
// returned state is shared: read it through its copying methods only.
func (r *Replica) StateAt(ctx context.Context, until string) (*projection.State, error) {
	if st, ok := r.states.get(until); ok {
		return st, nil
	}
	trimmed, err := r.tl.TrimmedTo(ctx)
	if err != nil {
		return nil, err
	}
	var snaps replay.Snapshots
	if r.snaps.on() {
		snaps = r.snaps.store
	}
	st, _, err := replay.StateAtID(ctx, r.tl.log, snaps, trimmed, until)
	if errors.Is(err, replay.ErrTrimmed) {
		return nil, commands.WithMsg(commands.ErrLogTrimmed, "%s", strings.TrimPrefix(err.Error(), replay.ErrTrimmed.Error()+": "))
	}
	if err != nil {
		return nil, err
	}
	r.states.put(until, st)
	return st, nil
}

// stateCacheSize is how many replayed states StateAt keeps.
const stateCacheSize = 8

// stateCache keeps the most recently replayed states, most recent first.
type stateCache struct {
	mu     sync.Mutex
	states []cachedState
}

type cachedState struct {
	until string
	st    *projection.State
}

func (sc *stateCache) get(until string) (*projection.State, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for i, e := range sc.states {
		if e.until == until {
			// Most recently used first.
			copy(sc.states[1:i+1], sc.states[:i])
			sc.states[0] = e
			return e.st, true
		}
	}
	return nil, false
}

func (sc *stateCache) put(until string, st *projection.State) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.states = append([]cachedState{{until, st}}, sc.states...)
	if len(sc.states) > stateCacheSize {
		sc.states = sc.states[:stateCacheSize]
	}
}

// Load builds the projection before Run: the newest usable kept snapshot (if
// any, and if fromSnapshot; see snapshots.restore) plus every entry after it,
// or the whole log. A log trimmed at its head cannot be folded from zero:
// without a usable snapshot Load fails. An undecodable entry stops the load
// with an error naming its id.
func (r *Replica) Load(ctx context.Context, fromSnapshot bool) error {
	return r.load.load(ctx, fromSnapshot)
}

// follow tails the log so entries appended by another coordinator process reach
// this projection, and re-checks Redis after an outage. It folds nothing
// itself: catchUp folds, in the writer, what the log holds past seen, the last
// entry it read (the writer's catchUpPast).
func (r *Replica) follow(catchUp func(ctx context.Context, seen string) error) {
	for {
		select {
		case <-r.life.stop:
			return
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		entries, err := r.tl.log.Tail(ctx, r.state.LastID(), 1, time.Second)
		cancel()
		if err != nil {
			r.life.healthy.Store(false)
			select {
			case <-r.life.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		foreign, seen := false, ""
		if len(entries) > 0 {
			// Our own appends are applied right after they land; only entries
			// beyond our position can have come from another process (or be
			// ours, read before the writer applied them: catchUpPast).
			seen = entries[len(entries)-1].ID
			cmp, _ := events.CompareIDs(seen, r.state.LastID())
			foreign = cmp > 0
		}
		if foreign || !r.life.healthy.Load() {
			jctx, jcancel := context.WithTimeout(context.Background(), 15*time.Second)
			err := catchUp(jctx, seen)
			jcancel()
			if err != nil && !errors.Is(err, commands.ErrTerminating) {
				r.cfg.Logger.Warn().Err(err).Msg("catch up with the log")
			}
		}
	}
}

// SaveSnapshot writes a snapshot of the projection now (once loaded).
func (r *Replica) SaveSnapshot() {
	if !r.snaps.on() || !r.life.ready.Load() {
		return
	}
	r.snaps.save(r.state.Capture())
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
