package coordinator

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

var (
	noisyKey = projection.GroupKey{StreamPrefix: "noisy", ConsumerGroup: "g"}
	quietKey = projection.GroupKey{StreamPrefix: "quiet", ConsumerGroup: "g"}
)

// named is a request the backlog tests tell apart by name.
func named(name string, lane *projection.GroupKey) *request {
	r := &request{meta: events.Meta{Actor: name}}
	if lane != nil {
		r.lane, r.laned = *lane, true
	}
	return r
}

func namesOf(rs []*request) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.meta.Actor
		if r.job != nil {
			out[i] = "job:" + out[i]
		}
	}
	return out
}

// TestBacklogOrder: what the writer's backlog runs next, as a table: the
// requests waiting (in the order submitted) and the lanes of the batch run
// last in, the batches (or jobs) out, until the backlog is empty.
func TestBacklogOrder(t *testing.T) {
	n, q := &noisyKey, &quietKey
	other := &projection.GroupKey{StreamPrefix: "other", ConsumerGroup: "g"}
	job := func(name string) *request { r := named(name, nil); r.job = func() {}; return r }
	for _, c := range []struct {
		name string
		last []projection.GroupKey
		reqs []*request
		max  int
		want [][]string
	}{
		{name: "in order when no group ran last", reqs: []*request{named("n1", n), named("q1", q), named("n2", n)}, max: 8,
			want: [][]string{{"n1", "q1", "n2"}}},
		{name: "a group that ran last waits for one that did not", last: []projection.GroupKey{noisyKey},
			reqs: []*request{named("n1", n), named("n2", n), named("q1", q), named("n3", n)}, max: 8,
			want: [][]string{{"q1"}, {"n1", "n2", "n3"}}},
		{name: "in order when every group waiting ran last", last: []projection.GroupKey{noisyKey, quietKey},
			reqs: []*request{named("n1", n), named("q1", q)}, max: 8,
			want: [][]string{{"n1", "q1"}}},
		{name: "the groups that did not run last share a batch, each in its order", last: []projection.GroupKey{noisyKey},
			reqs: []*request{named("n1", n), named("q1", q), named("o1", other), named("q2", q), named("n2", n)}, max: 8,
			want: [][]string{{"q1", "o1", "q2"}, {"n1", "n2"}}},
		{name: "batches stay within max", last: []projection.GroupKey{noisyKey},
			reqs: []*request{named("n1", n), named("q1", q), named("q2", q), named("q3", q), named("n2", n)}, max: 2,
			want: [][]string{{"q1", "q2"}, {"n1", "n2"}, {"q3"}}},
		{name: "a decision without a lane keeps its place", last: []projection.GroupKey{noisyKey},
			reqs: []*request{named("n1", n), named("admin", nil), named("q1", q)}, max: 8,
			want: [][]string{{"n1", "admin", "q1"}}},
		{name: "heartbeats before a decision without a lane are reordered among themselves", last: []projection.GroupKey{noisyKey},
			reqs: []*request{named("n1", n), named("q1", q), named("admin", nil), named("q2", q)}, max: 8,
			want: [][]string{{"q1"}, {"n1", "admin", "q2"}}},
		{name: "a job runs alone, after what was submitted before it", last: []projection.GroupKey{noisyKey},
			reqs: []*request{named("n1", n), job("catch-up"), named("q1", q)}, max: 8,
			want: [][]string{{"n1"}, {"job:catch-up"}, {"q1"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := backlog{reqs: c.reqs, last: map[projection.GroupKey]bool{}}
			for _, k := range c.last {
				b.last[k] = true
			}
			var got [][]string
			for len(b.reqs) > 0 && len(got) <= len(c.reqs) {
				batch, j := b.next(c.max)
				if j != nil {
					batch = []*request{j}
				}
				got = append(got, namesOf(batch))
			}
			if !slices.EqualFunc(got, c.want, slices.Equal) {
				t.Fatalf("ran %v, want %v", got, c.want)
			}
		})
	}
}

// gatedLog is a MemLog whose appends wait while the gate is closed, and
// which records the groups of every batch it appended, in order.
type gatedLog struct {
	*events.MemLog
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	waiting chan struct{} // an append is waiting at the gate
	batches [][]projection.GroupKey
}

func (l *gatedLog) AppendIndexed(ctx context.Context, after string, batch []events.Draft) ([]string, error) {
	l.mu.Lock()
	gate := l.gate
	l.mu.Unlock()
	if gate != nil {
		l.waiting <- struct{}{}
		<-gate
	}
	ids, err := l.MemLog.AppendIndexed(ctx, after, batch)
	if err != nil {
		return ids, err
	}
	var groups []projection.GroupKey
	for i, d := range batch {
		rec, err := events.Decode(ids[i], d.Data)
		if err != nil {
			return ids, err
		}
		groups = append(groups, projection.KeyOf(rec))
	}
	l.mu.Lock()
	l.batches = append(l.batches, groups)
	l.mu.Unlock()
	return ids, nil
}

// TestQuietGroupIsNotQueuedBehindAFlood: while the writer appends a batch of
// a flooded group's joins, 300 more of them are submitted, then one join of a
// quiet group. The quiet group's join is the next batch, alone; the flood's
// decisions follow, in batches of at most MaxBatch, every one of them
// recorded.
func TestQuietGroupIsNotQueuedBehindAFlood(t *testing.T) {
	log := &gatedLog{MemLog: events.NewMemLog(), waiting: make(chan struct{})}
	c := writerOnly(t, log)
	ctx := context.Background()
	two := 2
	for _, k := range []projection.GroupKey{noisyKey, quietKey} {
		if _, err := c.CreateGroup(ctx, events.Meta{Actor: "t"}, commands.CreateGroupInput{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, InitialShardCount: &two, RequestedBy: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	log.mu.Lock()
	gate := make(chan struct{})
	log.gate, log.batches = gate, nil
	log.mu.Unlock()

	const flood = 300
	var wg sync.WaitGroup
	errs := make(chan error, flood+2)
	join := func(k projection.GroupKey, id string) {
		defer wg.Done()
		resp, err := c.Heartbeat(ctx, k, id, "", joinRequest(id))
		if err == nil && resp.Status != wire.StatusOK {
			err = fmt.Errorf("join %s: %s", id, resp.Status)
		}
		if err != nil {
			errs <- err
		}
	}
	wg.Add(1)
	go join(noisyKey, "flood-000")
	<-log.waiting // the writer appends the flood's first batch
	log.mu.Lock()
	log.gate = nil // the appends after it go through once it does
	log.mu.Unlock()
	queued := func(n int) {
		for len(c.dec.reqs) < n {
			time.Sleep(time.Millisecond)
		}
	}
	for i := 1; i <= flood; i++ {
		wg.Add(1)
		go join(noisyKey, fmt.Sprintf("flood-%03d", i))
	}
	queued(flood)
	wg.Add(1)
	go join(quietKey, "quiet")
	queued(flood + 1)
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.batches) < 2 {
		t.Fatalf("appended %d batches, want the flood's first and then the quiet group's", len(log.batches))
	}
	for i, b := range log.batches {
		for _, k := range b[1:] {
			if k != b[0] {
				t.Fatalf("batch %d holds events of %v and %v: a quiet group's decision shared a batch with the flood's", i, b[0], k)
			}
		}
	}
	if log.batches[0][0] != noisyKey || log.batches[1][0] != quietKey {
		t.Fatalf("the batches after the first flood's are of %v, %v...: the quiet group's join waited behind the flood", log.batches[1][0], log.batches[min(2, len(log.batches)-1)][0])
	}
	st := c.State()
	var got int
	st.Read(func(st projection.Reader) { got = st.Group(noisyKey).LiveCount() })
	if got != flood+1 {
		t.Fatalf("the flooded group has %d live members, want %d", got, flood+1)
	}
}

// joinRequest is the first heartbeat of member id (epoch 0, owning nothing).
func joinRequest(id string) *wire.HeartbeatRequest {
	proto, epoch, mv, one := wire.ProtocolVersion, int64(0), int64(0), 1
	return &wire.HeartbeatRequest{
		ProtocolVersion: &proto, RequestID: "r1", MemberID: id, MemberName: &id, MemberEpoch: &epoch, MetadataVersion: &mv,
		RuntimeConsumerCapacity: &wire.Capacity{RuntimeMaxConcurrency: &one, AvailableConcurrency: &one},
		OwnedShards:             []wire.ShardRef{}, RevokingShards: []wire.RevokingReport{}, ShardProgress: []wire.ShardProgress{},
	}
}
