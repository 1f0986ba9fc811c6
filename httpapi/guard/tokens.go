package guard

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Bearer tokens keep the reference's shape, base64url(payload).base64url(HMAC),
// and are opaque to clients, but they are bound to their rules:
//
//   - the payload carries the issue time, and a token is valid until the
//     earlier of its expiry and its issue time plus the --token-ttl configured
//     now: shortening the TTL shortens every token already out, and a token
//     with an expiry far in the future (minted by whoever read the secret) is
//     worth no more than the TTL;
//   - the HMAC key is the user's own, derived from the secret, the user name
//     and a hash of the user's current password: changing a password revokes
//     every token minted before, and an old token cannot buy a fresh one at
//     /auth/login;
//   - roles are those of the token that the user still holds, and the scope
//     (prefixes) is the user's current one, read from the table per request.
//
// Payload: "v2\n<user>\n<expires unix s>\n<roles sorted, comma-separated>\n<issued unix s>".
// A token of the reference's v1 format is refused (see docs/deviations.md).

// tokenVersion is the first payload line.
const tokenVersion = "v2"

// maxTokenClockSkew is how far in the future an issue time may lie (replicas'
// clocks differ a little).
const maxTokenClockSkew = time.Minute

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// userTokenKey derives the key of a user's tokens from the secret, the name
// and the password.
func (a *authenticator) userTokenKey(user, password string) []byte {
	pw := sha256.Sum256([]byte(password))
	mac := hmac.New(sha256.New, a.secret())
	mac.Write([]byte("rsc token key\x00" + user + "\x00"))
	mac.Write(pw[:])
	return mac.Sum(nil)
}

// issueToken mints a token for p. It expires TokenTTL after now, or when the
// token p presented expires if that is sooner: refreshing a token never
// extends the life of a password login.
func (a *authenticator) issueToken(p *Principal, now time.Time) (string, time.Time, error) {
	u, ok := a.table()[p.Username]
	if !ok || strings.Contains(p.Username, "\n") {
		return "", time.Time{}, ErrBadCredentials
	}
	exp := now.Add(a.cfg.TokenTTL).Truncate(time.Second)
	if !p.expiresAt.IsZero() && p.expiresAt.Before(exp) {
		exp = p.expiresAt
	}
	payload := strings.Join([]string{tokenVersion, p.Username, strconv.FormatInt(exp.Unix(), 10), strings.Join(p.Roles, ","), strconv.FormatInt(now.Unix(), 10)}, "\n")
	p64 := b64([]byte(payload))
	mac := hmac.New(sha256.New, u.tokenKey)
	mac.Write([]byte(p64))
	return p64 + "." + b64(mac.Sum(nil)), exp, nil
}

// checkToken accepts a token that its user's current key signed and whose
// life has not ended by the current TTL; its roles are those of the token
// that the user still holds. Removing a user or changing its password thus
// revokes its tokens, and removing a role takes it away from them.
func (a *authenticator) checkToken(tok string) (*Principal, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 2 || strings.TrimSpace(parts[0]) == "" || strings.TrimSpace(parts[1]) == "" {
		return nil, ErrBadCredentials
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return nil, ErrBadCredentials
	}
	lines := strings.Split(string(raw), "\n")
	if len(lines) != 5 || lines[0] != tokenVersion {
		return nil, ErrBadCredentials
	}
	u, ok := a.table()[lines[1]]
	if !ok {
		return nil, ErrBadCredentials
	}
	mac := hmac.New(sha256.New, u.tokenKey)
	mac.Write([]byte(parts[0]))
	sig, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
		return nil, ErrBadCredentials
	}
	exp, err1 := strconv.ParseInt(lines[2], 10, 64)
	iat, err2 := strconv.ParseInt(lines[4], 10, 64)
	if err1 != nil || err2 != nil {
		return nil, ErrBadCredentials
	}
	now := a.now()
	issued, expires := time.Unix(iat, 0), time.Unix(exp, 0)
	if capped := issued.Add(a.cfg.TokenTTL); capped.Before(expires) {
		expires = capped
	}
	if !now.Before(expires) || issued.After(now.Add(maxTokenClockSkew)) {
		return nil, ErrBadCredentials
	}
	roles := heldRoles(knownRoles(strings.Split(lines[3], ",")), u.Roles)
	if len(roles) == 0 {
		return nil, ErrBadCredentials
	}
	return &Principal{Username: u.Username, Roles: roles, Prefixes: u.Prefixes, Groups: u.Groups, expiresAt: expires}, nil
}

// heldRoles is what a token's roles grant that the user's current roles grant
// too: the roles both name, and each role a route may require (READ, WRITE,
// MEMBER) that both grant without being named by both. A WRITE or ADMIN token
// of a user demoted to READ keeps READ; a READ token of a user promoted to
// ADMIN stays READ.
func heldRoles(token, current []string) []string {
	var roles []string
	for _, r := range token {
		if slices.Contains(current, r) {
			roles = append(roles, r)
		}
	}
	tok, cur := &Principal{Roles: token}, &Principal{Roles: current}
	for _, r := range []string{RoleMember, RoleRead, RoleWrite} {
		if !(&Principal{Roles: roles}).Grants(r) && tok.Grants(r) && cur.Grants(r) {
			roles = append(roles, r)
		}
	}
	slices.Sort(roles)
	return roles
}
