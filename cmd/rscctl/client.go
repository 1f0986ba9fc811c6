package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// requestTimeout bounds one HTTP call; --wait polls many times within its own timeout.
const requestTimeout = 15 * time.Second

// app is one invocation: where to print, how to reach and authenticate to the
// coordinator.
type app struct {
	stdout, stderr io.Writer
	g              globals
	base           string
	http           *http.Client
	authorize      func(*http.Request)
	credentials    string // what authorize sends, for error messages
	// requestID goes out as X-Request-Id on every call of this invocation, so the
	// audit history ties the coordinator's events to the command that caused them.
	requestID string
}

func newApp(stdout, stderr io.Writer) *app {
	return &app{stdout: stdout, stderr: stderr, g: newGlobals(), http: &http.Client{Timeout: requestTimeout}, requestID: newRequestID()}
}

// connect resolves the base URL and the credentials (see usage for the order).
func (a *app) connect() error {
	u, err := url.Parse(a.g.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErrorf("--url %q: want http://host:port or https://host:port", a.g.url)
	}
	a.base = strings.TrimSuffix(u.String(), "/")
	switch {
	case a.g.token != "":
		tok := a.g.token
		a.authorize = func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
		a.credentials = "the bearer token from --token/$RSC_TOKEN"
	case !a.g.explicitCreds:
		if tok, path, ok := loadToken(); ok {
			a.authorize = func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
			a.credentials = "the token saved in " + path + ` (run "rscctl login --save" again, or pass --user/--password)`
			break
		}
		fallthrough
	default:
		user, pass := a.g.user, a.g.password
		a.authorize = func(r *http.Request) { r.SetBasicAuth(user, pass) }
		a.credentials = "user " + user
	}
	return nil
}

func newRequestID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "rscctl-" + hex.EncodeToString(b[:])
}

// apiError is an HTTP answer of 400 or more, with the coordinator's ErrorResponse when it sent one.
type apiError struct {
	Method, Path string
	Status       int
	Code         string
	Message      string
}

func (e *apiError) Error() string {
	head := fmt.Sprintf("%s %s: HTTP %d", e.Method, e.Path, e.Status)
	switch {
	case e.Code != "":
		return fmt.Sprintf("%s %s: %s", head, e.Code, e.Message)
	case e.Message != "":
		return head + ": " + e.Message
	}
	return head
}

// unreachableError is a request that got no HTTP answer.
type unreachableError struct {
	URL string
	Err error
}

func (e *unreachableError) Error() string {
	return fmt.Sprintf("cannot reach the coordinator at %s: %v", e.URL, e.Err)
}

func (e *unreachableError) Unwrap() error { return e.Err }

// badAnswerError is a 2xx answer that is not the documented JSON (a proxy's page,
// another service on the port).
type badAnswerError struct {
	Path string
	Err  error
}

func (e *badAnswerError) Error() string {
	return fmt.Sprintf("unexpected answer to %s (not the coordinator's JSON): %v", e.Path, e.Err)
}

// call sends one request and returns the body of a 2xx answer.
func (a *app) call(ctx context.Context, method, path string, query url.Values, body any) ([]byte, error) {
	target := a.base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, usageErrorf("bad request URL %s: %v", target, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "rscctl")
	req.Header.Set("X-Request-Id", a.requestID)
	if a.authorize != nil {
		a.authorize(req)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, &unreachableError{URL: a.base, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, &unreachableError{URL: a.base, Err: fmt.Errorf("read answer to %s %s: %w", method, path, err)}
	}
	if resp.StatusCode < 400 {
		return data, nil
	}
	e := &apiError{Method: method, Path: path, Status: resp.StatusCode}
	// The contract's ErrorResponse, or the failed login's body (its "error").
	var er struct {
		ErrorCode string `json:"errorCode"`
		Message   string `json:"message"`
		Error     string `json:"error"`
	}
	if json.Unmarshal(data, &er) == nil && (er.ErrorCode != "" || er.Message != "" || er.Error != "") {
		e.Code, e.Message = er.ErrorCode, er.Message
		if e.Message == "" {
			e.Message = er.Error
		}
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized && e.Code == "":
		// The authentication layer answers with no body; login with Spring's error shape.
		e.Message = "authentication failed: missing or rejected credentials (sent " + a.credentials + ")"
	case resp.StatusCode == http.StatusForbidden && e.Code == "":
		e.Message = "permission denied: " + a.credentials + " lacks the role this call needs"
	case e.Code != "" || e.Message != "":
	default:
		e.Message = strings.TrimSpace(string(data))
		if len(e.Message) > 200 {
			e.Message = e.Message[:200] + "..."
		}
	}
	return nil, e
}

// get calls GET path and decodes the answer into v (when v is not nil).
func (a *app) get(ctx context.Context, path string, query url.Values, v any) ([]byte, error) {
	data, err := a.call(ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return nil, err
	}
	return data, decode(path, data, v)
}

// send calls method path with a JSON body and decodes the answer into v.
func (a *app) send(ctx context.Context, method, path string, body, v any) ([]byte, error) {
	data, err := a.call(ctx, method, path, nil, body)
	if err != nil {
		return nil, err
	}
	return data, decode(path, data, v)
}

func decode(path string, data []byte, v any) error {
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(data, v); err != nil {
		return &badAnswerError{Path: path, Err: err}
	}
	return nil
}

// Paths. Every parameter is percent-encoded: the server routes on raw segments
// and decodes each one, so "a/b" must travel as "a%2Fb".

func groupPath(prefix, group string) string {
	return "/coord/v1/streams/" + url.PathEscape(prefix) + "/groups/" + url.PathEscape(group)
}

func monitoringPath(prefix, group string) string {
	return "/coord/v1/monitoring/streams/" + url.PathEscape(prefix) + "/groups/" + url.PathEscape(group)
}

func reshardingPath(prefix, group, id string) string {
	return groupPath(prefix, group) + "/migrations/" + url.PathEscape(id)
}
