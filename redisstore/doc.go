// Package redisstore is the coordinator's Redis technology package: the event log
// on one Redis Stream with compare-and-append, the snapshot store, and the shard
// stream operations (provisioning, drain evidence, retirement, offsets) that the
// commands package reaches through its own small interfaces.
//
// It imports events (for the Log contract) and routing (for stream keys), nothing else
// from the repository.
package redisstore
