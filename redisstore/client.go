package redisstore

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster URL schemes: the seeds of a Redis Cluster, comma-separated.
const (
	ClusterScheme    = "redis+cluster"
	ClusterTLSScheme = "rediss+cluster"
)

// ClusterStateReloadInterval is how often a cluster client built by NewClient
// re-reads the slot map. go-redis re-reads it at once on MOVED or ASK, but not
// when a master stops answering: after a master crashes, its slots keep going
// to the dead address until the next periodic reload, 60 s by default since
// go-redis v9.22 (redis/go-redis#3979). A CLUSTER SLOTS a second is cheap.
const ClusterStateReloadInterval = time.Second

// errBadURL is wrapped by every NewClient parse error.
var errBadURL = errors.New("invalid Redis URL")

// NewClient returns the client the --redis URL names; it does not connect.
// Three forms name a Redis Cluster (a *redis.ClusterClient, which discovers the
// other nodes from any seed that answers):
//
//	redis+cluster://[user:password@]host1:port1,host2:port2[/][?options]
//	redis://[user:password@]host1:port1?addr=host2:port2&addr=host3:port3
//	redis://[user:password@]host1:port1,redis://host2:port2
//
// rediss+cluster:// and rediss:// use TLS. The options are go-redis's
// (redis.ParseClusterURL: dial_timeout, read_timeout, pool_size, ...). A
// cluster has only database 0, so a path other than "", "/" or "/0" is an
// error. In the list form the credentials and options are given once, on the
// first URL. Any other redis:// or rediss:// URL is one server
// (redis.ParseURL), as before. A cluster client re-reads the slot map every
// ClusterStateReloadInterval.
func NewClient(rawURL string) (redis.UniversalClient, error) {
	opts, err := parseClusterURL(rawURL)
	if err != nil {
		return nil, err
	}
	if opts != nil {
		opts.ClusterStateReloadInterval = ClusterStateReloadInterval
		return redis.NewClusterClient(opts), nil
	}
	single, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	return redis.NewClient(single), nil
}

// parseClusterURL returns the cluster options of a cluster URL, or nil for a
// single-server URL.
func parseClusterURL(raw string) (*redis.ClusterOptions, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, nil // redis.ParseURL explains
	}
	switch scheme {
	case ClusterScheme, ClusterTLSScheme:
		return parseSeedList(strings.TrimSuffix(scheme, "+cluster"), rest)
	case "redis", "rediss":
	default:
		return nil, nil
	}
	if strings.Contains(rest, ",redis://") || strings.Contains(rest, ",rediss://") {
		return parseURLList(scheme, raw)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.Query().Has("addr") {
		return nil, nil
	}
	if err := checkClusterPath(u.Path); err != nil {
		return nil, err
	}
	u.Path = ""
	return redis.ParseClusterURL(u.String())
}

// parseSeedList reads "[userinfo@]h1:p1,h2:p2[/path][?query]" of a
// redis+cluster URL.
func parseSeedList(scheme, rest string) (*redis.ClusterOptions, error) {
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	userinfo, hosts := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	path, query, _ := strings.Cut(tail, "?")
	if err := checkClusterPath(path); err != nil {
		return nil, err
	}
	var seeds []string
	for _, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h == "" {
			continue
		}
		seed, err := seedAddr(h)
		if err != nil {
			return nil, err
		}
		seeds = append(seeds, seed)
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("%w: %s:// needs at least one host:port", errBadURL, scheme+"+cluster")
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("%w: query: %v", errBadURL, urlErr(err))
	}
	for _, s := range seeds[1:] {
		q.Add("addr", s)
	}
	return redis.ParseClusterURL(scheme + "://" + userinfo + seeds[0] + "?" + q.Encode())
}

// parseURLList reads "redis://[userinfo@]h1:p1[/0][?query],redis://h2:p2,...".
func parseURLList(scheme, raw string) (*redis.ClusterOptions, error) {
	parts := strings.Split(raw, ",")
	first, err := url.Parse(parts[0])
	if err != nil {
		return nil, fmt.Errorf("%w: first URL of the list: %v", errBadURL, urlErr(err))
	}
	if err := checkClusterPath(first.Path); err != nil {
		return nil, err
	}
	first.Path = ""
	q := first.Query()
	for i, p := range parts[1:] {
		p = strings.TrimSpace(p)
		s, rest, ok := strings.Cut(p, "://")
		if !ok || s != scheme {
			return nil, fmt.Errorf("%w: URL %d of the list is not %s://host:port", errBadURL, i+2, scheme)
		}
		if strings.Contains(rest, "@") {
			return nil, fmt.Errorf("%w: URL %d of the list carries credentials: give them once, on the first URL", errBadURL, i+2)
		}
		host, _, _ := strings.Cut(rest, "/")
		if strings.Contains(host, "?") {
			return nil, fmt.Errorf("%w: URL %d of the list carries options: give them once, on the first URL", errBadURL, i+2)
		}
		seed, err := seedAddr(host)
		if err != nil {
			return nil, err
		}
		q.Add("addr", seed)
	}
	first.RawQuery = q.Encode()
	return redis.ParseClusterURL(first.String())
}

// seedAddr checks one host:port (the port defaults to 6379).
func seedAddr(h string) (string, error) {
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return net.JoinHostPort(strings.Trim(h, "[]"), "6379"), nil
		}
		return "", fmt.Errorf("%w: seed %q: %v", errBadURL, h, err)
	}
	if host == "" || port == "" {
		return "", fmt.Errorf("%w: seed %q needs host:port", errBadURL, h)
	}
	return net.JoinHostPort(host, port), nil
}

func checkClusterPath(p string) error {
	switch p {
	case "", "/", "/0":
		return nil
	}
	return fmt.Errorf("%w: a Redis Cluster has only database 0 (path %q)", errBadURL, p)
}

// urlErr drops the URL (which may hold a password) from a net/url error.
func urlErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
