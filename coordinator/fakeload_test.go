package coordinator_test

import (
	"context"

	"github.com/rscoord/rsc/events"
)

// Load is the fake's autoscaling evidence: entries-added and the group's lag
// from the counters; an unread entry's age is not modelled.
func (f *fakeShards) Load(ctx context.Context, prefix, group string, shards []int) ([]events.ShardSample, error) {
	defer f.answerLate("Load")
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops++
	if f.down() {
		return nil, errFakeRedis
	}
	now := f.clock.Now().UnixMilli()
	out := make([]events.ShardSample, len(shards))
	for i, sh := range shards {
		s := events.ShardSample{ShardIndex: sh, NowMs: now, Lag: -1}
		if st := f.streams[streamKey(prefix, sh)]; st != nil {
			s.Exists, s.EntriesAdded = true, st.added()
			if g := st.groups[group]; g != nil {
				s.Lag = g.lag(st)
			}
		}
		out[i] = s
	}
	return out, nil
}
