package wire

import "time"

// ErrorResponse is the contract's error body (§1.4): every refusal except the
// empty-bodied 401 and 403 and the failed login.
type ErrorResponse struct {
	Status    string `json:"status"`
	ErrorCode string `json:"errorCode"`
	Message   string `json:"message"`
	// Timestamp and Path are extras a human reading the body appreciates.
	Timestamp time.Time `json:"timestamp"`
	Path      string    `json:"path"`
}

// LoginError is the body of a failed login: the reference's Spring default
// error shape, not ErrorResponse. Its fields are in the order the answer has
// always had them (alphabetical).
type LoginError struct {
	Error     string    `json:"error"`
	Path      string    `json:"path"`
	Status    int       `json:"status"`
	Timestamp time.Time `json:"timestamp"`
}
