package commands

import (
	"sync"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// What lives only in memory (and why): leases and rebalance deadlines are timers,
// re-armed for every member when the coordinator starts from the log; consumption
// progress, available concurrency and the metadata version a member last reported
// are re-reported with every heartbeat; the metadata-correction round is reopened
// by the next member that reports a newer metadata version; Redis drain evidence
// is re-read every tick. None of it is needed to rebuild a decision from the log.

// ShardProgress is a member's consumption progress on one shard (monitoring only).
type ShardProgress struct {
	Shard           ShardID    `json:"shard"`
	StreamKey       string     `json:"streamKey"`
	LastDeliveredID *string    `json:"lastDeliveredId"`
	LastAckedID     *string    `json:"lastAckedId"`
	PendingCount    int64      `json:"pendingCount"`
	UpdatedAt       *time.Time `json:"updatedAt"`
}

// ShardID is the wire form of a shard index.
type ShardID struct {
	ShardIndex int `json:"shardIndex"`
}

type memberRuntime struct {
	leaseExpiresAt    time.Time
	lastHeartbeatAt   time.Time
	rebalanceDeadline time.Time
	reportedMV        int64
	available         int
	progress          []ShardProgress
	epoch             int64 // the member epoch the last accepted heartbeat was answered with
}

type correctionRound struct {
	targetMV int64
	acked    map[string]bool
	openedAt time.Time // the round ends by fencing at openedAt + RebalanceTimeout
}

type groupRuntime struct {
	members    map[string]*memberRuntime
	correction *correctionRound
	evidence   []events.ShardDrain
	evidenceAt time.Time
	// quarantined holds, per "m:<member id>" and "p:<principal>", until when a
	// member fenced by an overdue correction round may not open another.
	quarantined map[string]time.Time
}

// maxQuarantined bounds a group's quarantine list (the oldest entry goes).
const maxQuarantined = 1024

// quarantine records that member id (and its principal, if any) may not open
// a correction round until until.
func (g *groupRuntime) quarantine(id, principal string, until time.Time) {
	if g.quarantined == nil {
		g.quarantined = map[string]time.Time{}
	}
	for _, key := range []string{"m:" + id, "p:" + principal} {
		if key == "p:" {
			continue
		}
		if len(g.quarantined) >= maxQuarantined {
			oldest := ""
			for k, t := range g.quarantined {
				if oldest == "" || t.Before(g.quarantined[oldest]) {
					oldest = k
				}
			}
			delete(g.quarantined, oldest)
		}
		g.quarantined[key] = until
	}
}

// isQuarantined reports whether member id or its principal may not open a
// correction round at now (and forgets entries that lapsed).
func (g *groupRuntime) isQuarantined(id, principal string, now time.Time) bool {
	hit := false
	for key, until := range g.quarantined {
		if !now.Before(until) {
			delete(g.quarantined, key)
			continue
		}
		if key == "m:"+id || (principal != "" && key == "p:"+principal) {
			hit = true
		}
	}
	return hit
}

type runtimeState struct {
	mu     sync.Mutex
	groups map[projection.GroupKey]*groupRuntime
}

func newRuntimeState() *runtimeState {
	return &runtimeState{groups: map[projection.GroupKey]*groupRuntime{}}
}

// group returns the runtime of a group; the caller holds rt.mu.
func (r *runtimeState) group(k projection.GroupKey) *groupRuntime {
	g := r.groups[k]
	if g == nil {
		g = &groupRuntime{members: map[string]*memberRuntime{}}
		r.groups[k] = g
	}
	return g
}

// member returns a member's runtime, arming a lease from now if the member was
// never seen by this process (joined before a restart or via another coordinator).
func (r *runtimeState) member(k projection.GroupKey, id string, now time.Time, lease time.Duration) *memberRuntime {
	g := r.group(k)
	m := g.members[id]
	if m == nil {
		m = &memberRuntime{leaseExpiresAt: now.Add(lease), lastHeartbeatAt: now}
		g.members[id] = m
	}
	return m
}

// rearm gives every live or leaving member a fresh lease after a load: the
// coordinator cannot know when it last heard from them.
func (c *Coordinator) rearm() {
	now := c.now()
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	c.rt.groups = map[projection.GroupKey]*groupRuntime{}
	for _, g := range c.state.Groups() {
		for _, id := range g.MemberIDs() {
			c.rt.member(g.Key, id, now, c.cfg.MemberLease)
		}
	}
}

// MemberRuntime is the in-memory view of a member for monitoring.
type MemberRuntime struct {
	LeaseExpiresAt    time.Time
	LastHeartbeatAt   time.Time
	RebalanceDeadline *time.Time
	ReportedMV        int64
	Available         int
	Progress          []ShardProgress
	// Epoch is the member epoch the last accepted heartbeat was answered with
	// (0 when none since this process started).
	Epoch int64
}

// MemberRuntimes returns the in-memory state of every member of a group.
func (c *Coordinator) MemberRuntimes(k projection.GroupKey) map[string]MemberRuntime {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	out := map[string]MemberRuntime{}
	g := c.rt.groups[k]
	if g == nil {
		return out
	}
	for id, m := range g.members {
		mr := MemberRuntime{LeaseExpiresAt: m.leaseExpiresAt, LastHeartbeatAt: m.lastHeartbeatAt, ReportedMV: m.reportedMV, Available: m.available, Progress: append([]ShardProgress(nil), m.progress...), Epoch: m.epoch}
		if !m.rebalanceDeadline.IsZero() {
			d := m.rebalanceDeadline
			mr.RebalanceDeadline = &d
		}
		out[id] = mr
	}
	return out
}

// DrainEvidence returns the last Redis evidence read for the group's removed
// shards, and when it was read.
func (c *Coordinator) DrainEvidence(k projection.GroupKey) ([]events.ShardDrain, time.Time) {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	g := c.rt.groups[k]
	if g == nil {
		return nil, time.Time{}
	}
	return append([]events.ShardDrain(nil), g.evidence...), g.evidenceAt
}

// CorrectionOpen reports whether a metadata-correction round is open for the group.
func (c *Coordinator) CorrectionOpen(k projection.GroupKey) bool {
	c.rt.mu.Lock()
	defer c.rt.mu.Unlock()
	g := c.rt.groups[k]
	return g != nil && g.correction != nil
}
