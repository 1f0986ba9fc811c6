package client

import "github.com/rscoord/rsc/wire"

// The bodies the SDK sends and reads are package wire's types, shared with
// the coordinator. The names below are the SDK's for them (type aliases, so a
// client.HeartbeatRequest is a wire.HeartbeatRequest).

// ProtocolVersion is the coordination protocol version the SDK speaks.
const ProtocolVersion = wire.ProtocolVersion

// Heartbeat statuses, as on the wire (CONTRACT §3.4).
const (
	StatusOK                  = wire.StatusOK
	StatusRetry               = wire.StatusRetry
	StatusSyncMetadata        = wire.StatusSyncMetadata
	StatusRevokePending       = wire.StatusRevokePending
	StatusUnknownMember       = wire.StatusUnknownMember
	StatusFenced              = wire.StatusFenced
	StatusUnsupportedProtocol = wire.StatusUnsupportedProtocol
	StatusInvalidRequest      = wire.StatusInvalidRequest
)

// Orderings of a group, as on the wire: with KEY, per-key order is kept
// across reshardings (fenced publishes, barriers); "" is NONE.
const (
	OrderingKey  = "KEY"
	OrderingNone = "NONE"
)

// How a held heartbeat was answered (Client.HeldHeartbeat), as on the wire.
const (
	HoldAnswered = wire.HoldAnswered
	HoldWoken    = wire.HoldWoken
	HoldElapsed  = wire.HoldElapsed
	HoldLimit    = wire.HoldLimit
	HoldReleased = wire.HoldReleased
	HoldOff      = wire.HoldOff
)

// Revoke report states.
const (
	RevokeDraining = wire.RevokeDraining
	RevokeRevoked  = wire.RevokeRevoked
)

type (
	// Shard is the wire form of a shard: {"shardIndex": n}.
	Shard = wire.ShardRef
	// HeartbeatRequest is the body of a member heartbeat. Its required fields
	// are pointers (the coordinator tells a missing one from a zero).
	HeartbeatRequest = wire.HeartbeatRequest
	// Capacity is a logical member's local worker capacity.
	Capacity = wire.Capacity
	// RevokeReport is a member's revoke progress on one shard: DRAINING while
	// in-flight messages finish, REVOKED (with InFlight 0) once released.
	RevokeReport = wire.RevokingReport
	// ShardProgress is what a member reports about its consumption of one shard.
	ShardProgress = wire.ShardProgress
	// HeartbeatResponse is the coordinator's answer to a heartbeat.
	HeartbeatResponse = wire.HeartbeatResponse
	// Assignment is the assignment part of a heartbeat answer: shards the
	// member may read now, and shards it will get once their previous owner
	// releases them.
	Assignment = wire.HeartbeatAssignment
	// Routing is the producer routing metadata of a group.
	Routing = wire.ProducerRoutingResponse
	// RoutingShard is one shard of the producer routing.
	RoutingShard = wire.RoutingShard
	// RoutingLayout is a layout the producer routing had before its current one.
	RoutingLayout = wire.RoutingLayout
	// ShardBarrier is a barrier of a heartbeat answer: entries of the shard
	// with an id above After wait until an answer no longer lists it.
	ShardBarrier = wire.ShardBarrier
	// ErrorResponse is the contract's error body.
	ErrorResponse = wire.ErrorResponse
	// LoginResponse answers POST /coord/v1/auth/login.
	LoginResponse = wire.LoginResponse
)

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
