package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/events/eventstest"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
)

// replTimeout is how long the tests let WAIT wait: long enough for a live
// replica on a loaded machine, short enough to make a held-up one quick.
const replTimeout = 2 * time.Second

// MustReplicated starts a primary with one replica whose link is up.
func MustReplicated(tb testing.TB) (primary, replica *redistest.Server) {
	tb.Helper()
	primary = redistest.StartProcess(tb, redistest.WithArgs("--repl-diskless-sync-delay", "0"))
	replica = redistest.StartProcess(tb, redistest.WithArgs("--replicaof", strings.Replace(primary.Addr(), ":", " ", 1)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc, pc := replica.Client(tb), primary.Client(tb)
	for {
		// Up on both sides: the primary counts a replica for WAIT once it
		// is online there.
		info, err := rc.Info(ctx, "replication").Result()
		pinfo, perr := pc.Info(ctx, "replication").Result()
		if err == nil && perr == nil && strings.Contains(info, "master_link_status:up") && strings.Contains(pinfo, "state=online") {
			return primary, replica
		}
		select {
		case <-ctx.Done():
			tb.Fatalf("replica %s never linked to %s: %v\n%s", replica.Addr(), primary.Addr(), err, info)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// With Replication, an append (plain, indexed, fenced) succeeds once the
// replica has it, and with the replica's link held up it is ErrNotReplicated:
// the entries are on the primary (a retry at the same position conflicts) but
// the replica has none of them.
func TestIntegrationLogWaitsForReplicas(t *testing.T) {
	ctx := context.Background()
	primary, replica := MustReplicated(t)
	rdb := primary.Client(t)
	key := uniqueKey("test:replicated")
	l := redisstore.NewLog(rdb, key)
	if err := l.SetReplication(redisstore.Replication{Replicas: 1, Timeout: replTimeout}); err != nil {
		t.Fatal(err)
	}
	ids := MustAppend(t, l, events.ZeroID, []byte("a"), []byte("b"))
	onReplica := func() int64 {
		n, err := replica.Client(t).XLen(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// WAIT returned: the replica has both, at once, without polling.
	if n := onReplica(); n != 2 {
		t.Fatalf("replica holds %d entries right after a waited append, want 2", n)
	}
	ix, err := l.AppendIndexed(ctx, ids[1], []events.Draft{{Data: []byte("c"), Index: "orders|g"}})
	if err != nil {
		t.Fatalf("indexed append: %v", err)
	}
	// Two replicas wanted, one connected: not enough, whatever it has.
	two := redisstore.NewLog(rdb, key)
	if err := two.SetReplication(redisstore.Replication{Replicas: 2, Timeout: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := two.Append(ctx, ix[0], [][]byte{[]byte("d")}); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("append wanting 2 replicas of 1: %v, want ErrNotReplicated", err)
	}
	last := eventstest.MustLastID(t, l)

	redistest.HoldUpReplicas(t, primary, replica)
	defer replica.Thaw(t)
	before := time.Now()
	_, err = l.Append(ctx, last, [][]byte{[]byte("held")})
	if !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("append with the replica held up: %v, want ErrNotReplicated", err)
	}
	if waited := time.Since(before); waited < replTimeout {
		t.Fatalf("the append failed after %v, before WAIT's %v", waited, replTimeout)
	}
	if _, err := l.Append(ctx, last, [][]byte{[]byte("again")}); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("retry at the same position: %v, want ErrConflict (the entry is on the primary)", err)
	}
	replica.Thaw(t)
	if n := onReplicaEventually(t, replica, key, 5); n != 5 {
		t.Fatalf("replica holds %d entries after it reconnected, want 5", n)
	}
}

func onReplicaEventually(t *testing.T, replica *redistest.Server, key string, want int64) int64 {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n, err := replica.Client(t).XLen(ctx, key).Result()
		if err == nil && n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The fenced append waits too, and so does a new lease term: a token only the
// old primary had would be issued again after a failover.
func TestIntegrationFencedLogAndLeaseWaitForReplicas(t *testing.T) {
	ctx := context.Background()
	primary, replica := MustReplicated(t)
	rdb := primary.Client(t)
	key := uniqueKey("test:fenced-replicated")
	raw := redisstore.NewLog(rdb, key)
	r := redisstore.Replication{Replicas: 1, Timeout: replTimeout}
	if err := raw.SetReplication(r); err != nil {
		t.Fatal(err)
	}
	a := mustLease(t, rdb, key, "a", "")
	if err := a.SetReplication(r); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, a, time.Minute)
	fl := a.FencedLog(raw)
	ids := MustAppend(t, fl, events.ZeroID, []byte("a1"))
	if _, err := fl.(events.Indexed).AppendIndexed(ctx, ids[0], []events.Draft{{Data: []byte("a2"), Index: "orders|g"}}); err != nil {
		t.Fatalf("fenced indexed append: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}

	redistest.HoldUpReplicas(t, primary, replica)
	defer replica.Thaw(t)
	b := mustLease(t, rdb, key, "b", "")
	if err := b.SetReplication(r); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(ctx, time.Minute); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("acquire with the replica held up: %v, want ErrNotReplicated", err)
	}
	if b.Token() != 0 {
		t.Fatalf("b holds token %d of a term no replica has", b.Token())
	}
}

// On a Redis Cluster the WAIT runs on the master of the log's slot, the node
// that wrote: with one replica per master, every append is acknowledged.
func TestIntegrationLogWaitsForReplicasOnCluster(t *testing.T) {
	_, rdb := MustClusterClient(t, 3, 1)
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		l := redisstore.NewLog(rdb, uniqueKey("test:cluster-replicated:"+k))
		if err := l.SetReplication(redisstore.Replication{Replicas: 1, Timeout: 2 * time.Second}); err != nil {
			t.Fatal(err)
		}
		MustAppend(t, l, events.ZeroID, []byte("x"), []byte("y"))
	}
}

func TestReplicationCheck(t *testing.T) {
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: time.Second})
	defer single.Close()
	noTimeout := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -1})
	defer noTimeout.Close()
	def := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer def.Close()
	tests := []struct {
		name    string
		rdb     redis.UniversalClient
		r       redisstore.Replication
		wantErr string
	}{
		{name: "none", rdb: single},
		{name: "below the read timeout", rdb: single, r: redisstore.Replication{Replicas: 1, Timeout: 999 * time.Millisecond}},
		{name: "at the read timeout", rdb: single, r: redisstore.Replication{Replicas: 1, Timeout: time.Second}, wantErr: "below the Redis read timeout"},
		{name: "below go-redis's default read timeout", rdb: def, r: redisstore.Replication{Replicas: 1, Timeout: 4 * time.Second}},
		{name: "at go-redis's default read timeout", rdb: def, r: redisstore.Replication{Replicas: 1, Timeout: 5 * time.Second}, wantErr: "below the Redis read timeout"},
		{name: "no read timeout", rdb: noTimeout, r: redisstore.Replication{Replicas: 2, Timeout: time.Hour}},
		{name: "no WAIT timeout", rdb: single, r: redisstore.Replication{Replicas: 1}, wantErr: "timeout is needed"},
		{name: "a ring", rdb: redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), r: redisstore.Replication{Replicas: 1, Timeout: time.Millisecond}, wantErr: "not *redis.Ring"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.r.Check(tt.rdb)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Check = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// With a Replication, a trim removes entries only once the replicas have
// their archive copies: with the replica held up it archives on the primary,
// refuses to trim, and the log keeps every entry.
func TestIntegrationTrimWaitsForTheArchiveReplicas(t *testing.T) {
	ctx := context.Background()
	primary, replica := MustReplicated(t)
	l := redisstore.NewLog(primary.Client(t), uniqueKey("test:trim-replicated"))
	if err := l.SetReplication(redisstore.Replication{Replicas: 1, Timeout: replTimeout}); err != nil {
		t.Fatal(err)
	}
	ids := MustAppend(t, l, events.ZeroID, []byte("a"), []byte("b"), []byte("c"), []byte("d"))
	keepAll := func(events.Entry) bool { return true }
	if n, removed, err := l.TrimBefore(ctx, ids[1], keepAll); err != nil || n != 1 || removed != 1 {
		t.Fatalf("trim with the replica up: archived %d removed %d, %v; want 1 and 1", n, removed, err)
	}
	redistest.HoldUpReplicas(t, primary, replica)
	defer replica.Thaw(t)
	if _, removed, err := l.TrimBefore(ctx, ids[3], keepAll); !errors.Is(err, redisstore.ErrNotReplicated) || removed != 0 {
		t.Fatalf("trim with the replica held up: removed %d, %v; want 0 and ErrNotReplicated", removed, err)
	}
	if n, err := l.Len(ctx); err != nil || n != 3 {
		t.Fatalf("log holds %d entries (%v), want 3: nothing trimmed", n, err)
	}
}
