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

// autoscaling.go's decoders (see payloaddecode.go).

var autoscalingConfiguredFields = fieldTable{names: []string{"enabled", "minShards", "maxShards", "targetRate", "maxLagSeconds", "scaleOutCooldown", "scaleInCooldown", "window", "maxStepFactor", "dryRun", "requestedBy", "reason"}}

func (e *AutoscalingConfigured) wireFields() *fieldTable { return &autoscalingConfiguredFields }
func (e *AutoscalingConfigured) reset()                  { *e = AutoscalingConfigured{} }
func (e *AutoscalingConfigured) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.Enabled, err = r.bool()
	case 1:
		e.MinShards, err = r.int()
	case 2:
		e.MaxShards, err = r.int()
	case 3:
		e.TargetRate, err = r.float64()
	case 4:
		e.MaxLagSeconds, err = r.float64()
	case 5:
		e.ScaleOutCooldown, err = r.int()
	case 6:
		e.ScaleInCooldown, err = r.int()
	case 7:
		e.EvaluationWindow, err = r.int()
	case 8:
		e.MaxStepFactor, err = r.float64()
	case 9:
		e.DryRun, err = r.bool()
	case 10:
		e.RequestedBy, err = r.string()
	case 11:
		e.Reason, err = r.string()
	}
	return err
}

var autoscalingDisabledFields = fieldTable{names: []string{"requestedBy", "reason"}}

func (e *AutoscalingDisabled) wireFields() *fieldTable { return &autoscalingDisabledFields }
func (e *AutoscalingDisabled) reset()                  { *e = AutoscalingDisabled{} }
func (e *AutoscalingDisabled) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.RequestedBy, err = r.string()
	case 1:
		e.Reason, err = r.string()
	}
	return err
}

var shardLoadFields = fieldTable{names: []string{"shardIndex", "rate", "lag", "lagSeconds"}}

func (e *ShardLoad) wireFields() *fieldTable { return &shardLoadFields }
func (e *ShardLoad) reset()                  { *e = ShardLoad{} }
func (e *ShardLoad) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ShardIndex, err = r.int()
	case 1:
		e.Rate, err = r.float64()
	case 2:
		e.Lag, err = r.int64()
	case 3:
		e.LagSeconds, err = r.float64()
	}
	return err
}

var autoscalingDecidedFields = fieldTable{names: []string{"from", "to", "direction", "dryRun", "reshardingId", "reason", "window", "rate", "shards"}}

func (e *AutoscalingDecided) wireFields() *fieldTable { return &autoscalingDecidedFields }
func (e *AutoscalingDecided) reset()                  { *e = AutoscalingDecided{} }
func (e *AutoscalingDecided) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.From, err = r.int()
	case 1:
		e.To, err = r.int()
	case 2:
		e.Direction, err = r.string()
	case 3:
		e.DryRun, err = r.bool()
	case 4:
		e.ReshardingID, err = r.string()
	case 5:
		e.Reason, err = r.string()
	case 6:
		e.Window, err = r.float64()
	case 7:
		e.Rate, err = r.float64()
	case 8:
		err = decodeStructs(r, &e.Shards)
	}
	return err
}
