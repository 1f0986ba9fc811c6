package commands

import (
	"context"
	"errors"
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

// CreateGroup creates a group: verify it does not exist, validate the shard count,
// provision every shard stream and consumer group, then record group.created.
func (c *Coordinator) CreateGroup(ctx context.Context, meta events.Meta, in CreateGroupInput) (projection.GroupView, error) {
	k := projection.GroupKey{StreamPrefix: in.StreamPrefix, ConsumerGroup: in.ConsumerGroup}
	command := "group.create"
	if in.StreamLevel {
		command = "stream.create"
	}
	v, err := c.admin(ctx, meta, k, command, in.RequestedBy, func(t *tx) (any, error) {
		if err := ValidateKey(k); err != nil {
			return nil, err
		}
		problems := checkAudit(in.RequestedBy, in.Reason, false)
		count := c.cfg.DefaultShardCount
		if in.InitialShardCount != nil {
			count = *in.InitialShardCount
			if count < 1 {
				problems = append(problems, "initialShardCount: must be greater than or equal to 1")
			} else if count > c.cfg.MaxShardCount {
				problems = append(problems, fmt.Sprintf("initialShardCount: must be less than or equal to %d", c.cfg.MaxShardCount))
			}
		}
		if len(problems) > 0 {
			return nil, withMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
		}
		prefixGroups := t.groupsWithPrefix(k.StreamPrefix)
		if in.StreamLevel && len(prefixGroups) > 0 {
			return nil, withMsg(ErrPrefixExists, "Stream prefix '%s' is already managed by coordinator metadata", k.StreamPrefix)
		}
		if t.group(k) != nil {
			return nil, ErrGroupExists
		}
		if !c.cfg.DisableProvisioning {
			if c.shards == nil {
				return nil, ErrRedisNotConfigured
			}
			if len(prefixGroups) == 0 && !c.prefixKnown(k.StreamPrefix) {
				keys, err := c.shards.ExistingKeys(ctx, k.StreamPrefix, count)
				if err != nil {
					return nil, failed(ErrProvisioningFailed, err, "could not check Redis for existing stream keys of %s", k.StreamPrefix)
				}
				if len(keys) > 0 {
					return nil, withMsg(ErrPrefixExists, "Redis already has keys for stream prefix '%s' that the coordinator does not manage: %s", k.StreamPrefix, strings.Join(keys, ", "))
				}
			}
			if err := c.shards.Provision(ctx, k.StreamPrefix, k.ConsumerGroup, 0, count); err != nil {
				return nil, failed(ErrProvisioningFailed, err, "could not provision %s shards 0..%d for group %s in Redis", k.StreamPrefix, count-1, k.ConsumerGroup)
			}
		}
		g := t.emit(k, &events.GroupCreated{ShardCount: count, Provisioned: !c.cfg.DisableProvisioning, RequestedBy: in.RequestedBy, Reason: in.Reason})
		return projection.ViewGroup(g), nil
	})
	if err != nil {
		return projection.GroupView{}, err
	}
	return v.(projection.GroupView), nil
}

// prefixKnown reports whether the log ever held a group with this prefix: its
// leftover streams are ours, not a stranger's.
// The writer holds the state lock.
func (c *Coordinator) prefixKnown(prefix string) bool {
	return c.state.PrefixSeenLocked(prefix)
}

func (t *tx) groupsWithPrefix(prefix string) []*projection.Group {
	var out []*projection.Group
	for _, k := range t.b.ov.Keys() {
		if k.StreamPrefix == prefix {
			out = append(out, t.group(k))
		}
	}
	return out
}

// DeleteGroupInput is an operator's delete request.
type DeleteGroupInput struct {
	RequestedBy string
	Reason      string
	Force       bool
}

// DeleteGroup removes a group (refused while members are live unless forced).
// Stream keys and Redis consumer groups are left in place.
func (c *Coordinator) DeleteGroup(ctx context.Context, meta events.Meta, k projection.GroupKey, in DeleteGroupInput) (projection.GroupView, error) {
	v, err := c.admin(ctx, meta, k, "group.delete", in.RequestedBy, func(t *tx) (any, error) {
		if problems := checkAudit(in.RequestedBy, in.Reason, true); len(problems) > 0 {
			return nil, withMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
		}
		g := t.group(k)
		if g == nil {
			return nil, ErrGroupNotFound
		}
		if len(g.LiveMemberIDs()) > 0 && !in.Force {
			return nil, ErrGroupHasActiveMembers
		}
		view := projection.ViewGroup(g)
		t.emit(k, &events.GroupDeleted{RequestedBy: in.RequestedBy, Reason: in.Reason, Force: in.Force})
		return view, nil
	})
	if err != nil {
		return projection.GroupView{}, err
	}
	c.rt.mu.Lock()
	delete(c.rt.groups, k)
	c.rt.mu.Unlock()
	return v.(projection.GroupView), nil
}

// admin runs an operator command exclusively and records a refusal in the audit log.
func (c *Coordinator) admin(ctx context.Context, meta events.Meta, k projection.GroupKey, command, requestedBy string, fn func(t *tx) (any, error)) (any, error) {
	if meta.Actor == "" {
		meta.Actor = truncate(requestedBy, MaxTextBytes)
	}
	v, err := c.submit(ctx, meta, true, fn)
	var ce *Error
	if err != nil && errors.As(err, &ce) && ce.Kind != KindUnavailable {
		c.recordRejection(ctx, meta, k, command, requestedBy, ce)
	}
	return v, err
}

// recordRejection appends command.rejected; best effort: the caller's answer is
// the refusal either way.
func (c *Coordinator) recordRejection(ctx context.Context, meta events.Meta, k projection.GroupKey, command, requestedBy string, ce *Error) {
	if ValidateKey(k) != nil {
		k = projection.GroupKey{}
	}
	_, err := c.submit(ctx, meta, false, func(t *tx) (any, error) {
		t.emit(k, &events.CommandRejected{Command: command, ErrorCode: ce.Code, Message: truncate(ce.Message, 4*MaxTextBytes), RequestedBy: truncate(requestedBy, MaxTextBytes)})
		return nil, nil
	})
	if err != nil {
		c.cfg.Logger.Warn().Err(err).Str("command", command).Msg("could not record rejected command")
	}
}
