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
	// is used. Without a ConsumerGroup the producer routes by the stream
	// (GET /coord/v1/streams/{p}/producer-routing: the layout every group of
	// the prefix shares) and its publishes are fenced by the stream's fence
	// (routing.StreamFenceField) instead of a group's.
	StreamPrefix, ConsumerGroup string

	// SpreadUnkeyed spreads messages without a partition key over the shards
	// (as the reference starter does with a null key) instead of sending them
	// all to the shard the empty key routes to: by their event id when they
	// have one (EventIDField; always with DedupWindow, which generates one),
	// so every attempt and every process picks the same shard and
	// deduplication holds; else round-robin over the routing's shards. They
	// give up per-key affinity: two such messages have no order between them.
	SpreadUnkeyed bool

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
	// DedupWindow, when positive, makes publishing idempotent: at most one
	// entry per event id (EventIDField, which it requires) per stream prefix
	// is written within the window, whatever retries, lost replies, routing
	// changes or new Producers (a restarted process) publish it again; a
	// repeated publish answers the original entry (Result.Duplicate). Each
	// entry written leaves a record next to its shard stream that expires
	// after the window (at most MaxDedupWindow). See DedupPublishScript and
	// the client README, "Idempotent publishing".
	DedupWindow time.Duration
	// ProducerID names the producer in Redis 8.6's idempotent XADD (XADD …
	// IDMP <producer id> <event id>), which DedupWindow uses, next to the
	// records, where Redis has it (see NativeDedup). Default "rsc:" +
	// StreamPrefix: every producer of the prefix, a restarted one included,
	// shares each stream's IDMP map as it shares the records (event ids are
	// deduplicated per prefix). At most MaxProducerIDLength bytes.
	ProducerID string
	// NoNativeDedup keeps DedupWindow on the records path even where Redis
	// has the idempotent XADD.
	NoNativeDedup bool
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
	maxLen int64
	// window is Config.DedupWindow (0: publishing is not idempotent), and
	// windowMs DedupPublishScript's ARGV[5].
	window   time.Duration
	windowMs int64
	// native is what the producer knows of Redis's idempotent XADD
	// (nativeUnknown until a publish with a window probed it).
	native atomic.Int32

	retries        atomic.Int64
	staleRetries   atomic.Int64
	duplicates     atomic.Int64
	layoutChecks   atomic.Int64
	unfencedChecks atomic.Int64
	unfencedLogged atomic.Int64 // unix nanos of the last warning
	windowLogged   atomic.Bool
	// fenceField is the field of the fence hashes publishes are checked
	// against: the consumer group, or routing.StreamFenceField.
	fenceField string
	// spread counts the unkeyed messages spread round-robin (SpreadUnkeyed).
	spread atomic.Uint64
}

// routeKey is the key a message routes by: its partition key; with
// SpreadUnkeyed, a message without one routes by its event id, or (rr) by
// none: round-robin (shardFor).
func (p *Producer) routeKey(partitionKey, eventID string) (key string, rr bool) {
	if !p.cfg.SpreadUnkeyed || partitionKey != "" {
		return partitionKey, false
	}
	if eventID != "" {
		return eventID, false
	}
	return "", true
}

// shardFor is the shard of count a message with route key key goes to.
func (p *Producer) shardFor(key string, rr bool, count int) (int, error) {
	if rr && count > 0 {
		return int((p.spread.Add(1) - 1) % uint64(count)), nil
	}
	return routing.RouteKey(key, count)
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
	// Duplicate: with DedupWindow, the event id had been written already (by
	// an earlier attempt whose reply was lost, or an earlier publish); nothing
	// was written, and StreamKey, ShardIndex and ID are the original entry's.
	Duplicate bool
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
	// Duplicates are publishes (with DedupWindow) that found their event id
	// written already and answered the original entry.
	Duplicates int64
	// NativeDedup: with DedupWindow, Redis has the idempotent XADD (8.6's
	// XADD … IDMP) and the producer writes with it (Config.ProducerID).
	NativeDedup bool
	// LayoutChecks are reads of another shard's record of an event id before
	// writing it (an earlier attempt's shard, or the shard of a previous
	// layout); UnfencedChecks those of them whose shard had no fence proving
	// that nothing routed before the layout change can land there any more.
	LayoutChecks, UnfencedChecks int64
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
	if cfg.ConsumerGroup != "" {
		if err := routing.ValidateName("consumerGroup", cfg.ConsumerGroup); err != nil {
			return nil, fmt.Errorf("producer: %w", err)
		}
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
	switch {
	case cfg.DedupWindow < 0 || cfg.DedupWindow > MaxDedupWindow:
		return nil, fmt.Errorf("producer: DedupWindow %s is outside 0..%s", cfg.DedupWindow, MaxDedupWindow)
	case cfg.DedupWindow > 0 && cfg.EventIDField == "":
		return nil, errors.New("producer: DedupWindow needs EventIDField (the id publishes are deduplicated by)")
	case len(cfg.ProducerID) > MaxProducerIDLength:
		return nil, fmt.Errorf("producer: ProducerID has %d bytes (at most %d)", len(cfg.ProducerID), MaxProducerIDLength)
	}
	if cfg.ProducerID == "" {
		cfg.ProducerID = "rsc:" + cfg.StreamPrefix
	}
	p := &Producer{cfg: cfg, rdb: cfg.Redis, maxLen: max(cfg.MaxLen, 0), window: cfg.DedupWindow, fenceField: cfg.ConsumerGroup}
	if cfg.ConsumerGroup == "" {
		p.fenceField = routing.StreamFenceField
	}
	if p.window > 0 {
		p.windowMs = max(p.window.Milliseconds(), 1)
	}
	coord, prefix, group := cfg.Coordinator, cfg.StreamPrefix, cfg.ConsumerGroup
	fetch := func(ctx context.Context) (*client.Routing, error) {
		var rt *client.Routing
		var err error
		if group == "" {
			rt, err = streamRouting(ctx, coord, prefix)
		} else {
			rt, err = coord.ProducerRouting(ctx, prefix, group)
		}
		if err == nil && p.window > 0 {
			p.noteLayoutWindow(rt)
			p.idmpArg(ctx) // the first fetch (the producer's start) asks Redis whether it has IDMP
		}
		return rt, err
	}
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
	return Stats{RoutingFetches: p.cache.fetches.Load(), Retries: p.retries.Load(), StaleRetries: p.staleRetries.Load(),
		Duplicates: p.duplicates.Load(), LayoutChecks: p.layoutChecks.Load(), UnfencedChecks: p.unfencedChecks.Load(),
		NativeDedup: p.native.Load() == nativeYes}
}

// Publish writes one message to the shard its partition key routes to (routeV1
// over the current routing) and returns the stream key and entry id. A failed
// or nil XADD invalidates the routing, refreshes it and retries, up to
// MaxAttempts. A publish a shard's fence refuses (a resharding of an ordered
// group is under way; nothing was written) refreshes the routing and retries
// on the new layout, for up to StaleTimeout, without using up an attempt. A
// group with no shards gives a *NoShardsError. With DedupWindow, an event id
// written already answers the original entry (Result.Duplicate).
func (p *Producer) Publish(ctx context.Context, partitionKey string, fields map[string]any) (Result, error) {
	if err := checkFields(fields); err != nil {
		return Result{}, err
	}
	fields, eventID, generated, err := p.eventIDOf(fields)
	if err != nil {
		return Result{}, err
	}
	var lastErr error
	var stale staleWait
	var args []any
	// tried: shards of attempts whose outcome is unknown; cleared: shards
	// proven not to hold the event id, for good.
	var tried, cleared []place
	tries, retry := 0, false
	rkey, rr := p.routeKey(partitionKey, eventID)
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
		idx, err := p.shardFor(rkey, rr, r.routing.ShardCount)
		if err != nil {
			return Result{}, err
		}
		if retry {
			p.retries.Add(1)
			retry = false
		}
		if p.window > 0 && (len(tried) > 0 || !generated && len(r.prev) > 0) {
			res, found, err := p.checkOne(ctx, r, rkey, idx, eventID, generated, tried, &cleared)
			if err != nil {
				lastErr = err
				if ctx.Err() != nil {
					break
				}
				attempt++
				retry = true
				continue
			}
			if found {
				res.Attempts = tries
				return res, nil
			}
		}
		tries++
		key := r.keys[idx]
		var id string
		var dup bool
		if p.window > 0 {
			args = appendEntry(append(p.appendScriptHead(args[:0], r), p.windowMs, p.idmpArg(ctx)), fields)
			id, dup, err = p.publishDedup(ctx, r, idx, eventID, args)
			if err != nil && p.noIDMP(err, args[5]) {
				continue // Redis refused IDMP: again on the records path
			}
		} else {
			args = appendEntry(p.appendScriptHead(args[:0], r), fields)
			id, err = oneID(publishScript.Run(ctx, p.rdb, r.scriptKeys[idx], args...))
		}
		if err == nil {
			if dup {
				p.duplicates.Add(1)
			}
			return Result{StreamKey: key, ShardIndex: idx, ID: id, EventID: eventID, MetadataVersion: r.routing.MetadataVersion, Attempts: tries, Duplicate: dup}, nil
		}
		if se, ok := staleFence(err, key, r.routing.MetadataVersion); ok {
			p.staleRetries.Add(1)
			stale.refused(se, p.cfg.StaleTimeout)
			p.cache.invalidate(r)
			continue
		}
		lastErr = xaddError(key, err)
		if p.window > 0 && !errors.Is(err, redis.Nil) {
			// The script may have run: a retry routed elsewhere looks here first.
			tried = addPlace(tried, idx, r.routing.MetadataVersion+1)
		}
		if ctx.Err() != nil {
			break
		}
		p.cache.invalidate(r)
		attempt++
		retry = true
	}
	return Result{}, fmt.Errorf("publish %q: %w", partitionKey, lastErr)
}

// publishDedup runs DedupPublishScript for one entry on shard idx; a stream
// that does not exist is redis.Nil, as with PublishScript.
func (p *Producer) publishDedup(ctx context.Context, r *route, idx int, eventID string, args []any) (string, bool, error) {
	keys := [3]string{r.keys[idx], r.scriptKeys[idx][1], r.dedupPrefix[idx] + eventID}
	var ids [1]string
	var dup [1]bool
	if err := dedupReply(dedupScript.Run(ctx, p.rdb, keys[:], args...), 1, ids[:], dup[:]); err != nil {
		return "", false, err
	}
	if ids[0] == "" {
		return "", false, redis.Nil
	}
	return ids[0], dup[0], nil
}

// checkOne reads, before a publish to shard idx, the other shards where the
// event id may have landed; found reports a record, whose entry res is.
// Places proven empty and fenced are added to cleared.
func (p *Producer) checkOne(ctx context.Context, r *route, partitionKey string, idx int, eventID string, generated bool, tried []place, cleared *[]place) (res Result, found bool, err error) {
	places := p.placesToCheck(r, partitionKey, idx, generated, tried, *cleared, time.Now())
	if len(places) == 0 {
		return Result{}, false, nil
	}
	checks := make([]check, len(places))
	for i, pl := range places {
		checks[i] = check{place: pl, id: eventID}
	}
	outs := make([]checkOutcome, len(checks))
	if err := p.readChecks(ctx, r, checks, outs); err != nil {
		return Result{}, false, err
	}
	unfenced := 0
	for i, o := range outs {
		if o.found != "" {
			p.layoutChecks.Add(int64(len(outs)))
			p.duplicates.Add(1)
			s := checks[i].place.shard
			stream, _ := p.shardKeys(r, s)
			return Result{StreamKey: stream, ShardIndex: s, ID: o.found, EventID: eventID, MetadataVersion: r.routing.MetadataVersion, Duplicate: true}, true, nil
		}
		if o.fenced {
			*cleared = append(*cleared, checks[i].place)
		} else {
			unfenced++
		}
	}
	p.noteChecks(len(outs), unfenced, places[0])
	return Result{}, false, nil
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
// their own Err. With DedupWindow, each message is deduplicated as by Publish
// (two messages of one batch with the same event id write one entry).
func (p *Producer) PublishBatch(ctx context.Context, msgs []Message) ([]Result, error) {
	results := make([]Result, len(msgs))
	p.publishMany(ctx, msgs, results)
	if err := batchError(msgs, results); err != nil {
		return results, err
	}
	return results, nil
}

// batchError is the *BatchError of results, or nil when every message was
// published.
func batchError(msgs []Message, results []Result) *BatchError {
	var be *BatchError
	for i := range results {
		if results[i].Err != nil {
			if be == nil {
				be = &BatchError{Total: len(msgs), First: fmt.Errorf("message %d (%q): %w", i, msgs[i].PartitionKey, results[i].Err)}
			}
			be.Failed++
		}
	}
	return be
}

// publishMany publishes msgs and fills results, which must be zero and as
// long as msgs (PublishBatch, and the async path's flushes).
func (p *Producer) publishMany(ctx context.Context, msgs []Message, results []Result) {
	// fields[i] differs from msgs[i].Fields only when an event id was added.
	var fields []map[string]any
	var dd *batchDedup
	if p.cfg.EventIDField != "" {
		fields = make([]map[string]any, len(msgs))
	}
	if p.window > 0 {
		dd = &batchDedup{generated: make([]bool, len(msgs))}
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
			f, id, generated, err := p.eventIDOf(m.Fields)
			if err != nil {
				results[i].Err = err
				continue
			}
			fields[i], results[i].EventID = f, id
			if dd != nil {
				dd.generated[i] = generated
			}
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
		shards := r.routing.ShardCount
		for _, i := range todo {
			key, rr := p.routeKey(msgs[i].PartitionKey, results[i].EventID)
			shardOf[i], _ = p.shardFor(key, rr, shards)
		}
		// With DedupWindow, the messages that may have landed elsewhere are
		// looked up there first: found ones are done, failed reads retried.
		write, retried := todo, 0
		var recheck []int
		if dd != nil {
			write, recheck = p.checkMany(ctx, r, msgs, results, todo, shardOf, dd, failures)
			retried = len(recheck)
		}
		// Group by shard, keeping input order within a shard (counting sort).
		var small [65]int
		var counts []int
		if shards+1 <= len(small) {
			counts = small[:shards+1]
		} else {
			counts = make([]int, shards+1)
		}
		for _, i := range write {
			counts[shardOf[i]+1]++
		}
		for s := 1; s <= shards; s++ {
			counts[s] += counts[s-1]
		}
		order := order[:len(write)]
		for _, i := range write {
			order[counts[shardOf[i]]] = i
			counts[shardOf[i]]++
		}
		// One script call per shard and chunk, pipelined.
		var pid string
		if dd != nil {
			pid = p.idmpArg(ctx)
		}
		calls := sc.calls[:0]
		args := sc.args[:0]
		keys := sc.keys[:0]
		var pipe redis.Pipeliner
		if len(order) > 0 {
			pipe = p.rdb.Pipeline()
		}
		for from := 0; from < len(order); {
			shard, to := shardOf[order[from]], from+1
			for to < len(order) && to-from < maxEntriesPerCall && shardOf[order[to]] == shard {
				to++
			}
			argFrom := len(args)
			args = p.appendScriptHead(args, r)
			c := call{from: from, to: to, shard: shard, argFrom: argFrom, script: publishScript}
			if dd != nil {
				args = append(args, p.windowMs, pid)
				keyFrom := len(keys)
				keys = append(keys, r.keys[shard], r.scriptKeys[shard][1])
				for _, i := range order[from:to] {
					keys = append(keys, r.dedupPrefix[shard]+results[i].EventID)
				}
				c.keyFrom, c.keyTo, c.script = keyFrom, len(keys), dedupScript
			}
			for _, i := range order[from:to] {
				args = appendEntry(args, fieldsOf(i))
			}
			c.argTo = len(args)
			c.cmd = c.script.EvalSha(ctx, pipe, c.keys(r, keys), args[argFrom:]...)
			calls = append(calls, c)
			from = to
		}
		if pipe != nil {
			_, _ = pipe.Exec(ctx) // per-call results below
			p.evalMissing(ctx, r, calls, args, keys)
		}
		sc.args, sc.calls, sc.keys = args, calls, keys
		failed := todo[:0] // order holds the indexes now; todo is free to reuse
		for _, c := range calls {
			key := r.keys[c.shard]
			m := c.to - c.from
			ids, dup := sc.replyBufs(m)
			var err error
			if dd != nil {
				// An entry without an id (the stream does not exist) is
				// handled below, per entry: its neighbours may be duplicates.
				err = dedupReply(c.cmd, m, ids, dup)
			} else {
				var got []string
				got, err = c.cmd.StringSlice()
				if err == nil && len(got) != m {
					err = fmt.Errorf("%w: the script answered %d ids for %d entries", ErrUnexpectedReply, len(got), m)
				}
				copy(ids, got)
			}
			se, refused := staleFence(err, key, r.routing.MetadataVersion)
			noIDMP := !refused && err != nil && dd != nil && p.noIDMP(err, pid)
			if refused {
				p.staleRetries.Add(int64(m))
				stale.refused(se, p.cfg.StaleTimeout)
			}
			for k, i := range order[c.from:c.to] {
				results[i].Attempts++
				switch {
				case err == nil && ids[k] != "":
					if dup[k] {
						p.duplicates.Add(1)
					}
					results[i] = Result{StreamKey: key, ShardIndex: c.shard, ID: ids[k], EventID: results[i].EventID, MetadataVersion: r.routing.MetadataVersion, Attempts: results[i].Attempts, Duplicate: dup[k]}
				case refused:
					results[i].Err = se
					failed = append(failed, i)
				case noIDMP: // nothing ran: again on the records path
					results[i].Err = err
					failed = append(failed, i)
				default:
					e := err
					if e == nil {
						e = redis.Nil // an entry without a record on a stream that does not exist
					}
					results[i].Err = xaddError(key, e)
					if dd != nil && !errors.Is(e, redis.Nil) {
						dd.tried(i, place{shard: c.shard, fence: r.routing.MetadataVersion + 1})
					}
					if failures[i]++; failures[i] < p.cfg.MaxAttempts {
						failed = append(failed, i)
						retried++
					}
				}
			}
		}
		failed = append(failed, recheck...)
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
}

// batchDedup is a batch's idempotent-publishing state, by message.
type batchDedup struct {
	generated []bool          // the SDK generated the event id
	triedAt   map[int][]place // shards of attempts whose outcome is unknown
	clearedAt map[int][]place // shards proven not to hold the event id
}

func (d *batchDedup) tried(i int, pl place) {
	if d.triedAt == nil {
		d.triedAt = map[int][]place{}
	}
	d.triedAt[i] = addPlace(d.triedAt[i], pl.shard, pl.fence)
}

// checkMany reads, for the messages of todo, the other shards where their
// event ids may have landed (one pipeline). Messages found there are done
// (results set); messages whose read failed are returned in recheck (their
// attempt failed); write (todo's memory, reordered) holds the rest.
func (p *Producer) checkMany(ctx context.Context, r *route, msgs []Message, results []Result, todo, shardOf []int, dd *batchDedup, failures []int) (write, recheck []int) {
	now := time.Now()
	var checks []check
	for _, i := range todo {
		if dd.generated[i] && len(dd.triedAt[i]) == 0 {
			continue
		}
		key, _ := p.routeKey(msgs[i].PartitionKey, results[i].EventID)
		for _, pl := range p.placesToCheck(r, key, shardOf[i], dd.generated[i], dd.triedAt[i], dd.clearedAt[i], now) {
			checks = append(checks, check{msg: i, place: pl, id: results[i].EventID})
		}
	}
	if len(checks) == 0 {
		return todo, nil
	}
	outs := make([]checkOutcome, len(checks))
	err := p.readChecks(ctx, r, checks, outs)
	done := make(map[int]bool, len(checks))
	if err != nil {
		for _, c := range checks {
			if done[c.msg] {
				continue
			}
			done[c.msg] = true
			results[c.msg].Err = err
			if failures[c.msg]++; failures[c.msg] < p.cfg.MaxAttempts {
				recheck = append(recheck, c.msg)
			}
		}
	} else {
		unfenced := 0
		var example place
		for k, o := range outs {
			c := checks[k]
			switch {
			case done[c.msg]:
			case o.found != "":
				done[c.msg] = true
				p.duplicates.Add(1)
				stream, _ := p.shardKeys(r, c.place.shard)
				results[c.msg] = Result{StreamKey: stream, ShardIndex: c.place.shard, ID: o.found, EventID: c.id,
					MetadataVersion: r.routing.MetadataVersion, Attempts: results[c.msg].Attempts, Duplicate: true}
			case o.fenced:
				if dd.clearedAt == nil {
					dd.clearedAt = map[int][]place{}
				}
				dd.clearedAt[c.msg] = append(dd.clearedAt[c.msg], c.place)
			default:
				unfenced++
				example = c.place
			}
		}
		p.noteChecks(len(checks), unfenced, example)
	}
	write = todo[:0]
	for _, i := range todo {
		if !done[i] {
			write = append(write, i)
		}
	}
	return write, recheck
}

// evalMissing runs again with EVAL, in a second pipeline, the calls that
// found the script missing from Redis's cache (after a restart or SCRIPT
// FLUSH): a NOSCRIPT answer ran nothing. EVAL caches the script again.
func (p *Producer) evalMissing(ctx context.Context, r *route, calls []call, args []any, keys []string) {
	var pipe redis.Pipeliner
	for j := range calls {
		c := &calls[j]
		if !isNoScript(c.cmd.Err()) {
			continue
		}
		if pipe == nil {
			pipe = p.rdb.Pipeline()
		}
		c.cmd = c.script.Eval(ctx, pipe, c.keys(r, keys), args[c.argFrom:c.argTo]...)
	}
	if pipe != nil {
		_, _ = pipe.Exec(ctx)
	}
}

// call is one script call of a batch: the messages order[from:to], all of
// one shard, whose arguments are args[argFrom:argTo] and, for
// DedupPublishScript, whose keys are keys[keyFrom:keyTo].
type call struct {
	from, to, shard int
	argFrom, argTo  int
	keyFrom, keyTo  int
	script          *redis.Script
	cmd             *redis.Cmd
}

// keys returns the call's KEYS.
func (c *call) keys(r *route, keys []string) []string {
	if c.keyTo > c.keyFrom {
		return keys[c.keyFrom:c.keyTo]
	}
	return r.scriptKeys[c.shard]
}

// scratch is PublishBatch's working memory, pooled: go-redis copies the
// arguments it sends, and the commands are read before the batch returns.
type scratch struct {
	ints  []int
	args  []any    // every call's script arguments, one after the other
	keys  []string // every dedup call's KEYS, one after the other
	calls []call
	ids   []string
	dups  []bool
}

// replyBufs returns buffers for the ids of a call of n entries.
func (sc *scratch) replyBufs(n int) ([]string, []bool) {
	if cap(sc.ids) < n {
		sc.ids, sc.dups = make([]string, n), make([]bool, n)
	}
	ids, dups := sc.ids[:n], sc.dups[:n]
	clear(dups)
	return ids, dups
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
	if cap(sc.ints) > 4*4096 || cap(sc.args) > 1<<16 || cap(sc.keys) > 1<<14 {
		return // do not keep huge batches' memory alive
	}
	clear(sc.args[:cap(sc.args)]) // drop references to the callers' fields
	clear(sc.keys[:cap(sc.keys)])
	clear(sc.calls[:cap(sc.calls)])
	clear(sc.ids[:cap(sc.ids)])
	sc.args, sc.calls, sc.keys = sc.args[:0], sc.calls[:0], sc.keys[:0]
	scratchPool.Put(sc)
}

// appendScriptHead appends PublishScript's ARGV before the entries, for a
// publish routed with r: group, routing version, whether to tag, MAXLEN.
func (p *Producer) appendScriptHead(args []any, r *route) []any {
	return append(args, p.fenceField, r.routing.MetadataVersion, r.tag, p.maxLen)
}

// streamRouting fetches a stream's routing in the shape of a group's
// (ConsumerGroup "", ordering NONE: entries carry no routing.FenceField,
// whose value members compare with their group's versions, not the
// stream's). An answer naming another fence field than the stream's is
// refused: the publishes would be checked against a fence nobody raises.
func streamRouting(ctx context.Context, coord *client.Client, prefix string) (*client.Routing, error) {
	sr, err := coord.StreamProducerRouting(ctx, prefix)
	if err != nil {
		return nil, err
	}
	if sr.FenceField != routing.StreamFenceField {
		return nil, fmt.Errorf("%w: stream routing of %s names fence field %q, want %q", ErrInvalidRouting, prefix, sr.FenceField, routing.StreamFenceField)
	}
	return &client.Routing{StreamPrefix: sr.StreamPrefix, MetadataVersion: sr.MetadataVersion, ShardCount: sr.ShardCount,
		StreamKeyPattern: sr.StreamKeyPattern, Shards: sr.Shards, Ordering: client.OrderingNone,
		PreviousLayouts: sr.PreviousLayouts, LayoutWindowMs: sr.LayoutWindowMs}, nil
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
