// Package redisurl turns a Redis URL (and, for TLS, certificate files) into a
// go-redis client: one server, a Redis Cluster, or a primary that Redis
// Sentinel watches. The coordinator (--redis, through redisstore.NewClient) and
// the Go SDK (client.NewRedis) both call it, so a URL means the same thing to
// both.
//
// It imports only the standard library and go-redis.
package redisurl

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// URL schemes beyond go-redis's redis:// and rediss://: the seeds of a Redis
// Cluster, or the sentinels of a monitored primary, comma-separated.
const (
	ClusterScheme     = "redis+cluster"
	ClusterTLSScheme  = "rediss+cluster"
	SentinelScheme    = "redis+sentinel"
	SentinelTLSScheme = "rediss+sentinel"
)

// ClusterStateReloadInterval is how often a cluster client built here re-reads
// the slot map. go-redis re-reads it at once on MOVED or ASK, but not when a
// master stops answering: after a master crashes, its slots keep going to the
// dead address until the next periodic reload, 60 s by default since go-redis
// v9.22 (redis/go-redis#3979). A CLUSTER SLOTS a second is cheap.
const ClusterStateReloadInterval = time.Second

// Errors, wrapped by what Parse and LoadTLS return.
var (
	// ErrBadURL: the URL cannot name a Redis deployment.
	ErrBadURL = errors.New("invalid Redis URL")
	// ErrTLSFiles: a CA, certificate or key file is unreadable, or given
	// without a rediss URL to use it on.
	ErrTLSFiles = errors.New("invalid Redis TLS files")
)

// Kind is the shape of deployment a URL names.
type Kind int

// The kinds of deployment.
const (
	Single   Kind = iota // one server (*redis.Client)
	Cluster              // a Redis Cluster (*redis.ClusterClient)
	Sentinel             // a primary found through Redis Sentinel (*redis.Client from redis.NewFailoverClient)
)

func (k Kind) String() string {
	switch k {
	case Cluster:
		return "cluster"
	case Sentinel:
		return "sentinel"
	}
	return "single"
}

// Config is a parsed URL: exactly one of the options is set, by Kind.
type Config struct {
	Kind     Kind
	Single   *redis.Options
	Cluster  *redis.ClusterOptions
	Failover *redis.FailoverOptions
}

// TLS reports whether the URL asks for TLS (a rediss scheme).
func (c *Config) TLS() bool { return c.tlsConfig() != nil }

func (c *Config) tlsConfig() *tls.Config {
	switch c.Kind {
	case Cluster:
		return c.Cluster.TLSConfig
	case Sentinel:
		return c.Failover.TLSConfig
	}
	return c.Single.TLSConfig
}

// SetTLS replaces the TLS configuration of a rediss URL (the server name each
// connection checks comes from the address it dials, unless cfg names one).
func (c *Config) SetTLS(cfg *tls.Config) {
	switch c.Kind {
	case Cluster:
		c.Cluster.TLSConfig = cfg
	case Sentinel:
		c.Failover.TLSConfig = cfg
	default:
		c.Single.TLSConfig = cfg
	}
}

// NewClient builds the client the configuration names; it does not connect.
func (c *Config) NewClient() redis.UniversalClient {
	switch c.Kind {
	case Cluster:
		return redis.NewClusterClient(c.Cluster)
	case Sentinel:
		return redis.NewFailoverClient(c.Failover)
	}
	return redis.NewClient(c.Single)
}

// Addrs are the addresses the URL names: the server, the cluster's seeds, or
// the sentinels.
func (c *Config) Addrs() []string {
	switch c.Kind {
	case Cluster:
		return c.Cluster.Addrs
	case Sentinel:
		return c.Failover.SentinelAddrs
	}
	return []string{c.Single.Addr}
}

// TLSFiles are PEM files for rediss URLs: CA verifies the servers (empty: the
// system's roots), Cert and Key are the client certificate for servers that
// require one (both or neither).
type TLSFiles struct {
	CA   string
	Cert string
	Key  string
}

func (f TLSFiles) empty() bool { return f.CA == "" && f.Cert == "" && f.Key == "" }

// New parses rawURL and returns its client, with the TLS files applied to a
// rediss URL. Files given for a URL without TLS are an error: the operator
// meant TLS and would otherwise talk in the clear. An error begins with the
// URL, its credentials redacted (the message of both client.NewRedis and
// redisstore.NewClient).
func New(rawURL string, files TLSFiles) (redis.UniversalClient, error) {
	cfg, err := Parse(rawURL)
	if err == nil {
		err = cfg.ApplyTLSFiles(files)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", Redact(rawURL), err)
	}
	return cfg.NewClient(), nil
}

// ApplyTLSFiles loads files into the TLS configuration of a rediss URL.
func (c *Config) ApplyTLSFiles(files TLSFiles) error {
	if files.empty() {
		return nil
	}
	cur := c.tlsConfig()
	if cur == nil {
		return fmt.Errorf("%w: a CA, certificate or key is given but the URL is not rediss:// (TLS)", ErrTLSFiles)
	}
	tc, err := LoadTLS(files)
	if err != nil {
		return err
	}
	tc.InsecureSkipVerify = cur.InsecureSkipVerify // the URL's skip_verify
	c.SetTLS(tc)
	return nil
}

// Parse reads a Redis URL. Three forms name a Redis Cluster (a
// *redis.ClusterClient, which discovers the other nodes from any seed that
// answers):
//
//	redis+cluster://[user:password@]host1:port1,host2:port2[/][?options]
//	redis://[user:password@]host1:port1?addr=host2:port2&addr=host3:port3
//	redis://[user:password@]host1:port1,redis://host2:port2
//
// One names a primary that Redis Sentinel watches (go-redis's failover client,
// which asks the sentinels for the primary and follows it when they promote
// another):
//
//	redis+sentinel://[user:password@]host1:port1[,host2:port2...]/<master-name>[/<db>][?options]
//
// where the hosts are the sentinels and the credentials are the primary's
// (sentinels that require their own take sentinel_username and
// sentinel_password options). rediss+cluster://, rediss+sentinel:// and
// rediss:// use TLS. The options are go-redis's (dial_timeout, read_timeout,
// pool_size, ...). A cluster has only database 0, so a path other than "", "/"
// or "/0" is an error. In the list form the credentials and options are given
// once, on the first URL. Any other redis:// or rediss:// URL is one server
// (redis.ParseURL). A cluster client re-reads the slot map every
// ClusterStateReloadInterval.
func Parse(rawURL string) (*Config, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return single(rawURL) // redis.ParseURL explains
	}
	var (
		opts *redis.ClusterOptions
		err  error
	)
	switch scheme {
	case SentinelScheme, SentinelTLSScheme:
		f, err := parseSentinel(strings.TrimSuffix(scheme, "+sentinel"), rest)
		if err != nil {
			return nil, err
		}
		if f.TLSConfig != nil {
			f.TLSConfig.ServerName = "" // each sentinel and primary by its own address
		}
		return checkPorts(&Config{Kind: Sentinel, Failover: f})
	case ClusterScheme, ClusterTLSScheme:
		opts, err = parseSeedList(strings.TrimSuffix(scheme, "+cluster"), rest)
	case "redis", "rediss":
		opts, err = parseClusterForms(scheme, rest, rawURL)
	default:
		return single(rawURL)
	}
	if err != nil {
		return nil, err
	}
	if opts == nil {
		return single(rawURL)
	}
	opts.ClusterStateReloadInterval = ClusterStateReloadInterval
	if opts.TLSConfig != nil {
		opts.TLSConfig.ServerName = "" // each node by its own address
	}
	return checkPorts(&Config{Kind: Cluster, Cluster: opts})
}

func single(rawURL string) (*Config, error) {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadURL, urlErr(err))
	}
	if o.Network == "unix" {
		return &Config{Kind: Single, Single: o}, nil
	}
	return checkPorts(&Config{Kind: Single, Single: o})
}

// checkPorts refuses an address whose port no server can listen on (0, or
// above 65535): dialling it fails on every try, which a start-up check would
// only report as a server that does not answer yet.
func checkPorts(c *Config) (*Config, error) {
	for _, a := range c.Addrs() {
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("%w: address %q: %v", ErrBadURL, a, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("%w: address %q: the port must be a number from 1 to 65535", ErrBadURL, a)
		}
	}
	return c, nil
}

// parseClusterForms returns the cluster options of the redis:// cluster forms
// (an addr option, or a comma-separated list of URLs), or nil for one server.
func parseClusterForms(scheme, rest, raw string) (*redis.ClusterOptions, error) {
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
	return parseCluster(u.String())
}

func parseCluster(u string) (*redis.ClusterOptions, error) {
	o, err := redis.ParseClusterURL(u)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadURL, urlErr(err))
	}
	return o, nil
}

// splitAuthority splits "[userinfo@]h1:p1,h2:p2[/path][?query]" into the
// userinfo (with its "@"), the addresses (each checked, the port defaulting to
// defPort), the path and the query.
func splitAuthority(scheme, rest, defPort string) (userinfo string, addrs []string, path, query string, err error) {
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	hosts := authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	path, query, _ = strings.Cut(tail, "?")
	for i, h := range strings.Split(hosts, ",") {
		if h = strings.TrimSpace(h); h == "" {
			if strings.TrimSpace(hosts) == "" {
				break
			}
			return "", nil, "", "", fmt.Errorf("%w: %s:// address %d of the list is empty (a comma too many?)", ErrBadURL, scheme, i+1)
		}
		a, err := hostPort(h, defPort)
		if err != nil {
			return "", nil, "", "", err
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return "", nil, "", "", fmt.Errorf("%w: %s:// needs at least one host:port", ErrBadURL, scheme)
	}
	return userinfo, addrs, path, query, nil
}

// parseSeedList reads "[userinfo@]h1:p1,h2:p2[/path][?query]" of a
// redis+cluster URL.
func parseSeedList(scheme, rest string) (*redis.ClusterOptions, error) {
	userinfo, seeds, path, query, err := splitAuthority(scheme+"+cluster", rest, "6379")
	if err != nil {
		return nil, err
	}
	if err := checkClusterPath(path); err != nil {
		return nil, err
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("%w: query: %v", ErrBadURL, urlErr(err))
	}
	for _, s := range seeds[1:] {
		q.Add("addr", s)
	}
	return parseCluster(scheme + "://" + userinfo + seeds[0] + "?" + q.Encode())
}

// parseSentinel reads "[userinfo@]s1:p1,s2:p2/<master-name>[/<db>][?query]"
// of a redis+sentinel URL (the sentinels' port defaults to 26379).
func parseSentinel(scheme, rest string) (*redis.FailoverOptions, error) {
	name := scheme + "+sentinel"
	userinfo, sentinels, path, query, err := splitAuthority(name, rest, "26379")
	if err != nil {
		return nil, err
	}
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	if len(parts) > 0 && parts[len(parts)-1] == "" && len(parts) > 1 {
		parts = parts[:len(parts)-1] // one trailing slash
	}
	if len(parts) == 0 || parts[0] == "" {
		return nil, fmt.Errorf("%w: %s:// needs the monitored primary's name: %s://host:port[,host:port...]/<master-name>[/<db>]", ErrBadURL, name, name)
	}
	if len(parts) > 2 {
		return nil, fmt.Errorf("%w: %s:// path is /<master-name>[/<db>], got %d segments", ErrBadURL, name, len(parts))
	}
	master, err := url.PathUnescape(parts[0])
	if err != nil {
		return nil, fmt.Errorf("%w: master name: %v", ErrBadURL, err)
	}
	db := 0
	if len(parts) == 2 {
		if db, err = strconv.Atoi(parts[1]); err != nil || db < 0 {
			return nil, fmt.Errorf("%w: database %q is not a number", ErrBadURL, parts[1])
		}
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("%w: query: %v", ErrBadURL, urlErr(err))
	}
	for _, k := range []string{"master_name", "db", "addr", "username", "password"} {
		if q.Has(k) {
			return nil, fmt.Errorf("%w: option %s: give it in the URL's shape instead (%s://[user:password@]host:port,.../<master-name>[/<db>])", ErrBadURL, k, name)
		}
	}
	sentinelUser, sentinelPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	for _, s := range sentinels[1:] {
		q.Add("addr", s)
	}
	q.Set("master_name", master)
	f, err := redis.ParseFailoverURL(scheme + "://" + sentinels[0] + "?" + q.Encode())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadURL, urlErr(err))
	}
	f.DB = db
	f.SentinelUsername, f.SentinelPassword = sentinelUser, sentinelPass
	if userinfo != "" {
		u, err := url.Parse("redis://" + userinfo + "h")
		if err != nil {
			return nil, fmt.Errorf("%w: credentials: %v", ErrBadURL, urlErr(err))
		}
		f.Username = u.User.Username()
		f.Password, _ = u.User.Password()
		if _, hasPass := u.User.Password(); !hasPass {
			// "redis://password@host" is go-redis's password-only form.
			f.Username, f.Password = "", u.User.Username()
		}
	}
	return f, nil
}

// parseURLList reads "redis://[userinfo@]h1:p1[/0][?query],redis://h2:p2,...".
func parseURLList(scheme, raw string) (*redis.ClusterOptions, error) {
	parts := strings.Split(raw, ",")
	first, err := url.Parse(parts[0])
	if err != nil {
		return nil, fmt.Errorf("%w: first URL of the list: %v", ErrBadURL, urlErr(err))
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
			return nil, fmt.Errorf("%w: URL %d of the list is not %s://host:port", ErrBadURL, i+2, scheme)
		}
		if strings.Contains(rest, "@") {
			return nil, fmt.Errorf("%w: URL %d of the list carries credentials: give them once, on the first URL", ErrBadURL, i+2)
		}
		host, _, _ := strings.Cut(rest, "/")
		if strings.Contains(host, "?") {
			return nil, fmt.Errorf("%w: URL %d of the list carries options: give them once, on the first URL", ErrBadURL, i+2)
		}
		seed, err := hostPort(host, "6379")
		if err != nil {
			return nil, err
		}
		q.Add("addr", seed)
	}
	first.RawQuery = q.Encode()
	return parseCluster(first.String())
}

// hostPort checks one host:port (the port defaults to defPort).
func hostPort(h, defPort string) (string, error) {
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return net.JoinHostPort(strings.Trim(h, "[]"), defPort), nil
		}
		return "", fmt.Errorf("%w: address %q: %v", ErrBadURL, h, err)
	}
	if host == "" || port == "" {
		return "", fmt.Errorf("%w: address %q needs host:port", ErrBadURL, h)
	}
	return net.JoinHostPort(host, port), nil
}

func checkClusterPath(p string) error {
	switch p {
	case "", "/", "/0":
		return nil
	}
	return fmt.Errorf("%w: a Redis Cluster has only database 0 (path %q)", ErrBadURL, p)
}

// urlErr drops the URL (which may hold a password) from a net/url error.
func urlErr(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// secretOptions are the URL options that carry a password (sentinels that
// require their own credentials take sentinel_password; go-redis's failover
// URL also reads password).
var secretOptions = []string{"sentinel_password", "password"}

// Redact replaces the credentials of a URL with "***", for logs: the
// userinfo, and the value of every option that carries a password.
func Redact(u string) string {
	for _, name := range secretOptions {
		for _, sep := range []string{"?", "&"} {
			key := sep + name + "="
			for from := 0; ; {
				i := strings.Index(u[from:], key)
				if i < 0 {
					break
				}
				start := from + i + len(key)
				end := strings.IndexByte(u[start:], '&')
				if end < 0 {
					end = len(u)
				} else {
					end += start
				}
				u = u[:start] + "***" + u[end:]
				from = start + len("***")
			}
		}
	}
	if i := strings.LastIndex(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "***@" + u[i+1:]
		}
	}
	return u
}
