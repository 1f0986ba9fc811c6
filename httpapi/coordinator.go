package httpapi

import (
	"context"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// What the server asks of the coordinator, in four small parts; handlers use
// the part they need. Each is implemented by the commands part of that name:
// commands.Service, commands.Replica, commands.RuntimeView and
// commands.Leadership.

// Commands are the requests that may change state: every one goes through it (on
// the leader; a follower forwards writes before they get here).
type Commands interface {
	CreateStream(ctx context.Context, meta events.Meta, in commands.CreateStreamInput) (projection.StreamView, error)
	AdoptStream(ctx context.Context, meta events.Meta, in commands.AdoptStreamInput) (projection.StreamView, error)
	CreateGroup(ctx context.Context, meta events.Meta, in commands.CreateGroupInput) (projection.GroupView, error)
	Scale(ctx context.Context, meta events.Meta, k projection.GroupKey, in commands.ScaleInput) (projection.ReshardingView, error)
	ScaleStream(ctx context.Context, meta events.Meta, prefix string, in commands.ScaleInput) (commands.StreamScaleResult, error)
	Rollback(ctx context.Context, meta events.Meta, k projection.GroupKey, reshardingID string, in commands.RollbackInput) (projection.ReshardingView, error)
	DeleteGroup(ctx context.Context, meta events.Meta, k projection.GroupKey, in commands.DeleteGroupInput) (projection.GroupView, error)
	SetOrdering(ctx context.Context, meta events.Meta, k projection.GroupKey, in commands.OrderingInput) (projection.GroupView, error)
	SetAutoscaling(ctx context.Context, meta events.Meta, k projection.GroupKey, in commands.AutoscalingInput) (*projection.Autoscaling, error)
	DisableAutoscaling(ctx context.Context, meta events.Meta, k projection.GroupKey, requestedBy, reason string) (*projection.Autoscaling, error)
	Heartbeat(ctx context.Context, k projection.GroupKey, memberID, principal string, req *wire.HeartbeatRequest) (*wire.HeartbeatResponse, error)
	// HeldHeartbeat is Heartbeat for a member that asked to be held until
	// its answer changes (hold.go).
	HeldHeartbeat(ctx context.Context, k projection.GroupKey, memberID, principal string, req *wire.HeartbeatRequest, h commands.HoldRequest) (*wire.HeartbeatResponse, commands.HoldOutcome, error)
	// RestoreLog writes the state this coordinator holds back to a log that
	// lost it (LOG_LOST).
	RestoreLog(ctx context.Context, meta events.Meta, in commands.RestoreLogInput) (commands.RestoreResult, error)
}

// Reader answers from this replica's projection and the log: what every
// replica knows alike.
type Reader interface {
	// State is the projection (read through its copying methods).
	State() *projection.State
	// StateAt folds the log up to and including an event id.
	StateAt(ctx context.Context, until string) (*projection.State, error)
	// GroupHistory pages a group's events; HistoryLog is the whole log as
	// the audit endpoint reads it (with the archive of a trimmed log).
	GroupHistory(ctx context.Context, k projection.GroupKey, after string, limit int) ([]events.Entry, string, error)
	HistoryLog() events.Log
	// Ready: loaded, the last log operation worked, not refusing appends
	// (Refusal), not shutting down.
	Ready() bool
	Healthy() bool
	// Corrupt is COORDINATOR_METADATA_CORRUPT while the log (or the
	// snapshot start-up needs) holds what this build cannot decode; nil
	// otherwise.
	Corrupt() error
	// Quarantined is COORDINATOR_METADATA_CORRUPT naming the entry while a
	// stream prefix is quarantined (an entry of it cannot be read); nil
	// otherwise.
	Quarantined(prefix string) error
	// Config is the coordinator's effective configuration (its id and timings).
	Config() commands.Config
	// LogLoss is the loss of the log this replica is in (nil: none);
	// RedisSafety the last reading of Redis's eviction policy and
	// persistence; Refusal why decisions that would append are refused
	// (ErrLogLost, ErrEvictionPolicy; nil: they are not).
	LogLoss() *commands.LogLoss
	RedisSafety() (commands.RedisSafety, bool)
	Refusal() error
}

// Runtime is what the leader holds only in memory: members' leases, last
// heartbeats and reported progress, and the Redis evidence of its last
// reconciler pass. Handlers read it only when Server.fwd.ToLeader did not
// relay the request to the leader (guard/forward.go).
type Runtime interface {
	MemberRuntimes(k projection.GroupKey) map[string]commands.MemberRuntime
	DrainEvidence(k projection.GroupKey) ([]events.ShardDrain, time.Time)
	RollbackEligibility(ctx context.Context, g *projection.Group, m *projection.Resharding) projection.RollbackInfo
	// BarrierReads is the latest read of the shards waiting barriers wait on.
	BarrierReads(k projection.GroupKey) map[string]commands.BarrierRead
	// LastEvaluation is the autoscaler's latest evaluation of a group.
	LastEvaluation(k projection.GroupKey) (commands.Evaluation, bool)
}

// Leadership is this replica's place among --ha replicas.
type Leadership interface {
	// Role is commands.RoleStandalone, RoleLeader or RoleFollower.
	Role() string
	// Leader is the leader as this replica last saw it; LeaderNow asks the
	// lease store when that may be stale.
	Leader() commands.LeaderInfo
	LeaderNow(ctx context.Context) commands.LeaderInfo
}

// Parts are the coordinator's parts the server is built from.
type Parts struct {
	Commands   Commands
	Reader     Reader
	Runtime    Runtime
	Leadership Leadership
}

// PartsOf is a coordinator's parts.
func PartsOf(c *commands.Coordinator) Parts {
	return Parts{Commands: c.Service, Reader: c.Replica, Runtime: c.RuntimeView, Leadership: c.Leadership}
}

var (
	_ Commands   = (*commands.Service)(nil)
	_ Reader     = (*commands.Replica)(nil)
	_ Runtime    = commands.RuntimeView{}
	_ Leadership = (*commands.Leadership)(nil)
)
