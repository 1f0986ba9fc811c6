package client_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/client/producer"
)

// The per-key order checks of the ordering tests. Producers publish each
// key's messages with a sequence number 0, 1, 2, ..., the next only after the
// previous publish returned (keyPublisher). Every handler, in any process,
// records its message in Redis with one script (seqChecker), so what the
// checker sees survives a killed member process and follows the order in
// which handlers really ran:
//
//   - an inversion is a key's message handled for the first time after a
//     later message of the same key was (a redelivery of a message already
//     handled is a duplicate, allowed: processing is at least once);
//   - a lost message is one published and never handled.
//
// Inversions are counted in two kinds: "retry" when the late message is one
// whose first attempt the checker failed on purpose (its retry came after
// later messages), "reorder" otherwise (a resharding, a takeover).

// seqScript records one handled message. KEYS: pause flag, the key's seen
// set, the per-key highest sequence handled (hash), the set of messages
// failed on purpose, counters (hash), examples (list). ARGV: key, sequence,
// "1" to fail its first attempt, a description of where it was handled.
// Returns -1 while paused (nothing recorded), -2 for a failure on purpose,
// 0 for a duplicate, 1 for a first handling in order, 2 for an inversion.
var seqScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return -1 end
local tag = ARGV[1] .. '#' .. ARGV[2]
if ARGV[3] == '1' and redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 0 and redis.call('SADD', KEYS[4], tag) == 1 then
  redis.call('HINCRBY', KEYS[5], 'failed', 1)
  return -2
end
if redis.call('SADD', KEYS[2], ARGV[2]) == 0 then
  redis.call('HINCRBY', KEYS[5], 'duplicates', 1)
  return 0
end
redis.call('HINCRBY', KEYS[5], 'handled', 1)
local n = tonumber(ARGV[2])
local m = tonumber(redis.call('HGET', KEYS[3], ARGV[1]) or '-1')
if n < m then
  local kind = 'reorder'
  if redis.call('SISMEMBER', KEYS[4], tag) == 1 then kind = 'retry' end
  redis.call('HINCRBY', KEYS[5], kind, 1)
  if redis.call('LLEN', KEYS[6]) < 20 then
    redis.call('RPUSH', KEYS[6], kind .. ': ' .. ARGV[1] .. ' #' .. ARGV[2] .. ' first handled after #' .. m .. ' (' .. ARGV[4] .. ')')
  end
  return 2
end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
return 1
`)

// errFailedOnPurpose is the handler error of a message's first attempt when
// the producer marked it to fail once.
var errFailedOnPurpose = errors.New("failed on purpose (first attempt)")

// seqChecker is the checker of one group. Its keys share one hash tag, so
// the script runs on a Redis Cluster too.
type seqChecker struct {
	kv redis.UniversalClient
	ns string // "{chk:<name>}"
}

func newSeqChecker(kv redis.UniversalClient, name string) *seqChecker {
	return &seqChecker{kv: kv, ns: "{chk:" + name + "}"}
}

func (s *seqChecker) key(name string) string { return s.ns + ":" + name }

// handler returns a member handler that sleeps, then records the message;
// while the checker is paused it waits (the message is neither handled nor
// failed), so backlogs build up.
func (s *seqChecker) handler(sleep time.Duration) member.Handler {
	return func(ctx context.Context, m member.Message) error {
		if sleep > 0 {
			time.Sleep(sleep)
		}
		k, n := m.Field("k"), m.Field("n")
		if k == "" {
			return nil // a probe (see rollbackAll), outside every key's sequence
		}
		keys := []string{s.key("pause"), s.key("seen:" + k), s.key("max"), s.key("failed"), s.key("stats"), s.key("examples")}
		where := fmt.Sprintf("%s on %s, entry %s, delivery %d", m.MemberID, m.StreamKey, m.ID, m.Deliveries)
		for {
			res, err := seqScript.Run(ctx, s.kv, keys, k, n, m.Field("ff"), where).Int()
			if err != nil {
				return err
			}
			switch res {
			case -1:
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(5 * time.Millisecond):
				}
				continue
			case -2:
				return errFailedOnPurpose
			}
			return nil
		}
	}
}

// pause makes every handler of the group wait; resume lets them go on.
func (s *seqChecker) pause(tb testing.TB) {
	tb.Helper()
	if err := s.kv.Set(context.Background(), s.key("pause"), "1", 0).Err(); err != nil {
		tb.Fatal(err)
	}
}

func (s *seqChecker) resume(tb testing.TB) {
	tb.Helper()
	if err := s.kv.Del(context.Background(), s.key("pause")).Err(); err != nil {
		tb.Fatal(err)
	}
}

// seqStats are the checker's counters.
type seqStats struct {
	Handled, Duplicates, Failed, Reorder, Retry int64
}

func (s seqStats) inversions() int64 { return s.Reorder + s.Retry }

func (s seqStats) String() string {
	return fmt.Sprintf("%d handled, %d inversions (%d reorder, %d after a retry), %d duplicates, %d failed on purpose",
		s.Handled, s.inversions(), s.Reorder, s.Retry, s.Duplicates, s.Failed)
}

func (s *seqChecker) stats(tb testing.TB) seqStats {
	tb.Helper()
	h, err := s.kv.HGetAll(context.Background(), s.key("stats")).Result()
	if err != nil {
		tb.Fatal(err)
	}
	n := func(f string) int64 { v, _ := strconv.ParseInt(h[f], 10, 64); return v }
	return seqStats{Handled: n("handled"), Duplicates: n("duplicates"), Failed: n("failed"), Reorder: n("reorder"), Retry: n("retry")}
}

// examples returns the first inversions recorded.
func (s *seqChecker) examples(tb testing.TB) []string {
	tb.Helper()
	out, err := s.kv.LRange(context.Background(), s.key("examples"), 0, -1).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// lost returns, per key, the sequence numbers below published[key] never
// handled (at most a few per key).
func (s *seqChecker) lost(tb testing.TB, published map[string]int) map[string][]int {
	tb.Helper()
	ctx := context.Background()
	out := map[string][]int{}
	for k, n := range published {
		if n == 0 {
			continue
		}
		members := make([]any, n)
		for i := range members {
			members[i] = strconv.Itoa(i)
		}
		found, err := s.kv.SMIsMember(ctx, s.key("seen:"+k), members...).Result()
		if err != nil {
			tb.Fatal(err)
		}
		for i, ok := range found {
			if !ok && len(out[k]) < 5 {
				out[k] = append(out[k], i)
			}
		}
	}
	return out
}

// keyPublisher publishes, per producer, its own keys' messages in sequence:
// every round, one message for each of its keys in one PublishBatch; a
// key's next message is published only after the batch with its previous
// one returned. A failed publish is tried again, with the same sequence
// number, in the next round. Every failEvery-th message of a key (0: none)
// asks the checker to fail its first attempt.
type keyPublisher struct {
	stop chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	next   map[string]int
	errs   int
	lastEr error
}

func startKeyPublisher(producers []*producer.Producer, keys int, every time.Duration, failEvery int) *keyPublisher {
	kp := &keyPublisher{stop: make(chan struct{}), next: map[string]int{}}
	for i, p := range producers {
		var own []string
		for k := i; k < keys; k += len(producers) {
			own = append(own, "key-"+strconv.Itoa(k))
		}
		kp.wg.Add(1)
		go func() {
			defer kp.wg.Done()
			seq := make([]int, len(own))
			t := time.NewTicker(every)
			defer t.Stop()
			for {
				select {
				case <-kp.stop:
					return
				case <-t.C:
				}
				msgs := make([]producer.Message, len(own))
				for j, k := range own {
					f := map[string]any{"k": k, "n": strconv.Itoa(seq[j])}
					if failEvery > 0 && (seq[j]*31+j*17)%failEvery == failEvery-1 {
						f["ff"] = "1"
					}
					msgs[j] = producer.Message{PartitionKey: k, Fields: f}
				}
				res, err := p.PublishBatch(context.Background(), msgs)
				kp.mu.Lock()
				for j, r := range res {
					if r.Err == nil {
						seq[j]++
						kp.next[own[j]] = seq[j]
					}
				}
				if err != nil {
					kp.errs++
					kp.lastEr = err
				}
				kp.mu.Unlock()
			}
		}()
	}
	return kp
}

// halt stops publishing and returns how many messages of each key were
// published (sequence numbers 0..n-1), with the count of failed batches.
func (kp *keyPublisher) halt() (map[string]int, int, error) {
	close(kp.stop)
	kp.wg.Wait()
	return kp.published()
}

func (kp *keyPublisher) published() (map[string]int, int, error) {
	kp.mu.Lock()
	defer kp.mu.Unlock()
	out := make(map[string]int, len(kp.next))
	for k, n := range kp.next {
		out[k] = n
	}
	return out, kp.errs, kp.lastEr
}

func total(published map[string]int) int {
	n := 0
	for _, v := range published {
		n += v
	}
	return n
}
