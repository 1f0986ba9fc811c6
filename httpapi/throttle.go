package httpapi

import (
	"container/list"
	"math"
	"net"
	"net/http"
	"sync"
	"time"
)

// loginThrottle slows password guessing down: token buckets per username and
// per client address that only failures spend (limits.go has the numbers).
// Nothing is kept for a key that never failed, and a bucket that has refilled
// is forgotten.
type loginThrottle struct {
	mu      sync.Mutex
	now     func() time.Time
	buckets map[string]*list.Element // of *bucket, least recently used first
	lru     *list.List
	max     int
	swept   time.Time // last evict sweep
}

type bucket struct {
	key    string
	burst  float64
	every  time.Duration // one token per every
	tokens float64
	at     time.Time // when tokens was computed
}

func newLoginThrottle(now func() time.Time) *loginThrottle {
	return &loginThrottle{now: now, buckets: map[string]*list.Element{}, lru: list.New(), max: loginMaxKeys}
}

// Bucket keys: a username and a client address cannot collide.
func userKey(name string) string { return "u:" + name }
func addrKey(addr string) string { return "a:" + addr }

// clientAddr is the TCP peer's address without the port. X-Forwarded-For is
// not trusted: anyone can send it.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// refill brings b's tokens up to t.
func (b *bucket) refill(t time.Time) {
	if el := t.Sub(b.at); el > 0 {
		b.tokens = math.Min(b.burst, b.tokens+float64(el)/float64(b.every))
		b.at = t
	}
}

// wait is how long until b holds a token again (0 when it holds one now).
func (b *bucket) wait() time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) * float64(b.every))
}

// blocked reports how long a password check for user from addr must wait: 0
// when both buckets hold a token.
func (t *loginThrottle) blocked(user, addr string) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	var wait time.Duration
	for _, k := range []string{userKey(user), addrKey(addr)} {
		if el, ok := t.buckets[k]; ok {
			b := el.Value.(*bucket)
			b.refill(now)
			wait = max(wait, b.wait())
		}
	}
	return wait
}

// failedPassword spends a token of user's and of addr's bucket.
func (t *loginThrottle) failedPassword(user, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.spend(userKey(user), loginUserBurst, loginUserRefill, now)
	t.spend(addrKey(addr), loginAddrBurst, loginAddrRefill, now)
}

// failedToken spends a token of addr's bucket: a bad bearer token says
// nothing about a username.
func (t *loginThrottle) failedToken(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.spend(addrKey(addr), loginAddrBurst, loginAddrRefill, t.now())
}

func (t *loginThrottle) spend(key string, burst int, every time.Duration, now time.Time) {
	el, ok := t.buckets[key]
	if !ok {
		if len(t.buckets) >= t.max {
			t.evict(now)
		}
		el = t.lru.PushBack(&bucket{key: key, burst: float64(burst), every: every, tokens: float64(burst), at: now})
		t.buckets[key] = el
	}
	t.lru.MoveToBack(el)
	b := el.Value.(*bucket)
	b.refill(now)
	b.tokens = math.Max(0, b.tokens-1)
}

// evict makes room for one more bucket: it drops every full bucket (they hold
// nothing worth keeping; at most once a second, the sweep reads them all), and
// when that freed nothing, the least recently used one.
func (t *loginThrottle) evict(now time.Time) {
	if now.Sub(t.swept) >= time.Second || now.Before(t.swept) {
		t.swept = now
		for el := t.lru.Front(); el != nil; {
			next := el.Next()
			b := el.Value.(*bucket)
			if b.refill(now); b.tokens >= b.burst {
				t.drop(el)
			}
			el = next
		}
	}
	if len(t.buckets) >= t.max {
		t.drop(t.lru.Front())
	}
}

func (t *loginThrottle) drop(el *list.Element) {
	delete(t.buckets, el.Value.(*bucket).key)
	t.lru.Remove(el)
}

// size is how many buckets are kept.
func (t *loginThrottle) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.buckets)
}

// retryAfterSeconds is a Retry-After value: whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
