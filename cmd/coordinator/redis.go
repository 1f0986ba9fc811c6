package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redisurl"
	"github.com/rscoord/rsc/redisstore"
)

// redisCheckWait bounds the start-up check of the Redis server (engine,
// version, commands, TLS): long enough for a TLS handshake on a loaded
// machine, short enough not to hold up serving /readyz when Redis is down.
const redisCheckWait = 5 * time.Second

// redisFlags registers the flags of the connection to Redis besides --redis.
func (m *Main) redisFlags(fs *flag.FlagSet) {
	fs.StringVar(&m.RedisTLS.CA, "redis-tls-ca", "", "with a rediss:// URL: PEM file of the CA (or bundle) that signed the Redis servers' certificates (default: the system's roots)")
	fs.StringVar(&m.RedisTLS.Cert, "redis-tls-cert", "", "with a rediss:// URL: PEM client certificate, for Redis servers that require one (tls-auth-clients yes); needs --redis-tls-key")
	fs.StringVar(&m.RedisTLS.Key, "redis-tls-key", "", "PEM private key of --redis-tls-cert")
	fs.IntVar(&m.LogReplicas, "log-replicas", 0, "replicas that must acknowledge every append to the log (WAIT) before a decision is answered; 0: none, and a decision already answered can be lost when the primary fails over (docs/engines-and-ha.md)")
	fs.DurationVar(&m.LogReplicasTimeout, "log-replicas-timeout", time.Second, "with --log-replicas: how long an append waits for its replicas before the decision fails (503); below the URL's read_timeout (5s by default)")
	fs.BoolVar(&m.AllowRedisEviction, "allow-redis-eviction", false, "start and decide on a Redis whose maxmemory-policy can evict the event log (any but noeviction; volatile-* once a coordinator key has a TTL), which is refused otherwise: at start, and at run time with 503 REDIS_EVICTION_POLICY (logged; Redis may then drop the log: LOG_LOST)")
	fs.DurationVar(&m.RedisCheckInterval, "redis-check-interval", defaultRedisCheckInterval, "how often every replica reads Redis's maxmemory-policy and persistence (INFO) and checks that the log still holds what it applied (negative: never)")
}

// checkRedisFlags checks the flags redisFlags registers, and the --redis URL
// with them (it does not connect).
func (m *Main) checkRedisFlags() error {
	if m.LogReplicas < 0 {
		return fmt.Errorf("--log-replicas must be 0 or more")
	}
	if m.LogReplicas > 0 && m.LogReplicasTimeout <= 0 {
		return fmt.Errorf("--log-replicas-timeout must be positive with --log-replicas")
	}
	if m.RedisCheckInterval == 0 {
		return fmt.Errorf("--redis-check-interval must be positive, or negative for never")
	}
	cfg, err := redisurl.Parse(m.RedisURL)
	if err != nil {
		return fmt.Errorf("--redis %s: %w", redisurl.Redact(m.RedisURL), err)
	}
	if err := cfg.ApplyTLSFiles(m.RedisTLS); err != nil {
		return fmt.Errorf("--redis-tls-*: %w", err)
	}
	return nil
}

// replication is the --log-replicas requirement of the log's appends.
func (m *Main) replication() redisstore.Replication {
	return redisstore.Replication{Replicas: m.LogReplicas, Timeout: m.LogReplicasTimeout}
}

// replicate applies --log-replicas to the log or the lease.
func (m *Main) replicate(to interface {
	SetReplication(redisstore.Replication) error
}) error {
	if err := to.SetReplication(m.replication()); err != nil {
		return fmt.Errorf("--log-replicas: %w", err)
	}
	return nil
}

// connectRedis builds the client --redis names and checks the server behind
// it (redisstore.CheckEngine). What cannot get better by waiting (an engine
// too old or lacking a command, a TLS handshake refused either way, wrong
// credentials) stops the coordinator with the reason; a server that does not
// answer yet only warns, as the log is loaded with retries anyway.
func (m *Main) connectRedis(ctx context.Context) (redis.UniversalClient, error) {
	rdb, err := redisstore.NewClient(m.RedisURL, m.RedisTLS)
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	cctx, cancel := context.WithTimeout(ctx, redisCheckWait)
	defer cancel()
	rep, err := redisstore.CheckEngine(cctx, rdb, m.LogStream, m.LogReplicas)
	if err != nil {
		if why := fatalRedisError(err); why != "" {
			_ = rdb.Close()
			return nil, fmt.Errorf("--redis %s: %s: %w", redisurl.Redact(m.RedisURL), why, err)
		}
		if why := m.sentinelTrouble(ctx); why != "" {
			_ = rdb.Close()
			return nil, fmt.Errorf("--redis %s: %s: %w", redisurl.Redact(m.RedisURL), why, err)
		}
		if addr := m.plainBehindTLS(ctx); addr != "" {
			_ = rdb.Close()
			return nil, fmt.Errorf("--redis %s: the Redis server at %s answers in plain text, not TLS: is the port a TLS port (use redis:// for a plain one)?: %w", redisurl.Redact(m.RedisURL), addr, err)
		}
		m.logger.Warn().Err(err).Str("redis", redisurl.Redact(m.RedisURL)).Msg("cannot check the Redis server yet; loading the event log with retries")
		return rdb, nil
	}
	for _, e := range rep.Engines {
		m.logger.Info().Str("engine", e.Name).Str("version", e.Version).Str("redisVersion", e.Redis).Str("mode", e.Mode).Str("node", e.Addr).Int("replicas", e.Replicas).Msg("redis server")
	}
	for _, w := range rep.Warnings {
		m.logger.Warn().Msg(w)
	}
	return rdb, nil
}

// sentinelProbeWait bounds the question to one sentinel in sentinelTrouble.
const sentinelProbeWait = 2 * time.Second

// sentinelTrouble asks each sentinel of a redis+sentinel URL for the primary
// after the start-up check failed, and says what cannot get better by
// waiting: an address that is a Redis server rather than a sentinel, or a
// master name that every sentinel answered it does not monitor. go-redis
// reports both as if the sentinels were down ("all sentinels specified in
// configuration are unreachable"). "" when a sentinel knows the primary, or
// some do not answer (they may be starting).
func (m *Main) sentinelTrouble(ctx context.Context) string {
	cfg, err := redisurl.Parse(m.RedisURL)
	if err != nil || cfg.Kind != redisurl.Sentinel || cfg.ApplyTLSFiles(m.RedisTLS) != nil {
		return ""
	}
	f := cfg.Failover
	var servers []string
	unknown := 0
	for _, addr := range f.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Username: f.SentinelUsername, Password: f.SentinelPassword,
			TLSConfig: f.TLSConfig, DialTimeout: sentinelProbeWait, ReadTimeout: sentinelProbeWait, MaxRetries: -1, DialerRetries: 1})
		qctx, cancel := context.WithTimeout(ctx, sentinelProbeWait)
		err := sc.GetMasterAddrByName(qctx, f.MasterName).Err()
		cancel()
		_ = sc.Close()
		switch {
		case err == nil:
			return ""
		case errors.Is(err, redis.Nil):
			unknown++
		case strings.Contains(strings.ToLower(err.Error()), "unknown command"):
			servers = append(servers, addr)
		}
	}
	if len(servers) > 0 {
		return fmt.Sprintf("%s is a Redis server, not a sentinel: redis+sentinel:// lists the sentinels (a server itself is redis://host:port/<db>)", strings.Join(servers, ", "))
	}
	if unknown == len(f.SentinelAddrs) {
		return fmt.Sprintf("no sentinel monitors a primary named %q (each one answered): check the master name", f.MasterName)
	}
	return ""
}

// plainBehindTLS returns the address of a rediss URL where a plain-text
// server answers, or "" (see redisurl.PlainTextAt).
func (m *Main) plainBehindTLS(ctx context.Context) string {
	cfg, err := redisurl.Parse(m.RedisURL)
	if err != nil || !cfg.TLS() {
		return ""
	}
	return redisurl.PlainTextAt(ctx, cfg.Addrs())
}

// fatalRedisError says why err stops the coordinator, or "" when retrying may
// help.
func fatalRedisError(err error) string {
	if errors.Is(err, redisstore.ErrUnsupportedEngine) {
		return "this Redis server cannot run the coordinator"
	}
	if why := redisurl.TLSFailure(err); why != "" {
		return why
	}
	msg := err.Error()
	for _, p := range []string{"WRONGPASS", "NOAUTH"} {
		if strings.Contains(msg, p) {
			if strings.Contains(msg, sentinelsUnreachable) {
				// go-redis's failover client says so of the sentinels it asked
				// for the primary: their credentials are not the primary's.
				return "the sentinels refused the credentials (a sentinel's own are the URL's ?sentinel_username=...&sentinel_password=...; the URL's user:password@ are the primary's)"
			}
			return "Redis refused the credentials of the URL"
		}
	}
	return ""
}

// sentinelsUnreachable is how go-redis's failover client reports that no
// sentinel told it the primary.
const sentinelsUnreachable = "all sentinels specified in configuration are unreachable"
