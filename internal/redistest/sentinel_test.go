package redistest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/internal/redisurl"
)

// A Sentinel set fails over to its replica: a failover client follows it, and
// with the writes synced first nothing is lost; without, and the replica held
// up, what the primary acknowledged after the hold is gone.
func TestSentinelFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ss := redistest.StartSentinel(t, 2, 3)
	cfg, err := redisurl.Parse(ss.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := cfg.NewClient()
	defer rdb.Close()
	if err := rdb.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	first := ss.Primary(t)
	second := ss.KillPrimary(t, true)
	if second == first {
		t.Fatalf("the primary is still %s", first.Addr())
	}
	if got := eventually(ctx, t, func() (string, error) { return rdb.Get(ctx, "k").Result() }); got != "before" {
		t.Fatalf("after a synced failover k = %q, want before", got)
	}
	ss.Restart(t, first)

	// Hold up every replica's link, write, crash the primary: gone.
	replicas := ss.Replicas(t)
	redistest.HoldUpReplicas(t, second, replicas...)
	if err := rdb.Set(ctx, "lost", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}
	third := ss.KillPrimary(t, false, replicas...)
	if third == second {
		t.Fatalf("the primary is still %s", second.Addr())
	}
	eventually(ctx, t, func() (string, error) { return rdb.Get(ctx, "k").Result() })
	if err := rdb.Get(ctx, "lost").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET lost after an unsynced failover with the replicas held up = %v, want nil (lost)", err)
	}
}

// eventually retries f until it succeeds (the client reconnecting to the new
// primary) and returns its value.
func eventually(ctx context.Context, t *testing.T, f func() (string, error)) string {
	t.Helper()
	for {
		v, err := f()
		if err == nil {
			return v
		}
		select {
		case <-ctx.Done():
			t.Fatalf("still failing when the deadline passed: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// A TLS-only server answers a client that trusts its CA and presents a
// certificate, and refuses one that trusts another CA.
func TestProcessTLS(t *testing.T) {
	ctx := context.Background()
	certs := redistest.NewTLSCerts(t)
	s := redistest.StartProcess(t, redistest.WithTLS(certs, true))
	if err := s.Client(t).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS: %v", err)
	}
	other := redistest.NewTLSCerts(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: other.ClientConfig(), MaxRetries: -1})
	defer c.Close()
	if err := c.Ping(ctx).Err(); err == nil || redisurl.TLSFailure(err) == "" {
		t.Fatalf("PING with another CA = %v, want a TLS failure", err)
	}
}
