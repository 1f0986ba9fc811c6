package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"
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

// User is a configured principal.
type User struct {
	Username string   `json:"username"`
	Password string   `json:"password"`
	Roles    []string `json:"roles"`
}

// AuthConfig configures authentication. With no Users, the admin user holds every role.
type AuthConfig struct {
	AdminUser             string
	AdminPassword         string
	Users                 []User
	TokenSecret           string
	TokenTTL              time.Duration // 7 days
	AuthenticateMemberAPI bool
}

type principal struct {
	Username string
	Roles    []string
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

type authenticator struct {
	cfg   AuthConfig
	users map[string]User
}

func newAuthenticator(cfg AuthConfig) *authenticator {
	if cfg.AdminUser == "" {
		cfg.AdminUser = "admin"
	}
	if cfg.AdminPassword == "" {
		cfg.AdminPassword = "password"
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = 7 * 24 * time.Hour
	}
	a := &authenticator{cfg: cfg, users: map[string]User{}}
	if len(cfg.Users) == 0 {
		a.users[cfg.AdminUser] = User{Username: cfg.AdminUser, Password: cfg.AdminPassword, Roles: []string{RoleAdmin, RoleMember, RoleMonitor, RoleRead, RoleWrite}}
	} else {
		for _, u := range cfg.Users {
			a.users[u.Username] = u
		}
	}
	return a
}

func (a *authenticator) secret() []byte {
	if strings.TrimSpace(a.cfg.TokenSecret) != "" {
		return []byte(a.cfg.TokenSecret)
	}
	return []byte(a.cfg.AdminUser + ":" + a.cfg.AdminPassword + ":redis-stream-coordinator-token")
}

var errBadCredentials = errors.New("bad credentials")

func (a *authenticator) checkPassword(user, pass string) (*principal, error) {
	u, ok := a.users[user]
	if !ok || subtle.ConstantTimeCompare([]byte(u.Password), []byte(pass)) != 1 {
		return nil, errBadCredentials
	}
	roles := knownRoles(u.Roles)
	if len(roles) == 0 {
		return nil, errBadCredentials
	}
	return &principal{Username: u.Username, Roles: roles}, nil
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
	scheme, cred, _ := strings.Cut(h, " ")
	cred = strings.TrimSpace(cred)
	switch strings.ToLower(scheme) {
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return nil, errBadCredentials
		}
		user, pass, ok := strings.Cut(string(raw), ":")
		if !ok {
			return nil, errBadCredentials
		}
		return a.checkPassword(user, pass)
	case "bearer":
		return a.decodeToken(cred, time.Now())
	}
	return nil, errBadCredentials
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// issueToken mints the reference's token format: base64url(payload).base64url(HMAC).
func (a *authenticator) issueToken(p *principal, now time.Time) (string, time.Time, error) {
	if strings.Contains(p.Username, "\n") {
		return "", time.Time{}, errBadCredentials
	}
	exp := now.Add(a.cfg.TokenTTL).Truncate(time.Second)
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
	return &principal{Username: lines[1], Roles: roles}, nil
}

// requiredRole is the contract's rule table, first match wins; "" means public.
func (a *authenticator) requiredRole(r *http.Request) string {
	path := r.URL.EscapedPath()
	mutation := r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch || r.Method == http.MethodDelete
	switch {
	case path == "/coord/v1/auth/login":
		return ""
	case strings.Contains(path, "/members/") && strings.HasSuffix(path, "/heartbeat"):
		if a.cfg.AuthenticateMemberAPI {
			return RoleMember
		}
		return ""
	case strings.HasPrefix(path, "/coord/v1/monitoring"):
		return RoleRead
	case strings.HasPrefix(path, "/coord/v1/"), path == "/coord/v1":
		if mutation {
			return RoleWrite
		}
		return RoleRead
	}
	return ""
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Basic realm="redis-stream-coordinator"`)
	w.WriteHeader(http.StatusUnauthorized)
}
