package wire

import "time"

// AutoscalingRequest is PUT .../groups/{g}/autoscaling: the group's policy.
// minShards, maxShards and targetEntriesPerSecondPerShard are required; the
// others take their defaults when missing or null (docs/autoscaling.md).
type AutoscalingRequest struct {
	Enabled                        *bool    `json:"enabled"`
	MinShards                      *int     `json:"minShards"`
	MaxShards                      *int     `json:"maxShards"`
	TargetEntriesPerSecondPerShard *float64 `json:"targetEntriesPerSecondPerShard"`
	MaxLagSecondsPerShard          *float64 `json:"maxLagSecondsPerShard"`
	ScaleOutCooldownSeconds        *int     `json:"scaleOutCooldownSeconds"`
	ScaleInCooldownSeconds         *int     `json:"scaleInCooldownSeconds"`
	EvaluationWindowSeconds        *int     `json:"evaluationWindowSeconds"`
	MaxStepFactor                  *float64 `json:"maxStepFactor"`
	DryRun                         *bool    `json:"dryRun"`
	RequestedBy                    string   `json:"requestedBy"`
	Reason                         string   `json:"reason"`
}

// AutoscalingDeleteRequest is DELETE .../groups/{g}/autoscaling (the body is
// optional; requestedBy defaults to the caller).
type AutoscalingDeleteRequest struct {
	RequestedBy string `json:"requestedBy"`
	Reason      string `json:"reason"`
}

// AutoscalingPolicy is a stored policy.
type AutoscalingPolicy struct {
	Enabled                        bool      `json:"enabled"`
	MinShards                      int       `json:"minShards"`
	MaxShards                      int       `json:"maxShards"`
	TargetEntriesPerSecondPerShard float64   `json:"targetEntriesPerSecondPerShard"`
	MaxLagSecondsPerShard          *float64  `json:"maxLagSecondsPerShard"`
	ScaleOutCooldownSeconds        int       `json:"scaleOutCooldownSeconds"`
	ScaleInCooldownSeconds         int       `json:"scaleInCooldownSeconds"`
	EvaluationWindowSeconds        int       `json:"evaluationWindowSeconds"`
	MaxStepFactor                  float64   `json:"maxStepFactor"`
	DryRun                         bool      `json:"dryRun"`
	RequestedBy                    string    `json:"requestedBy"`
	Reason                         string    `json:"reason"`
	ConfiguredAt                   time.Time `json:"configuredAt"`
}

// ShardLoad is one shard's load over the evaluation window.
type ShardLoad struct {
	Shard            ShardRef `json:"shard"`
	EntriesPerSecond float64  `json:"entriesPerSecond"`
	// Lag is the entries not yet delivered to the group (null: unknown).
	Lag        *int64  `json:"lag"`
	LagSeconds float64 `json:"lagSeconds"`
}

// AutoscalingLoad is the load the autoscaler sees.
type AutoscalingLoad struct {
	MeasuredAt       time.Time   `json:"measuredAt"`
	WindowSeconds    float64     `json:"windowSeconds"`
	Complete         bool        `json:"complete"`
	EntriesPerSecond float64     `json:"entriesPerSecond"`
	Lag              *int64      `json:"lag"`
	MaxLagSeconds    float64     `json:"maxLagSeconds"`
	Shards           []ShardLoad `json:"shards"`
	Error            *string     `json:"error"`
}

// AutoscalingDecision is a decision of the autoscaler: a change (SCALE_OUT,
// SCALE_IN, DRY_RUN), or a hold (HOLD) with its reason; REFUSED when a change
// was decided but could not be started.
type AutoscalingDecision struct {
	At           time.Time `json:"at"`
	Outcome      string    `json:"outcome"`
	From         int       `json:"from"`
	To           int       `json:"to"`
	Reason       string    `json:"reason"`
	ReshardingID *string   `json:"reshardingId"`
	EventID      *string   `json:"eventId"`
	Evidence     *Evidence `json:"evidence"`
}

// Evidence is the load a decision was made on.
type Evidence struct {
	WindowSeconds    float64     `json:"windowSeconds"`
	EntriesPerSecond float64     `json:"entriesPerSecond"`
	Shards           []ShardLoad `json:"shards"`
}

// Recommendation is the count the load asks for now, within the policy.
type Recommendation struct {
	ShardCount int    `json:"shardCount"`
	Reason     string `json:"reason"`
}

// AutoscalingResponse answers GET, PUT and DELETE .../groups/{g}/autoscaling.
// Load, lastDecision and recommendation are the leader's latest evaluation
// (null before the first since it leads); lastChange is the last decision
// the log recorded.
type AutoscalingResponse struct {
	StreamPrefix   string               `json:"streamPrefix"`
	ConsumerGroup  string               `json:"consumerGroup"`
	ShardCount     int                  `json:"shardCount"`
	Policy         *AutoscalingPolicy   `json:"policy"`
	Load           *AutoscalingLoad     `json:"load"`
	LastDecision   *AutoscalingDecision `json:"lastDecision"`
	LastChange     *AutoscalingDecision `json:"lastChange"`
	Recommendation *Recommendation      `json:"recommendation"`
}
