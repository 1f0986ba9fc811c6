package commands

import (
	"errors"
	"fmt"
	"time"
)

// Kind is the small set of error kinds; httpapi maps each kind to an HTTP status.
type Kind int

const (
	KindInvalid     Kind = iota + 1 // 400
	KindNotFound                    // 404
	KindConflict                    // 409
	KindNotAllowed                  // 422
	KindUnavailable                 // 503
	KindRateLimited                 // 429
	KindForbidden                   // 403
)

// Error is a decision's refusal with the contract's errorCode. Message is for
// the caller; Cause, when set, is the internal failure behind it (a Redis
// error naming addresses or ACL users) that only the coordinator's log may
// show.
type Error struct {
	Kind    Kind
	Code    string
	Message string
	Cause   error
	// RetryAfter is, for a refusal of kind KindRateLimited, when the caller
	// may try again (HTTP Retry-After); 0 when it does not say.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return e.Code + ": " + e.Message + ": " + e.Cause.Error()
	}
	return e.Code + ": " + e.Message
}

// Unwrap returns the internal cause.
func (e *Error) Unwrap() error { return e.Cause }

// Is matches errors by code so callers can use errors.Is with the sentinels below.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

// WithMessage is e with a message about one request: same kind and code, no cause.
func (e *Error) WithMessage(msg string) *Error {
	return &Error{Kind: e.Kind, Code: e.Code, Message: msg}
}

// WithCause is e with the internal failure behind it, for the log only.
func (e *Error) WithCause(cause error) *Error {
	return &Error{Kind: e.Kind, Code: e.Code, Message: e.Message, Cause: cause, RetryAfter: e.RetryAfter}
}

// WithRetryAfter is e saying when to try again.
func (e *Error) WithRetryAfter(d time.Duration) *Error {
	c := *e
	c.RetryAfter = d
	return &c
}

// Sentinel errors, one per errorCode of the wire contract. Decisions return
// copies with a specific message; errors.Is matches on the code.
var (
	ErrInvalid               = &Error{Kind: KindInvalid, Code: "INVALID_REQUEST", Message: "Invalid request"}
	ErrGroupNotFound         = &Error{Kind: KindNotFound, Code: "GROUP_NOT_FOUND", Message: "Group not found"}
	ErrStreamNotFound        = &Error{Kind: KindNotFound, Code: "STREAM_NOT_FOUND", Message: "Stream not found"}
	ErrReshardingNotFound    = &Error{Kind: KindNotFound, Code: "MIGRATION_NOT_FOUND", Message: "Migration not found"}
	ErrGroupExists           = &Error{Kind: KindConflict, Code: "GROUP_ALREADY_EXISTS", Message: "Group already exists"}
	ErrPrefixExists          = &Error{Kind: KindConflict, Code: "STREAM_PREFIX_ALREADY_EXISTS", Message: "Stream prefix already exists"}
	ErrGroupHasActiveMembers = &Error{Kind: KindConflict, Code: "GROUP_HAS_ACTIVE_MEMBERS", Message: "Group has active members and cannot be deleted without force"}
	ErrActiveResharding      = &Error{Kind: KindConflict, Code: "ACTIVE_MIGRATION_EXISTS", Message: "Group already has an active migration"}
	ErrMetadataSync          = &Error{Kind: KindConflict, Code: "METADATA_SYNC_IN_PROGRESS", Message: "Coordinator metadata sync is in progress for this group"}
	ErrStateConflict         = &Error{Kind: KindConflict, Code: "STATE_VERSION_CONFLICT", Message: "Coordinator state changed concurrently; retry the request"}
	ErrShardCountUnchanged   = &Error{Kind: KindNotAllowed, Code: "SHARD_COUNT_UNCHANGED", Message: "Target shard count equals the current shard count"}
	ErrRollbackNotAllowed    = &Error{Kind: KindNotAllowed, Code: "ROLLBACK_NOT_ALLOWED", Message: "Migration cannot be rolled back"}
	ErrRateLimited           = &Error{Kind: KindRateLimited, Code: "RATE_LIMIT_EXCEEDED", Message: "Coordinator API rate limit exceeded"}
	// ErrMemberPrincipal: a heartbeat for a member id that another principal
	// joined (the member API is authenticated; ids are bound to principals).
	ErrMemberPrincipal = &Error{Kind: KindForbidden, Code: "MEMBER_PRINCIPAL_MISMATCH", Message: "This member id belongs to another principal"}
	// ErrGroupFull: a new member would exceed --max-members-per-group.
	ErrGroupFull = &Error{Kind: KindConflict, Code: "GROUP_MAX_SIZE_REACHED", Message: "The group has reached its maximum number of members"}
	// ErrGroupLimit and ErrShardLimit: a create, a registration by heartbeat
	// or a scale-out would take the coordinator past --max-groups or
	// --max-total-shards.
	ErrGroupLimit = &Error{Kind: KindConflict, Code: "GROUP_LIMIT_REACHED", Message: "The coordinator manages as many consumer groups as --max-groups allows"}
	ErrShardLimit = &Error{Kind: KindConflict, Code: "SHARD_LIMIT_REACHED", Message: "The coordinator manages as many shards as --max-total-shards allows"}
	// Quotas (quota.go): a create, a registration by heartbeat, a scale-out
	// or a join that would take a principal or a stream prefix past its
	// quota, refused before anything is provisioned; the message names the
	// flag and its value.
	ErrPrincipalGroupQuota  = &Error{Kind: KindConflict, Code: "PRINCIPAL_GROUP_QUOTA_EXCEEDED", Message: "The principal has created or registered as many consumer groups as --max-groups-per-principal allows"}
	ErrPrincipalShardQuota  = &Error{Kind: KindConflict, Code: "PRINCIPAL_SHARD_QUOTA_EXCEEDED", Message: "The principal's groups and streams have as many shards as --max-shards-per-principal allows"}
	ErrPrefixGroupQuota     = &Error{Kind: KindConflict, Code: "PREFIX_GROUP_QUOTA_EXCEEDED", Message: "The stream prefix has as many consumer groups as --max-groups-per-prefix allows"}
	ErrPrefixShardQuota     = &Error{Kind: KindConflict, Code: "PREFIX_SHARD_QUOTA_EXCEEDED", Message: "The stream prefix has as many shards as --max-shards-per-prefix allows"}
	ErrPrincipalMemberQuota = &Error{Kind: KindConflict, Code: "PRINCIPAL_MEMBER_QUOTA_EXCEEDED", Message: "The principal has as many members taking part as --max-members-per-principal allows"}
	// ErrTopologyConflict: the groups of a stream without metadata disagree
	// on the shard count (stream-scoped routing cannot answer), or a change
	// would leave a stream's groups on different layouts.
	ErrTopologyConflict = &Error{Kind: KindConflict, Code: "STREAM_SHARD_TOPOLOGY_CONFLICT", Message: "Stream shard topology is inconsistent across consumer groups"}
	// ErrMetadataCorrupt: the log or a snapshot holds what this build cannot
	// decode; the coordinator answers nothing from a state it would have to
	// guess (docs/operations.md, "Runbook").
	ErrMetadataCorrupt    = &Error{Kind: KindConflict, Code: "COORDINATOR_METADATA_CORRUPT", Message: "Coordinator metadata is corrupt and requires operator repair"}
	ErrProvisioningFailed = &Error{Kind: KindUnavailable, Code: "REDIS_STREAM_PROVISIONING_FAILED", Message: "Failed to provision Redis Stream consumer group"}
	ErrRedisNotConfigured = &Error{Kind: KindUnavailable, Code: "REDIS_NOT_CONFIGURED", Message: "Redis Stream provisioning is enabled but Redis is not configured"}
	ErrUnavailable        = &Error{Kind: KindUnavailable, Code: "COORDINATOR_STATE_MUTEX_UNAVAILABLE", Message: "Coordinator state is unavailable: the event log cannot be read or appended"}
	ErrTerminating        = &Error{Kind: KindUnavailable, Code: "COORDINATOR_TERMINATING", Message: "Coordinator is terminating; retry the request against another instance"}
	// ErrNotLeader: this replica does not hold the leader lease (the lease is
	// the distributed mutex of the reference's code).
	ErrNotLeader = &Error{Kind: KindUnavailable, Code: "COORDINATOR_STATE_MUTEX_UNAVAILABLE", Message: "This coordinator replica does not hold the leader lease; retry (a follower forwards writes to the leader)"}
	// ErrLogTrimmed: a replay asked for a point before the oldest kept snapshot
	// of a log trimmed with --trim-log.
	ErrLogTrimmed = &Error{Kind: KindNotAllowed, Code: "LOG_TRIMMED", Message: "The event log was trimmed behind this point: its state can no longer be replayed"}
	// ErrLogLost: the log no longer holds what this coordinator applied
	// (guard.go). It keeps serving reads and steady heartbeats from the
	// state it holds and refuses every decision that would append, until
	// an operator restores the log (POST /coord/v1/log/restore).
	ErrLogLost = &Error{Kind: KindUnavailable, Code: "LOG_LOST", Message: "The event log lost entries this coordinator applied: it serves reads and steady heartbeats from the state it holds and records nothing until an operator restores the log (POST /coord/v1/log/restore)"}
	// ErrEvictionPolicy: the Redis holding the log may evict it (its
	// maxmemory-policy), and --allow-redis-eviction was not given: nothing
	// that would append is decided until the policy is fixed.
	ErrEvictionPolicy = &Error{Kind: KindUnavailable, Code: "REDIS_EVICTION_POLICY", Message: "The Redis holding the event log may evict it (maxmemory-policy): nothing is recorded until it is noeviction"}
	// ErrLogNotLost: a restore of a log that holds this coordinator's state.
	ErrLogNotLost = &Error{Kind: KindConflict, Code: "LOG_NOT_LOST", Message: "The event log holds this coordinator's state: there is nothing to restore"}
)

func WithMsg(base *Error, format string, args ...any) *Error {
	return base.WithMessage(fmt.Sprintf(format, args...))
}

// failed is base with a generic message about what failed and the internal
// cause kept for the log (never shown to the caller).
func Failed(base *Error, cause error, format string, args ...any) *Error {
	return WithMsg(base, format, args...).WithCause(cause)
}
