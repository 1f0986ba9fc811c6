package client

import "time"

// ProtocolVersion is the coordination protocol version the SDK speaks.
const ProtocolVersion = 1

// Heartbeat statuses, as on the wire (CONTRACT §3.4).
const (
	StatusOK                  = "OK"
	StatusRetry               = "RETRY"
	StatusSyncMetadata        = "SYNC_METADATA"
	StatusRevokePending       = "REVOKE_PENDING"
	StatusUnknownMember       = "UNKNOWN_MEMBER_ID"
	StatusFenced              = "FENCED_MEMBER_EPOCH"
	StatusUnsupportedProtocol = "UNSUPPORTED_PROTOCOL"
	StatusInvalidRequest      = "INVALID_REQUEST"
)

// Revoke report states.
const (
	RevokeDraining = "DRAINING"
	RevokeRevoked  = "REVOKED"
)

// Shard is the wire form of a shard: {"shardIndex": n}.
type Shard struct {
	ShardIndex int `json:"shardIndex"`
}

// Shards converts indexes to their wire form (never nil).
func Shards(idx []int) []Shard {
	out := make([]Shard, len(idx))
	for i, s := range idx {
		out[i] = Shard{ShardIndex: s}
	}
	return out
}

// Indexes converts wire shards to indexes (never nil).
func Indexes(shards []Shard) []int {
	out := make([]int, len(shards))
	for i, s := range shards {
		out[i] = s.ShardIndex
	}
	return out
}

// HeartbeatRequest is the body of a member heartbeat.
type HeartbeatRequest struct {
	ProtocolVersion         int             `json:"protocolVersion"`
	RequestID               string          `json:"requestId"`
	MemberID                string          `json:"memberId"`
	MemberName              string          `json:"memberName"`
	MemberEpoch             int64           `json:"memberEpoch"`
	MetadataVersion         int64           `json:"metadataVersion"`
	RuntimeConsumerCapacity Capacity        `json:"runtimeConsumerCapacity"`
	OwnedShards             []Shard         `json:"ownedShards"`
	RevokingShards          []RevokeReport  `json:"revokingShards"`
	ShardProgress           []ShardProgress `json:"shardProgress"`
}

// Capacity is a logical member's local worker capacity.
type Capacity struct {
	RuntimeMaxConcurrency int `json:"runtimeMaxConcurrency"`
	AvailableConcurrency  int `json:"availableConcurrency"`
}

// RevokeReport is a member's revoke progress on one shard: DRAINING while
// in-flight messages finish, REVOKED (with InFlight 0) once released.
type RevokeReport struct {
	Shard    Shard      `json:"shard"`
	State    string     `json:"state"`
	InFlight int        `json:"inFlight"`
	AckedAt  *time.Time `json:"ackedAt"`
}

// ShardProgress is what a member reports about its consumption of one shard.
type ShardProgress struct {
	Shard           Shard      `json:"shard"`
	StreamKey       string     `json:"streamKey"`
	LastDeliveredID *string    `json:"lastDeliveredId"`
	LastAckedID     *string    `json:"lastAckedId"`
	PendingCount    int64      `json:"pendingCount"`
	UpdatedAt       *time.Time `json:"updatedAt"`
}

// HeartbeatResponse is the coordinator's answer to a heartbeat.
type HeartbeatResponse struct {
	ResponseTo          string     `json:"responseTo"`
	Status              string     `json:"status"`
	MemberID            string     `json:"memberId"`
	MemberEpoch         int64      `json:"memberEpoch"`
	HeartbeatIntervalMs int64      `json:"heartbeatIntervalMs"`
	RebalanceTimeoutMs  int64      `json:"rebalanceTimeoutMs"`
	GroupEpoch          int64      `json:"groupEpoch"`
	AssignmentEpoch     int64      `json:"assignmentEpoch"`
	MetadataVersion     int64      `json:"metadataVersion"`
	Assignment          Assignment `json:"assignment"`
}

// Assignment is the assignment part of a heartbeat answer: shards the member
// may read now, and shards it will get once their previous owner releases them.
type Assignment struct {
	AssignedShards  []Shard `json:"assignedShards"`
	PendingShards   []Shard `json:"pendingShards"`
	MetadataVersion int64   `json:"metadataVersion"`
}

// Routing is the producer routing metadata of a group.
type Routing struct {
	StreamPrefix     string         `json:"streamPrefix"`
	ConsumerGroup    string         `json:"consumerGroup"`
	MetadataVersion  int64          `json:"metadataVersion"`
	ShardCount       int            `json:"shardCount"`
	StreamKeyPattern string         `json:"streamKeyPattern"`
	Shards           []RoutingShard `json:"shards"`
}

// RoutingShard is one shard of the producer routing.
type RoutingShard struct {
	ShardIndex int    `json:"shardIndex"`
	StreamKey  string `json:"streamKey"`
	RedisSlot  int    `json:"redisSlot"`
}

// ErrorResponse is the contract's error body.
type ErrorResponse struct {
	Status    string `json:"status"`
	ErrorCode string `json:"errorCode"`
	Message   string `json:"message"`
}

// LoginResponse answers POST /coord/v1/auth/login.
type LoginResponse struct {
	AccessToken      string    `json:"accessToken"`
	Token            string    `json:"token"`
	TokenType        string    `json:"tokenType"`
	ExpiresAt        time.Time `json:"expiresAt"`
	ExpiresInSeconds int64     `json:"expiresInSeconds"`
	Roles            []string  `json:"roles"`
}
