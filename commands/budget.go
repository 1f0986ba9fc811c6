package commands

import (
	"math"
	"time"
)

// Budgets on what reaches the log. A member join or leave appends several
// events and a refused admin command one; neither costs the caller anything
// but a request, so each principal gets a budget per minute (a token bucket:
// a quarter of a minute's budget at once, then the rest at an even pace).

// Defaults of the budgets (docs/security.md and docs/configuration.md).
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
type Budget struct {
	Rate  float64
	Burst float64
}

// perMinute is the budget of n a minute (n <= 0: none), with a quarter of it
// (at least one) available at once.
func PerMinute(n int) Budget {
	if n <= 0 {
		return Budget{}
	}
	return Budget{Rate: float64(n) / 60, Burst: math.Max(1, math.Floor(float64(n)/4))}
}

func (b Budget) On() bool { return b.Rate > 0 }

// bucket is what one principal has left of a budget, as of at.
type Bucket struct {
	Tokens float64
	At     time.Time
}

// take spends one token of the bucket (nil: a full one) at now, if there is
// one: the bucket after, and otherwise how long until there is one.
func (b Budget) Take(cur *Bucket, now time.Time) (Bucket, bool, time.Duration) {
	next := Bucket{Tokens: b.Burst, At: now}
	if cur != nil {
		next.Tokens = cur.Tokens
		if now.After(cur.At) {
			next.Tokens = math.Min(b.Burst, cur.Tokens+now.Sub(cur.At).Seconds()*b.Rate)
		}
	}
	if next.Tokens < 1 {
		wait := time.Duration((1 - next.Tokens) / b.Rate * float64(time.Second))
		return next, false, max(wait, time.Millisecond)
	}
	next.Tokens--
	return next, true, 0
}
