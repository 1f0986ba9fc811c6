package member

import (
	"maps"
	"strconv"
	"sync/atomic"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/routing"
)

// Ordered resharding, the member's side. A group with ordering KEY keeps
// per-key order across reshardings: after a cutover, the entries a shard got
// past its barrier's After must wait until the coordinator saw Redis prove
// that the shards their keys came from were read and acked up to their
// cutovers; heartbeat answers list the barriers still waiting. An entry
// published with a routing newer than the last answer applied (its
// routing.FenceField) may be behind a barrier that answer could not list yet,
// so it waits for an answer at least as new.

// knowledge is what a member knows from the last heartbeat answer it applied,
// immutable once published: its metadataVersion (the answer's barriers are
// complete for it), the group's ordering, and the barriers.
type knowledge struct {
	version  int64
	ordered  bool
	barriers map[int]string // shard → the lowest After listed for it
	// changed is closed when newer knowledge replaces this one.
	changed chan struct{}
}

// gate publishes a member's knowledge to its readers.
type gate struct {
	cur atomic.Pointer[knowledge]
}

func newGate() *gate {
	g := &gate{}
	g.cur.Store(&knowledge{changed: make(chan struct{})})
	return g
}

func (g *gate) load() *knowledge { return g.cur.Load() }

// learn publishes an applied answer's knowledge and wakes the readers that
// wait when it differs. An answer older than the knowledge is ignored: its
// barrier list could miss barriers already known. It reports whether
// anything changed.
func (g *gate) learn(version int64, ordering string, barriers []client.ShardBarrier) bool {
	old := g.cur.Load()
	if version < old.version {
		return false
	}
	next := &knowledge{version: version, ordered: ordering == client.OrderingKey, changed: make(chan struct{})}
	if len(barriers) > 0 {
		next.barriers = make(map[int]string, len(barriers))
		for _, b := range barriers {
			if cur, ok := next.barriers[b.Shard.ShardIndex]; !ok || idLess(b.After, cur) {
				next.barriers[b.Shard.ShardIndex] = b.After
			}
		}
	}
	if next.version == old.version && next.ordered == old.ordered && maps.Equal(next.barriers, old.barriers) {
		return false
	}
	g.cur.Store(next)
	close(old.changed)
	return true
}

// verdict is whether an entry may be handled now.
type verdict int

const (
	admit verdict = iota
	// holdBarrier: the entry is past its shard's barrier.
	holdBarrier
	// holdVersion: the entry was published with a routing newer than the
	// knowledge; an answer at least as new must be applied first.
	holdVersion
)

// judge decides on entry id of shard, published with routing version rv (0:
// untagged, judged against the known barriers only).
func (k *knowledge) judge(shard int, id string, rv int64) verdict {
	if rv > k.version {
		return holdVersion
	}
	if after, ok := k.barriers[shard]; ok && idLess(after, id) {
		return holdBarrier
	}
	return admit
}

// takeFenceField removes routing.FenceField from an entry's fields (the
// application never sees it) and returns its routing version (0 when absent
// or unreadable).
func takeFenceField(values map[string]any) int64 {
	v, ok := values[routing.FenceField]
	if !ok {
		return 0
	}
	delete(values, routing.FenceField)
	s, _ := v.(string)
	rv, err := strconv.ParseInt(s, 10, 64)
	if err != nil || rv < 0 {
		return 0
	}
	return rv
}
