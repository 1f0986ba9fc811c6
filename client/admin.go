package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/rscoord/rsc/wire"
)

// The admin and monitoring calls below are for operators, tools and tests.
// Producers and members never call them: a member learns everything it needs
// through heartbeats, and never creates or changes group metadata.

type (
	// Group is the coordinator's view of a group (GroupResponse).
	Group = wire.Group
	// Migration is a resharding (the contract's Migration plus monitoring fields).
	Migration = wire.Resharding
	// Migrations lists a group's reshardings.
	Migrations = wire.ReshardingsResponse
	// Assignments is the monitoring view of who should read and who reads what.
	Assignments = wire.Assignments
	// Member is the monitoring view of one member.
	Member = wire.MemberMetadata
)

// call is Do for a call that answers a T; an error says what failed
// (format and args, as for fmt.Errorf).
func call[T any](ctx context.Context, c *Client, method, path string, body any, format string, args ...any) (*T, error) {
	var v T
	if err := c.Do(ctx, method, path, body, &v); err != nil {
		return nil, fmt.Errorf(format+": %w", append(args, err)...)
	}
	return &v, nil
}

// CreateGroup creates a group with initialShardCount shards (0: the
// coordinator's default): POST /coord/v1/streams/{p}/groups/{g}.
func (c *Client) CreateGroup(ctx context.Context, streamPrefix, consumerGroup string, initialShardCount int, requestedBy string) (*Group, error) {
	body := wire.CreateRequest{RequestedBy: requestedBy}
	if initialShardCount > 0 {
		body.InitialShardCount = &initialShardCount
	}
	return c.CreateGroupWith(ctx, streamPrefix, consumerGroup, body)
}

// CreateGroupWith is CreateGroup with the whole request (reason, ordering).
func (c *Client) CreateGroupWith(ctx context.Context, streamPrefix, consumerGroup string, req wire.CreateRequest) (*Group, error) {
	return call[Group](ctx, c, http.MethodPost, GroupPath(streamPrefix, consumerGroup), req, "create group %s/%s", streamPrefix, consumerGroup)
}

// Scale starts a resharding of one group to targetShardCount:
// POST /coord/v1/streams/{p}/groups/{g}/scale.
func (c *Client) Scale(ctx context.Context, streamPrefix, consumerGroup string, targetShardCount int, requestedBy, reason string) (*Migration, error) {
	body := wire.ScaleRequest{TargetShardCount: &targetShardCount, RequestedBy: requestedBy, Reason: reason}
	return call[Migration](ctx, c, http.MethodPost, GroupPath(streamPrefix, consumerGroup)+"/scale", body, "scale %s/%s to %d", streamPrefix, consumerGroup, targetShardCount)
}

// Rollback rolls a resharding back:
// POST /coord/v1/streams/{p}/groups/{g}/migrations/{id}/rollback.
func (c *Client) Rollback(ctx context.Context, streamPrefix, consumerGroup, reshardingID string, req wire.RollbackRequest) (*Migration, error) {
	path := GroupPath(streamPrefix, consumerGroup) + "/migrations/" + url.PathEscape(reshardingID) + "/rollback"
	return call[Migration](ctx, c, http.MethodPost, path, req, "roll back %s", reshardingID)
}

// RestoreLog writes the state the coordinator holds back to an event log
// that lost it (/readyz LOG_LOST): POST /coord/v1/log/restore (ADMIN). A
// follower forwards it to the leader.
func (c *Client) RestoreLog(ctx context.Context, req wire.LogRestoreRequest) (*wire.LogRestoreResponse, error) {
	return call[wire.LogRestoreResponse](ctx, c, http.MethodPost, "/coord/v1/log/restore", req, "restore the event log")
}

// SetOrdering switches a group's ordering:
// PUT /coord/v1/streams/{p}/groups/{g}/ordering.
func (c *Client) SetOrdering(ctx context.Context, streamPrefix, consumerGroup string, req wire.OrderingRequest) (*Group, error) {
	return call[Group](ctx, c, http.MethodPut, GroupPath(streamPrefix, consumerGroup)+"/ordering", req, "set the ordering of %s/%s", streamPrefix, consumerGroup)
}

// Autoscaling reads a group's autoscaling policy and the autoscaler's latest
// evaluation: GET /coord/v1/streams/{p}/groups/{g}/autoscaling.
func (c *Client) Autoscaling(ctx context.Context, streamPrefix, consumerGroup string) (*wire.AutoscalingResponse, error) {
	return c.autoscaling(ctx, http.MethodGet, streamPrefix, consumerGroup, nil)
}

// SetAutoscaling stores a group's autoscaling policy:
// PUT /coord/v1/streams/{p}/groups/{g}/autoscaling.
func (c *Client) SetAutoscaling(ctx context.Context, streamPrefix, consumerGroup string, req wire.AutoscalingRequest) (*wire.AutoscalingResponse, error) {
	return c.autoscaling(ctx, http.MethodPut, streamPrefix, consumerGroup, req)
}

// DisableAutoscaling turns a group's autoscaling off:
// DELETE /coord/v1/streams/{p}/groups/{g}/autoscaling.
func (c *Client) DisableAutoscaling(ctx context.Context, streamPrefix, consumerGroup string, req wire.AutoscalingDeleteRequest) (*wire.AutoscalingResponse, error) {
	return c.autoscaling(ctx, http.MethodDelete, streamPrefix, consumerGroup, req)
}

func (c *Client) autoscaling(ctx context.Context, method, streamPrefix, consumerGroup string, body any) (*wire.AutoscalingResponse, error) {
	return call[wire.AutoscalingResponse](ctx, c, method, GroupPath(streamPrefix, consumerGroup)+"/autoscaling", body, "autoscaling of %s/%s", streamPrefix, consumerGroup)
}

// Groups lists every group: GET /coord/v1/monitoring/groups.
func (c *Client) Groups(ctx context.Context) (*wire.GroupsResponse, error) {
	return call[wire.GroupsResponse](ctx, c, http.MethodGet, basePath+"/monitoring/groups", nil, "list groups")
}

// Events pages a group's audit history: up to limit events after after (""
// from the start): GET /coord/v1/monitoring/streams/{p}/groups/{g}/events.
func (c *Client) Events(ctx context.Context, streamPrefix, consumerGroup, after string, limit int) (*wire.AuditPage, error) {
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if after != "" {
		q.Set("after", after)
	}
	return call[wire.AuditPage](ctx, c, http.MethodGet, monitoringGroupPath(streamPrefix, consumerGroup)+"/events?"+q.Encode(), nil, "events of %s/%s", streamPrefix, consumerGroup)
}

// Group reads a group: GET /coord/v1/streams/{p}/groups/{g}.
func (c *Client) Group(ctx context.Context, streamPrefix, consumerGroup string) (*Group, error) {
	return call[Group](ctx, c, http.MethodGet, GroupPath(streamPrefix, consumerGroup), nil, "get group %s/%s", streamPrefix, consumerGroup)
}

// Migrations lists a group's reshardings: GET .../groups/{g}/migrations.
func (c *Client) Migrations(ctx context.Context, streamPrefix, consumerGroup string) (*Migrations, error) {
	return call[Migrations](ctx, c, http.MethodGet, GroupPath(streamPrefix, consumerGroup)+"/migrations", nil, "list migrations of %s/%s", streamPrefix, consumerGroup)
}

// Migration reads one resharding: GET .../groups/{g}/migrations/{id}.
func (c *Client) Migration(ctx context.Context, streamPrefix, consumerGroup, reshardingID string) (*Migration, error) {
	path := GroupPath(streamPrefix, consumerGroup) + "/migrations/" + url.PathEscape(reshardingID)
	return call[Migration](ctx, c, http.MethodGet, path, nil, "get migration %s", reshardingID)
}

// Assignments reads the target and current assignments of a group:
// GET /coord/v1/monitoring/streams/{p}/groups/{g}/assignments.
func (c *Client) Assignments(ctx context.Context, streamPrefix, consumerGroup string) (*Assignments, error) {
	return call[Assignments](ctx, c, http.MethodGet, monitoringGroupPath(streamPrefix, consumerGroup)+"/assignments", nil, "assignments of %s/%s", streamPrefix, consumerGroup)
}

// Members lists the members of a group:
// GET /coord/v1/monitoring/streams/{p}/groups/{g}/members.
func (c *Client) Members(ctx context.Context, streamPrefix, consumerGroup string) ([]Member, error) {
	var resp wire.MembersResponse
	if err := c.Do(ctx, http.MethodGet, monitoringGroupPath(streamPrefix, consumerGroup)+"/members", nil, &resp); err != nil {
		return nil, fmt.Errorf("members of %s/%s: %w", streamPrefix, consumerGroup, err)
	}
	return resp.Members, nil
}
