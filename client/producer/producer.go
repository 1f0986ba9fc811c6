package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/routing"
)

// Defaults of Config.
const (
	// DefaultRefreshInterval is the routing cache TTL (the Python client's).
	DefaultRefreshInterval = 5 * time.Second
	// DefaultLease is how long a cached routing may still be used after the
	// last successful fetch while refreshes fail.
	DefaultLease = 30 * time.Second
	// DefaultMaxLen is the approximate length cap of every shard stream (the
	// Python client's).
	DefaultMaxLen = 100_000
	// DefaultMaxAttempts is one attempt plus one refresh-and-retry.
	DefaultMaxAttempts = 2
)

// Config configures a Producer.
type Config struct {
	// Coordinator serves the producer routing (READ role).
	Coordinator *client.Coordinator
	// Redis holds the shard streams (a *redis.Client or *redis.ClusterClient).
	Redis redis.UniversalClient
	// StreamPrefix and ConsumerGroup name the coordinator group whose routing
	// is used.
	StreamPrefix, ConsumerGroup string

	// RefreshInterval is the routing cache TTL (default DefaultRefreshInterval).
	RefreshInterval time.Duration
	// Lease bounds how long after its last successful fetch a cached routing
	// may be used while refreshes fail (default DefaultLease, at least
	// RefreshInterval).
	Lease time.Duration
	// MaxLen is N in XADD ... MAXLEN ~ N (0: DefaultMaxLen; negative: no trimming).
	MaxLen int64
	// MaxAttempts is the number of XADD attempts per message (0: DefaultMaxAttempts;
	// 1: no retry). Every attempt after the first refreshes the routing first.
	MaxAttempts int
	// EventIDField, when set, is a field every published message carries: the
	// caller's value if the fields have it, else a random UUID generated once
	// per message, so a retry writes the same id.
	EventIDField string
	// Logger receives routing changes and refresh failures (default: discard).
	Logger *slog.Logger
}

// Producer publishes to the shards of one coordinator group. It is safe for
// concurrent use.
type Producer struct {
	cfg     Config
	rdb     redis.UniversalClient
	cache   *cache
	retries atomic.Int64
}

// Message is one message of a batch.
type Message struct {
	PartitionKey string
	Fields       map[string]any
}

// Result is where a message was written.
type Result struct {
	StreamKey  string
	ShardIndex int
	// ID is the stream entry id Redis assigned.
	ID string
	// EventID is the value of Config.EventIDField, when set.
	EventID string
	// MetadataVersion is the routing version the message was routed with.
	MetadataVersion int64
	// Attempts is the number of XADD attempts it took.
	Attempts int
	// Err is set, in PublishBatch results, when the message was not published.
	Err error
}

// Stats are counters since New.
type Stats struct {
	RoutingFetches int64 // producer-routing calls made
	Retries        int64 // XADD attempts after a failed one
}

// New returns a Producer. It does not contact the coordinator; the routing is
// fetched on first use (call Refresh to fail fast at start-up).
func New(cfg Config) (*Producer, error) {
	if cfg.Coordinator == nil || cfg.Redis == nil {
		return nil, errors.New("producer: Config.Coordinator and Config.Redis are required")
	}
	if err := routing.ValidatePrefix(cfg.StreamPrefix); err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	if err := routing.ValidateName("consumerGroup", cfg.ConsumerGroup); err != nil {
		return nil, fmt.Errorf("producer: %w", err)
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Lease < cfg.RefreshInterval {
		cfg.Lease = cfg.RefreshInterval
	}
	if cfg.MaxLen == 0 {
		cfg.MaxLen = DefaultMaxLen
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = DefaultMaxAttempts
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p := &Producer{cfg: cfg, rdb: cfg.Redis}
	coord, prefix, group := cfg.Coordinator, cfg.StreamPrefix, cfg.ConsumerGroup
	fetch := func(ctx context.Context) (*client.Routing, error) { return coord.ProducerRouting(ctx, prefix, group) }
	p.cache = newCache(prefix, group, cfg.RefreshInterval, cfg.Lease, fetch, cfg.Logger)
	return p, nil
}

// Refresh fetches the routing now (even inside its TTL) and reports whether
// the coordinator answered; on failure the cached routing stays usable
// within its lease. Operators' runbooks call for it right after a resharding.
func (p *Producer) Refresh(ctx context.Context) error {
	if r := p.cache.cur.Load(); r != nil {
		p.cache.invalidate(r)
	}
	return p.cache.refresh(ctx, true).raw
}

// Routing returns the routing publishes use now, refreshing it if due.
func (p *Producer) Routing(ctx context.Context) (client.Routing, error) {
	r, err := p.cache.get(ctx)
	if err != nil {
		return client.Routing{}, err
	}
	return r.routing, nil
}

// Stats returns counters since New.
func (p *Producer) Stats() Stats {
	return Stats{RoutingFetches: p.cache.fetches.Load(), Retries: p.retries.Load()}
}

// Publish writes one message to the shard its partition key routes to (routeV1
// over the current routing) and returns the stream key and entry id. A failed
// or nil XADD invalidates the routing, refreshes it and retries, up to
// MaxAttempts. A group with no shards gives a *NoShardsError.
func (p *Producer) Publish(ctx context.Context, partitionKey string, fields map[string]any) (Result, error) {
	if len(fields) == 0 {
		return Result{}, ErrNoFields
	}
	fields, eventID := p.withEventID(fields)
	var lastErr error
	for attempt := 1; attempt <= p.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			p.retries.Add(1)
		}
		r, err := p.cache.get(ctx)
		if err != nil {
			return Result{}, p.joinErr(partitionKey, attempt, err, lastErr)
		}
		if r.routing.ShardCount == 0 {
			return Result{}, &NoShardsError{StreamPrefix: p.cfg.StreamPrefix, ConsumerGroup: p.cfg.ConsumerGroup, MetadataVersion: r.routing.MetadataVersion}
		}
		idx, err := routing.RouteKey(partitionKey, r.routing.ShardCount)
		if err != nil {
			return Result{}, err
		}
		key := r.keys[idx]
		id, err := p.rdb.XAdd(ctx, p.xaddArgs(key, fields)).Result()
		if err == nil {
			return Result{StreamKey: key, ShardIndex: idx, ID: id, EventID: eventID, MetadataVersion: r.routing.MetadataVersion, Attempts: attempt}, nil
		}
		lastErr = xaddError(key, err)
		if ctx.Err() != nil {
			break
		}
		p.cache.invalidate(r)
	}
	return Result{}, fmt.Errorf("publish %q: %w", partitionKey, lastErr)
}

func (p *Producer) joinErr(partitionKey string, attempt int, err, lastErr error) error {
	if lastErr != nil {
		return fmt.Errorf("publish %q: attempt %d: %w (previous attempt: %w)", partitionKey, attempt, err, lastErr)
	}
	return fmt.Errorf("publish %q: %w", partitionKey, err)
}

func xaddError(key string, err error) error {
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("XADD %s NOMKSTREAM: %w", key, ErrStreamMissing)
	}
	return fmt.Errorf("XADD %s: %w", key, err)
}

// PublishBatch publishes many messages in one pipeline, grouped by shard (a
// shard's messages keep their input order). Messages whose XADD failed are
// re-routed after a routing refresh and retried, up to MaxAttempts. Results
// are in input order; if any message failed, the error is a *BatchError and
// the failed results carry their own Err.
func (p *Producer) PublishBatch(ctx context.Context, msgs []Message) ([]Result, error) {
	results := make([]Result, len(msgs))
	// fields[i] differs from msgs[i].Fields only when an event id was added.
	var fields []map[string]any
	if p.cfg.EventIDField != "" {
		fields = make([]map[string]any, len(msgs))
	}
	sc := getScratch(len(msgs))
	defer putScratch(sc)
	todo, shardOf, order := sc.ints[:0:len(msgs)], sc.ints[len(msgs):2*len(msgs)], sc.ints[2*len(msgs):]
	args, cmds := sc.args, sc.cmds
	for i, m := range msgs {
		if len(m.Fields) == 0 {
			results[i].Err = ErrNoFields
			continue
		}
		if fields != nil {
			fields[i], results[i].EventID = p.withEventID(m.Fields)
		}
		todo = append(todo, i)
	}
	fieldsOf := func(i int) map[string]any {
		if fields != nil {
			return fields[i]
		}
		return msgs[i].Fields
	}
	for attempt := 1; len(todo) > 0; attempt++ {
		if attempt > 1 {
			p.retries.Add(int64(len(todo)))
		}
		r, err := p.cache.get(ctx)
		if err == nil && r.routing.ShardCount == 0 {
			err = &NoShardsError{StreamPrefix: p.cfg.StreamPrefix, ConsumerGroup: p.cfg.ConsumerGroup, MetadataVersion: r.routing.MetadataVersion}
		}
		if err != nil {
			for _, i := range todo {
				results[i].Err = p.joinErr(msgs[i].PartitionKey, attempt, err, results[i].Err)
			}
			break
		}
		// Group by shard, keeping input order within a shard (counting sort).
		n := r.routing.ShardCount
		var small [65]int
		var counts []int
		if n+1 <= len(small) {
			counts = small[:n+1]
		} else {
			counts = make([]int, n+1)
		}
		for _, i := range todo {
			s, _ := routing.RouteKey(msgs[i].PartitionKey, n)
			shardOf[i] = s
			counts[s+1]++
		}
		for s := 1; s <= n; s++ {
			counts[s] += counts[s-1]
		}
		order := order[:len(todo)]
		for _, i := range todo {
			order[counts[shardOf[i]]] = i
			counts[shardOf[i]]++
		}
		pipe := p.rdb.Pipeline()
		for j, i := range order {
			p.setXAddArgs(&args[j], r.keys[shardOf[i]], fieldsOf(i))
			cmds[j] = pipe.XAdd(ctx, &args[j])
		}
		_, _ = pipe.Exec(ctx) // per-command results below
		failed := todo[:0]    // order holds the indexes now; todo is free to reuse
		for j, i := range order {
			key := r.keys[shardOf[i]]
			id, err := cmds[j].Result()
			if err != nil {
				results[i].Err = xaddError(key, err)
				results[i].Attempts = attempt
				failed = append(failed, i)
				continue
			}
			results[i] = Result{StreamKey: key, ShardIndex: shardOf[i], ID: id, EventID: results[i].EventID, MetadataVersion: r.routing.MetadataVersion, Attempts: attempt}
		}
		if len(failed) == 0 || attempt >= p.cfg.MaxAttempts || ctx.Err() != nil {
			break
		}
		p.cache.invalidate(r)
		todo = failed
	}
	var be *BatchError
	for i := range results {
		if results[i].Err != nil {
			if be == nil {
				be = &BatchError{Total: len(msgs), First: fmt.Errorf("message %d (%q): %w", i, msgs[i].PartitionKey, results[i].Err)}
			}
			be.Failed++
		}
	}
	if be != nil {
		return results, be
	}
	return results, nil
}

// scratch is PublishBatch's working memory, pooled: go-redis copies what it
// needs out of XAddArgs, and the commands are read before the batch returns.
type scratch struct {
	ints []int
	args []redis.XAddArgs
	cmds []*redis.StringCmd
}

var scratchPool sync.Pool

func getScratch(n int) *scratch {
	sc, _ := scratchPool.Get().(*scratch)
	if sc == nil || cap(sc.args) < n {
		return &scratch{ints: make([]int, 3*n), args: make([]redis.XAddArgs, n), cmds: make([]*redis.StringCmd, n)}
	}
	sc.ints, sc.args, sc.cmds = sc.ints[:3*n], sc.args[:n], sc.cmds[:n]
	return sc
}

func putScratch(sc *scratch) {
	if cap(sc.args) > 4096 {
		return // do not keep huge batches' memory alive
	}
	clear(sc.args) // drop references to the callers' fields
	clear(sc.cmds)
	scratchPool.Put(sc)
}

func (p *Producer) xaddArgs(key string, fields map[string]any) *redis.XAddArgs {
	a := &redis.XAddArgs{}
	p.setXAddArgs(a, key, fields)
	return a
}

// setXAddArgs fills a as XADD <key> NOMKSTREAM [MAXLEN ~ N] * <fields>.
func (p *Producer) setXAddArgs(a *redis.XAddArgs, key string, fields map[string]any) {
	*a = redis.XAddArgs{Stream: key, NoMkStream: true, Values: fields}
	if p.cfg.MaxLen > 0 {
		a.MaxLen, a.Approx = p.cfg.MaxLen, true
	}
}

// withEventID returns the fields to write and the event id, adding a fresh id
// (on a copy) when EventIDField is set and the caller gave none.
func (p *Producer) withEventID(fields map[string]any) (map[string]any, string) {
	name := p.cfg.EventIDField
	if name == "" {
		return fields, ""
	}
	if v, ok := fields[name]; ok {
		return fields, fmt.Sprint(v)
	}
	id := client.NewRequestID()
	out := make(map[string]any, len(fields)+1)
	for k, v := range fields {
		out[k] = v
	}
	out[name] = id
	return out, id
}
