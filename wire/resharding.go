package wire

import "time"

// ScaleRequest is ScaleStreamRequest / ScaleGroupRequest. DeprecatedAfter is
// accepted for compatibility and ignored.
type ScaleRequest struct {
	TargetShardCount *int    `json:"targetShardCount"`
	RequestedBy      string  `json:"requestedBy"`
	Reason           string  `json:"reason"`
	DeprecatedAfter  *string `json:"deprecatedAfter"`
}

// RollbackRequest is RollbackMigrationRequest plus our policy ("" or
// "metadata", or "drain").
type RollbackRequest struct {
	RequestedBy string `json:"requestedBy"`
	Reason      string `json:"reason"`
	Policy      string `json:"policy"`
}

// Resharding is the contract's Migration plus the monitoring the design asks
// for: phase, history, provisioning, drain and revoke progress, rollback
// eligibility and what became of removed shard streams.
type Resharding struct {
	ReshardingID   string    `json:"reshardingId"`
	FromShardCount int       `json:"fromShardCount"`
	ToShardCount   int       `json:"toShardCount"`
	State          string    `json:"state"`
	CreatedAt      time.Time `json:"createdAt"`
	UpdatedAt      time.Time `json:"updatedAt"`

	Kind          string          `json:"kind"`
	Phase         string          `json:"phase"`
	RequestedBy   string          `json:"requestedBy"`
	Reason        string          `json:"reason"`
	StateHistory  []StateChange   `json:"stateHistory"`
	Provisioning  Provisioning    `json:"provisioning"`
	RemovedShards []ShardRef      `json:"removedShards"`
	Drain         []ShardDrainRow `json:"drain"`
	DrainProven   bool            `json:"drainProven"`
	Revoke        RevokeProgress  `json:"revokeProgress"`
	Rollback      RollbackInfo    `json:"rollback"`
	Retirement    *Retirement     `json:"retirement"`
	// Barriers of this resharding that are not released yet (ordering KEY).
	Barriers []Barrier `json:"barriers"`
}

// Barrier is one shard whose entries after its cutover wait: since when, and
// on which shards of the layout before (what Redis last showed of them).
type Barrier struct {
	ReshardingID string          `json:"reshardingId"`
	Shard        ShardRef        `json:"shard"`
	StreamKey    string          `json:"streamKey"`
	After        string          `json:"after"`
	Fence        int64           `json:"fence"`
	Since        time.Time       `json:"since"`
	WaitingOn    []BarrierSource `json:"waitingOn"`
}

// BarrierSource is a shard a barrier waits on: its entries up to CutoverID
// must all be delivered and acknowledged. Proven, LastDeliveredID,
// PendingToCutover and CheckedAt are the reconciler's latest read (null
// before the first).
type BarrierSource struct {
	Shard            ShardRef   `json:"shard"`
	StreamKey        string     `json:"streamKey"`
	CutoverID        string     `json:"cutoverId"`
	Proven           bool       `json:"proven"`
	LastDeliveredID  *string    `json:"lastDeliveredId"`
	PendingToCutover *int64     `json:"pendingToCutover"`
	CheckedAt        *time.Time `json:"checkedAt"`
}

// StateChange is one step of a resharding's life, with the group's epoch and
// metadata version after it.
type StateChange struct {
	State           string    `json:"state"`
	Phase           string    `json:"phase"`
	At              time.Time `json:"at"`
	Actor           string    `json:"actor"`
	EventID         string    `json:"eventId"`
	GroupEpoch      int64     `json:"groupEpoch"`
	MetadataVersion int64     `json:"metadataVersion"`
}

// Provisioning is how many shard streams of the target count exist.
type Provisioning struct {
	ProvisionedShards int    `json:"provisionedShards"`
	TotalShards       int    `json:"totalShards"`
	State             string `json:"state"`
}

// ShardDrainRow is one removed shard: Redis pending and lag per consumer group
// (from the latest evidence) and what members report.
type ShardDrainRow struct {
	Shard          ShardRef     `json:"shard"`
	StreamKey      string       `json:"streamKey"`
	Exists         bool         `json:"exists"`
	RedisPending   *int64       `json:"redisPending"`
	RedisLag       *int64       `json:"redisLag"`
	Groups         []GroupDrain `json:"groups"`
	Owners         []string     `json:"owners"`
	MemberPending  *int64       `json:"memberReportedPending"`
	MemberAckedID  *string      `json:"memberReportedLastAckedId"`
	Drained        bool         `json:"drained"`
	EvidenceSource string       `json:"evidenceSource"`
	// WaitingFor names the consumer groups the drain waits for on this
	// shard (entries pending, left to read, or an unknown lag); empty once
	// it is drained.
	WaitingFor []string `json:"waitingFor"`
}

// GroupDrain is one Redis consumer group on a removed shard; a null lag is unknown.
type GroupDrain struct {
	Name    string `json:"name"`
	Pending int64  `json:"pending"`
	Lag     *int64 `json:"lag"`
}

// RevokeProgress lists the members still holding removed shards.
type RevokeProgress struct {
	Holding   map[string][]ShardRef `json:"holding"`
	Remaining int                   `json:"remaining"`
	Started   bool                  `json:"started"`
}

// RollbackInfo says whether a rollback may be asked for now, and with which policy.
type RollbackInfo struct {
	Eligible bool   `json:"eligible"`
	Reason   string `json:"reason"`
	Policy   string `json:"policy,omitempty"`
}

// Retirement reports what became of removed shard streams.
type Retirement struct {
	Retired    bool     `json:"retired"`
	StreamKeys []string `json:"streamKeys"`
	Kept       bool     `json:"kept"`
}

// ReshardingsResponse lists a group's reshardings (the contract's
// MigrationsResponse), oldest first.
type ReshardingsResponse struct {
	Migrations         []Resharding `json:"migrations"`
	ActiveReshardingID *string      `json:"activeReshardingId"`
}

// StreamScaleResult answers a stream-level scale: every group of the prefix
// with its resharding (a synthetic "noop" one for a group already at the target).
type StreamScaleResult struct {
	StreamPrefix           string       `json:"streamPrefix"`
	TargetShardCount       int          `json:"targetShardCount"`
	AffectedConsumerGroups []string     `json:"affectedConsumerGroups"`
	Migrations             []Resharding `json:"migrations"`
}
