package commands

import (
	"context"
	"fmt"
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
	// StreamLevel is POST /streams/{p}: refused when any group uses the prefix.
	StreamLevel bool
	// Ordering is "KEY" or "NONE" (nil: NONE).
	Ordering *string
}

// ValidateKey checks a group's names: they become Redis keys.
func ValidateKey(k projection.GroupKey) error {
	if err := routing.ValidatePrefix(k.StreamPrefix); err != nil {
		return withMsg(ErrInvalid, "%s", err.Error())
	}
	if err := routing.ValidateName("consumerGroup", k.ConsumerGroup); err != nil {
		return withMsg(ErrInvalid, "%s", err.Error())
	}
	return nil
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }

// checkAudit validates an admin command's requestedBy (never blank) and reason
// (never blank when required): both reach the log.
func checkAudit(requestedBy, reason string, reasonRequired bool) []string {
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

// CreateGroup creates a group: verify it does not exist, validate the shard
// count, provision every shard stream and consumer group (outside the writer,
// after checking Redis holds no stranger's keys for a new prefix), then record
// group.created in a decision that checks everything again.
func (s *Service) CreateGroup(ctx context.Context, meta events.Meta, in CreateGroupInput) (projection.GroupView, error) {
	k := projection.GroupKey{StreamPrefix: in.StreamPrefix, ConsumerGroup: in.ConsumerGroup}
	command := "group.create"
	if in.StreamLevel {
		command = "stream.create"
	}
	return admin(ctx, s, meta, k, command, in.RequestedBy, func(meta events.Meta) (projection.GroupView, error) {
		if err := ValidateKey(k); err != nil {
			return projection.GroupView{}, err
		}
		problems := checkAudit(in.RequestedBy, in.Reason, false)
		ordering, bad := checkOrdering(in.Ordering)
		problems = append(problems, bad...)
		count := s.rules.defaultShardCount
		if in.InitialShardCount != nil {
			count = *in.InitialShardCount
			if count < 1 {
				problems = append(problems, "initialShardCount: must be greater than or equal to 1")
			} else if count > s.rules.maxShardCount {
				problems = append(problems, fmt.Sprintf("initialShardCount: must be less than or equal to %d", s.rules.maxShardCount))
			}
		}
		if len(problems) > 0 {
			return projection.GroupView{}, withMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
		}
		// Refuse what the committed state refuses before touching Redis.
		if err := s.peek(func(t *tx) error { return creatable(t, k, in.StreamLevel) }); err != nil {
			return projection.GroupView{}, err
		}
		var foreign []string
		if s.rules.provisioning {
			unlock := s.locks.lock(k.StreamPrefix)
			defer unlock()
			known := s.prefixInUse(k.StreamPrefix)
			var err error
			if foreign, err = s.rec.provisionGroup(ctx, k, count, known); err != nil {
				return projection.GroupView{}, err
			}
		}
		return submit(ctx, s.dec, meta, func(t *tx) (projection.GroupView, error) {
			return createGroup(t, k, in, count, ordering, foreign)
		})
	})
}

// creatable refuses a group that exists, or a stream-level create of a
// prefix some group uses.
func creatable(t *tx, k projection.GroupKey, streamLevel bool) error {
	if streamLevel && len(t.groupsWithPrefix(k.StreamPrefix)) > 0 {
		return withMsg(ErrPrefixExists, "Stream prefix '%s' is already managed by coordinator metadata", k.StreamPrefix)
	}
	if t.group(k) != nil {
		return ErrGroupExists
	}
	return nil
}

// createGroup records group.created, checking again what the request was
// checked on, and refusing a prefix Redis holds keys of (foreign) that no
// group of the coordinator ever used.
func createGroup(t *tx, k projection.GroupKey, in CreateGroupInput, count int, ordering string, foreign []string) (projection.GroupView, error) {
	if err := creatable(t, k, in.StreamLevel); err != nil {
		return projection.GroupView{}, err
	}
	if len(foreign) > 0 && len(t.groupsWithPrefix(k.StreamPrefix)) == 0 && !t.prefixSeen(k.StreamPrefix) {
		return projection.GroupView{}, withMsg(ErrPrefixExists, "Redis already has keys for stream prefix '%s' that the coordinator does not manage: %s", k.StreamPrefix, strings.Join(foreign, ", "))
	}
	g := t.emit(k, &events.GroupCreated{ShardCount: count, Provisioned: t.rules.provisioning, RequestedBy: in.RequestedBy, Reason: in.Reason, Ordering: ordering})
	return projection.ViewGroup(g), nil
}

// prefixInUse reports whether a group of the prefix exists now or ever did:
// its leftover streams are the coordinator's own, not a stranger's.
func (s *Service) prefixInUse(prefix string) bool {
	s.state.RLock()
	defer s.state.RUnlock()
	for _, k := range s.state.GroupKeysLocked() {
		if k.StreamPrefix == prefix {
			return true
		}
	}
	return s.state.PrefixSeenLocked(prefix)
}

// DeleteGroupInput is an operator's delete request.
type DeleteGroupInput struct {
	RequestedBy string
	Reason      string
	Force       bool
}

// DeleteGroup removes a group (refused while members are live unless forced).
// Stream keys and Redis consumer groups are left in place.
func (s *Service) DeleteGroup(ctx context.Context, meta events.Meta, k projection.GroupKey, in DeleteGroupInput) (projection.GroupView, error) {
	v, err := admin(ctx, s, meta, k, "group.delete", in.RequestedBy, func(meta events.Meta) (projection.GroupView, error) {
		if problems := checkAudit(in.RequestedBy, in.Reason, true); len(problems) > 0 {
			return projection.GroupView{}, withMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
		}
		return submit(ctx, s.dec, meta, func(t *tx) (projection.GroupView, error) { return deleteGroup(t, k, in) })
	})
	if err == nil {
		s.evidence.dropGroup(k)
	}
	return v, err
}

// deleteGroup records group.deleted (refused while members are live unless
// forced) and forgets the group's runtime.
func deleteGroup(t *tx, k projection.GroupKey, in DeleteGroupInput) (projection.GroupView, error) {
	g := t.group(k)
	if g == nil {
		return projection.GroupView{}, ErrGroupNotFound
	}
	if len(g.LiveMemberIDs()) > 0 && !in.Force {
		return projection.GroupView{}, ErrGroupHasActiveMembers
	}
	view := projection.ViewGroup(g)
	t.emit(k, &events.GroupDeleted{RequestedBy: in.RequestedBy, Reason: in.Reason, Force: in.Force})
	t.rt.dropGroup(k)
	return view, nil
}
