package events

// Autoscaling (on-demand groups): the coordinator scales a group's shard count
// from the load Redis shows, within an operator's policy, and says why.

// AutoscalingConfigured is written when an operator sets a group's autoscaling
// policy (PUT .../autoscaling). It replaces the previous policy whole.
type AutoscalingConfigured struct {
	Enabled   bool `msgpack:"enabled" json:"enabled"`
	MinShards int  `msgpack:"minShards" json:"minShards"`
	MaxShards int  `msgpack:"maxShards" json:"maxShards"`
	// TargetRate is the entries per second one shard should take.
	TargetRate float64 `msgpack:"targetRate" json:"targetEntriesPerSecondPerShard"`
	// MaxLagSeconds (0: none) scales out when a shard's oldest unread entry
	// is older than this.
	MaxLagSeconds    float64 `msgpack:"maxLagSeconds" json:"maxLagSecondsPerShard"`
	ScaleOutCooldown int     `msgpack:"scaleOutCooldown" json:"scaleOutCooldownSeconds"`
	ScaleInCooldown  int     `msgpack:"scaleInCooldown" json:"scaleInCooldownSeconds"`
	EvaluationWindow int     `msgpack:"window" json:"evaluationWindowSeconds"`
	MaxStepFactor    float64 `msgpack:"maxStepFactor" json:"maxStepFactor"`
	DryRun           bool    `msgpack:"dryRun" json:"dryRun"`
	RequestedBy      string  `msgpack:"requestedBy" json:"requestedBy"`
	Reason           string  `msgpack:"reason" json:"reason"`
}

// AutoscalingDisabled is written when an operator turns autoscaling off
// (DELETE .../autoscaling).
type AutoscalingDisabled struct {
	RequestedBy string `msgpack:"requestedBy" json:"requestedBy"`
	Reason      string `msgpack:"reason" json:"reason"`
}

// ShardLoad is one shard's load over an evaluation window: entries added per
// second, entries not yet delivered to the group (-1: Redis could not tell),
// and the age in seconds of the oldest of them.
type ShardLoad struct {
	ShardIndex int     `msgpack:"shardIndex" json:"shardIndex"`
	Rate       float64 `msgpack:"rate" json:"entriesPerSecond"`
	Lag        int64   `msgpack:"lag" json:"lag"`
	LagSeconds float64 `msgpack:"lagSeconds" json:"lagSeconds"`
}

// AutoscalingDecided is written when the autoscaler decides a change of the
// shard count: with the resharding it requested (in the same decision as
// resharding.preparing), or, for a dry-run policy, the recommendation alone
// (ReshardingID ""). Rate is the group's entries per second over the Window
// (seconds) ending at the decision; Shards the per-shard load behind it.
type AutoscalingDecided struct {
	From         int         `msgpack:"from" json:"from"`
	To           int         `msgpack:"to" json:"to"`
	Direction    string      `msgpack:"direction" json:"direction"`
	DryRun       bool        `msgpack:"dryRun" json:"dryRun"`
	ReshardingID string      `msgpack:"reshardingId" json:"reshardingId"`
	Reason       string      `msgpack:"reason" json:"reason"`
	Window       float64     `msgpack:"window" json:"windowSeconds"`
	Rate         float64     `msgpack:"rate" json:"entriesPerSecond"`
	Shards       []ShardLoad `msgpack:"shards" json:"shards"`
}

// ShardSample is what the reconciler reads of one shard for the autoscaler
// (evidence, not an event): whether the stream exists, its entries-added,
// the group's lag (-1: Redis cannot tell), the time (Unix ms) of the oldest
// entry not yet delivered to the group (0: none), and Redis's clock (Unix ms).
type ShardSample struct {
	ShardIndex     int
	Exists         bool
	EntriesAdded   int64
	Lag            int64
	OldestUnreadMs int64
	NowMs          int64
}

// Autoscaling directions.
const (
	ScaleOut = "OUT"
	ScaleIn  = "IN"
)

func (AutoscalingConfigured) EventType() string { return "autoscaling.configured" }
func (AutoscalingDisabled) EventType() string   { return "autoscaling.disabled" }
func (AutoscalingDecided) EventType() string    { return "autoscaling.decided" }

func init() {
	Register("autoscaling.configured", func() Event { return &AutoscalingConfigured{} })
	Register("autoscaling.disabled", func() Event { return &AutoscalingDisabled{} })
	Register("autoscaling.decided", func() Event { return &AutoscalingDecided{} })
}
