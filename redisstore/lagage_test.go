package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/redisstore"
)

// TestEntryAge: an entry's age is the clock minus its id's milliseconds,
// never negative, whatever the sequence part says.
func TestEntryAge(t *testing.T) {
	cases := []struct {
		name  string
		now   int64
		id    string
		want  time.Duration
		valid bool
	}{
		{"3 s old", 10_000, "7000-0", 3 * time.Second, true},
		{"the sequence does not count", 10_000, "7000-99", 3 * time.Second, true},
		{"to the millisecond", 10_000, "9999-0", time.Millisecond, true},
		{"this millisecond", 10_000, "10000-0", 0, true},
		{"ahead of the clock: 0, not negative", 10_000, "10001-0", 0, true},
		{"the greatest id", 10_000, "18446744073709551615-18446744073709551615", 0, true},
		{"the first id", 10_000, "0-1", 10 * time.Second, true},
		{"no sequence", 10_000, "7000", 0, false},
		{"not an id", 10_000, "x-0", 0, false},
		{"empty", 10_000, "", 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := redisstore.EntryAge(tc.now, tc.id)
			if got != tc.want || ok != tc.valid {
				t.Fatalf("EntryAge(%d, %q) = %v, %v; want %v, %v", tc.now, tc.id, got, ok, tc.want, tc.valid)
			}
		})
	}
}

// TestIntegrationOffsetsLagAge: the lag in time of shard streams whose
// entries have ids set explicitly (XADD key <ms>-0), so that each age is
// exact against the Redis clock the read reports: the oldest entry not
// delivered to the group and the oldest pending one, a lag Redis cannot count
// (after XDEL) that is still known in time, nothing waiting (0), an id ahead
// of Redis's clock (0, never negative), and no group or no stream (unknown).
func TestIntegrationOffsetsLagAge(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)
	sh := redisstore.NewShards(rdb)
	prefix := uniqueKey("lagage")
	const group = "g"
	MustProvision(t, sh, prefix, group, 0, 4)
	key := func(i int) string { return fmt.Sprintf("%s:%d", prefix, i) }
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	t0 := now.UnixMilli()
	add := func(k string, ms int64) string {
		t.Helper()
		id := fmt.Sprintf("%d-0", ms)
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k, ID: id, Values: []any{"k", "v"}}).Err(); err != nil {
			t.Fatalf("XADD %s %s: %v", k, id, err)
		}
		return id
	}
	// Shard 0: three entries 7, 3 and 1 s old; the group reads the first and
	// does not acknowledge it.
	a, b, c := add(key(0), t0-7000), add(key(0), t0-3000), add(key(0), t0-1000)
	if err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c", Streams: []string{key(0), ">"}, Count: 1, Block: -1}).Err(); err != nil {
		t.Fatal(err)
	}
	// Shard 1 stays empty. Shard 2: read and acknowledged. Shard 3: an entry
	// a minute ahead of Redis's clock. Shard 4: entries and no group.
	add(key(2), t0-5000)
	MustConsume(t, rdb, key(2), group, true)
	future := add(key(3), t0+60_000)
	add(key(4), t0-2000)

	read := func() []redisstore.Offset {
		t.Helper()
		offs, err := sh.Offsets(ctx, prefix, group, []int{0, 1, 2, 3, 4, 5})
		if err != nil {
			t.Fatal(err)
		}
		return offs
	}
	age := func(o redisstore.Offset, ms int64) time.Duration {
		return time.Duration(o.RedisTimeMs-ms) * time.Millisecond
	}
	type ages struct {
		lag, pending     time.Duration
		known            bool
		undelivered, old string
	}
	check := func(o redisstore.Offset, want ages) {
		t.Helper()
		lag, ok1 := o.LagAge()
		pending, ok2 := o.OldestPendingAge()
		if ok1 != want.known || ok2 != want.known || lag != want.lag || pending != want.pending {
			t.Errorf("%s: lag age %v (%v), oldest pending age %v (%v); want %v, %v (%v)", o.StreamKey, lag, ok1, pending, ok2, want.lag, want.pending, want.known)
		}
		if o.OldestUndeliveredID != want.undelivered || o.OldestPendingID != want.old {
			t.Errorf("%s: oldest undelivered %q, oldest pending %q; want %q, %q", o.StreamKey, o.OldestUndeliveredID, o.OldestPendingID, want.undelivered, want.old)
		}
	}

	before := time.Now()
	offs := read()
	after := time.Now()
	for _, o := range offs[:5] {
		// Redis's clock, read in the same call: this host's, give or take
		// the round trip.
		if o.RedisTimeMs < t0 || o.RedisTimeMs < before.UnixMilli()-1000 || o.RedisTimeMs > after.UnixMilli()+1000 {
			t.Fatalf("%s: Redis time %d, want about %d..%d", o.StreamKey, o.RedisTimeMs, before.UnixMilli(), after.UnixMilli())
		}
	}
	s0 := offs[0]
	check(s0, ages{lag: age(s0, t0-3000), pending: age(s0, t0-7000), known: true, undelivered: b, old: a})
	if s0.Lag == nil || *s0.Lag != 2 || s0.Pending != 1 {
		t.Errorf("shard 0: lag %v, pending %d; want 2 and 1", s0.Lag, s0.Pending)
	}
	check(offs[1], ages{known: true})
	check(offs[2], ages{known: true})
	check(offs[3], ages{known: true, undelivered: future}) // ahead of the clock: 0
	check(offs[4], ages{})                                 // no group
	if !offs[4].Exists || offs[5].Exists {
		t.Fatalf("existence: shard 4 %v, shard 5 %v", offs[4].Exists, offs[5].Exists)
	}
	check(offs[5], ages{}) // no stream

	// Deleting an entry the group has not read makes Redis's lag count
	// unknown (null); its lag in time is still exact, now the next entry's.
	if err := rdb.XDel(ctx, key(0), b).Err(); err != nil {
		t.Fatal(err)
	}
	s0 = read()[0]
	if s0.Lag != nil {
		t.Errorf("shard 0 after XDEL: lag %d, want unknown (null)", *s0.Lag)
	}
	check(s0, ages{lag: age(s0, t0-1000), pending: age(s0, t0-7000), known: true, undelivered: c, old: a})

	// Read to the end and acknowledge everything: nothing waits, and the
	// count is known again.
	MustConsume(t, rdb, key(0), group, false)
	if err := rdb.XAck(ctx, key(0), group, a, c).Err(); err != nil {
		t.Fatal(err)
	}
	s0 = read()[0]
	check(s0, ages{known: true})
	if s0.Lag == nil || *s0.Lag != 0 || s0.Pending != 0 {
		t.Errorf("shard 0 read and acknowledged: lag %v, pending %d; want 0 and 0", s0.Lag, s0.Pending)
	}
}
