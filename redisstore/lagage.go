package redisstore

import "time"

// The lag of a group in time is read from entry ids, which are Unix
// milliseconds: the age of an entry is Redis's clock at the read minus its
// id's millisecond part. It is exact (no rate, no interpolation) and costs one
// O(log N) read per shard (offsetsScript).
//
// Clocks: both ends of the subtraction are Redis's (an id that XADD * makes
// is Redis's clock when the entry was added; TIME is read in the same script),
// so the coordinator's clock plays no part. Two cases make an id later than
// TIME, and the age is then 0, never negative: a producer that sets ids itself
// (XADD key <ms>-<seq>) from a clock ahead of Redis's, and Redis's clock
// stepping back (Redis keeps ids increasing, so new ids stay at the last
// millisecond it saw until its clock passes it again).

// LagAge is how long the oldest entry not yet delivered to the group has
// waited, by Redis's clock at the read: 0 when every entry was delivered;
// false when the stream or the group does not exist.
func (o Offset) LagAge() (time.Duration, bool) {
	return o.groupAge(o.OldestUndeliveredID)
}

// OldestPendingAge is how long ago the group's oldest entry delivered and not
// yet acknowledged was added, by Redis's clock at the read: 0 when none is
// pending; false when the stream or the group does not exist.
func (o Offset) OldestPendingAge() (time.Duration, bool) {
	return o.groupAge(o.OldestPendingID)
}

// groupAge is EntryAge of id ("" : none, age 0) when the group was read.
func (o Offset) groupAge(id string) (time.Duration, bool) {
	if !o.Exists || o.GroupLastDeliveredID == "" {
		return 0, false
	}
	if id == "" {
		return 0, true
	}
	return EntryAge(o.RedisTimeMs, id)
}

// EntryAge is nowMs minus the millisecond part of stream id, floored at 0;
// false when id is not a stream id.
func EntryAge(nowMs int64, id string) (time.Duration, bool) {
	ms, _, ok := parseID(id)
	if !ok {
		return 0, false
	}
	if nowMs < 0 || ms >= uint64(nowMs) {
		return 0, true
	}
	return time.Duration(uint64(nowMs)-ms) * time.Millisecond, true
}
