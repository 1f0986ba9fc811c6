package wire

import "time"

// The Grafana endpoints (contract §2.10) answer top-level JSON arrays of the
// rows below, the shape Grafana's JSON/Infinity data sources turn into tables
// and variables. Member ids in a row are joined with ",".

// GrafanaOptionRow is one value of a Grafana template variable.
type GrafanaOptionRow struct {
	Text  string `json:"__text"`
	Value string `json:"__value"`
}

// GrafanaGroupRow is one group of the overview table.
type GrafanaGroupRow struct {
	StreamPrefix          string   `json:"streamPrefix"`
	ConsumerGroup         string   `json:"consumerGroup"`
	State                 string   `json:"state"`
	GroupEpoch            int64    `json:"groupEpoch"`
	AssignmentEpoch       int64    `json:"assignmentEpoch"`
	MetadataVersion       int64    `json:"metadataVersion"`
	ShardCount            int      `json:"shardCount"`
	ActiveMembers         int      `json:"activeMembers"`
	TotalMembers          int      `json:"totalMembers"`
	CurrentShards         int      `json:"currentShards"`
	TargetShards          int      `json:"targetShards"`
	AssignedShardRatio    string   `json:"assignedShardRatio"`
	RevokingShards        int      `json:"revokingShards"`
	TotalStreamLength     int64    `json:"totalStreamLength"`
	TotalPendingCount     int64    `json:"totalPendingCount"`
	TotalLag              *int64   `json:"totalLag"`
	ProducedPerSecond     *float64 `json:"producedPerSecond"`
	ConsumedPerSecond     *float64 `json:"consumedPerSecond"`
	TotalMemoryUsageBytes int64    `json:"totalMemoryUsageBytes"`
	MemoryUsageKnown      bool     `json:"memoryUsageKnown"`
	// LagSeconds, OldestPendingSeconds and LagStatus are OffsetsResponse's.
	LagSeconds           *float64 `json:"lagSeconds"`
	OldestPendingSeconds *float64 `json:"oldestPendingSeconds"`
	LagStatus            string   `json:"lagStatus"`
}

// GrafanaMemberRow is one member of a group.
type GrafanaMemberRow struct {
	StreamPrefix          string    `json:"streamPrefix"`
	ConsumerGroup         string    `json:"consumerGroup"`
	MemberID              string    `json:"memberId"`
	MemberName            string    `json:"memberName"`
	State                 string    `json:"state"`
	MemberEpoch           int64     `json:"memberEpoch"`
	MetadataVersion       int64     `json:"metadataVersion"`
	CurrentShardCount     int       `json:"currentShardCount"`
	RevokingShardCount    int       `json:"revokingShardCount"`
	RuntimeMaxConcurrency int       `json:"runtimeMaxConcurrency"`
	ActiveConsumerWorkers int       `json:"activeConsumerWorkers"`
	LastHeartbeatAt       time.Time `json:"lastHeartbeatAt"`
	MemberLeaseExpiresAt  time.Time `json:"memberLeaseExpiresAt"`
}

// GrafanaShardRow is one shard stream: Redis's view of it (a negative lag
// shows as 0), its rates and its owners.
type GrafanaShardRow struct {
	StreamPrefix  string `json:"streamPrefix"`
	ConsumerGroup string `json:"consumerGroup"`
	ShardCount    int    `json:"shardCount"`
	ShardIndex    int    `json:"shardIndex"`
	ShardLabel    string `json:"shardLabel"`
	ShardStream
	LagKnown              bool     `json:"lagKnown"`
	ProducedPerSecond     *float64 `json:"producedPerSecond"`
	ConsumedPerSecond     *float64 `json:"consumedPerSecond"`
	MemoryUsageBytes      *int64   `json:"memoryUsageBytes"`
	MemoryUsageKnown      bool     `json:"memoryUsageKnown"`
	TargetOwnerMemberIDs  string   `json:"targetOwnerMemberIds"`
	CurrentOwnerMemberIDs string   `json:"currentOwnerMemberIds"`
	OwnerState            string   `json:"ownerState"`
	OwnerMemberIDs        string   `json:"ownerMemberIds"`
	LagStatus             string   `json:"lagStatus"`
}

// GrafanaAssignmentRow is who is targeted at, reads and revokes one shard.
type GrafanaAssignmentRow struct {
	StreamPrefix   string `json:"streamPrefix"`
	ConsumerGroup  string `json:"consumerGroup"`
	ShardIndex     int    `json:"shardIndex"`
	TargetOwners   string `json:"targetOwners"`
	CurrentOwners  string `json:"currentOwners"`
	RevokingOwners string `json:"revokingOwners"`
}

// GrafanaMessageRow is one stream record with the page it belongs to.
type GrafanaMessageRow struct {
	StreamPrefix      string     `json:"streamPrefix"`
	ConsumerGroup     string     `json:"consumerGroup"`
	ShardIndex        int        `json:"shardIndex"`
	ShardSelector     string     `json:"shardSelector"`
	ShardLabel        string     `json:"shardLabel"`
	StreamKey         string     `json:"streamKey"`
	RecordID          string     `json:"recordId"`
	Payload           *string    `json:"payload"`
	FieldsJSON        string     `json:"fieldsJson"`
	PageDirection     string     `json:"pageDirection"`
	PageLimit         int        `json:"pageLimit"`
	PageNextCursor    *string    `json:"pageNextCursor"`
	PageTotalMessages int64      `json:"pageTotalMessages"`
	RecordTimestampMs *int64     `json:"recordTimestampMs"`
	RecordTime        *time.Time `json:"recordTime"`
	// FieldsTruncated: the record's field names or values were cut (or
	// fields dropped) to the per-record byte bound.
	FieldsTruncated bool `json:"fieldsTruncated"`
	// PageTruncated: the page ended before pageLimit rows because the answer
	// reached its byte budget; pageNextCursor goes on from its last row.
	PageTruncated bool `json:"pageTruncated"`
}
