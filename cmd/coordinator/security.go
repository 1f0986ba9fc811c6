package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/redisstore"
)

// Secure defaults and their escape hatches: who may reach the port with the
// default password, whether members must authenticate, which secret signs
// bearer tokens, and the users file kept in step with the disk.

// defaultAdminPassword is the contract's default admin password (public).
const defaultAdminPassword = "password"

// usersPollInterval is how often the users file's modification time and size
// are checked (SIGHUP reloads it at once).
const usersPollInterval = 2 * time.Second

// tokenSecretWait bounds how long start-up waits for Redis to hand out the
// token secret (with --users-file and no --token-secret).
const tokenSecretWait = 10 * time.Second

// checkExposure refuses the default admin password on an address other hosts
// can reach: anyone there could log in as admin and mint tokens. A users
// file's ADMINs are checked once it is read (checkUsersExposure).
func (m *Main) checkExposure() error {
	if m.UsersFile != "" || !m.defaultPassword() || m.InsecureDefaultCredentials || loopbackListen(m.Listen) {
		return nil
	}
	return fmt.Errorf("--listen %s accepts connections from other hosts while the admin password is the default one: "+
		"set --admin-password (or --users-file), or listen on a loopback address (--listen 127.0.0.1:8080), "+
		"or, for a throwaway setup only, accept the risk with --insecure-default-credentials", m.Listen)
}

// exposedWithDefaults reports the combination --insecure-default-credentials
// lets through: a password anyone knows for an admin (users: the users file
// loaded) on an address other hosts can reach.
func (m *Main) exposedWithDefaults(users []httpapi.User) bool {
	if loopbackListen(m.Listen) {
		return false
	}
	if m.UsersFile != "" {
		return len(weakAdmins(users)) > 0
	}
	return m.defaultPassword()
}

// defaultPassword reports an admin password that is the default one: the
// default itself, or none at all (httpapi falls back to the default for an
// empty one, so an empty --admin-password is the password anyone knows).
func (m *Main) defaultPassword() bool {
	return m.AdminPassword == defaultAdminPassword || m.AdminPassword == ""
}

// loopbackListen reports a listen address only this host can reach: a
// loopback IP or "localhost". An empty host, 0.0.0.0 and :: are every interface.
func loopbackListen(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// memberAuth is the effective --authenticate-member-api.
func (m *Main) memberAuth() bool { return m.AuthenticateMembers && !m.AllowAnonymousMembers }

// warnInsecure logs what the escape hatches opened.
func (m *Main) warnInsecure(users []httpapi.User) {
	if !m.memberAuth() {
		m.logger.Warn().Msg("--allow-anonymous-members: heartbeats need no credentials; anyone who can reach the port can heartbeat as any member id (join, take shards, leave)")
	}
	if m.InsecureDefaultCredentials && m.exposedWithDefaults(users) {
		m.logger.Warn().Str("listen", m.Listen).Msg("INSECURE: --insecure-default-credentials: the default admin password is accepted on an address other hosts can reach; anyone there is admin and can sign tokens. Set --admin-password or --users-file")
	}
}

// resolveSecrets returns the HMAC secret of bearer tokens and the cluster
// secret that signs the principal assertions --ha replicas forward to the
// leader ("" without --ha).
//
// Tokens: --token-secret wins. With --users-file and none given, a random
// secret is kept in Redis next to the log, shared by every replica: the
// contract's derivation from the admin credentials would use an admin that
// is not even a user, with the default password anyone knows. Without
// --users-file, "" keeps that derivation (contract §1.3), a secret only as
// good as the admin password, which checkExposure refuses to leave at its
// default on a reachable address.
//
// Cluster: --token-secret when given, else the random secret kept in Redis
// (never the admin-derived one: a replica's assertion is worth any user).
func (m *Main) resolveSecrets(ctx context.Context) (token, cluster string, err error) {
	given := strings.TrimSpace(m.TokenSecret) != ""
	var kept string
	if !given && (m.UsersFile != "" || m.HA) {
		if kept, err = m.keptSecret(ctx); err != nil {
			return "", "", err
		}
		key, _ := redisstore.TokenSecretKey(m.LogStream) // keptSecret checked it
		m.secret = &secretKeeper{rdb: m.rdb, key: key, held: kept, log: m.logger}
	}
	token = m.TokenSecret
	if !given && m.UsersFile != "" {
		token = kept
		m.logger.Info().Msg("bearer tokens are signed with the secret kept in Redis (--users-file without --token-secret)")
	}
	if m.HA {
		cluster = m.TokenSecret
		if !given {
			cluster = kept
		}
	}
	return token, cluster, nil
}

// keptSecret is the random secret kept in Redis next to the log (made by the
// first replica that asks).
func (m *Main) keptSecret(ctx context.Context) (string, error) {
	key, err := redisstore.TokenSecretKey(m.LogStream)
	if err != nil {
		return "", fmt.Errorf("--log-stream: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, tokenSecretWait)
	defer cancel()
	backoff := 100 * time.Millisecond
	for {
		secret, err := redisstore.TokenSecret(ctx, m.rdb, m.LogStream)
		if err == nil {
			return secret, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("the token and cluster secret is kept in Redis at %s (--users-file or --ha without --token-secret), which did not answer in %s (give --token-secret, or make Redis reachable): %w", key, tokenSecretWait, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// DefaultRateLimitPerMinute is --rate-limit-per-minute's default: admin
// mutations per principal per minute, far above what an operator or a
// deployment tool sends, low enough that a loop cannot flood the log.
const DefaultRateLimitPerMinute = 1200

// hostPolicy is the Host check: on with a loopback --listen or --allowed-hosts.
// The host of --advertise-url is allowed too: the other replicas forward to
// this one under it.
func (m *Main) hostPolicy() httpapi.HostPolicy {
	allowed := splitList(m.AllowedHosts)
	restrict := loopbackListen(m.Listen) || len(allowed) > 0
	if u, err := url.Parse(m.AdvertiseURL); err == nil && u.Hostname() != "" {
		allowed = append(allowed, u.Hostname())
	}
	return httpapi.HostPolicy{Restrict: restrict, Allowed: allowed}
}

// checkAllowedHosts refuses an --allowed-hosts entry that is not a host name
// or address (a port, a scheme or a path is a mistake).
func checkAllowedHosts(list string) error {
	for _, h := range splitList(list) {
		name := strings.TrimPrefix(h, ".")
		if name == "" || strings.ContainsAny(name, ":/ @*") && net.ParseIP(strings.Trim(name, "[]")) == nil {
			return fmt.Errorf("--allowed-hosts: %q is not a host name or address (no scheme, port or path; a leading '.' allows subdomains)", h)
		}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// readUsers reads and checks a users file: a JSON array of at least one user,
// each named once, with a real password and known roles, each scope
// (prefixes, groups) valid when given (checkUser).
func readUsers(path string) ([]httpapi.User, []byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var users []httpapi.User
	if err := json.Unmarshal(data, &users); err != nil {
		return nil, nil, err
	}
	if len(users) == 0 {
		return nil, nil, errors.New("no users: nobody could log in")
	}
	seen := map[string]bool{}
	for i, u := range users {
		if strings.TrimSpace(u.Username) == "" {
			return nil, nil, fmt.Errorf("user %d has no username", i)
		}
		if seen[u.Username] {
			return nil, nil, fmt.Errorf("user %q is listed twice", u.Username)
		}
		seen[u.Username] = true
		if err := checkUser(u); err != nil {
			return nil, nil, err
		}
	}
	return users, data, nil
}

// usersWatcher keeps the server's users in step with --users-file: it reloads
// the file when its modification time or size changes (polled) and on
// SIGHUP. A file that does not parse keeps the users loaded before.
type usersWatcher struct {
	path  string
	apply func([]httpapi.User)
	// check refuses a file the start would have refused (nil: none).
	check  func([]httpapi.User) error
	log    zerolog.Logger
	loaded []byte // the content applied last
	stamp  fileStamp
}

type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// watchSIGHUP starts catching SIGHUP for run (before run starts, so that a
// SIGHUP sent once start-up returned cannot end the process).
func watchSIGHUP() chan os.Signal {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup
}

// run polls every interval and reloads on every signal of hup until ctx ends.
func (w *usersWatcher) run(ctx context.Context, interval time.Duration, hup chan os.Signal) {
	defer signal.Stop(hup)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			w.reload(true)
		case <-t.C:
			w.reload(false)
		}
	}
}

// reload reads the file when it changed (or when forced) and applies it.
func (w *usersWatcher) reload(force bool) {
	st, err := stampOf(w.path)
	if err != nil {
		if force || st != w.stamp {
			w.log.Error().Err(err).Str("file", w.path).Msg("users file not reloaded; keeping the users loaded before")
		}
		w.stamp = fileStamp{}
		return
	}
	if !force && st == w.stamp {
		return
	}
	w.stamp = st
	users, data, err := readUsers(w.path)
	if err == nil && w.check != nil {
		err = w.check(users)
	}
	if err != nil {
		w.log.Error().Err(err).Str("file", w.path).Msg("users file not reloaded; keeping the users loaded before")
		return
	}
	if bytes.Equal(data, w.loaded) {
		return
	}
	w.apply(users)
	w.loaded = data
	w.log.Info().Str("file", w.path).Int("users", len(users)).Msg("users file reloaded")
}
