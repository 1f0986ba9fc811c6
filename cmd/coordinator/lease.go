package main

import (
	"context"
	"time"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/redisstore"
)

// leaderLease adapts redisstore.Lease to coordinator.LeaderLease.
type leaderLease struct{ l *redisstore.Lease }

func info(i redisstore.LeaseInfo) coordinator.LeaderInfo {
	return coordinator.LeaderInfo{Holder: i.Holder, URL: i.URL, Token: i.Token, Self: i.Self}
}

func (a leaderLease) Acquire(ctx context.Context, ttl time.Duration) (coordinator.LeaderInfo, error) {
	i, err := a.l.Acquire(ctx, ttl)
	return info(i), err
}

func (a leaderLease) Renew(ctx context.Context, ttl time.Duration) (bool, error) {
	return a.l.Renew(ctx, ttl)
}

func (a leaderLease) Release(ctx context.Context) error { return a.l.Release(ctx) }

func (a leaderLease) Leader(ctx context.Context) (coordinator.LeaderInfo, error) {
	i, err := a.l.Leader(ctx)
	return info(i), err
}
