package client_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/routing"
)

// The coordinator binary and the SDK on a Sentinel set (a primary, a replica,
// three sentinels), all through the same redis+sentinel:// URL: the primary
// is killed in the middle of a scale-out and again in the middle of a scale-in
// while producers publish and members consume; the coordinator and the SDK
// follow the new primary, both reshardings complete, the removed shards are
// retired, and every message a publish acknowledged is consumed.
//
// Each kill waits for the replica to have everything the primary wrote
// (redistest.SentinelSet.KillPrimary with sync): Redis replicates
// asynchronously, and what a primary acknowledged just before it crashed can
// be lost with it (the coordinator's own log can wait for replicas:
// --log-replicas, tested in cmd/coordinator).
func TestIntegrationSentinelFailoverMidResharding(t *testing.T) {
	skipShort(t)
	ss := redistest.StartSentinel(t, 1, 3)
	kv, err := client.NewRedis(ss.URL(), client.RedisTLS{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kv.Close() })
	rdb, ok := kv.(*redis.Client)
	if !ok {
		t.Fatalf("NewRedis(%s) = %T, want the failover *redis.Client", ss.URL(), kv)
	}
	c := bootCluster(t, ss.URL(), kv)
	ctx := context.Background()
	const prefix, group, consumed = "orders", "billing", "test:consumed"
	c.createGroup(prefix, group, 4)
	members, err := member.Start(ctx, member.Config{
		Coordinator: c.Member(), Redis: kv, StreamPrefix: prefix, ConsumerGroup: group,
		MemberIDBase: "m", Concurrency: 2, MemberLease: 2500 * time.Millisecond,
		Block: 100 * time.Millisecond, ClaimMinIdle: time.Second, RetryBackoff: 200 * time.Millisecond,
	}, recordingHandler(rdb, consumed, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer members.Close()
	p, err := producer.New(producer.Config{Coordinator: c.Reader(), Redis: kv, StreamPrefix: prefix, ConsumerGroup: group,
		EventIDField: "eventId", RefreshInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	load := startLoad(t, p, 5, 20*time.Millisecond)
	c.waitStable(prefix, group, "m-m0", "m-m1")

	for _, step := range []struct{ from, to int }{{4, 8}, {8, 3}} {
		old := ss.Primary(t)
		m, err := c.Admin.Scale(ctx, prefix, group, step.to, "test", fmt.Sprintf("%d -> %d across a failover", step.from, step.to))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Refresh(ctx); err != nil {
			t.Log(err)
		}
		promoted := ss.KillPrimary(t, true)
		t.Logf("%d -> %d: primary %s killed mid-resharding, %s promoted", step.from, step.to, old.Addr(), promoted.Addr())
		c.waitFor(60*time.Second, fmt.Sprintf("resharding %s (%d -> %d) DEPRECATED after the failover", m.ReshardingID, step.from, step.to), func() bool {
			got, err := c.Admin.Migration(ctx, prefix, group, m.ReshardingID)
			return err == nil && got.State == "DEPRECATED"
		})
		for i := step.to; i < step.from; i++ {
			key := routing.StreamKey(prefix, i)
			c.waitFor(20*time.Second, key+" retired", func() bool {
				n, err := kv.Exists(ctx, key).Result()
				return err == nil && n == 0
			})
		}
		c.waitStable(prefix, group, "m-m0", "m-m1")
		// The next kill needs a replica: the old primary comes back as one.
		ss.Restart(t, old)
	}

	time.Sleep(300 * time.Millisecond)
	ids, errs := load.halt()
	if len(errs) > 0 {
		// Publishes in flight at a kill fail (and are not in ids); the
		// producer goes on with the new primary.
		t.Logf("%d publish batches failed around the failovers, first: %v", len(errs), errs[0])
	}
	if len(ids) == 0 {
		t.Fatal("nothing was published")
	}
	c.waitFor(60*time.Second, "every acknowledged message consumed", func() bool {
		return len(missing(t, rdb, consumed, ids)) == 0
	})
	c.waitFor(20*time.Second, "nothing pending", func() bool {
		for i := 0; i < 3; i++ {
			if n, _ := c.pendingOn(routing.StreamKey(prefix, i), group); n != 0 {
				return false
			}
		}
		return true
	})
	t.Logf("published %d messages across two failovers; members %+v", len(ids), members.Stats())
}

// client.NewRedis reads rediss:// with the TLS files as the coordinator's
// --redis-tls-* do: a client certificate for a server that requires one, and
// a clear error for a CA that did not sign the server's certificate.
func TestIntegrationNewRedisTLS(t *testing.T) {
	ctx := context.Background()
	certs := redistest.NewTLSCerts(t)
	rs := redistest.StartProcess(t, redistest.WithTLS(certs, true))
	kv, err := client.NewRedis(rs.URL(), client.RedisTLS{CA: certs.CA, Cert: certs.ClientCert, Key: certs.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	if err := kv.XAdd(ctx, &redis.XAddArgs{Stream: "tls:0", Values: []any{"k", "v"}}).Err(); err != nil {
		t.Fatalf("XADD over TLS: %v", err)
	}
	other := redistest.NewTLSCerts(t)
	bad, err := client.NewRedis(rs.URL()+"?max_retries=-1", client.RedisTLS{CA: other.CA, Cert: certs.ClientCert, Key: certs.ClientKey})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if err := bad.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "unknown authority") {
		t.Fatalf("PING with another CA: %v, want x509: certificate signed by unknown authority", err)
	}
	if _, err := client.NewRedis(strings.Replace(rs.URL(), "rediss://", "redis://", 1), client.RedisTLS{CA: certs.CA}); err == nil || !strings.Contains(err.Error(), "not rediss://") {
		t.Fatalf("TLS files with redis://: %v, want refused", err)
	}
}
