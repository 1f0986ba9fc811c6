package guard

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/rscoord/rsc/commands"
)

// rateLimiter is a fixed one-minute window per principal for admin
// mutations. It is keyed by the principal alone (the reference keys
// principal:prefix:group): a loop over made-up group or prefix names gets no
// more than one budget, and the keys are bounded by the user table.
type rateLimiter struct {
	mu     sync.Mutex
	limit  int
	window time.Time
	counts map[string]int
}

func newRateLimiter(perMinute int) *rateLimiter {
	return &rateLimiter{limit: perMinute, counts: map[string]int{}}
}

func (l *rateLimiter) take(key string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := now.Truncate(time.Minute)
	if !w.Equal(l.window) {
		l.window, l.counts = w, map[string]int{}
	}
	retry := int(w.Add(time.Minute).Sub(now).Seconds())
	if retry < 1 {
		retry = 1
	}
	if l.limit <= 0 || l.counts[key] >= l.limit {
		return false, retry
	}
	l.counts[key]++
	return true, retry
}

// RateLimiter limits admin mutations per principal. It is not a middleware:
// the handlers of admin mutations ask it once they have read a valid body,
// so that a malformed request spends nothing.
type RateLimiter struct {
	limiter    *rateLimiter
	writeError func(http.ResponseWriter, *http.Request, error)
}

// NewRateLimiter allows perMinute admin mutations per principal (0: nil,
// which allows every one); writeError answers the refusals.
func NewRateLimiter(perMinute int, writeError func(http.ResponseWriter, *http.Request, error)) *RateLimiter {
	if perMinute == 0 {
		return nil
	}
	return &RateLimiter{limiter: newRateLimiter(perMinute), writeError: writeError}
}

// Allow applies the admin mutation rate limit before anything is decided;
// false means it answered 429 with Retry-After.
func (l *RateLimiter) Allow(w http.ResponseWriter, r *http.Request) bool {
	if l == nil {
		return true
	}
	who := "\x00anonymous" // admin mutations need WRITE: never reached without a principal
	if p := PrincipalOf(r); p != nil {
		who = p.Username
	}
	ok, retry := l.limiter.take(who, time.Now())
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(retry))
		l.writeError(w, r, commands.ErrRateLimited)
	}
	return ok
}
