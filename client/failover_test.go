package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rscoord/rsc/client"
)

// The failover tests stand httptest servers in for coordinator replicas.

// replica is a fake coordinator replica that counts the requests it got.
type replica struct {
	*httptest.Server
	hits atomic.Int64
}

// MustReplica starts a replica answering with h; it stops with the test.
func MustReplica(tb testing.TB, h http.HandlerFunc) *replica {
	tb.Helper()
	r := &replica{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.hits.Add(1)
		h(w, req)
	}))
	tb.Cleanup(r.Close)
	return r
}

// answer answers every request with status and a JSON body.
func answer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}
}

const (
	routingBody     = `{"streamPrefix":"p","consumerGroup":"g","metadataVersion":7,"shardCount":2}`
	heartbeatBody   = `{"status":"OK","memberId":"m1","memberEpoch":3}`
	groupBody       = `{"streamPrefix":"p","consumerGroup":"g","shardCount":2}`
	unavailableBody = `{"status":"ERROR","errorCode":"COORDINATOR_UNAVAILABLE","message":"not ready"}`
)

// live answers like a healthy replica: routing, heartbeats (checking the body
// arrived whole) and group creation.
func live(tb testing.TB) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/producer-routing"):
			answer(http.StatusOK, routingBody)(w, r)
		case strings.HasSuffix(r.URL.Path, "/heartbeat"):
			var hb client.HeartbeatRequest
			if err := json.NewDecoder(r.Body).Decode(&hb); err != nil || hb.MemberID != "m1" {
				tb.Errorf("heartbeat body: %+v, %v", hb, err)
			}
			answer(http.StatusOK, heartbeatBody)(w, r)
		default:
			answer(http.StatusCreated, groupBody)(w, r)
		}
	}
}

// resetAfterRequest reads the whole request, then drops the connection
// without answering: the request may have been processed.
func resetAfterRequest(tb testing.TB) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			tb.Errorf("hijack: %v", err)
			return
		}
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, not FIN
		}
		_ = conn.Close()
	}
}

// closedURL is the URL of a port nothing listens on (connection refused).
func closedURL(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	u := "http://" + l.Addr().String()
	_ = l.Close()
	return u
}

// call is one SDK call through a Client.
type call struct {
	name string
	do   func(ctx context.Context, c *client.Client) error
}

var (
	routingCall = call{"producer routing", func(ctx context.Context, c *client.Client) error {
		r, err := c.ProducerRouting(ctx, "p", "g")
		if err == nil && r.MetadataVersion != 7 {
			return errors.New("wrong routing decoded")
		}
		return err
	}}
	heartbeatCall = call{"heartbeat", func(ctx context.Context, c *client.Client) error {
		r, err := c.Heartbeat(ctx, "p", "g", &client.HeartbeatRequest{ProtocolVersion: new(1), MemberID: "m1"})
		if err == nil && r.MemberEpoch != 3 {
			return errors.New("wrong heartbeat answer decoded")
		}
		return err
	}}
	createGroupCall = call{"create group", func(ctx context.Context, c *client.Client) error {
		_, err := c.CreateGroup(ctx, "p", "g", 2, "test")
		return err
	}}
	adminPostCall = call{"Do POST", func(ctx context.Context, c *client.Client) error {
		return c.Do(ctx, http.MethodPost, client.GroupPath("p", "g")+"/scale", map[string]any{"targetShardCount": 4}, nil)
	}}
)

func TestFailoverConnectionRefusedThenLive(t *testing.T) {
	for _, tc := range []call{routingCall, heartbeatCall, createGroupCall, adminPostCall} {
		t.Run(tc.name, func(t *testing.T) {
			up := MustReplica(t, live(t))
			c := client.New(closedURL(t)+","+up.URL, nil)
			if err := tc.do(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			if got := up.hits.Load(); got != 1 {
				t.Fatalf("live replica hits = %d, want 1", got)
			}
		})
	}
}

func TestFailover503ThenLive(t *testing.T) {
	for _, tc := range []call{routingCall, heartbeatCall, createGroupCall, adminPostCall} {
		t.Run(tc.name, func(t *testing.T) {
			down := MustReplica(t, answer(http.StatusServiceUnavailable, unavailableBody))
			up := MustReplica(t, live(t))
			c := client.NewEndpoints([]string{down.URL, up.URL}, client.BearerToken("tok"))
			if err := tc.do(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			if d, u := down.hits.Load(), up.hits.Load(); d != 1 || u != 1 {
				t.Fatalf("hits: 503 replica %d, live replica %d; want 1, 1", d, u)
			}
		})
	}
}

func TestFailoverSticksToTheEndpointThatLastAnswered(t *testing.T) {
	var aStatus atomic.Int64
	aStatus.Store(http.StatusServiceUnavailable)
	a := MustReplica(t, func(w http.ResponseWriter, r *http.Request) {
		if s := int(aStatus.Load()); s != http.StatusOK {
			answer(s, unavailableBody)(w, r)
			return
		}
		live(t)(w, r)
	})
	b := MustReplica(t, live(t))
	c := client.New(a.URL+","+b.URL, nil)
	ctx := context.Background()
	want := func(step string, wantA, wantB int64) {
		t.Helper()
		if ga, gb := a.hits.Load(), b.hits.Load(); ga != wantA || gb != wantB {
			t.Fatalf("%s: hits a=%d b=%d, want a=%d b=%d", step, ga, gb, wantA, wantB)
		}
	}

	for i := 0; i < 3; i++ {
		if err := heartbeatCall.do(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	want("a answers 503: the first call fails over to b, the next go straight to b", 1, 3)

	aStatus.Store(http.StatusOK)
	b.Close()
	for i := 0; i < 3; i++ {
		if err := routingCall.do(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	want("b died, a recovered: one refused dial to b, then a only", 4, 3)
}

func TestFailoverAllEndpointsDown(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		u1, u2 := closedURL(t), closedURL(t)
		err := routingCall.do(context.Background(), client.New(u1+","+u2, nil))
		if err == nil {
			t.Fatal("no error")
		}
		var uerr *url.Error
		if !errors.As(err, &uerr) || !strings.HasPrefix(uerr.URL, u2) {
			t.Fatalf("want the last endpoint's *url.Error, got %v", err)
		}
		for _, s := range []string{"2 coordinator endpoints failed", u1 + ": ", u2 + ": ", "connection refused"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not contain %q", err, s)
			}
		}
	})
	t.Run("503 everywhere", func(t *testing.T) {
		r1 := MustReplica(t, answer(http.StatusServiceUnavailable, unavailableBody))
		r2 := MustReplica(t, answer(http.StatusServiceUnavailable, unavailableBody))
		err := adminPostCall.do(context.Background(), client.New(r1.URL+","+r2.URL, nil))
		if !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("want ErrUnavailable, got %v", err)
		}
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || apiErr.ErrorCode != "COORDINATOR_UNAVAILABLE" {
			t.Fatalf("want the *APIError of the 503, got %v", err)
		}
		if h1, h2 := r1.hits.Load(), r2.hits.Load(); h1 != 1 || h2 != 1 {
			t.Fatalf("hits %d, %d: want each endpoint tried once", h1, h2)
		}
	})
}

func TestNoFailoverOnOtherAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		is     error
	}{
		{"400 invalid", http.StatusBadRequest, `{"errorCode":"INVALID_REQUEST","message":"bad shard count"}`, nil},
		{"404 group not found", http.StatusNotFound, `{"errorCode":"GROUP_NOT_FOUND","message":"no such group"}`, client.ErrGroupNotFound},
		{"401 unauthorized", http.StatusUnauthorized, `{"errorCode":"UNAUTHORIZED"}`, client.ErrUnauthorized},
		{"409 conflict", http.StatusConflict, `{"errorCode":"CONFLICT"}`, nil},
		{"500 internal", http.StatusInternalServerError, `{"errorCode":"INTERNAL"}`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := MustReplica(t, answer(tc.status, tc.body))
			second := MustReplica(t, live(t))
			c := client.New(first.URL+","+second.URL, nil)
			for i := 0; i < 2; i++ {
				err := routingCall.do(context.Background(), c)
				var apiErr *client.APIError
				if !errors.As(err, &apiErr) || apiErr.StatusCode != tc.status {
					t.Fatalf("want *APIError %d, got %v", tc.status, err)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Fatalf("errors.Is(%v, %v) = false", err, tc.is)
				}
				if strings.Contains(err.Error(), "endpoints failed") {
					t.Fatalf("an answer came back wrapped as a failover: %v", err)
				}
			}
			if got := second.hits.Load(); got != 0 {
				t.Fatalf("second endpoint got %d calls, want 0", got)
			}
			if got := first.hits.Load(); got != 2 {
				t.Fatalf("first endpoint got %d calls, want 2 (it answered, so it stays preferred)", got)
			}
		})
	}
}

// A request that was sent but got no answer may have been processed: only
// calls that are harmless to repeat go on to the next endpoint.
func TestFailoverAfterALostAnswerOnlyWhenRepeatable(t *testing.T) {
	for _, tc := range []struct {
		call     call
		failover bool
	}{
		{routingCall, true},
		{heartbeatCall, true},
		{createGroupCall, false},
		{adminPostCall, false},
	} {
		t.Run(tc.call.name, func(t *testing.T) {
			lost := MustReplica(t, resetAfterRequest(t))
			up := MustReplica(t, live(t))
			err := tc.call.do(context.Background(), client.New(lost.URL+","+up.URL, nil))
			if tc.failover && err != nil {
				t.Fatal(err)
			}
			if !tc.failover && err == nil {
				t.Fatal("an admin mutation was sent again after a lost answer")
			}
			wantUp := int64(0)
			if tc.failover {
				wantUp = 1
			}
			if l, u := lost.hits.Load(), up.hits.Load(); l != 1 || u != wantUp {
				t.Fatalf("hits: lost-answer replica %d, live replica %d; want 1, %d", l, u, wantUp)
			}
		})
	}
}

// A replica whose host drops packets never completes the connect. When the
// HTTPClient's timeout ends the attempt, even an admin mutation goes on to the
// next endpoint, as it was never sent; when the caller's ctx ends it, the call
// fails and the next call starts at the next endpoint.
func TestFailoverAfterAConnectTimeout(t *testing.T) {
	const blackhole = "blackhole.invalid:80"
	dialer := &net.Dialer{}
	transport := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == blackhole {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return dialer.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(transport.CloseIdleConnections)

	t.Run("client timeout", func(t *testing.T) {
		up := MustReplica(t, live(t))
		hc := &http.Client{Timeout: 200 * time.Millisecond, Transport: transport}
		c := &client.Client{Endpoints: []string{"http://" + blackhole, up.URL}, HTTPClient: hc}
		if err := adminPostCall.do(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		if got := up.hits.Load(); got != 1 {
			t.Fatalf("live replica hits = %d, want 1", got)
		}
	})
	t.Run("caller's deadline", func(t *testing.T) {
		up := MustReplica(t, live(t))
		c := &client.Client{Endpoints: []string{"http://" + blackhole, up.URL}, HTTPClient: &http.Client{Transport: transport}}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := heartbeatCall.do(ctx, c); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want context.DeadlineExceeded, got %v", err)
		}
		ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second) // bounds a regression, not a measurement
		defer cancel2()
		if err := heartbeatCall.do(ctx2, c); err != nil {
			t.Fatal(err)
		}
		if got := up.hits.Load(); got != 1 {
			t.Fatalf("live replica hits = %d, want 1", got)
		}
	})
}

func TestFailoverStopsWhenTheContextEnds(t *testing.T) {
	t.Run("deadline while awaiting an answer", func(t *testing.T) {
		slow := MustReplica(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
		up := MustReplica(t, live(t))
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err := routingCall.do(ctx, client.New(slow.URL+","+up.URL, nil))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want context.DeadlineExceeded, got %v", err)
		}
		if got := up.hits.Load(); got != 0 {
			t.Fatalf("next endpoint got %d calls after the context ended", got)
		}
	})
	t.Run("cancelled before the call", func(t *testing.T) {
		a, b := MustReplica(t, live(t)), MustReplica(t, live(t))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := heartbeatCall.do(ctx, client.New(a.URL+","+b.URL, nil)); !errors.Is(err, context.Canceled) {
			t.Fatalf("want context.Canceled, got %v", err)
		}
		if ha, hb := a.hits.Load(), b.hits.Load(); ha+hb != 0 {
			t.Fatalf("hits %d, %d after a cancelled context", ha, hb)
		}
	})
}

func TestEndpointsConfiguration(t *testing.T) {
	var mu sync.Mutex
	var order []string
	unavailable := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			answer(http.StatusServiceUnavailable, unavailableBody)(w, r)
		}
	}
	a, b, c := MustReplica(t, unavailable("a")), MustReplica(t, unavailable("b")), MustReplica(t, unavailable("c"))
	for _, tc := range []struct {
		name  string
		coord *client.Client
		want  string
	}{
		{"comma list with spaces and slashes", client.New(" "+a.URL+"/ , "+b.URL+",,"+c.URL+"/", nil), "a b c"},
		{"BaseURL then Endpoints, duplicates dropped", &client.Client{BaseURL: b.URL, Endpoints: []string{a.URL, b.URL + "/", c.URL}}, "b a c"},
		{"NewEndpoints", client.NewEndpoints([]string{c.URL, a.URL}, nil), "c a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			order = nil
			mu.Unlock()
			err := routingCall.do(context.Background(), tc.coord)
			if !errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("want ErrUnavailable, got %v", err)
			}
			mu.Lock()
			got := strings.Join(order, " ")
			mu.Unlock()
			if got != tc.want {
				t.Fatalf("tried %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("no endpoint", func(t *testing.T) {
		err := routingCall.do(context.Background(), &client.Client{BaseURL: " , "})
		if err == nil || !strings.Contains(err.Error(), "no endpoint") {
			t.Fatalf("want a missing endpoint error, got %v", err)
		}
	})
}

// One URL behaves as before the replicas: no failover wrapping, the same
// error values.
func TestSingleBaseURLUnchanged(t *testing.T) {
	t.Run("503 is returned as is", func(t *testing.T) {
		r := MustReplica(t, answer(http.StatusServiceUnavailable, unavailableBody))
		c := &client.Client{BaseURL: r.URL + "/"}
		err := c.Do(context.Background(), http.MethodGet, client.GroupPath("p", "g"), nil, nil)
		apiErr, ok := err.(*client.APIError)
		if !ok || apiErr.StatusCode != 503 || apiErr.Path != client.GroupPath("p", "g") {
			t.Fatalf("want a bare *APIError 503, got %T %v", err, err)
		}
		if got := r.hits.Load(); got != 1 {
			t.Fatalf("hits = %d, want 1", got)
		}
	})
	t.Run("connection refused is a bare *url.Error", func(t *testing.T) {
		err := client.New(closedURL(t), nil).Do(context.Background(), http.MethodGet, "/coord/v1/x", nil, nil)
		if _, ok := err.(*url.Error); !ok {
			t.Fatalf("want *url.Error, got %T %v", err, err)
		}
	})
	t.Run("answers", func(t *testing.T) {
		r := MustReplica(t, live(t))
		c := client.New(r.URL+"/", nil)
		for _, tc := range []call{routingCall, heartbeatCall, createGroupCall} {
			if err := tc.do(context.Background(), c); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
	})
}

// A call that fails over late must not move the preference away from the
// endpoint another call found working in the meantime.
func TestFailoverAStaleFailureKeepsAnotherCallsChoice(t *testing.T) {
	arrived := make(chan struct{})
	var first atomic.Bool
	a := MustReplica(t, func(w http.ResponseWriter, r *http.Request) {
		if first.CompareAndSwap(false, true) {
			close(arrived)
			<-r.Context().Done() // x's call: no answer until x gives up
			return
		}
		answer(http.StatusServiceUnavailable, unavailableBody)(w, r)
	})
	b := MustReplica(t, answer(http.StatusServiceUnavailable, unavailableBody))
	c := MustReplica(t, live(t))
	coord := client.New(a.URL+","+b.URL+","+c.URL, nil)

	xctx, cancelX := context.WithCancel(context.Background())
	xdone := make(chan error, 1)
	go func() { xdone <- routingCall.do(xctx, coord) }()
	<-arrived
	if err := routingCall.do(context.Background(), coord); err != nil { // y: a, b, then c answers
		t.Fatal(err)
	}
	cancelX() // x's attempt at a fails now, after y settled on c
	if err := <-xdone; !errors.Is(err, context.Canceled) {
		t.Fatalf("x: want context.Canceled, got %v", err)
	}
	bHits := b.hits.Load()
	if err := routingCall.do(context.Background(), coord); err != nil {
		t.Fatal(err)
	}
	if got := b.hits.Load(); got != bHits {
		t.Fatalf("the next call tried b: x's late failure at a overrode y's choice of c")
	}
}

func TestFailoverConcurrentCalls(t *testing.T) {
	down := MustReplica(t, answer(http.StatusServiceUnavailable, unavailableBody))
	up := MustReplica(t, live(t))
	c := client.New(closedURL(t)+","+down.URL+","+up.URL, nil)
	const goroutines, calls = 16, 25
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*calls)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				tc := routingCall
				if i%2 == 1 {
					tc = heartbeatCall
				}
				if err := tc.do(context.Background(), c); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := up.hits.Load(); got != goroutines*calls {
		t.Fatalf("live replica hits = %d, want %d", got, goroutines*calls)
	}
	if got := down.hits.Load(); got > goroutines {
		t.Fatalf("503 replica hits = %d: calls kept trying it after the failover", got)
	}
}

// A follower replica relays the leader's answer and names it in
// X-Rsc-Forwarded-To: a Client that knows the leader goes there next.
func TestPrefersTheLeaderAFollowerForwardedTo(t *testing.T) {
	leader := MustReplica(t, answer(http.StatusOK, routingBody))
	follower := MustReplica(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Rsc-Forwarded-To", leader.URL+"/")
		answer(http.StatusOK, routingBody)(w, r)
	})
	ctx := context.Background()
	c := client.New(follower.URL+","+leader.URL, nil)
	for i := 0; i < 3; i++ {
		if _, err := c.ProducerRouting(ctx, "p", "g"); err != nil {
			t.Fatal(err)
		}
	}
	if follower.hits.Load() != 1 || leader.hits.Load() != 2 {
		t.Fatalf("hits: follower %d, leader %d; want the first call at the follower, the rest at the leader", follower.hits.Load(), leader.hits.Load())
	}
	// A leader this Client was not given stays unknown: it keeps the follower.
	only := client.New(follower.URL, nil)
	for i := 0; i < 2; i++ {
		if _, err := only.ProducerRouting(ctx, "p", "g"); err != nil {
			t.Fatal(err)
		}
	}
	if follower.hits.Load() != 3 {
		t.Fatalf("a follower-only Coordinator sent %d calls to the follower, want 3 in all", follower.hits.Load())
	}
}
