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
	// DefaultStaleTimeout bounds how long a publish a fence refused waits
	// for the coordinator to show the new layout.
	DefaultStaleTimeout = 5 * time.Second
)

// Config configures a Producer.
type Config struct {
	// Coordinator serves the producer routing (READ role).
	Coordinator *client.Client
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
	// Refusals by a fence do not count.
	MaxAttempts int
	// StaleTimeout is how long a publish a shard's fence refused (see
	// PublishScript) keeps refreshing the routing and retrying before it
	// fails with a *StaleError (0: DefaultStaleTimeout). The context's
	// deadline also bounds it.
	StaleTimeout time.Duration
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
	cfg   Config
	rdb   redis.UniversalClient
	cache *cache
	// maxLen is PublishScript's MAXLEN argument (0: no trimming).
	maxLen       int64
	retries      atomic.Int64
	staleRetries atomic.Int64
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
	// Attempts is the number of XADD attempts it took (refusals by a fence
	// included).
	Attempts int
	// Err is set, in PublishBatch results, when the message was not published.
	Err error
}

// Stats are counters since New.
type Stats struct {
	RoutingFetches int64 // producer-routing calls made
	// Retries are attempts after a failed one (an error or a nil answer; not
	// a fence's refusal).
	Retries int64
	// StaleRetries are publishes a shard's fence refused (RSCSTALE: nothing
	// written); each is retried on a newer routing while StaleTimeout lasts.
	StaleRetries int64
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
	if cfg.StaleTimeout <= 0 {
		cfg.StaleTimeout = DefaultStaleTimeout
	}
	p := &Producer{cfg: cfg, rdb: cfg.Redis, maxLen: max(cfg.MaxLen, 0)}
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
	return Stats{RoutingFetches: p.cache.fetches.Load(), Retries: p.retries.Load(), StaleRetries: p.staleRetries.Load()}
}

// Publish writes one message to the shard its partition key routes to (routeV1
// over the current routing) and returns the stream key and entry id. A failed
// or nil XADD invalidates the routing, refreshes it and retries, up to
// MaxAttempts. A publish a shard's fence refuses (a resharding of an ordered
// group is under way; nothing was written) refreshes the routing and retries
// on the new layout, for up to StaleTimeout, without using up an attempt. A
// group with no shards gives a *NoShardsError.
func (p *Producer) Publish(ctx context.Context, partitionKey string, fields map[string]any) (Result, error) {
	if err := checkFields(fields); err != nil {
		return Result{}, err
	}
	fields, eventID := p.withEventID(fields)
	var lastErr error
	var stale staleWait
	var args []any
	tries, retry := 0, false
	for attempt := 1; attempt <= p.cfg.MaxAttempts; {
		r, err := p.cache.get(ctx)
		if err != nil {
			return Result{}, p.joinErr(partitionKey, attempt, err, lastErr)
		}
		if r.routing.ShardCount == 0 {
			return Result{}, &NoShardsError{StreamPrefix: p.cfg.StreamPrefix, ConsumerGroup: p.cfg.ConsumerGroup, MetadataVersion: r.routing.MetadataVersion}
		}
		if stale.behind(r) {
			if err := stale.wait(ctx); err != nil {
				return Result{}, fmt.Errorf("publish %q: %w", partitionKey, err)
			}
			p.cache.invalidate(r)
			continue
		}
		idx, err := routing.RouteKey(partitionKey, r.routing.ShardCount)
		if err != nil {
			return Result{}, err
		}
		tries++
		if retry {
			p.retries.Add(1)
			retry = false
		}
		key := r.keys[idx]
		args = appendEntry(p.appendScriptHead(args[:0], r), fields)
		id, err := oneID(publishScript.Run(ctx, p.rdb, r.scriptKeys[idx], args...))
		if err == nil {
			return Result{StreamKey: key, ShardIndex: idx, ID: id, EventID: eventID, MetadataVersion: r.routing.MetadataVersion, Attempts: tries}, nil
		}
		if se, ok := staleFence(err, key, r.routing.MetadataVersion); ok {
			p.staleRetries.Add(1)
			stale.refused(se, p.cfg.StaleTimeout)
			p.cache.invalidate(r)
			continue
		}
		lastErr = xaddError(key, err)
		if ctx.Err() != nil {
			break
		}
		p.cache.invalidate(r)
		attempt++
		retry = true
	}
	return Result{}, fmt.Errorf("publish %q: %w", partitionKey, lastErr)
}

// checkFields refuses an empty message and the field fenced publishes add.
func checkFields(fields map[string]any) error {
	if len(fields) == 0 {
		return ErrNoFields
	}
	if _, ok := fields[routing.FenceField]; ok {
		return ErrReservedField
	}
	return nil
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
// re-routed after a routing refresh and retried, up to MaxAttempts; messages a
// fence refused are retried as in Publish. Results are in input order; if any
// message failed, the error is a *BatchError and the failed results carry
// their own Err.
func (p *Producer) PublishBatch(ctx context.Context, msgs []Message) ([]Result, error) {
	results := make([]Result, len(msgs))
	// fields[i] differs from msgs[i].Fields only when an event id was added.
	var fields []map[string]any
	if p.cfg.EventIDField != "" {
		fields = make([]map[string]any, len(msgs))
	}
	sc := getScratch(len(msgs))
	defer putScratch(sc)
	n := len(msgs)
	todo, shardOf, order, failures := sc.ints[:0:n], sc.ints[n:2*n], sc.ints[2*n:3*n], sc.ints[3*n:]
	clear(failures)
	for i, m := range msgs {
		if err := checkFields(m.Fields); err != nil {
			results[i].Err = err
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
	var stale staleWait
	for attempt := 1; len(todo) > 0; {
		r, err := p.cache.get(ctx)
		if err == nil && r.routing.ShardCount == 0 {
			err = &NoShardsError{StreamPrefix: p.cfg.StreamPrefix, ConsumerGroup: p.cfg.ConsumerGroup, MetadataVersion: r.routing.MetadataVersion}
		}
		if err == nil && stale.behind(r) {
			werr := stale.wait(ctx)
			if werr == nil {
				p.cache.invalidate(r)
				continue
			}
			for _, i := range todo {
				if errors.Is(results[i].Err, ErrStaleRouting) {
					results[i].Err = werr
				} else {
					results[i].Err = fmt.Errorf("%w (previous attempt: %w)", werr, results[i].Err)
				}
			}
			break
		}
		if err != nil {
			for _, i := range todo {
				results[i].Err = p.joinErr(msgs[i].PartitionKey, attempt, err, results[i].Err)
			}
			break
		}
		// Group by shard, keeping input order within a shard (counting sort).
		shards := r.routing.ShardCount
		var small [65]int
		var counts []int
		if shards+1 <= len(small) {
			counts = small[:shards+1]
		} else {
			counts = make([]int, shards+1)
		}
		for _, i := range todo {
			s, _ := routing.RouteKey(msgs[i].PartitionKey, shards)
			shardOf[i] = s
			counts[s+1]++
		}
		for s := 1; s <= shards; s++ {
			counts[s] += counts[s-1]
		}
		order := order[:len(todo)]
		for _, i := range todo {
			order[counts[shardOf[i]]] = i
			counts[shardOf[i]]++
		}
		// One script call per shard and chunk, pipelined.
		calls := sc.calls[:0]
		args := sc.args[:0]
		pipe := p.rdb.Pipeline()
		for from := 0; from < len(order); {
			shard, to := shardOf[order[from]], from+1
			for to < len(order) && to-from < maxEntriesPerCall && shardOf[order[to]] == shard {
				to++
			}
			argFrom := len(args)
			args = p.appendScriptHead(args, r)
			for _, i := range order[from:to] {
				args = appendEntry(args, fieldsOf(i))
			}
			c := call{from: from, to: to, shard: shard, argFrom: argFrom, argTo: len(args)}
			c.cmd = publishScript.EvalSha(ctx, pipe, r.scriptKeys[shard], args[argFrom:]...)
			calls = append(calls, c)
			from = to
		}
		_, _ = pipe.Exec(ctx) // per-call results below
		p.evalMissing(ctx, r, calls, args)
		sc.args, sc.calls = args, calls
		failed := todo[:0] // order holds the indexes now; todo is free to reuse
		retried := 0
		for _, c := range calls {
			key := r.keys[c.shard]
			ids, err := c.cmd.StringSlice()
			if err == nil && len(ids) != c.to-c.from {
				err = fmt.Errorf("%w: the script answered %d ids for %d entries", ErrUnexpectedReply, len(ids), c.to-c.from)
			}
			se, refused := staleFence(err, key, r.routing.MetadataVersion)
			if refused {
				p.staleRetries.Add(int64(c.to - c.from))
				stale.refused(se, p.cfg.StaleTimeout)
			}
			for k, i := range order[c.from:c.to] {
				results[i].Attempts++
				switch {
				case err == nil:
					results[i] = Result{StreamKey: key, ShardIndex: c.shard, ID: ids[k], EventID: results[i].EventID, MetadataVersion: r.routing.MetadataVersion, Attempts: results[i].Attempts}
				case refused:
					results[i].Err = se
					failed = append(failed, i)
				default:
					results[i].Err = xaddError(key, err)
					if failures[i]++; failures[i] < p.cfg.MaxAttempts {
						failed = append(failed, i)
						retried++
					}
				}
			}
		}
		if len(failed) == 0 || ctx.Err() != nil {
			break
		}
		if retried > 0 {
			attempt++
			p.retries.Add(int64(retried))
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

// evalMissing runs again with EVAL, in a second pipeline, the calls that
// found the script missing from Redis's cache (after a restart or SCRIPT
// FLUSH): a NOSCRIPT answer ran nothing. EVAL caches the script again.
func (p *Producer) evalMissing(ctx context.Context, r *route, calls []call, args []any) {
	var pipe redis.Pipeliner
	for j := range calls {
		c := &calls[j]
		if !isNoScript(c.cmd.Err()) {
			continue
		}
		if pipe == nil {
			pipe = p.rdb.Pipeline()
		}
		c.cmd = publishScript.Eval(ctx, pipe, r.scriptKeys[c.shard], args[c.argFrom:c.argTo]...)
	}
	if pipe != nil {
		_, _ = pipe.Exec(ctx)
	}
}

// call is one script call of a batch: the messages order[from:to], all of
// one shard, whose arguments are args[argFrom:argTo].
type call struct {
	from, to, shard int
	argFrom, argTo  int
	cmd             *redis.Cmd
}

// scratch is PublishBatch's working memory, pooled: go-redis copies the
// arguments it sends, and the commands are read before the batch returns.
type scratch struct {
	ints  []int
	args  []any // every call's script arguments, one after the other
	calls []call
}

var scratchPool sync.Pool

func getScratch(n int) *scratch {
	sc, _ := scratchPool.Get().(*scratch)
	if sc == nil || cap(sc.ints) < 4*n {
		return &scratch{ints: make([]int, 4*n)}
	}
	sc.ints = sc.ints[:4*n]
	return sc
}

func putScratch(sc *scratch) {
	if cap(sc.ints) > 4*4096 || cap(sc.args) > 1<<16 {
		return // do not keep huge batches' memory alive
	}
	clear(sc.args[:cap(sc.args)]) // drop references to the callers' fields
	clear(sc.calls[:cap(sc.calls)])
	sc.args, sc.calls = sc.args[:0], sc.calls[:0]
	scratchPool.Put(sc)
}

// appendScriptHead appends PublishScript's ARGV before the entries, for a
// publish routed with r: group, routing version, whether to tag, MAXLEN.
func (p *Producer) appendScriptHead(args []any, r *route) []any {
	return append(args, p.cfg.ConsumerGroup, r.routing.MetadataVersion, r.tag, p.maxLen)
}

// appendEntry appends one entry's ARGV: its argument count, then field,
// value, ...
func appendEntry(args []any, fields map[string]any) []any {
	args = append(args, 2*len(fields))
	for k, v := range fields {
		args = append(args, k, v)
	}
	return args
}

// oneID reads a single-entry script answer.
func oneID(cmd *redis.Cmd) (string, error) {
	ids, err := cmd.StringSlice()
	if err != nil {
		return "", err
	}
	if len(ids) != 1 {
		return "", fmt.Errorf("%w: the script answered %d ids for one entry", ErrUnexpectedReply, len(ids))
	}
	return ids[0], nil
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
