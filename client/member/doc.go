// Package member consumes a coordinator-managed sharded Redis Stream.
//
// Listen runs Concurrency logical members in one process. Each has its own id
// (<base>-m<i>, or <base> alone when Concurrency is 1), its own heartbeat loop,
// member epoch and assignment, exactly like the reference clients' logical
// members. A member:
//
//   - heartbeats the coordinator and applies the answer: only an OK starts
//     newly assigned shards; SYNC_METADATA and REVOKE_PENDING keep what is both
//     owned and assigned and revoke the rest; FENCED_MEMBER_EPOCH and
//     UNKNOWN_MEMBER_ID stop every shard and rejoin with epoch 0;
//   - reads each owned shard with XREADGROUP (consumer name = member id), calls
//     the handler for every message and acks those it accepted; failed messages
//     stay pending and are retried after RetryBackoff (or handed to a
//     dead-letter hook after MaxDeliveries);
//   - on taking a shard, claims what a previous owner left pending (XAUTOCLAIM
//     after ClaimMinIdle), so a crashed member's messages are processed and
//     scale-in drains can finish;
//   - on revoke, stops reading the shard, finishes and acks its in-flight
//     messages, and only then stops listing it (DRAINING, then REVOKED): the
//     coordinator gives a shard to its next owner only after that;
//   - stops reading everything when its heartbeats have failed for longer than
//     its assignment lease, until a heartbeat succeeds again;
//   - reports progress (last delivered and acked ids, pending count) in every
//     heartbeat, and leaves gracefully (memberEpoch -1) on shutdown.
//
// In a group with ordering KEY (the heartbeat answers say so), a member also
// keeps per-key order across reshardings, with no change to the handler:
//
//   - it never hands over an entry past a barrier: entries of a shard with
//     an id above the After of a barrier the last answer listed for it stay
//     pending (unacked) until an answer lists a higher After or none, while
//     the entries before them are handled and acked as usual; meanwhile it
//     heartbeats every HoldHeartbeatInterval (200 ms) to see the release;
//   - an entry published with a routing newer than the last answer applied
//     (its _rsc_rv field, routing.FenceField) waits for a heartbeat, sent at
//     once, whose answer is at least that new, and is then judged against
//     that answer's barriers (answers are complete for their version);
//   - on taking a shard, it claims every pending entry at once, whatever
//     ClaimMinIdle, and handles them in id order before reading new ones, so
//     entries held back by a previous owner (released, stopped or crashed)
//     keep their place;
//   - a failed entry blocks its shard: it stays pending and is retried in
//     place (claimed again with XCLAIM, so Redis counts the delivery) every
//     RetryBackoff until the handler accepts it or, after MaxDeliveries, the
//     dead-letter hook takes it; no later entry of the shard is handed over
//     meanwhile. A revoke or a shutdown during the retries leaves it and the
//     entries after it pending, for the next owner to claim in order.
//
// A shard's entries are handled one at a time, in id order. Outside ordered
// groups a failed one is retried after RetryBackoff, possibly after later
// entries. The _rsc_rv field is removed from the values handed to the
// handler, whatever the ordering.
//
// A member learns everything through heartbeats: it never submits a shard
// count, never creates or changes group metadata (the coordinator provisions
// the Redis consumer group on every shard), and never changes concurrency.
//
// Processing is at least once: a message can be handled again after a crash,
// a lease lapse or a handover. It depends on packages client and routing only.
package member
