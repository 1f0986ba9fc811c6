package redisstore_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
)

// The engine under test passes the check and says what it is: with the
// matrix's RSC_REDIS_VERSION set, the version it was built as, so the matrix
// cannot pass on another engine than the one it names.
func TestIntegrationCheckEngine(t *testing.T) {
	ctx := context.Background()
	primary, _ := MustReplicated(t)
	rep, err := redisstore.CheckEngine(ctx, primary.Client(t), "log", 1)
	if err != nil {
		t.Fatalf("CheckEngine: %v", err)
	}
	e := rep.Engines[0]
	t.Logf("engine %s (%s): %s %s, redis_version %s, mode %s, warnings %q", redistest.Engine(), primary.Addr(), e.Name, e.Version, e.Redis, e.Mode, rep.Warnings)
	if e.Name != "redis" && e.Name != "valkey" || e.Role != "master" || e.Mode != "standalone" || e.Replicas != 1 {
		t.Fatalf("engine %+v, want a standalone redis or valkey master with 1 replica", e)
	}
	if want := os.Getenv("RSC_REDIS_VERSION"); want != "" && !strings.HasPrefix(e.Version, want+".") {
		t.Fatalf("engine %s reports %s %s, want version %s.x", redistest.Engine(), e.Name, e.Version, want)
	}
	if want := os.Getenv("RSC_REDIS_ENGINE"); strings.HasPrefix(want, "valkey") != (e.Name == "valkey") {
		t.Fatalf("engine %s reports itself as %s", want, e.Name)
	}
	for _, w := range rep.Warnings {
		if strings.Contains(w, "--log-replicas") {
			t.Fatalf("warning about replicas with 1 connected and 1 wanted: %s", w)
		}
	}
	// Two wanted: a warning, not an error (a replica may connect later).
	rep, err = redisstore.CheckEngine(ctx, primary.Client(t), "log", 2)
	if err != nil || !strings.Contains(strings.Join(rep.Warnings, "\n"), "fewer than --log-replicas 2") {
		t.Fatalf("CheckEngine wanting 2 replicas of 1: %v, warnings %q", err, rep.Warnings)
	}
}

// What cannot run the coordinator is refused at once with the reason: a
// command renamed away, a read-only replica, a sentinel.
func TestIntegrationCheckEngineRefuses(t *testing.T) {
	ctx := context.Background()
	renamed := redistest.StartProcess(t, redistest.WithArgs("--rename-command", "XAUTOCLAIM", ""))
	_, err := redisstore.CheckEngine(ctx, renamed.Client(t), "log", 0)
	if !errors.Is(err, redisstore.ErrUnsupportedEngine) || !strings.Contains(err.Error(), "XAUTOCLAIM") {
		t.Fatalf("CheckEngine without XAUTOCLAIM: %v, want ErrUnsupportedEngine naming it", err)
	}
	noScripts := redistest.StartProcess(t, redistest.WithArgs("--rename-command", "EVAL", ""))
	_, err = redisstore.CheckEngine(ctx, noScripts.Client(t), "log", 0)
	if !errors.Is(err, redisstore.ErrUnsupportedEngine) || !strings.Contains(err.Error(), "EVAL") {
		t.Fatalf("CheckEngine without EVAL: %v, want ErrUnsupportedEngine naming it", err)
	}
	_, replica := MustReplicated(t)
	_, err = redisstore.CheckEngine(ctx, replica.Client(t), "log", 0)
	if !errors.Is(err, redisstore.ErrUnsupportedEngine) || !strings.Contains(err.Error(), "read-only") {
		t.Fatalf("CheckEngine on a replica: %v, want ErrUnsupportedEngine (read-only)", err)
	}
	ss := redistest.StartSentinel(t, 0, 1)
	_, err = redisstore.CheckEngine(ctx, ss.Sentinels()[0].Client(t), "log", 0)
	if !errors.Is(err, redisstore.ErrUnsupportedEngine) || !strings.Contains(err.Error(), "Sentinel") {
		t.Fatalf("CheckEngine on a sentinel: %v, want ErrUnsupportedEngine (a Sentinel)", err)
	}
}

// On a Redis Cluster every master is checked, the log's first.
func TestIntegrationCheckEngineOnCluster(t *testing.T) {
	c, rdb := MustClusterClient(t, 3, 0)
	rep, err := redisstore.CheckEngine(context.Background(), rdb, "coordinator:events", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Engines) != 3 || rep.Engines[0].Addr != c.MasterFor(t, "coordinator:events") {
		t.Fatalf("engines %+v, want 3 masters, %s (the log's) first", rep.Engines, c.MasterFor(t, "coordinator:events"))
	}
	for _, e := range rep.Engines {
		if e.Mode != "cluster" {
			t.Fatalf("engine %+v, want mode cluster", e)
		}
	}
}

func TestVersionOrder(t *testing.T) {
	tests := []struct {
		a, b string
		less bool
	}{
		{"7.0.0", redisstore.MinRedisVersion, false},
		{"6.2.14", redisstore.MinRedisVersion, true},
		{"7.0.15", "7.2.4", true},
		{"7.2.4", "7.2.4", false},
		{"7.2.10", "7.2.4", false},
		{"8.0.2", "7.2.4", false},
		{"7", "7.0.0", false},
		{"7.2", "7.2.4", true},
		{"255.255.255", "7.0.0", false}, // Redis's version of an unstable build
	}
	for _, tt := range tests {
		if got := redisstore.Older(tt.a, tt.b); got != tt.less {
			t.Errorf("older(%s, %s) = %v, want %v", tt.a, tt.b, got, tt.less)
		}
	}
}
