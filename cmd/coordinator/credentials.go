package main

import (
	"fmt"
	"sort"
	"strings"
	"unicode"

	"github.com/rscoord/rsc/httpapi"
)

// Credentials that are real. A users file is often a template: a variable
// left unset makes an empty password, a typo an unknown role or a pattern
// that names nothing. Each is refused at start (and on a reload, which then
// keeps the users loaded before), naming the user and the field, rather than
// loaded as a password anyone knows or a user that can do nothing. Where
// other hosts can reach the port, every ADMIN (a users file's, or
// --admin-user) needs a password that is neither empty nor the default
// (checkExposure).

// knownRoles are the roles a users file may give.
var knownRoles = []string{httpapi.RoleAdmin, httpapi.RoleMember, httpapi.RoleMonitor, httpapi.RoleRead, httpapi.RoleWrite}

// blankPassword reports a password that is empty or only white space.
func blankPassword(p string) bool { return strings.TrimFunc(p, unicode.IsSpace) == "" }

// checkUser refuses a users-file entry with a blank password, no role or an
// unknown one, or a prefixes or groups pattern no name can match.
func checkUser(u httpapi.User) error {
	name := fmt.Sprintf("user %q", u.Username)
	if blankPassword(u.Password) {
		return fmt.Errorf("%s: password: must not be empty or white space (an unset template variable?); every user needs a real password", name)
	}
	if len(u.Roles) == 0 {
		return fmt.Errorf("%s: roles: must list at least one of %s (a user without a role can do nothing)", name, strings.Join(knownRoles, ", "))
	}
	for _, r := range u.Roles {
		if !known(strings.ToUpper(strings.TrimSpace(r))) {
			return fmt.Errorf("%s: roles: unknown role %q (known: %s)", name, r, strings.Join(knownRoles, ", "))
		}
	}
	if u.Prefixes != nil {
		if err := httpapi.ValidateScope(u.Prefixes); err != nil {
			return fmt.Errorf("%s: prefixes: %w", name, err)
		}
	}
	if u.Groups != nil {
		if err := httpapi.ValidateGroups(u.Groups); err != nil {
			return fmt.Errorf("%s: groups: %w", name, err)
		}
	}
	return nil
}

func known(role string) bool {
	for _, r := range knownRoles {
		if r == role {
			return true
		}
	}
	return false
}

// weakAdmins lists the users with the ADMIN role whose password anyone
// knows: empty, white space, or the default one.
func weakAdmins(users []httpapi.User) []string {
	var out []string
	for _, u := range users {
		admin := false
		for _, r := range u.Roles {
			admin = admin || strings.EqualFold(strings.TrimSpace(r), httpapi.RoleAdmin)
		}
		if admin && (blankPassword(u.Password) || u.Password == defaultAdminPassword) {
			out = append(out, u.Username)
		}
	}
	sort.Strings(out)
	return out
}

// checkUsersExposure refuses, on an address other hosts can reach, a users
// file with an ADMIN whose password anyone knows (the escape hatch
// --insecure-default-credentials lets it through, and says so).
func (m *Main) checkUsersExposure(users []httpapi.User) error {
	if m.InsecureDefaultCredentials || loopbackListen(m.Listen) {
		return nil
	}
	if weak := weakAdmins(users); len(weak) > 0 {
		return fmt.Errorf("--listen %s accepts connections from other hosts while --users-file gives ADMIN user(s) %s the default or an empty password: "+
			"give each a real password, or listen on a loopback address, "+
			"or, for a throwaway setup only, accept the risk with --insecure-default-credentials", m.Listen, strings.Join(quoted(weak), ", "))
	}
	return nil
}

func quoted(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = fmt.Sprintf("%q", n)
	}
	return out
}
