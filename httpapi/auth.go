package httpapi

import "github.com/rscoord/rsc/httpapi/guard"

// Authentication, tokens, assertions, scope, browser checks, throttling and
// rate limits are middleware of package guard, which the server composes
// with its router (server.go). What cmd configures them with is named here
// too.

// Roles, as on the wire.
const (
	RoleRead    = guard.RoleRead
	RoleWrite   = guard.RoleWrite
	RoleMember  = guard.RoleMember
	RoleAdmin   = guard.RoleAdmin
	RoleMonitor = guard.RoleMonitor
)

// DefaultTokenTTL is the contract's token lifetime (expiresInSeconds 604800).
const DefaultTokenTTL = guard.DefaultTokenTTL

// ForwardAssertionTTL is how long a --ha follower's principal assertion is
// valid after it signed it (guard/assertion.go).
const ForwardAssertionTTL = guard.ForwardAssertionTTL

type (
	// User is a configured principal.
	User = guard.User
	// AuthConfig configures authentication. With no Users, the admin user
	// holds every role.
	AuthConfig = guard.AuthConfig
	// HostPolicy says which Host headers the server answers.
	HostPolicy = guard.HostPolicy
)

// ValidateScope checks a users-file prefixes list (guard.ValidateScope).
func ValidateScope(patterns []string) error { return guard.ValidateScope(patterns) }

// ValidateGroups checks a users-file groups list (guard.ValidateGroups).
func ValidateGroups(patterns []string) error { return guard.ValidateGroups(patterns) }
