package events

// MemberJoined is written when a member joins with epoch 0, or rejoins after it
// expired, was fenced or left. It bumps the group epoch and metadata version.
// Principal is the authenticated user that joined it ("" when the member API
// is anonymous): from then on only that principal may heartbeat for the id.
type MemberJoined struct {
	MemberID       string `msgpack:"memberId" json:"memberId"`
	MemberName     string `msgpack:"memberName" json:"memberName"`
	MaxConcurrency int    `msgpack:"maxConcurrency" json:"maxConcurrency"`
	Rejoin         bool   `msgpack:"rejoin" json:"rejoin"`
	Principal      string `msgpack:"principal,omitempty" json:"principal,omitempty"`
	Epochs
}

// MemberUpdated is written when a member reports a new name or runtime capacity.
// Capacity is recorded, not used for assignment.
type MemberUpdated struct {
	MemberID       string `msgpack:"memberId" json:"memberId"`
	MemberName     string `msgpack:"memberName" json:"memberName"`
	MaxConcurrency int    `msgpack:"maxConcurrency" json:"maxConcurrency"`
}

// MemberSynced is written when an accepted heartbeat gives a member a new member
// epoch or a new granted set (the shards an OK response allowed it to read). From
// the moment of the grant, the shards count as held by that member.
type MemberSynced struct {
	MemberID    string `msgpack:"memberId" json:"memberId"`
	MemberEpoch int64  `msgpack:"memberEpoch" json:"memberEpoch"`
	Granted     []int  `msgpack:"granted" json:"granted"`
}

// OwnershipReported is written when a member's heartbeat reports a different set
// of owned or revoking shards than the coordinator had recorded.
type OwnershipReported struct {
	MemberID string `msgpack:"memberId" json:"memberId"`
	Owned    []int  `msgpack:"owned" json:"owned"`
	Revoking []int  `msgpack:"revoking" json:"revoking"`
}

// RevokeAcknowledged is written when a member released shards the coordinator had
// asked it to give up (it stopped listing them, or reported REVOKED with nothing
// in flight). The shards may now be granted to their new owner.
type RevokeAcknowledged struct {
	MemberID string `msgpack:"memberId" json:"memberId"`
	Shards   []int  `msgpack:"shards" json:"shards"`
}

// MemberLeft is written on the first graceful leave (memberEpoch -1). The member's
// shards stay blocked for their new owners until it releases them.
type MemberLeft struct {
	MemberID string `msgpack:"memberId" json:"memberId"`
	Epochs
}

// MembersExpired is written when members stopped heartbeating past their lease.
// Each expired member's epoch goes up by one and its shards become reassignable.
// Reason says why when it was not the lease: the connection of a member's
// held heartbeat closed and it did not heartbeat again within the grace
// ("" in entries written for a lease, and in older entries).
type MembersExpired struct {
	MemberIDs []string `msgpack:"memberIds" json:"memberIds"`
	Epochs
	Reason string `msgpack:"reason,omitempty" json:"reason,omitempty"`
}

// MemberFenced is written when a member reported shards it may not hold, or did not
// release a revoked shard within the rebalance timeout. Its ownership is cleared.
type MemberFenced struct {
	MemberID    string `msgpack:"memberId" json:"memberId"`
	Reason      string `msgpack:"reason" json:"reason"`
	MemberEpoch int64  `msgpack:"memberEpoch" json:"memberEpoch"`
	Epochs
}

// MembersPruned is written when terminal members (expired, fenced, or left with
// nothing held) are removed after the retention period.
type MembersPruned struct {
	MemberIDs       []string `msgpack:"memberIds" json:"memberIds"`
	MetadataVersion int64    `msgpack:"metadataVersion" json:"metadataVersion"`
}

func (MemberJoined) EventType() string       { return "member.joined" }
func (MemberUpdated) EventType() string      { return "member.updated" }
func (MemberSynced) EventType() string       { return "member.synced" }
func (OwnershipReported) EventType() string  { return "member.ownership_reported" }
func (RevokeAcknowledged) EventType() string { return "member.revoke_acknowledged" }
func (MemberLeft) EventType() string         { return "member.left" }
func (MembersExpired) EventType() string     { return "member.expired" }
func (MemberFenced) EventType() string       { return "member.fenced" }
func (MembersPruned) EventType() string      { return "member.pruned" }

func init() {
	Register("member.joined", func() Event { return &MemberJoined{} })
	Register("member.updated", func() Event { return &MemberUpdated{} })
	Register("member.synced", func() Event { return &MemberSynced{} })
	Register("member.ownership_reported", func() Event { return &OwnershipReported{} })
	Register("member.revoke_acknowledged", func() Event { return &RevokeAcknowledged{} })
	Register("member.left", func() Event { return &MemberLeft{} })
	Register("member.expired", func() Event { return &MembersExpired{} })
	Register("member.fenced", func() Event { return &MemberFenced{} })
	Register("member.pruned", func() Event { return &MembersPruned{} })
}
