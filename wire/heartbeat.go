package wire

import "time"

// ProtocolVersion is the only coordination protocol version.
const ProtocolVersion = 1

// Heartbeat statuses (CONTRACT §3.4). Every protocol outcome of a heartbeat is
// HTTP 200 with one of them.
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

// States of a revoke report: REVOKING or DRAINING while in-flight messages
// finish, REVOKED (with inFlight 0) once the shard is released.
const (
	RevokeRevoking = "REVOKING"
	RevokeDraining = "DRAINING"
	RevokeRevoked  = "REVOKED"
)

// HeartbeatRequest is the body of a member heartbeat. The pointer fields are
// required (or nullable) ones whose absence the coordinator must tell from a
// zero: it answers 400 with "must not be null" for them.
type HeartbeatRequest struct {
	ProtocolVersion         *int             `json:"protocolVersion"`
	RequestID               string           `json:"requestId"`
	MemberID                string           `json:"memberId"`
	MemberName              *string          `json:"memberName"`
	MemberEpoch             *int64           `json:"memberEpoch"`
	MetadataVersion         *int64           `json:"metadataVersion"`
	RuntimeConsumerCapacity *Capacity        `json:"runtimeConsumerCapacity"`
	OwnedShards             []ShardRef       `json:"ownedShards"`
	RevokingShards          []RevokingReport `json:"revokingShards"`
	ShardProgress           []ShardProgress  `json:"shardProgress"`
}

// Capacity is a member's local worker capacity (recorded, not used for assignment).
type Capacity struct {
	RuntimeMaxConcurrency *int `json:"runtimeMaxConcurrency"`
	AvailableConcurrency  *int `json:"availableConcurrency"`
}

// RevokingReport is a member's revoke progress on one shard. AckedAt is the
// member's own time (ISO-8601), recorded as text.
type RevokingReport struct {
	Shard    *ShardRef `json:"shard"`
	State    string    `json:"state"`
	InFlight int       `json:"inFlight"`
	AckedAt  *string   `json:"ackedAt"`
}

// ShardProgress is a member's consumption progress on one shard, as it reports
// it and as monitoring shows it.
type ShardProgress struct {
	Shard           ShardRef   `json:"shard"`
	StreamKey       string     `json:"streamKey"`
	LastDeliveredID *string    `json:"lastDeliveredId"`
	LastAckedID     *string    `json:"lastAckedId"`
	PendingCount    int64      `json:"pendingCount"`
	UpdatedAt       *time.Time `json:"updatedAt"`
}

// HeartbeatResponse is the coordinator's answer to a heartbeat.
type HeartbeatResponse struct {
	ResponseTo          string              `json:"responseTo"`
	Status              string              `json:"status"`
	MemberID            string              `json:"memberId"`
	MemberEpoch         int64               `json:"memberEpoch"`
	HeartbeatIntervalMs int64               `json:"heartbeatIntervalMs"`
	RebalanceTimeoutMs  int64               `json:"rebalanceTimeoutMs"`
	GroupEpoch          int64               `json:"groupEpoch"`
	AssignmentEpoch     int64               `json:"assignmentEpoch"`
	MetadataVersion     int64               `json:"metadataVersion"`
	Assignment          HeartbeatAssignment `json:"assignment"`
}

// HeartbeatAssignment is the assignment part of a heartbeat answer (the
// contract's AssignmentResponse): shards the member may read now, and shards
// it gets once their previous owner releases them.
type HeartbeatAssignment struct {
	AssignedShards  []ShardRef `json:"assignedShards"`
	PendingShards   []ShardRef `json:"pendingShards"`
	MetadataVersion int64      `json:"metadataVersion"`
	// Barriers (ordering KEY only; the reference clients ignore it): on each
	// listed shard, entries with an id above After must not be processed
	// until an answer no longer lists the shard. One per shard, the lowest
	// unreleased position.
	Barriers []ShardBarrier `json:"barriers,omitempty"`
	// Ordering is "KEY" or "NONE".
	Ordering string `json:"ordering,omitempty"`
}

// ShardBarrier is a barrier a member honours: hold entries of Shard above After.
type ShardBarrier struct {
	Shard ShardRef `json:"shard"`
	After string   `json:"after"`
}
