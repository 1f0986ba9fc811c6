package redisstore

import (
	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redisurl"
)

// TLSFiles are the PEM files of a rediss URL (--redis-tls-ca, --redis-tls-cert,
// --redis-tls-key), for the programs that build a client with NewClient.
type TLSFiles = redisurl.TLSFiles

// NewClient returns the client the --redis URL names, with the --redis-tls-*
// files applied to a rediss URL; it does not connect. The URL forms (one
// server, a Redis Cluster, a primary watched by Redis Sentinel) are
// redisurl.Parse's, which the Go SDK's client.NewRedis reads too.
func NewClient(rawURL string, files TLSFiles) (redis.UniversalClient, error) {
	return redisurl.New(rawURL, files)
}

// RedactURL is the URL with its credentials replaced by "***", for messages.
func RedactURL(rawURL string) string { return redisurl.Redact(rawURL) }
