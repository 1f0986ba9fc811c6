// Package chaos runs the coordinator's fault-injection scenario against real
// processes: a redis-server, the coordinator binary (killed with SIGKILL and
// restarted on the same port and log stream), SDK producers publishing
// continuously with unique event ids, an in-process SDK member runtime and a
// member subprocess (killed with SIGKILL mid-batch and restarted).
//
// After the faults it checks what must hold however the faults fell:
//
//   - every resharding completes (re-sent when a crash swallowed the request);
//   - every published event id was consumed at least once, nothing is pending
//     or unread on a live shard, removed shards were retired;
//   - the coordinator serves the state a fresh fold of its log gives, and
//     replay.Verify agrees with the log and the snapshot;
//   - no shard was ever held by two members, in the log (after every event)
//     and from the members' side (Recorder: who read which shard when).
//
// cmd/coordinator's TestIntegrationChaos runs one bounded round in CI;
// cmd/soak runs rounds with random faults for minutes and prints a table.
//
// It is test tooling under cmd/: it builds concrete clients and processes, and
// nothing but cmd/soak and tests may import it.
package chaos
