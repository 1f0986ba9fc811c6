package commands

import (
	"fmt"
	"strings"

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
type KeyCheck struct {
	Prefix string
	Bare   string         // "" when not read
	Types  map[int]string // shard index -> TYPE ("none": missing)
	Fences map[int]string // shard index -> TYPE of its fence key
}

// shardRange is the shard indexes lo..hi-1.
func ShardRange(lo, hi int) []int {
	var out []int
	for i := lo; i < hi; i++ {
		out = append(out, i)
	}
	return out
}

// fenceUsable reports whether a shard's fence key, of TYPE typ ("" when not
// read), can be the shard's fence: missing, or a hash (a fence outlives its
// stream, so a hash there is taken as the shard's own). A key of another
// type would make every publish and fence script fail with WRONGTYPE.
func FenceUsable(typ string) bool { return typ == "" || typ == "none" || typ == "hash" }

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
func Claim(st *projection.Stream, leftovers bool, kc KeyCheck, shards []int) ([]int, error) {
	var created []int
	var bad []string
	if kc.Bare != "" && kc.Bare != "none" {
		bad = append(bad, fmt.Sprintf("%s (a %s)", kc.Prefix, kc.Bare))
	}
	for _, s := range shards {
		key := routing.StreamKey(kc.Prefix, s)
		if ft := kc.Fences[s]; !FenceUsable(ft) {
			bad = append(bad, fmt.Sprintf("%s (a %s, not a fence hash)", routing.FenceKey(key), ft))
		}
		typ, read := kc.Types[s]
		switch {
		case !read:
			return nil, WithMsg(ErrStateConflict, "the shards of %s changed while Redis was read; retry", kc.Prefix)
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
		return nil, WithMsg(ErrPrefixExists, "Redis already has keys of stream prefix '%s' that the coordinator does not manage: %s%s; nothing was changed (adopt the stream, or remove them)", kc.Prefix, strings.Join(bad, ", "), more)
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
func inUse(t *Tx) (groups, shards int) {
	withGroups := map[string]bool{}
	for _, k := range t.B.Overlay.Keys() {
		groups++
		shards += groupSpan(t.Group(k))
		withGroups[k.StreamPrefix] = true
	}
	t.B.Overlay.EachStream(func(st *projection.Stream) {
		if st.Metadata && !withGroups[st.Prefix] {
			shards += st.ShardCount
		}
	})
	return groups, shards
}

// withinCaps refuses a change that adds groups and shards beyond
// --max-groups and --max-total-shards.
func withinCaps(t *Tx, addGroups, addShards int) error {
	if addGroups <= 0 && addShards <= 0 {
		return nil
	}
	groups, shards := inUse(t)
	if addGroups > 0 && groups+addGroups > t.Rules.maxGroups {
		return WithMsg(ErrGroupLimit, "the coordinator manages %d consumer groups; --max-groups is %d", groups, t.Rules.maxGroups)
	}
	if addShards > 0 && shards+addShards > t.Rules.maxTotalShards {
		return WithMsg(ErrShardLimit, "the coordinator manages %d shards and this needs %d more; --max-total-shards is %d", shards, addShards, t.Rules.maxTotalShards)
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

// shardCountOf is a requested shard count: the default when absent, within
// [least, --max-shard-count].
func (r Rules) ShardCountOf(field string, n *int, least int) (int, []string) {
	if n == nil {
		return r.DefaultShardCount, nil
	}
	switch {
	case *n < least:
		return 0, []string{fmt.Sprintf("%s: must be greater than or equal to %d", field, least)}
	case *n > r.MaxShardCount:
		return 0, []string{fmt.Sprintf("%s: must be less than or equal to %d", field, r.MaxShardCount)}
	}
	return *n, nil
}

// streamCreatable refuses a stream create (or adopt) by by on a prefix with
// metadata or groups, or beyond the quotas and the caps.
func StreamCreatable(t *Tx, prefix string, count int, by Owner) error {
	if st := t.B.Overlay.Stream(prefix); st != nil && st.Metadata {
		return WithMsg(ErrPrefixExists, "Stream prefix '%s' is already managed by coordinator metadata", prefix)
	}
	if groups := t.GroupsWithPrefix(prefix); len(groups) > 0 {
		return WithMsg(ErrPrefixExists, "Stream prefix '%s' is already managed by coordinator metadata (consumer group %s)", prefix, groups[0].Key.ConsumerGroup)
	}
	return withinQuotas(t, prefix, by, 0, count)
}

// CheckCreateStream validates a stream create's input and answers its shard
// count (ErrInvalid naming every problem).
func (r Rules) CheckCreateStream(in CreateStreamInput) (int, error) {
	problems, err := streamInputProblems(in.StreamPrefix, in.RequestedBy, in.Reason)
	if err != nil {
		return 0, err
	}
	if o, bad := CheckOrdering(in.Ordering); len(bad) > 0 {
		problems = append(problems, bad...)
	} else if o != "" {
		problems = append(problems, "ordering: a stream has no ordering; give it to a consumer group (POST /coord/v1/streams/{streamPrefix}/groups/{consumerGroup})")
	}
	count, bad := r.ShardCountOf("initialShardCount", in.InitialShardCount, 1)
	return count, Invalid(append(problems, bad...))
}

// CheckAdoptStream validates a stream adoption's input and answers its
// shard count, which it must name (ErrInvalid naming every problem).
func (r Rules) CheckAdoptStream(in AdoptStreamInput) (int, error) {
	problems, err := streamInputProblems(in.StreamPrefix, in.RequestedBy, in.Reason)
	if err != nil {
		return 0, err
	}
	var count int
	if in.ShardCount == nil {
		problems = append(problems, "shardCount: must not be null")
	} else {
		var bad []string
		count, bad = r.ShardCountOf("shardCount", in.ShardCount, 1)
		problems = append(problems, bad...)
	}
	return count, Invalid(problems)
}

// streamInputProblems checks what a stream create and an adoption share:
// the prefix (an error of its own) and the audit fields (problems).
func streamInputProblems(prefix, requestedBy, reason string) ([]string, error) {
	if err := routing.ValidatePrefix(prefix); err != nil {
		return nil, WithMsg(ErrInvalid, "%s", err.Error())
	}
	return CheckAudit(requestedBy, reason, false), nil
}

// Invalid is ErrInvalid naming problems, or nil when there are none.
func Invalid(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	return WithMsg(ErrInvalid, "%s", strings.Join(problems, "; "))
}

// CreateStream is the decision of a stream create (POST
// /coord/v1/streams/{p}), after the coordinator validated the input (count
// is its shard count) and, with provisioning, created the shard streams
// created: stream.created, unless StreamCreatable refuses.
func CreateStream(t *Tx, in CreateStreamInput, count int, by Owner, created []int) (projection.StreamView, error) {
	if err := StreamCreatable(t, in.StreamPrefix, count, by); err != nil {
		return projection.StreamView{}, err
	}
	t.emit(projection.GroupKey{StreamPrefix: in.StreamPrefix}, &events.StreamCreated{ShardCount: count, Provisioned: t.Rules.Provisioning, RequestedBy: in.RequestedBy, Reason: in.Reason, CreatedShards: created,
		Principal: by.Principal, Anonymous: by.Anonymous})
	return projection.ViewStream(in.StreamPrefix, t.B.Overlay.Stream(in.StreamPrefix), nil), nil
}

// AdoptStream is the decision of a stream adoption (POST
// /coord/v1/streams/{p}/adopt), after the coordinator found every shard
// stream in Redis: stream.adopted, unless StreamCreatable refuses.
func AdoptStream(t *Tx, in AdoptStreamInput, count int, by Owner) (projection.StreamView, error) {
	if err := StreamCreatable(t, in.StreamPrefix, count, by); err != nil {
		return projection.StreamView{}, err
	}
	t.emit(projection.GroupKey{StreamPrefix: in.StreamPrefix}, &events.StreamAdopted{ShardCount: count, RequestedBy: in.RequestedBy, Reason: in.Reason,
		Principal: by.Principal, Anonymous: by.Anonymous})
	return projection.ViewStream(in.StreamPrefix, t.B.Overlay.Stream(in.StreamPrefix), nil), nil
}

// keysExist is the refusal of a stream create when Redis has keys of the
// prefix (nil when it has none).
func KeysExist(prefix string, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	more := ""
	if len(keys) > maxNamedKeys {
		more = fmt.Sprintf(" and %d more", len(keys)-maxNamedKeys)
		keys = keys[:maxNamedKeys]
	}
	return WithMsg(ErrPrefixExists, "Redis already has keys for stream prefix '%s': %s%s; adopt them (POST /coord/v1/streams/%s/adopt) or remove them", prefix, strings.Join(keys, ", "), more, prefix)
}

// AdoptStreamInput is POST /coord/v1/streams/{p}/adopt.
type AdoptStreamInput struct {
	StreamPrefix string
	ShardCount   *int
	RequestedBy  string
	Reason       string
}

// --- the layout ---

// streamVersionAfter is the stream metadata version a layout change of a
// group of prefix to count shards takes the stream to: one more than now,
// or the same when an earlier event of the batch (another group of the
// stream, changing with it) already took the stream there; 0 without
// stream metadata.
func streamVersionAfter(t *Tx, prefix string, count int) int64 {
	st := t.B.Overlay.Stream(prefix)
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
func ManagedSiblings(t *Tx, k projection.GroupKey) bool {
	st := t.B.Overlay.Stream(k.StreamPrefix)
	if st == nil || !st.Metadata {
		return false
	}
	for _, g := range t.GroupsWithPrefix(k.StreamPrefix) {
		if g.Key != k {
			return true
		}
	}
	return false
}

// preparingIn reports a PREPARING resharding of a group of prefix (a group
// that joins then could miss the layout the others are about to switch to).
func preparingIn(t *Tx, prefix string) error {
	for _, g := range t.GroupsWithPrefix(prefix) {
		if m := g.Active(); m != nil && m.State == projection.Preparing {
			return WithMsg(ErrActiveResharding, "stream %s is being resharded (%s of %s, PREPARING); a group joins it once the new layout is active", prefix, m.ReshardingID, g.Key.ConsumerGroup)
		}
	}
	return nil
}

// --- a stream without groups ---

// bareScale is a scale of a stream without groups as it was read: its
// layout then, and what Redis held of the new shards.
type BareScale struct {
	From    int
	MV      int64
	Created []int
}

// bareScalable checks a scale of a stream without groups against the state.
func BareScalable(t *Tx, prefix string, target int, plan BareScale) error {
	if target == plan.From {
		return WithMsg(ErrShardCountUnchanged, "stream %s already has %d shards", prefix, target)
	}
	return withinQuotas(t, prefix, streamOwner(t.B.Overlay.Stream(prefix)), 0, target-plan.From)
}

// scaleBare records stream.scaled, checking the stream is still what the
// scale read: with metadata, without groups, at the same version.
func ScaleBare(t *Tx, prefix string, in ScaleInput, plan BareScale) (StreamScaleResult, error) {
	target := *in.TargetShardCount
	st := t.B.Overlay.Stream(prefix)
	if st == nil || !st.Metadata {
		return StreamScaleResult{}, WithMsg(ErrStreamNotFound, "No coordinator metadata exists for stream prefix %s", prefix)
	}
	if len(t.GroupsWithPrefix(prefix)) > 0 || st.ShardCount != plan.From || st.MetadataVersion != plan.MV {
		return StreamScaleResult{}, WithMsg(ErrStateConflict, "stream %s changed while it was scaled (a consumer group registered, or another scale); retry", prefix)
	}
	if err := BareScalable(t, prefix, target, plan); err != nil {
		return StreamScaleResult{}, err
	}
	ev := &events.StreamScaled{From: plan.From, To: target, MetadataVersion: plan.MV + 1, RequestedBy: in.RequestedBy, Reason: in.Reason, CreatedShards: plan.Created, KeptKeys: []string{}}
	if ev.CreatedShards == nil {
		ev.CreatedShards = []int{}
	}
	for i := target; i < plan.From; i++ {
		ev.KeptKeys = append(ev.KeptKeys, routing.StreamKey(prefix, i))
	}
	t.emit(projection.GroupKey{StreamPrefix: prefix}, ev)
	return StreamScaleResult{StreamPrefix: prefix, TargetShardCount: target, AffectedConsumerGroups: []string{}, Reshardings: []projection.ReshardingView{}}, nil
}
