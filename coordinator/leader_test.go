package coordinator_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// scriptedLease is a lease whose answers the test sets: who holds it, whether a
// renewal succeeds, whether Redis answers at all.
type scriptedLease struct {
	mu      sync.Mutex
	holder  string // "" nobody, "me", or another replica's name
	token   int64
	renewOK bool
	down    bool
}

func (l *scriptedLease) set(fn func(l *scriptedLease)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn(l)
}

func (l *scriptedLease) info() coordinator.LeaderInfo {
	url := "http://" + l.holder
	if l.holder == "" {
		url = ""
	}
	return coordinator.LeaderInfo{Holder: l.holder, URL: url, Token: l.token, Self: l.holder == "me"}
}

func (l *scriptedLease) Acquire(context.Context, time.Duration) (coordinator.LeaderInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return coordinator.LeaderInfo{}, errors.New("redis down")
	}
	if l.holder == "" {
		l.holder, l.token, l.renewOK = "me", l.token+1, true
	}
	return l.info(), nil
}

func (l *scriptedLease) Renew(context.Context, time.Duration) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return false, errors.New("redis down")
	}
	return l.holder == "me" && l.renewOK, nil
}

func (l *scriptedLease) Release(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holder == "me" {
		l.holder = ""
	}
	return nil
}

func (l *scriptedLease) Leader(context.Context) (coordinator.LeaderInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.info(), nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func termsIn(t *testing.T, log events.Log) []int64 {
	t.Helper()
	entries, err := log.Read(context.Background(), events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var terms []int64
	for _, rec := range decoded(t, entries) {
		if ts, ok := rec.Event.(*events.TermStarted); ok {
			terms = append(terms, ts.Term)
		}
	}
	return terms
}

// TestLeadership walks one replica through the lease's states: another replica
// leads (it follows and refuses decisions), the lease frees up (it leads and
// records the term), a renewal is refused (it steps down at once), Redis stops
// answering (it steps down once its local validity lapses), and shutdown
// releases the lease.
func TestLeadership(t *testing.T) {
	lease := &scriptedLease{holder: "other", token: 4}
	log := events.NewMemLog()
	c := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop(), Lease: lease, LeaseTTL: 60 * time.Millisecond}, log, nil, nil, nil)
	if err := c.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c.Run()
	closed := false
	defer func() {
		if !closed {
			c.Close()
		}
	}()
	ctx := context.Background()
	create := func(group string) error {
		n := 2
		_, err := c.CreateGroup(ctx, events.Meta{Actor: "t"}, commands.CreateGroupInput{StreamPrefix: "p", ConsumerGroup: group, InitialShardCount: &n, RequestedBy: "t"})
		return err
	}

	// Another replica leads.
	if c.Role() != coordinator.RoleFollower || c.IsLeader() {
		t.Fatalf("role %s while another replica holds the lease", c.Role())
	}
	if got := c.Leader(); got.Holder != "other" || got.URL != "http://other" || got.Self {
		t.Fatalf("Leader() = %+v", got)
	}
	if err := create("g1"); !errors.Is(err, commands.ErrNotLeader) {
		t.Fatalf("decision on a follower: %v, want ErrNotLeader", err)
	}
	if n, _ := log.Len(ctx); n != 0 {
		t.Fatalf("a follower appended %d entries", n)
	}

	// The lease frees up: this replica takes it, records term 5, decides.
	lease.set(func(l *scriptedLease) { l.holder = "" })
	waitFor(t, "leading", c.IsLeader)
	if c.Role() != coordinator.RoleLeader || !c.Leader().Self {
		t.Fatalf("role %s, leader %+v", c.Role(), c.Leader())
	}
	if err := create("g1"); err != nil {
		t.Fatal(err)
	}
	// The term's marker precedes the term's first decision.
	entries, err := log.Read(ctx, events.ZeroID, 0)
	if err != nil {
		t.Fatal(err)
	}
	types := typesOf(decoded(t, entries))
	if len(types) != 3 || types[0] != "coordinator.term_started" || types[1] != "stream.created" || types[2] != "group.created" {
		t.Fatalf("log %v, want the term marker, then the stream's metadata and group.created (the first group of a bare prefix)", types)
	}
	if terms := termsIn(t, log); terms[0] != 5 {
		t.Fatalf("terms %v, want [5]", terms)
	}
	if _, ok := c.State().Group(projection.GroupKey{StreamPrefix: "p", ConsumerGroup: "g1"}); !ok {
		t.Fatal("the group is not in the state")
	}

	// A renewal is refused (taken over): it follows at once.
	lease.set(func(l *scriptedLease) { l.holder, l.token = "other", 6 })
	waitFor(t, "stepping down", func() bool { return !c.IsLeader() })
	if err := create("g2"); !errors.Is(err, commands.ErrNotLeader) {
		t.Fatalf("decision after losing the lease: %v", err)
	}

	// Lead again (term 7), then Redis stops answering: it keeps leading only
	// while its last renewal is locally valid.
	lease.set(func(l *scriptedLease) { l.holder = "" })
	waitFor(t, "leading again", c.IsLeader)
	waitFor(t, "the second term recorded", func() bool { return len(termsIn(t, log)) == 2 })
	lease.set(func(l *scriptedLease) { l.down = true })
	waitFor(t, "stepping down without Redis", func() bool { return !c.IsLeader() })
	if terms := termsIn(t, log); terms[1] != 7 {
		t.Fatalf("terms %v, want [5 7]", terms)
	}

	// Shutdown of a leader releases the lease.
	lease.set(func(l *scriptedLease) { l.down = false })
	waitFor(t, "leading after Redis is back", c.IsLeader)
	c.Close()
	closed = true
	lease.mu.Lock()
	defer lease.mu.Unlock()
	if lease.holder != "" {
		t.Fatalf("after Close the lease is held by %q", lease.holder)
	}
}

// TestStandaloneLeads: without a lease the coordinator is the only writer.
func TestStandaloneLeads(t *testing.T) {
	c := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop()}, events.NewMemLog(), nil, nil, nil)
	if !c.IsLeader() || c.Role() != coordinator.RoleStandalone || !c.Leader().Self {
		t.Fatalf("standalone: leader %v role %s", c.IsLeader(), c.Role())
	}
}
