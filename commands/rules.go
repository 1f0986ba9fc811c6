package commands

import (
	"fmt"
	"sort"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// rules is what the decisions need from the configuration, as values: a
// decision depends on the state, the runtime, its evidence, its request and
// the time, and on these, never on how the coordinator is wired.
type Rules struct {
	HeartbeatInterval time.Duration
	MemberLease       time.Duration
	RebalanceTimeout  time.Duration
	// staleRetention is how long terminal members stay (<= 0: forever).
	StaleRetention    time.Duration
	DefaultShardCount int
	MaxShardCount     int
	MaxMembers        int
	maxGroups         int
	maxTotalShards    int
	// provisioning: the coordinator creates the shard streams and groups.
	Provisioning bool
	// streams: a Redis holds the shard streams. Without one there is nothing
	// to fence (ordered layout changes record no cutover), no entry can be on
	// a new shard (a rollback needs no read of them) and no stream to delete
	// (retired streams are recorded as kept).
	Streams bool
	// keepRetired: retired streams are kept, by policy or for want of a Redis.
	KeepRetired bool
	// churn is the join and leave budget of a principal in a group (zero:
	// none).
	churn Budget
	// quotas per principal and per prefix (quota.go).
	quotas quotas
	// emptyGroupRetention is how long a group registered by heartbeat may
	// stay without a live member before it is removed (<= 0: never;
	// expiry.go).
	EmptyGroupRetention time.Duration
}

// Policy is what the rules take from the coordinator's configuration
// (coordinator.Config documents each value).
type Policy struct {
	HeartbeatInterval, MemberLease, RebalanceTimeout time.Duration
	StaleMemberRetention, EmptyGroupRetention        time.Duration
	DefaultShardCount, MaxShardCount                 int
	MaxMembersPerGroup, MaxGroups, MaxTotalShards    int
	MemberChurnPerMinute                             int
	MaxGroupsPerPrincipal, MaxShardsPerPrincipal     int
	MaxGroupsPerPrefix, MaxShardsPerPrefix           int
	MaxMembersPerPrincipal, PrincipalChurnPerMinute  int
	// Provisioning: the coordinator creates the shard streams and groups.
	Provisioning bool
	// Streams: a Redis holds the shard streams.
	Streams            bool
	KeepRetiredStreams bool
}

// NewRules are the rules of a policy.
func NewRules(p Policy) Rules {
	return Rules{
		HeartbeatInterval: p.HeartbeatInterval, MemberLease: p.MemberLease, RebalanceTimeout: p.RebalanceTimeout,
		StaleRetention: p.StaleMemberRetention, DefaultShardCount: p.DefaultShardCount, MaxShardCount: p.MaxShardCount,
		MaxMembers: p.MaxMembersPerGroup, maxGroups: p.MaxGroups, maxTotalShards: p.MaxTotalShards,
		Provisioning: p.Provisioning, Streams: p.Streams,
		KeepRetired: p.KeepRetiredStreams || !p.Streams, churn: PerMinute(p.MemberChurnPerMinute),
		quotas: quotas{
			groupsPerPrincipal: max(p.MaxGroupsPerPrincipal, 0), shardsPerPrincipal: max(p.MaxShardsPerPrincipal, 0),
			groupsPerPrefix: max(p.MaxGroupsPerPrefix, 0), shardsPerPrefix: max(p.MaxShardsPerPrefix, 0),
			membersPerPrincipal: max(p.MaxMembersPerPrincipal, 0), churn: PerMinute(p.PrincipalChurnPerMinute),
		},
		EmptyGroupRetention: p.EmptyGroupRetention,
	}
}

// quarantineFor is how long a member fenced by an overdue correction round
// cannot open another one.
func (r Rules) quarantineFor() time.Duration {
	if r.StaleRetention > 0 {
		return r.StaleRetention
	}
	return 10 * r.RebalanceTimeout
}

// rejected is a heartbeat answer without an assignment (a refusal the
// protocol answers with a status).
func (r Rules) rejected(req *wire.HeartbeatRequest, pathID, status string) *wire.HeartbeatResponse {
	var epoch int64
	if req.MemberEpoch != nil {
		epoch = *req.MemberEpoch
	}
	return &wire.HeartbeatResponse{
		ResponseTo: req.RequestID, Status: status, MemberID: pathID, MemberEpoch: epoch,
		HeartbeatIntervalMs: r.HeartbeatInterval.Milliseconds(), RebalanceTimeoutMs: r.RebalanceTimeout.Milliseconds(),
		Assignment: wire.HeartbeatAssignment{AssignedShards: []wire.ShardRef{}, PendingShards: []wire.ShardRef{}},
	}
}

// respond is a heartbeat answer from the group's state.
func (r Rules) respond(req *wire.HeartbeatRequest, pathID, status string, g projection.ReadOnlyGroup, epoch int64, assigned, pending []int) *wire.HeartbeatResponse {
	res := &wire.HeartbeatResponse{
		ResponseTo: req.RequestID, Status: status, MemberID: pathID, MemberEpoch: epoch,
		HeartbeatIntervalMs: r.HeartbeatInterval.Milliseconds(), RebalanceTimeoutMs: r.RebalanceTimeout.Milliseconds(),
		GroupEpoch: g.GroupEpoch(), AssignmentEpoch: g.AssignmentEpoch(), MetadataVersion: g.MetadataVersion(),
		Assignment: wire.HeartbeatAssignment{AssignedShards: shardRefs(assigned), PendingShards: shardRefs(pending), MetadataVersion: g.MetadataVersion()},
	}
	if g.Ordered() {
		res.Assignment.Ordering = events.OrderingKey
	}
	// Every waiting barrier of the group (a member may still be reading a
	// shard it is releasing), from the same state as the answer's
	// metadataVersion: a member that knows this version knows every barrier
	// a cutover up to it set.
	if after := g.BarriersByShard(); len(after) > 0 {
		shards := make([]int, 0, len(after))
		for s := range after {
			shards = append(shards, s)
		}
		sort.Ints(shards)
		for _, s := range shards {
			res.Assignment.Barriers = append(res.Assignment.Barriers, wire.ShardBarrier{Shard: wire.ShardRef{ShardIndex: s}, After: after[s]})
		}
	}
	return res
}

// validateScale checks a scale request; a failure is HTTP 400.
func (r Rules) ValidateScale(in ScaleInput) error {
	var problems []string
	if in.TargetShardCount == nil {
		problems = append(problems, "targetShardCount: must not be null")
	} else if *in.TargetShardCount < 0 {
		problems = append(problems, "targetShardCount must be zero or positive")
	} else if *in.TargetShardCount > r.MaxShardCount {
		problems = append(problems, fmt.Sprintf("targetShardCount: must be less than or equal to %d", r.MaxShardCount))
	}
	problems = append(problems, CheckAudit(in.RequestedBy, in.Reason, true)...)
	if len(problems) > 0 {
		return Invalid(problems)
	}
	return nil
}
