package guard

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultTokenTTL is the contract's token lifetime (expiresInSeconds 604800).
const DefaultTokenTTL = 7 * 24 * time.Hour

// AuthConfig configures authentication. With no Users, the admin user holds every role.
type AuthConfig struct {
	AdminUser     string
	AdminPassword string
	Users         []User
	// TokenSecret signs bearer tokens. Empty: the contract's derivation from
	// the admin credentials (§1.3), which only a non-default admin password
	// keeps secret; cmd refuses that combination with Users.
	TokenSecret string
	// TokenTTL is a token's lifetime (DefaultTokenTTL when 0). Verification
	// applies the TTL configured now: a token lives at most TokenTTL after it
	// was issued, and one exchanged for a fresh one never outlives the first.
	TokenTTL time.Duration
	// ClusterSecret signs the principal assertions --ha replicas forward to
	// the leader (assertion.go). Empty: this server neither forwards nor
	// accepts forwarded requests.
	ClusterSecret string
	// AuthenticateMemberAPI requires the MEMBER role for heartbeats; without
	// it anyone who reaches the port can heartbeat as any member id.
	AuthenticateMemberAPI bool
	// MetricsAuth requires, for GET /metrics, a principal with the READ role
	// (MONITOR grants it) and no scope: the scrape shows every tenant's
	// groups. Without it /metrics is public, like the probes.
	MetricsAuth bool
}

// ErrBadCredentials: the Authorization header or the login body proved
// nothing; the answer is the bodiless 401 (or the failed login's body).
var ErrBadCredentials = errors.New("bad credentials")

// userEntry is a configured user with the key that signs its tokens.
type userEntry struct {
	User
	tokenKey []byte
}

// userTable is the users as configured now, by name, with known roles only.
type userTable map[string]*userEntry

// authenticator checks credentials against the user table.
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
// (it never brings the default admin back). A user whose scope ValidateScope
// refuses covers no prefix (cmd refuses such a file before it gets here).
func (a *authenticator) setUsers(users []User) {
	t := userTable{}
	for _, u := range users {
		u.Roles = knownRoles(u.Roles)
		if u.Prefixes != nil {
			u.Prefixes = append([]string{}, u.Prefixes...)
			if ValidateScope(u.Prefixes) != nil {
				u.Prefixes = []string{}
			}
		}
		if u.Groups != nil {
			u.Groups = append([]string{}, u.Groups...)
			if ValidateGroups(u.Groups) != nil {
				u.Groups = []string{}
			}
		}
		t[u.Username] = &userEntry{User: u, tokenKey: a.userTokenKey(u.Username, u.Password)}
	}
	a.users.Store(&t)
}

func (a *authenticator) table() userTable { return *a.users.Load() }

// secret is the HMAC key bearer tokens' keys derive from. The derivation from
// the admin credentials is the contract's (§1.3): it is a secret only while
// the admin password is one, which is why cmd requires --token-secret (or
// keeps a random one in Redis) with --users-file and refuses the default
// password on a non-loopback address.
func (a *authenticator) secret() []byte {
	if strings.TrimSpace(a.cfg.TokenSecret) != "" {
		return []byte(a.cfg.TokenSecret)
	}
	return []byte(a.cfg.AdminUser + ":" + a.cfg.AdminPassword + ":redis-stream-coordinator-token")
}

// throttledError: the password was not checked, the caller failed too often.
type throttledError struct {
	wait   time.Duration
	reason string // which bucket is empty
	user   string // the user name tried (for the log)
}

func (e *throttledError) Error() string {
	return fmt.Sprintf("too many failed logins %s; retry in %s", e.reason, e.wait)
}

// checkPassword checks user's password, unless user from addr, or addr,
// failed too often lately (then *throttledError, before looking at the
// password). A connection that proved these very credentials before (proven)
// is not throttled: whoever fails elsewhere cannot send on it.
func (a *authenticator) checkPassword(user, pass, addr string, proven *connProof) (*Principal, error) {
	cred := credentialDigest(user, pass)
	if !proven.has(cred) {
		if wait, reason := a.throttle.blocked(user, addr); wait > 0 {
			return nil, &throttledError{wait: wait, reason: reason, user: user}
		}
	}
	u, ok := a.table()[user]
	want := "\x00unknown user" // compare anyway: the time taken does not tell who exists
	if ok {
		want = u.Password
	}
	if subtle.ConstantTimeCompare([]byte(want), []byte(pass)) != 1 || !ok {
		a.throttle.failedPassword(user, addr)
		return nil, ErrBadCredentials
	}
	if len(u.Roles) == 0 {
		return nil, ErrBadCredentials
	}
	proven.add(cred)
	return &Principal{Username: u.Username, Roles: u.Roles, Prefixes: u.Prefixes, Groups: u.Groups}, nil
}

// credentialDigest names a user and password without keeping the password.
func credentialDigest(user, pass string) [sha256.Size]byte {
	return sha256.Sum256([]byte(user + "\x00" + pass))
}

// authenticate reads the Authorization header of a request from addr: nil
// principal and nil error when absent. Failures spend the throttle's buckets
// of (user, addr) and addr (throttle.go).
func (a *authenticator) authenticate(r *http.Request, addr string) (*Principal, error) {
	h := strings.TrimSpace(r.Header.Get("Authorization"))
	if h == "" {
		return nil, nil
	}
	scheme, cred, _ := strings.Cut(h, " ")
	cred = strings.TrimSpace(cred)
	switch strings.ToLower(scheme) {
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			a.throttle.failedToken(addr)
			return nil, ErrBadCredentials
		}
		user, pass, ok := strings.Cut(string(raw), ":")
		if !ok {
			a.throttle.failedToken(addr)
			return nil, ErrBadCredentials
		}
		return a.checkPassword(user, pass, addr, proofOf(r))
	case "bearer":
		p, err := a.checkToken(cred)
		if err != nil {
			a.throttle.failedToken(addr)
		}
		return p, err
	}
	a.throttle.failedToken(addr)
	return nil, ErrBadCredentials
}

// truncateText cuts s to at most n bytes on a rune boundary.
func truncateText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 {
		n--
	}
	return s[:n]
}
