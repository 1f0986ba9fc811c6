package wire

import "time"

// LoginRequest is the optional body of POST /coord/v1/auth/login.
type LoginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// LoginResponse carries a bearer token.
type LoginResponse struct {
	AccessToken      string    `json:"accessToken"`
	TokenType        string    `json:"tokenType"`
	ExpiresAt        time.Time `json:"expiresAt"`
	ExpiresInSeconds int64     `json:"expiresInSeconds"`
	Roles            []string  `json:"roles"`
}

// SessionResponse answers GET /coord/v1/monitoring/session: who the
// credentials of the request belong to. Username is null without credentials.
// Its fields are in the order the answer has always had them (alphabetical).
type SessionResponse struct {
	Authenticated bool `json:"authenticated"`
	// Groups are the consumer groups (exact, or a name prefix ending in
	// '*') the principal's roles apply to; null for every group.
	Groups []string `json:"groups"`
	// Prefixes is the principal's scope: the stream prefixes (exact, or a
	// name prefix ending in '*') its roles apply to; null for every prefix.
	Prefixes []string `json:"prefixes"`
	Roles    []string `json:"roles"`
	Username *string  `json:"username"`
}
