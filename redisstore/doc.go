// Package redisstore is the coordinator's Redis technology package: the event log
// on one Redis Stream with compare-and-append, the snapshot store, and the shard
// stream operations (provisioning, drain evidence, retirement, offsets) that the
// commands package reaches through its own small interfaces.
//
// Everything works on one Redis server, on a primary found through Redis
// Sentinel and on a Redis Cluster alike (NewClient builds the client a --redis
// URL names): the log and the snapshot are one key each, and every shard
// operation touches one stream per command or script, so a group's shards
// spread over the cluster's slots. Offsets name the master serving each shard
// on a cluster. CheckEngine checks at start that the server (Redis 7.0 or
// later, or Valkey) has what the coordinator uses, CheckDurability whether it
// may evict the coordinator's keys and whether it persists them; with a
// Replication, appends wait for replicas (replicate.go). A restore of a lost
// log appends its entry under an id of its own (restore.go).
//
// It imports events (for the Log contract), routing (for stream keys),
// internal/redisurl (for URLs) and internal/streamread (the messages query it
// shares with httpapi), nothing else from the repository.
package redisstore
