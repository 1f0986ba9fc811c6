package commands

import (
	"math"
	"time"
)

// Budgets on what reaches the log. A member join or leave appends several
// events and a refused admin command one; neither costs the caller anything
// but a request, so each principal gets a budget per minute (a token bucket:
// a quarter of a minute's budget at once, then the rest at an even pace).

// Defaults of the budgets (README, "Security" and "Configuration").
const (
	// DefaultMemberChurnPerMinute is joins and leaves per principal and
	// group per minute (--member-churn-per-minute): a rolling restart of
	// a service's members fits; a loop of joins and leaves is held to it.
	DefaultMemberChurnPerMinute = 600
	// DefaultRejectionsPerMinute is refused admin commands recorded per
	// principal per minute (--rejections-per-minute).
	DefaultRejectionsPerMinute = 60
)

// budget is a token bucket's shape: rate tokens a second, burst at most
// (zero: no budget, everything passes).
type budget struct {
	rate  float64
	burst float64
}

// perMinute is the budget of n a minute (n <= 0: none), with a quarter of it
// (at least one) available at once.
func perMinute(n int) budget {
	if n <= 0 {
		return budget{}
	}
	return budget{rate: float64(n) / 60, burst: math.Max(1, math.Floor(float64(n)/4))}
}

func (b budget) on() bool { return b.rate > 0 }

// bucket is what one principal has left of a budget, as of at.
type bucket struct {
	tokens float64
	at     time.Time
}

// take spends one token of the bucket (nil: a full one) at now, if there is
// one: the bucket after, and otherwise how long until there is one.
func (b budget) take(cur *bucket, now time.Time) (bucket, bool, time.Duration) {
	next := bucket{tokens: b.burst, at: now}
	if cur != nil {
		next.tokens = cur.tokens
		if now.After(cur.at) {
			next.tokens = math.Min(b.burst, cur.tokens+now.Sub(cur.at).Seconds()*b.rate)
		}
	}
	if next.tokens < 1 {
		wait := time.Duration((1 - next.tokens) / b.rate * float64(time.Second))
		return next, false, max(wait, time.Millisecond)
	}
	next.tokens--
	return next, true, 0
}
