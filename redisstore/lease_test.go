package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/routing"
)

func TestSameSlotKey(t *testing.T) {
	cases := []struct{ key, want string }{
		{"coordinator:events", "{coordinator:events}:leader"},
		{"{rsc}:events", "{rsc}:events:leader"},
		{"a{b}c", "a{b}c:leader"},
		{"a{b}c}", "a{b}c}:leader"},
		{"open{only", "{open{only}:leader"},
		{"empty{}tag", ""}, // "{}" is no hash tag, and wrapping it makes one
		{"a}b", ""},
	}
	for _, c := range cases {
		t.Run(c.key, func(t *testing.T) {
			got, err := redisstore.SameSlotKey(c.key, "leader")
			if c.want == "" {
				if err == nil {
					t.Fatalf("SameSlotKey(%q) = %q, want an error", c.key, got)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("SameSlotKey(%q) = %q, %v, want %q", c.key, got, err, c.want)
			}
			if routing.Slot(got) != routing.Slot(c.key) {
				t.Fatalf("slot of %q is %d, of %q %d: a script cannot touch both on a cluster", got, routing.Slot(got), c.key, routing.Slot(c.key))
			}
		})
	}
}

func mustLease(tb testing.TB, rdb redis.UniversalClient, key, id, url string) *redisstore.Lease {
	tb.Helper()
	l, err := redisstore.NewLease(rdb, key, id, url)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

func mustAcquire(tb testing.TB, l *redisstore.Lease, ttl time.Duration) redisstore.LeaseInfo {
	tb.Helper()
	info, err := l.Acquire(context.Background(), ttl)
	if err != nil {
		tb.Fatal(err)
	}
	return info
}

func TestIntegrationLeaseTerms(t *testing.T) {
	_, rdb := MustStartRedis(t)
	ctx := context.Background()
	key := uniqueKey("test:lease")
	a := mustLease(t, rdb, key, "a", "http://a")
	b := mustLease(t, rdb, key, "b", "http://b")
	if a.Holder() == b.Holder() || mustLease(t, rdb, key, "a", "").Holder() == a.Holder() {
		t.Fatal("every process must be a distinct holder")
	}

	ia := mustAcquire(t, a, time.Minute)
	if !ia.Self || ia.Token != 1 || a.Token() != 1 || ia.URL != "http://a" {
		t.Fatalf("first acquire: %+v token %d", ia, a.Token())
	}
	ib := mustAcquire(t, b, time.Minute)
	if ib.Self || ib.Holder != a.Holder() || ib.URL != "http://a" || ib.Token != 1 || b.Token() != 0 {
		t.Fatalf("b must see a's term: %+v", ib)
	}
	if ok, err := b.Renew(ctx, time.Minute); err != nil || ok {
		t.Fatalf("b renews a term it never had: %v %v", ok, err)
	}
	if ok, err := a.Renew(ctx, time.Minute); err != nil || !ok {
		t.Fatalf("a renews its term: %v %v", ok, err)
	}
	// Acquire by the holder extends, keeping the token.
	if again := mustAcquire(t, a, time.Minute); !again.Self || again.Token != 1 {
		t.Fatalf("a re-acquires: %+v", again)
	}
	cur, err := b.Leader(ctx)
	if err != nil || cur.Holder != a.Holder() || cur.Self || cur.TTL <= 0 {
		t.Fatalf("Leader from b: %+v %v", cur, err)
	}

	// Release hands over at once; the next term has a larger token.
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if cur, _ := b.Leader(ctx); cur.Holder != "" {
		t.Fatalf("released lease still held: %+v", cur)
	}
	ib = mustAcquire(t, b, 300*time.Millisecond)
	if !ib.Self || ib.Token != 2 {
		t.Fatalf("b after release: %+v", ib)
	}
	// b stops renewing: its term expires by Redis's clock and a takes over.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ia = mustAcquire(t, a, time.Minute)
		if ia.Self {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a never took over an expired lease: %+v", ia)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ia.Token != 3 {
		t.Fatalf("third term token %d, want 3", ia.Token)
	}
	if ok, err := b.Renew(ctx, time.Minute); err != nil || ok || b.Token() != 0 {
		t.Fatalf("b renews after losing: %v %v token %d", ok, err, b.Token())
	}
}

// TestIntegrationFencedLog is the paused-leader case: a replica whose term is
// over cannot append, even at the right log position, and nothing of its batch
// lands; the new leader appends.
func TestIntegrationFencedLog(t *testing.T) {
	_, rdb := MustStartRedis(t)
	ctx := context.Background()
	key := uniqueKey("test:fenced")
	raw := redisstore.NewLog(rdb, key)
	a := mustLease(t, rdb, key, "a", "")
	b := mustLease(t, rdb, key, "b", "")
	la, lb := a.FencedLog(raw), b.FencedLog(raw)

	if _, err := la.Append(ctx, events.ZeroID, [][]byte{[]byte("x")}); !errors.Is(err, events.ErrFenced) {
		t.Fatalf("append without a term: %v, want ErrFenced", err)
	}
	mustAcquire(t, a, 200*time.Millisecond)
	ids := MustAppend(t, la, events.ZeroID, []byte("a1"), []byte("a2"))
	if _, err := la.Append(ctx, events.ZeroID, [][]byte{[]byte("stale")}); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("stale position under a running term: %v, want ErrConflict", err)
	}

	// a "pauses" past its lease; b takes over.
	var ib redisstore.LeaseInfo
	deadline := time.Now().Add(5 * time.Second)
	for ib = mustAcquire(t, b, time.Minute); !ib.Self; ib = mustAcquire(t, b, time.Minute) {
		if time.Now().After(deadline) {
			t.Fatal("b never took over")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// a still believes it leads (it holds its token) and appends at the right position.
	if a.Token() == 0 {
		t.Fatal("a forgot its token without being told")
	}
	if _, err := la.Append(ctx, ids[1], [][]byte{[]byte("a3"), []byte("a4")}); !errors.Is(err, events.ErrFenced) {
		t.Fatalf("deposed leader appended: %v", err)
	}
	MustAppend(t, lb, ids[1], []byte("b1"))
	got := MustRead(t, raw, events.ZeroID)
	var data []string
	for _, e := range got {
		data = append(data, string(e.Data))
	}
	if len(data) != 3 || data[0] != "a1" || data[1] != "a2" || data[2] != "b1" {
		t.Fatalf("log = %v, want [a1 a2 b1]", data)
	}

	// An expired term with no successor is fenced too.
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := lb.Append(ctx, got[2].ID, [][]byte{[]byte("late")}); !errors.Is(err, events.ErrFenced) {
		t.Fatalf("append after release: %v, want ErrFenced", err)
	}
}
