package producer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of AsyncConfig.
const (
	// DefaultLinger is how long the first message of a batch waits for more
	// when no batch is in flight.
	DefaultLinger = time.Millisecond
	// DefaultMaxBatch bounds the messages of one flush.
	DefaultMaxBatch = 1024
	// DefaultMaxInFlight bounds the messages accepted and not yet completed.
	DefaultMaxInFlight = 8192
)

// ErrClosed: the Async was closed; the message was not accepted.
var ErrClosed = errors.New("producer: the async publisher is closed")

// AsyncConfig configures an Async (Kafka's producer has the same knobs:
// linger.ms, batch.size, buffer.memory).
type AsyncConfig struct {
	// Linger is how long the first message of a batch waits for others
	// before the batch is sent, when no batch is in flight (0:
	// DefaultLinger; negative: no wait), unless Flush or a Future.Wait of
	// one of its messages sends it sooner. Messages accepted while a batch
	// is in flight wait for it in any case and go in the next one.
	Linger time.Duration
	// MaxBatch bounds the messages of one batch (0: DefaultMaxBatch).
	MaxBatch int
	// MaxInFlight bounds the messages accepted and not yet completed (0:
	// DefaultMaxInFlight); Publish waits for room. At least MaxBatch.
	MaxInFlight int
}

// Async publishes messages in the background, in batches: each Publish
// returns at once with a Future, and one goroutine sends the accepted
// messages with PublishBatch's path (routing, fences, NOMKSTREAM, refresh on
// a stale route, and with DedupWindow the same deduplication), one batch at
// a time, in the order they were accepted. A key's messages are therefore
// written in the order they were published, unless a message is retried
// after a failure. It is safe for concurrent use.
type Async struct {
	p   *Producer
	cfg AsyncConfig
	// ctx bounds the batches; Close cancels it when its own context ends.
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{} // one per message accepted and not completed
	kick   chan struct{} // wakes the sender
	done   chan struct{} // closed when the sender has stopped

	mu       sync.Mutex
	buf      []*Future // accepted, not yet sent
	firstAt  time.Time // when buf's first message was accepted
	accepted int64     // messages accepted since Async began
	finished int64     // messages completed; batches complete in order
	urgent   int64     // send without lingering until finished reaches it
	progress chan struct{}
	closing  bool

	batches  atomic.Int64
	messages atomic.Int64
}

// Future is the outcome of one message published with Async.Publish.
type Future struct {
	msg  Message
	res  Result
	done chan struct{}
	a    *Async
	seq  int64 // the Async's accepted count with this message
}

// Done is closed once the message is written or has failed.
func (f *Future) Done() <-chan struct{} { return f.done }

// Wait waits for the message's outcome: its Result (Err set on failure, as
// in PublishBatch results) and that error; or ctx's error, the message still
// in flight. A message still lingering is sent at once, with what was
// accepted before it (as Flush would): whoever waits for a result wants it
// now, and a publisher that publishes and then waits would otherwise pay
// the linger on every batch.
func (f *Future) Wait(ctx context.Context) (Result, error) {
	select {
	case <-f.done:
		return f.res, f.res.Err
	default:
	}
	if f.a != nil {
		f.a.hurry(f.seq)
	}
	select {
	case <-f.done:
		return f.res, f.res.Err
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
}

// AsyncStats are an Async's counters.
type AsyncStats struct {
	Batches  int64 // batches sent
	Messages int64 // messages completed (written or failed)
	InFlight int   // messages accepted and not completed
}

// Async starts a background publisher that uses p. Close it to send what it
// holds and stop it.
func (p *Producer) Async(cfg AsyncConfig) *Async {
	if cfg.Linger == 0 {
		cfg.Linger = DefaultLinger
	}
	if cfg.Linger < 0 {
		cfg.Linger = 0
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	cfg.MaxInFlight = max(cfg.MaxInFlight, cfg.MaxBatch)
	ctx, cancel := context.WithCancel(context.Background())
	a := &Async{p: p, cfg: cfg, ctx: ctx, cancel: cancel, slots: make(chan struct{}, cfg.MaxInFlight),
		kick: make(chan struct{}, 1), done: make(chan struct{}), progress: make(chan struct{})}
	go a.send()
	return a
}

// Publish accepts a message and returns its Future. It waits while
// MaxInFlight messages are in flight, for at most ctx; ctx bounds only that
// wait, not the publish. It fails at once for a message PublishBatch would
// refuse before sending (no fields, the reserved field) and after Close.
// The fields are read when the batch is sent: do not change them before the
// Future is done.
func (a *Async) Publish(ctx context.Context, partitionKey string, fields map[string]any) (*Future, error) {
	if err := checkFields(fields); err != nil {
		return nil, err
	}
	select {
	case a.slots <- struct{}{}:
	default:
		select {
		case a.slots <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-a.done:
			return nil, ErrClosed
		}
	}
	f := &Future{msg: Message{PartitionKey: partitionKey, Fields: fields}, done: make(chan struct{}), a: a}
	a.mu.Lock()
	if a.closing {
		a.mu.Unlock()
		<-a.slots
		return nil, ErrClosed
	}
	a.buf = append(a.buf, f)
	a.accepted++
	f.seq = a.accepted
	wake := len(a.buf) == 1 || len(a.buf) >= a.cfg.MaxBatch
	if len(a.buf) == 1 {
		a.firstAt = time.Now()
	}
	a.mu.Unlock()
	if wake {
		a.wake()
	}
	return f, nil
}

// Flush sends what is accepted without lingering and waits until every
// message accepted before the call is completed, or ctx ends.
func (a *Async) Flush(ctx context.Context) error {
	a.mu.Lock()
	target := a.accepted
	a.mu.Unlock()
	a.hurry(target)
	return a.waitFinished(ctx, target)
}

// hurry has the sender send without lingering until the first seq accepted
// messages are completed.
func (a *Async) hurry(seq int64) {
	a.mu.Lock()
	raise := a.urgent < seq
	if raise {
		a.urgent = seq
	}
	a.mu.Unlock()
	if raise {
		a.wake()
	}
}

// Close stops accepting messages, sends what it holds and waits for it and
// for the sender to stop. When ctx ends first, the batches still in flight
// are cancelled (their messages fail with the context's error) and Close
// returns ctx's error once the sender has stopped.
func (a *Async) Close(ctx context.Context) error {
	a.mu.Lock()
	a.closing = true
	a.mu.Unlock()
	a.wake()
	select {
	case <-a.done:
		a.cancel()
		return nil
	case <-ctx.Done():
		a.cancel()
		<-a.done
		return ctx.Err()
	}
}

// Stats returns the counters.
func (a *Async) Stats() AsyncStats {
	return AsyncStats{Batches: a.batches.Load(), Messages: a.messages.Load(), InFlight: len(a.slots)}
}

func (a *Async) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *Async) waitFinished(ctx context.Context, target int64) error {
	for {
		a.mu.Lock()
		if a.finished >= target {
			a.mu.Unlock()
			return nil
		}
		ch := a.progress
		a.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// send is the sender goroutine: it takes batches off the buffer once they
// have lingered long enough (or are full, flushed, or closing) and publishes
// them, one at a time.
func (a *Async) send() {
	defer close(a.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var msgs []Message
	var results []Result
	for {
		a.mu.Lock()
		n := len(a.buf)
		if n == 0 && a.closing {
			a.mu.Unlock()
			return
		}
		if n == 0 {
			a.mu.Unlock()
			<-a.kick
			continue
		}
		hurry := a.closing || n >= a.cfg.MaxBatch || a.urgent > a.finished
		if wait := time.Until(a.firstAt.Add(a.cfg.Linger)); !hurry && wait > 0 {
			a.mu.Unlock()
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-a.kick:
				timer.Stop() // a stopped timer's channel delivers nothing (Go 1.23+)
			}
			continue
		}
		take := min(n, a.cfg.MaxBatch)
		batch := make([]*Future, take)
		copy(batch, a.buf)
		rest := copy(a.buf, a.buf[take:])
		clear(a.buf[rest:])
		a.buf = a.buf[:rest]
		a.mu.Unlock()

		msgs, results = msgs[:0], results[:0]
		for _, f := range batch {
			msgs = append(msgs, f.msg)
			results = append(results, Result{})
		}
		a.p.publishMany(a.ctx, msgs, results)
		a.batches.Add(1)
		for i, f := range batch {
			f.res = results[i]
			close(f.done)
			<-a.slots
		}
		a.messages.Add(int64(take))
		clear(msgs)
		a.mu.Lock()
		a.finished += int64(take)
		close(a.progress)
		a.progress = make(chan struct{})
		a.mu.Unlock()
	}
}
