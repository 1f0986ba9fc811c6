package projection

import (
	"github.com/rscoord/rsc/events"
)

// How member records change a group.

func init() {
	register(memberJoined)
	registerMember(func(ev *events.MemberJoined) string { return ev.MemberID })
	register(memberUpdated)
	registerMember(func(ev *events.MemberUpdated) string { return ev.MemberID })
	register(memberSynced)
	registerMember(func(ev *events.MemberSynced) string { return ev.MemberID })
	register(ownershipReported)
	registerMember(func(ev *events.OwnershipReported) string { return ev.MemberID })
	register(memberLeft)
	registerMember(func(ev *events.MemberLeft) string { return ev.MemberID })
	register(membersExpired)
	registerMembers(func(ev *events.MembersExpired) []string { return ev.MemberIDs })
	register(memberFenced)
	registerMember(func(ev *events.MemberFenced) string { return ev.MemberID })
	register(func(g *Group, _ events.Record, ev *events.MembersPruned) { membersPruned(g, ev) })
	registerMembers(func(ev *events.MembersPruned) []string { return ev.MemberIDs })
	// Audit only: a revoke's new ownership came with member.ownership_reported.
	registerNoFold(&events.RevokeAcknowledged{})
}

// memberOf is the member id (created ACTIVE if the group has no record of
// it), touched at the record's time.
func memberOf(g *Group, id string, rec events.Record) *Member {
	touch(g, id)
	m := memberForWrite(g, id)
	if m == nil {
		m = &Member{ID: id, Name: id, State: MemberActive}
		putMember(g, m)
	}
	m.UpdatedAt = rec.Time
	return m
}

func memberJoined(g *Group, rec events.Record, ev *events.MemberJoined) {
	m := memberOf(g, ev.MemberID, rec)
	m.Name = ev.MemberName
	m.MaxConcurrency = ev.MaxConcurrency
	m.State = MemberActive
	m.Epoch = 0
	m.Current, m.Revoking, m.Granted = nil, nil, nil
	m.JoinedAt = rec.Time
	m.Principal = ev.Principal
	setEpochs(g, ev.Epochs)
}

func memberUpdated(g *Group, rec events.Record, ev *events.MemberUpdated) {
	m := memberOf(g, ev.MemberID, rec)
	m.Name = ev.MemberName
	m.MaxConcurrency = ev.MaxConcurrency
}

func memberSynced(g *Group, rec events.Record, ev *events.MemberSynced) {
	m := memberOf(g, ev.MemberID, rec)
	m.Epoch = ev.MemberEpoch
	m.Granted = SortedInts(ev.Granted)
}

func ownershipReported(g *Group, rec events.Record, ev *events.OwnershipReported) {
	m := memberOf(g, ev.MemberID, rec)
	m.Current = SortedInts(ev.Owned)
	m.Revoking = SortedInts(ev.Revoking)
}

func memberLeft(g *Group, rec events.Record, ev *events.MemberLeft) {
	m := memberOf(g, ev.MemberID, rec)
	m.State = MemberLeaving
	m.Epoch = -1
	m.Granted = nil
	setEpochs(g, ev.Epochs)
}

func membersExpired(g *Group, rec events.Record, ev *events.MembersExpired) {
	for _, id := range ev.MemberIDs {
		m := memberOf(g, id, rec)
		m.State = MemberExpired
		m.Epoch++
		m.Granted = nil
	}
	setEpochs(g, ev.Epochs)
}

func memberFenced(g *Group, rec events.Record, ev *events.MemberFenced) {
	m := memberOf(g, ev.MemberID, rec)
	m.State = MemberFenced
	m.Epoch = ev.MemberEpoch
	m.Current, m.Revoking, m.Granted = nil, nil, nil
	setEpochs(g, ev.Epochs)
}

func membersPruned(g *Group, ev *events.MembersPruned) {
	for _, id := range ev.MemberIDs {
		touch(g, id)
		deleteMember(g, id)
		deleteTarget(g, id)
	}
	g.MetadataVersion = ev.MetadataVersion
}
