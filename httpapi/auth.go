package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Roles, as on the wire.
const (
	RoleRead    = "READ"
	RoleWrite   = "WRITE"
	RoleMember  = "MEMBER"
	RoleAdmin   = "ADMIN"
	RoleMonitor = "MONITOR"
)

// DefaultTokenTTL is the contract's token lifetime (expiresInSeconds 604800).
const DefaultTokenTTL = 7 * 24 * time.Hour

// User is a configured principal.
type User struct {
	Username string   `json:"username"`
	Password string   `json:"password"`
	Roles    []string `json:"roles"`
}

// AuthConfig configures authentication. With no Users, the admin user holds every role.
type AuthConfig struct {
	AdminUser     string
	AdminPassword string
	Users         []User
	// TokenSecret signs bearer tokens. Empty: the contract's derivation from
	// the admin credentials (§1.3), which only a non-default admin password
	// keeps secret; cmd refuses that combination with Users.
	TokenSecret string
	// TokenTTL is a token's lifetime (DefaultTokenTTL when 0). A token
	// exchanged for a fresh one never outlives it.
	TokenTTL time.Duration
	// AuthenticateMemberAPI requires the MEMBER role for heartbeats; without
	// it anyone who reaches the port can heartbeat as any member id.
	AuthenticateMemberAPI bool
}

type principal struct {
	Username string
	Roles    []string
	// expiresAt is the bearer token's expiry (zero after a password check): a
	// token exchanged at /auth/login gets no later one.
	expiresAt time.Time
}

// grants reports whether the principal's roles grant the required role.
func (p *principal) grants(required string) bool {
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

// userTable is the users as configured now, by name, with known roles only.
type userTable map[string]User

type authenticator struct {
	cfg      AuthConfig
	users    atomic.Pointer[userTable]
	throttle *loginThrottle
	now      func() time.Time
}

func newAuthenticator(cfg AuthConfig, now func() time.Time) *authenticator {
	if cfg.AdminUser == "" {
		cfg.AdminUser = "admin"
	}
	if cfg.AdminPassword == "" {
		cfg.AdminPassword = "password"
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = DefaultTokenTTL
	}
	a := &authenticator{cfg: cfg, throttle: newLoginThrottle(now), now: now}
	if len(cfg.Users) == 0 {
		a.setUsers([]User{{Username: cfg.AdminUser, Password: cfg.AdminPassword, Roles: []string{RoleAdmin, RoleMember, RoleMonitor, RoleRead, RoleWrite}}})
	} else {
		a.setUsers(cfg.Users)
	}
	return a
}

// setUsers replaces the user table. An empty list leaves nobody able to log in
// (it never brings the default admin back).
func (a *authenticator) setUsers(users []User) {
	t := userTable{}
	for _, u := range users {
		u.Roles = knownRoles(u.Roles)
		t[u.Username] = u
	}
	a.users.Store(&t)
}

func (a *authenticator) table() userTable { return *a.users.Load() }

// secret is the HMAC key of bearer tokens. The derivation from the admin
// credentials is the contract's (§1.3, so that tokens of the reference
// coordinator keep working): it is a secret only while the admin password is
// one. With the default password anyone can sign an ADMIN token, which is why
// cmd requires --token-secret (or keeps a random one in Redis) with
// --users-file and refuses the default password on a non-loopback address.
func (a *authenticator) secret() []byte {
	if strings.TrimSpace(a.cfg.TokenSecret) != "" {
		return []byte(a.cfg.TokenSecret)
	}
	return []byte(a.cfg.AdminUser + ":" + a.cfg.AdminPassword + ":redis-stream-coordinator-token")
}

// throttledError: the password was not checked, the caller failed too often.
type throttledError struct{ wait time.Duration }

func (e *throttledError) Error() string {
	return fmt.Sprintf("too many failed logins; retry in %s", e.wait)
}

// checkPassword checks user's password, unless user or addr failed too often
// lately (then *throttledError, before looking at the password).
func (a *authenticator) checkPassword(user, pass, addr string) (*principal, error) {
	if wait := a.throttle.blocked(user, addr); wait > 0 {
		return nil, &throttledError{wait}
	}
	u, ok := a.table()[user]
	want := u.Password
	if !ok {
		want = "\x00unknown user" // compare anyway: the time taken does not tell who exists
	}
	if subtle.ConstantTimeCompare([]byte(want), []byte(pass)) != 1 || !ok {
		a.throttle.failedPassword(user, addr)
		return nil, errBadCredentials
	}
	if len(u.Roles) == 0 {
		return nil, errBadCredentials
	}
	return &principal{Username: u.Username, Roles: u.Roles}, nil
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

// authenticate reads the Authorization header: nil principal and nil error when absent.
func (a *authenticator) authenticate(r *http.Request) (*principal, error) {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if h == "" {
		return nil, nil
	}
	addr := clientAddr(r)
	scheme, cred, _ := strings.Cut(h, " ")
	cred = strings.TrimSpace(cred)
	switch strings.ToLower(scheme) {
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			a.throttle.failedToken(addr)
			return nil, errBadCredentials
		}
		user, pass, ok := strings.Cut(string(raw), ":")
		if !ok {
			a.throttle.failedToken(addr)
			return nil, errBadCredentials
		}
		return a.checkPassword(user, pass, addr)
	case "bearer":
		p, err := a.checkToken(cred)
		if err != nil {
			a.throttle.failedToken(addr)
		}
		return p, err
	}
	a.throttle.failedToken(addr)
	return nil, errBadCredentials
}

// checkToken accepts a token that is well signed, unexpired, and whose user
// still exists; its roles are those of the token that the user still holds.
// Removing a user from the users file thus revokes its tokens, and removing
// a role takes it away from them.
func (a *authenticator) checkToken(tok string) (*principal, error) {
	p, err := a.decodeToken(tok, a.now())
	if err != nil {
		return nil, err
	}
	u, ok := a.table()[p.Username]
	if !ok {
		return nil, errBadCredentials
	}
	var roles []string
	for _, r := range p.Roles {
		if slices.Contains(u.Roles, r) {
			roles = append(roles, r)
		}
	}
	if len(roles) == 0 {
		return nil, errBadCredentials
	}
	p.Roles = roles
	return p, nil
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// issueToken mints the reference's token format: base64url(payload).base64url(HMAC).
// It expires TokenTTL after now, or when the token p presented expires if that
// is sooner: refreshing a token never extends the life of a password login.
func (a *authenticator) issueToken(p *principal, now time.Time) (string, time.Time, error) {
	if strings.Contains(p.Username, "\n") {
		return "", time.Time{}, errBadCredentials
	}
	exp := now.Add(a.cfg.TokenTTL).Truncate(time.Second)
	if !p.expiresAt.IsZero() && p.expiresAt.Before(exp) {
		exp = p.expiresAt
	}
	payload := "v1\n" + p.Username + "\n" + strconv.FormatInt(exp.Unix(), 10) + "\n" + strings.Join(p.Roles, ",")
	p64 := b64([]byte(payload))
	mac := hmac.New(sha256.New, a.secret())
	mac.Write([]byte(p64))
	return p64 + "." + b64(mac.Sum(nil)), exp, nil
}

func (a *authenticator) decodeToken(tok string, now time.Time) (*principal, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 2 || strings.TrimSpace(parts[0]) == "" || strings.TrimSpace(parts[1]) == "" {
		return nil, errBadCredentials
	}
	mac := hmac.New(sha256.New, a.secret())
	mac.Write([]byte(parts[0]))
	sig, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
		return nil, errBadCredentials
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return nil, errBadCredentials
	}
	lines := strings.Split(string(raw), "\n")
	if len(lines) != 4 || lines[0] != "v1" {
		return nil, errBadCredentials
	}
	exp, err := strconv.ParseInt(lines[2], 10, 64)
	if err != nil || exp <= now.Unix() {
		return nil, errBadCredentials
	}
	roles := knownRoles(strings.Split(lines[3], ","))
	if len(roles) == 0 {
		return nil, errBadCredentials
	}
	return &principal{Username: lines[1], Roles: roles, expiresAt: time.Unix(exp, 0)}, nil
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Basic realm="redis-stream-coordinator"`)
	w.WriteHeader(http.StatusUnauthorized)
}

// tooManyFailures answers a throttled password check: 429 with Retry-After.
func (s *Server) tooManyFailures(w http.ResponseWriter, r *http.Request, te *throttledError) {
	w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds(te.wait)))
	s.writeError(w, r, errTooManyLogins)
}
