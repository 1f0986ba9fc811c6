package commands

import (
	"time"

	"github.com/rscoord/rsc/projection"
)

// Quotas per principal and per stream prefix. The global caps (--max-groups,
// --max-total-shards) bound the coordinator; a quota bounds what one
// principal, or one prefix, may take of it, so that one tenant, careless or
// hostile, cannot fill the coordinator for the others: with the defaults no
// principal reaches a global cap alone. Every quota is checked by the
// decision and, before anything is provisioned, by the same check against
// the committed state (planGroup, prepare, streamCreatable run in a peek
// first); a count over its quota is refused with a 409 naming the quota, its
// flag and its value, a rate with 429 and Retry-After.
//
// What counts:
//   - groups per principal (--max-groups-per-principal): the groups a
//     principal created (POST .../groups/{g}) or registered (a member's
//     first heartbeat);
//   - shards per principal (--max-shards-per-principal): the shards of those
//     groups, each group's span as --max-total-shards counts it, plus the
//     shards of the streams without groups the principal created or adopted;
//     a scale-out of a group counts against the group's owner, whoever asks;
//   - groups per prefix (--max-groups-per-prefix) and shards per prefix
//     (--max-shards-per-prefix), counted as the global caps count them, for
//     one prefix;
//   - member records per principal (--max-members-per-principal): the
//     members a principal joined that take part (live, or leaving while they
//     hold shards), across every group; expired, fenced and left records do
//     not count (they are pruned after --stale-member-retention);
//   - joins and leaves per principal (--principal-churn-per-minute), across
//     every group, besides the budget per principal and group
//     (--member-churn-per-minute).
//
// A caller without a principal (a member API without authentication) is
// one principal, "anonymous". Groups and streams created before quotas
// existed name no principal and count against none.

// Defaults of the quotas (docs/security.md): one principal holds at most
// half of what one prefix may, and one prefix a quarter of the coordinator
// (--max-groups 1024, --max-total-shards 65536), so that no principal fills
// its prefix, nor the coordinator, alone.
const (
	DefaultMaxGroupsPerPrincipal  = 128
	DefaultMaxShardsPerPrincipal  = 8192
	DefaultMaxGroupsPerPrefix     = 256
	DefaultMaxShardsPerPrefix     = 16384
	DefaultMaxMembersPerPrincipal = 4096
	// DefaultPrincipalChurnPerMinute is twice DefaultMemberChurnPerMinute:
	// a principal restarting its members in two groups at once fits, and
	// no number of groups buys it more.
	DefaultPrincipalChurnPerMinute = 2 * DefaultMemberChurnPerMinute
)

// defaultTo sets a Config value left at zero to its default (<0 stays: off).
func DefaultTo(v *int, def int) {
	if *v == 0 {
		*v = def
	}
}

// quotas are the values of the quotas (0: off).
type quotas struct {
	groupsPerPrincipal, shardsPerPrincipal int
	groupsPerPrefix, shardsPerPrefix       int
	membersPerPrincipal                    int
	// churn is the join and leave budget of a principal across its groups.
	churn Budget
}

// owner is who a group or a stream counts against: a principal, or the
// anonymous caller. The zero owner (a record from before quotas) counts
// against nobody.
type Owner struct {
	Principal string
	Anonymous bool
}

// ownerOfCaller is the owner of what principal ("" without one) creates.
func OwnerOfCaller(principal string) Owner {
	return Owner{Principal: principal, Anonymous: principal == ""}
}

func (o Owner) known() bool { return o.Principal != "" || o.Anonymous }

func (o Owner) String() string {
	if o.Anonymous {
		return "anonymous"
	}
	return o.Principal
}

func groupOwner(g *projection.Group) Owner {
	return Owner{Principal: g.Owner, Anonymous: g.OwnerAnonymous}
}

func streamOwner(st *projection.Stream) Owner {
	if st == nil {
		return Owner{}
	}
	return Owner{Principal: st.Owner, Anonymous: st.OwnerAnonymous}
}

// ownedBy counts, as the batch sees them, the groups of o and the shards of
// its groups and of its streams without groups.
func ownedBy(t *Tx, o Owner) (groups, shards int) {
	withGroups := map[string]bool{}
	for _, k := range t.B.Overlay.Keys() {
		g := t.Group(k)
		withGroups[k.StreamPrefix] = true
		if groupOwner(g) == o {
			groups++
			shards += groupSpan(g)
		}
	}
	t.B.Overlay.EachStream(func(st *projection.Stream) {
		if st.Metadata && !withGroups[st.Prefix] && streamOwner(st) == o {
			shards += st.ShardCount
		}
	})
	return groups, shards
}

// inPrefix counts, as the batch sees them, a prefix's groups and its shards
// as the global caps count them (every group's span, or the stream's shard
// count when it has no group).
func inPrefix(t *Tx, prefix string) (groups, shards int) {
	for _, g := range t.GroupsWithPrefix(prefix) {
		groups++
		shards += groupSpan(g)
	}
	if st := t.B.Overlay.Stream(prefix); groups == 0 && st != nil && st.Metadata {
		shards = st.ShardCount
	}
	return groups, shards
}

// withinQuotas refuses a change that adds addGroups groups and addShards
// shards to prefix, owned by by (the zero owner: a change nobody owns, such
// as the scale of a stream without groups), beyond a quota, and then beyond
// the global caps.
func withinQuotas(t *Tx, prefix string, by Owner, addGroups, addShards int) error {
	q := t.Rules.quotas
	if addGroups > 0 || addShards > 0 {
		groups, shards := inPrefix(t, prefix)
		if addGroups > 0 && q.groupsPerPrefix > 0 && groups+addGroups > q.groupsPerPrefix {
			return WithMsg(ErrPrefixGroupQuota, "stream prefix %s has %d consumer groups; --max-groups-per-prefix is %d", prefix, groups, q.groupsPerPrefix)
		}
		if addShards > 0 && q.shardsPerPrefix > 0 && shards+addShards > q.shardsPerPrefix {
			return WithMsg(ErrPrefixShardQuota, "stream prefix %s has %d shards (every group's counted) and this needs %d more; --max-shards-per-prefix is %d", prefix, shards, addShards, q.shardsPerPrefix)
		}
	}
	if by.known() && (addGroups > 0 || addShards > 0) {
		groups, shards := ownedBy(t, by)
		if addGroups > 0 && q.groupsPerPrincipal > 0 && groups+addGroups > q.groupsPerPrincipal {
			return WithMsg(ErrPrincipalGroupQuota, "principal %s created or registered %d consumer groups; --max-groups-per-principal is %d", by, groups, q.groupsPerPrincipal)
		}
		if addShards > 0 && q.shardsPerPrincipal > 0 && shards+addShards > q.shardsPerPrincipal {
			return WithMsg(ErrPrincipalShardQuota, "the groups and streams of principal %s have %d shards and this needs %d more; --max-shards-per-principal is %d", by, shards, addShards, q.shardsPerPrincipal)
		}
	}
	return withinCaps(t, addGroups, addShards)
}

// withinMemberQuota refuses a member record that would take part (a join,
// or a rejoin of a terminal record) beyond the principal's quota.
func WithinMemberQuota(t *Tx, principal string) error {
	limit := t.Rules.quotas.membersPerPrincipal
	if limit <= 0 {
		return nil
	}
	if n := t.B.Overlay.ActiveMembersOf(principal); n+1 > limit {
		who := principal
		if who == "" {
			who = "anonymous"
		}
		return WithMsg(ErrPrincipalMemberQuota, "principal %s has %d members taking part across its groups; --max-members-per-principal is %d (a member that leaves or expires frees its place)", who, n, limit)
	}
	return nil
}

// --- joins and leaves per principal, across its groups ---

// takePrincipalChurn spends one join or leave of the principal's budget
// across every group (b), committed with the decision; false, with when to
// retry, when it has none left.
func (o *RuntimeOverlay) takePrincipalChurn(principal string, b Budget) (bool, time.Duration) {
	var cur *Bucket
	if v, ok := o.principals.Get(principal); ok {
		cur = &v
	} else if v, ok := o.base.principalBucket(principal); ok {
		cur = &v
	}
	next, ok, wait := b.Take(cur, o.now)
	if !ok {
		return false, wait
	}
	o.principals.Set(principal, next)
	return true, 0
}

// principalBucket is what the principal has left of its budget across its
// groups (false: never spent, a full budget).
func (r *RuntimeTable) principalBucket(principal string) (Bucket, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.principals[principal]
	return b, ok
}

// commitPrincipalsLocked writes the principal budgets a batch spent; the
// caller holds r.mu. The table keeps one entry per principal that joined or
// left a member (bounded by the users file).
func (r *RuntimeTable) commitPrincipalsLocked(o *RuntimeOverlay) {
	for principal, e := range o.principals.Edits() {
		if r.principals == nil {
			r.principals = map[string]Bucket{}
		}
		r.principals[principal] = e.Value
	}
}
