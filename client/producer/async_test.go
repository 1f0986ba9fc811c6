package producer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/producer"
	"github.com/rscoord/rsc/routing"
)

func closeAsync(t *testing.T, a *producer.Async) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// From one goroutine: every message gets its own result, naming the entry
// that holds its fields; a key's entries are in publish order.
func TestAsyncResultsPerMessage(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	p := fx.producer(t, nil)
	a := p.Async(producer.AsyncConfig{})
	ctx := context.Background()
	const n = 2000
	futures := make([]*producer.Future, n)
	for i := range futures {
		f, err := a.Publish(ctx, "k"+strconv.Itoa(i%50), fields(i))
		if err != nil {
			t.Fatal(err)
		}
		futures[i] = f
	}
	last := map[string]string{}
	for i, f := range futures {
		res, err := f.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e := fx.rdb.XRange(ctx, res.StreamKey, res.ID, res.ID).Val()
		if len(e) != 1 || e[0].Values["n"] != strconv.Itoa(i) {
			t.Fatalf("message %d: result %+v, entry %v", i, res, e)
		}
		key := "k" + strconv.Itoa(i%50)
		if prev, ok := last[key]; ok && !idBefore(prev, res.ID) {
			t.Fatalf("key %s: message %d got %s, after %s", key, i, res.ID, prev)
		}
		last[key] = res.ID
	}
	closeAsync(t, a)
	st := a.Stats()
	if st.Messages != n || st.InFlight != 0 || st.Batches < 2 || st.Batches >= n {
		t.Fatalf("stats %+v: want %d messages in several batches", st, n)
	}
	if total := totalEntries(t, fx.rdb, 4); total != n {
		t.Fatalf("%d entries", total)
	}
}

// idBefore compares stream ids "ms-seq".
func idBefore(a, b string) bool {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	x, _ := strconv.ParseUint(am, 10, 64)
	y, _ := strconv.ParseUint(bm, 10, 64)
	if x != y {
		return x < y
	}
	u, _ := strconv.ParseUint(as, 10, 64)
	v, _ := strconv.ParseUint(bs, 10, 64)
	return u < v
}

// MaxInFlight messages are accepted while none completes; the next one waits
// for room (here until its context ends, then until a batch completes).
func TestAsyncInFlightBound(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	hold := make(chan struct{})
	fx.coord.mu.Lock()
	fx.coord.hold = hold
	fx.coord.mu.Unlock()
	p := fx.producer(t, nil)
	a := p.Async(producer.AsyncConfig{Linger: -1, MaxBatch: 8, MaxInFlight: 8})
	ctx := context.Background()
	var futures []*producer.Future
	for i := 0; i < 8; i++ {
		f, err := a.Publish(ctx, "k", fields(i))
		if err != nil {
			t.Fatalf("message %d of 8: %v", i, err)
		}
		futures = append(futures, f)
	}
	if st := a.Stats(); st.InFlight != 8 {
		t.Fatalf("stats %+v", st)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := a.Publish(short, "k", fields(8))
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("message 9: %v, want to wait for room until the deadline", err)
	}
	ninth := make(chan error, 1)
	go func() {
		f, err := a.Publish(ctx, "k", fields(8))
		if err == nil {
			_, err = f.Wait(ctx)
		}
		ninth <- err
	}()
	fx.coord.mu.Lock()
	fx.coord.hold = nil
	fx.coord.mu.Unlock()
	close(hold) // the routing answers: the held batch goes out
	for i, f := range futures {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if err := <-ninth; err != nil {
		t.Fatal(err)
	}
	closeAsync(t, a)
	if n := totalEntries(t, fx.rdb, 4); n != 9 {
		t.Fatalf("%d entries, want 9", n)
	}
}

// A batch waits Linger for more messages, unless it is full; Flush sends at
// once; Close sends what is left and refuses more.
func TestAsyncLingerFlushClose(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	p := fx.producer(t, nil)
	ctx := context.Background()
	a := p.Async(producer.AsyncConfig{Linger: time.Hour, MaxBatch: 3})
	f1, _ := a.Publish(ctx, "a", fields(1))
	f2, _ := a.Publish(ctx, "b", fields(2))
	select {
	case <-f1.Done():
		t.Fatal("a message of an unfilled batch was sent before its linger")
	case <-f2.Done():
		t.Fatal("a message of an unfilled batch was sent before its linger")
	default:
	}
	f3, err := a.Publish(ctx, "c", fields(3)) // the batch is full
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []*producer.Future{f1, f2, f3} {
		if _, err := f.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st.Batches != 1 || st.Messages != 3 {
		t.Fatalf("stats %+v: want the three in one batch", st)
	}
	f4, _ := a.Publish(ctx, "d", fields(4))
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-f4.Done():
	default:
		t.Fatal("Flush returned before the message was sent")
	}
	f5, _ := a.Publish(ctx, "e", fields(5))
	closeAsync(t, a)
	if res, err := f5.Wait(ctx); err != nil || res.ID == "" {
		t.Fatalf("the message Close sent: %+v, %v", res, err)
	}
	if _, err := a.Publish(ctx, "f", fields(6)); !errors.Is(err, producer.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if st := a.Stats(); st.Batches != 3 {
		t.Fatalf("stats %+v", st)
	}

	// A lone message is sent once its linger is over, without a Flush (or
	// a Wait, which would hurry it: Done is watched instead), and not before
	// (a lower bound: the sender cannot start it earlier).
	const linger = 200 * time.Millisecond
	b := p.Async(producer.AsyncConfig{Linger: linger})
	start := time.Now()
	f, _ := b.Publish(ctx, "g", fields(7))
	select {
	case <-f.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a lone message was not written within 10s of its linger")
	}
	if took := time.Since(start); took < linger {
		t.Fatalf("a lone message was written after %s, before its linger of %s", took, linger)
	}
	closeAsync(t, b)
	// Bad messages are refused at once.
	if _, err := b.Publish(ctx, "h", nil); !errors.Is(err, producer.ErrNoFields) {
		t.Fatalf("no fields: %v", err)
	}
}

// A Wait sends its message's batch without waiting for the linger, with
// every message accepted before it, as Flush does.
func TestAsyncWaitHurriesItsBatch(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	p := fx.producer(t, nil)
	ctx := context.Background()
	a := p.Async(producer.AsyncConfig{Linger: time.Hour})
	defer closeAsync(t, a)
	var fs []*producer.Future
	for i := 0; i < 5; i++ {
		f, err := a.Publish(ctx, "k"+strconv.Itoa(i), fields(i))
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The third message's Wait: the first three (at least) go now.
	if res, err := fs[2].Wait(wctx); err != nil || res.ID == "" {
		t.Fatalf("Wait of a lingering message: %+v, %v (an hour's linger was not cut short)", res, err)
	}
	for _, f := range fs[:3] {
		select {
		case <-f.Done():
		default:
			t.Fatal("a message accepted before the waited one is still lingering")
		}
	}
	for _, f := range fs {
		if _, err := f.Wait(wctx); err != nil {
			t.Fatal(err)
		}
	}
	if st := a.Stats(); st.Messages != 5 {
		t.Fatalf("stats %+v: want 5 messages", st)
	}
}

// Close whose context ends first cancels what is in flight: those messages
// fail, nothing hangs.
func TestAsyncCloseTimesOut(t *testing.T) {
	fx := setup(t, 1, 4, 4)
	hold := make(chan struct{})
	fx.coord.mu.Lock()
	fx.coord.hold = hold
	fx.coord.mu.Unlock()
	p := fx.producer(t, nil)
	a := p.Async(producer.AsyncConfig{Linger: -1})
	f, err := a.Publish(context.Background(), "k", fields(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	go func() { <-ctx.Done(); close(hold) }()
	if err := a.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v", err)
	}
	if _, err := f.Wait(context.Background()); !errors.Is(err, context.Canceled) {
		t.Fatalf("the message in flight: %v, want context.Canceled", err)
	}
}

// The async path has the batch path's guarantees: a retired shard (nil
// XADD) refreshes the routing, a fence refuses and the retry lands on the
// new layout, and with DedupWindow lost replies write each event id once.
func TestAsyncKeepsTheGuarantees(t *testing.T) {
	fx := setup(t, 1, 8, 8)
	fx.coord.setOrdered(1, 8, client.OrderingKey)
	px, rdb := fx.through(t, 3)
	p := fx.producer(t, dedup(time.Minute, func(c *producer.Config) { c.Redis = rdb; c.MaxAttempts = 5 }))
	ctx := context.Background()
	if _, err := p.Routing(ctx); err != nil {
		t.Fatal(err)
	}
	// 8 → 4 is under way: the shards losing keys are fenced, the routing
	// follows a moment later.
	for s := 4; s < 8; s++ {
		raiseFence(t, fx.rdb, s, 2)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		fx.coord.setOrdered(2, 4, client.OrderingKey)
	}()
	px.DropRandom(0.1, 3, "EVALSHA", "EVAL")
	a := p.Async(producer.AsyncConfig{MaxBatch: 50})
	const n = 1000
	futures := make([]*producer.Future, n)
	for i := range futures {
		f, err := a.Publish(ctx, "k"+strconv.Itoa(i%40), map[string]any{eventField: fmt.Sprintf("a%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		futures[i] = f
	}
	closeAsync(t, a)
	px.DropRandom(0, 0)
	answered := map[string]string{}
	for i, f := range futures {
		res, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if res.MetadataVersion == 1 && res.ShardIndex >= 4 {
			t.Fatalf("message %d landed on fenced shard %d at version 1: %+v", i, res.ShardIndex, res)
		}
		answered[res.EventID] = res.StreamKey + "/" + res.ID
	}
	seen := 0
	for s := 0; s < 8; s++ {
		key := routing.StreamKey(prefix, s)
		for _, e := range fx.rdb.XRange(ctx, key, "-", "+").Val() {
			id := e.Values[eventField].(string)
			if answered[id] != key+"/"+e.ID {
				t.Fatalf("event %s: entry %s/%s, answered %s (written twice?)", id, key, e.ID, answered[id])
			}
			seen++
		}
	}
	if seen != n {
		t.Fatalf("%d entries for %d events", seen, n)
	}
	if st := p.Stats(); st.StaleRetries == 0 || px.Stats().Dropped == 0 {
		t.Fatalf("stats %+v, proxy %+v: want fence refusals and lost replies", st, px.Stats())
	}
}
