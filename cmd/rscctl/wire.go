package main

import "time"

// The coordinator's wire shapes, as far as rscctl reads them (docs/openapi.yaml
// has the full ones). Unknown fields are ignored, so newer servers keep working.

type shardRef struct {
	ShardIndex int `json:"shardIndex"`
}

type group struct {
	StreamPrefix             string         `json:"streamPrefix"`
	ConsumerGroup            string         `json:"consumerGroup"`
	State                    string         `json:"state"`
	GroupEpoch               int64          `json:"groupEpoch"`
	AssignmentEpoch          int64          `json:"assignmentEpoch"`
	MetadataVersion          int64          `json:"metadataVersion"`
	ShardCount               int            `json:"shardCount"`
	AssignableShardCount     *int           `json:"assignableShardCount"`
	ActiveMigration          *migration     `json:"activeMigration"`
	ActiveReshardingPhase    *string        `json:"activeReshardingPhase"`
	TargetAssignmentSummary  map[string]int `json:"targetAssignmentSummary"`
	CurrentAssignmentSummary map[string]int `json:"currentAssignmentSummary"`
	CreatedAt                time.Time      `json:"createdAt"`
	UpdatedAt                time.Time      `json:"updatedAt"`
}

type migration struct {
	ReshardingID   string     `json:"reshardingId"`
	FromShardCount int        `json:"fromShardCount"`
	ToShardCount   int        `json:"toShardCount"`
	State          string     `json:"state"`
	CreatedAt      time.Time  `json:"createdAt"`
	UpdatedAt      time.Time  `json:"updatedAt"`
	Kind           string     `json:"kind"`
	Phase          string     `json:"phase"`
	RequestedBy    string     `json:"requestedBy"`
	Reason         string     `json:"reason"`
	Drain          []drainRow `json:"drain"`
	DrainProven    bool       `json:"drainProven"`
	Revoke         struct {
		Holding   map[string][]shardRef `json:"holding"`
		Remaining int                   `json:"remaining"`
		Started   bool                  `json:"started"`
	} `json:"revokeProgress"`
	Rollback struct {
		Eligible bool   `json:"eligible"`
		Reason   string `json:"reason"`
		Policy   string `json:"policy"`
	} `json:"rollback"`
}

type drainRow struct {
	Shard        shardRef `json:"shard"`
	StreamKey    string   `json:"streamKey"`
	Exists       bool     `json:"exists"`
	RedisPending *int64   `json:"redisPending"`
	RedisLag     *int64   `json:"redisLag"`
	Owners       []string `json:"owners"`
	Drained      bool     `json:"drained"`
}

type member struct {
	MemberID             string     `json:"memberId"`
	MemberName           string     `json:"memberName"`
	State                string     `json:"state"`
	MemberEpoch          int64      `json:"memberEpoch"`
	CurrentAssignment    []shardRef `json:"currentAssignment"`
	GrantedAssignment    []shardRef `json:"grantedAssignment"`
	TargetAssignment     []shardRef `json:"targetAssignment"`
	Revoking             []shardRef `json:"revoking"`
	MemberLeaseExpiresAt time.Time  `json:"memberLeaseExpiresAt"`
}

type assignments struct {
	TargetAssignment map[string][]shardRef `json:"targetAssignment"`
}

type routing struct {
	StreamPrefix     string `json:"streamPrefix"`
	ConsumerGroup    string `json:"consumerGroup"`
	MetadataVersion  int64  `json:"metadataVersion"`
	ShardCount       int    `json:"shardCount"`
	StreamKeyPattern string `json:"streamKeyPattern"`
	Shards           []struct {
		ShardIndex int    `json:"shardIndex"`
		StreamKey  string `json:"streamKey"`
		RedisSlot  int    `json:"redisSlot"`
	} `json:"shards"`
}

type loginResponse struct {
	AccessToken      string    `json:"accessToken"`
	TokenType        string    `json:"tokenType"`
	ExpiresAt        time.Time `json:"expiresAt"`
	ExpiresInSeconds int64     `json:"expiresInSeconds"`
	Roles            []string  `json:"roles"`
}

// Migration states that end a resharding.
const (
	stateDeprecated = "DEPRECATED"
	stateRolledBack = "ROLLED_BACK"
)
