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
func (c *Coordinator) CreateGroup(ctx context.Context, meta events.Meta, in CreateGroupInput) (projection.GroupView, error) {
	k := projection.GroupKey{StreamPrefix: in.StreamPrefix, ConsumerGroup: in.ConsumerGroup}
	command := "group.create"
	if in.StreamLevel {
		command = "stream.create"
	}
	v, err := c.admin(ctx, meta, k, command, in.RequestedBy, func(meta events.Meta) (any, error) {
		if err := ValidateKey(k); err != nil {
			return nil, err
		}
		problems := checkAudit(in.RequestedBy, in.Reason, false)
		ordering, bad := checkOrdering(in.Ordering)
		problems = append(problems, bad...)
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
		check := func(t *tx) error {
			prefixGroups := t.groupsWithPrefix(k.StreamPrefix)
			if in.StreamLevel && len(prefixGroups) > 0 {
				return withMsg(ErrPrefixExists, "Stream prefix '%s' is already managed by coordinator metadata", k.StreamPrefix)
			}
			if t.group(k) != nil {
				return ErrGroupExists
			}
			return nil
		}
		// Refuse what the committed state refuses before touching Redis.
		if err := c.peek(func(t *tx) error { return check(t) }); err != nil {
			return nil, err
		}
		var foreign []string
		if !c.cfg.DisableProvisioning {
			unlock := c.rec.lockPrefix(k.StreamPrefix)
			defer unlock()
			known := c.prefixInUse(k.StreamPrefix)
			var err error
			if foreign, err = c.rec.provisionGroup(ctx, k, count, known); err != nil {
				return nil, err
			}
		}
		return c.submit(ctx, meta, func(t *tx) (any, error) {
			if err := check(t); err != nil {
				return nil, err
			}
			if len(foreign) > 0 && len(t.groupsWithPrefix(k.StreamPrefix)) == 0 && !t.c.state.PrefixSeenLocked(k.StreamPrefix) {
				return nil, withMsg(ErrPrefixExists, "Redis already has keys for stream prefix '%s' that the coordinator does not manage: %s", k.StreamPrefix, strings.Join(foreign, ", "))
			}
			g := t.emit(k, &events.GroupCreated{ShardCount: count, Provisioned: !c.cfg.DisableProvisioning, RequestedBy: in.RequestedBy, Reason: in.Reason, Ordering: ordering})
			return projection.ViewGroup(g), nil
		})
	})
	if err != nil {
		return projection.GroupView{}, err
	}
	return v.(projection.GroupView), nil
}

// prefixInUse reports whether a group of the prefix exists now or ever did:
// its leftover streams are the coordinator's own, not a stranger's.
func (c *Coordinator) prefixInUse(prefix string) bool {
	c.state.RLock()
	defer c.state.RUnlock()
	for _, k := range c.state.GroupKeysLocked() {
		if k.StreamPrefix == prefix {
			return true
		}
	}
	return c.state.PrefixSeenLocked(prefix)
}

// peek runs a read-only check against the committed state, as a decision
// would see it, without the writer: a command refused by the state it would
// find is refused before anything touches Redis. The decision checks again.
func (c *Coordinator) peek(check func(t *tx) error) error {
	c.state.RLock()
	defer c.state.RUnlock()
	t := &tx{c: c, b: &batchCtx{ov: c.state.NewOverlayLocked()}, now: c.now()}
	return check(t)
}

// canDecide refuses a command before its side effects when this coordinator
// could not decide it anyway.
func (c *Coordinator) canDecide() error {
	switch {
	case c.closing.Load():
		return ErrTerminating
	case !c.ready.Load():
		return withMsg(ErrUnavailable, "coordinator is still loading the event log")
	case !c.IsLeader():
		return ErrNotLeader
	}
	return nil
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
	v, err := c.admin(ctx, meta, k, "group.delete", in.RequestedBy, func(meta events.Meta) (any, error) {
		if problems := checkAudit(in.RequestedBy, in.Reason, true); len(problems) > 0 {
			return nil, withMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
		}
		return c.submit(ctx, meta, func(t *tx) (any, error) {
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
	})
	if err != nil {
		return projection.GroupView{}, err
	}
	c.rt.dropGroup(k)
	return v.(projection.GroupView), nil
}

// admin runs an operator command (its evidence gathering and decisions) and
// records a refusal in the audit log.
func (c *Coordinator) admin(ctx context.Context, meta events.Meta, k projection.GroupKey, command, requestedBy string, do func(meta events.Meta) (any, error)) (any, error) {
	if meta.Actor == "" {
		meta.Actor = truncate(requestedBy, MaxTextBytes)
	}
	if err := c.canDecide(); err != nil {
		return nil, err
	}
	v, err := do(meta)
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
	_, err := c.submit(ctx, meta, func(t *tx) (any, error) {
		t.emit(k, &events.CommandRejected{Command: command, ErrorCode: ce.Code, Message: truncate(ce.Message, 4*MaxTextBytes), RequestedBy: truncate(requestedBy, MaxTextBytes)})
		return nil, nil
	})
	if err != nil {
		c.cfg.Logger.Warn().Err(err).Str("command", command).Msg("could not record rejected command")
	}
}
