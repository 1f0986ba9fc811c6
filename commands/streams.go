package commands

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

// Streams are the unit of topology (the reference's 0.3 releases): a stream
// prefix has one layout, its metadata, shared by every consumer group of it.
// A stream is created without any consumer group (CreateStream), or adopted
// from shard streams that already exist (AdoptStream), or its metadata is
// written by its first group's create; groups then register on their first
// heartbeat (heartbeat.go) or are created by an operator, and take the
// stream's layout. A scale of a stream without groups changes its layout at
// once; with groups, every group scales together (resharding.go), so the
// groups of a stream with metadata never disagree.
//
// Nothing the coordinator did not create is touched: before any shard stream
// is provisioned, Redis is read (readKeys) and a key that holds a stream the
// coordinator did not create or adopt, or a value of another type, refuses
// the command up front, changing nothing (claim). The events that provision
// say which streams were created; only those are ever deleted.

// keyCheck is what Redis held under a prefix's keys when a command that
// provisions read them: the TYPE of each shard's stream key and, for a
// prefix the coordinator never used, of the bare prefix key.
type keyCheck struct {
	prefix string
	bare   string         // "" when not read
	types  map[int]string // shard index -> TYPE ("none": missing)
	fences map[int]string // shard index -> TYPE of its fence key
}

// shardRange is the shard indexes lo..hi-1.
func shardRange(lo, hi int) []int {
	var out []int
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

// readKeys reads the TYPE of prefix's shard keys, and of the bare prefix
// key when bare.
func (r *reconciler) readKeys(ctx context.Context, prefix string, shards []int, bare bool) (keyCheck, error) {
	kc := keyCheck{prefix: prefix, types: map[int]string{}, fences: map[int]string{}}
	if len(shards) == 0 && !bare {
		return kc, nil
	}
	if r.prov == nil {
		return kc, ErrRedisNotConfigured
	}
	keys := make([]string, 0, 2*len(shards)+1)
	for _, s := range shards {
		keys = append(keys, routing.StreamKey(prefix, s))
	}
	for _, s := range shards {
		keys = append(keys, routing.FenceKey(routing.StreamKey(prefix, s)))
	}
	if bare {
		keys = append(keys, prefix)
	}
	types, err := r.prov.KeyTypes(ctx, keys)
	if err == nil && len(types) != len(keys) {
		err = fmt.Errorf("%d types for %d keys", len(types), len(keys))
	}
	if err != nil {
		return kc, failed(ErrProvisioningFailed, err, "could not read Redis's keys of stream prefix %s before provisioning", prefix)
	}
	for i, s := range shards {
		kc.types[s] = types[i]
		kc.fences[s] = types[len(shards)+i]
	}
	if bare {
		kc.bare = types[2*len(shards)]
	}
	return kc, nil
}

// fenceUsable reports whether a shard's fence key, of TYPE typ ("" when not
// read), can be the shard's fence: missing, or a hash (a fence outlives its
// stream, so a hash there is taken as the shard's own). A key of another
// type would make every publish and fence script fail with WRONGTYPE.
func fenceUsable(typ string) bool { return typ == "" || typ == "none" || typ == "hash" }

// maxNamedKeys bounds the keys one refusal names.
const maxNamedKeys = 8

// claim decides, from what Redis held (kc) and the prefix's record of shard
// streams (st, nil when it has none), which of shards the coordinator
// creates: a missing key is created; a stream the coordinator created or
// adopted is used as it is; with leftovers (a prefix groups of an earlier
// build used, which left no record), an existing stream is taken as the
// coordinator's own, as that build did. Anything else (a stream the
// coordinator did not create, a key of another type, or the bare prefix key
// when it was read) refuses the command with STREAM_PREFIX_ALREADY_EXISTS
// naming the keys. It returns the shards the event must record as created.
//
// A shard's fence key (routing.FenceKey) outlives its stream (retirement
// and deletion keep it, so that a publish routed before a layout change
// stays refused): a hash there is taken as the shard's fence; a key of
// another type is refused like a stream's (publishes and the coordinator's
// fence scripts would fail on it, WRONGTYPE, for as long as it exists).
func claim(st *projection.Stream, leftovers bool, kc keyCheck, shards []int) ([]int, error) {
	var created []int
	var bad []string
	if kc.bare != "" && kc.bare != "none" {
		bad = append(bad, fmt.Sprintf("%s (a %s)", kc.prefix, kc.bare))
	}
	for _, s := range shards {
		key := routing.StreamKey(kc.prefix, s)
		if ft := kc.fences[s]; !fenceUsable(ft) {
			bad = append(bad, fmt.Sprintf("%s (a %s, not a fence hash)", routing.FenceKey(key), ft))
		}
		typ, read := kc.types[s]
		switch {
		case !read:
			return nil, withMsg(ErrStateConflict, "the shards of %s changed while Redis was read; retry", kc.prefix)
		case typ == "none":
			created = append(created, s)
		case typ != "stream":
			bad = append(bad, fmt.Sprintf("%s (a %s, not a stream)", key, typ))
		case st.Owns(s):
		case leftovers:
			created = append(created, s)
		default:
			bad = append(bad, key+" (a stream the coordinator did not create)")
		}
	}
	if len(bad) > 0 {
		more := ""
		if len(bad) > maxNamedKeys {
			more = fmt.Sprintf(" and %d more", len(bad)-maxNamedKeys)
			bad = bad[:maxNamedKeys]
		}
		return nil, withMsg(ErrPrefixExists, "Redis already has keys of stream prefix '%s' that the coordinator does not manage: %s%s; nothing was changed (adopt the stream, or remove them)", kc.prefix, strings.Join(bad, ", "), more)
	}
	return created, nil
}

// --- caps ---

// groupSpan is how many shards the coordinator manages for a group: the
// ones it routes, assigns, or is still resharding to.
func groupSpan(g *projection.Group) int {
	span := max(g.ShardCount, g.AssignableCount)
	if m := g.Active(); m != nil {
		span = max(span, m.To)
	}
	return span
}

// inUse counts, as the batch sees them, the groups and the shards the
// coordinator manages: every group's span, and the shards of every stream
// with metadata and no group.
func inUse(t *tx) (groups, shards int) {
	withGroups := map[string]bool{}
	for _, k := range t.b.ov.Keys() {
		groups++
		shards += groupSpan(t.group(k))
		withGroups[k.StreamPrefix] = true
	}
	t.b.ov.EachStream(func(st *projection.Stream) {
		if st.Metadata && !withGroups[st.Prefix] {
			shards += st.ShardCount
		}
	})
	return groups, shards
}

// withinCaps refuses a change that adds groups and shards beyond
// --max-groups and --max-total-shards.
func withinCaps(t *tx, addGroups, addShards int) error {
	if addGroups <= 0 && addShards <= 0 {
		return nil
	}
	groups, shards := inUse(t)
	if addGroups > 0 && groups+addGroups > t.rules.maxGroups {
		return withMsg(ErrGroupLimit, "the coordinator manages %d consumer groups; --max-groups is %d", groups, t.rules.maxGroups)
	}
	if addShards > 0 && shards+addShards > t.rules.maxTotalShards {
		return withMsg(ErrShardLimit, "the coordinator manages %d shards and this needs %d more; --max-total-shards is %d", shards, addShards, t.rules.maxTotalShards)
	}
	return nil
}

// --- create, adopt ---

// CreateStreamInput is POST /coord/v1/streams/{p}.
type CreateStreamInput struct {
	StreamPrefix      string
	InitialShardCount *int
	RequestedBy       string
	Reason            string
	// Ordering must be absent or NONE: ordering belongs to consumer groups.
	Ordering *string
}

// CreateStream creates a stream's shard streams, empty and without any
// consumer group, and records its metadata (version 1): refused when the
// stream has metadata, a group uses the prefix, or Redis has any of its keys.
func (s *Service) CreateStream(ctx context.Context, meta events.Meta, in CreateStreamInput) (projection.StreamView, error) {
	k := projection.GroupKey{StreamPrefix: in.StreamPrefix}
	by := ownerOfCaller(meta.Actor)
	return admin(ctx, s, meta, k, "stream.create", in.RequestedBy, func(meta events.Meta) (projection.StreamView, error) {
		if err := routing.ValidatePrefix(in.StreamPrefix); err != nil {
			return projection.StreamView{}, withMsg(ErrInvalid, "%s", err.Error())
		}
		problems := checkAudit(in.RequestedBy, in.Reason, false)
		if o, bad := checkOrdering(in.Ordering); len(bad) > 0 {
			problems = append(problems, bad...)
		} else if o != "" {
			problems = append(problems, "ordering: a stream has no ordering; give it to a consumer group (POST /coord/v1/streams/{streamPrefix}/groups/{consumerGroup})")
		}
		count, bad := s.rules.shardCountOf("initialShardCount", in.InitialShardCount, 1)
		if problems = append(problems, bad...); len(problems) > 0 {
			return projection.StreamView{}, withMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
		}
		prefix := in.StreamPrefix
		if s.rules.provisioning {
			unlock := s.locks.lock(prefix)
			defer unlock()
		}
		if err := s.peek(func(t *tx) error { return streamCreatable(t, prefix, count, by) }); err != nil {
			return projection.StreamView{}, err
		}
		var created []int
		if s.rules.provisioning {
			var err error
			if created, err = s.rec.createStreams(ctx, prefix, count); err != nil {
				return projection.StreamView{}, err
			}
		}
		return submit(ctx, s.dec, meta, func(t *tx) (projection.StreamView, error) {
			if err := streamCreatable(t, prefix, count, by); err != nil {
				return projection.StreamView{}, err
			}
			t.emit(projection.GroupKey{StreamPrefix: prefix}, &events.StreamCreated{ShardCount: count, Provisioned: t.rules.provisioning, RequestedBy: in.RequestedBy, Reason: in.Reason, CreatedShards: created,
				Principal: by.principal, Anonymous: by.anonymous})
			return projection.ViewStream(prefix, t.b.ov.Stream(prefix), nil), nil
		})
	})
}

// shardCountOf is a requested shard count: the default when absent, within
// [least, --max-shard-count].
func (r rules) shardCountOf(field string, n *int, least int) (int, []string) {
	if n == nil {
		return r.defaultShardCount, nil
	}
	switch {
	case *n < least:
		return 0, []string{fmt.Sprintf("%s: must be greater than or equal to %d", field, least)}
	case *n > r.maxShardCount:
		return 0, []string{fmt.Sprintf("%s: must be less than or equal to %d", field, r.maxShardCount)}
	}
	return *n, nil
}

// streamCreatable refuses a stream create (or adopt) by by on a prefix with
// metadata or groups, or beyond the quotas and the caps.
func streamCreatable(t *tx, prefix string, count int, by owner) error {
	if st := t.b.ov.Stream(prefix); st != nil && st.Metadata {
		return withMsg(ErrPrefixExists, "Stream prefix '%s' is already managed by coordinator metadata", prefix)
	}
	if groups := t.groupsWithPrefix(prefix); len(groups) > 0 {
		return withMsg(ErrPrefixExists, "Stream prefix '%s' is already managed by coordinator metadata (consumer group %s)", prefix, groups[0].Key.ConsumerGroup)
	}
	return withinQuotas(t, prefix, by, 0, count)
}

// createStreams creates the shard streams 0..count-1 of a new stream,
// refusing a prefix Redis has any key of (the bare prefix or a shard key).
func (r *reconciler) createStreams(ctx context.Context, prefix string, count int) ([]int, error) {
	shards := shardRange(0, count)
	kc, err := r.readKeys(ctx, prefix, shards, true)
	if err != nil {
		return nil, err
	}
	var existing []string
	if kc.bare != "none" {
		existing = append(existing, prefix)
	}
	for _, s := range shards {
		if kc.types[s] != "none" {
			existing = append(existing, routing.StreamKey(prefix, s))
		}
		if !fenceUsable(kc.fences[s]) {
			existing = append(existing, routing.FenceKey(routing.StreamKey(prefix, s)))
		}
	}
	if err := keysExist(prefix, existing); err != nil {
		return nil, err
	}
	keys := make([]string, len(shards))
	for i, s := range shards {
		keys[i] = routing.StreamKey(prefix, s)
	}
	existed, err := r.prov.CreateStreams(ctx, keys)
	if err != nil {
		return nil, failed(ErrProvisioningFailed, err, "Failed to provision Redis Stream resources for %s", prefix)
	}
	if err := keysExist(prefix, existed); err != nil {
		return nil, err
	}
	r.configureIDMP(ctx, prefix, shards)
	return shards, nil
}

// keysExist is the refusal of a stream create when Redis has keys of the
// prefix (nil when it has none).
func keysExist(prefix string, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	more := ""
	if len(keys) > maxNamedKeys {
		more = fmt.Sprintf(" and %d more", len(keys)-maxNamedKeys)
		keys = keys[:maxNamedKeys]
	}
	return withMsg(ErrPrefixExists, "Redis already has keys for stream prefix '%s': %s%s; adopt them (POST /coord/v1/streams/%s/adopt) or remove them", prefix, strings.Join(keys, ", "), more, prefix)
}

// AdoptStreamInput is POST /coord/v1/streams/{p}/adopt.
type AdoptStreamInput struct {
	StreamPrefix string
	ShardCount   *int
	RequestedBy  string
	Reason       string
}

// AdoptStream takes over existing shard streams <p>:0..shardCount-1 without
// creating anything: every one must exist (a missing one is 400 naming it,
// nothing written); refused (409) when the stream has metadata or groups.
// The coordinator never deletes an adopted stream.
func (s *Service) AdoptStream(ctx context.Context, meta events.Meta, in AdoptStreamInput) (projection.StreamView, error) {
	k := projection.GroupKey{StreamPrefix: in.StreamPrefix}
	by := ownerOfCaller(meta.Actor)
	return admin(ctx, s, meta, k, "stream.adopt", in.RequestedBy, func(meta events.Meta) (projection.StreamView, error) {
		if err := routing.ValidatePrefix(in.StreamPrefix); err != nil {
			return projection.StreamView{}, withMsg(ErrInvalid, "%s", err.Error())
		}
		problems := checkAudit(in.RequestedBy, in.Reason, false)
		var count int
		if in.ShardCount == nil {
			problems = append(problems, "shardCount: must not be null")
		} else {
			var bad []string
			count, bad = s.rules.shardCountOf("shardCount", in.ShardCount, 1)
			problems = append(problems, bad...)
		}
		if len(problems) > 0 {
			return projection.StreamView{}, withMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
		}
		prefix := in.StreamPrefix
		unlock := s.locks.lock(prefix)
		defer unlock()
		if err := s.peek(func(t *tx) error { return streamCreatable(t, prefix, count, by) }); err != nil {
			return projection.StreamView{}, err
		}
		kc, err := s.rec.readKeys(ctx, prefix, shardRange(0, count), false)
		if err != nil {
			return projection.StreamView{}, err
		}
		for i := 0; i < count; i++ {
			if ft := kc.fences[i]; !fenceUsable(ft) {
				return projection.StreamView{}, withMsg(ErrPrefixExists, "%s is a %s, not a fence hash: the coordinator cannot fence %s's publishes (remove it)", routing.FenceKey(routing.StreamKey(prefix, i)), ft, routing.StreamKey(prefix, i))
			}
			switch typ := kc.types[i]; typ {
			case "stream":
			case "none":
				return projection.StreamView{}, withMsg(ErrInvalid, "Redis has no stream %s to adopt: every %s:0..%d must exist", routing.StreamKey(prefix, i), prefix, count-1)
			default:
				return projection.StreamView{}, withMsg(ErrInvalid, "%s is a %s, not a stream: only streams can be adopted", routing.StreamKey(prefix, i), typ)
			}
		}
		return submit(ctx, s.dec, meta, func(t *tx) (projection.StreamView, error) {
			if err := streamCreatable(t, prefix, count, by); err != nil {
				return projection.StreamView{}, err
			}
			t.emit(projection.GroupKey{StreamPrefix: prefix}, &events.StreamAdopted{ShardCount: count, RequestedBy: in.RequestedBy, Reason: in.Reason,
				Principal: by.principal, Anonymous: by.anonymous})
			return projection.ViewStream(prefix, t.b.ov.Stream(prefix), nil), nil
		})
	})
}

// --- the layout ---

// streamVersionAfter is the stream metadata version a layout change of a
// group of prefix to count shards takes the stream to: one more than now,
// or the same when an earlier event of the batch (another group of the
// stream, changing with it) already took the stream there; 0 without
// stream metadata.
func streamVersionAfter(t *tx, prefix string, count int) int64 {
	st := t.b.ov.Stream(prefix)
	if st == nil || !st.Metadata {
		return 0
	}
	if st.ShardCount == count {
		return st.MetadataVersion
	}
	return st.MetadataVersion + 1
}

// managedSiblings reports whether k's stream has metadata and other groups:
// its layout changes are then the stream's (every group together).
func managedSiblings(t *tx, k projection.GroupKey) bool {
	st := t.b.ov.Stream(k.StreamPrefix)
	if st == nil || !st.Metadata {
		return false
	}
	for _, g := range t.groupsWithPrefix(k.StreamPrefix) {
		if g.Key != k {
			return true
		}
	}
	return false
}

// preparingIn reports a PREPARING resharding of a group of prefix (a group
// that joins then could miss the layout the others are about to switch to).
func preparingIn(t *tx, prefix string) error {
	for _, g := range t.groupsWithPrefix(prefix) {
		if m := g.Active(); m != nil && m.State == projection.Preparing {
			return withMsg(ErrActiveResharding, "stream %s is being resharded (%s of %s, PREPARING); a group joins it once the new layout is active", prefix, m.ReshardingID, g.Key.ConsumerGroup)
		}
	}
	return nil
}

// --- a stream without groups ---

// bareScale is a scale of a stream without groups as it was read: its
// layout then, and what Redis held of the new shards.
type bareScale struct {
	from    int
	mv      int64
	created []int
}

// scaleBareStream changes the layout of a stream with metadata and no
// group at once: the new shard streams are created (empty, no consumer
// group), removed ones are left in place, and stream.scaled records it.
// ok false: the stream has groups (or no metadata); the caller scales them.
func (s *Service) scaleBareStream(ctx context.Context, meta events.Meta, prefix string, in ScaleInput) (StreamScaleResult, bool, error) {
	target := *in.TargetShardCount
	var plan bareScale
	var st *projection.Stream
	bare := false
	err := s.peek(func(t *tx) error {
		cur := t.b.ov.Stream(prefix)
		if cur == nil || !cur.Metadata || len(t.groupsWithPrefix(prefix)) > 0 {
			return nil
		}
		bare, st = true, cur.Clone()
		plan.from, plan.mv = cur.ShardCount, cur.MetadataVersion
		return bareScalable(t, prefix, target, plan)
	})
	if err != nil || !bare {
		return StreamScaleResult{}, bare, err
	}
	unlock := s.locks.lock(prefix)
	defer unlock()
	if s.rules.provisioning && target > plan.from {
		kc, err := s.rec.readKeys(ctx, prefix, shardRange(plan.from, target), false)
		if err != nil {
			return StreamScaleResult{}, true, err
		}
		if plan.created, err = claim(st, false, kc, shardRange(plan.from, target)); err != nil {
			return StreamScaleResult{}, true, err
		}
		keys := make([]string, len(plan.created))
		for i, sh := range plan.created {
			keys[i] = routing.StreamKey(prefix, sh)
		}
		existed, err := s.rec.prov.CreateStreams(ctx, keys)
		if err != nil {
			return StreamScaleResult{}, true, failed(ErrProvisioningFailed, err, "Failed to provision Redis Stream resources for %s", prefix)
		}
		if len(existed) > 0 {
			return StreamScaleResult{}, true, withMsg(ErrPrefixExists, "Redis got keys of stream prefix '%s' while it was scaled: %s; nothing was changed", prefix, strings.Join(existed, ", "))
		}
		s.rec.configureIDMP(ctx, prefix, plan.created)
	}
	if err := s.rec.fenceBare(ctx, prefix, plan, target); err != nil {
		return StreamScaleResult{}, true, err
	}
	res, err := submit(ctx, s.dec, meta, func(t *tx) (StreamScaleResult, error) { return scaleBare(t, prefix, in, plan) })
	if err != nil && !errors.Is(err, errUnknownOutcome) {
		s.rec.lowerFencesTo(ctx, projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: routing.StreamFenceField}, plan.from, plan.mv)
	}
	return res, true, err
}

// checkBareFences is the shard check's safety net for streams without
// groups (checkFences covers the others): a stream fence left above the
// stream's version by a scale whose append failed without saying whether it
// landed (fenceBare) is lowered, with the prefix lock held.
func (r *reconciler) checkBareFences(ctx context.Context) {
	if r.fencer == nil {
		return
	}
	for _, prefix := range r.state.StreamPrefixes() {
		if !r.mayAct(ctx) {
			return
		}
		unlock := r.locks.lock(prefix) // first: a scale holds it from its fences to its record
		if st, groups := r.state.StreamWithGroups(prefix); st != nil && st.Metadata && len(groups) == 0 && st.ShardCount > 0 {
			r.lowerFencesTo(ctx, projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: routing.StreamFenceField}, st.ShardCount, st.MetadataVersion)
		}
		unlock()
	}
}

// fenceBare raises, before a stream without groups changes its layout, the
// stream's fence (routing.StreamFenceField) on each shard of the old layout
// that loses keys to the version the change takes the stream to, as a
// group's layout change does (ordering.go): producers that route by the
// stream and publish idempotently rely on it. The caller holds the prefix
// lock.
func (r *reconciler) fenceBare(ctx context.Context, prefix string, plan bareScale, target int) error {
	if r.fencer == nil {
		return nil
	}
	shards := make([]events.CutoverShard, 0, plan.from)
	for i := 0; i < plan.from; i++ {
		if routing.LosesKeys(plan.from, target, i) {
			shards = append(shards, events.CutoverShard{Index: i, Raise: true})
		}
	}
	if len(shards) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := r.fencer.Cutover(rctx, prefix, routing.StreamFenceField, plan.mv+1, 0, shards); err != nil {
		r.lowerFencesTo(ctx, projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: routing.StreamFenceField}, plan.from, plan.mv)
		return failed(ErrUnavailable, err, "could not raise the stream fences of %s in Redis", prefix)
	}
	return nil
}

// bareScalable checks a scale of a stream without groups against the state.
func bareScalable(t *tx, prefix string, target int, plan bareScale) error {
	if target == plan.from {
		return withMsg(ErrShardCountUnchanged, "stream %s already has %d shards", prefix, target)
	}
	return withinQuotas(t, prefix, streamOwner(t.b.ov.Stream(prefix)), 0, target-plan.from)
}

// scaleBare records stream.scaled, checking the stream is still what the
// scale read: with metadata, without groups, at the same version.
func scaleBare(t *tx, prefix string, in ScaleInput, plan bareScale) (StreamScaleResult, error) {
	target := *in.TargetShardCount
	st := t.b.ov.Stream(prefix)
	if st == nil || !st.Metadata {
		return StreamScaleResult{}, withMsg(ErrStreamNotFound, "No coordinator metadata exists for stream prefix %s", prefix)
	}
	if len(t.groupsWithPrefix(prefix)) > 0 || st.ShardCount != plan.from || st.MetadataVersion != plan.mv {
		return StreamScaleResult{}, withMsg(ErrStateConflict, "stream %s changed while it was scaled (a consumer group registered, or another scale); retry", prefix)
	}
	if err := bareScalable(t, prefix, target, plan); err != nil {
		return StreamScaleResult{}, err
	}
	ev := &events.StreamScaled{From: plan.from, To: target, MetadataVersion: plan.mv + 1, RequestedBy: in.RequestedBy, Reason: in.Reason, CreatedShards: plan.created, KeptKeys: []string{}}
	if ev.CreatedShards == nil {
		ev.CreatedShards = []int{}
	}
	for i := target; i < plan.from; i++ {
		ev.KeptKeys = append(ev.KeptKeys, routing.StreamKey(prefix, i))
	}
	t.emit(projection.GroupKey{StreamPrefix: prefix}, ev)
	return StreamScaleResult{StreamPrefix: prefix, TargetShardCount: target, AffectedConsumerGroups: []string{}, Reshardings: []projection.ReshardingView{}}, nil
}
