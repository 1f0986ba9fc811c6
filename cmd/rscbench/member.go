package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
	"github.com/rscoord/rsc/wire"
)

// member is a Python-style member: it adopts the assigned set of every OK
// answer (so it stops listing dropped shards at its next heartbeat), keeps only
// what is still assigned on SYNC_METADATA or REVOKE_PENDING, and starts over on
// FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID.
type member struct {
	id     string
	prefix string
	group  string
	epoch  int64
	mv     int64
	owned  []int
	// steady: the last answer was OK with the epoch unchanged, assigned exactly
	// what the member reported, and nothing pending.
	steady bool
	fenced int
	sent   int
}

func (m *member) path() string {
	return fmt.Sprintf("/coord/v1/streams/%s/groups/%s/members/%s/heartbeat", m.prefix, m.group, m.id)
}

var progressAt = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// request is the member's next heartbeat: what it owns, with consumption progress
// for each owned shard as a consumer reports it.
func (m *member) request(leave bool) *wire.HeartbeatRequest {
	m.sent++
	pv, name, maxConc, avail := wire.ProtocolVersion, m.id, 4, 2
	epoch, mv := m.epoch, m.mv
	req := &wire.HeartbeatRequest{
		ProtocolVersion: &pv, RequestID: fmt.Sprintf("%s-%d", m.id, m.sent), MemberID: m.id, MemberName: &name,
		MemberEpoch: &epoch, MetadataVersion: &mv,
		RuntimeConsumerCapacity: &wire.Capacity{RuntimeMaxConcurrency: &maxConc, AvailableConcurrency: &avail},
		OwnedShards:             []wire.ShardRef{}, RevokingShards: []wire.RevokingReport{}, ShardProgress: []wire.ShardProgress{},
	}
	if leave {
		// A graceful leave: the member stopped reading everything before it said so.
		*req.MemberEpoch = -1
		return req
	}
	for _, s := range m.owned {
		id := "1735732800000-0"
		at := progressAt
		req.OwnedShards = append(req.OwnedShards, wire.ShardRef{ShardIndex: s})
		req.ShardProgress = append(req.ShardProgress, wire.ShardProgress{
			Shard: wire.ShardRef{ShardIndex: s}, StreamKey: routing.StreamKey(m.prefix, s),
			LastDeliveredID: &id, LastAckedID: &id, PendingCount: 0, UpdatedAt: &at,
		})
	}
	return req
}

// beat sends m's heartbeat (not a leave) to c and adopts the answer; an error
// of the heartbeat reads "<what> <member id>: ...".
func (m *member) beat(ctx context.Context, c *coordinator.Coordinator, what string) error {
	req := m.request(false)
	resp, err := c.Heartbeat(ctx, projection.GroupKey{StreamPrefix: m.prefix, ConsumerGroup: m.group}, m.id, "", req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, m.id, err)
	}
	return m.adopt(req, resp)
}

// adopt applies an answer to the heartbeat req.
func (m *member) adopt(req *wire.HeartbeatRequest, resp *wire.HeartbeatResponse) error {
	assigned := make([]int, 0, len(resp.Assignment.AssignedShards))
	for _, s := range resp.Assignment.AssignedShards {
		assigned = append(assigned, s.ShardIndex)
	}
	sort.Ints(assigned)
	reported := make([]int, 0, len(req.OwnedShards))
	for _, s := range req.OwnedShards {
		reported = append(reported, s.ShardIndex)
	}
	sort.Ints(reported)
	m.steady = false
	switch resp.Status {
	case wire.StatusOK:
		m.steady = resp.MemberEpoch == *req.MemberEpoch && slices.Equal(reported, assigned) && len(resp.Assignment.PendingShards) == 0
		m.epoch, m.mv, m.owned = resp.MemberEpoch, resp.MetadataVersion, assigned
	case wire.StatusSyncMetadata, wire.StatusRevokePending:
		m.epoch, m.mv = resp.MemberEpoch, resp.MetadataVersion
		m.owned = intersectInts(m.owned, assigned)
	case wire.StatusFenced, wire.StatusUnknownMember:
		m.epoch, m.mv, m.owned = 0, 0, nil
		m.fenced++
	default:
		return fmt.Errorf("member %s: heartbeat answered %s", m.id, resp.Status)
	}
	return nil
}

func intersectInts(a, b []int) []int {
	out := []int{}
	for _, x := range a {
		for _, y := range b {
			if x == y {
				out = append(out, x)
				break
			}
		}
	}
	return out
}
