package events

// Hand-written msgpack decoders of every event payload (see fastdecode.go). A
// new event type needs one: its wire field names in declaration order (an
// embedded Epochs adds "groupEpoch" and "metadataVersion" where it is
// embedded), decodeField for each, and reset. Until it has one it decodes
// through reflection; TestEveryTypeDecodesFast says which types lack one, and
// TestFastDecodeMatchesReflect and FuzzDecodeFast check each against reflection.

// epochsFields decodes the embedded Epochs under the key "Epochs". It is its
// own type so that Epochs's methods are not promoted into the events that embed it.
type epochsFields Epochs

var epochsTable = fieldTable{names: []string{"groupEpoch", "metadataVersion"}}

func (e *epochsFields) wireFields() *fieldTable { return &epochsTable }
func (e *epochsFields) reset()                  { *e = epochsFields{} }
func (e *epochsFields) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.GroupEpoch, err = r.int64()
	case 1:
		e.MetadataVersion, err = r.int64()
	}
	return err
}

// epochsField decodes field i of an event that embeds Epochs at wire index
// first (its two fields follow each other there), or the whole Epochs (i == all).
func epochsField(r *reader, ep *Epochs, i, first, all int) error {
	if i == all {
		return r.decodeStruct((*epochsFields)(ep))
	}
	return (*epochsFields)(ep).decodeField(r, i-first)
}

// group.go

var groupCreatedFields = fieldTable{names: []string{"shardCount", "provisioned", "requestedBy", "reason", "ordering", "metadataVersion", "registeredBy", "keysChecked", "createdShards", "principal", "anonymous", "foreignShards"}}

func (e *GroupCreated) wireFields() *fieldTable { return &groupCreatedFields }
func (e *GroupCreated) reset()                  { *e = GroupCreated{} }
func (e *GroupCreated) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ShardCount, err = r.int()
	case 1:
		e.Provisioned, err = r.bool()
	case 2:
		e.RequestedBy, err = r.string()
	case 3:
		e.Reason, err = r.string()
	case 4:
		e.Ordering, err = r.string()
	case 5:
		e.MetadataVersion, err = r.int64()
	case 6:
		e.RegisteredBy, err = r.string()
	case 7:
		e.KeysChecked, err = r.bool()
	case 8:
		err = r.ints(&e.CreatedShards)
	case 9:
		e.Principal, err = r.string()
	case 10:
		e.Anonymous, err = r.bool()
	case 11:
		err = r.ints(&e.ForeignShards)
	}
	return err
}

var groupDeletedFields = fieldTable{names: []string{"requestedBy", "reason", "force", "destroy", "expired"}}

func (e *GroupDeleted) wireFields() *fieldTable { return &groupDeletedFields }
func (e *GroupDeleted) reset()                  { *e = GroupDeleted{} }
func (e *GroupDeleted) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.RequestedBy, err = r.string()
	case 1:
		e.Reason, err = r.string()
	case 2:
		e.Force, err = r.bool()
	case 3:
		err = r.strings(&e.Destroy)
	case 4:
		e.Expired, err = r.bool()
	}
	return err
}

var consumerGroupsDestroyedFields = fieldTable{names: []string{"streamKeys"}}

func (e *ConsumerGroupsDestroyed) wireFields() *fieldTable { return &consumerGroupsDestroyedFields }
func (e *ConsumerGroupsDestroyed) reset()                  { *e = ConsumerGroupsDestroyed{} }
func (e *ConsumerGroupsDestroyed) decodeField(r *reader, i int) (err error) {
	if i == 0 {
		err = r.strings(&e.StreamKeys)
	}
	return err
}

var commandRejectedFields = fieldTable{names: []string{"command", "errorCode", "message", "requestedBy", "detail", "suppressed", "noGroup"}}

func (e *CommandRejected) wireFields() *fieldTable { return &commandRejectedFields }
func (e *CommandRejected) reset()                  { *e = CommandRejected{} }
func (e *CommandRejected) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.Command, err = r.string()
	case 1:
		e.ErrorCode, err = r.string()
	case 2:
		e.Message, err = r.string()
	case 3:
		e.RequestedBy, err = r.string()
	case 4:
		e.Detail, err = r.string()
	case 5:
		e.Suppressed, err = r.int64()
	case 6:
		e.NoGroup, err = r.bool()
	}
	return err
}

var assignmentComputedFields = fieldTable{names: []string{"assignmentEpoch", "targets"}}

func (e *AssignmentComputed) wireFields() *fieldTable { return &assignmentComputedFields }
func (e *AssignmentComputed) reset()                  { *e = AssignmentComputed{} }
func (e *AssignmentComputed) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.AssignmentEpoch, err = r.int64()
	case 1:
		err = r.targets(&e.Targets)
	}
	return err
}

var assignmentChangedFields = fieldTable{names: []string{"assignmentEpoch", "targets", "removed"}}

func (e *AssignmentChanged) wireFields() *fieldTable { return &assignmentChangedFields }
func (e *AssignmentChanged) reset()                  { *e = AssignmentChanged{} }
func (e *AssignmentChanged) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.AssignmentEpoch, err = r.int64()
	case 1:
		err = r.targets(&e.Targets)
	case 2:
		err = r.strings(&e.Removed)
	}
	return err
}

var shardRepairFields = fieldTable{names: []string{"shardIndex", "streamKey", "streamMissing", "groupMissing"}}

func (e *ShardRepair) wireFields() *fieldTable { return &shardRepairFields }
func (e *ShardRepair) reset()                  { *e = ShardRepair{} }
func (e *ShardRepair) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ShardIndex, err = r.int()
	case 1:
		e.StreamKey, err = r.string()
	case 2:
		e.StreamMissing, err = r.bool()
	case 3:
		e.GroupMissing, err = r.bool()
	}
	return err
}

var shardsRepairedFields = fieldTable{names: []string{"shards"}}

func (e *ShardsRepaired) wireFields() *fieldTable { return &shardsRepairedFields }
func (e *ShardsRepaired) reset()                  { *e = ShardsRepaired{} }
func (e *ShardsRepaired) decodeField(r *reader, i int) error {
	if i == 0 {
		return decodeStructs(r, &e.Shards)
	}
	return nil
}

// member.go

var memberJoinedFields = fieldTable{names: []string{"memberId", "memberName", "maxConcurrency", "rejoin", "principal", "groupEpoch", "metadataVersion"}, epochs: true}

func (e *MemberJoined) wireFields() *fieldTable { return &memberJoinedFields }
func (e *MemberJoined) reset()                  { *e = MemberJoined{} }
func (e *MemberJoined) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.MemberID, err = r.string()
	case 1:
		e.MemberName, err = r.string()
	case 2:
		e.MaxConcurrency, err = r.int()
	case 3:
		e.Rejoin, err = r.bool()
	case 4:
		e.Principal, err = r.string()
	default:
		err = epochsField(r, &e.Epochs, i, 5, 7)
	}
	return err
}

var memberUpdatedFields = fieldTable{names: []string{"memberId", "memberName", "maxConcurrency"}}

func (e *MemberUpdated) wireFields() *fieldTable { return &memberUpdatedFields }
func (e *MemberUpdated) reset()                  { *e = MemberUpdated{} }
func (e *MemberUpdated) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.MemberID, err = r.string()
	case 1:
		e.MemberName, err = r.string()
	case 2:
		e.MaxConcurrency, err = r.int()
	}
	return err
}

var memberSyncedFields = fieldTable{names: []string{"memberId", "memberEpoch", "granted"}}

func (e *MemberSynced) wireFields() *fieldTable { return &memberSyncedFields }
func (e *MemberSynced) reset()                  { *e = MemberSynced{} }
func (e *MemberSynced) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.MemberID, err = r.string()
	case 1:
		e.MemberEpoch, err = r.int64()
	case 2:
		err = r.ints(&e.Granted)
	}
	return err
}

var ownershipReportedFields = fieldTable{names: []string{"memberId", "owned", "revoking"}}

func (e *OwnershipReported) wireFields() *fieldTable { return &ownershipReportedFields }
func (e *OwnershipReported) reset()                  { *e = OwnershipReported{} }
func (e *OwnershipReported) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.MemberID, err = r.string()
	case 1:
		err = r.ints(&e.Owned)
	case 2:
		err = r.ints(&e.Revoking)
	}
	return err
}

var revokeAcknowledgedFields = fieldTable{names: []string{"memberId", "shards"}}

func (e *RevokeAcknowledged) wireFields() *fieldTable { return &revokeAcknowledgedFields }
func (e *RevokeAcknowledged) reset()                  { *e = RevokeAcknowledged{} }
func (e *RevokeAcknowledged) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.MemberID, err = r.string()
	case 1:
		err = r.ints(&e.Shards)
	}
	return err
}

var memberLeftFields = fieldTable{names: []string{"memberId", "groupEpoch", "metadataVersion"}, epochs: true}

func (e *MemberLeft) wireFields() *fieldTable { return &memberLeftFields }
func (e *MemberLeft) reset()                  { *e = MemberLeft{} }
func (e *MemberLeft) decodeField(r *reader, i int) (err error) {
	if i == 0 {
		e.MemberID, err = r.string()
		return err
	}
	return epochsField(r, &e.Epochs, i, 1, 3)
}

var membersExpiredFields = fieldTable{names: []string{"memberIds", "groupEpoch", "metadataVersion", "reason"}, epochs: true}

func (e *MembersExpired) wireFields() *fieldTable { return &membersExpiredFields }
func (e *MembersExpired) reset()                  { *e = MembersExpired{} }
func (e *MembersExpired) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		err = r.strings(&e.MemberIDs)
	case 3:
		e.Reason, err = r.string()
	default:
		err = epochsField(r, &e.Epochs, i, 1, 4)
	}
	return err
}

var memberFencedFields = fieldTable{names: []string{"memberId", "reason", "memberEpoch", "groupEpoch", "metadataVersion"}, epochs: true}

func (e *MemberFenced) wireFields() *fieldTable { return &memberFencedFields }
func (e *MemberFenced) reset()                  { *e = MemberFenced{} }
func (e *MemberFenced) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.MemberID, err = r.string()
	case 1:
		e.Reason, err = r.string()
	case 2:
		e.MemberEpoch, err = r.int64()
	default:
		err = epochsField(r, &e.Epochs, i, 3, 5)
	}
	return err
}

var membersPrunedFields = fieldTable{names: []string{"memberIds", "metadataVersion"}}

func (e *MembersPruned) wireFields() *fieldTable { return &membersPrunedFields }
func (e *MembersPruned) reset()                  { *e = MembersPruned{} }
func (e *MembersPruned) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		err = r.strings(&e.MemberIDs)
	case 1:
		e.MetadataVersion, err = r.int64()
	}
	return err
}

// coordinator.go

var termStartedFields = fieldTable{names: []string{"term", "holder", "url"}}

func (e *TermStarted) wireFields() *fieldTable { return &termStartedFields }
func (e *TermStarted) reset()                  { *e = TermStarted{} }
func (e *TermStarted) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.Term, err = r.int64()
	case 1:
		e.Holder, err = r.string()
	case 2:
		e.URL, err = r.string()
	}
	return err
}

var logRepairedFields = fieldTable{names: []string{"requestedBy", "reason", "skipped", "skippedCount", "through", "previousLog", "snapshotsSetAside", "leaseIgnored"}}

func (e *LogRepaired) wireFields() *fieldTable { return &logRepairedFields }
func (e *LogRepaired) reset()                  { *e = LogRepaired{} }
func (e *LogRepaired) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.RequestedBy, err = r.string()
	case 1:
		e.Reason, err = r.string()
	case 2:
		err = r.strings(&e.Skipped)
	case 3:
		e.SkippedCount, err = r.int64()
	case 4:
		e.Through, err = r.string()
	case 5:
		e.PreviousLog, err = r.string()
	case 6:
		err = r.strings(&e.SnapshotsSetAside)
	case 7:
		e.LeaseIgnored, err = r.bool()
	}
	return err
}

var logRestoredFields = fieldTable{names: []string{"restoredFrom", "logLastId", "cause", "lostEntries", "requestedBy", "reason", "coordinator"}}

func (e *LogRestored) wireFields() *fieldTable { return &logRestoredFields }
func (e *LogRestored) reset()                  { *e = LogRestored{} }
func (e *LogRestored) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.RestoredFrom, err = r.string()
	case 1:
		e.LogLastID, err = r.string()
	case 2:
		e.Cause, err = r.string()
	case 3:
		e.LostEntries, err = r.int64()
	case 4:
		e.RequestedBy, err = r.string()
	case 5:
		e.Reason, err = r.string()
	case 6:
		e.Coordinator, err = r.string()
	}
	return err
}

// resharding.go

var reshardingPreparingFields = fieldTable{names: []string{"reshardingId", "fromShardCount", "toShardCount", "requestedBy", "reason", "keysChecked", "createdShards"}}

func (e *ReshardingPreparing) wireFields() *fieldTable { return &reshardingPreparingFields }
func (e *ReshardingPreparing) reset()                  { *e = ReshardingPreparing{} }
func (e *ReshardingPreparing) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ReshardingID, err = r.string()
	case 1:
		e.FromShardCount, err = r.int()
	case 2:
		e.ToShardCount, err = r.int()
	case 3:
		e.RequestedBy, err = r.string()
	case 4:
		e.Reason, err = r.string()
	case 5:
		e.KeysChecked, err = r.bool()
	case 6:
		err = r.ints(&e.CreatedShards)
	}
	return err
}

var reshardingProvisionedFields = fieldTable{names: []string{"reshardingId", "shards"}}

func (e *ReshardingProvisioned) wireFields() *fieldTable { return &reshardingProvisionedFields }
func (e *ReshardingProvisioned) reset()                  { *e = ReshardingProvisioned{} }
func (e *ReshardingProvisioned) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ReshardingID, err = r.string()
	case 1:
		e.Shards, err = r.int()
	}
	return err
}

var reshardingActivatedFields = fieldTable{names: []string{"reshardingId", "shardCount", "assignableCount", "groupEpoch", "metadataVersion", "streamMetadataVersion"}, epochs: true}

func (e *ReshardingActivated) wireFields() *fieldTable { return &reshardingActivatedFields }
func (e *ReshardingActivated) reset()                  { *e = ReshardingActivated{} }
func (e *ReshardingActivated) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ReshardingID, err = r.string()
	case 1:
		e.ShardCount, err = r.int()
	case 2:
		e.AssignableCount, err = r.int()
	case 5:
		e.StreamMetadataVersion, err = r.int64()
	default:
		err = epochsField(r, &e.Epochs, i, 3, 6)
	}
	return err
}

var reshardingDrainingFields = fieldTable{names: []string{"reshardingId", "groupEpoch", "metadataVersion"}, epochs: true}

func (e *ReshardingDraining) wireFields() *fieldTable { return &reshardingDrainingFields }
func (e *ReshardingDraining) reset()                  { *e = ReshardingDraining{} }
func (e *ReshardingDraining) decodeField(r *reader, i int) (err error) {
	if i == 0 {
		e.ReshardingID, err = r.string()
		return err
	}
	return epochsField(r, &e.Epochs, i, 1, 3)
}

var shardDrainFields = fieldTable{names: []string{"shardIndex", "streamKey", "exists", "groups"}}

func (e *ShardDrain) wireFields() *fieldTable { return &shardDrainFields }
func (e *ShardDrain) reset()                  { *e = ShardDrain{} }
func (e *ShardDrain) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ShardIndex, err = r.int()
	case 1:
		e.StreamKey, err = r.string()
	case 2:
		e.Exists, err = r.bool()
	case 3:
		err = decodeStructs(r, &e.Groups)
	}
	return err
}

var groupDrainFields = fieldTable{names: []string{"name", "pending", "lag"}}

func (e *GroupDrain) wireFields() *fieldTable { return &groupDrainFields }
func (e *GroupDrain) reset()                  { *e = GroupDrain{} }
func (e *GroupDrain) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.Name, err = r.string()
	case 1:
		e.Pending, err = r.int64()
	case 2:
		e.Lag, err = r.int64()
	}
	return err
}

var reshardingDrainedFields = fieldTable{names: []string{"reshardingId", "assignableCount", "evidence", "groupEpoch", "metadataVersion"}, epochs: true}

func (e *ReshardingDrained) wireFields() *fieldTable { return &reshardingDrainedFields }
func (e *ReshardingDrained) reset()                  { *e = ReshardingDrained{} }
func (e *ReshardingDrained) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ReshardingID, err = r.string()
	case 1:
		e.AssignableCount, err = r.int()
	case 2:
		err = decodeStructs(r, &e.Evidence)
	default:
		err = epochsField(r, &e.Epochs, i, 3, 5)
	}
	return err
}

var reshardingReopenedFields = fieldTable{names: []string{"reshardingId", "assignableCount", "evidence", "groupEpoch", "metadataVersion"}, epochs: true}

func (e *ReshardingReopened) wireFields() *fieldTable { return &reshardingReopenedFields }
func (e *ReshardingReopened) reset()                  { *e = ReshardingReopened{} }
func (e *ReshardingReopened) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ReshardingID, err = r.string()
	case 1:
		e.AssignableCount, err = r.int()
	case 2:
		err = decodeStructs(r, &e.Evidence)
	default:
		err = epochsField(r, &e.Epochs, i, 3, 5)
	}
	return err
}

var reshardingCompletedFields = fieldTable{names: []string{"reshardingId", "state", "evidence", "metadataVersion"}}

func (e *ReshardingCompleted) wireFields() *fieldTable { return &reshardingCompletedFields }
func (e *ReshardingCompleted) reset()                  { *e = ReshardingCompleted{} }
func (e *ReshardingCompleted) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ReshardingID, err = r.string()
	case 1:
		e.State, err = r.string()
	case 2:
		err = decodeStructs(r, &e.Evidence)
	case 3:
		e.MetadataVersion, err = r.int64()
	}
	return err
}

var reshardingRolledBackFields = fieldTable{names: []string{"reshardingId", "policy", "state", "shardCount", "assignableCount", "requestedBy", "reason", "groupEpoch", "metadataVersion", "streamMetadataVersion"}, epochs: true}

func (e *ReshardingRolledBack) wireFields() *fieldTable { return &reshardingRolledBackFields }
func (e *ReshardingRolledBack) reset()                  { *e = ReshardingRolledBack{} }
func (e *ReshardingRolledBack) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ReshardingID, err = r.string()
	case 1:
		e.Policy, err = r.string()
	case 2:
		e.State, err = r.string()
	case 3:
		e.ShardCount, err = r.int()
	case 4:
		e.AssignableCount, err = r.int()
	case 5:
		e.RequestedBy, err = r.string()
	case 6:
		e.Reason, err = r.string()
	case 9:
		e.StreamMetadataVersion, err = r.int64()
	default:
		err = epochsField(r, &e.Epochs, i, 7, 10)
	}
	return err
}

var shardsRetiredFields = fieldTable{names: []string{"reshardingId", "streamKeys", "kept", "keptKeys"}}

func (e *ShardsRetired) wireFields() *fieldTable { return &shardsRetiredFields }
func (e *ShardsRetired) reset()                  { *e = ShardsRetired{} }
func (e *ShardsRetired) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ReshardingID, err = r.string()
	case 1:
		err = r.strings(&e.StreamKeys)
	case 2:
		e.Kept, err = r.bool()
	case 3:
		err = r.strings(&e.KeptKeys)
	}
	return err
}

// stream.go

var streamCreatedFields = fieldTable{names: []string{"shardCount", "provisioned", "requestedBy", "reason", "group", "createdShards", "principal", "anonymous"}}

func (e *StreamCreated) wireFields() *fieldTable { return &streamCreatedFields }
func (e *StreamCreated) reset()                  { *e = StreamCreated{} }
func (e *StreamCreated) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ShardCount, err = r.int()
	case 1:
		e.Provisioned, err = r.bool()
	case 2:
		e.RequestedBy, err = r.string()
	case 3:
		e.Reason, err = r.string()
	case 4:
		e.Group, err = r.string()
	case 5:
		err = r.ints(&e.CreatedShards)
	case 6:
		e.Principal, err = r.string()
	case 7:
		e.Anonymous, err = r.bool()
	}
	return err
}

var streamAdoptedFields = fieldTable{names: []string{"shardCount", "requestedBy", "reason", "principal", "anonymous"}}

func (e *StreamAdopted) wireFields() *fieldTable { return &streamAdoptedFields }
func (e *StreamAdopted) reset()                  { *e = StreamAdopted{} }
func (e *StreamAdopted) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.ShardCount, err = r.int()
	case 1:
		e.RequestedBy, err = r.string()
	case 2:
		e.Reason, err = r.string()
	case 3:
		e.Principal, err = r.string()
	case 4:
		e.Anonymous, err = r.bool()
	}
	return err
}

var streamScaledFields = fieldTable{names: []string{"from", "to", "metadataVersion", "requestedBy", "reason", "createdShards", "keptKeys"}}

func (e *StreamScaled) wireFields() *fieldTable { return &streamScaledFields }
func (e *StreamScaled) reset()                  { *e = StreamScaled{} }
func (e *StreamScaled) decodeField(r *reader, i int) (err error) {
	switch i {
	case 0:
		e.From, err = r.int()
	case 1:
		e.To, err = r.int()
	case 2:
		e.MetadataVersion, err = r.int64()
	case 3:
		e.RequestedBy, err = r.string()
	case 4:
		e.Reason, err = r.string()
	case 5:
		err = r.ints(&e.CreatedShards)
	case 6:
		err = r.strings(&e.KeptKeys)
	}
	return err
}
