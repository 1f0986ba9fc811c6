package commands

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// The heartbeat rules one at a time, in the style of Kafka's
// GroupMetadataManagerTest: a group's state (built from events) and the
// runtime table in, one heartbeat in, the event types the decision emits
// and its answer out. One row per rule of the contract's decision procedure
// (CONTRACT.md §3.2 and the sections it refers to) and per deviation the
// README lists, named by its section. The simulation (sim_test.go) finds
// what nobody thought of; this table says what each rule is.
//
// Every row also checks what holds for every heartbeat: an answer other than
// a rejection carries the group's epochs after the decision, and when the
// steady path (answered without the writer) takes the heartbeat, the decision
// emits nothing and answers exactly the same; unless the row says the steady
// path leaves another member's maintenance (an expiry, a missed deadline) to
// the tick, which then changes this member's answer within a tick.

var rulesKey = projection.GroupKey{StreamPrefix: "orders", ConsumerGroup: "billing"}

// t0 is when the world's events happened; rules run an hour later.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func rulesNow() time.Time { return t0.Add(time.Hour) }

func testRules() Rules {
	return NewRules(Policy{HeartbeatInterval: 3 * time.Second, MemberLease: 15 * time.Second, RebalanceTimeout: 60 * time.Second,
		StaleMemberRetention: 10 * time.Minute, DefaultShardCount: 12, MaxShardCount: 1024, MaxMembersPerGroup: 4096,
		MaxGroups: 1024, MaxTotalShards: 65536, Provisioning: true, Streams: true})
}

// world builds a group's state from events, keeping the group epoch and
// metadata version the way the contract bumps them (§3.1).
type world struct {
	st     *projection.State
	g, mv  int64
	n      int
	noneOf bool // no group at all
}

func group(shards int) *world {
	w := &world{st: projection.New(), g: 1, mv: 1}
	w.apply(&events.GroupCreated{ShardCount: shards, Provisioned: true, RequestedBy: "test"})
	return w
}

// group is the world's group as its state holds it (only the test's
// goroutine touches the state): what a decision's overlay reads while it
// changed nothing, the state's own group.
func (w *world) group() *projection.Group {
	var g *projection.Group
	w.st.Read(func(projection.Reader) { g = w.st.NewOverlayLocked().Group(rulesKey) })
	return g
}

func noGroup() *world { return &world{st: projection.New(), noneOf: true} }

// streamOnly: the group's stream was created with shards shards and scaled
// layoutChanges times since (metadata version 1 + layoutChanges); the group
// does not exist.
func streamOnly(shards, layoutChanges int) *world {
	w := &world{st: projection.New(), noneOf: true}
	stream := projection.GroupKey{StreamPrefix: rulesKey.StreamPrefix}
	created := make([]int, shards)
	for i := range created {
		created[i] = i
	}
	w.applyTo(stream, &events.StreamCreated{ShardCount: shards, Provisioned: true, RequestedBy: "test", CreatedShards: created})
	for i := 1; i <= layoutChanges; i++ {
		w.applyTo(stream, &events.StreamScaled{From: shards, To: shards, MetadataVersion: int64(1 + i), RequestedBy: "test", Reason: "test"})
	}
	return w
}

func (w *world) apply(ev events.Event) *world { return w.applyTo(rulesKey, ev) }

func (w *world) applyTo(k projection.GroupKey, ev events.Event) *world {
	w.n++
	rec := events.Record{ID: fmt.Sprintf("%d-0", w.n), Type: ev.EventType(), Schema: events.SchemaVersion, Event: ev,
		Meta: events.Meta{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, Time: t0.Add(time.Duration(w.n) * time.Second), Actor: "test"}}
	if err := w.st.Apply(rec); err != nil {
		panic(err)
	}
	return w
}

func (w *world) bump() events.Epochs {
	w.g++
	w.mv++
	return events.Epochs{GroupEpoch: w.g, MetadataVersion: w.mv}
}

func (w *world) join(id string) *world { return w.joinAs(id, "") }

func (w *world) joinAs(id, principal string) *world {
	return w.apply(&events.MemberJoined{MemberID: id, MemberName: id, MaxConcurrency: 1, Principal: principal, Epochs: w.bump()})
}

// assign records the target assignment at the current group epoch.
func (w *world) assign(targets map[string][]int, removed ...string) *world {
	return w.apply(&events.AssignmentChanged{AssignmentEpoch: w.g, Targets: targets, Removed: removed})
}

func (w *world) grant(id string, epoch int64, shards ...int) *world {
	return w.apply(&events.MemberSynced{MemberID: id, MemberEpoch: epoch, Granted: shards})
}

func (w *world) own(id string, owned, revoking []int) *world {
	return w.apply(&events.OwnershipReported{MemberID: id, Owned: owned, Revoking: revoking})
}

func (w *world) leave(id string) *world {
	return w.apply(&events.MemberLeft{MemberID: id, Epochs: w.bump()})
}

func (w *world) fence(id string, epoch int64) *world {
	return w.apply(&events.MemberFenced{MemberID: id, Reason: "test", MemberEpoch: epoch, Epochs: w.bump()})
}

func (w *world) expire(ids ...string) *world {
	return w.apply(&events.MembersExpired{MemberIDs: ids, Epochs: w.bump()})
}

// aloneSteady: A joined a group of 4 shards and holds all of them
// (G = AE = MV = 2, A's epoch 2).
func aloneSteady() *world {
	return group(4).join("A").assign(map[string][]int{"A": {0, 1, 2, 3}}).grant("A", 2, 0, 1, 2, 3).own("A", []int{0, 1, 2, 3}, nil)
}

// twoMembers: then B joined; the target gives A 0,1 and B 2,3, which A
// still holds (G = AE = MV = 3; A's recorded epoch 2, B's 0).
func twoMembers() *world {
	return aloneSteady().join("B").assign(map[string][]int{"A": {0, 1}, "B": {2, 3}})
}

// beat is one heartbeat request.
type beat struct {
	member, path string // path "" is member
	principal    string
	epoch, mv    int64
	owned        []int
	revoking     []wire.RevokingReport
	progress     []int
	name         string // "" is member
	protocol     int
	noEpoch      bool // memberEpoch null (a body that fails validation)
	// noProtocol, noCapacity: protocolVersion or runtimeConsumerCapacity
	// left out (0.3.5 clients may).
	noProtocol, noCapacity bool
}

func (b beat) request() *wire.HeartbeatRequest {
	proto := wire.ProtocolVersion
	if b.protocol != 0 {
		proto = b.protocol
	}
	name := b.name
	if name == "" {
		name = b.member
	}
	req := &wire.HeartbeatRequest{
		ProtocolVersion: &proto, RequestID: "r1", MemberID: b.member, MemberName: &name,
		MemberEpoch: &b.epoch, MetadataVersion: &b.mv,
		RuntimeConsumerCapacity: &wire.Capacity{RuntimeMaxConcurrency: ptrTo(1), AvailableConcurrency: ptrTo(1)},
		OwnedShards:             shardRefs(b.owned), RevokingShards: b.revoking, ShardProgress: []wire.ShardProgress{},
	}
	if b.noEpoch {
		req.MemberEpoch = nil
	}
	if b.noProtocol {
		req.ProtocolVersion = nil
	}
	if b.noCapacity {
		req.RuntimeConsumerCapacity = nil
	}
	if req.RevokingShards == nil {
		req.RevokingShards = []wire.RevokingReport{}
	}
	for _, s := range b.progress {
		req.ShardProgress = append(req.ShardProgress, wire.ShardProgress{Shard: wire.ShardRef{ShardIndex: s}, StreamKey: fmt.Sprintf("orders:%d", s)})
	}
	return req
}

func ptrTo[T any](v T) *T { return &v }

func revoked(s int) wire.RevokingReport {
	return wire.RevokingReport{Shard: &wire.ShardRef{ShardIndex: s}, State: wire.RevokeRevoked}
}

func draining(s int) wire.RevokingReport {
	return wire.RevokingReport{Shard: &wire.ShardRef{ShardIndex: s}, State: wire.RevokeDraining, InFlight: 1}
}

// runtime setups: the table is re-armed (every member's lease from now)
// before each.

func lapsed(ids ...string) func(*RuntimeTable, time.Time) {
	return func(rt *RuntimeTable, now time.Time) {
		for _, id := range ids {
			rt.renew(rulesKey, id, renewal{at: now.Add(-20 * time.Second), lease: 15 * time.Second})
		}
	}
}

// roundOpen opens a correction round targeting mv, opened ago, that the
// members acked converged in.
func roundOpen(mv int64, ago time.Duration, acked ...string) func(*RuntimeTable, time.Time) {
	return func(rt *RuntimeTable, now time.Time) {
		r := &correctionRound{targetMV: mv, openedAt: now.Add(-ago), acked: map[string]bool{}}
		for _, id := range acked {
			r.acked[id] = true
		}
		rt.groupLocked(rulesKey).correction = r
	}
}

func quarantined(id string) func(*RuntimeTable, time.Time) {
	return func(rt *RuntimeTable, now time.Time) {
		rt.groupLocked(rulesKey).quarantineLocked("m:"+id, now.Add(10*time.Minute), now)
	}
}

func deadlinePassed(id string) func(*RuntimeTable, time.Time) {
	return func(rt *RuntimeTable, now time.Time) {
		m := rt.memberLocked(rulesKey, id, now, 15*time.Second)
		rt.groups[rulesKey].setDeadline(id, m, now.Add(-time.Second))
	}
}

// churnSpent: the principal has no join or leave left in the group.
func churnSpent(principal string) func(*RuntimeTable, time.Time) {
	return func(rt *RuntimeTable, now time.Time) {
		rt.groupLocked(rulesKey).churn = map[string]Bucket{principal: {Tokens: 0, At: now}}
	}
}

// churnBudget is a budget of 60 joins and leaves a minute (15 at once).
func churnBudget(r *Rules) { r.churn = PerMinute(60) }

// churnLeft checks what the principal has left after the decision.
func churnLeft(principal string, want float64) func(t *testing.T, rt *RuntimeTable) {
	return func(t *testing.T, rt *RuntimeTable) {
		b, ok := rt.churnBucket(rulesKey, principal)
		if !ok || b.Tokens != want {
			t.Errorf("%q has %+v (recorded %v) of its churn budget, want %v tokens", principal, b, ok, want)
		}
	}
}

// answer is what a row wants back.
type answer struct {
	status            string
	epoch             int64
	assigned, pending []int
}

type ruleRow struct {
	name    string
	world   *world
	runtime func(*RuntimeTable, time.Time)
	rules   func(*Rules)
	beat    beat
	events  []string // the types emitted, in order
	want    answer
	err     error // a refusal instead of an answer
	// after checks the runtime table once the decision committed.
	after func(t *testing.T, rt *RuntimeTable)
	// steadyDefers: the steady path takes this heartbeat and leaves what the
	// decision does about other members to the maintenance tick.
	steadyDefers bool
	// reg is the registration evidence the heartbeat carries (its group's
	// consumer groups provisioned on the stream's layout); nil for none.
	reg *Registration
}

// heartbeatRules is the table.
func heartbeatRules() []ruleRow {
	return []ruleRow{
		// --- §3.2 steps 0-3: refused before the member's state is read ---
		{name: "§3.2 step 0: a body that fails validation (memberEpoch null) is a 400", world: aloneSteady(),
			beat: beat{member: "A", noEpoch: true}, err: ErrInvalid},
		{name: "§3.2 step 1: a protocol version other than 1 is UNSUPPORTED_PROTOCOL", world: aloneSteady(),
			beat: beat{member: "A", epoch: 2, mv: 2, owned: []int{0, 1, 2, 3}, protocol: 2}, want: answer{status: wire.StatusUnsupportedProtocol, epoch: 2}},
		{name: "§3.2 step 2: a member id other than the path's is INVALID_REQUEST", world: aloneSteady(),
			beat: beat{member: "A", path: "X", epoch: 2, mv: 2}, want: answer{status: wire.StatusInvalidRequest, epoch: 2}},
		{name: "0.3.5 defaults: a missing protocolVersion is 1", world: aloneSteady(),
			beat: beat{member: "A", epoch: 2, mv: 2, owned: []int{0, 1, 2, 3}, noProtocol: true}, want: answer{wire.StatusOK, 2, []int{0, 1, 2, 3}, nil}},
		{name: "0.3.5 defaults: a missing runtimeConsumerCapacity is {1, 1}", world: aloneSteady(),
			beat: beat{member: "A", epoch: 2, mv: 2, owned: []int{0, 1, 2, 3}, noCapacity: true}, want: answer{wire.StatusOK, 2, []int{0, 1, 2, 3}, nil}},
		{name: "0.3.5 defaults: a join without protocolVersion and runtimeConsumerCapacity records capacity 1", world: aloneSteady(),
			beat:   beat{member: "C", noProtocol: true, noCapacity: true},
			events: []string{"member.joined", "assignment.changed"}, want: answer{wire.StatusOK, 3, nil, []int{2, 3}},
			after: func(t *testing.T, rt *RuntimeTable) {
				if m, _ := rt.member(rulesKey, "C"); m.available != 1 {
					t.Errorf("C's available concurrency is %d, want the default 1", m.available)
				}
			}},
		{name: "§3.2 step 3 (0.3.1): a first heartbeat for a group of a stream with metadata registers it at the stream's layout and joins",
			world: streamOnly(4, 2), reg: &Registration{Count: 4, MV: 3},
			beat:   beat{member: "A"},
			events: []string{"group.created", "member.joined", "assignment.changed", "member.synced"}, want: answer{wire.StatusOK, 2, []int{0, 1, 2, 3}, nil}},
		{name: "§3.2 step 3 (0.3.1): a registration finds the group a concurrent first heartbeat registered, and joins it",
			world: group(4).join("A").assign(map[string][]int{"A": {0, 1, 2, 3}}), reg: &Registration{Count: 4, MV: 1},
			beat:   beat{member: "B"},
			events: []string{"member.joined", "assignment.changed", "member.synced"}, want: answer{wire.StatusOK, 3, []int{2, 3}, nil}},
		{name: "§3.2 step 3 (0.3.1): a first heartbeat on a stream at 0 shards registers the group and joins with an empty assignment",
			world: streamOnly(0, 0), reg: &Registration{Count: 0, MV: 1},
			beat:   beat{member: "A"},
			events: []string{"group.created", "member.joined", "assignment.changed"}, want: answer{wire.StatusOK, 2, nil, nil}},
		{name: "§3.2 step 3 (0.3.1): a registration whose stream changed layout since its provisioning is refused (the member retries)",
			world: streamOnly(4, 1), reg: &Registration{Count: 4, MV: 1},
			beat: beat{member: "A"}, err: ErrStateConflict},
		{name: "§3.2 step 3 (0.3.1): a registration past --max-groups is refused",
			world: streamOnly(4, 0), reg: &Registration{Count: 4, MV: 1}, rules: func(r *Rules) { r.maxGroups = 0 },
			beat: beat{member: "A"}, err: ErrGroupLimit},
		{name: "§3.2 step 3 (0.3.1): a registration past --max-total-shards is refused",
			world: streamOnly(4, 0), reg: &Registration{Count: 4, MV: 1}, rules: func(r *Rules) { r.maxTotalShards = 3 },
			beat: beat{member: "A"}, err: ErrShardLimit},
		{name: "§3.2 step 3 (0.3.1): without a registration (a positive epoch, or no stream metadata) a missing group is UNKNOWN_MEMBER_ID", world: streamOnly(4, 0),
			beat: beat{member: "A", epoch: 3, mv: 1}, want: answer{status: wire.StatusUnknownMember, epoch: 3}},
		{name: "§3.2 step 3: a heartbeat for a group that does not exist is UNKNOWN_MEMBER_ID", world: noGroup(),
			beat: beat{member: "A", epoch: 4}, want: answer{status: wire.StatusUnknownMember, epoch: 4}},

		// --- §3.2 step 4: expiry first ---
		{name: "§3.2 step 4 (§3.6): members whose lease passed expire before the heartbeat is decided", world: twoMembers(), runtime: lapsed("B"),
			beat:   beat{member: "A", epoch: 2, mv: 3, owned: []int{0, 1, 2, 3}},
			events: []string{"member.expired", "assignment.changed"}, want: answer{wire.StatusOK, 4, []int{0, 1, 2, 3}, nil}},
		{name: "Deviation: leaving members that still hold shards expire by lease too",
			world:   twoMembers().leave("A").own("A", nil, []int{2}).assign(map[string][]int{"B": {0, 1, 2, 3}}, "A"),
			runtime: lapsed("A"),
			beat:    beat{member: "B", epoch: 4, mv: 4},
			events:  []string{"member.expired", "assignment.changed", "member.synced"}, want: answer{wire.StatusOK, 5, []int{0, 1, 2, 3}, nil}},

		// --- §3.2 steps 5-6, §3.7: metadata correction ---
		{name: "§3.2 step 5 (§3.7): a member reporting a newer metadata version opens a correction round: SYNC_METADATA", world: aloneSteady(),
			beat: beat{member: "A", epoch: 2, mv: 9, owned: []int{0, 1, 2, 3}}, want: answer{wire.StatusSyncMetadata, 2, []int{0, 1, 2, 3}, nil},
			after: func(t *testing.T, rt *RuntimeTable) {
				if r := rt.Round(rulesKey); !r.Open || r.TargetMV != 2 {
					t.Errorf("round %+v, want open targeting the stored version 2", r)
				}
			}},
		{name: "§3.2 step 6: while a round is open, a member on another version is SYNC_METADATA with what it may keep", world: twoMembers(), runtime: roundOpen(3, time.Second),
			beat: beat{member: "B", epoch: 3, mv: 1}, want: answer{wire.StatusSyncMetadata, 3, nil, []int{2, 3}}},
		{name: "§3.7: a member on the stored version while the round waits for others is REVOKE_PENDING, keeping what it may", world: twoMembers(), runtime: roundOpen(3, time.Second),
			beat:   beat{member: "A", epoch: 2, mv: 3, owned: []int{0, 1, 2, 3}},
			events: []string{"member.synced"}, want: answer{wire.StatusRevokePending, 3, []int{0, 1}, nil},
			after: func(t *testing.T, rt *RuntimeTable) {
				if !rt.roundAcked(rulesKey, "A") || !rt.Round(rulesKey).Open {
					t.Error("A's convergence was not acknowledged, or the round closed while B had not converged")
				}
			}},
		{name: "§3.7: the round closes once every participant converged and nothing is revoked: OK", world: aloneSteady(), runtime: roundOpen(2, time.Second),
			beat: beat{member: "A", epoch: 2, mv: 2, owned: []int{0, 1, 2, 3}}, want: answer{wire.StatusOK, 2, []int{0, 1, 2, 3}, nil},
			after: func(t *testing.T, rt *RuntimeTable) {
				if rt.Round(rulesKey).Open {
					t.Error("the round is still open")
				}
			}},
		{name: "§3.7: during a round, revoking and progress reports outside the authority are dropped, not fenced", world: twoMembers(), runtime: roundOpen(3, time.Second),
			beat: beat{member: "B", epoch: 3, mv: 3, revoking: []wire.RevokingReport{draining(0)}, progress: []int{0}},
			want: answer{wire.StatusRevokePending, 3, nil, []int{2, 3}},
			after: func(t *testing.T, rt *RuntimeTable) {
				if m, _ := rt.member(rulesKey, "B"); len(m.progress) != 0 {
					t.Errorf("B's progress on a shard outside its authority was stored: %+v", m.progress)
				}
			}},
		{name: "Deviation: a round still open at the rebalance timeout fences the members that did not converge, and quarantines them",
			world: twoMembers(), runtime: roundOpen(3, 61*time.Second, "A"),
			beat:   beat{member: "A", epoch: 2, mv: 3, owned: []int{0, 1, 2, 3}},
			events: []string{"member.fenced", "assignment.changed"}, want: answer{wire.StatusOK, 4, []int{0, 1, 2, 3}, nil},
			after: func(t *testing.T, rt *RuntimeTable) {
				if rt.Round(rulesKey).Open {
					t.Error("the overdue round is still open")
				}
				if _, ok := rt.quarantinedUntil(rulesKey, "m:B"); !ok {
					t.Error("B, fenced by the overdue round, is not quarantined")
				}
			}},
		{name: "Deviation: a quarantined member's newer version is taken for the stored one (no round)", world: aloneSteady(), runtime: quarantined("A"),
			beat: beat{member: "A", epoch: 2, mv: 9, owned: []int{0, 1, 2, 3}}, want: answer{wire.StatusOK, 2, []int{0, 1, 2, 3}, nil},
			after: func(t *testing.T, rt *RuntimeTable) {
				if rt.Round(rulesKey).Open {
					t.Error("a quarantined member opened a round")
				}
			}},

		// --- §3.2 step 7: epochs: join, rejoin, leave, fencing ---
		{name: "§3.2 step 7: an epoch below -1 is INVALID_REQUEST", world: aloneSteady(),
			beat: beat{member: "A", epoch: -2, mv: 2}, want: answer{status: wire.StatusInvalidRequest, epoch: -2}},
		{name: "§3.2 step 7 (§3.1): an unknown member with epoch 0 joins; what others hold is pending", world: aloneSteady(),
			beat:   beat{member: "C"},
			events: []string{"member.joined", "assignment.changed"}, want: answer{wire.StatusOK, 3, nil, []int{2, 3}}},
		{name: "§3.2 step 7: an unknown member with a positive epoch is UNKNOWN_MEMBER_ID", world: aloneSteady(),
			beat: beat{member: "C", epoch: 5}, want: answer{status: wire.StatusUnknownMember, epoch: 5}},
		{name: "§3.2 step 7: an unknown member with epoch -1 is UNKNOWN_MEMBER_ID", world: aloneSteady(),
			beat: beat{member: "C", epoch: -1}, want: answer{status: wire.StatusUnknownMember, epoch: -1}},
		{name: "§3.2 step 7: a fenced member rejoins with epoch 0 and is granted its target",
			world:  aloneSteady().fence("A", 3).assign(map[string][]int{}, "A"),
			beat:   beat{member: "A", mv: 3},
			events: []string{"member.joined", "assignment.changed", "member.synced"}, want: answer{wire.StatusOK, 4, []int{0, 1, 2, 3}, nil}},
		{name: "§3.2 step 7: a join replayed (nothing recorded, nothing reported) gets its target, no bump", world: twoMembers(),
			beat: beat{member: "B"}, want: answer{wire.StatusOK, 3, nil, []int{2, 3}}},
		{name: "§3.2 step 7: epoch 0 from a member with recorded ownership is INVALID_REQUEST", world: aloneSteady(),
			beat: beat{member: "A"}, want: answer{status: wire.StatusInvalidRequest}},
		{name: "§3.2 step 7 (§3.6): a fenced member heartbeating with an epoch is FENCED", world: aloneSteady().fence("A", 3).assign(map[string][]int{}, "A"),
			beat: beat{member: "A", epoch: 2, mv: 2, owned: []int{0, 1, 2, 3}}, want: answer{wire.StatusFenced, 3, nil, nil}},
		{name: "§3.2 step 7 (§3.6): an expired member heartbeating with an epoch is FENCED", world: aloneSteady().expire("A").assign(map[string][]int{}, "A"),
			beat: beat{member: "A", epoch: 2, mv: 2, owned: []int{0, 1, 2, 3}}, want: answer{wire.StatusFenced, 3, nil, nil}},
		{name: "§3.2 step 7: epoch -1 leaves: LEAVING, epoch -1, what it owned released at once", world: aloneSteady(),
			beat:   beat{member: "A", epoch: -1, mv: 2, revoking: []wire.RevokingReport{revoked(0), revoked(1), revoked(2), revoked(3)}},
			events: []string{"member.left", "member.ownership_reported", "assignment.changed"}, want: answer{wire.StatusOK, -1, nil, nil}},
		{name: "§3.2 step 7: a second leave changes nothing",
			world: aloneSteady().leave("A").own("A", nil, nil).assign(map[string][]int{}, "A"),
			beat:  beat{member: "A", epoch: -1, mv: 3}, want: answer{wire.StatusOK, -1, nil, nil}},
		{name: "§3.6: a leaving member that still drains keeps the shard blocked for its new owner",
			world: twoMembers().leave("A").own("A", nil, []int{2}).assign(map[string][]int{"B": {0, 1, 2, 3}}, "A"),
			beat:  beat{member: "B", epoch: 4, mv: 4}, events: []string{"member.synced"}, want: answer{wire.StatusOK, 4, []int{0, 1, 3}, []int{2}}},
		{name: "Deviation: after a leave, a heartbeat with the old positive epoch is FENCED (the member rejoins with 0)",
			world: aloneSteady().leave("A").own("A", nil, nil).assign(map[string][]int{}, "A"),
			beat:  beat{member: "A", epoch: 2, mv: 3}, want: answer{wire.StatusFenced, -1, nil, nil}},
		{name: "§3.2 step 7 (§3.6): an epoch above the one issued is INVALID_REQUEST", world: aloneSteady(),
			beat: beat{member: "A", epoch: 9, mv: 2, owned: []int{0, 1, 2, 3}}, want: answer{status: wire.StatusInvalidRequest, epoch: 9}},
		{name: "§3.2 step 7 (§3.6): an epoch below the recorded one is FENCED, the member untouched", world: aloneSteady(),
			beat: beat{member: "A", epoch: 1, mv: 2, owned: []int{0, 1, 2, 3}}, want: answer{wire.StatusFenced, 2, nil, nil}},
		{name: "Deviation: an epoch between the recorded one and the assignment epoch is accepted (§3.1: A learns of B)", world: twoMembers(),
			beat:   beat{member: "A", epoch: 3, mv: 3, owned: []int{0, 1, 2, 3}},
			events: []string{"member.synced"}, want: answer{wire.StatusOK, 3, []int{0, 1}, nil},
			after: func(t *testing.T, rt *RuntimeTable) {
				if m, _ := rt.member(rulesKey, "A"); !m.rebalanceDeadline.Equal(rulesNow().Add(60 * time.Second)) {
					t.Errorf("A holds 2,3 outside its target: its rebalance deadline is %s, want now + 60 s (§3.5 step 5)", m.rebalanceDeadline)
				}
			}},

		// --- §3.2 step 8: ownership validation ---
		{name: "§3.2 step 8: an owned shard outside the member's authority fences it", world: twoMembers(),
			beat:   beat{member: "B", epoch: 3, mv: 3, owned: []int{2}},
			events: []string{"member.fenced", "assignment.changed"}, want: answer{wire.StatusFenced, 4, nil, nil}},
		{name: "§3.2 step 8: a progress report on a shard outside the authority fences it", world: twoMembers(),
			beat:   beat{member: "B", epoch: 3, mv: 3, progress: []int{2}},
			events: []string{"member.fenced", "assignment.changed"}, want: answer{wire.StatusFenced, 4, nil, nil}},
		{name: "§3.2 step 8: a terminal REVOKED report outside the authority is never a violation", world: twoMembers(),
			beat: beat{member: "B", epoch: 3, mv: 3, revoking: []wire.RevokingReport{revoked(0)}}, want: answer{wire.StatusOK, 3, nil, []int{2, 3}}},
		{name: "Deviation: a known member's report longer than the group drops the shards the log does not record it holding", world: aloneSteady(),
			beat: beat{member: "A", epoch: 2, mv: 2, owned: []int{0, 1, 2, 3}, progress: []int{0, 1, 2, 3, 4}}, want: answer{wire.StatusOK, 2, []int{0, 1, 2, 3}, nil}},
		{name: "Deviation: from a member the group does not know, a report longer than the group is a 400", world: aloneSteady(),
			beat: beat{member: "C", owned: []int{0, 1, 2, 3, 4}}, err: ErrInvalid},

		// --- §3.2 steps 9-15, §3.5: record, reconcile, revoke before assign ---
		{name: "§3.2 step 9: a changed name or capacity is recorded", world: aloneSteady(),
			beat:   beat{member: "A", epoch: 2, mv: 2, owned: []int{0, 1, 2, 3}, name: "A-renamed"},
			events: []string{"member.updated"}, want: answer{wire.StatusOK, 2, []int{0, 1, 2, 3}, nil}},
		{name: "§3.5 step 1: a shard another member still holds is pending (revoke before assign)", world: twoMembers(),
			beat: beat{member: "B", epoch: 3, mv: 3}, want: answer{wire.StatusOK, 3, nil, []int{2, 3}}},
		{name: "§3.5 step 3: a member that stops listing shards releases them (acknowledged)", world: twoMembers().grant("A", 3, 0, 1),
			beat:   beat{member: "A", epoch: 3, mv: 3, owned: []int{0, 1}},
			events: []string{"member.ownership_reported", "member.revoke_acknowledged"}, want: answer{wire.StatusOK, 3, []int{0, 1}, nil}},
		{name: "§3.5 step 3: a DRAINING report keeps its shard; a REVOKED one releases it", world: twoMembers().grant("A", 3, 0, 1),
			beat:   beat{member: "A", epoch: 3, mv: 3, owned: []int{0, 1}, revoking: []wire.RevokingReport{draining(2), revoked(3)}},
			events: []string{"member.ownership_reported", "member.revoke_acknowledged"}, want: answer{wire.StatusOK, 3, []int{0, 1}, nil}},
		{name: "§3.5 step 4: the new owner is granted what was released; a draining shard stays pending",
			world: twoMembers().grant("A", 3, 0, 1).own("A", []int{0, 1}, []int{2}),
			beat:  beat{member: "B", epoch: 3, mv: 3}, events: []string{"member.synced"}, want: answer{wire.StatusOK, 3, []int{3}, []int{2}}},
		{name: "§3.5 step 5: a member that misses its rebalance deadline is fenced and its shards go to their new owner",
			world: twoMembers().grant("A", 3, 0, 1), runtime: deadlinePassed("A"), steadyDefers: true,
			beat:   beat{member: "B", epoch: 3, mv: 3},
			events: []string{"member.fenced", "assignment.changed", "member.synced"}, want: answer{wire.StatusOK, 4, []int{0, 1, 2, 3}, nil}},
		{name: "Deviation: a granted shard its member has not acknowledged is never handed to a second member",
			world: twoMembers().grant("A", 3, 0, 1).own("A", []int{0, 1}, nil).grant("B", 3, 2, 3).join("C").
				assign(map[string][]int{"A": {0, 1}, "B": {2}, "C": {3}}),
			beat: beat{member: "C", epoch: 4, mv: 4}, want: answer{wire.StatusOK, 4, nil, []int{3}}},

		// --- deviations that refuse with an ErrorResponse ---
		{name: "Deviation: a heartbeat for a member id another principal joined is refused (403)",
			world: group(4).joinAs("A", "alice").assign(map[string][]int{"A": {0, 1, 2, 3}}),
			beat:  beat{member: "A", principal: "bob", epoch: 2, mv: 2}, err: ErrMemberPrincipal},
		{name: "Deviation: a join into a group whose members all take part, at --max-members-per-group, is refused",
			world: twoMembers(), rules: func(r *Rules) { r.MaxMembers = 2 },
			beat: beat{member: "C"}, err: ErrGroupFull},
		{name: "Deviation: a join spends one of its principal's joins and leaves in the group", world: aloneSteady(), rules: churnBudget,
			beat:   beat{member: "C", principal: "svc"},
			events: []string{"member.joined", "assignment.changed"}, want: answer{wire.StatusOK, 3, nil, []int{2, 3}},
			after: churnLeft("svc", 14)},
		{name: "Deviation: a join beyond its principal's churn budget is refused (429, with when to retry) and records nothing",
			world: aloneSteady(), rules: churnBudget, runtime: churnSpent("svc"),
			beat: beat{member: "C", principal: "svc"}, err: ErrRateLimited},
		{name: "Deviation: a rejoin beyond the churn budget is refused",
			world: aloneSteady().fence("A", 3).assign(map[string][]int{}, "A"), rules: churnBudget, runtime: churnSpent(""),
			beat: beat{member: "A", mv: 3}, err: ErrRateLimited},
		{name: "Deviation: a leave beyond the churn budget is refused (the member expires at its lease)",
			world: aloneSteady(), rules: churnBudget, runtime: churnSpent(""),
			beat: beat{member: "A", epoch: -1, mv: 2, revoking: []wire.RevokingReport{revoked(0), revoked(1), revoked(2), revoked(3)}}, err: ErrRateLimited},
		{name: "Deviation: another principal's spent churn budget does not limit a join", world: aloneSteady(), rules: churnBudget, runtime: churnSpent("other"),
			beat:   beat{member: "C", principal: "svc"},
			events: []string{"member.joined", "assignment.changed"}, want: answer{wire.StatusOK, 3, nil, []int{2, 3}}},
		{name: "Deviation: with the churn budget spent, a steady heartbeat is answered", world: aloneSteady(), rules: churnBudget, runtime: churnSpent(""),
			beat: beat{member: "A", epoch: 2, mv: 2, owned: []int{0, 1, 2, 3}}, want: answer{wire.StatusOK, 2, []int{0, 1, 2, 3}, nil}},
		{name: "Deviation: with the churn budget spent, a replayed join is answered (it records no join)", world: twoMembers(), rules: churnBudget, runtime: churnSpent(""),
			beat: beat{member: "B"}, want: answer{wire.StatusOK, 3, nil, []int{2, 3}}},
		{name: "Deviation: with the churn budget spent, a repeated leave is answered (it records no leave)",
			world: aloneSteady().leave("A").own("A", nil, nil).assign(map[string][]int{}, "A"), rules: churnBudget, runtime: churnSpent(""),
			beat: beat{member: "A", epoch: -1, mv: 3}, want: answer{wire.StatusOK, -1, nil, nil}},
		{name: "Deviation: a join into a full group first prunes the terminal records, oldest first",
			world: twoMembers().fence("B", 4).assign(map[string][]int{"A": {0, 1, 2, 3}}, "B"), rules: func(r *Rules) { r.MaxMembers = 2 },
			beat:   beat{member: "C"},
			events: []string{"member.pruned", "member.joined", "assignment.changed"}, want: answer{wire.StatusOK, 5, nil, []int{2, 3}},
			after: func(t *testing.T, rt *RuntimeTable) {
				if _, ok := rt.member(rulesKey, "B"); ok {
					t.Error("the pruned member's runtime is still there")
				}
			}},
	}
}

func TestHeartbeatRules(t *testing.T) {
	seen := map[string]bool{}
	for _, row := range heartbeatRules() {
		if seen[row.name] {
			t.Fatalf("two rows named %q", row.name)
		}
		seen[row.name] = true
		t.Run(row.name, func(t *testing.T) { row.check(t) })
	}
}

// check runs the row's heartbeat as the writer would (screen, then the
// decision in a batch, committed) and compares.
func (row ruleRow) check(t *testing.T) {
	now := rulesNow()
	r := testRules()
	if row.rules != nil {
		row.rules(&r)
	}
	table := row.table(now)
	req := row.beat.request()
	path := row.beat.path
	if path == "" {
		path = row.beat.member
	}
	// The steady path, on a table of its own (it renews).
	g, _ := row.world.st.Group(rulesKey)
	var steadyAnswer *wire.HeartbeatResponse
	if !row.world.noneOf {
		if req, resp, err := Screen(r, path, req); resp == nil && err == nil {
			steadyAnswer = Steady(r, row.table(now), g.ReadOnly(), rulesKey, path, req, now)
		}
	}

	req, resp, err := Screen(r, path, req)
	var emitted []string
	var after *projection.Group
	if resp == nil && err == nil {
		b := NewBatch(row.world.st, table, now)
		tx := &Tx{B: b, RT: b.RT.Child(now), Rules: r, Meta: events.Meta{Actor: path, Time: now}, Now: now, Log: zerolog.Nop()}
		var res Result[*wire.HeartbeatResponse]
		res, err = Decide(tx, func(tx *Tx) (*wire.HeartbeatResponse, error) {
			return RegisterAndBeat(tx, rulesKey, path, row.beat.principal, req, row.reg)
		})
		resp = res.Answer
		if err == nil {
			tx.RT.Merge()
			table.Commit(b.RT)
			// What the decision returned is all there is to check: its
			// records, folded onto the state it was decided on, and its
			// answer.
			ov := row.world.st.NewOverlayLocked()
			for _, rec := range res.Records {
				emitted = append(emitted, rec.Type)
				ov.Apply(rec)
			}
			after = ov.Group(rulesKey)
		}
	}
	if row.err != nil || err != nil {
		if !errors.Is(err, row.err) {
			t.Fatalf("error %v, want %v", err, row.err)
		}
		var ce *Error
		if errors.Is(err, ErrRateLimited) && (!errors.As(err, &ce) || ce.RetryAfter <= 0) {
			t.Errorf("a rate-limited refusal without when to retry: %v", err)
		}
		return
	}
	if !reflect.DeepEqual(emitted, row.events) {
		t.Errorf("events %v, want %v", emitted, row.events)
	}
	got := answer{resp.Status, resp.MemberEpoch, refs(resp.Assignment.AssignedShards), refs(resp.Assignment.PendingShards)}
	if !reflect.DeepEqual(got, row.want) {
		t.Errorf("answer %+v, want %+v", got, row.want)
	}
	switch resp.Status {
	case wire.StatusOK, wire.StatusSyncMetadata, wire.StatusRevokePending, wire.StatusFenced:
		if after == nil || resp.GroupEpoch != after.GroupEpoch || resp.AssignmentEpoch != after.AssignmentEpoch || resp.MetadataVersion != after.MetadataVersion {
			t.Errorf("answer G=%d AE=%d MV=%d is not the group's after the decision", resp.GroupEpoch, resp.AssignmentEpoch, resp.MetadataVersion)
		}
	default:
		if resp.GroupEpoch != 0 || resp.AssignmentEpoch != 0 || resp.MetadataVersion != 0 {
			t.Errorf("a rejection carries G=%d AE=%d MV=%d, want 0", resp.GroupEpoch, resp.AssignmentEpoch, resp.MetadataVersion)
		}
	}
	switch {
	case steadyAnswer != nil && row.steadyDefers:
		if len(emitted) == 0 {
			t.Error("the row says the steady path defers the decision's maintenance, but the decision emits nothing")
		}
	case steadyAnswer != nil && len(emitted) != 0:
		t.Errorf("the steady path answered a heartbeat whose decision emits %v", emitted)
	case steadyAnswer != nil && !reflect.DeepEqual(steadyAnswer, resp):
		t.Errorf("the steady path answers %+v, the decision %+v", steadyAnswer, resp)
	case steadyAnswer == nil && row.steadyDefers:
		t.Error("the row says the steady path takes the heartbeat, but it does not")
	}
	if row.after != nil {
		row.after(t, table)
	}
}

// table is the row's runtime table: every member armed now, then the row's
// runtime setup.
func (row ruleRow) table(now time.Time) *RuntimeTable {
	rt := NewRuntimeTable()
	rt.Rearm(row.world.st, now, 15*time.Second)
	if row.runtime != nil {
		row.runtime(rt, now)
	}
	return rt
}

// refs is the indexes of shard refs (nil for none, to compare with a row).
func refs(rs []wire.ShardRef) []int {
	var out []int
	for _, r := range rs {
		out = append(out, r.ShardIndex)
	}
	return out
}

// TestHeartbeatRulesCoverTheContract: every step of CONTRACT.md §3.2 that
// decides (1-8, 15) and every heartbeat deviation has a row.
func TestHeartbeatRulesCoverTheContract(t *testing.T) {
	want := []string{"§3.2 step 0", "§3.2 step 1", "§3.2 step 2", "§3.2 step 3", "§3.2 step 4", "§3.2 step 5", "§3.2 step 6",
		"§3.2 step 7", "§3.2 step 8", "§3.2 step 9", "§3.5 step 1", "§3.5 step 3", "§3.5 step 4", "§3.5 step 5", "§3.7"}
	for _, w := range want {
		found := false
		for _, row := range heartbeatRules() {
			found = found || strings.HasPrefix(row.name, w+":") || strings.HasPrefix(row.name, w+" (")
		}
		if !found {
			t.Errorf("no row for %s", w)
		}
	}
}
