package main

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
)

// The benchmarks' coordinators: built, loaded and run in this process, on a
// log in Redis (or in memory), served over HTTP on a loopback port.

// runCoordinator builds a coordinator on l, loads the log and runs it; the
// caller closes it.
func runCoordinator(ctx context.Context, cfg coordinator.Config, l events.Log, shards coordinator.ShardStore, snaps coordinator.SnapshotStore, clock coordinator.Clock) (*coordinator.Coordinator, error) {
	c := coordinator.New(cfg, l, shards, snaps, clock)
	if err := c.Load(ctx, false); err != nil {
		return nil, err
	}
	c.Run()
	return c, nil
}

// runRedisCoordinator runs a coordinator (see runCoordinator) on a new log
// in the run's namespace, called name, with its snapshot store and the run's
// Redis for provisioning. Every key it writes is tracked for cleanup once
// done is called (older snapshots are named by their ids: they are known
// only then).
func (b *bench) runRedisCoordinator(ctx context.Context, name string, cfg coordinator.Config) (c *coordinator.Coordinator, rlog *redisstore.Log, done func(), err error) {
	rdb := b.st.rdb
	logKey := b.st.key(name)
	snaps := redisstore.NewSnapshotStore(rdb, logKey)
	b.st.track(snaps.Key(), snaps.IDsKey())
	trackSnapshots := func() {
		if keys, err := snaps.Keys(context.WithoutCancel(ctx)); err == nil {
			b.st.track(keys...)
		}
	}
	rlog = redisstore.NewLog(rdb, logKey)
	b.st.trackLog(rlog)
	if c, err = runCoordinator(ctx, cfg, rlog, redisstore.NewShards(rdb), snaps, nil); err != nil {
		trackSnapshots()
		return nil, nil, nil, err
	}
	return c, rlog, func() {
		c.Close()
		trackSnapshots()
	}, nil
}

// serveRedisCoordinator is runRedisCoordinator with c's HTTP API served
// (serveAPI); done closes the server, then the coordinator.
func (b *bench) serveRedisCoordinator(ctx context.Context, name string, cfg coordinator.Config) (c *coordinator.Coordinator, rlog *redisstore.Log, srv *httpapi.Server, done func(), err error) {
	c, rlog, stop, err := b.runRedisCoordinator(ctx, name, cfg)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if srv, err = serveAPI(c); err != nil {
		stop()
		return nil, nil, nil, nil, err
	}
	return c, rlog, srv, func() {
		_ = srv.Close(context.WithoutCancel(ctx))
		stop()
	}, nil
}

// serveAPI serves c's HTTP API on a loopback port to the benchmark's users
// (benchAuth); the caller closes the server.
func serveAPI(c *coordinator.Coordinator) (*httpapi.Server, error) {
	srv := httpapi.NewServer(httpapi.Config{Addr: "127.0.0.1:0", Logger: zerolog.Nop(), Auth: benchAuth}, httpapi.PartsOf(c), nil)
	if err := srv.Open(); err != nil {
		return nil, err
	}
	return srv, nil
}

// createGroup creates the group k with shards shards, as rscbench.
func createGroup(ctx context.Context, c *coordinator.Coordinator, k projection.GroupKey, shards int, reason string) error {
	if _, err := c.CreateGroup(ctx, events.Meta{Actor: "rscbench"}, commands.CreateGroupInput{
		StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, InitialShardCount: &shards, RequestedBy: "rscbench", Reason: reason,
	}); err != nil {
		return fmt.Errorf("create group %s/%s: %w", k.StreamPrefix, k.ConsumerGroup, err)
	}
	return nil
}
