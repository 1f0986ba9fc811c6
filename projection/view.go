package projection

import (
	"sort"
	"time"

	"github.com/rscoord/rsc/events"
)

// The views below are the wire shapes of the contract (GroupResponse, Migration,
// AssignmentsResponse), built from the projection alone. The API and the replay
// tool both render them, so "what the coordinator believed then" looks the same
// as "what it believes now".

// ShardRef is the wire form of a shard: {"shardIndex": n}.
type ShardRef struct {
	ShardIndex int `json:"shardIndex"`
}

// Shards converts indexes to their wire form (never nil).
func Shards(idx []int) []ShardRef {
	out := make([]ShardRef, 0, len(idx))
	for _, i := range SortedInts(idx) {
		out = append(out, ShardRef{ShardIndex: i})
	}
	return out
}

// GroupView is the contract's GroupResponse plus our additions (assignableShardCount,
// activeReshardingPhase).
type GroupView struct {
	StreamPrefix             string          `json:"streamPrefix"`
	ConsumerGroup            string          `json:"consumerGroup"`
	State                    string          `json:"state"`
	GroupEpoch               int64           `json:"groupEpoch"`
	AssignmentEpoch          int64           `json:"assignmentEpoch"`
	MetadataVersion          int64           `json:"metadataVersion"`
	ShardCount               int             `json:"shardCount"`
	AssignableShardCount     int             `json:"assignableShardCount"`
	ActiveResharding         *ReshardingView `json:"activeMigration"`
	ActiveReshardingPhase    *string         `json:"activeReshardingPhase"`
	TargetAssignmentSummary  map[string]int  `json:"targetAssignmentSummary"`
	CurrentAssignmentSummary map[string]int  `json:"currentAssignmentSummary"`
	CreatedAt                time.Time       `json:"createdAt"`
	UpdatedAt                time.Time       `json:"updatedAt"`
}

// ViewGroup renders a group.
func ViewGroup(g *Group) GroupView {
	v := GroupView{
		StreamPrefix: g.Key.StreamPrefix, ConsumerGroup: g.Key.ConsumerGroup,
		State: g.State(), GroupEpoch: g.GroupEpoch, AssignmentEpoch: g.AssignmentEpoch,
		MetadataVersion: g.MetadataVersion, ShardCount: g.ShardCount, AssignableShardCount: g.AssignableCount,
		TargetAssignmentSummary: map[string]int{}, CurrentAssignmentSummary: map[string]int{},
		CreatedAt: g.CreatedAt.UTC(), UpdatedAt: g.UpdatedAt.UTC(),
	}
	if m := g.Active(); m != nil {
		mv := ViewResharding(g, m)
		v.ActiveResharding = &mv
		phase := mv.Phase
		v.ActiveReshardingPhase = &phase
	}
	for _, id := range g.LiveMemberIDs() {
		v.TargetAssignmentSummary[id] = len(g.Targets[id])
	}
	for id, m := range g.Members {
		if m.CanHold() && len(m.Current) > 0 {
			v.CurrentAssignmentSummary[id] = len(m.Current)
		}
	}
	return v
}

// ReshardingView is the contract's Migration plus the monitoring the design asks for.
type ReshardingView struct {
	ReshardingID   string    `json:"reshardingId"`
	FromShardCount int       `json:"fromShardCount"`
	ToShardCount   int       `json:"toShardCount"`
	State          string    `json:"state"`
	CreatedAt      time.Time `json:"createdAt"`
	UpdatedAt      time.Time `json:"updatedAt"`

	Kind          string          `json:"kind"`
	Phase         string          `json:"phase"`
	RequestedBy   string          `json:"requestedBy"`
	Reason        string          `json:"reason"`
	StateHistory  []StateChange   `json:"stateHistory"`
	Provisioning  Provisioning    `json:"provisioning"`
	RemovedShards []ShardRef      `json:"removedShards"`
	Drain         []ShardDrainRow `json:"drain"`
	DrainProven   bool            `json:"drainProven"`
	Revoke        RevokeProgress  `json:"revokeProgress"`
	Rollback      RollbackInfo    `json:"rollback"`
	Retirement    *Retirement     `json:"retirement"`
}

// Provisioning is how many shard streams of the target count exist.
type Provisioning struct {
	ProvisionedShards int    `json:"provisionedShards"`
	TotalShards       int    `json:"totalShards"`
	State             string `json:"state"`
}

// ShardDrainRow is one removed shard: Redis pending/lag per consumer group (from
// the latest evidence) and what members report.
type ShardDrainRow struct {
	Shard          ShardRef         `json:"shard"`
	StreamKey      string           `json:"streamKey"`
	Exists         bool             `json:"exists"`
	RedisPending   *int64           `json:"redisPending"`
	RedisLag       *int64           `json:"redisLag"`
	Groups         []GroupDrainView `json:"groups"`
	Owners         []string         `json:"owners"`
	MemberPending  *int64           `json:"memberReportedPending"`
	MemberAckedID  *string          `json:"memberReportedLastAckedId"`
	Drained        bool             `json:"drained"`
	EvidenceSource string           `json:"evidenceSource"`
}

// GroupDrainView is one Redis consumer group on a removed shard; lag null = unknown.
type GroupDrainView struct {
	Name    string `json:"name"`
	Pending int64  `json:"pending"`
	Lag     *int64 `json:"lag"`
}

// RevokeProgress lists members still holding removed shards.
type RevokeProgress struct {
	Holding   map[string][]ShardRef `json:"holding"`
	Remaining int                   `json:"remaining"`
	Started   bool                  `json:"started"`
}

// RollbackInfo says whether a rollback may be asked for now.
type RollbackInfo struct {
	Eligible bool   `json:"eligible"`
	Reason   string `json:"reason"`
	Policy   string `json:"policy,omitempty"`
}

// Retirement reports what happened to removed shard streams.
type Retirement struct {
	Retired    bool     `json:"retired"`
	StreamKeys []string `json:"streamKeys"`
	Kept       bool     `json:"kept"`
}

// Phase names where a resharding is, in words an operator can act on.
func Phase(g *Group, m *Resharding) string {
	switch m.State {
	case Preparing:
		return "provisioning"
	case Active:
		return "converging"
	case Draining, RollingBack:
		if m.Drained {
			return "revoking"
		}
		lo, hi := m.RemovedRange()
		if hi > lo {
			return "draining"
		}
		return "converging"
	case Deprecated, RolledBack:
		lo, hi := m.RemovedRange()
		if hi > lo && !m.Retired {
			return "retiring"
		}
		return "done"
	}
	return ""
}

// ViewResharding renders a resharding from the projection; Redis-dependent parts
// (rollback eligibility of a scale-out, live evidence) are refined by commands.
func ViewResharding(g *Group, m *Resharding) ReshardingView {
	v := ReshardingView{
		ReshardingID: m.ReshardingID, FromShardCount: m.From, ToShardCount: m.To, State: m.State,
		CreatedAt: m.CreatedAt.UTC(), UpdatedAt: m.UpdatedAt.UTC(),
		RequestedBy: m.RequestedBy, Reason: m.Reason, Phase: Phase(g, m),
		StateHistory: append([]StateChange{}, m.History...),
		Provisioning: Provisioning{ProvisionedShards: m.ProvisionedShards, TotalShards: m.To, State: "PENDING"},
		Drain:        []ShardDrainRow{},
		Revoke:       RevokeProgress{Holding: map[string][]ShardRef{}},
	}
	for i := range v.StateHistory {
		v.StateHistory[i].At = v.StateHistory[i].At.UTC()
	}
	switch {
	case m.To > m.From:
		v.Kind = "SCALE_OUT"
	case m.To < m.From:
		v.Kind = "SCALE_IN"
	default:
		v.Kind = "NOOP"
	}
	if m.ProvisionedShards >= m.To {
		v.Provisioning.State = "COMPLETE"
	}
	lo, hi := m.RemovedRange()
	var removed []int
	for i := lo; i < hi; i++ {
		removed = append(removed, i)
	}
	v.RemovedShards = Shards(removed)
	evidence := map[int]events.ShardDrain{}
	for _, e := range m.Evidence {
		evidence[e.ShardIndex] = e
	}
	for _, s := range removed {
		row := ShardDrainRow{Shard: ShardRef{s}, StreamKey: g.Key.StreamPrefix + ":" + itoa(s), Owners: []string{}, Groups: []GroupDrainView{}, EvidenceSource: "none"}
		if e, ok := evidence[s]; ok {
			FillDrainRow(&row, e)
			row.EvidenceSource = "log"
		}
		for _, id := range g.MemberIDs() {
			if g.Members[id].Holds(s) {
				row.Owners = append(row.Owners, id)
			}
		}
		v.Drain = append(v.Drain, row)
	}
	v.DrainProven = m.Drained || (m.Terminal() && len(removed) > 0)
	if m.Drained || m.Terminal() {
		v.Revoke.Started = len(removed) > 0
	}
	for _, id := range g.MemberIDs() {
		mem := g.Members[id]
		var held []int
		for _, s := range removed {
			if mem.Holds(s) {
				held = append(held, s)
			}
		}
		if len(held) > 0 {
			v.Revoke.Holding[id] = Shards(held)
			v.Revoke.Remaining += len(held)
		}
	}
	v.Rollback = StaticRollbackInfo(g, m)
	if m.Terminal() && hi > lo {
		v.Retirement = &Retirement{Retired: m.Retired, StreamKeys: append([]string{}, m.RetiredKeys...), Kept: m.RetiredKept}
	}
	return v
}

// FillDrainRow copies Redis evidence into a drain row.
func FillDrainRow(row *ShardDrainRow, e events.ShardDrain) {
	row.Exists = e.Exists
	row.Groups = []GroupDrainView{}
	var pending, lag int64
	lagKnown := true
	for _, gd := range e.Groups {
		gv := GroupDrainView{Name: gd.Name, Pending: gd.Pending}
		pending += gd.Pending
		if gd.Lag >= 0 {
			l := gd.Lag
			gv.Lag = &l
			lag += gd.Lag
		} else {
			lagKnown = false
		}
		row.Groups = append(row.Groups, gv)
	}
	row.RedisPending = &pending
	if lagKnown {
		row.RedisLag = &lag
	} else {
		row.RedisLag = nil
	}
	row.Drained = ShardDrained(e)
}

// ShardDrained is the drain rule: the stream is gone, or every consumer group on
// it has pending 0 and a known lag of 0.
func ShardDrained(e events.ShardDrain) bool {
	if !e.Exists {
		return true
	}
	for _, gd := range e.Groups {
		if gd.Pending != 0 || gd.Lag != 0 {
			return false
		}
	}
	return true
}

// StaticRollbackInfo is the rollback rule as far as the log can tell; a scale-out
// additionally needs Redis to show no entry reached a new shard.
func StaticRollbackInfo(g *Group, m *Resharding) RollbackInfo {
	switch {
	case m.State == RolledBack || m.State == RollingBack:
		return RollbackInfo{Eligible: false, Reason: "already rolled back (" + m.State + ")"}
	case m.State == Deprecated:
		return RollbackInfo{Eligible: false, Reason: "resharding completed (DEPRECATED); start a new resharding instead"}
	case g.ActiveResharding != m.ReshardingID:
		return RollbackInfo{Eligible: false, Reason: "not the group's active resharding"}
	case m.To < m.From:
		return RollbackInfo{Eligible: true, Reason: "scale-in not retired yet: removed shards return to routing", Policy: "metadata"}
	case m.State == Preparing:
		return RollbackInfo{Eligible: true, Reason: "not activated yet", Policy: "metadata"}
	default:
		return RollbackInfo{Eligible: true, Reason: "scale-out: eligible while no entry reached a new shard (checked against Redis on request)", Policy: "metadata"}
	}
}

// AssignmentsView is the contract's AssignmentsResponse.
type AssignmentsView struct {
	TargetAssignment    map[string][]ShardRef `json:"targetAssignment"`
	CurrentAssignments  map[string][]ShardRef `json:"currentAssignments"`
	GrantedAssignments  map[string][]ShardRef `json:"grantedAssignments"`
	RevokeProgress      map[string][]ShardRef `json:"revokeProgress"`
	PendingAssignments  map[string][]ShardRef `json:"pendingAssignments"`
	InvariantViolations []string              `json:"invariantViolations"`
}

// ViewAssignments renders target, current and revoking sets and checks invariants.
func ViewAssignments(g *Group) AssignmentsView {
	v := AssignmentsView{
		TargetAssignment: map[string][]ShardRef{}, CurrentAssignments: map[string][]ShardRef{},
		GrantedAssignments: map[string][]ShardRef{}, RevokeProgress: map[string][]ShardRef{},
		PendingAssignments: map[string][]ShardRef{}, InvariantViolations: []string{},
	}
	live := g.LiveMemberIDs()
	for _, id := range live {
		v.TargetAssignment[id] = Shards(g.Targets[id])
		_, pending := g.Grantable(id)
		if len(pending) > 0 {
			v.PendingAssignments[id] = Shards(pending)
		}
	}
	for _, id := range g.MemberIDs() {
		m := g.Members[id]
		v.CurrentAssignments[id] = Shards(m.Current)
		if m.CanHold() && len(m.Granted) > 0 {
			v.GrantedAssignments[id] = Shards(m.Granted)
		}
		if len(m.Revoking) > 0 {
			v.RevokeProgress[id] = Shards(m.Revoking)
		}
	}
	owners := map[int][]string{}
	for id, t := range g.Targets {
		if _, ok := g.Members[id]; !ok || !g.Members[id].Live() {
			v.InvariantViolations = append(v.InvariantViolations, "target assignment references unknown member "+id)
		}
		for _, s := range t {
			owners[s] = append(owners[s], id)
		}
	}
	if len(live) > 0 {
		for s := 0; s < g.AssignableCount; s++ {
			switch o := owners[s]; {
			case len(o) == 0:
				v.InvariantViolations = append(v.InvariantViolations, "readable shard ShardId(shardIndex="+itoa(s)+") has no target owner")
			case len(o) > 1:
				sort.Strings(o)
				v.InvariantViolations = append(v.InvariantViolations, "readable shard ShardId(shardIndex="+itoa(s)+") has duplicate target owners "+joinIDs(o))
			}
		}
		if g.AssignmentEpoch != g.GroupEpoch {
			v.InvariantViolations = append(v.InvariantViolations, "assignmentEpoch "+itoa64(g.AssignmentEpoch)+" does not match groupEpoch "+itoa64(g.GroupEpoch))
		}
	}
	// Our stronger invariant: no shard held by two members at once.
	holders := map[int][]string{}
	for _, id := range g.MemberIDs() {
		m := g.Members[id]
		if !m.CanHold() {
			continue
		}
		for _, s := range SortedInts(append(append(append([]int{}, m.Current...), m.Revoking...), m.Granted...)) {
			holders[s] = append(holders[s], id)
		}
	}
	idx := make([]int, 0, len(holders))
	for s := range holders {
		idx = append(idx, s)
	}
	sort.Ints(idx)
	for _, s := range idx {
		if len(holders[s]) > 1 {
			v.InvariantViolations = append(v.InvariantViolations, "shard "+itoa(s)+" held by more than one member "+joinIDs(holders[s]))
		}
	}
	return v
}

func joinIDs(ids []string) string {
	out := "["
	for i, id := range ids {
		if i > 0 {
			out += ", "
		}
		out += id
	}
	return out + "]"
}

func itoa(i int) string     { return itoa64(int64(i)) }
func itoa64(i int64) string { return formatInt(i) }
