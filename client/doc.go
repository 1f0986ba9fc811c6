// Package client is the Go SDK's connection to the coordinator: an HTTP client
// for the v1 wire contract (producer routing, member heartbeats, login, and the
// admin and monitoring calls operators and tests use), with Basic or Bearer
// authentication, against one coordinator or several replicas of a highly
// available one (see Client for the failover rules).
//
// The SDK itself lives in two subpackages:
//
//   - [github.com/rscoord/rsc/client/producer] publishes: it caches producer
//     routing per (streamPrefix, consumerGroup), routes partition keys with
//     routeV1 and writes XADD ... NOMKSTREAM MAXLEN ~ N inside a script that
//     first checks the shard's fence (ordered resharding).
//   - [github.com/rscoord/rsc/client/member] consumes: Listen runs N logical
//     members that heartbeat, read their assigned shards with XREADGROUP, ack,
//     claim what crashed members left pending, hand shards over
//     revoke-before-assign, and in groups with ordering KEY hold entries back
//     behind the barriers heartbeat answers announce.
//
// NewRedis builds the Redis client the subpackages take from the same URL
// the coordinator's --redis reads: one server, a Redis Cluster, or a primary
// watched by Redis Sentinel, with TLS.
//
// The SDK speaks the same protocol as the reference Python client and Spring
// starter. It depends only on packages routing, wire and internal/redisurl of
// this repository (shared with the server, so both compute the same shard
// keys, read and write the same bodies and read Redis URLs alike); it must
// not import the server's packages (commands, projection, httpapi, events,
// redisstore).
package client
