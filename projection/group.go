package projection

import (
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/events"
)

// GroupKey names a coordinator group.
type GroupKey struct {
	StreamPrefix  string `msgpack:"prefix"`
	ConsumerGroup string `msgpack:"group"`
}

// Member states, as on the wire.
const (
	MemberStarting = "STARTING"
	MemberActive   = "ACTIVE"
	MemberLeaving  = "LEAVING"
	MemberExpired  = "EXPIRED"
	MemberFenced   = "FENCED"
)

// Resharding states, as on the wire (where a resharding is a "migration").
const (
	Preparing   = "PREPARING"
	Active      = "ACTIVE"
	Draining    = "DRAINING"
	Deprecated  = "DEPRECATED"
	RollingBack = "ROLLING_BACK"
	RolledBack  = "ROLLED_BACK"
)

// Member is one logical consumer as the log knows it. Lease times and reported
// progress are not here: they live in memory in commands (docs/design.md).
type Member struct {
	ID             string    `msgpack:"id"`
	Name           string    `msgpack:"name"`
	State          string    `msgpack:"state"`
	Epoch          int64     `msgpack:"epoch"`
	MaxConcurrency int       `msgpack:"maxConcurrency"`
	Current        []int     `msgpack:"current"`
	Revoking       []int     `msgpack:"revoking"`
	Granted        []int     `msgpack:"granted"`
	JoinedAt       time.Time `msgpack:"joinedAt"`
	UpdatedAt      time.Time `msgpack:"updatedAt"`
	// Principal is the authenticated user that joined the member ("" when the
	// member API was anonymous); only it may heartbeat for this id.
	Principal string `msgpack:"principal,omitempty"`
}

// Live reports whether the member takes part in assignment (ACTIVE or STARTING).
func (m *Member) Live() bool { return m.State == MemberActive || m.State == MemberStarting }

// CanHold reports whether the member's listed shards still count as held: live
// members and leaving members that have not released yet.
func (m *Member) CanHold() bool { return m.Live() || m.State == MemberLeaving }

// Holds reports whether the member holds shard s (granted, owned or revoking).
func (m *Member) Holds(s int) bool {
	return m.CanHold() && (containsInt(m.Current, s) || containsInt(m.Revoking, s) || containsInt(m.Granted, s))
}

// StateChange is one step of a resharding's life.
type StateChange struct {
	State   string    `msgpack:"state"`
	Phase   string    `msgpack:"phase"`
	At      time.Time `msgpack:"at"`
	Actor   string    `msgpack:"actor"`
	EventID string    `msgpack:"eventId"`
	// Epochs after the change.
	GroupEpoch      int64 `msgpack:"groupEpoch"`
	MetadataVersion int64 `msgpack:"metadataVersion"`
}

// Resharding is one change of a group's shard count, from the request to the
// retirement of removed shard streams (or its rollback).
type Resharding struct {
	ReshardingID        string              `msgpack:"id"`
	From                int                 `msgpack:"from"`
	To                  int                 `msgpack:"to"`
	State               string              `msgpack:"state"`
	CreatedAt           time.Time           `msgpack:"createdAt"`
	UpdatedAt           time.Time           `msgpack:"updatedAt"`
	RequestedBy         string              `msgpack:"requestedBy"`
	Reason              string              `msgpack:"reason"`
	ProvisionedShards   int                 `msgpack:"provisioned"`
	Drained             bool                `msgpack:"drained"`
	Evidence            []events.ShardDrain `msgpack:"evidence"`
	RollbackPolicy      string              `msgpack:"rollbackPolicy"`
	RollbackRequestedBy string              `msgpack:"rollbackRequestedBy"`
	RollbackReason      string              `msgpack:"rollbackReason"`
	Retired             bool                `msgpack:"retired"`
	RetiredKeys         []string            `msgpack:"retiredKeys"`
	RetiredKept         bool                `msgpack:"retiredKept"`
	StartEpochs         events.Epochs       `msgpack:"startEpochs"`
	History             []StateChange       `msgpack:"history"`
	// KeysChecked: its resharding.preparing recorded which shard streams it
	// creates (builds before that record provisioned every target shard).
	KeysChecked bool `msgpack:"keysChecked,omitempty"`
}

// Terminal reports whether the resharding is finished.
func (m *Resharding) Terminal() bool { return m.State == Deprecated || m.State == RolledBack }

// RemovedRange is the shard range a finished (or finishing) resharding takes out
// of use: [lo, hi). Empty when nothing is removed.
func (m *Resharding) RemovedRange() (lo, hi int) {
	switch m.State {
	case Deprecated, Draining, Active, Preparing:
		if m.To < m.From {
			return m.To, m.From
		}
	case RolledBack, RollingBack:
		if m.To > m.From {
			return m.From, m.To
		}
	}
	return 0, 0
}

// Group is a coordinator group. Callers outside this package get it from State
// methods and must treat it as read-only.
//
// A group is flat (the State's, a clone, one built from a snapshot): Members
// and Targets hold every member and target. Or it is layered: the group an
// Overlay returns for a group it changed shares the State's members and
// holds only what the overlay's records changed (copy-on-write per member),
// so folding a join into a group of thousands of members copies one member,
// not thousands. A layered group's members and targets are nil: code that may
// see one reads members and targets only through the methods, which answer
// the same for both (the maps are unexported).
type Group struct {
	Key             GroupKey `msgpack:"key"`
	ShardCount      int      `msgpack:"shardCount"`
	AssignableCount int      `msgpack:"assignableCount"`
	GroupEpoch      int64    `msgpack:"groupEpoch"`
	AssignmentEpoch int64    `msgpack:"assignmentEpoch"`
	MetadataVersion int64    `msgpack:"metadataVersion"`
	// members by id, and the target assignment (member id to shards): read
	// them through Member, EachMember, Target, EachTarget and the counts (a
	// layered group holds them in its layer). Snapshots hold them between
	// MetadataVersion and Reshardings (wire.go: EncodeMsgpack).
	members MemberMap
	targets events.Targets
	// Reshardings in the order they were requested, and the id of the active
	// one ("" when none). The msgpack names predate the rename from
	// "migration" and stay: snapshots written with them keep restoring.
	Reshardings      []*Resharding `msgpack:"migrations"`
	ActiveResharding string        `msgpack:"active"`
	CreatedAt        time.Time     `msgpack:"createdAt"`
	UpdatedAt        time.Time     `msgpack:"updatedAt"`
	CreatedBy        string        `msgpack:"createdBy"`
	// Ordering is events.OrderingKey for a group whose reshardings keep
	// per-key order, "" for none.
	Ordering string `msgpack:"ordering,omitempty"`
	// Barriers are the unreleased barriers, in the order their cutovers
	// happened (released ones leave the state; the log keeps them).
	Barriers Barriers `msgpack:"barriers,omitempty"`
	// UnfencedWrites counts the entries found on fenced shards after their
	// cutover that no fence check let in.
	UnfencedWrites int64 `msgpack:"unfencedWrites,omitempty"`
	// Autoscaling is the group's autoscaling policy and the autoscaler's
	// last decision (nil when never configured). The fold replaces it whole
	// on every change: a clone may share it.
	Autoscaling *Autoscaling `msgpack:"autoscaling,omitempty"`
	// LayoutSince is the metadata version at which the current shard layout
	// became current (the create, or the last activation or rollback that
	// changed the shard count); PreviousLayouts are the layouts before it,
	// newest first, at most MaxPreviousLayouts (see Layout). The fold
	// replaces the list whole on every change: a clone may share it.
	LayoutSince     int64    `msgpack:"layoutSince,omitempty"`
	PreviousLayouts []Layout `msgpack:"previousLayouts,omitempty"`
	// Provisioned: the coordinator provisioned the group's consumer groups
	// (its delete destroys them, except on ForeignShards: shards where one
	// of the group's name was there before, on a stream the coordinator did
	// not create). Registered: a member's first heartbeat created the group
	// (it expires once empty for --empty-group-retention; an operator's
	// never does). Owner is the principal the group counts against
	// (OwnerAnonymous: a caller without one; neither: a group of a build
	// before quotas, counted against nobody). All three are false or empty
	// in a snapshot written before they were recorded (the log's fold has
	// them).
	Provisioned    bool   `msgpack:"provisioned,omitempty"`
	Registered     bool   `msgpack:"registered,omitempty"`
	Owner          string `msgpack:"owner,omitempty"`
	OwnerAnonymous bool   `msgpack:"ownerAnonymous,omitempty"`
	ForeignShards  []int  `msgpack:"foreignShards,omitempty"`
	// EmptySince is the time of the record after which the group had no
	// live member (zero while it has one): the creation for a group nobody
	// joined yet.
	EmptySince time.Time `msgpack:"emptySince,omitempty"`

	// ix indexes the members of a flat group (index.go); nil in a group
	// built outside this package, whose questions are answered by scanning.
	ix *memberIndex
	// lay is set in a layered group, an Overlay's copy of one of the
	// State's (layer.go): members and targets are then nil and every read
	// goes through the methods (Member, Target, EachMember, ...).
	lay *layer
}

// GroupWith is a flat group with these members and targets (either nil:
// none) and nothing else but its key, for code that builds a group outside a
// State (tests, tools); the group keeps the maps.
func GroupWith(k GroupKey, members map[string]*Member, targets map[string][]int) *Group {
	return &Group{Key: k, members: members, targets: targets}
}

// Autoscaling is a group's autoscaling policy (as last configured; Enabled
// false once turned off) and what the autoscaler last decided.
type Autoscaling struct {
	Policy       events.AutoscalingConfigured `msgpack:"policy"`
	ConfiguredAt time.Time                    `msgpack:"configuredAt"`
	// LastDecision is the last autoscaling.decided (nil before the first);
	// LastOutAt and LastInAt when the last change in each direction was
	// requested (dry runs do not count), for the cooldowns.
	LastDecision *AutoscaleDecision `msgpack:"lastDecision,omitempty"`
	LastOutAt    time.Time          `msgpack:"lastOutAt"`
	LastInAt     time.Time          `msgpack:"lastInAt"`
}

// AutoscaleDecision is a recorded autoscaling decision: when, its event id,
// and what it decided with its evidence.
type AutoscaleDecision struct {
	At      time.Time                 `msgpack:"at"`
	EventID string                    `msgpack:"eventId"`
	Decided events.AutoscalingDecided `msgpack:"decided"`
}

// Enabled reports whether the autoscaler manages the group (false for nil:
// never configured).
func (a *Autoscaling) Enabled() bool { return a != nil && a.Policy.Enabled }

// Barrier is a shard of the layout after a cutover whose entries after After
// wait until every source shard is proven read and acknowledged up to its
// cutover id.
type Barrier struct {
	ReshardingID string                `msgpack:"reshardingId"`
	Fence        int64                 `msgpack:"fence"`
	Shard        int                   `msgpack:"shard"`
	StreamKey    string                `msgpack:"streamKey"`
	After        string                `msgpack:"after"`
	Since        time.Time             `msgpack:"since"`
	Sources      []events.ShardCutover `msgpack:"sources"`
}

// Ordered reports whether the group keeps per-key order across reshardings.
func (g *Group) Ordered() bool { return g.Ordering == events.OrderingKey }

// Barriers are a group's unreleased barriers.
type Barriers []*Barrier

// ByShard returns, for each shard with an unreleased barrier, the lowest
// After (entries beyond it wait).
func (bs Barriers) ByShard() map[int]string {
	if len(bs) == 0 {
		return nil
	}
	out := make(map[int]string, len(bs))
	for _, b := range bs {
		if cur, ok := out[b.Shard]; !ok || CompareIDs(b.After, cur) < 0 {
			out[b.Shard] = b.After
		}
	}
	return out
}

// Of returns the unreleased barriers of one resharding.
func (bs Barriers) Of(id string) []*Barrier {
	var out []*Barrier
	for _, b := range bs {
		if b.ReshardingID == id {
			out = append(out, b)
		}
	}
	return out
}

// SourceProven is the verdict on one source shard of a barrier: the stream is
// gone, its cutover is "0-0" (nothing came before it), or the group's last
// delivered id is at or past the cutover with nothing up to it pending. A
// stream recreated after the cutover (its last generated id is below it)
// lost what it held up to there: the group has to be past what the new
// stream holds, not past the cutover (which an empty stream never reaches).
func SourceProven(p events.BarrierProof) bool {
	if !p.Exists || p.CutoverID == "0-0" {
		return true
	}
	upTo := p.CutoverID
	if p.LastGenerated != "" && CompareIDs(p.LastGenerated, upTo) < 0 {
		upTo = p.LastGenerated
	}
	return p.LastDelivered != "" && CompareIDs(p.LastDelivered, upTo) >= 0 && p.Pending == 0
}

// CompareIDs orders two Redis stream ids ("ms-seq"; "" and malformed parts
// count as 0): -1, 0 or 1.
func CompareIDs(a, b string) int {
	am, as := splitID(a)
	bm, bs := splitID(b)
	switch {
	case am < bm:
		return -1
	case am > bm:
		return 1
	case as < bs:
		return -1
	case as > bs:
		return 1
	}
	return 0
}

func splitID(id string) (ms, seq uint64) {
	head, tail, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(head, 10, 64)
	seq, _ = strconv.ParseUint(tail, 10, 64)
	return ms, seq
}

// MemberIDs returns all member ids, sorted.
func (g *Group) MemberIDs() []string {
	ids := make([]string, 0, g.MemberCount())
	for _, m := range g.EachMember() {
		ids = append(ids, m.ID)
	}
	sort.Strings(ids)
	return ids
}

// Target is the member's target shards (nil when it has none).
func (g *Group) Target(memberID string) []int {
	t, _ := g.TargetOf(memberID)
	return t
}

// Resharding returns the resharding with that id.
func (g *Group) Resharding(id string) *Resharding {
	for _, m := range g.Reshardings {
		if m.ReshardingID == id {
			return m
		}
	}
	return nil
}

// Active returns the active resharding, or nil.
func (g *Group) Active() *Resharding {
	if g.ActiveResharding == "" {
		return nil
	}
	return g.Resharding(g.ActiveResharding)
}

// Blocked returns the member's target shards that another member still holds:
// revoke before assign.
func (g *Group) Blocked(memberID string) []int {
	var out []int
	for _, s := range g.Target(memberID) {
		if g.HeldByOthers(memberID, s) {
			out = append(out, s)
		}
	}
	return out
}

// Grantable splits the member's target into shards it may read now and shards
// pending their previous owner's release.
func (g *Group) Grantable(memberID string) (assigned, pending []int) {
	assigned, pending = []int{}, []int{}
	for _, s := range g.Target(memberID) {
		if g.HeldByOthers(memberID, s) {
			pending = append(pending, s)
		} else {
			assigned = append(assigned, s)
		}
	}
	return assigned, pending
}

// State returns EMPTY, RECONCILING or STABLE.
func (g *Group) State() string {
	live := g.LiveMemberIDs()
	if len(live) == 0 {
		return "EMPTY"
	}
	for _, id := range live {
		m := g.Member(id)
		if !equalInts(m.Current, g.Target(id)) || len(m.Revoking) > 0 || len(g.Blocked(id)) > 0 {
			return "RECONCILING"
		}
	}
	for _, id := range g.ActiveMemberIDs() {
		if m := g.Member(id); m.State == MemberLeaving {
			return "RECONCILING" // active and leaving: it still holds shards
		}
	}
	return "STABLE"
}

// Clone returns a deep copy, flat (a layered group's clone holds every
// member), with its own index.
func (g *Group) Clone() *Group {
	c := deepCopy(g)
	buildIndex(c)
	return c
}

// deepCopy is Clone without the index (a snapshot's copy is only encoded).
func deepCopy(g *Group) *Group {
	c := *g
	c.ix = nil
	c.lay = nil
	c.members = make(map[string]*Member, g.MemberCount())
	for _, m := range g.EachMember() {
		mc := *m
		mc.Current = cloneInts(m.Current)
		mc.Revoking = cloneInts(m.Revoking)
		mc.Granted = cloneInts(m.Granted)
		c.members[mc.ID] = &mc
	}
	c.targets = make(map[string][]int, g.MemberCount())
	for id, t := range g.EachTarget() {
		c.targets[id] = cloneInts(t)
	}
	c.Reshardings = make([]*Resharding, len(g.Reshardings))
	for i, m := range g.Reshardings {
		c.Reshardings[i] = m.clone()
	}
	// Barriers are never changed in place (a release builds a new slice), so
	// the clone shares them.
	c.Barriers = append([]*Barrier(nil), g.Barriers...)
	c.ForeignShards = cloneInts(g.ForeignShards)
	return &c
}

// clone is a deep copy of a resharding.
func (m *Resharding) clone() *Resharding {
	mc := *m
	mc.Evidence = append([]events.ShardDrain(nil), m.Evidence...)
	mc.RetiredKeys = append([]string(nil), m.RetiredKeys...)
	mc.History = append([]StateChange(nil), m.History...)
	return &mc
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func cloneInts(s []int) []int {
	if s == nil {
		return nil
	}
	return append([]int(nil), s...)
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// SortedInts returns a sorted, de-duplicated copy.
func SortedInts(s []int) []int {
	out := cloneInts(s)
	sort.Ints(out)
	w := 0
	for i, v := range out {
		if i == 0 || v != out[w-1] {
			out[w] = v
			w++
		}
	}
	if out == nil {
		return []int{}
	}
	return out[:w]
}

// EqualSets reports whether two sorted sets are equal.
func EqualSets(a, b []int) bool { return equalInts(a, b) }

func formatInt(i int64) string { return strconv.FormatInt(i, 10) }

// MemberMap is a group's members by id; it encodes with sorted ids.
type MemberMap map[string]*Member

// EncodeMsgpack encodes with sorted member ids.
func (m MemberMap) EncodeMsgpack(enc *msgpack.Encoder) error { return events.EncodeSortedMap(enc, m) }
