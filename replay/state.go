package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// Point is a position in the log: after the entry UntilID (inclusive), or after
// the last entry decided at or before At. The zero Point is the end of the log.
type Point struct {
	UntilID string
	At      time.Time
}

// StateAt folds the log from zero up to p and returns the projection and the id
// of the last entry folded (events.ZeroID when none). A TrimmedLog is folded
// from its base snapshot; a point before it is ErrTrimmed.
//
// With UntilID, every entry with an id at or before it is folded, and the
// rest of the decision the last of them belongs to (decisionEnd: the state
// between two records of one decision was never anyone's; the returned id
// says where the fold ended); the id need not exist, and nothing after the
// decision is decoded, so the state just before a corrupt entry can still be
// read. With At, entries are folded while their
// envelope time is at or before At: a fold must be a prefix of the log, so an
// entry stamped later than At ends it even if a later entry carries an earlier
// time (times are decision times, written in order by one coordinator).
func StateAt(ctx context.Context, log events.Log, p Point) (*projection.State, string, error) {
	o := foldOptions{}
	switch {
	case p.UntilID != "" && !p.At.IsZero():
		return nil, "", fmt.Errorf("%w: a point is an id or a time, not both", ErrInvalidArgument)
	case p.UntilID != "":
		if _, err := parseUserID("until id", p.UntilID); err != nil {
			return nil, "", err
		}
		if err := checkPoint(log, "until id", p.UntilID); err != nil {
			return nil, "", err
		}
		o.until = p.UntilID
	case !p.At.IsZero():
		if err := checkTime(ctx, log, p.At); err != nil {
			return nil, "", err
		}
		o.stop = func(rec events.Record) bool { return rec.Time.After(p.At) }
	}
	f, err := startFolder(ctx, log)
	if err != nil {
		return nil, "", err
	}
	if err := f.fold(ctx, o); err != nil {
		return nil, "", err
	}
	return f.st, f.st.LastID(), nil
}

// GroupSnapshot is one group as the coordinator believed it at a point of the
// log, in the monitoring API's shapes: the GroupResponse fields (with
// projection's additions) at the top level, then the members, the
// AssignmentsResponse and every resharding of the group (MigrationsResponse
// order: by creation). `replay state` prints it and the HTTP replay endpoint
// returns it, so "what the coordinator believed then" reads like "what it
// believes now". Everything in it comes from the log: lease times, reported
// progress and live Redis evidence are not part of it.
type GroupSnapshot struct {
	// LastID is the id of the last log entry folded into this snapshot.
	LastID string `json:"lastId"`
	wire.Group
	// Members are sorted by memberId and include EXPIRED, FENCED and LEAVING
	// members until they were pruned.
	Members     []MemberView      `json:"members"`
	Assignments wire.Assignments  `json:"assignments"`
	Reshardings []wire.Resharding `json:"migrations"`
}

// MemberView is the contract's MemberMetadata as far as the log knows a member
// (no heartbeat or lease times, no consumption progress), plus when it joined
// and when an event last changed it.
type MemberView struct {
	MemberID              string          `json:"memberId"`
	MemberName            string          `json:"memberName"`
	State                 string          `json:"state"`
	MemberEpoch           int64           `json:"memberEpoch"`
	MetadataVersion       int64           `json:"metadataVersion"`
	RuntimeMaxConcurrency int             `json:"runtimeMaxConcurrency"`
	CurrentAssignment     []wire.ShardRef `json:"currentAssignment"`
	GrantedAssignment     []wire.ShardRef `json:"grantedAssignment"`
	Revoking              []wire.ShardRef `json:"revoking"`
	JoinedAt              time.Time       `json:"joinedAt"`
	UpdatedAt             time.Time       `json:"updatedAt"`
}

// GroupState renders one group of a projection (from StateAt). A group that
// does not exist in it is ErrGroupNotFound.
func GroupState(st *projection.State, key projection.GroupKey) (*GroupSnapshot, error) {
	// LastID first: the group is copied after it, and a state being folded
	// concurrently can only have moved on, never back.
	last := st.LastID()
	g, ok := st.Group(key)
	if !ok {
		return nil, fmt.Errorf("%w: %s at %s", ErrGroupNotFound, groupName(key), last)
	}
	s := snapshotOf(g, last)
	return &s, nil
}

// GroupStates renders every group of a projection, in creation order.
func GroupStates(st *projection.State) []GroupSnapshot {
	last := st.LastID()
	groups := st.Groups()
	out := make([]GroupSnapshot, 0, len(groups))
	for _, g := range groups {
		out = append(out, snapshotOf(g, last))
	}
	return out
}

// StreamState is a stream as GET /coord/v1/streams/{p} shows it.
type StreamState = wire.Stream

// StreamStates renders every stream of a projection with metadata or
// groups, by prefix.
func StreamStates(st *projection.State) []StreamState {
	out := []StreamState{}
	for _, v := range projection.StreamViews(st) {
		out = append(out, projection.WireStream(v))
	}
	return out
}

// snapshotOf renders a group copy the caller owns.
func snapshotOf(g *projection.Group, lastID string) GroupSnapshot {
	s := GroupSnapshot{
		LastID:      lastID,
		Group:       projection.WireGroup(projection.ViewGroup(g)),
		Members:     []MemberView{},
		Assignments: projection.WireAssignments(projection.ViewAssignments(g)),
		Reshardings: []wire.Resharding{},
	}
	for _, id := range g.MemberIDs() {
		m := g.Member(id)
		s.Members = append(s.Members, MemberView{
			MemberID: m.ID, MemberName: m.Name, State: m.State, MemberEpoch: m.Epoch,
			MetadataVersion: g.MetadataVersion, RuntimeMaxConcurrency: m.MaxConcurrency,
			CurrentAssignment: projection.WireShards(projection.SortedInts(m.Current)),
			GrantedAssignment: projection.WireShards(projection.SortedInts(m.Granted)),
			Revoking:          projection.WireShards(projection.SortedInts(m.Revoking)),
			JoinedAt:          m.JoinedAt.UTC(), UpdatedAt: m.UpdatedAt.UTC(),
		})
	}
	for _, m := range g.Reshardings {
		s.Reshardings = append(s.Reshardings, projection.WireResharding(projection.ViewResharding(g, m)))
	}
	return s
}
