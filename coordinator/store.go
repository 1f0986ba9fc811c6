package coordinator

import (
	"context"
	"time"

	"github.com/rscoord/rsc/events"
)

// What decisions need from the Redis that holds the shard streams, one
// interface per user; redisstore.Shards implements all of them (ShardStore),
// tests may fake any.

// Provisioner creates shard streams and their consumer groups (a new stream,
// a new group, a resharding's target), and reads what Redis holds under the
// keys first, so that nothing the coordinator did not create is touched.
type Provisioner interface {
	// Provision creates streams prefix:from..prefix:to-1 and the consumer group on
	// each (XGROUP CREATE ... $ MKSTREAM ENTRIESREAD <entries-added>: at the
	// stream's end; an existing group is success). It returns the shards on
	// which the consumer group existed already.
	Provision(ctx context.Context, prefix, group string, from, to int) (existed []int, err error)
	// KeyTypes returns the TYPE of each key, in order ("none" when missing).
	KeyTypes(ctx context.Context, keys []string) ([]string, error)
	// CreateStreams creates each key as an empty stream without consumer
	// groups, refusing one that exists (it returns those); when any existed
	// or a command failed it removes again what it created.
	CreateStreams(ctx context.Context, keys []string) (existed []string, err error)
}

// DrainReader reads what is left on shard streams: the evidence a resharding
// completes, reopens or rolls back on.
type DrainReader interface {
	// DrainEvidence reports every consumer group on each shard stream (XINFO GROUPS).
	DrainEvidence(ctx context.Context, prefix string, shards []int) ([]events.ShardDrain, error)
	// EntriesAdded reports how many entries were ever added to each shard stream.
	EntriesAdded(ctx context.Context, prefix string, shards []int) (map[int]int64, error)
}

// Retirer deletes the streams a finished resharding took out of use.
type Retirer interface {
	// Delete removes shard streams, atomically refusing any stream that is not
	// drained (an error names them; the others are deleted).
	Delete(ctx context.Context, keys []string) error
}

// Remover destroys the Redis consumer groups of a deleted group (removal.go).
type Remover interface {
	// DestroyGroups destroys consumer group group on each shard stream
	// (XGROUP DESTROY); a missing stream or consumer group is success.
	DestroyGroups(ctx context.Context, prefix, group string, shards []int) error
}

// Fencer raises and lowers the ordering fences of a layout change and reads
// the proof its barriers wait for (ordering.go).
type Fencer interface {
	// Cutover raises group's fence to fence (and, when streamFence > 0, the
	// stream's, routing.StreamFenceField, to streamFence) on the shards
	// marked Raise and reads, atomically per shard, where each stands.
	Cutover(ctx context.Context, prefix, group string, fence, streamFence int64, shards []events.CutoverShard) ([]events.CutoverRead, error)
	// LowerFences lowers group's fences above mv on shards 0..count-1 and
	// returns how many it lowered.
	LowerFences(ctx context.Context, prefix, group string, count int, mv int64) (int, error)
	// BarrierEvidence reads whether group read and acknowledged each source
	// shard up to its cutover, and scans for unfenced entries after it.
	BarrierEvidence(ctx context.Context, group string, sources []events.BarrierSource) ([]events.BarrierRead, error)
}

// Repairer finds and recreates what Redis lost of the routed shards (repair.go).
type Repairer interface {
	// Damage reports which of the shards lost their stream or the group's
	// consumer group (healthy shards are not listed).
	Damage(ctx context.Context, prefix, group string, shards []int) ([]events.ShardRepair, error)
	// Repair recreates lost streams (empty, group at the end) and lost
	// consumer groups (at the stream's start: what is left is read again).
	Repair(ctx context.Context, prefix, group string, shards []int) error
}

// Sampler reads the autoscaler's evidence (autoscale.go).
type Sampler interface {
	// Load reads group's shards: entries-added, lag and the age of the oldest
	// unread entry.
	Load(ctx context.Context, prefix, group string, shards []int) ([]events.ShardSample, error)
}

// ShardStore is every user's interface: what New takes.
type ShardStore interface {
	Provisioner
	DrainReader
	Retirer
	Remover
	Fencer
	Repairer
	Sampler
}

// SnapshotStore keeps the newest few projection snapshots next to the log, each
// under the id of the last entry it includes (redisstore.SnapshotStore).
type SnapshotStore interface {
	Load(ctx context.Context) ([]byte, error) // the newest; nil, nil when there is none
	// Save stores data, the state after entry lastID, as the newest and keeps
	// the newest keep. A snapshot not newer than the newest stored changes
	// nothing and is events.ErrConflict (a replica that lost the lead saving late).
	Save(ctx context.Context, lastID string, data []byte, keep int) error
	// Kept lists the kept snapshots' last ids, newest first (empty for a store
	// written before snapshots were kept with their ids: Load still reads it).
	Kept(ctx context.Context) ([]string, error)
	// LoadAt returns the kept snapshot after lastID (nil, nil when not kept).
	LoadAt(ctx context.Context, lastID string) ([]byte, error)
}

// Clock is the time source; simulations use a virtual one.
//
// Now is read twice over for every decision. Its wall-clock time, in UTC, is
// what decisions record (events carry times for people). The member leases,
// rebalance deadlines, correction rounds, quarantines and budgets that only
// this process keeps are timers instead: they are measured against the
// reading as Now returns it, and the system clock's carries Go's monotonic
// reading, so a step of the wall clock (NTP) moves none of them. A clock
// that is not the system's models that reading by implementing
// MonotonicClock.
type Clock interface{ Now() time.Time }

// MonotonicClock is a Clock whose timers' reading is apart from its wall
// clock: Monotonic is what leases and deadlines are measured against, Now
// what decisions record. Tests step one without the other.
type MonotonicClock interface {
	Clock
	Monotonic() time.Time
}

// wallClock is clock's wall-clock time in UTC without a monotonic reading:
// the time decisions record.
func wallClock(clock Clock) func() time.Time {
	return func() time.Time { return time.Unix(0, clock.Now().UnixNano()).UTC() }
}

// timerClock is the reading clock's timers are measured against: Monotonic
// when it has one apart, else Now as it returns it (the system clock's
// carries the monotonic reading; a virtual one's is its wall time).
func timerClock(clock Clock) func() time.Time {
	if mc, ok := clock.(MonotonicClock); ok {
		return mc.Monotonic
	}
	return clock.Now
}

// LeaderLease is the leadership of the log among coordinator replicas
// (redisstore.Lease). Holding it is what entitles a replica to append: the log
// the coordinator is given checks the lease's fencing token on every append,
// so a replica that lost the lease (paused, partitioned) cannot append even if
// it still believes it leads.
type LeaderLease interface {
	// Acquire takes the lease for ttl if nobody holds it (or this replica does
	// already). It reports the holder after the call; Token > 0 and Self mean
	// this replica leads now.
	Acquire(ctx context.Context, ttl time.Duration) (LeaderInfo, error)
	// Renew extends this replica's lease by ttl; false means it was lost.
	Renew(ctx context.Context, ttl time.Duration) (bool, error)
	// Release gives the lease up at once (graceful shutdown), if still held.
	Release(ctx context.Context) error
	// Leader reports who holds the lease now (Holder "" when nobody does).
	Leader(ctx context.Context) (LeaderInfo, error)
}

// LeaderInfo describes the current holder of the leader lease.
type LeaderInfo struct {
	Holder string // replica identity (coordinator id and a per-process nonce)
	URL    string // where that replica takes forwarded writes
	Token  int64  // fencing token of the holder's term; increases with every new term
	Self   bool   // the holder is this replica
}
