package commands

import (
	"context"
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

// groupPlan is how a new group fits its prefix: its shard count and
// starting metadata version, whether it writes the stream's metadata (the
// first group of a bare prefix), and the prefix's record of shard streams.
type groupPlan struct {
	count int
	mv    int64
	// bare: the prefix has no stream metadata and no group: the group's
	// create writes the stream's metadata.
	bare bool
	// unknown: the coordinator never used the prefix (Redis's bare prefix
	// key is checked too); leftovers: groups of an earlier build used it and
	// left no record (its streams are the coordinator's own).
	unknown, leftovers bool
	stream             *projection.Stream // a copy, nil when none
}

// planGroup places a new group of by on its prefix: on a stream with
// metadata it takes the stream's shard count (a requested count that differs
// is 400) and metadata version, and waits while the stream is PREPARING;
// otherwise the requested count (or the default). It refuses a group that
// exists, one whose name's consumer groups are still being destroyed
// (removal.go), and one beyond the quotas and the caps.
func planGroup(t *tx, k projection.GroupKey, requested *int, defaultCount int, by owner) (groupPlan, error) {
	if t.group(k) != nil {
		return groupPlan{}, ErrGroupExists
	}
	if err := removalPending(t, k); err != nil {
		return groupPlan{}, err
	}
	p := groupPlan{count: defaultCount, mv: 1}
	if requested != nil {
		p.count = *requested
	}
	st := t.b.ov.Stream(k.StreamPrefix)
	groups := t.groupsWithPrefix(k.StreamPrefix)
	switch {
	case st != nil && st.Metadata:
		if requested != nil && *requested != st.ShardCount {
			return groupPlan{}, withMsg(ErrInvalid, "Group shard count must match stream shard count %d for '%s'", st.ShardCount, k.StreamPrefix)
		}
		p.count, p.mv = st.ShardCount, st.MetadataVersion
		if err := preparingIn(t, k.StreamPrefix); err != nil {
			return groupPlan{}, err
		}
	case len(groups) == 0:
		p.bare = true
		p.unknown = st == nil && !t.prefixSeen(k.StreamPrefix)
		p.leftovers = st == nil && !p.unknown
	}
	if st != nil {
		p.stream = st.Clone()
	}
	return p, withinQuotas(t, k.StreamPrefix, by, 1, p.count)
}

// CreateGroup creates a group: verify it does not exist, place it on its
// stream (planGroup), read what Redis holds under its shard keys and
// provision every shard stream and consumer group (outside the writer,
// refusing keys the coordinator does not manage), then record group.created
// (after the stream's metadata, for the first group of a bare prefix) in a
// decision that checks everything again.
func (s *Service) CreateGroup(ctx context.Context, meta events.Meta, in CreateGroupInput) (projection.GroupView, error) {
	k := projection.GroupKey{StreamPrefix: in.StreamPrefix, ConsumerGroup: in.ConsumerGroup}
	by := ownerOfCaller(meta.Actor) // the authenticated caller
	return admin(ctx, s, meta, k, "group.create", in.RequestedBy, func(meta events.Meta) (projection.GroupView, error) {
		if err := ValidateKey(k); err != nil {
			return projection.GroupView{}, err
		}
		problems := checkAudit(in.RequestedBy, in.Reason, false)
		ordering, bad := checkOrdering(in.Ordering)
		problems = append(problems, bad...)
		_, bad = s.rules.shardCountOf("initialShardCount", in.InitialShardCount, 1)
		if problems = append(problems, bad...); len(problems) > 0 {
			return projection.GroupView{}, withMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
		}
		// Refuse what the committed state refuses before touching Redis,
		// with the prefix's side effects serialised: a create that
		// provisioned before this one has decided by then.
		if s.rules.provisioning {
			unlock := s.locks.lock(k.StreamPrefix)
			defer unlock()
			// The consumer groups of a deleted group of this name go first.
			if err := s.rec.finishRemovalLocked(ctx, k); err != nil {
				return projection.GroupView{}, err
			}
		}
		var plan groupPlan
		if err := s.peek(func(t *tx) (err error) {
			plan, err = planGroup(t, k, in.InitialShardCount, s.rules.defaultShardCount, by)
			return err
		}); err != nil {
			return projection.GroupView{}, err
		}
		var prov provisioned
		if s.rules.provisioning {
			var err error
			if prov, err = s.rec.provisionGroup(ctx, k, plan); err != nil {
				return projection.GroupView{}, err
			}
		}
		var refused error
		v, err := submit(ctx, s.dec, meta, func(t *tx) (projection.GroupView, error) {
			v, err := createGroup(t, k, in, ordering, plan, prov, by)
			refused = err
			return v, err
		})
		if refused != nil {
			s.rec.unprovision(ctx, k, prov)
		}
		return v, err
	})
}

// createGroup records group.created, checking again what the request was
// checked on: the group is placed on its stream as when it was provisioned
// (else the caller retries). The first group of a bare prefix writes the
// stream's metadata first.
func createGroup(t *tx, k projection.GroupKey, in CreateGroupInput, ordering string, plan groupPlan, prov provisioned, by owner) (projection.GroupView, error) {
	now, err := planGroup(t, k, in.InitialShardCount, t.rules.defaultShardCount, by)
	if err != nil {
		return projection.GroupView{}, err
	}
	if now.count != plan.count || now.mv != plan.mv || now.bare != plan.bare {
		return projection.GroupView{}, withMsg(ErrStateConflict, "stream %s changed while the group was provisioned; retry", k.StreamPrefix)
	}
	ev := &events.GroupCreated{ShardCount: now.count, Provisioned: t.rules.provisioning, RequestedBy: in.RequestedBy, Reason: in.Reason, Ordering: ordering,
		MetadataVersion: now.mv, KeysChecked: true, CreatedShards: prov.created, Principal: by.principal, Anonymous: by.anonymous, ForeignShards: prov.foreign}
	if now.bare {
		t.emit(projection.GroupKey{StreamPrefix: k.StreamPrefix}, &events.StreamCreated{ShardCount: now.count, Provisioned: t.rules.provisioning,
			RequestedBy: in.RequestedBy, Reason: in.Reason, Group: k.ConsumerGroup, CreatedShards: prov.created, Principal: by.principal, Anonymous: by.anonymous})
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

// DeleteGroup removes a group (refused while members are live unless
// forced) and the Redis consumer groups the coordinator provisioned for it
// (removal.go: destroyed by the reconciler after the decision). Shard
// streams are left in place.
func (s *Service) DeleteGroup(ctx context.Context, meta events.Meta, k projection.GroupKey, in DeleteGroupInput) (projection.GroupView, error) {
	v, err := admin(ctx, s, meta, k, "group.delete", in.RequestedBy, func(meta events.Meta) (projection.GroupView, error) {
		if problems := checkAudit(in.RequestedBy, in.Reason, true); len(problems) > 0 {
			return projection.GroupView{}, withMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
		}
		return submit(ctx, s.dec, meta, func(t *tx) (projection.GroupView, error) { return deleteGroup(t, k, in) })
	})
	if err == nil {
		s.evidence.dropGroup(k)
		// Its consumer groups now, best effort: the reconciler finishes
		// what this leaves (a Redis that fails, a coordinator that stops).
		if rerr := s.rec.finishRemoval(ctx, k); rerr != nil {
			s.logger.Warn().Err(rerr).Str("prefix", k.StreamPrefix).Str("group", k.ConsumerGroup).Msg("destroy the consumer groups of a deleted group (retried by the reconciler)")
		}
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
	removeGroup(t, k, &events.GroupDeleted{RequestedBy: in.RequestedBy, Reason: in.Reason, Force: in.Force})
	return view, nil
}
