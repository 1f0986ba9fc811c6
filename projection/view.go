package projection

import (
	"sort"
	"time"

	"github.com/rscoord/rsc/events"
)

// The views below are what the coordinator shows of a group, a resharding and
// an assignment, built from the projection alone: plain values that the HTTP
// API and the replay tool turn into their wire shapes (package wire), so "what
// the coordinator believed then" looks the same as "what it believes now".
// Shards are indexes here; their wire form is an object.

// GroupView is a group: the contract's GroupResponse plus the assignable
// shard count and timestamps.
type GroupView struct {
	StreamPrefix         string
	ConsumerGroup        string
	State                string
	GroupEpoch           int64
	AssignmentEpoch      int64
	MetadataVersion      int64
	ShardCount           int
	AssignableShardCount int
	// Ordering is "KEY" or "NONE"; Barriers the barriers that wait.
	Ordering string
	Barriers []BarrierView
	// ActiveResharding is the active resharding, nil when none.
	ActiveResharding *ReshardingView
	// TargetAssignmentSummary counts each live member's target shards;
	// CurrentAssignmentSummary each holding member's current ones.
	TargetAssignmentSummary  map[string]int
	CurrentAssignmentSummary map[string]int
	CreatedAt                time.Time
	UpdatedAt                time.Time
}

// ViewGroup renders a group.
func ViewGroup(g *Group) GroupView {
	v := GroupView{
		StreamPrefix: g.Key.StreamPrefix, ConsumerGroup: g.Key.ConsumerGroup,
		State: g.State(), GroupEpoch: g.GroupEpoch, AssignmentEpoch: g.AssignmentEpoch,
		MetadataVersion: g.MetadataVersion, ShardCount: g.ShardCount, AssignableShardCount: g.AssignableCount,
		TargetAssignmentSummary: map[string]int{}, CurrentAssignmentSummary: map[string]int{},
		CreatedAt: g.CreatedAt.UTC(), UpdatedAt: g.UpdatedAt.UTC(),
		Ordering: OrderingName(g.Ordering), Barriers: ViewBarriers(g, ""),
	}
	if m := g.Active(); m != nil {
		rv := ViewResharding(g, m)
		v.ActiveResharding = &rv
	}
	for _, id := range g.LiveMemberIDs() {
		v.TargetAssignmentSummary[id] = len(g.Target(id))
	}
	for _, m := range g.EachMember() {
		if m.CanHold() && len(m.Current) > 0 {
			v.CurrentAssignmentSummary[m.ID] = len(m.Current)
		}
	}
	return v
}

// ReshardingView is a resharding: the contract's Migration plus the
// monitoring the design asks for.
type ReshardingView struct {
	ReshardingID   string
	FromShardCount int
	ToShardCount   int
	State          string
	CreatedAt      time.Time
	UpdatedAt      time.Time

	Kind          string // SCALE_OUT, SCALE_IN or NOOP
	Phase         string // see Phase
	RequestedBy   string
	Reason        string
	StateHistory  []StateChange
	Provisioning  Provisioning
	RemovedShards []int
	Drain         []ShardDrainRow // one per removed shard
	DrainProven   bool
	Revoke        RevokeProgress
	Rollback      RollbackInfo
	Retirement    *Retirement // nil until the resharding ended with shards removed
	// Barriers are the resharding's barriers that wait (ordering KEY).
	Barriers []BarrierView
}

// BarrierView is a waiting barrier: a shard whose entries after After wait,
// since when, and on which source shards (up to their cutover ids). What
// Redis last showed of the sources is added by the API from the runtime.
type BarrierView struct {
	ReshardingID string
	Shard        int
	StreamKey    string
	After        string
	Fence        int64
	Since        time.Time
	WaitingOn    []BarrierSourceView
}

// BarrierSourceView is one source shard of a barrier; Proven and the
// pointers are the reconciler's latest read (false and nil before it).
type BarrierSourceView struct {
	Shard            int
	StreamKey        string
	CutoverID        string
	Proven           bool
	LastDeliveredID  *string
	PendingToCutover *int64
	CheckedAt        *time.Time
}

// OrderingName is a group's ordering as the API shows it: KEY or NONE.
func OrderingName(o string) string {
	if o == events.OrderingKey {
		return o
	}
	return events.OrderingNone
}

// ViewBarriers renders the group's waiting barriers, all of them or those of
// one resharding (never nil).
func ViewBarriers(g *Group, reshardingID string) []BarrierView {
	out := []BarrierView{}
	for _, b := range g.Barriers {
		if reshardingID != "" && b.ReshardingID != reshardingID {
			continue
		}
		v := BarrierView{ReshardingID: b.ReshardingID, Shard: b.Shard, StreamKey: b.StreamKey, After: b.After, Fence: b.Fence, Since: b.Since.UTC(), WaitingOn: make([]BarrierSourceView, 0, len(b.Sources))}
		for _, s := range b.Sources {
			v.WaitingOn = append(v.WaitingOn, BarrierSourceView{Shard: s.ShardIndex, StreamKey: s.StreamKey, CutoverID: s.LastID})
		}
		out = append(out, v)
	}
	return out
}

// Provisioning is how many shard streams of the target count exist; State is
// PENDING or COMPLETE.
type Provisioning struct {
	ProvisionedShards int
	TotalShards       int
	State             string
}

// ShardDrainRow is one removed shard: Redis pending and lag over its consumer
// groups (from the latest evidence; nil when unknown) and what members report.
type ShardDrainRow struct {
	Shard          int
	StreamKey      string
	Exists         bool
	RedisPending   *int64
	RedisLag       *int64
	Groups         []GroupDrain
	Owners         []string
	MemberPending  *int64
	MemberAckedID  *string
	Drained        bool
	EvidenceSource string // "none", "log", or "redis@<time>" for live evidence
	// WaitingFor names the consumer groups the drain waits for on this
	// shard: those with entries pending, left to read, or an unknown lag.
	WaitingFor []string
}

// GroupDrain is one Redis consumer group on a removed shard; a nil Lag is unknown.
type GroupDrain struct {
	Name    string
	Pending int64
	Lag     *int64
}

// RevokeProgress lists the members still holding removed shards.
type RevokeProgress struct {
	Holding   map[string][]int
	Remaining int
	Started   bool
}

// RollbackInfo says whether a rollback may be asked for now, and with which
// policy ("" when none would do).
type RollbackInfo struct {
	Eligible bool
	Reason   string
	Policy   string
}

// Retirement reports what became of removed shard streams.
type Retirement struct {
	Retired    bool
	StreamKeys []string
	Kept       bool
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

// ViewResharding renders a resharding from the projection. What only memory
// and Redis know (live drain evidence, member-reported progress, a scale-out's
// rollback eligibility) is added by the API from commands' runtime.
func ViewResharding(g *Group, m *Resharding) ReshardingView {
	v := ReshardingView{
		Barriers:     ViewBarriers(g, m.ReshardingID),
		ReshardingID: m.ReshardingID, FromShardCount: m.From, ToShardCount: m.To, State: m.State,
		CreatedAt: m.CreatedAt.UTC(), UpdatedAt: m.UpdatedAt.UTC(),
		RequestedBy: m.RequestedBy, Reason: m.Reason, Phase: Phase(g, m),
		StateHistory: append([]StateChange{}, m.History...),
		Provisioning: Provisioning{ProvisionedShards: m.ProvisionedShards, TotalShards: m.To, State: "PENDING"},
		Drain:        []ShardDrainRow{},
		Revoke:       RevokeProgress{Holding: map[string][]int{}},
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
	v.RemovedShards = SortedInts(removed)
	evidence := map[int]events.ShardDrain{}
	for _, e := range m.Evidence {
		evidence[e.ShardIndex] = e
	}
	for _, s := range removed {
		row := ShardDrainRow{Shard: s, StreamKey: g.Key.StreamPrefix + ":" + itoa(s), Owners: []string{}, Groups: []GroupDrain{}, EvidenceSource: "none", WaitingFor: []string{}}
		if e, ok := evidence[s]; ok {
			FillDrainRow(&row, e)
			row.EvidenceSource = "log"
		}
		row.Owners = append(row.Owners, g.HoldersOf(s)...)
		v.Drain = append(v.Drain, row)
	}
	v.DrainProven = m.Drained || (m.Terminal() && len(removed) > 0)
	if m.Drained || m.Terminal() {
		v.Revoke.Started = len(removed) > 0
	}
	held := map[string][]int{}
	for _, s := range removed {
		for _, id := range g.HoldersOf(s) {
			held[id] = append(held[id], s)
		}
	}
	for id, shards := range held {
		v.Revoke.Holding[id] = SortedInts(shards)
		v.Revoke.Remaining += len(shards)
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
	row.Groups = []GroupDrain{}
	row.WaitingFor = []string{}
	var pending, lag int64
	lagKnown := true
	for _, gd := range e.Groups {
		gv := GroupDrain{Name: gd.Name, Pending: gd.Pending}
		if e.Exists && (gd.Pending != 0 || gd.Lag != 0) {
			row.WaitingFor = append(row.WaitingFor, gd.Name)
		}
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

// AssignmentsView is the contract's AssignmentsResponse: shards by member id.
type AssignmentsView struct {
	TargetAssignment   map[string][]int // every live member
	CurrentAssignments map[string][]int // every member
	GrantedAssignments map[string][]int // holding members with grants
	RevokeProgress     map[string][]int // members revoking shards
	PendingAssignments map[string][]int // live members waiting for shards
	// InvariantViolations are the assignment rules the group breaks now.
	InvariantViolations []string
}

// ViewAssignments renders target, current and revoking sets and checks invariants.
func ViewAssignments(g *Group) AssignmentsView {
	v := AssignmentsView{
		TargetAssignment: map[string][]int{}, CurrentAssignments: map[string][]int{},
		GrantedAssignments: map[string][]int{}, RevokeProgress: map[string][]int{},
		PendingAssignments: map[string][]int{}, InvariantViolations: []string{},
	}
	live := g.LiveMemberIDs()
	for _, id := range live {
		v.TargetAssignment[id] = SortedInts(g.Target(id))
		_, pending := g.Grantable(id)
		if len(pending) > 0 {
			v.PendingAssignments[id] = SortedInts(pending)
		}
	}
	for _, id := range g.MemberIDs() {
		m := g.Member(id)
		v.CurrentAssignments[id] = SortedInts(m.Current)
		if m.CanHold() && len(m.Granted) > 0 {
			v.GrantedAssignments[id] = SortedInts(m.Granted)
		}
		if len(m.Revoking) > 0 {
			v.RevokeProgress[id] = SortedInts(m.Revoking)
		}
	}
	owners := map[int][]string{}
	for id, t := range g.EachTarget() {
		if m := g.Member(id); m == nil || !m.Live() {
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
		m := g.Member(id)
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
