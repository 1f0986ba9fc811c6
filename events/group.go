package events

// Epochs are the group counters an event sets. Events that move them carry the new
// values, so the fold copies numbers instead of re-deriving the protocol's rules.
type Epochs struct {
	GroupEpoch      int64 `msgpack:"groupEpoch" json:"groupEpoch"`
	MetadataVersion int64 `msgpack:"metadataVersion" json:"metadataVersion"`
}

// GroupCreated is written when an operator creates a group, or a member's
// first heartbeat registers it on a stream with metadata (RegisteredBy names
// the member), and its consumer group was provisioned on every shard. The
// group starts at group epoch and assignment epoch 1 and at metadata version
// MetadataVersion (the stream's; 0 in older entries, meaning 1).
type GroupCreated struct {
	ShardCount  int    `msgpack:"shardCount" json:"shardCount"`
	Provisioned bool   `msgpack:"provisioned" json:"provisioned"`
	RequestedBy string `msgpack:"requestedBy" json:"requestedBy"`
	Reason      string `msgpack:"reason,omitempty" json:"reason"`
	// Ordering is "KEY" for a group whose reshardings keep per-key order
	// (fenced publishes and barriers), "" for none.
	Ordering        string `msgpack:"ordering,omitempty" json:"ordering,omitempty"`
	MetadataVersion int64  `msgpack:"metadataVersion,omitempty" json:"metadataVersion,omitempty"`
	RegisteredBy    string `msgpack:"registeredBy,omitempty" json:"registeredBy,omitempty"`
	// KeysChecked says the event records which shard streams its
	// provisioning created (CreatedShards, possibly none); entries of builds
	// before that record leave it false, and every shard they provisioned
	// counts as created.
	KeysChecked   bool  `msgpack:"keysChecked,omitempty" json:"keysChecked,omitempty"`
	CreatedShards []int `msgpack:"createdShards,omitempty" json:"createdShards,omitempty"`
	// Principal is the authenticated user that created or registered the
	// group, Anonymous set when the caller had none (a member API without
	// authentication): the group counts against that principal's quotas
	// (commands/quota.go). Entries written before quotas name nobody and
	// count against no principal.
	Principal string `msgpack:"principal,omitempty" json:"principal,omitempty"`
	Anonymous bool   `msgpack:"anonymous,omitempty" json:"anonymous,omitempty"`
	// ForeignShards are the shards whose consumer group of this name
	// existed before the group's provisioning, on a shard stream the
	// coordinator did not create (an adopted one): the consumer group is
	// someone else's, and the group's delete or expiry leaves it in place.
	ForeignShards []int `msgpack:"foreignShards,omitempty" json:"foreignShards,omitempty"`
}

// GroupDeleted is written when an operator deletes a group, or when the
// coordinator removes a group that registered itself by heartbeat and had
// no live member for --empty-group-retention (Expired; RequestedBy is the
// coordinator). Destroy names the shard streams from which the group's Redis
// consumer group (of the group's name) is to be destroyed: the ones the
// coordinator provisioned it on, never one it found there (ForeignShards of
// group.created). The reconciler destroys them outside the writer and then
// records group.consumer_groups_destroyed; until then a group of the same
// name cannot be created again (its consumer groups would be destroyed
// under it). Shard streams are left in place. Entries written before this
// record destroy nothing.
type GroupDeleted struct {
	RequestedBy string   `msgpack:"requestedBy" json:"requestedBy"`
	Reason      string   `msgpack:"reason" json:"reason"`
	Force       bool     `msgpack:"force" json:"force"`
	Destroy     []string `msgpack:"destroy,omitempty" json:"destroy,omitempty"`
	Expired     bool     `msgpack:"expired,omitempty" json:"expired,omitempty"`
}

// ConsumerGroupsDestroyed is written once the Redis consumer groups a
// group.deleted named (Destroy) are gone: destroyed by the reconciler, or
// already missing. StreamKeys are the group.deleted's Destroy. It ends the
// removal; a group of the same name may be created again after it.
type ConsumerGroupsDestroyed struct {
	StreamKeys []string `msgpack:"streamKeys" json:"streamKeys"`
}

// CommandRejected records an admin command that was refused, so the audit trail
// answers "who tried what, when" and not only what succeeded. It changes no state.
// Refusals are recorded at a bounded rate per principal: Suppressed counts the
// refusals of the same principal that were not recorded since its last record.
// NoGroup marks a refusal naming a group (or, for a stream's command, a
// stream) that did not exist: it is in the log but in no history index
// (HistoryIndex), so made-up names create no key.
type CommandRejected struct {
	Command     string `msgpack:"command" json:"command"`
	ErrorCode   string `msgpack:"errorCode" json:"errorCode"`
	Message     string `msgpack:"message" json:"message"`
	RequestedBy string `msgpack:"requestedBy,omitempty" json:"requestedBy"`
	Detail      string `msgpack:"detail,omitempty" json:"detail"`
	Suppressed  int64  `msgpack:"suppressed,omitempty" json:"suppressed,omitempty"`
	NoGroup     bool   `msgpack:"noGroup,omitempty" json:"noGroup,omitempty"`
}

// AssignmentComputed carried the whole target assignment (member id to shard
// indexes) and the new assignment epoch. Builds before assignment.changed wrote
// it on every recomputation; it is no longer written (its size grew with the
// group), but old logs keep folding it.
type AssignmentComputed struct {
	AssignmentEpoch int64   `msgpack:"assignmentEpoch" json:"assignmentEpoch"`
	Targets         Targets `msgpack:"targets" json:"targets"`
}

// AssignmentChanged is written whenever the target assignment is recomputed and
// differs from the recorded one, or its epoch lags the group epoch. It names
// only what changed: Targets holds the new target of every member whose target
// changed (possibly empty), Removed the members that left the target
// assignment (no longer live). The fold keeps the whole map, so the bytes a
// join appends do not grow with the group.
type AssignmentChanged struct {
	AssignmentEpoch int64    `msgpack:"assignmentEpoch" json:"assignmentEpoch"`
	Targets         Targets  `msgpack:"targets" json:"targets"`
	Removed         []string `msgpack:"removed" json:"removed"`
}

// MemberIDs lists, in no particular order, the members whose target the
// event sets or removes.
func (e *AssignmentChanged) MemberIDs() []string {
	ids := make([]string, 0, len(e.Targets)+len(e.Removed))
	for id := range e.Targets {
		ids = append(ids, id)
	}
	return append(ids, e.Removed...)
}

// ShardRepair is one routed shard that Redis had lost: its stream, or the
// group's consumer group on it.
type ShardRepair struct {
	ShardIndex    int    `msgpack:"shardIndex" json:"shardIndex"`
	StreamKey     string `msgpack:"streamKey" json:"streamKey"`
	StreamMissing bool   `msgpack:"streamMissing" json:"streamMissing"`
	GroupMissing  bool   `msgpack:"groupMissing" json:"groupMissing"`
}

// ShardsRepaired is written when the maintenance check found routed shards of
// the group whose stream or consumer group Redis no longer has (a restart
// without persistence, an operator's mistake), just before it recreates them.
// A lost stream comes back empty; a lost consumer group on a surviving stream
// is recreated at the stream's start, so what is still in the stream is read
// again (at least once). It changes no state. Retired shards are never
// repaired; a removed shard still draining gets back a lost consumer group,
// never a lost stream.
type ShardsRepaired struct {
	Shards []ShardRepair `msgpack:"shards" json:"shards"`
}

func (GroupCreated) EventType() string { return "group.created" }
func (GroupDeleted) EventType() string { return "group.deleted" }
func (ConsumerGroupsDestroyed) EventType() string {
	return "group.consumer_groups_destroyed"
}
func (CommandRejected) EventType() string    { return "command.rejected" }
func (AssignmentComputed) EventType() string { return "assignment.computed" }
func (AssignmentChanged) EventType() string  { return "assignment.changed" }
func (ShardsRepaired) EventType() string     { return "group.shards_repaired" }

func init() {
	Register("group.created", func() Event { return &GroupCreated{} })
	Register("group.deleted", func() Event { return &GroupDeleted{} })
	Register("group.consumer_groups_destroyed", func() Event { return &ConsumerGroupsDestroyed{} })
	Register("command.rejected", func() Event { return &CommandRejected{} })
	Register("assignment.computed", func() Event { return &AssignmentComputed{} })
	Register("assignment.changed", func() Event { return &AssignmentChanged{} })
	Register("group.shards_repaired", func() Event { return &ShardsRepaired{} })
}
