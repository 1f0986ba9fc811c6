package coordinator

import (
	"sync"
	"sync/atomic"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Held heartbeats, the registry (hold.go runs one). A member may ask for its
// heartbeat to be held when its answer says nothing new; the held request
// waits here, one waiter per member, until a change concerns its answer, its
// bound passes, its caller goes away, or it is released (shutdown, loss of
// leadership). A waiter holds no lock while it waits.
//
// The writer tells the registry what each applied batch changed (changed),
// and the registry wakes only the waiters whose answer that concerns: a
// change's cost is proportional to the change, never to the number of
// requests held. How a batch's records reach the answers they concern:
//
//   - a new metadata version of the group (every join, leave, expiry, fence,
//     prune and layout change bumps it) is in every member's answer: every
//     waiter of the group whose answer carried another version is woken;
//   - a record that is not about members (a resharding step, a barrier
//     released, an ordering change, a stream's layout, a group deleted, an
//     event type this switch does not know) wakes the whole group: it may
//     change every answer, and it is rare;
//   - a member record wakes that member's waiter when its answer changed (it
//     was fenced or expired, its grantable or pending shards moved);
//   - an assignment change wakes the members whose target it names;
//   - a released shard (member.revoke_acknowledged) wakes the member whose
//     target holds it: revoke, release, grant in round trips, not intervals;
//   - a correction round opened or closed (the runtime table) wakes the group.
//
// A waiter registers against the committed state and then checks that state
// once more (hold.go): a batch applied between the answer and the
// registration is either seen by that check or by changed, never by neither.
type waiters struct {
	mu     sync.Mutex
	groups map[projection.GroupKey]*heldGroup
	// perPrincipal counts the waiters of each principal ("" for anonymous
	// members); an entry goes when its count reaches 0.
	perPrincipal map[string]int
	// total is the number of waiters, read without the lock by the writer
	// to skip the registry when nothing is held.
	total atomic.Int64
	// maxTotal and maxPerPrincipal bound the waiters (<= 0: no hold at all).
	maxTotal, maxPerPrincipal int
	// closed: the coordinator is shutting down; nothing is held any more.
	closed bool
}

// heldGroup is one group's waiters.
type heldGroup struct {
	members map[string]*waiter
	// mv is the metadata version every waiter's answer carried, or -1 when
	// they differ: a batch that leaves the group at another version wakes them.
	mv int64
}

// waiter is one held heartbeat: what its answer said (the metadata version,
// the assigned and pending shards) and how its wait ended.
type waiter struct {
	k         projection.GroupKey
	id        string
	principal string
	mv        int64
	assigned  []int // sorted
	pending   []int // sorted
	done      chan struct{}
	// why is set, under waiters.mu, when done is closed.
	why   HoldOutcome
	fired bool
}

func newWaiters(maxTotal, maxPerPrincipal int) *waiters {
	return &waiters{groups: map[projection.GroupKey]*heldGroup{}, perPrincipal: map[string]int{}, maxTotal: maxTotal, maxPerPrincipal: maxPerPrincipal}
}

// on reports whether heartbeats may be held at all.
func (ws *waiters) on() bool { return ws.maxTotal > 0 && ws.maxPerPrincipal > 0 }

// register holds w: a waiter the member already had is released first (a
// newer heartbeat supersedes it). It returns "" when w is held, else why
// not: HoldReleased when the registry is closed, HoldLimit when it is full
// for w's principal or in total.
func (ws *waiters) register(w *waiter) HoldOutcome {
	w.done = make(chan struct{})
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed || !ws.on() {
		return HoldReleased
	}
	hg := ws.groups[w.k]
	if hg != nil {
		if old := hg.members[w.id]; old != nil {
			ws.fireLocked(old, HoldReleased)
		}
	}
	if int(ws.total.Load()) >= ws.maxTotal || ws.perPrincipal[w.principal] >= ws.maxPerPrincipal {
		return HoldLimit
	}
	hg = ws.groups[w.k]
	if hg == nil {
		hg = &heldGroup{members: map[string]*waiter{}, mv: w.mv}
		ws.groups[w.k] = hg
	} else if len(hg.members) == 0 {
		hg.mv = w.mv
	} else if hg.mv != w.mv {
		hg.mv = -1
	}
	hg.members[w.id] = w
	ws.perPrincipal[w.principal]++
	ws.total.Add(1)
	return ""
}

// fire ends w's wait with why (nothing when it ended already).
func (ws *waiters) fire(w *waiter, why HoldOutcome) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.fireLocked(w, why)
}

// remove takes w out of the registry without firing it (its wait ended on
// its own: the bound, the caller gone).
func (ws *waiters) remove(w *waiter) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if !w.fired {
		w.fired = true
		ws.unlinkLocked(w)
	}
}

// outcome is why w's wait was ended by the registry.
func (ws *waiters) outcome(w *waiter) HoldOutcome {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return w.why
}

func (ws *waiters) fireLocked(w *waiter, why HoldOutcome) {
	if w.fired {
		return
	}
	w.fired, w.why = true, why
	ws.unlinkLocked(w)
	close(w.done)
}

func (ws *waiters) unlinkLocked(w *waiter) {
	hg := ws.groups[w.k]
	if hg == nil || hg.members[w.id] != w {
		return
	}
	delete(hg.members, w.id)
	if len(hg.members) == 0 {
		delete(ws.groups, w.k)
	}
	if n := ws.perPrincipal[w.principal] - 1; n > 0 {
		ws.perPrincipal[w.principal] = n
	} else {
		delete(ws.perPrincipal, w.principal)
	}
	ws.total.Add(-1)
}

// releaseAll answers every held heartbeat at once (loss of leadership, or
// shutdown with close: nothing is held from then on).
func (ws *waiters) releaseAll(close bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if close {
		ws.closed = true
	}
	ws.fireAllLocked(HoldReleased)
}

// wakeAll wakes every waiter: the projection changed in a way the writer
// did not decide (a catch-up with another writer's entries, a reload), so
// any answer may have.
func (ws *waiters) wakeAll() {
	if ws.total.Load() == 0 {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.fireAllLocked(HoldWoken)
}

func (ws *waiters) fireAllLocked(why HoldOutcome) {
	for _, hg := range ws.groups {
		for _, w := range hg.members {
			ws.fireLocked(w, why)
		}
	}
}

// held reports the number of held heartbeats, in total and of principal.
func (ws *waiters) held(principal string) (total, ofPrincipal int) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return int(ws.total.Load()), ws.perPrincipal[principal]
}

// concern is what one record may change in the answers of its group's
// members: every answer (all), or those of the members named and of the
// members whose target holds one of the shards named.
type concern struct {
	all    bool
	ids    []string
	shards []int
}

// concernOf says whose answers a record may change; see waiters.
func concernOf(rec events.Record) concern {
	switch ev := rec.Event.(type) {
	case *events.MemberJoined:
		return concern{ids: []string{ev.MemberID}}
	case *events.MemberUpdated:
		return concern{} // name and capacity are not in the answer
	case *events.MemberSynced:
		return concern{ids: []string{ev.MemberID}}
	case *events.OwnershipReported:
		return concern{ids: []string{ev.MemberID}}
	case *events.RevokeAcknowledged:
		return concern{ids: []string{ev.MemberID}, shards: ev.Shards}
	case *events.MemberLeft:
		return concern{ids: []string{ev.MemberID}}
	case *events.MembersExpired:
		return concern{ids: ev.MemberIDs}
	case *events.MemberFenced:
		return concern{ids: []string{ev.MemberID}}
	case *events.MembersPruned:
		return concern{ids: ev.MemberIDs}
	case *events.AssignmentChanged:
		return concern{ids: ev.MemberIDs()}
	case *events.CommandRejected, *events.ShardsRepaired, *events.AutoscalingConfigured,
		*events.AutoscalingDisabled, *events.AutoscalingDecided, *events.TermStarted,
		*events.ReshardingPreparing, *events.ReshardingProvisioned, *events.ShardsRetired, *events.UnfencedWrites:
		return concern{} // in no answer: history, Redis work, nothing routed differently yet
	}
	return concern{all: true}
}

// changed is told, by the writer, the records of a batch it just applied to
// st and the groups whose correction round the batch opened or closed; it
// wakes the waiters whose answer that concerns. The writer is the only
// goroutine that changes st, so it reads st without its lock.
func (ws *waiters) changed(st *projection.State, recs []events.Record, rounds []projection.GroupKey) {
	if ws.total.Load() == 0 {
		return
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	type groupChange struct {
		all    bool
		ids    map[string]struct{}
		shards []int
	}
	var touched map[projection.GroupKey]*groupChange
	get := func(k projection.GroupKey) *groupChange {
		if touched == nil {
			touched = map[projection.GroupKey]*groupChange{}
		}
		c := touched[k]
		if c == nil {
			c = &groupChange{}
			touched[k] = c
		}
		return c
	}
	for _, rec := range recs {
		if rec.ConsumerGroup == "" {
			// A stream's record (its layout, its creation): every group of
			// the prefix may answer otherwise now.
			if rec.StreamPrefix != "" {
				for k := range ws.groups {
					if k.StreamPrefix == rec.StreamPrefix {
						get(k).all = true
					}
				}
			}
			continue
		}
		k := projection.KeyOf(rec)
		if ws.groups[k] == nil {
			continue
		}
		c := get(k)
		if c.all {
			continue
		}
		con := concernOf(rec)
		if con.all {
			c.all = true
			continue
		}
		for _, id := range con.ids {
			if c.ids == nil {
				c.ids = map[string]struct{}{}
			}
			c.ids[id] = struct{}{}
		}
		c.shards = append(c.shards, con.shards...)
	}
	for _, k := range rounds {
		if ws.groups[k] != nil {
			get(k).all = true
		}
	}
	st.Read(func(r projection.Reader) {
		for k, c := range touched {
			hg := ws.groups[k]
			if hg == nil {
				continue
			}
			g := r.Group(k)
			switch {
			case !g.Exists() || c.all:
				for _, w := range hg.members {
					ws.fireLocked(w, HoldWoken)
				}
				continue
			case hg.mv != g.MetadataVersion():
				for _, w := range hg.members {
					if answerMoved(g, w) {
						ws.fireLocked(w, HoldWoken)
					}
				}
				if hg = ws.groups[k]; hg != nil {
					hg.mv = g.MetadataVersion() // every waiter left carries it
				}
				continue
			}
			for id := range c.ids {
				if w := hg.members[id]; w != nil && answerMoved(g, w) {
					ws.fireLocked(w, HoldWoken)
				}
			}
			if len(c.shards) > 0 {
				ws.wakeTargetOwnersLocked(k, g, c.shards)
			}
		}
	})
}

// wakeTargetOwnersLocked wakes the waiters whose target holds one of shards
// and whose answer moved: from the group's target index, or, when it has
// none to trust, by looking at each of the group's waiters.
func (ws *waiters) wakeTargetOwnersLocked(k projection.GroupKey, g projection.ReadOnlyGroup, shards []int) {
	hg := ws.groups[k]
	if hg == nil {
		return
	}
	indexed := g.EachTargetOwner(shards, func(id string) bool {
		if hg = ws.groups[k]; hg == nil {
			return false
		}
		if w := hg.members[id]; w != nil && answerMoved(g, w) {
			ws.fireLocked(w, HoldWoken)
		}
		return true
	})
	if !indexed {
		for _, w := range hg.members {
			if answerMoved(g, w) {
				ws.fireLocked(w, HoldWoken)
			}
		}
	}
}

// answerMoved reports whether the answer member w.id would get from g
// differs from the one it is held with: it is no longer live, its
// metadata version, or its assigned or pending shards changed.
func answerMoved(g projection.ReadOnlyGroup, w *waiter) bool {
	if !g.Exists() || g.MetadataVersion() != w.mv {
		return true
	}
	m := g.Member(w.id)
	if !m.Exists() || !m.Live() {
		return true
	}
	assigned, pending := g.Grantable(w.id)
	return !projection.EqualSets(assigned, w.assigned) || !projection.EqualSets(pending, w.pending)
}
