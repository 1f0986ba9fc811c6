package httpapi

import (
	"context"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// What the server asks of the coordinator, in four small parts; handlers use
// the part they need. Each is implemented by the commands part of that name:
// coordinator.Service, coordinator.Replica, coordinator.RuntimeView and
// coordinator.Leadership.

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
	HeldHeartbeat(ctx context.Context, k projection.GroupKey, memberID, principal string, req *wire.HeartbeatRequest, h coordinator.HoldRequest) (*wire.HeartbeatResponse, coordinator.HoldOutcome, error)
	// RestoreLog writes the state this coordinator holds back to a log that
	// lost it (LOG_LOST).
	RestoreLog(ctx context.Context, meta events.Meta, in coordinator.RestoreLogInput) (coordinator.RestoreResult, error)
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
	Config() coordinator.Config
	// LogLoss is the loss of the log this replica is in (nil: none);
	// RedisSafety the last reading of Redis's eviction policy and
	// persistence; Refusal why decisions that would append are refused
	// (ErrLogLost, ErrEvictionPolicy; nil: they are not).
	LogLoss() *coordinator.LogLoss
	RedisSafety() (coordinator.RedisSafety, bool)
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
	BarrierReads(k projection.GroupKey) map[string]coordinator.BarrierRead
	// LastEvaluation is the autoscaler's latest evaluation of a group.
	LastEvaluation(k projection.GroupKey) (commands.Evaluation, bool)
}

// Leadership is this replica's place among --ha replicas.
type Leadership interface {
	// Role is coordinator.RoleStandalone, RoleLeader or RoleFollower.
	Role() string
	// Leader is the leader as this replica last saw it; LeaderNow asks the
	// lease store when that may be stale.
	Leader() coordinator.LeaderInfo
	LeaderNow(ctx context.Context) coordinator.LeaderInfo
}

// Parts are the coordinator's parts the server is built from.
type Parts struct {
	Commands   Commands
	Reader     Reader
	Runtime    Runtime
	Leadership Leadership
}

// PartsOf is a coordinator's parts.
func PartsOf(c *coordinator.Coordinator) Parts {
	return Parts{Commands: c.Service, Reader: c.Replica, Runtime: c.RuntimeView, Leadership: c.Leadership}
}

var (
	_ Commands   = (*coordinator.Service)(nil)
	_ Reader     = (*coordinator.Replica)(nil)
	_ Runtime    = coordinator.RuntimeView{}
	_ Leadership = (*coordinator.Leadership)(nil)
)
