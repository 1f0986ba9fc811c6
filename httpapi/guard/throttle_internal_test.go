package guard

import (
	"strconv"
	"testing"
	"time"
)

// TestLoginThrottleMemoryIsBounded: failures under many names never keep more
// than the cap of buckets; refilled buckets go first, then the oldest.
func TestLoginThrottleMemoryIsBounded(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	th := newLoginThrottle(func() time.Time { return now })
	th.max = 100
	for i := 0; i < 1000; i++ {
		th.failedPassword("user"+strconv.Itoa(i), "10.0.0."+strconv.Itoa(i%7))
		if n := th.size(); n > th.max {
			t.Fatalf("after %d failures: %d buckets, cap %d", i+1, n, th.max)
		}
	}
	// The newest keys are still tracked: their failure still counts.
	for i := 0; i < loginUserBurst; i++ {
		th.failedPassword("user999", "10.0.0.99")
	}
	if blockedFor(th, "user999", "10.0.0.99") == 0 {
		t.Fatal("the most recent user's bucket was evicted")
	}
	// Once refilled, buckets are dropped to make room rather than busy ones.
	now = now.Add(time.Hour)
	th.failedPassword("busy", "10.0.0.1")
	for i := 0; i < 10; i++ {
		th.failedPassword("busy", "10.0.0.1")
		th.failedPassword("other"+strconv.Itoa(i), "10.0.0.2")
	}
	if n := th.size(); n > 1+1+10+1 {
		t.Fatalf("%d buckets after the refilled ones should have gone", n)
	}
	if blockedFor(th, "busy", "10.0.0.1") == 0 {
		t.Fatal("a busy user's bucket was dropped")
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int{0: 1, time.Millisecond: 1, time.Second: 1, 1500 * time.Millisecond: 2, 6 * time.Second: 6} {
		if got := RetryAfterSeconds(d); got != want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", d, got, want)
		}
	}
}

func blockedFor(th *loginThrottle, user, addr string) time.Duration {
	wait, _ := th.blocked(user, addr)
	return wait
}
