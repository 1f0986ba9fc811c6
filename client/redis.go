package client

import (
	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redisurl"
)

// RedisTLS are PEM files for a rediss URL given to NewRedis, as the
// coordinator's --redis-tls-ca, --redis-tls-cert and --redis-tls-key: CA
// verifies the servers (empty: the system's roots), Cert and Key are the
// client certificate for servers that require one (both or neither).
type RedisTLS = redisurl.TLSFiles

// NewRedis returns the Redis client for the shard streams (producer.Config
// and member.Config take it) from the same URL the coordinator's --redis
// takes, so both sides name a deployment the same way:
//
//	redis://[user:password@]host:port/db           one server (rediss:// for TLS)
//	redis+cluster://[user:password@]h1:p1,h2:p2    a Redis Cluster (rediss+cluster://)
//	redis+sentinel://[user:password@]s1:p1,s2:p2/<master-name>[/<db>]
//	                                               a primary watched by Redis Sentinel
//	                                               (rediss+sentinel://), followed
//	                                               across failovers
//
// with go-redis's options (dial_timeout, read_timeout, pool_size, ...) as the
// query. tls applies to rediss URLs only; files given for a plain URL are an
// error. It does not connect.
func NewRedis(rawURL string, tls RedisTLS) (redis.UniversalClient, error) {
	return redisurl.New(rawURL, tls)
}
