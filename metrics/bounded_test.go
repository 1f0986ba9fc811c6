package metrics_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/metrics"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// manyGroups is a coordinator on an in-memory log with n groups of shards
// shards each (quotas off, nothing provisioned) and metrics watching it with
// cfg, refreshed once.
func manyGroups(t testing.TB, n, shards int, cfg metrics.Config) (*coordinator.Coordinator, *metrics.Metrics) {
	return manyGroupsRead(t, n, shards, cfg, &fakeOffsets{})
}

// everyValue answers every shard with every value the cache of shard
// streams has for a stream and a group that exist: pending, lag, the ages
// of the oldest undelivered and unacknowledged entries, a lag status.
type everyValue struct{}

func (everyValue) Offsets(ctx context.Context, prefix, group string, shards []int) ([]metrics.ShardOffset, error) {
	out := make([]metrics.ShardOffset, len(shards))
	for i, s := range shards {
		lag, age, oldest := int64(1000+s), 12.5, 3.25
		out[i] = metrics.ShardOffset{ShardIndex: s, Pending: int64(100 + s), Lag: &lag, LagSeconds: &age, OldestPendingSeconds: &oldest, LagStatus: wire.LagStatusOK}
	}
	return out, nil
}

// manyGroupsRead is manyGroups with the shard values offsets gives.
func manyGroupsRead(t testing.TB, n, shards int, cfg metrics.Config, offsets metrics.OffsetReader) (*coordinator.Coordinator, *metrics.Metrics) {
	t.Helper()
	cfg.Interval, cfg.Logger = -1, zerolog.Nop()
	met := metrics.New(cfg)
	coord := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop(), MaxGroupsPerPrincipal: -1, MaxGroupsPerPrefix: -1,
		MaxShardsPerPrefix: -1, MaxShardsPerPrincipal: -1, MaxGroups: n + 1}, events.NewMemLog(), nil, nil, nil)
	met.Watch(coord, offsets)
	if err := coord.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	coord.Run()
	t.Cleanup(coord.Close)
	for i := 0; i < n; i++ {
		if _, err := coord.CreateGroup(context.Background(), events.Meta{Actor: "alice"}, commands.CreateGroupInput{
			StreamPrefix: fmt.Sprintf("tenant-%03d", i/10), ConsumerGroup: fmt.Sprintf("group-%04d", i), InitialShardCount: &shards, RequestedBy: "alice",
		}); err != nil {
			t.Fatal(err)
		}
	}
	met.Refresh(context.Background())
	return coord, met
}

// scrape is the exposition body of one GET /metrics.
func scrape(t testing.TB, met *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	met.Handler().ServeHTTP(rec, httptest.NewRequest("GET", metrics.Path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return string(body)
}

// groupsWithSeries counts the distinct (stream_prefix, consumer_group)
// pairs of a scrape's series.
func groupsWithSeries(t *testing.T, reg prometheus.Gatherer) map[string]bool {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			var p, g string
			for _, lp := range m.GetLabel() {
				switch lp.GetName() {
				case "stream_prefix":
					p = lp.GetValue()
				case "consumer_group":
					g = lp.GetValue()
				}
			}
			if p != "" {
				seen[p+"/"+g] = true
			}
		}
	}
	return seen
}

// TestScrapeIsBoundedWhateverTheGroups: 1,000 groups, at most 100 with
// series of their own (the oldest: a flood of new groups pushes none out),
// the rest added up under "*" (their live members and lag with them), and
// the group count and the count added up as gauges.
func TestScrapeIsBoundedWhateverTheGroups(t *testing.T) {
	coord, met := manyGroups(t, 1000, 4, metrics.Config{CacheFor: -1})
	// A member of a group beyond the bound counts in the added-up series.
	beyond := projection.GroupKey{StreamPrefix: "tenant-099", ConsumerGroup: "group-0999"}
	one := int64(0)
	if resp, err := coord.Heartbeat(context.Background(), beyond, "m1", "", &wire.HeartbeatRequest{RequestID: "r1", MemberID: "m1", MemberEpoch: &one, MetadataVersion: &one}); err != nil || resp.Status != wire.StatusOK {
		t.Fatalf("join: %+v %v", resp, err)
	}
	reg := met.Registry()
	seen := groupsWithSeries(t, reg)
	if len(seen) != metrics.DefaultMaxGroups+1 || !seen["*/*"] || !seen["tenant-000/group-0000"] || !seen["tenant-009/group-0099"] || seen["tenant-010/group-0100"] {
		t.Fatalf("%d groups with series (want %d and the added-up \"*\"): first %v, 100th %v, 101st %v", len(seen), metrics.DefaultMaxGroups,
			seen["tenant-000/group-0000"], seen["tenant-009/group-0099"], seen["tenant-010/group-0100"])
	}
	mustValue(t, reg, "rsc_groups", nil, 1000)
	mustValue(t, reg, "rsc_metrics_groups_aggregated", nil, 1000-metrics.DefaultMaxGroups)
	mustValue(t, reg, "rsc_group_live_members", map[string]string{"stream_prefix": "*", "consumer_group": "*"}, 1)
	// fakeOffsets: pending = shard index on every shard (0+1+2+3 per group).
	mustValue(t, reg, "rsc_shard_pending_entries", map[string]string{"stream_prefix": "*", "consumer_group": "*", "shard": "*"}, float64(6*(1000-metrics.DefaultMaxGroups)))
	if _, found := value(t, reg, "rsc_shard_lag_entries", map[string]string{"stream_prefix": "*", "consumer_group": "*", "shard": "*"}); found {
		t.Fatal("an added-up lag with one unknown lag among its shards (fakeOffsets' shard 3)")
	}

	every := metrics.New(metrics.Config{Interval: -1, Logger: zerolog.Nop(), MaxGroups: -1, CacheFor: -1})
	every.Watch(coord, &fakeOffsets{})
	every.Refresh(context.Background())
	if n := len(groupsWithSeries(t, every.Registry())); n != 1000 {
		t.Fatalf("MaxGroups -1: %d groups with series, want every one", n)
	}
}

// TestScrapeValuesAreCached: within CacheFor two scrapes show the same
// per-group values (one read of the projection); after it, the change.
func TestScrapeValuesAreCached(t *testing.T) {
	coord, met := manyGroups(t, 2, 1, metrics.Config{CacheFor: time.Hour})
	k := projection.GroupKey{StreamPrefix: "tenant-000", ConsumerGroup: "group-0000"}
	live := map[string]string{"stream_prefix": k.StreamPrefix, "consumer_group": k.ConsumerGroup}
	mustValue(t, met.Registry(), "rsc_group_live_members", live, 0)
	zero := int64(0)
	if _, err := coord.Heartbeat(context.Background(), k, "m1", "", &wire.HeartbeatRequest{RequestID: "r1", MemberID: "m1", MemberEpoch: &zero, MetadataVersion: &zero}); err != nil {
		t.Fatal(err)
	}
	mustValue(t, met.Registry(), "rsc_group_live_members", live, 0)
	fresh := metrics.New(metrics.Config{Interval: -1, Logger: zerolog.Nop(), CacheFor: -1})
	fresh.Watch(coord, nil)
	mustValue(t, fresh.Registry(), "rsc_group_live_members", live, 1)
}

// TestScrapeSizeAt1000Groups measures a scrape at 1,000 groups of 12 shards
// (the default shard count) and of 64, every shard with every value
// (pending, lag, lag seconds, oldest pending seconds), bounded (the default
// --metrics-max-groups and --metrics-max-shards) and unbounded (both 0:
// every series, as before the bounds); docs/operations.md quotes the
// figures:
//
//	go test ./metrics -run TestScrapeSizeAt1000Groups -v
func TestScrapeSizeAt1000Groups(t *testing.T) {
	count := func(body string) int {
		n := 0
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, "rsc_") {
				n++
			}
		}
		return n
	}
	for _, shards := range []int{12, 64} {
		_, bounded := manyGroupsRead(t, 1000, shards, metrics.Config{}, everyValue{})
		_, every := manyGroupsRead(t, 1000, shards, metrics.Config{MaxGroups: -1, MaxShards: -1}, everyValue{})
		b, e := scrape(t, bounded), scrape(t, every)
		if len(b) >= len(e) || count(b) > metrics.DefaultMaxGroups*19+metrics.DefaultMaxShards*4+20 {
			t.Fatalf("%d shards: the bounded scrape has %d bytes and %d series, the unbounded %d and %d", shards, len(b), count(b), len(e), count(e))
		}
		t.Logf("scrape at 1000 groups x %d shards: %d bytes, %d rsc_ series (defaults: --metrics-max-groups %d, --metrics-max-shards %d); %d bytes, %d rsc_ series (both 0: every series)",
			shards, len(b), count(b), metrics.DefaultMaxGroups, metrics.DefaultMaxShards, len(e), count(e))
	}
}

// TestShardSeriesBudget: past Config.MaxShards shards with series of their
// own (the oldest groups' first), a group shows its shards added up under
// shard="*": a scrape stays bounded however many shards the groups have.
func TestShardSeriesBudget(t *testing.T) {
	_, met := manyGroupsRead(t, 3, 4, metrics.Config{MaxShards: 10, CacheFor: -1}, everyValue{})
	reg := met.Registry()
	for i, own := range []bool{true, true, false} {
		labels := map[string]string{"stream_prefix": "tenant-000", "consumer_group": fmt.Sprintf("group-%04d", i), "shard": "0"}
		if _, found := value(t, reg, "rsc_shard_pending_entries", labels); found != own {
			t.Errorf("group %d: a series of shard 0 %v, want %v", i, found, own)
		}
		labels["shard"] = "*"
		v, found := value(t, reg, "rsc_shard_pending_entries", labels)
		if found == own || (!own && v != 100+101+102+103) {
			t.Errorf("group %d: the shards added up: %v (%v), want them only past the budget, summed", i, v, found)
		}
		if !own {
			mustValue(t, reg, "rsc_shard_lag_seconds", labels, 12.5)
			delete(labels, "shard")
			mustValue(t, reg, "rsc_group_lag_status", labels, 0)
		}
	}
}
