package member

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/routing"
)

// Defaults of Config.
const (
	DefaultBatchSize         = 10
	DefaultBlock             = 250 * time.Millisecond
	DefaultHeartbeatInterval = 3 * time.Second
	DefaultClaimMinIdle      = 5 * time.Second
	DefaultRetryBackoff      = 5 * time.Second
	DefaultShutdownTimeout   = 30 * time.Second
	// DefaultHoldHeartbeatInterval is the heartbeat interval while entries
	// are held back (ordered groups).
	DefaultHoldHeartbeatInterval = 200 * time.Millisecond
	// leaseIntervals is the default assignment lease in heartbeat intervals:
	// the protocol defaults are a 3 s interval and a 15 s coordinator lease.
	leaseIntervals = 5
)

// Sentinel errors.
var (
	// ErrInvalidConfig: Start or Listen was given an unusable Config.
	ErrInvalidConfig = errors.New("member: invalid config")
)

// Handler processes one message. A nil error acks it; an error leaves it
// pending, to be retried after Config.RetryBackoff (in a group with ordering
// KEY, in place: no later entry of its shard is handed over before it is
// handled or dead-lettered). The context is cancelled only when a shutdown
// outlasts Config.ShutdownTimeout.
type Handler func(ctx context.Context, msg Message) error

// Message is one stream entry delivered to a member.
type Message struct {
	MemberID   string
	StreamKey  string
	ShardIndex int
	ID         string
	Values     map[string]any
	// Deliveries is how many times Redis delivered the entry (1 the first time).
	Deliveries int64
}

// Field returns a field's value as a string ("" when absent).
func (m Message) Field(name string) string {
	switch v := m.Values[name].(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

// Config configures Listen.
type Config struct {
	// Coordinator answers heartbeats. Its Credentials need the MEMBER role
	// (unless the coordinator runs with --allow-anonymous-members).
	Coordinator *client.Client
	// Redis holds the shard streams. Every owned shard keeps one connection
	// in a blocking read: size the pool above the shards a process may own.
	Redis redis.UniversalClient
	// StreamPrefix and ConsumerGroup name the coordinator group, and the
	// Redis consumer group read on every shard.
	StreamPrefix, ConsumerGroup string

	// Concurrency is the number of logical members (default 1).
	Concurrency int
	// MemberIDBase is the base of the member ids (default: env POD_IP, env
	// HOSTNAME, the host name, or a generated id; see DefaultMemberIDBase).
	// Two processes must not share a base.
	MemberIDBase string
	// MemberName is sent as memberName (default: the member id).
	MemberName string

	// BatchSize is XREADGROUP COUNT (default DefaultBatchSize).
	BatchSize int64
	// Block is XREADGROUP BLOCK (default DefaultBlock). It bounds how long a
	// revoked shard takes to stop when it has no traffic.
	Block time.Duration
	// HeartbeatInterval is used until the coordinator's first answer gives
	// its own (default DefaultHeartbeatInterval).
	HeartbeatInterval time.Duration
	// HoldHeartbeatInterval is the heartbeat interval while a shard's
	// entries are held back in an ordered group (behind a barrier, or
	// waiting for an answer that knows their routing version), so that
	// their release is seen quickly (default DefaultHoldHeartbeatInterval;
	// never slower than the coordinator's interval).
	HoldHeartbeatInterval time.Duration
	// PlainHeartbeats turns held heartbeats off: the member heartbeats every
	// interval and learns of a change at its next heartbeat, as the
	// reference clients do. By default each heartbeat asks the coordinator
	// to hold it until its answer changes (a shard to start or to revoke, a
	// new metadata version, a fence) or HeartbeatHold passes, and the member
	// heartbeats again as soon as it is answered: a change reaches it in a
	// round trip, and it heartbeats as often as with plain heartbeats while
	// nothing changes. A coordinator that does not hold heartbeats answers
	// at once, and the member heartbeats every interval.
	PlainHeartbeats bool
	// HeartbeatHold is how long each held heartbeat may wait for a change
	// (default: the heartbeat interval the coordinator tells; never more
	// than a third of MemberLease, so the lease is renewed in time).
	HeartbeatHold time.Duration
	// MemberLease is the local assignment lease: when heartbeats have failed
	// for this long, the member stops reading all shards until one succeeds.
	// Keep it below the coordinator's --member-lease (default: 5 heartbeat
	// intervals, as the coordinator told them).
	MemberLease time.Duration
	// ClaimMinIdle is how long an entry another consumer left pending must
	// have been idle before this member claims it (default DefaultClaimMinIdle).
	// In an ordered group, a member taking a shard claims every pending
	// entry at once, whatever its idle time.
	ClaimMinIdle time.Duration
	// RetryBackoff is how long a failed message stays pending before it is
	// delivered again (default DefaultRetryBackoff). In a group with ordering
	// KEY the failed message blocks its shard meanwhile: it is claimed again
	// (XCLAIM) and retried after RetryBackoff, over and over, before any later
	// entry of the shard; in other groups the shard moves on.
	RetryBackoff time.Duration
	// MaxDeliveries, with DeadLetter set, bounds the deliveries of a failing
	// message: when the handler fails on delivery MaxDeliveries, DeadLetter is
	// called, and the message is acked if it returns nil. 0 retries forever.
	MaxDeliveries int64
	// DeadLetter receives messages that failed MaxDeliveries times.
	DeadLetter func(ctx context.Context, msg Message, err error) error
	// ShutdownTimeout bounds the graceful stop: finishing in-flight messages
	// and leaving (default DefaultShutdownTimeout). After it, handlers'
	// contexts are cancelled.
	ShutdownTimeout time.Duration
	// OnEvent, if set, is told about assignment changes, claims, fencing and
	// lease lapses. It is called from several goroutines and must return quickly.
	OnEvent func(Event)
	// Logger receives the runtime's log (default: discard).
	Logger *slog.Logger
}

func (c *Config) validate(h Handler) error {
	var problems []string
	if c.Coordinator == nil {
		problems = append(problems, "Coordinator is required")
	}
	if c.Redis == nil {
		problems = append(problems, "Redis is required")
	}
	if h == nil {
		problems = append(problems, "a handler is required")
	}
	if err := routing.ValidatePrefix(c.StreamPrefix); err != nil {
		problems = append(problems, err.Error())
	}
	if err := routing.ValidateName("consumerGroup", c.ConsumerGroup); err != nil {
		problems = append(problems, err.Error())
	}
	if c.Concurrency < 0 {
		problems = append(problems, "Concurrency must not be negative")
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(problems, "; "))
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Concurrency == 0 {
		c.Concurrency = 1
	}
	if c.MemberIDBase == "" {
		c.MemberIDBase = DefaultMemberIDBase()
	}
	positiveOr(&c.BatchSize, DefaultBatchSize)
	positiveOr(&c.Block, DefaultBlock)
	positiveOr(&c.HeartbeatInterval, DefaultHeartbeatInterval)
	positiveOr(&c.HoldHeartbeatInterval, DefaultHoldHeartbeatInterval)
	positiveOr(&c.ClaimMinIdle, DefaultClaimMinIdle)
	positiveOr(&c.RetryBackoff, DefaultRetryBackoff)
	positiveOr(&c.ShutdownTimeout, DefaultShutdownTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// positiveOr sets *v to def unless it is positive.
func positiveOr[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// MemberIDs returns the ids of n logical members: base alone when n <= 1,
// else base-m0 ... base-m<n-1> (the reference clients' rule).
func MemberIDs(base string, n int) []string {
	if n <= 1 {
		return []string{base}
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = base + "-m" + strconv.Itoa(i)
	}
	return ids
}

// DefaultMemberIDBase is the first non-blank of env POD_IP, env HOSTNAME and
// the host name, with every character outside [A-Za-z0-9._-] replaced by "-"
// and leading or trailing "-._" trimmed; or a generated "member-<hex>".
func DefaultMemberIDBase() string {
	candidates := []string{os.Getenv("POD_IP"), os.Getenv("HOSTNAME")}
	if h, err := os.Hostname(); err == nil {
		candidates = append(candidates, h)
	}
	for _, c := range candidates {
		if s := sanitizeID(c); s != "" {
			return s
		}
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "member-" + hex.EncodeToString(b[:])
}

func sanitizeID(s string) string {
	out := []byte(strings.TrimSpace(s))
	for i, c := range out {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
		if !ok {
			out[i] = '-'
		}
	}
	return strings.Trim(string(out), "-._")
}
