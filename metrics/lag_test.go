package metrics_test

import (
	"context"
	"testing"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/metrics"
	"github.com/rscoord/rsc/wire"
)

// lagOffsets answers each group's shards with its statuses in order and ages
// of 1.5 s per index (shard 1's unknown); a group without statuses fails.
type lagOffsets map[string][]string

func (f lagOffsets) Offsets(_ context.Context, prefix, group string, shards []int) ([]metrics.ShardOffset, error) {
	statuses, ok := f[group]
	if !ok {
		return nil, context.DeadlineExceeded
	}
	out := make([]metrics.ShardOffset, len(shards))
	for i, s := range shards {
		out[i] = metrics.ShardOffset{ShardIndex: s, LagStatus: statuses[s]}
		if s != 1 {
			lag, pending := 1.5*float64(s), 3*float64(s)
			out[i].LagSeconds, out[i].OldestPendingSeconds = &lag, &pending
		}
	}
	return out, nil
}

// TestMetricsLagSeconds: the shards' ages as refreshed (absent when unknown,
// not 0) and each group's lag status, its worst shard's, encoded 0 to 3; a
// group whose shards could not be read has no status series.
func TestMetricsLagSeconds(t *testing.T) {
	groups := map[string]struct {
		statuses []string
		want     float64
	}{
		"ok":    {[]string{wire.LagStatusOK, wire.LagStatusOK, wire.LagStatusOK}, 0},
		"warn":  {[]string{wire.LagStatusOK, wire.LagStatusWarn, wire.LagStatusOK}, 1},
		"stall": {[]string{wire.LagStatusWarn, wire.LagStatusOK, wire.LagStatusStall}, 2},
		"stop":  {[]string{wire.LagStatusStall, wire.LagStatusStop, wire.LagStatusWarn}, 3},
	}
	offs := lagOffsets{}
	for g, c := range groups {
		offs[g] = c.statuses
	}
	met := metrics.New(metrics.Config{Interval: -1, Logger: zerolog.Nop()})
	coord := coordinator.New(coordinator.Config{DisableProvisioning: true, Logger: zerolog.Nop()}, events.NewMemLog(), nil, nil, nil)
	met.Watch(coord, offs)
	if err := coord.Load(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	coord.Run()
	t.Cleanup(coord.Close)
	three := 3
	for _, g := range []string{"ok", "warn", "stall", "stop", "unreadable"} {
		if _, err := coord.Service.CreateGroup(context.Background(), events.Meta{}, commands.CreateGroupInput{StreamPrefix: "p", ConsumerGroup: g, InitialShardCount: &three, RequestedBy: "t", Reason: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	met.Refresh(context.Background())
	reg := met.Registry()
	for g, c := range groups {
		labels := map[string]string{"stream_prefix": "p", "consumer_group": g}
		mustValue(t, reg, "rsc_group_lag_status", labels, c.want)
		mustValue(t, reg, "rsc_shard_lag_seconds", shard(labels, 0), 0)
		mustValue(t, reg, "rsc_shard_lag_seconds", shard(labels, 2), 3)
		mustValue(t, reg, "rsc_shard_oldest_pending_seconds", shard(labels, 2), 6)
		mustAbsent(t, reg, "rsc_shard_lag_seconds", shard(labels, 1))
		mustAbsent(t, reg, "rsc_shard_oldest_pending_seconds", shard(labels, 1))
	}
	mustAbsent(t, reg, "rsc_group_lag_status", map[string]string{"stream_prefix": "p", "consumer_group": "unreadable"})
}
