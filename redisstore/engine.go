package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// The engine check. The coordinator runs on Redis 7.0 and later and on Valkey
// (which reports itself as Redis 7.2): the drain proof reads the lag and
// entries-read fields of XINFO GROUPS (Redis 7.0), provisioning creates groups
// with ENTRIESREAD (7.0), members claim with XAUTOCLAIM and producers publish
// with XADD NOMKSTREAM (6.2), and every decision is a Lua script. CheckEngine
// reads each server's INFO and asks COMMAND INFO for these commands, so a
// server that lacks one (too old, or a managed service that renamed or
// disabled it) is refused at start with what is missing, instead of failing
// the first drain.

// MinRedisVersion is the oldest Redis (and Valkey's redis_version) accepted.
const MinRedisVersion = "7.0.0"

// neededCommands are the commands the coordinator and the SDK call.
var neededCommands = []string{"xadd", "xinfo", "xgroup", "xautoclaim", "xreadgroup", "xtrim", "xrange", "xdel", "evalsha", "eval", "wait"}

// ErrUnsupportedEngine: a server cannot run the coordinator (see CheckEngine).
var ErrUnsupportedEngine = errors.New("unsupported Redis server")

// Engine is what one server says about itself.
type Engine struct {
	Addr     string // host:port as the client reaches it ("" for one server)
	Name     string // "redis" or "valkey"
	Version  string // the engine's own version (valkey_version for Valkey)
	Redis    string // redis_version: the Redis version it is compatible with
	Mode     string // redis_mode (Valkey: server_mode): standalone, cluster or sentinel
	Role     string // master or slave
	Replicas int    // connected replicas
}

func (e Engine) String() string {
	s := e.Name + " " + e.Version
	if e.Addr != "" {
		s = e.Addr + " " + s
	}
	return s
}

// EngineReport is CheckEngine's answer: every master's Engine (the log's node
// first) and what deserves a warning but does not stop the coordinator.
type EngineReport struct {
	Engines  []Engine
	Warnings []string
}

// CheckEngine checks the server behind rdb (every master of a Redis Cluster)
// for what the coordinator needs, and that the node holding logKey has at
// least replicas connected replicas (a warning only: they may connect later,
// and until then appends fail). It returns ErrUnsupportedEngine for a server
// that cannot work, and the client's error when a server cannot be reached or
// refuses the connection (TLS, credentials).
func CheckEngine(ctx context.Context, rdb redis.UniversalClient, logKey string, replicas int) (EngineReport, error) {
	var rep EngineReport
	check := func(ctx context.Context, c *redis.Client, addr string) (Engine, []string, error) {
		e, err := readEngine(ctx, c)
		if err != nil {
			return e, nil, err
		}
		e.Addr = addr
		warns, err := checkCommands(ctx, c, e)
		return e, warns, err
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			e, warns, err := check(ctx, n, n.Options().Addr)
			mu.Lock()
			defer mu.Unlock()
			rep.Engines = append(rep.Engines, e)
			rep.Warnings = append(rep.Warnings, warns...)
			return err
		})
		if err != nil {
			return rep, err
		}
		node, err := c.MasterForKey(ctx, logKey)
		if err != nil {
			return rep, fmt.Errorf("find the master of %s: %w", logKey, err)
		}
		for i, e := range rep.Engines {
			if e.Addr == node.Options().Addr {
				rep.Engines[0], rep.Engines[i] = rep.Engines[i], rep.Engines[0]
			}
		}
	case *redis.Client:
		e, warns, err := check(ctx, c, "")
		rep.Engines = append(rep.Engines, e)
		rep.Warnings = append(rep.Warnings, warns...)
		if err != nil {
			return rep, err
		}
	default:
		return rep, fmt.Errorf("%w: client %T", ErrUnsupportedEngine, rdb)
	}
	for _, e := range rep.Engines {
		if e.Role != "master" {
			return rep, fmt.Errorf("%w: %s is a %s (read-only): point --redis at the primary, or at the sentinels with redis+sentinel://", ErrUnsupportedEngine, e, e.Role)
		}
	}
	if replicas > 0 && len(rep.Engines) > 0 && rep.Engines[0].Replicas < replicas {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf("%s holds the log and has %d connected replicas, fewer than --log-replicas %d: every decision fails (503) until enough replicas are connected", rep.Engines[0], rep.Engines[0].Replicas, replicas))
	}
	return rep, nil
}

// readEngine reads INFO server and INFO replication.
func readEngine(ctx context.Context, c *redis.Client) (Engine, error) {
	info, err := c.Info(ctx, "server", "replication").Result()
	if err != nil {
		return Engine{}, err
	}
	e := Engine{
		Name:    InfoField(info, "server_name"),
		Version: InfoField(info, "valkey_version"),
		Redis:   InfoField(info, "redis_version"),
		Mode:    InfoField(info, "redis_mode"),
		Role:    InfoField(info, "role"),
	}
	if e.Mode == "" {
		e.Mode = InfoField(info, "server_mode") // Valkey's name for it
	}
	e.Replicas, _ = strconv.Atoi(InfoField(info, "connected_slaves"))
	if e.Name == "" {
		e.Name = "redis"
	}
	if e.Version == "" {
		e.Version = e.Redis
	}
	if e.Redis == "" {
		return e, fmt.Errorf("%w: INFO server has no redis_version", ErrUnsupportedEngine)
	}
	if older(e.Redis, MinRedisVersion) {
		return e, fmt.Errorf("%w: %s speaks Redis %s, older than %s: XINFO GROUPS has no lag or entries-read, which the drain proof needs", ErrUnsupportedEngine, e, e.Redis, MinRedisVersion)
	}
	if e.Mode == "sentinel" {
		return e, fmt.Errorf("%w: %s is a Sentinel, not a data node: use redis+sentinel://<sentinels>/<master-name>", ErrUnsupportedEngine, e)
	}
	return e, nil
}

// checkCommands asks COMMAND INFO for every needed command and runs a trivial
// script. A server that refuses COMMAND (some managed services) is a warning.
func checkCommands(ctx context.Context, c *redis.Client, e Engine) ([]string, error) {
	args := []any{"COMMAND", "INFO"}
	for _, name := range neededCommands {
		args = append(args, name)
	}
	var warns []string
	res, err := c.Do(ctx, args...).Slice()
	if err != nil {
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			return nil, err
		}
		warns = append(warns, fmt.Sprintf("%s: COMMAND INFO is refused (%v): the commands the coordinator needs are not checked", e, err))
	} else {
		var missing []string
		for i, r := range res {
			if r == nil && i < len(neededCommands) {
				missing = append(missing, strings.ToUpper(neededCommands[i]))
			}
		}
		if len(missing) > 0 {
			return warns, fmt.Errorf("%w: %s lacks %s (renamed or disabled?)", ErrUnsupportedEngine, e, strings.Join(missing, ", "))
		}
	}
	if err := c.Eval(ctx, "return 1", nil).Err(); err != nil {
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			return warns, err
		}
		return warns, fmt.Errorf("%w: %s does not run Lua scripts (%v): every decision is a script", ErrUnsupportedEngine, e, err)
	}
	return warns, nil
}

// older reports whether the dotted version a is below b (missing parts are 0;
// a part that is not a number compares as 0).
func older(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(pa) || i < len(pb); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// InfoField returns a field of an INFO (or CLUSTER INFO) reply ("" when it
// has none).
func InfoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
