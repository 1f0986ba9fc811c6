package coordinator

import (
	"context"
	"fmt"
	"time"
)

// What the guard of the log (guard.go) reads and finds: Redis's eviction
// policy and persistence, and a loss of the log.

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
