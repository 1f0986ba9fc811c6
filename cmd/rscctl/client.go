package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rscoord/rsc/client"
)

// requestTimeout bounds one HTTP call; --wait polls many times within its own timeout.
const requestTimeout = 15 * time.Second

// app is one invocation: where to print, how to reach and authenticate to the
// coordinator.
type app struct {
	stdout, stderr io.Writer
	g              globals
	base           string
	// c is the SDK's client of the coordinator, built by connect.
	c           *client.Client
	credentials string // what the client sends, for error messages
	// requestID goes out as X-Request-Id on every call of this invocation, so the
	// audit history ties the coordinator's events to the command that caused them.
	requestID string
}

func newApp(stdout, stderr io.Writer) *app {
	return &app{stdout: stdout, stderr: stderr, g: newGlobals(), requestID: newRequestID()}
}

// connect resolves the base URL and the credentials (see usage for the order).
func (a *app) connect() error {
	u, err := url.Parse(a.g.url)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErrorf("--url %q: want http://host:port or https://host:port", a.g.url)
	}
	a.base = strings.TrimSuffix(u.String(), "/")
	var creds client.Credentials
	switch {
	case a.g.token != "":
		creds = client.BearerToken(a.g.token)
		a.credentials = "the bearer token from --token/$RSC_TOKEN"
	case !a.g.explicitCreds:
		if tok, path, ok := loadToken(); ok {
			creds = client.BearerToken(tok)
			a.credentials = "the token saved in " + path + ` (run "rscctl login --save" again, or pass --user/--password)`
			break
		}
		fallthrough
	default:
		creds = client.BasicAuth{Username: a.g.user, Password: a.g.password}
		a.credentials = "user " + a.g.user
	}
	a.c = &client.Client{BaseURL: a.base, Credentials: creds, HTTPClient: &http.Client{Timeout: requestTimeout}, UserAgent: "rscctl", RequestID: a.requestID}
	return nil
}

func newRequestID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "rscctl-" + hex.EncodeToString(b[:])
}

// call runs one call of the client and returns its answer, the answer's
// body as the coordinator sent it (what -o json prints), and the error as
// rscctl reports it.
func call[T any](ctx context.Context, a *app, fn func(ctx context.Context) (T, error)) (T, []byte, error) {
	var raw []byte
	v, err := fn(client.CaptureAnswer(ctx, &raw))
	return v, raw, a.explain(err)
}

// fetch is call for a command that prints the answer: with -o json it
// prints the answer as the coordinator sent it and reports printed, and the
// command prints nothing more.
func fetch[T any](ctx context.Context, a *app, fn func(ctx context.Context) (T, error)) (v T, printed bool, err error) {
	v, data, err := call(ctx, a, fn)
	if err != nil || a.g.output != "json" {
		return v, false, err
	}
	return v, true, printJSON(a.stdout, data)
}

// explain turns a client error into rscctl's: the coordinator's refusal, an
// answer that is not its JSON, or no answer at all.
func (a *app) explain(err error) error {
	var ae *client.APIError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae):
		return a.refusal(ae)
	case errors.Is(err, client.ErrBadAnswer):
		return &badAnswerError{Err: err}
	case errors.Is(err, context.Canceled):
		return err
	}
	return &unreachableError{URL: a.base, Err: err}
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

// refusal is the client's APIError with what to tell the operator: the
// coordinator's message, the failed login's (its "error"), or for an
// authentication answer without a body, which credentials were sent.
func (a *app) refusal(ae *client.APIError) *apiError {
	path, _, _ := strings.Cut(ae.Path, "?")
	e := &apiError{Method: ae.Method, Path: path, Status: ae.StatusCode, Code: ae.ErrorCode, Message: ae.Message}
	if e.Code == "" && e.Message == "" {
		var login struct {
			Error string `json:"error"`
		}
		if json.Unmarshal([]byte(ae.Body), &login) == nil {
			e.Message = login.Error
		}
	}
	switch {
	case e.Status == http.StatusUnauthorized && e.Code == "":
		// The authentication layer answers with no body; login with Spring's error shape.
		e.Message = "authentication failed: missing or rejected credentials (sent " + a.credentials + ")"
	case e.Status == http.StatusForbidden && e.Code == "":
		e.Message = "permission denied: " + a.credentials + " lacks the role this call needs"
	case e.Code != "" || e.Message != "":
	default:
		e.Message = strings.TrimSpace(ae.Body)
		if len(e.Message) > 200 {
			e.Message = e.Message[:200] + "..."
		}
	}
	return e
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
	Err error
}

func (e *badAnswerError) Error() string {
	return fmt.Sprintf("unexpected answer (not the coordinator's JSON): %v", e.Err)
}
