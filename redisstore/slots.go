package redisstore

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// slotMapTTL is how long a CLUSTER SLOTS answer is reused: monitoring reads
// offsets often, while the slot map only changes on a failover or a slot
// migration, and a stale node name there misleads nobody for long.
const slotMapTTL = 2 * time.Second

// slotRange is a range of hash slots and the master serving it.
type slotRange struct {
	start, end int
	nodeID     string
	endpoint   string
}

// slotMap caches the cluster's slot map for monitoring.
type slotMap struct {
	mu      sync.Mutex
	ranges  []slotRange // sorted by start
	fetched time.Time
}

// lookup returns the range holding slot, reading CLUSTER SLOTS when the
// cached map is older than slotMapTTL. It reports false on a client that is
// not a cluster client, when CLUSTER SLOTS fails, or when no node serves slot.
func (m *slotMap) lookup(ctx context.Context, rdb redis.UniversalClient, slot int) (slotRange, bool) {
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return slotRange{}, false
	}
	ranges := m.get(ctx, cc)
	i := sort.Search(len(ranges), func(i int) bool { return ranges[i].end >= slot })
	if i < len(ranges) && ranges[i].start <= slot {
		return ranges[i], true
	}
	return slotRange{}, false
}

func (m *slotMap) get(ctx context.Context, cc *redis.ClusterClient) []slotRange {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ranges != nil && time.Since(m.fetched) < slotMapTTL {
		return m.ranges
	}
	slots, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		// Monitoring without node names beats no monitoring; keep what we had.
		return m.ranges
	}
	ranges := make([]slotRange, 0, len(slots))
	for _, s := range slots {
		r := slotRange{start: s.Start, end: s.End}
		if len(s.Nodes) > 0 {
			r.nodeID, r.endpoint = s.Nodes[0].ID, s.Nodes[0].Addr
		}
		ranges = append(ranges, r)
	}
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].start < ranges[j].start })
	m.ranges, m.fetched = ranges, time.Now()
	return ranges
}
