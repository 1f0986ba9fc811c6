package guard

import (
	"container/list"
	"context"
	"crypto/sha256"
	"math"
	"net"
	"net/http"
	"sync"
	"time"
)

// loginThrottle slows password guessing down: token buckets that only
// failures spend, per (username, client address) and per client address
// (limits.go has the numbers). Never per username alone: a correct password
// is then never refused because someone else failed with that name, from
// another address. Nothing is kept for a key that never failed, and a bucket
// that has refilled is forgotten.
type loginThrottle struct {
	mu      sync.Mutex
	now     func() time.Time
	buckets map[string]*list.Element // of *bucket, least recently used first
	lru     *list.List
	max     int
	swept   time.Time // last evict sweep
}

// Failed logins (loginThrottle): token buckets, spent by failures only.
// A username from one client address gets loginUserBurst failed password
// checks, then one more every loginUserRefill; a client address (the TCP
// peer, not X-Forwarded-For; for a request a --ha follower forwarded, the
// client's address at the follower) loginAddrBurst failed password or bearer
// checks, then one more every loginAddrRefill. While a bucket is empty,
// password checks for its key are refused before the password is looked at
// (429, Retry-After), except on a connection that already proved the same
// credentials. At most loginMaxKeys buckets are kept: full ones are dropped
// first, then the least recently used.
const (
	loginUserBurst  = 10
	loginUserRefill = 6 * time.Second
	loginAddrBurst  = 30
	loginAddrRefill = 2 * time.Second
	loginMaxKeys    = 10000
)

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

// Bucket keys: a (user, address) pair and an address cannot collide.
func userAddrKey(name, addr string) string { return "u:" + addr + "\x00" + name }
func addrKey(addr string) string           { return "a:" + addr }

// Reasons a password check is throttled (logged and in the 429's message).
const (
	throttledUserAddr = "for this user from this address"
	throttledAddr     = "from this address"
)

// peerAddr is the TCP peer's address without the port. X-Forwarded-For is
// not trusted: anyone can send it.
func peerAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// ClientAddr is the address failures of r count against: the TCP peer, or,
// for a request a --ha follower forwarded, the client's address it asserts
// (assertion.go).
func ClientAddr(r *http.Request) string {
	if a := Of(r).Client; a != "" {
		return a
	}
	return peerAddr(r)
}

// connProof is what one connection proved: the credentials (digests) that
// passed a password check on it. Its later requests with the same
// credentials are not throttled: failures elsewhere, even from the same
// address, cannot lock out a client that already proved itself on an open
// connection. A few credentials are kept per connection, the newest.
type connProof struct {
	mu    sync.Mutex
	creds [connProofSlots][sha256.Size]byte
	n     int
}

const connProofSlots = 4

type connProofKey struct{}

// ConnContext is the http.Server ConnContext the server needs (httpapi's
// Server.Open sets it): every connection gets its own proof.
func ConnContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connProofKey{}, &connProof{})
}

// proofOf is r's connection's proof (nil when the server did not set one up).
func proofOf(r *http.Request) *connProof {
	p, _ := r.Context().Value(connProofKey{}).(*connProof)
	return p
}

func (p *connProof) has(cred [sha256.Size]byte) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := 0; i < min(p.n, connProofSlots); i++ {
		if p.creds[i] == cred {
			return true
		}
	}
	return false
}

func (p *connProof) add(cred [sha256.Size]byte) {
	if p == nil || p.has(cred) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.creds[p.n%connProofSlots] = cred
	p.n++
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

// blocked reports how long a password check for user from addr must wait,
// and which bucket is empty: 0 when both hold a token.
func (t *loginThrottle) blocked(user, addr string) (time.Duration, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	var wait time.Duration
	reason := ""
	for _, k := range []struct{ key, reason string }{{userAddrKey(user, addr), throttledUserAddr}, {addrKey(addr), throttledAddr}} {
		if el, ok := t.buckets[k.key]; ok {
			b := el.Value.(*bucket)
			b.refill(now)
			if w := b.wait(); w > wait {
				wait, reason = w, k.reason
			}
		}
	}
	return wait, reason
}

// failedPassword spends a token of (user, addr)'s bucket and of addr's.
func (t *loginThrottle) failedPassword(user, addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.spend(userAddrKey(user, addr), loginUserBurst, loginUserRefill, now)
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

// RetryAfterSeconds is a Retry-After value: whole seconds, at least 1.
func RetryAfterSeconds(d time.Duration) int {
	return max(1, int(math.Ceil(d.Seconds())))
}
