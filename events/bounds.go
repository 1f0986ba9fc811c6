package events

import "fmt"

// Bounds. A log entry is hostile until bounded like a request: the fold and
// everything after it size slices, ranges and loops by the shard counts and
// shard indexes events carry, so a count of 2,147,483,647 in a well-formed
// entry would ask for a 16 GiB slice at every start. Decode checks every such
// number against the structural maxima below before an event leaves this
// package, and an entry outside them is a DecodeError (ErrOutOfBounds) that
// the fold confines to the entry's stream prefix (see Confine), like an
// unknown type.
//
// The maxima are constants of the code, not configuration: the fold must give
// the same state on every replica, in replay and from a snapshot, whatever
// flags each process was started with. The API's own limits are within them:
// the coordinator refuses a --max-shard-count above MaxShardCount at start,
// so what the API accepted the fold accepts. An entry between the running
// --max-shard-count and MaxShardCount (written before the flag was lowered)
// is history, and stays valid.
//
// Only numbers that size or index something are checked. Text and list
// lengths need no check here: the decoder never allocates more elements than
// the entry has bytes (reader.fits), and older builds accepted longer text
// than today's API does.

// MaxShardCount is the largest shard count any event may carry, and every
// shard index is below it. --max-shard-count cannot exceed it.
const MaxShardCount = 1 << 16

// bounded is an event (or a part of one) with numbers Decode checks.
type bounded interface {
	checkBounds() error
}

// checkBounds checks ev's numbers against the structural maxima.
func checkBounds(ev Event) error {
	if b, ok := ev.(bounded); ok {
		return b.checkBounds()
	}
	return nil
}

// shardCount checks a count of shards: 0..MaxShardCount.
func shardCount(field string, n int) error {
	if n < 0 || n > MaxShardCount {
		return fmt.Errorf("%s %d is outside 0..%d", field, n, MaxShardCount)
	}
	return nil
}

// shardIndex checks a shard index: 0..MaxShardCount-1.
func shardIndex(field string, i int) error {
	if i < 0 || i >= MaxShardCount {
		return fmt.Errorf("%s %d is outside 0..%d", field, i, MaxShardCount-1)
	}
	return nil
}

func shardIndexes(field string, s []int) error {
	for _, i := range s {
		if err := shardIndex(field, i); err != nil {
			return err
		}
	}
	return nil
}

// firstErr is the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (e *GroupCreated) checkBounds() error {
	return firstErr(shardCount("shardCount", e.ShardCount), shardIndexes("createdShards", e.CreatedShards),
		shardIndexes("foreignShards", e.ForeignShards))
}

func (e *AssignmentComputed) checkBounds() error { return e.Targets.checkBounds() }
func (e *AssignmentChanged) checkBounds() error  { return e.Targets.checkBounds() }

func (t Targets) checkBounds() error {
	for _, s := range t {
		if err := shardIndexes("targets", s); err != nil {
			return err
		}
	}
	return nil
}

func (e *ShardsRepaired) checkBounds() error {
	for _, s := range e.Shards {
		if err := shardIndex("shards.shardIndex", s.ShardIndex); err != nil {
			return err
		}
	}
	return nil
}

func (e *MemberSynced) checkBounds() error { return shardIndexes("granted", e.Granted) }

func (e *OwnershipReported) checkBounds() error {
	return firstErr(shardIndexes("owned", e.Owned), shardIndexes("revoking", e.Revoking))
}

func (e *RevokeAcknowledged) checkBounds() error { return shardIndexes("shards", e.Shards) }

func (e *ReshardingPreparing) checkBounds() error {
	return firstErr(shardCount("fromShardCount", e.FromShardCount), shardCount("toShardCount", e.ToShardCount),
		shardIndexes("createdShards", e.CreatedShards))
}

func (e *ReshardingProvisioned) checkBounds() error { return shardCount("shards", e.Shards) }

func (e *ReshardingActivated) checkBounds() error {
	return firstErr(shardCount("shardCount", e.ShardCount), shardCount("assignableCount", e.AssignableCount))
}

func evidenceBounds(ev []ShardDrain) error {
	for _, d := range ev {
		if err := shardIndex("evidence.shardIndex", d.ShardIndex); err != nil {
			return err
		}
	}
	return nil
}

func (e *ReshardingDrained) checkBounds() error {
	return firstErr(shardCount("assignableCount", e.AssignableCount), evidenceBounds(e.Evidence))
}

func (e *ReshardingReopened) checkBounds() error {
	return firstErr(shardCount("assignableCount", e.AssignableCount), evidenceBounds(e.Evidence))
}

func (e *ReshardingCompleted) checkBounds() error { return evidenceBounds(e.Evidence) }

func (e *ReshardingRolledBack) checkBounds() error {
	return firstErr(shardCount("shardCount", e.ShardCount), shardCount("assignableCount", e.AssignableCount))
}

func (e *ReshardingCutover) checkBounds() error {
	if err := firstErr(shardCount("fromCount", e.FromCount), shardCount("toCount", e.ToCount)); err != nil {
		return err
	}
	for _, s := range e.Shards {
		if err := shardIndex("shards.shardIndex", s.ShardIndex); err != nil {
			return err
		}
	}
	for _, b := range e.Barriers {
		if err := firstErr(shardIndex("barriers.shardIndex", b.ShardIndex), shardIndexes("barriers.sources", b.Sources)); err != nil {
			return err
		}
	}
	return nil
}

func (e *BarrierReleased) checkBounds() error {
	if err := shardIndexes("shards", e.Shards); err != nil {
		return err
	}
	for _, p := range e.Evidence {
		if err := shardIndex("evidence.shardIndex", p.ShardIndex); err != nil {
			return err
		}
	}
	return nil
}

func (e *UnfencedWrites) checkBounds() error {
	for _, w := range e.Shards {
		if err := shardIndex("shards.shardIndex", w.ShardIndex); err != nil {
			return err
		}
	}
	return nil
}

func (e *StreamCreated) checkBounds() error {
	return firstErr(shardCount("shardCount", e.ShardCount), shardIndexes("createdShards", e.CreatedShards))
}

func (e *StreamAdopted) checkBounds() error { return shardCount("shardCount", e.ShardCount) }

func (e *StreamScaled) checkBounds() error {
	return firstErr(shardCount("from", e.From), shardCount("to", e.To), shardIndexes("createdShards", e.CreatedShards))
}

func (e *AutoscalingConfigured) checkBounds() error {
	return firstErr(shardCount("minShards", e.MinShards), shardCount("maxShards", e.MaxShards))
}

func (e *AutoscalingDecided) checkBounds() error {
	if err := firstErr(shardCount("from", e.From), shardCount("to", e.To)); err != nil {
		return err
	}
	for _, s := range e.Shards {
		if err := shardIndex("shards.shardIndex", s.ShardIndex); err != nil {
			return err
		}
	}
	return nil
}
