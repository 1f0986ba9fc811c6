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

// The durability check. Everything the coordinator holds lives in Redis keys
// (the log, its snapshots and history index, the token secret), and a server
// whose maxmemory-policy may evict them drops the log under memory pressure
// while the coordinator goes on serving. CheckDurability reads each master's
// maxmemory-policy and persistence from INFO (which answers where CONFIG is
// renamed). Every policy but noeviction evicts; a volatile-* policy evicts
// only keys with a time to live, so under one it also reads whether any of
// the coordinator's keys has one, cheaply and within a bound: INFO keyspace
// first (a database where no key has a time to live needs nothing more),
// then PTTL of at most MaxTTLChecks of the keys.

// MaxTTLChecks bounds the keys one CheckDurability reads the time to live of.
const MaxTTLChecks = 1024

// Persistence of the server that holds the log, as CheckDurability reads it.
const (
	PersistenceAOF     = "aof"     // appendonly yes
	PersistenceRDB     = "rdb"     // save points
	PersistenceBoth    = "aof+rdb" // both
	PersistenceOff     = "off"     // neither: a restart loses every key
	PersistenceUnknown = "unknown" // AOF off and CONFIG GET save refused
)

// Durability is what the masters holding the coordinator's keys say about
// keeping them.
type Durability struct {
	// Policy is the maxmemory-policy of the master that can evict the keys
	// (Node, "" for one server), or of the one holding the log when none
	// can.
	Policy string
	Node   string
	// Evicts reports that a master's policy can evict the coordinator's
	// keys; Why says how, naming maxmemory-policy.
	Evicts bool
	Why    string
	// Persistence is that of the master holding the log (Persistence*).
	Persistence string
}

// nodeDurability is one master's answer.
type nodeDurability struct {
	addr        string
	policy      string
	expires     int64 // keys with a time to live in the database (every database of a cluster node)
	persistence string
}

// CheckDurability reads the maxmemory-policy and persistence of the server
// behind rdb (of every master of a Redis Cluster; the persistence of the one
// holding logKey), and under a volatile-* policy whether any of keys (the
// coordinator's; at most MaxTTLChecks are read) has a time to live.
func CheckDurability(ctx context.Context, rdb redis.UniversalClient, logKey string, keys func(ctx context.Context) ([]string, error)) (Durability, error) {
	var nodes []nodeDurability
	logNode := ""
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		var mu sync.Mutex
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			d, err := readDurability(ctx, n, -1)
			d.addr = n.Options().Addr
			mu.Lock()
			defer mu.Unlock()
			nodes = append(nodes, d)
			return err
		})
		if err != nil {
			return Durability{}, err
		}
		m, err := c.MasterForKey(ctx, logKey)
		if err != nil {
			return Durability{}, fmt.Errorf("find the master of %s: %w", logKey, err)
		}
		logNode = m.Options().Addr
	case *redis.Client:
		d, err := readDurability(ctx, c, c.Options().DB)
		if err != nil {
			return Durability{}, err
		}
		nodes = append(nodes, d)
	default:
		return Durability{}, fmt.Errorf("%w: client %T", ErrUnsupportedEngine, rdb)
	}
	var out Durability
	volatile := false
	for _, n := range nodes {
		if n.addr == logNode {
			out.Policy, out.Node, out.Persistence = n.policy, n.addr, n.persistence
		}
		switch {
		case n.policy == "noeviction":
		case strings.HasPrefix(n.policy, "volatile-"):
			volatile = volatile || n.expires > 0
		default:
			out.Policy, out.Node, out.Evicts = n.policy, n.addr, true
			out.Why = fmt.Sprintf("maxmemory-policy %s%s evicts any key under memory pressure, the coordinator's event log included", n.policy, at(n.addr))
			return out, nil
		}
	}
	if !volatile {
		return out, nil
	}
	// A volatile-* policy, and some key of a database has a time to live:
	// whether it is one of the coordinator's.
	ks, err := keys(ctx)
	if err != nil {
		return out, err
	}
	if len(ks) > MaxTTLChecks {
		ks = ks[:MaxTTLChecks]
	}
	ttls, err := expiring(ctx, rdb, ks)
	if err != nil {
		return out, err
	}
	for i, has := range ttls {
		if has {
			for _, n := range nodes {
				if strings.HasPrefix(n.policy, "volatile-") {
					out.Policy, out.Node = n.policy, n.addr
					break
				}
			}
			out.Evicts = true
			out.Why = fmt.Sprintf("maxmemory-policy %s%s evicts keys with a time to live under memory pressure, and the coordinator's key %s has one (PERSIST it, or set maxmemory-policy noeviction)", out.Policy, at(out.Node), ks[i])
			return out, nil
		}
	}
	return out, nil
}

func at(addr string) string {
	if addr == "" {
		return ""
	}
	return " on " + addr
}

// readDurability reads one server's INFO memory, persistence and keyspace,
// and its save points (CONFIG GET save, when it answers). db is the
// database whose keys count (-1: every one).
func readDurability(ctx context.Context, c *redis.Client, db int) (nodeDurability, error) {
	info, err := c.Info(ctx, "memory", "persistence", "keyspace").Result()
	if err != nil {
		return nodeDurability{}, err
	}
	d := nodeDurability{policy: InfoField(info, "maxmemory_policy")}
	if d.policy == "" {
		return d, fmt.Errorf("%w: INFO memory has no maxmemory_policy", ErrUnsupportedEngine)
	}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "db") {
			continue
		}
		if n, err := strconv.Atoi(name[2:]); err != nil || (db >= 0 && n != db) {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "expires="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				d.expires += n
			}
		}
	}
	aof := InfoField(info, "aof_enabled") == "1"
	rdb := PersistenceUnknown
	if cfg, err := c.ConfigGet(ctx, "save").Result(); err == nil {
		rdb = PersistenceOff
		if strings.TrimSpace(cfg["save"]) != "" {
			rdb = PersistenceRDB
		}
	} else {
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			return d, err
		}
	}
	switch {
	case aof && rdb == PersistenceRDB:
		d.persistence = PersistenceBoth
	case aof:
		d.persistence = PersistenceAOF
	default:
		d.persistence = rdb
	}
	return d, nil
}

// expiring reads whether each key has a time to live (PTTL, pipelined: a
// cluster client splits the pipeline by node).
func expiring(ctx context.Context, rdb redis.UniversalClient, keys []string) ([]bool, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.PTTL(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the time to live of the coordinator's keys: %w", err)
	}
	out := make([]bool, len(keys))
	for i, c := range cmds {
		out[i] = c.Val() > 0 // -1: none, -2: no such key
	}
	return out, nil
}
