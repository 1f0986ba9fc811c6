package guard

import (
	"errors"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rscoord/rsc/routing"
)

// Roles, as on the wire.
const (
	RoleRead    = "READ"
	RoleWrite   = "WRITE"
	RoleMember  = "MEMBER"
	RoleAdmin   = "ADMIN"
	RoleMonitor = "MONITOR"
)

// User is a configured principal.
type User struct {
	Username string   `json:"username"`
	Password string   `json:"password"`
	Roles    []string `json:"roles"`
	// Prefixes scopes the user's roles to the groups of these stream
	// prefixes: an exact prefix ("orders"), or a name prefix ending in '*'
	// ("pay-*"; "*" alone is every prefix). Nil covers every prefix; an
	// empty list is refused by ValidateScope (it would cover none).
	Prefixes []string `json:"prefixes,omitempty"`
	// Groups scopes the user's roles to consumer groups of these names, as
	// Prefixes does to stream prefixes and with the same patterns (a
	// member's heartbeat for a group outside them is 403, before anything
	// is registered). Nil covers every group; ValidateGroups refuses an
	// empty list.
	Groups []string `json:"groups,omitempty"`
}

// Principal is who a request proved to be.
type Principal struct {
	Username string
	Roles    []string
	// Prefixes is the user's scope (nil: every prefix), Groups the consumer
	// groups it may name (nil: every group), read from the user table on
	// every request, never from a token.
	Prefixes []string
	Groups   []string
	// expiresAt is when the bearer token that proved it stops being valid
	// (zero after a password check): a token exchanged at /auth/login gets
	// no later one.
	expiresAt time.Time
}

// Grants reports whether the principal's roles grant the required role.
func (p *Principal) Grants(required string) bool {
	for _, r := range p.Roles {
		switch {
		case r == RoleAdmin:
			return true
		case r == required:
			return true
		case r == RoleWrite && required == RoleRead:
			return true
		case r == RoleMonitor && required == RoleRead:
			return true
		}
	}
	return false
}

// Name is the principal's user name ("" for nobody).
func (p *Principal) Name() string {
	if p == nil {
		return ""
	}
	return p.Username
}

func knownRoles(in []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range in {
		r = strings.ToUpper(strings.TrimSpace(r))
		switch r {
		case RoleRead, RoleWrite, RoleMember, RoleAdmin, RoleMonitor:
			if !seen[r] {
				seen[r] = true
				out = append(out, r)
			}
		}
	}
	sort.Strings(out)
	return out
}

// A principal may be scoped to stream prefixes (User.Prefixes): its roles
// then apply only to the groups of those prefixes. It may be scoped to
// consumer group names too (User.Groups): every route naming a
// {consumerGroup} outside them (a heartbeat first of all: a member cannot
// register, or join, a group it was not given) is the same empty-body 403.
// Which prefix a request names is decided from the route it matched: its
// {streamPrefix} variable, for every route that has one (heartbeats, group
// and stream routes, their monitoring twins, events and replay, and any
// route added later under /streams/{streamPrefix}). A request naming a
// prefix outside the scope is the same empty-body 403 as a missing role,
// before any handler runs, so it changes nothing. Routes that list or
// aggregate (monitoring/groups, monitoring/events, every Grafana row and
// option list) show a scoped principal only the groups of its prefixes
// (Visible), and a Grafana route whose streamPrefix parameter names another
// prefix is 403 as well (Guard.NamedPrefix).

// ValidateScope checks a users-file prefixes list: at least one pattern,
// each an exact stream prefix or a name prefix followed by a single trailing
// '*' ("pay-*", or "*" for every prefix).
func ValidateScope(patterns []string) error {
	return validatePatterns("prefixes", patterns, routing.ValidatePrefix,
		"prefixes must list at least one prefix (leave it out to cover every prefix)")
}

// ValidateGroups checks a users-file groups list: at least one pattern,
// each an exact consumer group name or a name prefix followed by a single
// trailing '*' ("orders-*", or "*" for every group), the syntax of prefixes.
func ValidateGroups(patterns []string) error {
	return validatePatterns("groups", patterns, func(head string) error { return routing.ValidateName("consumerGroup", head) },
		"groups must list at least one consumer group (leave it out to cover every group)")
}

// validatePatterns checks the users-file list field: at least one pattern
// (else the error empty), each a name validate accepts or a name prefix
// followed by a single trailing '*' ("*" alone for every name).
func validatePatterns(field string, patterns []string, validate func(string) error, empty string) error {
	if len(patterns) == 0 {
		return errors.New(empty)
	}
	for i, p := range patterns {
		head, wildcard := strings.CutSuffix(p, "*")
		if wildcard && head == "" {
			continue
		}
		if err := validate(head); err != nil {
			return errors.New(field + "[" + strconv.Itoa(i) + "] " + strconv.Quote(p) + ": " + err.Error() + " (a '*' may only end a pattern)")
		}
	}
	return nil
}

// matches reports whether name matches one of patterns (exact, or a name
// prefix ending in '*').
func matches(patterns []string, name string) bool {
	for _, pat := range patterns {
		if head, wildcard := strings.CutSuffix(pat, "*"); wildcard {
			if strings.HasPrefix(name, head) {
				return true
			}
		} else if pat == name {
			return true
		}
	}
	return false
}

// CoversGroup reports whether the principal may name consumer group group.
func (p *Principal) CoversGroup(group string) bool {
	return p == nil || p.Groups == nil || matches(p.Groups, group)
}

// Covers reports whether the principal's scope includes prefix.
func (p *Principal) Covers(prefix string) bool {
	if p == nil || p.Prefixes == nil {
		return true
	}
	return matches(p.Prefixes, prefix)
}

// Scoped reports whether p sees only some prefixes.
func (p *Principal) Scoped() bool { return p != nil && p.Prefixes != nil }
