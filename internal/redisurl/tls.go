package redisurl

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

// maxPEMBytes bounds a CA, certificate or key file: a real one is a few KiB,
// a bundle of public roots about 200 KiB.
const maxPEMBytes = 4 << 20

// LoadTLS builds the TLS configuration of rediss connections from PEM files:
// the CA (or bundle) that must have signed the servers' certificates (empty:
// the system's roots), and the client certificate and key, both or neither.
// TLS 1.2 at least; the server name each connection checks is the host it
// dials.
func LoadTLS(files TLSFiles) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if files.CA != "" {
		pem, err := readPEM(files.CA, "CA")
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrTLSFiles, files.CA)
		}
		cfg.RootCAs = pool
	}
	switch {
	case files.Cert != "" && files.Key != "":
		cert, err := readPEM(files.Cert, "certificate")
		if err != nil {
			return nil, err
		}
		key, err := readPEM(files.Key, "key")
		if err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate %s and key %s: %v", ErrTLSFiles, files.Cert, files.Key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	case files.Cert != "" || files.Key != "":
		return nil, fmt.Errorf("%w: a client certificate needs both the certificate and its key", ErrTLSFiles)
	}
	return cfg, nil
}

func readPEM(path, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s file: %v", ErrTLSFiles, what, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPEMBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s file %s: %v", ErrTLSFiles, what, path, err)
	}
	if len(data) > maxPEMBytes {
		return nil, fmt.Errorf("%w: %s file %s is larger than %d bytes", ErrTLSFiles, what, path, maxPEMBytes)
	}
	return data, nil
}

// TLSFailure explains an error that a TLS handshake with a Redis server ended
// in, or returns "" for any other error: a certificate this side does not
// trust (the CA is wrong or missing), a name it does not carry, a server that
// refused this side's certificate (or wants one), or a server that does not
// speak TLS at all. None of them gets better by retrying.
func TLSFailure(err error) string {
	var (
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		verify    *tls.CertificateVerificationError
		header    tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &unknownCA):
		return "the Redis server's certificate is signed by an authority this side does not trust (check --redis-tls-ca)"
	case errors.As(err, &hostname):
		return "the Redis server's certificate does not carry the name or address dialled (" + hostname.Host + ")"
	case errors.As(err, &invalid):
		return "the Redis server's certificate is not valid here (expired, not yet valid, or not for a server)"
	case errors.As(err, &verify):
		return "the Redis server's certificate could not be verified"
	case errors.As(err, &header):
		return "the Redis server did not answer in TLS: is the port a TLS port (use redis:// for a plain one)?"
	}
	// The server's alerts reach the client after the handshake (TLS 1.3), on
	// the first read, and go-redis passes them on as text.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "tls: certificate required"):
		return "the Redis server requires a client certificate (--redis-tls-cert, --redis-tls-key)"
	case strings.Contains(msg, "tls: bad certificate"), strings.Contains(msg, "tls: unknown certificate authority"),
		strings.Contains(msg, "tls: unknown certificate"), strings.Contains(msg, "tls: certificate expired"):
		return "the Redis server refused this side's client certificate (" + msg + "): is it signed by a CA the server trusts?"
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return "the Redis server did not answer in TLS: is the port a TLS port (use redis:// for a plain one)?"
	case strings.Contains(msg, "tls: ") && strings.Contains(msg, "certificate"):
		return "the TLS handshake with the Redis server failed over a certificate (" + msg + ")"
	}
	return ""
}

// plainProbeWait bounds the plain-text probe of one address.
const plainProbeWait = time.Second

// PlainTextAt returns the first of addrs where a server answers a plain-text
// PING with a RESP reply, or "" when none does. Behind a rediss URL such an
// address is a plain port, which TLSFailure cannot tell: Redis takes a TLS
// ClientHello for the start of an inline command and waits for the rest of
// it, so the handshake neither fails nor ends, and the server looks like one
// that does not answer yet.
func PlainTextAt(ctx context.Context, addrs []string) string {
	for _, a := range addrs {
		if answersPlain(ctx, a) {
			return a
		}
	}
	return ""
}

func answersPlain(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, plainProbeWait)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	first := make([]byte, 1)
	if _, err := io.ReadFull(conn, first); err != nil {
		return false
	}
	// A RESP simple string (+PONG) or error (-NOAUTH ...); a TLS server
	// answers with an alert record (0x15) or closes.
	return first[0] == '+' || first[0] == '-'
}
