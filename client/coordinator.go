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
	"net/url"
	"strings"
	"time"
)

// DefaultTimeout bounds one coordinator call when the Coordinator has no
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

// Coordinator calls a coordinator over HTTP. The zero value is not usable: set
// BaseURL. It is safe for concurrent use.
//
// Producer routing needs the READ role; heartbeats need none unless the
// coordinator runs with --authenticate-member-api (then MEMBER); the admin
// calls need WRITE.
type Coordinator struct {
	// BaseURL is the coordinator's address, e.g. "http://127.0.0.1:8080".
	BaseURL string
	// Credentials, if set, authenticate every call.
	Credentials Credentials
	// HTTPClient, if set, sends the calls; the default has DefaultTimeout.
	HTTPClient *http.Client
	// UserAgent is sent as User-Agent when set.
	UserAgent string
}

var defaultHTTPClient = &http.Client{Timeout: DefaultTimeout}

// NewCoordinator returns a Coordinator for baseURL with optional credentials.
func NewCoordinator(baseURL string, creds Credentials) *Coordinator {
	return &Coordinator{BaseURL: strings.TrimRight(baseURL, "/"), Credentials: creds}
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
func (c *Coordinator) ProducerRouting(ctx context.Context, streamPrefix, consumerGroup string) (*Routing, error) {
	var r Routing
	if err := c.Do(ctx, http.MethodGet, GroupPath(streamPrefix, consumerGroup)+"/producer-routing", nil, &r); err != nil {
		return nil, fmt.Errorf("producer routing of %s/%s: %w", streamPrefix, consumerGroup, err)
	}
	return &r, nil
}

// Heartbeat sends a member heartbeat:
// POST /coord/v1/streams/{p}/groups/{g}/members/{memberId}/heartbeat.
// Protocol outcomes (fenced, unknown member, ...) come back as a response
// status with err == nil; err is a transport failure or a non-2xx answer.
func (c *Coordinator) Heartbeat(ctx context.Context, streamPrefix, consumerGroup string, req *HeartbeatRequest) (*HeartbeatResponse, error) {
	var resp HeartbeatResponse
	path := GroupPath(streamPrefix, consumerGroup) + "/members/" + url.PathEscape(req.MemberID) + "/heartbeat"
	if err := c.Do(ctx, http.MethodPost, path, req, &resp); err != nil {
		return nil, fmt.Errorf("heartbeat of %s: %w", req.MemberID, err)
	}
	return &resp, nil
}

// Login exchanges a user name and password for a bearer token:
// POST /coord/v1/auth/login.
func (c *Coordinator) Login(ctx context.Context, username, password string) (BearerToken, time.Time, error) {
	var resp LoginResponse
	body := map[string]string{"username": username, "password": password}
	if err := c.Do(ctx, http.MethodPost, basePath+"/auth/login", body, &resp); err != nil {
		return "", time.Time{}, fmt.Errorf("login as %s: %w", username, err)
	}
	tok := resp.AccessToken
	if tok == "" {
		tok = resp.Token
	}
	return BearerToken(tok), resp.ExpiresAt, nil
}

// Do sends one JSON request to path (already escaped, starting with "/") and
// decodes a 2xx JSON answer into out (when out is not nil). A non-2xx answer
// is an *APIError.
func (c *Coordinator) Do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
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
	hc := c.HTTPClient
	if hc == nil {
		hc = defaultHTTPClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		apiErr := &APIError{Method: method, Path: path, StatusCode: resp.StatusCode, Body: string(data)}
		var er ErrorResponse
		if json.Unmarshal(data, &er) == nil {
			apiErr.ErrorCode, apiErr.Message = er.ErrorCode, er.Message
		}
		return apiErr
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
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
