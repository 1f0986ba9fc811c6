package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// The admin and monitoring calls below are for operators, tools and tests.
// Producers and members never call them: a member learns everything it needs
// through heartbeats, and never creates or changes group metadata.

// Group is the coordinator's view of a group (GroupResponse).
type Group struct {
	StreamPrefix             string         `json:"streamPrefix"`
	ConsumerGroup            string         `json:"consumerGroup"`
	State                    string         `json:"state"`
	GroupEpoch               int64          `json:"groupEpoch"`
	AssignmentEpoch          int64          `json:"assignmentEpoch"`
	MetadataVersion          int64          `json:"metadataVersion"`
	ShardCount               int            `json:"shardCount"`
	AssignableShardCount     int            `json:"assignableShardCount"`
	ActiveMigration          *Migration     `json:"activeMigration"`
	TargetAssignmentSummary  map[string]int `json:"targetAssignmentSummary"`
	CurrentAssignmentSummary map[string]int `json:"currentAssignmentSummary"`
}

// Migration is a resharding (the contract's Migration plus monitoring fields).
type Migration struct {
	ReshardingID   string    `json:"reshardingId"`
	FromShardCount int       `json:"fromShardCount"`
	ToShardCount   int       `json:"toShardCount"`
	State          string    `json:"state"`
	Phase          string    `json:"phase"`
	CreatedAt      time.Time `json:"createdAt"`
	UpdatedAt      time.Time `json:"updatedAt"`
	DrainProven    bool      `json:"drainProven"`
}

// Terminal reports whether the resharding finished (completed or rolled back).
func (m Migration) Terminal() bool { return m.State == "DEPRECATED" || m.State == "ROLLED_BACK" }

// Migrations lists a group's reshardings.
type Migrations struct {
	Migrations         []Migration `json:"migrations"`
	ActiveReshardingID *string     `json:"activeReshardingId"`
}

// Assignments is the monitoring view of who should read and who reads what.
type Assignments struct {
	TargetAssignment    map[string][]Shard `json:"targetAssignment"`
	CurrentAssignments  map[string][]Shard `json:"currentAssignments"`
	RevokeProgress      map[string][]Shard `json:"revokeProgress"`
	PendingAssignments  map[string][]Shard `json:"pendingAssignments"`
	InvariantViolations []string           `json:"invariantViolations"`
}

// Member is the monitoring view of one member.
type Member struct {
	MemberID          string          `json:"memberId"`
	MemberName        string          `json:"memberName"`
	State             string          `json:"state"`
	MemberEpoch       int64           `json:"memberEpoch"`
	CurrentAssignment []Shard         `json:"currentAssignment"`
	Revoking          []Shard         `json:"revoking"`
	LastHeartbeatAt   time.Time       `json:"lastHeartbeatAt"`
	ShardProgress     []ShardProgress `json:"shardProgress"`
}

// CreateGroup creates a group with initialShardCount shards (0: the
// coordinator's default): POST /coord/v1/streams/{p}/groups/{g}.
func (c *Coordinator) CreateGroup(ctx context.Context, streamPrefix, consumerGroup string, initialShardCount int, requestedBy string) (*Group, error) {
	body := map[string]any{"requestedBy": requestedBy}
	if initialShardCount > 0 {
		body["initialShardCount"] = initialShardCount
	}
	var g Group
	if err := c.Do(ctx, http.MethodPost, GroupPath(streamPrefix, consumerGroup), body, &g); err != nil {
		return nil, fmt.Errorf("create group %s/%s: %w", streamPrefix, consumerGroup, err)
	}
	return &g, nil
}

// Scale starts a resharding of one group to targetShardCount:
// POST /coord/v1/streams/{p}/groups/{g}/scale.
func (c *Coordinator) Scale(ctx context.Context, streamPrefix, consumerGroup string, targetShardCount int, requestedBy, reason string) (*Migration, error) {
	body := map[string]any{"targetShardCount": targetShardCount, "requestedBy": requestedBy, "reason": reason}
	var m Migration
	if err := c.Do(ctx, http.MethodPost, GroupPath(streamPrefix, consumerGroup)+"/scale", body, &m); err != nil {
		return nil, fmt.Errorf("scale %s/%s to %d: %w", streamPrefix, consumerGroup, targetShardCount, err)
	}
	return &m, nil
}

// Group reads a group: GET /coord/v1/streams/{p}/groups/{g}.
func (c *Coordinator) Group(ctx context.Context, streamPrefix, consumerGroup string) (*Group, error) {
	var g Group
	if err := c.Do(ctx, http.MethodGet, GroupPath(streamPrefix, consumerGroup), nil, &g); err != nil {
		return nil, fmt.Errorf("get group %s/%s: %w", streamPrefix, consumerGroup, err)
	}
	return &g, nil
}

// Migrations lists a group's reshardings: GET .../groups/{g}/migrations.
func (c *Coordinator) Migrations(ctx context.Context, streamPrefix, consumerGroup string) (*Migrations, error) {
	var m Migrations
	if err := c.Do(ctx, http.MethodGet, GroupPath(streamPrefix, consumerGroup)+"/migrations", nil, &m); err != nil {
		return nil, fmt.Errorf("list migrations of %s/%s: %w", streamPrefix, consumerGroup, err)
	}
	return &m, nil
}

// Migration reads one resharding: GET .../groups/{g}/migrations/{id}.
func (c *Coordinator) Migration(ctx context.Context, streamPrefix, consumerGroup, reshardingID string) (*Migration, error) {
	var m Migration
	path := GroupPath(streamPrefix, consumerGroup) + "/migrations/" + url.PathEscape(reshardingID)
	if err := c.Do(ctx, http.MethodGet, path, nil, &m); err != nil {
		return nil, fmt.Errorf("get migration %s: %w", reshardingID, err)
	}
	return &m, nil
}

// Assignments reads the target and current assignments of a group:
// GET /coord/v1/monitoring/streams/{p}/groups/{g}/assignments.
func (c *Coordinator) Assignments(ctx context.Context, streamPrefix, consumerGroup string) (*Assignments, error) {
	var a Assignments
	if err := c.Do(ctx, http.MethodGet, monitoringGroupPath(streamPrefix, consumerGroup)+"/assignments", nil, &a); err != nil {
		return nil, fmt.Errorf("assignments of %s/%s: %w", streamPrefix, consumerGroup, err)
	}
	return &a, nil
}

// Members lists the members of a group:
// GET /coord/v1/monitoring/streams/{p}/groups/{g}/members.
func (c *Coordinator) Members(ctx context.Context, streamPrefix, consumerGroup string) ([]Member, error) {
	var resp struct {
		Members []Member `json:"members"`
	}
	if err := c.Do(ctx, http.MethodGet, monitoringGroupPath(streamPrefix, consumerGroup)+"/members", nil, &resp); err != nil {
		return nil, fmt.Errorf("members of %s/%s: %w", streamPrefix, consumerGroup, err)
	}
	return resp.Members, nil
}
