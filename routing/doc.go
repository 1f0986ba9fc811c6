// Package routing is the producer routing math of the v1 wire contract,
// shared by the coordinator server and the Go SDK so that both compute
// exactly the same stream keys, shard indexes and Redis Cluster slots.
//
// It covers:
//
//   - stream key construction: [StreamKey] ("<prefix>:<index>") and
//     [KeyPattern] ("<prefix>:{shardIndex}", a literal placeholder);
//   - validation of stream prefixes and consumer group names:
//     [ValidatePrefix] and [ValidateName];
//   - routeV1, the partition-key → shard mapping: [RouteKey] and [RouteV1],
//     built on [Murmur3_32] (MurmurHash3_x86_32) with modulo-bias removal
//     by re-hashing;
//   - the Redis Cluster hash slot of a key: [Slot].
//
// Every function here is bit-exact with the reference clients (see the
// vectors in testdata/routev1-vectors.json, copied from the wire contract),
// is pure, allocation-free on the hot path and safe for concurrent use.
//
// The package deliberately depends on nothing else in this repository, so
// the server and the SDK can both import it without pulling each other in.
package routing
