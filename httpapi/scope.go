package httpapi

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/rscoord/rsc/routing"
)

// A principal may be scoped to stream prefixes (User.Prefixes): its roles
// then apply only to the groups of those prefixes. It may be scoped to
// consumer group names too (User.Groups): every route naming a
// {consumerGroup} outside them (a heartbeat first of all: a member cannot
// register, or join, a group it was not given) is the same empty-body 403. Which prefix a request
// names is decided from the route it matched: its {streamPrefix} variable,
// for every route that has one (heartbeats, group and stream routes, their
// monitoring twins, events and replay, and any route added later under
// /streams/{streamPrefix}). A request naming a prefix outside the scope is
// the same empty-body 403 as a missing role, before any handler runs, so it
// changes nothing. Routes that list or aggregate (monitoring/groups,
// monitoring/events, every Grafana row and option list) show a scoped
// principal only the groups of its prefixes, and a Grafana route whose
// streamPrefix parameter names another prefix is 403 as well.

// ValidateScope checks a users-file prefixes list: at least one pattern,
// each an exact stream prefix or a name prefix followed by a single trailing
// '*' ("pay-*", or "*" for every prefix).
func ValidateScope(patterns []string) error {
	if len(patterns) == 0 {
		return errors.New("prefixes must list at least one prefix (leave it out to cover every prefix)")
	}
	for i, p := range patterns {
		head, wildcard := strings.CutSuffix(p, "*")
		if wildcard && head == "" {
			continue
		}
		if err := routing.ValidatePrefix(head); err != nil {
			return errors.New("prefixes[" + strconv.Itoa(i) + "] " + strconv.Quote(p) + ": " + err.Error() + " (a '*' may only end a pattern)")
		}
	}
	return nil
}

// ValidateGroups checks a users-file groups list: at least one pattern,
// each an exact consumer group name or a name prefix followed by a single
// trailing '*' ("orders-*", or "*" for every group), the syntax of prefixes.
func ValidateGroups(patterns []string) error {
	if len(patterns) == 0 {
		return errors.New("groups must list at least one consumer group (leave it out to cover every group)")
	}
	for i, p := range patterns {
		head, wildcard := strings.CutSuffix(p, "*")
		if wildcard && head == "" {
			continue
		}
		if err := routing.ValidateName("consumerGroup", head); err != nil {
			return errors.New("groups[" + strconv.Itoa(i) + "] " + strconv.Quote(p) + ": " + err.Error() + " (a '*' may only end a pattern)")
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

// coversGroup reports whether the principal may name consumer group group.
func (p *principal) coversGroup(group string) bool {
	return p == nil || p.Groups == nil || matches(p.Groups, group)
}

// covers reports whether the principal's scope includes prefix.
func (p *principal) covers(prefix string) bool {
	if p == nil || p.Prefixes == nil {
		return true
	}
	return matches(p.Prefixes, prefix)
}

// scoped reports whether p sees only some prefixes.
func (p *principal) scoped() bool { return p != nil && p.Prefixes != nil }

// routeInScope reports whether the prefix the matched route names (if any)
// is in p's scope, and the consumer group it names (if any) among p's
// groups. A name that does not percent-decode is out of every scope (its
// handler would refuse it anyway).
func routeInScope(p *principal, m routeMatch) bool {
	if p != nil && p.Groups != nil {
		if raw, ok := m.vars["consumerGroup"]; ok {
			group, err := url.PathUnescape(raw)
			if err != nil || !p.coversGroup(group) {
				return false
			}
		}
	}
	if !p.scoped() {
		return true
	}
	raw, ok := m.vars["streamPrefix"]
	if !ok {
		return true
	}
	prefix, err := url.PathUnescape(raw)
	return err == nil && p.covers(prefix)
}

// quarantined is COORDINATOR_METADATA_CORRUPT when the route names a stream
// prefix ({streamPrefix}) that is quarantined; nil otherwise.
func (s *Server) quarantined(m routeMatch) error {
	raw, ok := m.vars["streamPrefix"]
	if !ok {
		return nil
	}
	prefix, err := url.PathUnescape(raw)
	if err != nil {
		return nil // the handler refuses the name
	}
	return s.read.Quarantined(prefix)
}

// visible reports whether r's principal may see the groups of prefix (list
// and aggregate routes filter with it).
func visible(r *http.Request, prefix string) bool { return principalOf(r).covers(prefix) }

// namedPrefixAllowed answers 403 (empty body, as routeInScope's refusal) when
// a query parameter names a prefix outside r's principal's scope; false means
// it answered.
func (s *Server) namedPrefixAllowed(w http.ResponseWriter, r *http.Request, prefix string) bool {
	if blank(prefix) || visible(r, prefix) {
		return true
	}
	s.logRefusal(r, infoOf(r).route, "", principalOf(r), "stream prefix outside the principal's scope")
	w.WriteHeader(http.StatusForbidden)
	return false
}
