package wire

import "time"

// Liveness is the /healthz body: the process is up.
type Liveness struct {
	Status string `json:"status"`
}

// Readiness is the /readyz body.
type Readiness struct {
	Status      string `json:"status"`
	LastEventID string `json:"lastEventId"`
	// Role is STANDALONE (the only writer), LEADER or FOLLOWER (--ha).
	Role string `json:"role"`
	// Leader is the coordinator id of the leader as this replica last saw it
	// ("" when nobody held the lease); LeaderURL where it takes writes.
	Leader    string `json:"leader"`
	LeaderURL string `json:"leaderUrl"`
	// ErrorCode and Message say why it is not ready: with status
	// METADATA_CORRUPT (COORDINATOR_METADATA_CORRUPT, naming the entry),
	// LOG_LOST (LOG_LOST), or NOT_READY with REDIS_EVICTION_POLICY or
	// TOKEN_SECRET_MISMATCH.
	ErrorCode string `json:"errorCode,omitempty"`
	Message   string `json:"message,omitempty"`
	// QuarantinedPrefixes counts the stream prefixes quarantined by a log
	// entry that cannot be read (omitted when none): the coordinator is
	// READY and serves every other prefix. Which ones, and why, is in the
	// authenticated /coord/v1/monitoring/health.
	QuarantinedPrefixes int `json:"quarantinedPrefixes,omitempty"`
	// LogLost describes the loss while the status is LOG_LOST.
	LogLost *LogLoss `json:"logLost,omitempty"`
	// Redis is the last reading of the Redis holding the log (absent
	// before the first).
	Redis *RedisDurability `json:"redis,omitempty"`
}

// Quarantine is a stream prefix quarantined by a log entry that cannot be
// read: every route of the prefix answers 409 COORDINATOR_METADATA_CORRUPT
// naming the entry.
type Quarantine struct {
	StreamPrefix string `json:"streamPrefix"`
	// EntryID and Type are the entry and the event type it names; Reason
	// why it cannot be read.
	EntryID string `json:"entryId"`
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	// SkippedEntries counts the prefix's later entries not applied.
	SkippedEntries int64 `json:"skippedEntries"`
}

// LogLoss is what a coordinator found when the event log no longer held
// the last entry it applied (readiness status LOG_LOST).
type LogLoss struct {
	// Cause is LOG_GONE (the log key is gone or empty: a Redis restart
	// without persistence, FLUSHALL, eviction) or ENTRIES_LOST (a failover
	// lost the newest entries).
	Cause string `json:"cause"`
	// ProjectionLastID is the position of the state the coordinator keeps
	// and serves; LogLastID and LogLength what the log held when the loss
	// was found.
	ProjectionLastID string `json:"projectionLastId"`
	LogLastID        string `json:"logLastId"`
	LogLength        int64  `json:"logLength"`
	// LostEntries (ENTRIES_LOST) is how many entries the coordinator applied
	// after the newest one the log still holds; AtLeast when that is a
	// lower bound.
	LostEntries int64     `json:"lostEntries"`
	AtLeast     bool      `json:"atLeast"`
	Since       time.Time `json:"since"`
	// RestoredAt and RestoredFrom name a restore the leader wrote from a
	// shorter state than this replica's (LongerThanRestore): this replica
	// holds entries the restored log lacks.
	RestoredAt        string `json:"restoredAt,omitempty"`
	RestoredFrom      string `json:"restoredFrom,omitempty"`
	LongerThanRestore bool   `json:"longerThanRestore"`
}

// RedisDurability is what the coordinator last read of the Redis servers
// holding its keys.
type RedisDurability struct {
	// MaxmemoryPolicy is the policy that matters (the evicting one, else
	// that of the server holding the log); Node its server ("" for one).
	MaxmemoryPolicy string `json:"maxmemoryPolicy"`
	Node            string `json:"node,omitempty"`
	// Evicts: the policy can evict the coordinator's keys (writes are
	// refused unless EvictionAllowed: --allow-redis-eviction).
	Evicts          bool `json:"evicts"`
	EvictionAllowed bool `json:"evictionAllowed"`
	// Persistence of the server holding the log: aof, rdb, aof+rdb, off (a
	// restart loses the log) or unknown (CONFIG GET save refused).
	Persistence string    `json:"persistence"`
	CheckedAt   time.Time `json:"checkedAt"`
}

// LogRestoreRequest is POST /coord/v1/log/restore's body: who restores the
// log and why (both required, at most 256 bytes each).
type LogRestoreRequest struct {
	RequestedBy string `json:"requestedBy"`
	Reason      string `json:"reason"`
}

// LogRestoreResponse is what a restore wrote: the log.restored entry (the
// snapshot of the restored state has the same id), the position of the
// state restored, and the loss it ended.
type LogRestoreResponse struct {
	EventID      string `json:"eventId"`
	RestoredFrom string `json:"restoredFrom"`
	LogLastID    string `json:"logLastId"`
	Cause        string `json:"cause"`
	LostEntries  int64  `json:"lostEntries"`
	AtLeast      bool   `json:"atLeast"`
}

// HealthResponse is the contract's health body.
type HealthResponse struct {
	Status        string `json:"status"`
	CoordinatorID string `json:"coordinatorId"`
	Redis         string `json:"redis"`
	Loop          string `json:"loop"`
	Ready         bool   `json:"ready"`
	LastEventID   string `json:"lastEventId"`
	// Role, Leader and LeaderURL: as in Readiness.
	Role      string `json:"role"`
	Leader    string `json:"leader"`
	LeaderURL string `json:"leaderUrl"`
	// Quarantined are the quarantined stream prefixes the caller may see
	// (omitted when none).
	Quarantined []Quarantine `json:"quarantined,omitempty"`
}

// CompatibilityResponse answers GET /coord/v1/monitoring/compatibility. This
// and the structs under it keep their fields in the order the answer has
// always had them (alphabetical).
type CompatibilityResponse struct {
	CoordinationVersions          []CoordinationVersion `json:"coordinationVersions"`
	CurrentCoordinationVersion    int                   `json:"currentCoordinationVersion"`
	SupportedCoordinationVersions VersionRange          `json:"supportedCoordinationVersions"`
}

// VersionRange is the range of coordination versions a coordinator speaks.
type VersionRange struct {
	Max int `json:"max"`
	Min int `json:"min"`
}

// CoordinationVersion is one coordination protocol version and its life.
type CoordinationVersion struct {
	DeprecatedIn          *SemanticVersion `json:"deprecatedIn"`
	IntroducedIn          SemanticVersion  `json:"introducedIn"`
	MinimumSupportedUntil SemanticVersion  `json:"minimumSupportedUntil"`
	RemovedIn             *SemanticVersion `json:"removedIn"`
	Status                string           `json:"status"`
	TimingDefaults        TimingDefaults   `json:"timingDefaults"`
	Version               int              `json:"version"`
}

// TimingDefaults are a coordinator's heartbeat timings as ISO-8601 durations.
type TimingDefaults struct {
	HeartbeatInterval string `json:"heartbeatInterval"`
	MemberLeaseTTL    string `json:"memberLeaseTtl"`
	RebalanceTimeout  string `json:"rebalanceTimeout"`
}

// SemanticVersion is a release version.
type SemanticVersion struct {
	Major     int     `json:"major"`
	Minor     int     `json:"minor"`
	Patch     int     `json:"patch"`
	Qualifier *string `json:"qualifier"`
	Version   string  `json:"version"`
}

// MembersResponse answers GET .../groups/{g}/members.
type MembersResponse struct {
	Members []MemberMetadata `json:"members"`
}

// MemberMetadata is the contract's member view.
type MemberMetadata struct {
	MemberID              string          `json:"memberId"`
	MemberName            string          `json:"memberName"`
	State                 string          `json:"state"`
	MemberEpoch           int64           `json:"memberEpoch"`
	MetadataVersion       int64           `json:"metadataVersion"`
	RuntimeMaxConcurrency int             `json:"runtimeMaxConcurrency"`
	ActiveConsumerWorkers int             `json:"activeConsumerWorkers"`
	CurrentAssignment     []ShardRef      `json:"currentAssignment"`
	GrantedAssignment     []ShardRef      `json:"grantedAssignment"`
	TargetAssignment      []ShardRef      `json:"targetAssignment"`
	Revoking              []ShardRef      `json:"revoking"`
	LastHeartbeatAt       time.Time       `json:"lastHeartbeatAt"`
	MemberLeaseExpiresAt  time.Time       `json:"memberLeaseExpiresAt"`
	RebalanceTimeoutMs    int64           `json:"rebalanceTimeoutMs"`
	RebalanceDeadlineAt   *time.Time      `json:"rebalanceDeadlineAt"`
	ShardProgress         []ShardProgress `json:"shardProgress"`
	JoinedAt              time.Time       `json:"joinedAt"`
}

// Assignments is the contract's AssignmentsResponse: who should read, who may
// read and who reads what, with the invariants the coordinator found broken.
type Assignments struct {
	TargetAssignment    map[string][]ShardRef `json:"targetAssignment"`
	CurrentAssignments  map[string][]ShardRef `json:"currentAssignments"`
	GrantedAssignments  map[string][]ShardRef `json:"grantedAssignments"`
	RevokeProgress      map[string][]ShardRef `json:"revokeProgress"`
	PendingAssignments  map[string][]ShardRef `json:"pendingAssignments"`
	InvariantViolations []string              `json:"invariantViolations"`
}

// ConsumptionResponse answers GET .../groups/{g}/consumption.
type ConsumptionResponse struct {
	Progress []ConsumerShardProgress `json:"progress"`
}

// ConsumerShardProgress is one row of the consumption endpoint: a member and
// the progress it reported on one shard (its fields follow the member's).
type ConsumerShardProgress struct {
	StreamPrefix  string `json:"streamPrefix"`
	ConsumerGroup string `json:"consumerGroup"`
	MemberID      string `json:"memberId"`
	MemberName    string `json:"memberName"`
	MemberState   string `json:"memberState"`
	ShardProgress
}

// OffsetsResponse answers GET .../groups/{g}/offsets. Its fields are in the
// order the answer has always had them (alphabetical).
type OffsetsResponse struct {
	// AsOf is when Redis was read (the coordinator keeps a cache refreshed in
	// the background; see docs/security.md).
	AsOf          time.Time `json:"asOf"`
	ConsumerGroup string    `json:"consumerGroup"`
	// LagSeconds and OldestPendingSeconds are the greatest of the shards'
	// (the group's oldest entry not yet delivered, and not yet acknowledged);
	// null when any shard's is. LagStatus is the worst shard's.
	LagSeconds            *float64      `json:"lagSeconds"`
	LagStatus             string        `json:"lagStatus"`
	MemoryUsageKnown      bool          `json:"memoryUsageKnown"`
	OldestPendingSeconds  *float64      `json:"oldestPendingSeconds"`
	Shards                []ShardOffset `json:"shards"`
	StreamPrefix          string        `json:"streamPrefix"`
	TotalLag              *int64        `json:"totalLag"` // null when any shard's lag is unknown
	TotalMemoryUsageBytes int64         `json:"totalMemoryUsageBytes"`
	TotalPendingCount     int64         `json:"totalPendingCount"`
	TotalStreamLength     int64         `json:"totalStreamLength"`
}

// ShardOffset is the contract's StreamShardOffset: Redis's view of one shard
// stream of a group, with its live owners.
type ShardOffset struct {
	StreamPrefix  string   `json:"streamPrefix"`
	ConsumerGroup string   `json:"consumerGroup"`
	Shard         ShardRef `json:"shard"`
	ShardStream
	MemoryUsageBytes *int64   `json:"memoryUsageBytes"`
	OwnerMemberIDs   []string `json:"ownerMemberIds"`
	Exists           bool     `json:"exists"`
	// Routed: the shard is in producer routing (index < shardCount).
	Routed bool `json:"routed"`
	// LagStatus is the shard's LagStatusOK, ...Warn, ...Stall or ...Stop as of
	// the read.
	LagStatus string `json:"lagStatus"`
}

// ShardStream is what Redis tells of one shard stream and of one consumer
// group's reading of it; ShardOffset and GrafanaShardRow both carry it.
type ShardStream struct {
	StreamKey               string  `json:"streamKey"`
	RedisSlot               int     `json:"redisSlot"`
	RedisNodeEndpoint       *string `json:"redisNodeEndpoint"`
	RedisNodeID             *string `json:"redisNodeId"`
	RedisSlotRangeStart     *int    `json:"redisSlotRangeStart"`
	RedisSlotRangeEnd       *int    `json:"redisSlotRangeEnd"`
	StreamLength            int64   `json:"streamLength"`
	FirstRecordID           *string `json:"firstRecordId"`
	LastRecordID            *string `json:"lastRecordId"`
	LastGeneratedID         *string `json:"lastGeneratedId"`
	GroupLastDeliveredID    *string `json:"groupLastDeliveredId"`
	ConsumerLastDeliveredID *string `json:"consumerLastDeliveredId"`
	ConsumerLastAckedID     *string `json:"consumerLastAckedId"`
	PendingCount            int64   `json:"pendingCount"`
	// Lag is null when Redis cannot tell it.
	Lag *int64 `json:"lag"`
	// LagSeconds is how long the oldest entry not yet delivered to the
	// group (OldestUndeliveredID) has waited, from its id and Redis's clock
	// at RedisTimeMs, in seconds to the millisecond: 0 when every entry was
	// delivered, null when the stream or the group does not exist. Unlike
	// Lag it is known after XDEL and XTRIM too.
	LagSeconds          *float64 `json:"lagSeconds"`
	OldestUndeliveredID *string  `json:"oldestUndeliveredId"`
	// OldestPendingSeconds is the age, by the same clock, of the group's
	// oldest entry delivered and not yet acknowledged (OldestPendingID): 0
	// when none is pending, null when the stream or the group does not exist.
	OldestPendingSeconds *float64 `json:"oldestPendingSeconds"`
	OldestPendingID      *string  `json:"oldestPendingId"`
	// RedisTimeMs is Redis's clock (TIME, Unix ms) when the stream was read.
	RedisTimeMs *int64 `json:"redisTimeMs"`
}

// Lag statuses of a shard and of a group (lagStatus), from the best to the
// worst; a group's is its worst shard's. The rule is in docs/operations.md
// ("Lag and group status"); /metrics encodes them 0 to 3 in this order.
const (
	LagStatusOK    = "OK"    // nothing waits, or the group keeps up
	LagStatusWarn  = "WARN"  // the oldest unacknowledged entry grows older at every read
	LagStatusStall = "STALL" // entries wait and the group has not advanced for a whole window
	LagStatusStop  = "STOP"  // entries wait on a shard that nobody owns
)

// MessagesPage answers GET .../shards/{i}/messages (StreamMessagesPageResponse).
// Its fields are in the order the answer has always had them (alphabetical).
type MessagesPage struct {
	ConsumerGroup string         `json:"consumerGroup"`
	Direction     string         `json:"direction"`
	Limit         int            `json:"limit"`
	NextCursor    *string        `json:"nextCursor"`
	Records       []StreamRecord `json:"records"`
	Shard         ShardRef       `json:"shard"`
	StreamKey     string         `json:"streamKey"`
	StreamPrefix  string         `json:"streamPrefix"`
	// Truncated: the page ended before limit records because the answer
	// reached its byte budget; nextCursor goes on from its last record.
	Truncated bool `json:"truncated"`
}

// StreamRecord is one message of a shard stream.
type StreamRecord struct {
	StreamPrefix      string            `json:"streamPrefix"`
	ConsumerGroup     string            `json:"consumerGroup"`
	Shard             ShardRef          `json:"shard"`
	StreamKey         string            `json:"streamKey"`
	RecordID          string            `json:"recordId"`
	Fields            map[string]string `json:"fields"`
	Payload           *string           `json:"payload"`
	RecordTimestampMs *int64            `json:"recordTimestampMs"`
	RecordTime        *time.Time        `json:"recordTime"`
	// FieldsTruncated: field names or values were cut (or fields dropped)
	// so that the record holds at most the per-record byte bound.
	FieldsTruncated bool `json:"fieldsTruncated"`
}
