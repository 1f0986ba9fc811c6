package commands

import (
	"errors"
	"fmt"
)

// Kind is the small set of error kinds; httpapi maps each Code to a status.
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

// Error is a decision's refusal with the contract's errorCode.
type Error struct {
	Kind    Kind
	Code    string
	Message string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Is matches errors by code so callers can use errors.Is with the sentinels below.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code
}

func newErr(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Sentinel errors, one per errorCode of the wire contract. Decisions return
// copies with a specific message; errors.Is matches on the code.
var (
	ErrInvalid               = &Error{KindInvalid, "INVALID_REQUEST", "Invalid request"}
	ErrGroupNotFound         = &Error{KindNotFound, "GROUP_NOT_FOUND", "Group not found"}
	ErrStreamNotFound        = &Error{KindNotFound, "STREAM_NOT_FOUND", "Stream not found"}
	ErrMigrationNotFound     = &Error{KindNotFound, "MIGRATION_NOT_FOUND", "Migration not found"}
	ErrGroupExists           = &Error{KindConflict, "GROUP_ALREADY_EXISTS", "Group already exists"}
	ErrPrefixExists          = &Error{KindConflict, "STREAM_PREFIX_ALREADY_EXISTS", "Stream prefix already exists"}
	ErrGroupHasActiveMembers = &Error{KindConflict, "GROUP_HAS_ACTIVE_MEMBERS", "Group has active members and cannot be deleted without force"}
	ErrActiveMigration       = &Error{KindConflict, "ACTIVE_MIGRATION_EXISTS", "Group already has an active migration"}
	ErrMetadataSync          = &Error{KindConflict, "METADATA_SYNC_IN_PROGRESS", "Coordinator metadata sync is in progress for this group"}
	ErrStateConflict         = &Error{KindConflict, "STATE_VERSION_CONFLICT", "Coordinator state changed concurrently; retry the request"}
	ErrShardCountUnchanged   = &Error{KindNotAllowed, "SHARD_COUNT_UNCHANGED", "Target shard count equals the current shard count"}
	ErrRollbackNotAllowed    = &Error{KindNotAllowed, "ROLLBACK_NOT_ALLOWED", "Migration cannot be rolled back"}
	ErrRateLimited           = &Error{KindRateLimited, "RATE_LIMIT_EXCEEDED", "Coordinator API rate limit exceeded"}
	// ErrMemberPrincipal: a heartbeat for a member id that another principal
	// joined (the member API is authenticated; ids are bound to principals).
	ErrMemberPrincipal = &Error{KindForbidden, "MEMBER_PRINCIPAL_MISMATCH", "This member id belongs to another principal"}
	// ErrGroupFull: a new member would exceed --max-members-per-group.
	ErrGroupFull = &Error{KindConflict, "GROUP_MAX_SIZE_REACHED", "The group has reached its maximum number of members"}
	ErrProvisioningFailed    = &Error{KindUnavailable, "REDIS_STREAM_PROVISIONING_FAILED", "Failed to provision Redis Stream consumer group"}
	ErrRedisNotConfigured    = &Error{KindUnavailable, "REDIS_NOT_CONFIGURED", "Redis Stream provisioning is enabled but Redis is not configured"}
	ErrUnavailable           = &Error{KindUnavailable, "COORDINATOR_STATE_MUTEX_UNAVAILABLE", "Coordinator state is unavailable: the event log cannot be read or appended"}
	ErrTerminating           = &Error{KindUnavailable, "COORDINATOR_TERMINATING", "Coordinator is terminating; retry the request against another instance"}
	// ErrNotLeader: this replica does not hold the leader lease (the lease is
	// the distributed mutex of the reference's code).
	ErrNotLeader = &Error{KindUnavailable, "COORDINATOR_STATE_MUTEX_UNAVAILABLE", "This coordinator replica does not hold the leader lease; retry (a follower forwards writes to the leader)"}
	// ErrLogTrimmed: a replay asked for a point before the oldest kept snapshot
	// of a log trimmed with --trim-log.
	ErrLogTrimmed = &Error{KindNotAllowed, "LOG_TRIMMED", "The event log was trimmed behind this point: its state can no longer be replayed"}
)

func withMsg(base *Error, format string, args ...any) *Error {
	return &Error{Kind: base.Kind, Code: base.Code, Message: fmt.Sprintf(format, args...)}
}
