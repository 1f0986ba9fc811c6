package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rscoord/rsc/wire"
)

// DefaultTimeout bounds one coordinator call when the Client has no
// HTTPClient of its own (the reference Python client's HTTP timeout).
const DefaultTimeout = 5 * time.Second

// basePath is the contract's base path.
const basePath = "/coord/v1"

// Credentials authenticate calls to the coordinator. BasicAuth and BearerToken
// implement it; a token provider that refreshes tokens can too.
type Credentials interface {
	// AuthorizationHeader is the value of the Authorization header; "" sends none.
	AuthorizationHeader() string
}

// BasicAuth is HTTP Basic authentication (what the Spring starter sends).
type BasicAuth struct {
	Username, Password string
}

// AuthorizationHeader implements Credentials.
func (b BasicAuth) AuthorizationHeader() string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(b.Username+":"+b.Password))
}

// BearerToken is a token from POST /coord/v1/auth/login (what the Python
// client sends).
type BearerToken string

// AuthorizationHeader implements Credentials.
func (t BearerToken) AuthorizationHeader() string {
	if t == "" {
		return ""
	}
	return "Bearer " + string(t)
}

// Client calls a coordinator over HTTP. The zero value is not usable: set
// BaseURL or Endpoints, and do not change the fields once calls have started.
// It is safe for concurrent use; do not copy it after first use.
//
// Several replicas of a highly available coordinator may be given (a
// comma-separated BaseURL, Endpoints, or both): any replica serves reads and
// forwards writes to the leader. Calls stick to the replica that last
// answered. A call moves on to the next replica, each tried at most once and
// all within the caller's ctx, when the current one answers 503 or cannot
// have processed the request (connection refused, connect timeout, reset
// before the request was fully written); reads, heartbeats and logins also
// move on when the request was sent but no answer came (reset, EOF, timeout),
// as repeating them is harmless. Every other answer (2xx, 4xx, a 5xx other
// than 503) is returned at once. When no replica answers, the error names each
// failure and unwraps to the last one (an *APIError for a 503).
//
// Producer routing needs the READ role; heartbeats need the MEMBER role
// (none only when the coordinator runs with --allow-anonymous-members); the
// admin calls need WRITE, the monitoring calls READ. Give members credentials
// that hold MEMBER (a user with only that role is enough).
type Client struct {
	// BaseURL is the coordinator's address, e.g. "http://127.0.0.1:8080", or
	// the addresses of several replicas separated by commas,
	// "http://10.0.0.1:8080,http://10.0.0.2:8080".
	BaseURL string
	// Endpoints are more replica addresses, tried after those of BaseURL
	// (duplicates are dropped).
	Endpoints []string
	// Credentials, if set, authenticate every call.
	Credentials Credentials
	// HTTPClient, if set, sends the calls; the default has DefaultTimeout.
	HTTPClient *http.Client
	// UserAgent is sent as User-Agent when set.
	UserAgent string
	// RequestID, when set, is sent as X-Request-Id with every call, so the
	// coordinator's audit history ties the events of the calls to their
	// caller (one per command of a tool, say).
	RequestID string

	mu sync.Mutex
	// preferred is the endpoint the next call starts at: the last that
	// answered, or the one after the last that failed over ("" is the first).
	preferred string
}

var defaultHTTPClient = &http.Client{Timeout: DefaultTimeout}

// New returns a Client for baseURL (one URL, or several
// replicas' URLs separated by commas) with optional credentials.
func New(baseURL string, creds Credentials) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Credentials: creds}
}

// NewEndpoints returns a Client for several replicas of one
// coordinator, tried in the order given, with optional credentials.
func NewEndpoints(urls []string, creds Credentials) *Client {
	return &Client{Endpoints: append([]string(nil), urls...), Credentials: creds}
}

// GroupPath is the path of a group: /coord/v1/streams/{p}/groups/{g}, each
// segment percent-encoded on its own (a "/" in a name stays inside its segment).
func GroupPath(streamPrefix, consumerGroup string) string {
	return basePath + "/streams/" + url.PathEscape(streamPrefix) + "/groups/" + url.PathEscape(consumerGroup)
}

// monitoringGroupPath is the monitoring path of a group.
func monitoringGroupPath(streamPrefix, consumerGroup string) string {
	return basePath + "/monitoring/streams/" + url.PathEscape(streamPrefix) + "/groups/" + url.PathEscape(consumerGroup)
}

// ProducerRouting fetches the producer routing of a group:
// GET /coord/v1/streams/{p}/groups/{g}/producer-routing.
func (c *Client) ProducerRouting(ctx context.Context, streamPrefix, consumerGroup string) (*Routing, error) {
	return call[Routing](ctx, c, http.MethodGet, GroupPath(streamPrefix, consumerGroup)+"/producer-routing", nil, "producer routing of %s/%s", streamPrefix, consumerGroup)
}

// Heartbeat sends a member heartbeat:
// POST /coord/v1/streams/{p}/groups/{g}/members/{memberId}/heartbeat.
// Protocol outcomes (fenced, unknown member, ...) come back as a response
// status with err == nil; err is a transport failure or a non-2xx answer.
func (c *Client) Heartbeat(ctx context.Context, streamPrefix, consumerGroup string, req *HeartbeatRequest) (*HeartbeatResponse, error) {
	var resp HeartbeatResponse
	path := GroupPath(streamPrefix, consumerGroup) + "/members/" + url.PathEscape(req.MemberID) + "/heartbeat"
	// A repeated heartbeat is harmless (the coordinator answers it from the
	// member's state), so it may go to the next replica after a lost answer.
	if err := c.do(ctx, http.MethodPost, path, req, &resp, true); err != nil {
		return nil, fmt.Errorf("heartbeat of %s: %w", req.MemberID, err)
	}
	return &resp, nil
}

// HeldHeartbeat is Heartbeat asking the coordinator to hold the heartbeat
// for up to hold while its answer would tell the member nothing new
// (X-Rsc-Hold-Ms): it is answered at once when a change concerns the
// member, else when hold passes. It returns how the heartbeat was answered
// (HoldWoken, HoldElapsed, ...; "" from a coordinator that does not hold
// heartbeats, which answered at once). ctx bounds the call; with the
// Client's own HTTPClient, its Timeout must exceed hold.
func (c *Client) HeldHeartbeat(ctx context.Context, streamPrefix, consumerGroup string, req *HeartbeatRequest, hold time.Duration) (*HeartbeatResponse, string, error) {
	h := &heldCall{ms: strconv.FormatInt(max(hold.Milliseconds(), 0), 10)}
	resp, err := c.Heartbeat(context.WithValue(ctx, heldKey{}, h), streamPrefix, consumerGroup, req)
	return resp, h.outcome, err
}

// heldKey carries a held heartbeat's header and outcome through send.
type heldKey struct{}

type heldCall struct {
	ms      string // X-Rsc-Hold-Ms
	outcome string // X-Rsc-Hold of the answer
}

// heldHTTPClient sends held heartbeats when the Client has no HTTPClient of
// its own: without a timeout of its own (a hold outlasts DefaultTimeout);
// the caller's context bounds the call.
var heldHTTPClient = &http.Client{}

// Login exchanges a user name and password for a bearer token:
// POST /coord/v1/auth/login.
func (c *Client) Login(ctx context.Context, username, password string) (BearerToken, time.Time, error) {
	var resp struct {
		wire.LoginResponse
		// Token is where servers other than ours may put the token (the
		// reference's Python client reads it when accessToken is missing).
		Token string `json:"token"`
	}
	body := wire.LoginRequest{Username: username, Password: password}
	// A repeated login only issues another token.
	if err := c.do(ctx, http.MethodPost, basePath+"/auth/login", body, &resp, true); err != nil {
		return "", time.Time{}, fmt.Errorf("login as %s: %w", username, err)
	}
	tok := resp.AccessToken
	if tok == "" {
		tok = resp.Token
	}
	return BearerToken(tok), resp.ExpiresAt, nil
}

// RenewToken exchanges the bearer token the Client's Credentials send for a
// fresh one: POST /coord/v1/auth/login without a body.
func (c *Client) RenewToken(ctx context.Context) (BearerToken, time.Time, error) {
	var resp wire.LoginResponse
	if err := c.do(ctx, http.MethodPost, basePath+"/auth/login", nil, &resp, true); err != nil {
		return "", time.Time{}, fmt.Errorf("renew token: %w", err)
	}
	return BearerToken(resp.AccessToken), resp.ExpiresAt, nil
}

// Do sends one JSON request to path (already escaped, starting with "/") and
// decodes a 2xx JSON answer into out (when out is not nil). A non-2xx answer
// is an *APIError. With several endpoints, a GET or HEAD moves on to the next
// one after a lost answer too; other methods only when the request cannot
// have been processed (see Client).
func (c *Client) Do(ctx context.Context, method, path string, body, out any) error {
	return c.do(ctx, method, path, body, out, method == http.MethodGet || method == http.MethodHead)
}

// do is Do over the endpoints; replayable says the request may be repeated
// after it was sent without an answer.
func (c *Client) do(ctx context.Context, method, path string, body, out any, replayable bool) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
	}
	eps := c.endpoints()
	if len(eps) == 0 {
		return errNoEndpoint
	}
	start := c.first(eps)
	var failures []string
	var errs []error
	var err error
	for i := range eps {
		ep := eps[(start+i)%len(eps)]
		var next bool
		if next, err = c.send(ctx, ep, method, path, data, body != nil, out, replayable); !next {
			return err
		}
		c.failed(eps, ep, eps[(start+i+1)%len(eps)])
		failures = append(failures, ep+": "+err.Error())
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(failures) == 1 {
		return err
	}
	return &endpointsError{failures: failures, errs: errs, last: err}
}

// send makes one attempt at ep. next reports that the call may go on to the
// next endpoint: ep answered 503, or failed in a way that allows it (see
// progress.failover). An endpoint that answered anything else becomes the
// preferred one.
func (c *Client) send(ctx context.Context, ep, method, path string, data []byte, hasBody bool, out any, replayable bool) (next bool, err error) {
	var rd io.Reader
	if hasBody {
		rd = bytes.NewReader(data)
	}
	var prog progress
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, prog.trace()), method, ep+path, rd)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "application/json")
	if hasBody {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Credentials != nil {
		if h := c.Credentials.AuthorizationHeader(); h != "" {
			req.Header.Set("Authorization", h)
		}
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	if c.RequestID != "" {
		req.Header.Set("X-Request-Id", c.RequestID)
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = defaultHTTPClient
	}
	held, _ := ctx.Value(heldKey{}).(*heldCall)
	if held != nil {
		req.Header.Set(wire.HeaderHold, held.ms)
		if c.HTTPClient == nil {
			hc = heldHTTPClient
		}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return prog.failover(err, replayable), err
	}
	defer resp.Body.Close()
	if held != nil {
		held.outcome = resp.Header.Get(wire.HeaderHoldOutcome)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return false, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		apiErr := &APIError{Method: method, Path: path, StatusCode: resp.StatusCode, Body: string(body)}
		var er ErrorResponse
		if json.Unmarshal(body, &er) == nil {
			apiErr.ErrorCode, apiErr.Message = er.ErrorCode, er.Message
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			return true, apiErr
		}
		c.answered(ep, resp.Header.Get(headerForwardedTo))
		return false, apiErr
	}
	c.answered(ep, resp.Header.Get(headerForwardedTo))
	if raw, ok := ctx.Value(answerKey{}).(*[]byte); ok {
		*raw = body
	}
	if out == nil {
		return false, nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return false, fmt.Errorf("%s %s: %w: %w", method, path, ErrBadAnswer, err)
	}
	return false, nil
}

type answerKey struct{}

// CaptureAnswer returns a context under which a call also stores the body of
// its 2xx answer in *raw, as the coordinator sent it (tools that print the
// answer verbatim).
func CaptureAnswer(ctx context.Context, raw *[]byte) context.Context {
	return context.WithValue(ctx, answerKey{}, raw)
}

// NewRequestID returns a random (version 4) UUID, as both reference clients
// send in requestId.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
