package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
)

// The drain proof on a removed shard whose stream has XDEL tombstones and was
// XTRIMmed: the cases where XINFO GROUPS's lag changed between Redis and
// Valkey versions (null, an estimate, or a number that ignores tombstones).
// Whatever the engine reports, the proof holds both ways: a shard with an
// entry its group has not read or not acknowledged is never drained, and a
// shard the group read and acknowledged to its end is drained, tombstones and
// trims notwithstanding. Each case logs what the engine said, for the matrix.
func TestIntegrationDrainProofWithTombstonesAndTrims(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.StartProcess(t).Client(t)
	sh := redisstore.NewShards(rdb)
	const group = "g"
	type step func(t *testing.T, key string, ids []string)
	xdel := func(which ...int) step {
		return func(t *testing.T, key string, ids []string) {
			for _, i := range which {
				if err := rdb.XDel(ctx, key, ids[i]).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	trimTo := func(n int64) step {
		return func(t *testing.T, key string, _ []string) {
			if err := rdb.XTrimMaxLen(ctx, key, n).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	minID := func(i int) step {
		return func(t *testing.T, key string, ids []string) {
			if err := rdb.XTrimMinID(ctx, key, ids[i]).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	read := func(n int64, ack bool) step {
		return func(t *testing.T, key string, _ []string) { consume(t, rdb, key, group, n, ack) }
	}
	ackAll := func(t *testing.T, key string, _ []string) {
		p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: key, Group: group, Start: "-", End: "+", Count: 1000}).Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range p {
			if err := rdb.XAck(ctx, key, group, e.ID).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	tests := []struct {
		name string
		// steps run on a provisioned shard holding 10 entries; drained is
		// what the proof must say after them.
		steps   []step
		drained bool
	}{
		{name: "nothing read", drained: false},
		{name: "half read, a tombstone ahead of the group", steps: []step{read(5, true), xdel(7)}, drained: false},
		{name: "half read, tombstones ahead, then everything read", steps: []step{read(5, true), xdel(6, 8), read(100, true)}, drained: true},
		{name: "half read, a tombstone behind the group", steps: []step{read(5, true), xdel(2)}, drained: false},
		{name: "half read, trimmed past the group (MAXLEN)", steps: []step{read(5, true), trimTo(3)}, drained: false},
		{name: "half read, trimmed past the group (MINID), then everything read", steps: []step{read(5, true), minID(8), read(100, true)}, drained: true},
		{name: "everything read, then tombstones and a trim", steps: []step{read(100, true), xdel(3, 9), trimTo(4)}, drained: true},
		{name: "everything read, the last entry deleted", steps: []step{read(100, true), xdel(9)}, drained: true},
		{name: "everything read, one pending entry deleted", steps: []step{read(9, true), read(100, false), xdel(9)}, drained: false},
		{name: "everything read, a pending deleted entry acknowledged", steps: []step{read(9, true), read(100, false), xdel(9), ackAll}, drained: true},
		// What the trim removed unread is gone: nothing is left to read.
		{name: "trimmed to nothing before the group read", steps: []step{trimTo(0)}, drained: true},
		{name: "trimmed to nothing, then read", steps: []step{trimTo(0), read(100, true)}, drained: true},
		{name: "the newest entries deleted before the group read them", steps: []step{read(7, true), xdel(7, 8, 9)}, drained: true},
		{name: "the newest entries deleted, one older unread left", steps: []step{read(6, true), xdel(7, 8, 9)}, drained: false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := fmt.Sprintf("%s-%d", uniqueKey("tomb"), i)
			MustProvision(t, sh, prefix, group, 0, 1)
			key := prefix + ":0"
			ids := MustXAdd(t, rdb, key, 10)
			for _, s := range tt.steps {
				s(t, key, ids)
			}
			raw := MustXInfoGroups(t, rdb, key)[group]
			d := MustDrain(t, sh, prefix, 0)
			g := groupDrain(t, d, group)
			t.Logf("%s: XINFO GROUPS lag %s entries-read %s pending %d; evidence lag %d pending %d drained %v",
				redistest.Engine(), show(raw.Lag), show(raw.EntriesRead), raw.Pending, g.Lag, g.Pending, projection.ShardDrained(d))
			if got := projection.ShardDrained(d); got != tt.drained {
				t.Fatalf("drained = %v, want %v (evidence %+v)", got, tt.drained, d)
			}
			// The monitoring offsets say lag 0 exactly when the group has
			// nothing left to read.
			offs, err := sh.Offsets(ctx, prefix, group, []int{0})
			if err != nil {
				t.Fatal(err)
			}
			if zero := offs[0].Lag != nil && *offs[0].Lag == 0; zero != (g.Lag == 0) {
				t.Fatalf("offsets lag %s, drain evidence lag %d", show(offs[0].Lag), g.Lag)
			}
			// Retirement deletes exactly what the proof calls drained.
			err = sh.Delete(ctx, []string{key})
			switch {
			case tt.drained && err != nil:
				t.Fatalf("Delete of a drained shard: %v", err)
			case !tt.drained && !errors.Is(err, redisstore.ErrNotDrained):
				t.Fatalf("Delete of an undrained shard: %v, want ErrNotDrained", err)
			}
		})
	}
}

func show(p *int64) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// consume reads up to n new entries as the group and acks them if ack.
func consume(t *testing.T, rdb redis.UniversalClient, key, group string, n int64, ack bool) {
	t.Helper()
	ctx := context.Background()
	streams, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "c-1", Streams: []string{key, ">"}, Count: n, Block: -1}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("XREADGROUP: %v", err)
	}
	for _, s := range streams {
		for _, m := range s.Messages {
			if ack {
				if err := rdb.XAck(ctx, key, group, m.ID).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}
