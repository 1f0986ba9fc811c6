package events

// ReshardingPreparing is written when an operator's scale request is accepted: a
// resharding from FromShardCount to ToShardCount exists in state PREPARING and
// becomes the group's active resharding. Nothing routes differently yet.
// CreatedShards are the shards of the target whose streams Redis did not have
// when it was decided: the coordinator creates them (KeysChecked: the record
// is there; entries of earlier builds lack it, and every shard their
// resharding provisioned counts as created).
type ReshardingPreparing struct {
	ReshardingID   string `msgpack:"reshardingId" json:"reshardingId"`
	FromShardCount int    `msgpack:"fromShardCount" json:"fromShardCount"`
	ToShardCount   int    `msgpack:"toShardCount" json:"toShardCount"`
	RequestedBy    string `msgpack:"requestedBy" json:"requestedBy"`
	Reason         string `msgpack:"reason" json:"reason"`
	KeysChecked    bool   `msgpack:"keysChecked,omitempty" json:"keysChecked,omitempty"`
	CreatedShards  []int  `msgpack:"createdShards,omitempty" json:"createdShards,omitempty"`
}

// ReshardingProvisioned is written after every shard stream 0..ToShardCount-1 and
// its consumer group exist in Redis.
type ReshardingProvisioned struct {
	ReshardingID string `msgpack:"reshardingId" json:"reshardingId"`
	Shards       int    `msgpack:"shards" json:"shards"`
}

// ReshardingActivated is written when the new shard count takes effect (state
// ACTIVE): producers route over ShardCount shards, consumers are assigned shards
// 0..AssignableCount-1. During a scale-in AssignableCount stays at the old count,
// so removed shards stay with their owners until Redis proves them drained.
// StreamMetadataVersion is the stream's metadata version after the change,
// which takes the stream's layout to ShardCount too (0: the prefix has no
// stream metadata).
type ReshardingActivated struct {
	ReshardingID    string `msgpack:"reshardingId" json:"reshardingId"`
	ShardCount      int    `msgpack:"shardCount" json:"shardCount"`
	AssignableCount int    `msgpack:"assignableCount" json:"assignableCount"`
	Epochs
	StreamMetadataVersion int64 `msgpack:"streamMetadataVersion,omitempty" json:"streamMetadataVersion,omitempty"`
}

// ReshardingDraining is written when members have converged on the new layout and
// the removed shards (if any) now wait for Redis to prove them drained (state DRAINING).
type ReshardingDraining struct {
	ReshardingID string `msgpack:"reshardingId" json:"reshardingId"`
	Epochs
}

// ShardDrain is Redis's evidence about one removed shard: every consumer group
// attached to its stream with pending count and lag (-1: Redis reported lag=null).
type ShardDrain struct {
	ShardIndex int          `msgpack:"shardIndex" json:"shardIndex"`
	StreamKey  string       `msgpack:"streamKey" json:"streamKey"`
	Exists     bool         `msgpack:"exists" json:"exists"`
	Groups     []GroupDrain `msgpack:"groups" json:"groups"`
}

// GroupDrain is one Redis consumer group's state on a removed shard.
type GroupDrain struct {
	Name    string `msgpack:"name" json:"name"`
	Pending int64  `msgpack:"pending" json:"pending"`
	Lag     int64  `msgpack:"lag" json:"lag"`
}

// ReshardingDrained is written when Redis proved every removed shard drained
// (pending 0 and known lag 0 for every consumer group). The removed shards leave
// the assignable set (AssignableCount drops to the routed count) and are revoked
// from their owners.
type ReshardingDrained struct {
	ReshardingID    string       `msgpack:"reshardingId" json:"reshardingId"`
	AssignableCount int          `msgpack:"assignableCount" json:"assignableCount"`
	Evidence        []ShardDrain `msgpack:"evidence" json:"evidence"`
	Epochs
}

// ReshardingReopened is written when a removed shard, already revoked, received
// entries again (a producer with stale routing): it is assigned again until drained.
type ReshardingReopened struct {
	ReshardingID    string       `msgpack:"reshardingId" json:"reshardingId"`
	AssignableCount int          `msgpack:"assignableCount" json:"assignableCount"`
	Evidence        []ShardDrain `msgpack:"evidence" json:"evidence"`
	Epochs
}

// ReshardingCompleted is written when a resharding reaches its terminal state:
// DEPRECATED (success) or ROLLED_BACK. The group has no active resharding after it.
type ReshardingCompleted struct {
	ReshardingID    string       `msgpack:"reshardingId" json:"reshardingId"`
	State           string       `msgpack:"state" json:"state"`
	Evidence        []ShardDrain `msgpack:"evidence,omitempty" json:"evidence"`
	MetadataVersion int64        `msgpack:"metadataVersion" json:"metadataVersion"`
}

// ReshardingRolledBack is written when an operator rolls a resharding back. With
// policy "metadata" the old count is restored at once (state ROLLED_BACK); with
// policy "drain" (a scale-out whose new shards hold entries) the old count is
// routed at once and the new shards drain like a scale-in (state ROLLING_BACK).
type ReshardingRolledBack struct {
	ReshardingID    string `msgpack:"reshardingId" json:"reshardingId"`
	Policy          string `msgpack:"policy" json:"policy"`
	State           string `msgpack:"state" json:"state"`
	ShardCount      int    `msgpack:"shardCount" json:"shardCount"`
	AssignableCount int    `msgpack:"assignableCount" json:"assignableCount"`
	RequestedBy     string `msgpack:"requestedBy" json:"requestedBy"`
	Reason          string `msgpack:"reason" json:"reason"`
	Epochs
	// StreamMetadataVersion is as in ReshardingActivated: the stream's
	// layout goes back to ShardCount with the group's.
	StreamMetadataVersion int64 `msgpack:"streamMetadataVersion,omitempty" json:"streamMetadataVersion,omitempty"`
}

// ShardsRetired is written after a finished resharding's removed shard streams were
// deleted (or deliberately kept, Kept=true), so a producer with stale routing fails
// its XADD NOMKSTREAM instead of writing where nobody reads. KeptKeys are
// removed shard streams left in place because the coordinator did not create
// them (adopted ones): it deletes only what it created.
type ShardsRetired struct {
	ReshardingID string   `msgpack:"reshardingId" json:"reshardingId"`
	StreamKeys   []string `msgpack:"streamKeys" json:"streamKeys"`
	Kept         bool     `msgpack:"kept" json:"kept"`
	KeptKeys     []string `msgpack:"keptKeys,omitempty" json:"keptKeys,omitempty"`
}

// ReshardingStep is an event of a resharding's lifecycle (from
// resharding.preparing to resharding.retired): Resharding names the
// resharding it steps. Replay's history and rollback plans follow a
// resharding by it.
type ReshardingStep interface {
	Event
	Resharding() string
}

func (e *ReshardingPreparing) Resharding() string   { return e.ReshardingID }
func (e *ReshardingProvisioned) Resharding() string { return e.ReshardingID }
func (e *ReshardingActivated) Resharding() string   { return e.ReshardingID }
func (e *ReshardingDraining) Resharding() string    { return e.ReshardingID }
func (e *ReshardingDrained) Resharding() string     { return e.ReshardingID }
func (e *ReshardingReopened) Resharding() string    { return e.ReshardingID }
func (e *ReshardingCompleted) Resharding() string   { return e.ReshardingID }
func (e *ReshardingRolledBack) Resharding() string  { return e.ReshardingID }
func (e *ShardsRetired) Resharding() string         { return e.ReshardingID }

func (ReshardingPreparing) EventType() string   { return "resharding.preparing" }
func (ReshardingProvisioned) EventType() string { return "resharding.provisioned" }
func (ReshardingActivated) EventType() string   { return "resharding.activated" }
func (ReshardingDraining) EventType() string    { return "resharding.draining" }
func (ReshardingDrained) EventType() string     { return "resharding.drained" }
func (ReshardingReopened) EventType() string    { return "resharding.reopened" }
func (ReshardingCompleted) EventType() string   { return "resharding.completed" }
func (ReshardingRolledBack) EventType() string  { return "resharding.rolled_back" }
func (ShardsRetired) EventType() string         { return "resharding.retired" }

func init() {
	Register("resharding.preparing", func() Event { return &ReshardingPreparing{} })
	Register("resharding.provisioned", func() Event { return &ReshardingProvisioned{} })
	Register("resharding.activated", func() Event { return &ReshardingActivated{} })
	Register("resharding.draining", func() Event { return &ReshardingDraining{} })
	Register("resharding.drained", func() Event { return &ReshardingDrained{} })
	Register("resharding.reopened", func() Event { return &ReshardingReopened{} })
	Register("resharding.completed", func() Event { return &ReshardingCompleted{} })
	Register("resharding.rolled_back", func() Event { return &ReshardingRolledBack{} })
	Register("resharding.retired", func() Event { return &ShardsRetired{} })
}
