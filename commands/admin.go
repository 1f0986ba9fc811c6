package commands

import (
	"strings"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

// CreateGroupInput is an operator's create request.
type CreateGroupInput struct {
	StreamPrefix      string
	ConsumerGroup     string
	InitialShardCount *int
	RequestedBy       string
	Reason            string
	// Ordering is "KEY" or "NONE" (nil: NONE).
	Ordering *string
}

// ValidateKey checks a group's names: they become Redis keys.
func ValidateKey(k projection.GroupKey) error {
	if err := routing.ValidatePrefix(k.StreamPrefix); err != nil {
		return WithMsg(ErrInvalid, "%s", err.Error())
	}
	if err := routing.ValidateName("consumerGroup", k.ConsumerGroup); err != nil {
		return WithMsg(ErrInvalid, "%s", err.Error())
	}
	return nil
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }

// checkAudit validates an admin command's requestedBy (never blank) and reason
// (never blank when required): both reach the log.
func CheckAudit(requestedBy, reason string, reasonRequired bool) []string {
	var problems []string
	if blank(requestedBy) {
		problems = append(problems, "requestedBy: must not be blank")
	} else {
		problems = appendProblem(problems, checkText("requestedBy", requestedBy))
	}
	if reasonRequired && blank(reason) {
		problems = append(problems, "reason: must not be blank")
	} else {
		problems = appendProblem(problems, checkText("reason", reason))
	}
	return problems
}

// groupPlan is how a new group fits its prefix: its shard count and
// starting metadata version, whether it writes the stream's metadata (the
// first group of a bare prefix), and the prefix's record of shard streams.
type GroupPlan struct {
	Count int
	MV    int64
	// bare: the prefix has no stream metadata and no group: the group's
	// create writes the stream's metadata.
	Bare bool
	// unknown: the coordinator never used the prefix (Redis's bare prefix
	// key is checked too); leftovers: groups of an earlier build used it and
	// left no record (its streams are the coordinator's own).
	Unknown, Leftovers bool
	Stream             *projection.Stream // a copy, nil when none
}

// planGroup places a new group of by on its prefix: on a stream with
// metadata it takes the stream's shard count (a requested count that differs
// is 400) and metadata version, and waits while the stream is PREPARING;
// otherwise the requested count (or the default). It refuses a group that
// exists, one whose name's consumer groups are still being destroyed
// (removal.go), and one beyond the quotas and the caps.
func PlanGroup(t *Tx, k projection.GroupKey, requested *int, defaultCount int, by Owner) (GroupPlan, error) {
	if t.Group(k) != nil {
		return GroupPlan{}, ErrGroupExists
	}
	if err := removalPending(t, k); err != nil {
		return GroupPlan{}, err
	}
	p := GroupPlan{Count: defaultCount, MV: 1}
	if requested != nil {
		p.Count = *requested
	}
	st := t.B.Overlay.Stream(k.StreamPrefix)
	groups := t.GroupsWithPrefix(k.StreamPrefix)
	switch {
	case st != nil && st.Metadata:
		if requested != nil && *requested != st.ShardCount {
			return GroupPlan{}, WithMsg(ErrInvalid, "Group shard count must match stream shard count %d for '%s'", st.ShardCount, k.StreamPrefix)
		}
		p.Count, p.MV = st.ShardCount, st.MetadataVersion
		if err := preparingIn(t, k.StreamPrefix); err != nil {
			return GroupPlan{}, err
		}
	case len(groups) == 0:
		p.Bare = true
		p.Unknown = st == nil && !t.prefixSeen(k.StreamPrefix)
		p.Leftovers = st == nil && !p.Unknown
	}
	if st != nil {
		p.Stream = st.Clone()
	}
	return p, withinQuotas(t, k.StreamPrefix, by, 1, p.Count)
}

// createGroup records group.created, checking again what the request was
// checked on: the group is placed on its stream as when it was provisioned
// (else the caller retries). The first group of a bare prefix writes the
// stream's metadata first.
func CreateGroup(t *Tx, k projection.GroupKey, in CreateGroupInput, ordering string, plan GroupPlan, prov Provisioned, by Owner) (projection.GroupView, error) {
	now, err := PlanGroup(t, k, in.InitialShardCount, t.Rules.DefaultShardCount, by)
	if err != nil {
		return projection.GroupView{}, err
	}
	if now.Count != plan.Count || now.MV != plan.MV || now.Bare != plan.Bare {
		return projection.GroupView{}, WithMsg(ErrStateConflict, "stream %s changed while the group was provisioned; retry", k.StreamPrefix)
	}
	ev := &events.GroupCreated{ShardCount: now.Count, Provisioned: t.Rules.Provisioning, RequestedBy: in.RequestedBy, Reason: in.Reason, Ordering: ordering,
		MetadataVersion: now.MV, KeysChecked: true, CreatedShards: prov.Created, Principal: by.Principal, Anonymous: by.Anonymous, ForeignShards: prov.Foreign}
	if now.Bare {
		t.emit(projection.GroupKey{StreamPrefix: k.StreamPrefix}, &events.StreamCreated{ShardCount: now.Count, Provisioned: t.Rules.Provisioning,
			RequestedBy: in.RequestedBy, Reason: in.Reason, Group: k.ConsumerGroup, CreatedShards: prov.Created, Principal: by.Principal, Anonymous: by.Anonymous})
		ev.CreatedShards = nil // the stream's metadata records them
	}
	g := t.emit(k, ev)
	return projection.ViewGroup(g), nil
}

// DeleteGroupInput is an operator's delete request.
type DeleteGroupInput struct {
	RequestedBy string
	Reason      string
	Force       bool
}

// deleteGroup records group.deleted (refused while members are live unless
// forced) and forgets the group's runtime.
func DeleteGroup(t *Tx, k projection.GroupKey, in DeleteGroupInput) (projection.GroupView, error) {
	g := t.Group(k)
	if g == nil {
		return projection.GroupView{}, ErrGroupNotFound
	}
	if len(g.LiveMemberIDs()) > 0 && !in.Force {
		return projection.GroupView{}, ErrGroupHasActiveMembers
	}
	view := projection.ViewGroup(g)
	removeGroup(t, k, &events.GroupDeleted{RequestedBy: in.RequestedBy, Reason: in.Reason, Force: in.Force})
	return view, nil
}

// provisioned is what a new group's provisioning did: the shards whose
// streams it created, and those whose consumer group of the group's name it
// found on a stream the coordinator did not create (someone else's: the
// group's delete leaves it).
type Provisioned struct {
	Created, Foreign []int
	// made are the shards on which this provisioning created the consumer
	// group (the others had one of the name already).
	Made []int
}

// RecordRejection records a refused admin command (command.rejected) with
// the refusals of its principal left out since the last record. A refusal
// naming a group that does not exist is recorded as such (NoGroup): it
// reaches no group's history index, so made-up names create no key; a name
// that is not valid is recorded without one.
func RecordRejection(t *Tx, k projection.GroupKey, command, requestedBy string, ce *Error, suppressed int64) {
	stream := k.ConsumerGroup == "" // a stream's command: its history is the stream's
	if (stream && routing.ValidatePrefix(k.StreamPrefix) != nil) || (!stream && ValidateKey(k) != nil) {
		k = projection.GroupKey{}
	}
	ev := &events.CommandRejected{Command: command, ErrorCode: ce.Code, Message: Truncate(ce.Message, 4*MaxTextBytes), RequestedBy: Truncate(requestedBy, MaxTextBytes),
		Suppressed: suppressed}
	switch {
	case k == (projection.GroupKey{}):
	case stream && t.B.Overlay.Stream(k.StreamPrefix) == nil, !stream && t.Group(k) == nil:
		ev.NoGroup = true
	}
	t.emit(k, ev)
}

// StartTerm records the start of a leader's term (term.started), before
// anything of the term is decided.
func StartTerm(t *Tx, term int64, holder, url string) error {
	t.emit(projection.GroupKey{}, &events.TermStarted{Term: term, Holder: holder, URL: url})
	return nil
}
