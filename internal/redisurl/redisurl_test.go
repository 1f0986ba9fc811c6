package redisurl_test

import (
	"context"
	"errors"
	"net"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redisurl"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		url  string
		// single: the Addr and DB of a *redis.Client; cluster: the seeds of a
		// *redis.ClusterClient; sentinels and master: a failover client's.
		single    string
		db        int
		cluster   []string
		sentinels []string
		master    string
		user      string
		pass      string
		tls       bool
		wantErr   string
	}{
		{name: "one server", url: "redis://127.0.0.1:6379/0", single: "127.0.0.1:6379"},
		{name: "one server, another db", url: "redis://h:7000/3", single: "h:7000", db: 3},
		{name: "one server, TLS and credentials", url: "rediss://u:p@h:7000", single: "h:7000", user: "u", pass: "p", tls: true},
		{name: "one server, comma in the password", url: "redis://u:a,b@h:7000", single: "h:7000", user: "u", pass: "a,b"},

		{name: "cluster scheme", url: "redis+cluster://10.0.0.1:7000,10.0.0.2:7001,10.0.0.3:7002", cluster: []string{"10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.3:7002"}},
		{name: "cluster scheme, one seed", url: "redis+cluster://h:7000", cluster: []string{"h:7000"}},
		{name: "cluster scheme, trailing slash, db 0", url: "redis+cluster://h1:7000,h2:7001/0", cluster: []string{"h1:7000", "h2:7001"}},
		{name: "cluster scheme, default port", url: "redis+cluster://h1,h2:7001/", cluster: []string{"h1:6379", "h2:7001"}},
		{name: "cluster scheme, IPv6", url: "redis+cluster://[::1]:7000,[::1]:7001", cluster: []string{"[::1]:7000", "[::1]:7001"}},
		{name: "cluster scheme, credentials, TLS, options", url: "rediss+cluster://u:p@h1:7000,h2:7001?dial_timeout=3s", cluster: []string{"h1:7000", "h2:7001"}, user: "u", pass: "p", tls: true},
		{name: "go-redis addr form", url: "redis://u:p@h1:7000?addr=h2:7001&addr=h3:7002", cluster: []string{"h1:7000", "h2:7001", "h3:7002"}, user: "u", pass: "p"},
		{name: "go-redis addr form with db 0", url: "redis://h1:7000/0?addr=h2:7001", cluster: []string{"h1:7000", "h2:7001"}},
		{name: "list of URLs", url: "redis://u:p@h1:7000/0,redis://h2:7001,redis://h3:7002/", cluster: []string{"h1:7000", "h2:7001", "h3:7002"}, user: "u", pass: "p"},
		{name: "list of TLS URLs", url: "rediss://h1:7000,rediss://h2:7001", cluster: []string{"h1:7000", "h2:7001"}, tls: true},

		{name: "cluster with db 1", url: "redis+cluster://h1:7000,h2:7001/1", wantErr: "only database 0"},
		{name: "addr form with db 2", url: "redis://h1:7000/2?addr=h2:7001", wantErr: "only database 0"},
		{name: "cluster without seeds", url: "redis+cluster://", wantErr: "at least one host:port"},
		{name: "cluster, empty port", url: "redis+cluster://h1:,h2:7001", wantErr: "needs host:port"},
		{name: "cluster, unknown option", url: "redis+cluster://h1:7000?bogus=1", wantErr: "unexpected option"},
		{name: "list, credentials twice", url: "redis://u:p@h1:7000,redis://u:p@h2:7001", wantErr: "credentials"},
		{name: "list, options on a later URL", url: "redis://h1:7000,redis://h2:7001?dial_timeout=1s", wantErr: "options"},
		{name: "list, mixed schemes", url: "redis://h1:7000,rediss://h2:7001", wantErr: "not redis://"},
		{name: "not redis", url: "http://h:80", wantErr: "scheme"},

		{name: "sentinel", url: "redis+sentinel://10.0.0.1:26379,10.0.0.2:26380,10.0.0.3:26381/mymaster", sentinels: []string{"10.0.0.1:26379", "10.0.0.2:26380", "10.0.0.3:26381"}, master: "mymaster"},
		{name: "sentinel, one, default port", url: "redis+sentinel://s1/m", sentinels: []string{"s1:26379"}, master: "m"},
		{name: "sentinel, db and trailing slash", url: "redis+sentinel://s1:1,s2:2/m/5/", sentinels: []string{"s1:1", "s2:2"}, master: "m", db: 5},
		{name: "sentinel, credentials of the primary, TLS, options", url: "rediss+sentinel://u:p@s1:1,s2:2/m/2?dial_timeout=3s", sentinels: []string{"s1:1", "s2:2"}, master: "m", db: 2, user: "u", pass: "p", tls: true},
		{name: "sentinel, password only", url: "redis+sentinel://p@s1:1/m", sentinels: []string{"s1:1"}, master: "m", pass: "p"},
		{name: "sentinel, comma and at in the password", url: "redis+sentinel://u:a,b@c@s1:1/m", sentinels: []string{"s1:1"}, master: "m", user: "u", pass: "a,b@c"},
		{name: "sentinel, IPv6", url: "redis+sentinel://[::1]:26379,[::1]:26380/m", sentinels: []string{"[::1]:26379", "[::1]:26380"}, master: "m"},

		{name: "sentinel without master name", url: "redis+sentinel://s1:1,s2:2", wantErr: "master-name"},
		{name: "sentinel with an empty master name", url: "redis+sentinel://s1:1//0", wantErr: "master-name"},
		{name: "sentinel without sentinels", url: "redis+sentinel:///m", wantErr: "at least one host:port"},
		{name: "sentinel, db not a number", url: "redis+sentinel://s1:1/m/x", wantErr: "not a number"},
		{name: "sentinel, too many segments", url: "redis+sentinel://s1:1/m/0/1", wantErr: "segments"},
		{name: "sentinel, master_name option", url: "redis+sentinel://s1:1/m?master_name=n", wantErr: "master_name"},
		{name: "sentinel, password option", url: "redis+sentinel://u:p@s1:1/m?password=x", wantErr: "password"},
		{name: "sentinel, unknown option", url: "redis+sentinel://s1:1/m?bogus=1", wantErr: "unexpected option"},
		{name: "sentinel, empty port", url: "redis+sentinel://s1:/m", wantErr: "needs host:port"},
		{name: "sentinel, port above 65535", url: "redis+sentinel://127.0.0.1:99999/m", wantErr: "port must be a number from 1 to 65535"},
		{name: "sentinel, port 0", url: "redis+sentinel://s1:26379,s2:0/m", wantErr: "port must be a number from 1 to 65535"},
		{name: "sentinel, empty address in the list", url: "redis+sentinel://s1:26379,/m", wantErr: "address 2 of the list is empty"},
		{name: "cluster, port above 65535", url: "redis+cluster://h1:7000,h2:70000", wantErr: "port must be a number from 1 to 65535"},
		{name: "cluster, empty address in the list", url: "redis+cluster://,h1:7000", wantErr: "address 1 of the list is empty"},
		{name: "addr form, port above 65535", url: "redis://h1:7000?addr=h2:99999", wantErr: "port must be a number from 1 to 65535"},
		{name: "one server, port above 65535", url: "redis://127.0.0.1:99999/0", wantErr: "port must be a number from 1 to 65535"},
		{name: "one server, port 0", url: "rediss://h:0", wantErr: "port must be a number from 1 to 65535"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := redisurl.Parse(tt.url)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) error = %v, want one containing %q", tt.url, err, tt.wantErr)
				}
				if !errors.Is(err, redisurl.ErrBadURL) {
					t.Fatalf("Parse(%q) error %v is not ErrBadURL", tt.url, err)
				}
				if strings.Contains(tt.url, ":p@") && strings.Contains(err.Error(), ":p@") {
					t.Fatalf("error %q shows the password", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.url, err)
			}
			if cfg.TLS() != tt.tls {
				t.Fatalf("Parse(%q).TLS() = %v, want %v", tt.url, cfg.TLS(), tt.tls)
			}
			if tt.sentinels != nil {
				if cfg.Kind != redisurl.Sentinel {
					t.Fatalf("Parse(%q).Kind = %v, want sentinel", tt.url, cfg.Kind)
				}
				f := cfg.Failover
				if !reflect.DeepEqual(f.SentinelAddrs, tt.sentinels) || f.MasterName != tt.master || f.DB != tt.db {
					t.Fatalf("sentinels %v master %q db %d, want %v %q %d", f.SentinelAddrs, f.MasterName, f.DB, tt.sentinels, tt.master, tt.db)
				}
				if f.Username != tt.user || f.Password != tt.pass || f.SentinelUsername != "" || f.SentinelPassword != "" {
					t.Fatalf("user %q password %q sentinel %q %q, want %q %q and none for the sentinels", f.Username, f.Password, f.SentinelUsername, f.SentinelPassword, tt.user, tt.pass)
				}
				if f.TLSConfig != nil && f.TLSConfig.ServerName != "" {
					t.Fatalf("TLS server name %q: each address should be checked by its own name", f.TLSConfig.ServerName)
				}
				return
			}
			c := cfg.NewClient()
			defer c.Close()
			var user, pass string
			var tls bool
			switch cl := c.(type) {
			case *redis.Client:
				if tt.cluster != nil {
					t.Fatalf("Parse(%q) = single server %s, want a cluster of %v", tt.url, cl.Options().Addr, tt.cluster)
				}
				o := cl.Options()
				if o.Addr != tt.single || o.DB != tt.db {
					t.Fatalf("addr %s db %d, want %s db %d", o.Addr, o.DB, tt.single, tt.db)
				}
				user, pass, tls = o.Username, o.Password, o.TLSConfig != nil
			case *redis.ClusterClient:
				if tt.cluster == nil {
					t.Fatalf("Parse(%q) = cluster %v, want the single server %s", tt.url, cl.Options().Addrs, tt.single)
				}
				o := cl.Options()
				if !reflect.DeepEqual(o.Addrs, tt.cluster) {
					t.Fatalf("seeds %v, want %v", o.Addrs, tt.cluster)
				}
				if o.ClusterStateReloadInterval != redisurl.ClusterStateReloadInterval {
					t.Fatalf("ClusterStateReloadInterval %v, want %v", o.ClusterStateReloadInterval, redisurl.ClusterStateReloadInterval)
				}
				user, pass, tls = o.Username, o.Password, o.TLSConfig != nil
			default:
				t.Fatalf("Parse(%q).NewClient() = %T", tt.url, c)
			}
			if user != tt.user || pass != tt.pass || tls != tt.tls {
				t.Fatalf("user %q password %q TLS %v, want %q %q %v", user, pass, tls, tt.user, tt.pass, tt.tls)
			}
		})
	}
}

func TestTLSFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notPEM := write("not.pem", "hello")
	tests := []struct {
		name    string
		url     string
		files   redisurl.TLSFiles
		wantErr string
	}{
		{name: "no files, plain", url: "redis://h:1"},
		{name: "no files, TLS: the system's roots", url: "rediss://h:1"},
		{name: "files for a plain URL", url: "redis://h:1", files: redisurl.TLSFiles{CA: notPEM}, wantErr: "not rediss://"},
		{name: "files for a plain cluster", url: "redis+cluster://h:1,h:2", files: redisurl.TLSFiles{CA: notPEM}, wantErr: "not rediss://"},
		{name: "files for a plain sentinel set", url: "redis+sentinel://h:1/m", files: redisurl.TLSFiles{CA: notPEM}, wantErr: "not rediss://"},
		{name: "missing CA file", url: "rediss://h:1", files: redisurl.TLSFiles{CA: dir + "/none"}, wantErr: "CA file"},
		{name: "CA not PEM", url: "rediss+sentinel://h:1/m", files: redisurl.TLSFiles{CA: notPEM}, wantErr: "no PEM certificate"},
		{name: "certificate without key", url: "rediss://h:1", files: redisurl.TLSFiles{Cert: notPEM}, wantErr: "both the certificate and its key"},
		{name: "key without certificate", url: "rediss://h:1", files: redisurl.TLSFiles{Key: notPEM}, wantErr: "both the certificate and its key"},
		{name: "certificate not PEM", url: "rediss+cluster://h:1", files: redisurl.TLSFiles{Cert: notPEM, Key: notPEM}, wantErr: "client certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := redisurl.New(tt.url, tt.files)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				c.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, redisurl.ErrTLSFiles) {
				t.Fatalf("New(%q, %+v) = %v, want ErrTLSFiles with %q", tt.url, tt.files, err, tt.wantErr)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://h:1/0":                      "redis://h:1/0",
		"redis://u:p@h:1/0":                  "redis://***@h:1/0",
		"redis+sentinel://u:a@b@s1:1,s2:2/m": "redis+sentinel://***@s1:1,s2:2/m",
		"redis+sentinel://s1:1/m?sentinel_username=s&sentinel_password=x@y&dial_timeout=1s": "redis+sentinel://s1:1/m?sentinel_username=s&sentinel_password=***&dial_timeout=1s",
		"rediss+sentinel://u:p@s1:1/m/0?sentinel_password=sec":                              "rediss+sentinel://***@s1:1/m/0?sentinel_password=***",
		"redis://h:1/0?password=a&password=b":                                               "redis://h:1/0?password=***&password=***",
	} {
		if got := redisurl.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// PlainTextAt names the first address where a plain-text server answers:
// one that closes at once (as a TLS server does on a PING) does not count.
func TestPlainTextAt(t *testing.T) {
	listen := func(answer string) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = c.Read(make([]byte, 64))
				_, _ = c.Write([]byte(answer))
				c.Close()
			}
		}()
		return ln.Addr().String()
	}
	closing, alert, plain := listen(""), listen("\x15\x03\x03\x00\x02\x02\x0a"), listen("+PONG\r\n")
	ctx := context.Background()
	if got := redisurl.PlainTextAt(ctx, []string{closing, alert, plain}); got != plain {
		t.Fatalf("PlainTextAt = %q, want %q", got, plain)
	}
	if got := redisurl.PlainTextAt(ctx, []string{closing, alert, "127.0.0.1:1"}); got != "" {
		t.Fatalf("PlainTextAt = %q with no plain-text server", got)
	}
}
