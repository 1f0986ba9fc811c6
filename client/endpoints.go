package client

import (
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync/atomic"
)

// A Client may know several coordinator replicas. One call tries them in
// order, starting at the preferred one (the last that answered), each at most
// once, and moves on only when the replica cannot have acted on the request
// (see failover). This file holds that policy; coordinator.go sends one
// attempt.

// errNoEndpoint: neither BaseURL nor Endpoints names a coordinator.
var errNoEndpoint = errors.New("client: Coordinator has no endpoint: set BaseURL or Endpoints")

// endpoints lists the configured coordinator URLs in order: the
// comma-separated URLs of BaseURL, then those of Endpoints; each trimmed of
// spaces and of trailing "/", empty ones and duplicates dropped.
func (c *Client) endpoints() []string {
	if len(c.Endpoints) == 0 && !strings.Contains(c.BaseURL, ",") {
		if u := strings.TrimRight(strings.TrimSpace(c.BaseURL), "/"); u != "" {
			return []string{u}
		}
		return nil
	}
	var out []string
	add := func(list string) {
		for _, u := range strings.Split(list, ",") {
			u = strings.TrimRight(strings.TrimSpace(u), "/")
			if u != "" && !slices.Contains(out, u) {
				out = append(out, u)
			}
		}
	}
	add(c.BaseURL)
	for _, e := range c.Endpoints {
		add(e)
	}
	return out
}

// first is the index in eps of the endpoint a call starts at.
func (c *Client) first(eps []string) int {
	c.mu.Lock()
	p := c.preferred
	c.mu.Unlock()
	for i, e := range eps {
		if e == p {
			return i
		}
	}
	return 0
}

// headerForwardedTo is set by a follower replica on an answer it relayed from
// the leader, naming the leader's URL.
const headerForwardedTo = "X-Rsc-Forwarded-To"

// answered makes ep the preferred endpoint: it just answered a call. When ep is
// a follower that relayed the answer from a leader this Client also knows
// (forwardedTo is one of its endpoints), the leader is preferred instead, so
// later calls skip the extra hop.
func (c *Client) answered(ep, forwardedTo string) {
	if forwardedTo = strings.TrimRight(forwardedTo, "/"); forwardedTo != "" && slices.Contains(c.endpoints(), forwardedTo) {
		ep = forwardedTo
	}
	c.mu.Lock()
	c.preferred = ep
	c.mu.Unlock()
}

// failed moves the preference from ep to next, unless another call has
// already moved it (a concurrent success elsewhere wins over a stale failure).
func (c *Client) failed(eps []string, ep, next string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.preferred
	if !slices.Contains(eps, cur) {
		cur = eps[0]
	}
	if cur == ep {
		c.preferred = next
	}
}

// progress records, through httptrace, how far one attempt got. The flags are
// set from the transport's goroutines, hence atomic.
type progress struct {
	traced   atomic.Bool // the transport reports progress at all (GetConn fired)
	wrote    atomic.Bool // the whole request was written to a connection
	answered atomic.Bool // a byte of the answer arrived
}

func (p *progress) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GetConn: func(string) { p.traced.Store(true) },
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				p.wrote.Store(true)
			}
		},
		GotFirstResponseByte: func() { p.answered.Store(true) },
	}
}

// failover reports whether a transport error lets the call go on to the next
// endpoint. A request that never fully reached the replica (refused or
// timed-out connect, unknown host, TLS failure, reset while writing) cannot
// have been processed: any call moves on. A request that was written but got
// no answer (reset, EOF, timeout awaiting headers) may have been processed:
// only a replayable call (a read, a heartbeat, a login) moves on, so an admin
// mutation is never sent twice.
func (p *progress) failover(err error, replayable bool) bool {
	if p.answered.Load() {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	if p.traced.Load() && !p.wrote.Load() {
		return true
	}
	return replayable
}

// endpointsError is what a call returns when it tried several endpoints and
// none answered: it names each failure and unwraps to the last one, so
// errors.Is and errors.As see what a single endpoint would have returned
// (an *APIError for a 503, a *url.Error for a transport failure).
type endpointsError struct {
	failures []string // "<endpoint>: <error>", in the order tried
	errs     []error  // the same errors
	last     error
}

func (e *endpointsError) Error() string {
	return fmt.Sprintf("%d coordinator endpoints failed: %s", len(e.failures), strings.Join(e.failures, "; "))
}

func (e *endpointsError) Unwrap() error { return e.last }
