package httpapi

import (
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// Projection's views reach the wire through projection's Wire* functions (the
// one mapping, shared with the replay tool). Handlers add what only memory
// and Redis know (reshardingLive, MembersOf) to the views first.

// GroupOf is a group as GET .../groups/{g} shows it: everything in it comes
// from the log.
func GroupOf(g *projection.Group) wire.Group { return projection.WireGroup(projection.ViewGroup(g)) }

// nonEmpty is s as a nullable field of a body: nil when s is "".
func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// sortedShardRefs is a member's shard set in its wire form, sorted.
func sortedShardRefs(idx []int) []wire.ShardRef {
	return projection.WireShards(projection.SortedInts(idx))
}
