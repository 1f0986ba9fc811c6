package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/internal/redistest"
)

// runErr parses args and runs the coordinator, expecting Run to fail; it
// returns the error.
func runErr(t *testing.T, args ...string) error {
	t.Helper()
	m := NewMain()
	m.Stderr = io.Discard
	if err := m.ParseFlags(append([]string{"--listen", "127.0.0.1:0"}, args...)); err != nil {
		return err
	}
	err := m.Run(context.Background())
	_ = m.Close()
	if err == nil {
		t.Fatalf("coordinator %v started, want it refused", args)
	}
	return err
}

// The coordinator runs on a TLS-only Redis that requires client certificates
// (rediss:// with --redis-tls-ca, --redis-tls-cert, --redis-tls-key): it
// decides, provisions shard streams and reads drain evidence over TLS. A CA
// that did not sign the server's certificate, a missing client certificate
// and TLS files for a plain URL stop it at start with what is wrong.
func TestIntegrationRedisTLS(t *testing.T) {
	parallel(t)
	certs := redistest.NewTLSCerts(t)
	rs := redistest.StartProcess(t, redistest.WithTLS(certs, true))
	tlsFlags := []string{"--redis-tls-ca", certs.CA, "--redis-tls-cert", certs.ClientCert, "--redis-tls-key", certs.ClientKey}
	tc := startOnURL(t, rs.URL(), tlsFlags...)
	createGroup(t, tc, "tls", "g", 3)
	rdb := rs.Client(t)
	eventually(t, 10*time.Second, "the shard streams provisioned over TLS", func() bool {
		n, err := rdb.Exists(context.Background(), "tls:0", "tls:1", "tls:2").Result()
		return err == nil && n == 3
	})
	id := scale(t, tc, "tls", "g", 1)
	waitState(t, tc, "tls", "g", id, "DEPRECATED", 30*time.Second)

	other := redistest.NewTLSCerts(t)
	err := runErr(t, "--redis", rs.URL(), "--redis-tls-ca", other.CA, "--redis-tls-cert", certs.ClientCert, "--redis-tls-key", certs.ClientKey)
	if !strings.Contains(err.Error(), "authority this side does not trust") || !strings.Contains(err.Error(), "--redis-tls-ca") {
		t.Errorf("with another CA: %v, want the unknown authority named", err)
	}
	err = runErr(t, "--redis", rs.URL(), "--redis-tls-ca", certs.CA)
	if !strings.Contains(err.Error(), "client certificate") {
		t.Errorf("without a client certificate: %v, want it asked for", err)
	}
	err = runErr(t, "--redis", strings.Replace(rs.URL(), "rediss://", "redis://", 1), "--redis-tls-ca", certs.CA)
	if !strings.Contains(err.Error(), "not rediss://") {
		t.Errorf("TLS files with redis://: %v, want refused", err)
	}
	err = runErr(t, "--redis", rs.URL(), "--redis-tls-cert", certs.ClientCert)
	if !strings.Contains(err.Error(), "both the certificate and its key") {
		t.Errorf("a certificate without its key: %v", err)
	}
	// A plain port behind rediss:// never answers the handshake (Redis waits
	// for the end of the inline command it takes the ClientHello for).
	plain := redistest.StartProcess(t)
	err = runErr(t, "--redis", strings.Replace(plain.URL(), "redis://", "rediss://", 1), "--redis-tls-ca", certs.CA)
	if !strings.Contains(err.Error(), "answers in plain text") || !strings.Contains(err.Error(), plain.Addr()) {
		t.Errorf("a plain port behind rediss://: %v, want it named", err)
	}
}

// A server that cannot run the coordinator stops it at start with the reason.
func TestIntegrationUnsupportedRedisRefusedAtStart(t *testing.T) {
	parallel(t)
	rs := redistest.StartProcess(t, redistest.WithArgs("--rename-command", "XAUTOCLAIM", ""))
	err := runErr(t, "--redis", rs.URL())
	if !strings.Contains(err.Error(), "cannot run the coordinator") || !strings.Contains(err.Error(), "XAUTOCLAIM") {
		t.Fatalf("on a Redis without XAUTOCLAIM: %v", err)
	}
	// Below the read timeout only: WAIT and the append share one round trip.
	plain := redistest.StartProcess(t)
	err = runErr(t, "--redis", plain.URL()+"?read_timeout=1s", "--log-replicas", "1", "--log-replicas-timeout", "2s")
	if !strings.Contains(err.Error(), "--log-replicas") || !strings.Contains(err.Error(), "read timeout") {
		t.Fatalf("--log-replicas-timeout above read_timeout: %v", err)
	}
}

// A redis+sentinel URL that names a Redis server instead of a sentinel, or a
// master name no sentinel monitors, stops the coordinator at start with
// what is wrong (go-redis reports both as sentinels that are unreachable).
func TestIntegrationSentinelURLMistakesRefusedAtStart(t *testing.T) {
	parallel(t)
	ss := redistest.StartSentinel(t, 0, 1)
	sentinel := ss.Sentinels()[0].Addr()
	err := runErr(t, "--redis", "redis+sentinel://"+sentinel+"/no-such-primary")
	if !strings.Contains(err.Error(), `no sentinel monitors a primary named "no-such-primary"`) {
		t.Errorf("an unknown master name: %v", err)
	}
	server := ss.Primary(t).Addr()
	err = runErr(t, "--redis", "redis+sentinel://"+sentinel+","+server+"/"+redistest.SentinelMaster+"x")
	if !strings.Contains(err.Error(), server+" is a Redis server, not a sentinel") {
		t.Errorf("a Redis server given as a sentinel: %v", err)
	}
	// The same over TLS, with the CA of --redis-tls-ca.
	certs := redistest.NewTLSCerts(t)
	tlsSet := redistest.StartSentinel(t, 0, 1, redistest.WithTLS(certs, false))
	tlsURL := strings.Replace(tlsSet.URL(), "/"+redistest.SentinelMaster, "/no-such-primary", 1)
	err = runErr(t, "--redis", tlsURL, "--redis-tls-ca", certs.CA)
	if !strings.Contains(err.Error(), `no sentinel monitors a primary named "no-such-primary"`) {
		t.Errorf("an unknown master name, over TLS: %v", err)
	}
	// A sentinel that wants a password of its own, given none.
	if err := ss.Sentinels()[0].Client(t).Do(context.Background(), "ACL", "SETUSER", "default", "on", ">sentinel-secret").Err(); err != nil {
		t.Fatal(err)
	}
	err = runErr(t, "--redis", "redis+sentinel://"+sentinel+"/"+redistest.SentinelMaster)
	if !strings.Contains(err.Error(), "the sentinels refused the credentials") {
		t.Errorf("a sentinel that wants a password: %v", err)
	}
}
