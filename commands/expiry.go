package commands

import (
	"fmt"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Empty groups expire. A group a member's first heartbeat registered (a
// typo'd name, a service long gone) would otherwise stay for ever, EMPTY,
// and its consumer group would hold every later scale-in of its stream in
// DRAINING (it never reads the removed shards). Kafka deletes an empty
// group's offsets after offsets.retention.minutes (7 days by default); here a
// registered group with no live member for --empty-group-retention (7 days
// by default) is removed by the maintenance decision, as a delete removes it
// (removal.go: group.deleted with Expired, then its consumer groups
// destroyed). The decision is a function of the state and its time: the
// group's EmptySince is in the log (the record that took its last live
// member), so a replay decides the same. A group an operator created never
// expires.

// DefaultEmptyGroupRetention is --empty-group-retention's default.
const DefaultEmptyGroupRetention = 7 * 24 * time.Hour

// expiredGroup reports whether g registered itself and has had no live
// member for retention (<= 0: never) as of now.
func ExpiredGroup(g projection.ReadOnlyGroup, now time.Time, retention time.Duration) bool {
	return retention > 0 && g.Registered() && !g.EmptySince().IsZero() && g.LiveCount() == 0 && !now.Before(g.EmptySince().Add(retention))
}

// expireGroup removes k when it expired (expiredGroup), and reports whether
// it did.
func expireGroup(t *Tx, k projection.GroupKey) bool {
	g := t.Group(k)
	if g == nil || !ExpiredGroup(g.ReadOnly(), t.Now, t.Rules.EmptyGroupRetention) {
		return false
	}
	removeGroup(t, k, &events.GroupDeleted{RequestedBy: Actor, Expired: true,
		Reason: fmt.Sprintf("registered by a member's heartbeat and without a live member since %s, for at least --empty-group-retention %s",
			g.EmptySince.UTC().Format(time.RFC3339), t.Rules.EmptyGroupRetention)})
	return true
}

// expireDropped is the decision at the end of a dropped held heartbeat's
// grace: the member is expired when it still takes part and renewed nothing
// since its heartbeat was held (token).
func ExpireDropped(t *Tx, k projection.GroupKey, id string, token uint64, grace time.Duration) {
	g := t.Group(k)
	if g == nil {
		return
	}
	if m := g.Member(id); m == nil || !m.Active() {
		return
	}
	if rt, ok := t.RT.view(k, id); !ok || rt.beats != token {
		return
	}
	expire(t, k, []string{id}, fmt.Sprintf("the connection of its held heartbeat closed and it did not heartbeat again within %s", grace))
}
