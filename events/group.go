package events

// Epochs are the group counters an event sets. Events that move them carry the new
// values, so the fold copies numbers instead of re-deriving the protocol's rules.
type Epochs struct {
	GroupEpoch      int64 `msgpack:"groupEpoch" json:"groupEpoch"`
	MetadataVersion int64 `msgpack:"metadataVersion" json:"metadataVersion"`
}

// GroupCreated is written when an operator creates a group and its shard streams
// were provisioned. The group starts at group epoch, assignment epoch and
// metadata version 1.
type GroupCreated struct {
	ShardCount  int    `msgpack:"shardCount" json:"shardCount"`
	Provisioned bool   `msgpack:"provisioned" json:"provisioned"`
	RequestedBy string `msgpack:"requestedBy" json:"requestedBy"`
	Reason      string `msgpack:"reason,omitempty" json:"reason"`
}

// GroupDeleted is written when an operator deletes a group. Stream keys and Redis
// consumer groups are left in place.
type GroupDeleted struct {
	RequestedBy string `msgpack:"requestedBy" json:"requestedBy"`
	Reason      string `msgpack:"reason" json:"reason"`
	Force       bool   `msgpack:"force" json:"force"`
}

// CommandRejected records an admin command that was refused, so the audit trail
// answers "who tried what, when" and not only what succeeded. It changes no state.
type CommandRejected struct {
	Command     string `msgpack:"command" json:"command"`
	ErrorCode   string `msgpack:"errorCode" json:"errorCode"`
	Message     string `msgpack:"message" json:"message"`
	RequestedBy string `msgpack:"requestedBy,omitempty" json:"requestedBy"`
	Detail      string `msgpack:"detail,omitempty" json:"detail"`
}

// AssignmentComputed is written whenever the target assignment is recomputed: it
// carries the whole target (member id to shard indexes) and the new assignment epoch.
type AssignmentComputed struct {
	AssignmentEpoch int64   `msgpack:"assignmentEpoch" json:"assignmentEpoch"`
	Targets         Targets `msgpack:"targets" json:"targets"`
}

func (GroupCreated) EventType() string       { return "group.created" }
func (GroupDeleted) EventType() string       { return "group.deleted" }
func (CommandRejected) EventType() string    { return "command.rejected" }
func (AssignmentComputed) EventType() string { return "assignment.computed" }

func init() {
	Register("group.created", func() Event { return &GroupCreated{} })
	Register("group.deleted", func() Event { return &GroupDeleted{} })
	Register("command.rejected", func() Event { return &CommandRejected{} })
	Register("assignment.computed", func() Event { return &AssignmentComputed{} })
}
