package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/internal/redisurl"
	"github.com/rscoord/rsc/metrics"
	"github.com/rscoord/rsc/redisstore"
)

var errHelp = errors.New("help requested")

// Main is the coordinator program: ParseFlags, Run, Close. End-to-end tests run it
// in-process on port 0.
type Main struct {
	Listen              string
	RedisURL            string
	LogStream           string
	AdminUser           string
	AdminPassword       string
	TokenSecret         string
	UsersFile           string
	AuthenticateMembers bool
	DefaultShardCount   int
	MaxShardCount       int
	// MaxMembersPerGroup bounds a group's member records; ShardCheckInterval
	// spaces the checks that recreate lost shard streams (negative: off).
	MaxMembersPerGroup int
	ShardCheckInterval time.Duration
	// MaxGroups and MaxTotalShards cap the groups and the shards (every
	// group's, and every stream's without groups) the coordinator manages.
	MaxGroups      int
	MaxTotalShards int
	// BarrierCheckInterval spaces the reads that release ordering barriers;
	// AutoscaleInterval the autoscaler's samples of autoscaled groups.
	BarrierCheckInterval time.Duration
	AutoscaleInterval    time.Duration
	HeartbeatInterval    time.Duration
	MemberLease          time.Duration
	RebalanceTimeout     time.Duration
	TickInterval         time.Duration
	StaleMemberRetention time.Duration
	DisableProvisioning  bool
	KeepRetiredStreams   bool
	// DedupLayoutWindow is how far back producer routing lists previous
	// layouts (0: none).
	DedupLayoutWindow time.Duration
	// IDMPDuration and IDMPMaxSize are the IDMP settings of the shard
	// streams on Redis 8.6 (idmp.go; 0 duration: from DedupLayoutWindow).
	IDMPDuration        time.Duration
	IDMPMaxSize         int
	SnapshotEvery       int
	SnapshotMinInterval time.Duration
	IgnoreSnapshot      bool
	RateLimitPerMinute  int
	// MemberChurnPerMinute and RejectionsPerMinute are the budgets on what
	// reaches the log (0: off).
	MemberChurnPerMinute int
	RejectionsPerMinute  int
	// Quotas per principal and per stream prefix (0: off), and how long a
	// group registered by heartbeat may stay empty (0: for ever).
	MaxGroupsPerPrincipal   int
	MaxShardsPerPrincipal   int
	MaxGroupsPerPrefix      int
	MaxShardsPerPrefix      int
	MaxMembersPerPrincipal  int
	PrincipalChurnPerMinute int
	EmptyGroupRetention     time.Duration
	// MetricsAuth requires a principal (READ, no scope) for /metrics;
	// MetricsMaxGroups bounds the groups with series of their own.
	MetricsAuth      bool
	MetricsMaxGroups int
	MetricsMaxShards int
	// AllowedHosts are Host names answered besides loopback ones; with a
	// loopback --listen (or any AllowedHosts) other Host headers are refused.
	AllowedHosts  string
	CoordinatorID string
	LogFormat     string
	LogLevel      string
	// Escape hatches from the secure defaults, and the token lifetime (security.go).
	AllowAnonymousMembers      bool // heartbeats without credentials (as --authenticate-member-api=false)
	InsecureDefaultCredentials bool // the default admin password on an address other hosts can reach
	TokenTTL                   time.Duration
	// CrashAfterEvent (test hook, env RSC_CRASH_AFTER_EVENT): exit the process with
	// status 137 right after an event of this type was appended.
	CrashAfterEvent string
	MetricsInterval time.Duration
	// HA makes this process one replica of several on the log (leader lease).
	HA           bool
	LeaderLease  time.Duration
	AdvertiseURL string
	// SnapshotKeep is how many snapshots are kept; TrimLog trims the log behind
	// the oldest of them after each snapshot (docs/operations.md, "Log growth").
	SnapshotKeep int
	TrimLog      bool
	// RedisTLS are the --redis-tls-* files; LogReplicas and LogReplicasTimeout
	// what every append waits for (redis.go).
	RedisTLS           redisurl.TLSFiles
	LogReplicas        int
	LogReplicasTimeout time.Duration
	// Held heartbeats (commands/hold.go): the longest hold, how many are
	// held at once in total and per principal, and the grace of a member
	// whose held heartbeat's connection closed.
	MaxHeartbeatHold              time.Duration
	MaxHeldHeartbeats             int
	MaxHeldHeartbeatsPerPrincipal int
	HeartbeatDropGrace            time.Duration
	// AllowRedisEviction accepts a Redis whose maxmemory-policy can evict
	// the log; RedisCheckInterval is how often the guard reads the policy
	// and checks the log for a loss (guard.go).
	AllowRedisEviction bool
	RedisCheckInterval time.Duration

	Stderr io.Writer
	logger zerolog.Logger
	rdb    redis.UniversalClient
	coord  *coordinator.Coordinator
	server *httpapi.Server
	cancel context.CancelFunc

	metrics *metrics.Metrics
	// usersPoll is how often --users-file is checked for changes, and clock
	// the clock of authentication (nil: time.Now); tests change both.
	usersPoll time.Duration
	clock     func() time.Time
	// secret keeps the token secret kept in Redis in place (nil: none is
	// kept; secret.go).
	secret *secretKeeper
	// coordClock, if set, is the decisions' clock (nil: the system clock);
	// tests step its wall clock apart from its monotonic one.
	coordClock coordinator.Clock
}

// MaxDedupLayoutWindow bounds --dedup-layout-window (a week: seven times
// the longest window the Go SDK's producers accept).
const MaxDedupLayoutWindow = 168 * time.Hour

// NewMain returns a Main with the defaults.
func NewMain() *Main { return &Main{Stderr: os.Stderr, usersPoll: usersPollInterval} }

// ParseFlags reads flags; every flag also reads the environment variable RSC_<NAME>
// (upper case, dashes as underscores) when the flag is not given.
func (m *Main) ParseFlags(args []string) error {
	fs := flag.NewFlagSet("coordinator", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.StringVar(&m.Listen, "listen", "127.0.0.1:8080", "HTTP listen address (an address other hosts can reach needs a non-default --admin-password or --users-file)")
	fs.StringVar(&m.RedisURL, "redis", "redis://127.0.0.1:6379/0", "Redis URL: redis://[user:pass@]host:port/db (rediss:// for TLS), a cluster: redis+cluster://h1:p1,h2:p2, or a primary watched by Sentinel: redis+sentinel://[user:pass@]s1:p1,s2:p2/<master-name>[/<db>]")
	m.redisFlags(fs)
	fs.StringVar(&m.LogStream, "log-stream", redisstore.DefaultLogStream, "key of the coordinator's event log stream")
	fs.StringVar(&m.AdminUser, "admin-user", "admin", "admin user name")
	fs.StringVar(&m.AdminPassword, "admin-password", "password", "admin password")
	fs.StringVar(&m.TokenSecret, "token-secret", "", "HMAC secret for bearer tokens (default: derived from the admin credentials; with --users-file, a random one kept in Redis next to the log)")
	fs.StringVar(&m.UsersFile, "users-file", "", "JSON file of users [{username,password,roles}] replacing the admin user; reloaded when it changes and on SIGHUP")
	fs.BoolVar(&m.AuthenticateMembers, "authenticate-member-api", true, "require the MEMBER role for heartbeats (false: as --allow-anonymous-members)")
	fs.BoolVar(&m.AllowAnonymousMembers, "allow-anonymous-members", false, "accept heartbeats without credentials: anyone who can reach the port can heartbeat as any member id")
	fs.BoolVar(&m.InsecureDefaultCredentials, "insecure-default-credentials", false, "allow the default admin password on a --listen address other hosts can reach (throwaway setups only)")
	fs.DurationVar(&m.TokenTTL, "token-ttl", httpapi.DefaultTokenTTL, "bearer token lifetime; a token exchanged for a fresh one never outlives the first")
	fs.IntVar(&m.DefaultShardCount, "default-shard-count", 12, "shard count of a group created without initialShardCount")
	fs.IntVar(&m.MaxShardCount, "max-shard-count", 1024, "largest shard count accepted (at most 65536)")
	fs.IntVar(&m.MaxMembersPerGroup, "max-members-per-group", 4096, "most member records a group keeps: a join into a full group prunes left/expired/fenced records first, else is refused (409 GROUP_MAX_SIZE_REACHED)")
	fs.IntVar(&m.MaxGroups, "max-groups", 1024, "most consumer groups the coordinator manages: a create or a registration by heartbeat beyond is refused (409 GROUP_LIMIT_REACHED)")
	fs.IntVar(&m.MaxTotalShards, "max-total-shards", 65536, "most shards the coordinator manages, every group's and every stream's without groups added up: a create, registration or scale-out beyond is refused (409 SHARD_LIMIT_REACHED)")
	fs.DurationVar(&m.ShardCheckInterval, "shard-check-interval", 10*time.Second, "how often the leader checks that Redis still has every routed shard stream and consumer group, and recreates what it lost (negative: never)")
	fs.DurationVar(&m.BarrierCheckInterval, "barrier-check-interval", 100*time.Millisecond, "how often the leader reads Redis to release the barriers of ordered groups (only groups with a waiting barrier are read): members hold entries back until then")
	fs.DurationVar(&m.AutoscaleInterval, "autoscale-interval", 0, "how often the leader samples the shards of autoscaled groups (entries-added, lag) and evaluates their policies (0: --tick-interval)")
	fs.DurationVar(&m.HeartbeatInterval, "heartbeat-interval", 3*time.Second, "heartbeat interval told to members")
	fs.DurationVar(&m.MemberLease, "member-lease", 15*time.Second, "member lease: a member silent this long expires")
	fs.DurationVar(&m.RebalanceTimeout, "rebalance-timeout", 60*time.Second, "time a member has to release a revoked shard before it is fenced")
	fs.DurationVar(&m.MaxHeartbeatHold, "max-heartbeat-hold", coordinator.DefaultMaxHeartbeatHold, "longest a heartbeat that asks to be held (X-Rsc-Hold-Ms) waits for news; never more than half the member lease")
	fs.IntVar(&m.MaxHeldHeartbeats, "max-held-heartbeats", coordinator.DefaultMaxHeldHeartbeats, "heartbeats held at once, in total; past it a heartbeat is answered at once (negative: none is held)")
	fs.IntVar(&m.MaxHeldHeartbeatsPerPrincipal, "max-held-heartbeats-per-principal", coordinator.DefaultMaxHeldHeartbeatsPerPrincipal, "heartbeats held at once per principal (anonymous members count as one); past it a heartbeat is answered at once (negative: none is held)")
	fs.DurationVar(&m.HeartbeatDropGrace, "heartbeat-drop-grace", coordinator.DefaultHeartbeatDropGrace, "a member whose held heartbeat's connection closed without an answer is expired unless it heartbeats again within this (negative: only the member lease expires members)")
	fs.DurationVar(&m.TickInterval, "tick-interval", time.Second, "maintenance interval (expiry, timeouts, resharding progress)")
	fs.DurationVar(&m.StaleMemberRetention, "stale-member-retention", 10*time.Minute, "how long expired/fenced/left members stay visible (negative: forever)")
	fs.BoolVar(&m.DisableProvisioning, "disable-provisioning", false, "do not create shard streams and consumer groups")
	fs.BoolVar(&m.KeepRetiredStreams, "keep-retired-streams", false, "keep removed shard streams after a resharding instead of deleting them")
	fs.DurationVar(&m.DedupLayoutWindow, "dedup-layout-window", time.Hour, "how far back producer routing answers list the layouts a group or stream had before (previousLayouts), for producers that deduplicate across layout changes: at least their longest DedupWindow (0: none; at most 168h)")
	fs.DurationVar(&m.IDMPDuration, "idmp-duration", 0, "on Redis 8.6 and later: IDMP-DURATION of the shard streams the coordinator creates, how long the server's idempotent XADD keeps a producer's ids (whole seconds, at most 24h; 0: --dedup-layout-window, at most 24h; negative: set nothing)")
	fs.IntVar(&m.IDMPMaxSize, "idmp-maxsize", DefaultIDMPMaxSize, "on Redis 8.6 and later: IDMP-MAXSIZE of the shard streams the coordinator creates, the most ids the server keeps per producer and stream (1 to 10000)")
	fs.IntVar(&m.SnapshotEvery, "snapshot-every", 10000, "events between projection snapshots (negative: never)")
	fs.DurationVar(&m.SnapshotMinInterval, "snapshot-min-interval", 30*time.Second, "least time between periodic snapshots (negative: none)")
	fs.BoolVar(&m.IgnoreSnapshot, "ignore-snapshot", false, "fold the whole log on start instead of starting from the stored snapshot")
	fs.IntVar(&m.RateLimitPerMinute, "rate-limit-per-minute", DefaultRateLimitPerMinute, "admin mutations per principal per minute, over every group and prefix (429 with Retry-After beyond; 0: off)")
	fs.IntVar(&m.MemberChurnPerMinute, "member-churn-per-minute", commands.DefaultMemberChurnPerMinute, "member joins and leaves per principal and group per minute, a quarter of them at once (429 with Retry-After beyond, nothing appended; steady heartbeats are never limited; 0: off)")
	fs.IntVar(&m.MaxGroupsPerPrincipal, "max-groups-per-principal", commands.DefaultMaxGroupsPerPrincipal, "most consumer groups one principal may create or register by heartbeat (409 PRINCIPAL_GROUP_QUOTA_EXCEEDED beyond; 0: off)")
	fs.IntVar(&m.MaxShardsPerPrincipal, "max-shards-per-principal", commands.DefaultMaxShardsPerPrincipal, "most shards the groups (and streams without groups) one principal created may span, counted as --max-total-shards counts them; a scale-out counts against the group's owner (409 PRINCIPAL_SHARD_QUOTA_EXCEEDED beyond; 0: off)")
	fs.IntVar(&m.MaxGroupsPerPrefix, "max-groups-per-prefix", commands.DefaultMaxGroupsPerPrefix, "most consumer groups on one stream prefix (409 PREFIX_GROUP_QUOTA_EXCEEDED beyond; 0: off)")
	fs.IntVar(&m.MaxShardsPerPrefix, "max-shards-per-prefix", commands.DefaultMaxShardsPerPrefix, "most shards on one stream prefix, every group's counted as --max-total-shards counts them (409 PREFIX_SHARD_QUOTA_EXCEEDED beyond; 0: off)")
	fs.IntVar(&m.MaxMembersPerPrincipal, "max-members-per-principal", commands.DefaultMaxMembersPerPrincipal, "most members one principal may have taking part (live, or leaving with shards) across every group (409 PRINCIPAL_MEMBER_QUOTA_EXCEEDED beyond; 0: off)")
	fs.IntVar(&m.PrincipalChurnPerMinute, "principal-churn-per-minute", commands.DefaultPrincipalChurnPerMinute, "member joins and leaves per principal per minute across all its groups, a quarter of them at once, besides --member-churn-per-minute per group (429 with Retry-After beyond, nothing appended; 0: off)")
	fs.DurationVar(&m.EmptyGroupRetention, "empty-group-retention", commands.DefaultEmptyGroupRetention, "how long a group registered by a member's heartbeat may have no live member before it is removed with its consumer groups (operator-created groups never are; 0: never)")
	fs.BoolVar(&m.MetricsAuth, "metrics-auth", false, "require credentials for GET /metrics: a principal with the READ or MONITOR role and no prefixes or groups scope (the scrape shows every tenant's groups)")
	fs.IntVar(&m.MetricsMaxGroups, "metrics-max-groups", metrics.DefaultMaxGroups, "most groups with /metrics series of their own (the oldest groups); the others are added up under stream_prefix=\"*\", consumer_group=\"*\" (0: no limit)")
	fs.IntVar(&m.MetricsMaxShards, "metrics-max-shards", metrics.DefaultMaxShards, "most shards, of those groups (the oldest groups' first), with /metrics series of their own; a group past it shows its shards added up under shard=\"*\" (0: no limit)")
	fs.IntVar(&m.RejectionsPerMinute, "rejections-per-minute", commands.DefaultRejectionsPerMinute, "refused admin commands recorded in the log (command.rejected) per principal per minute, a quarter of them at once; the next record counts those left out (0: record every one)")
	fs.StringVar(&m.AllowedHosts, "allowed-hosts", "", "comma-separated Host names answered besides localhost and loopback addresses (\".example.com\" also allows its subdomains); with a loopback --listen, or when given, requests for any other Host are refused (DNS rebinding)")
	fs.StringVar(&m.CoordinatorID, "coordinator-id", "local-coordinator", "name of this coordinator in health output")
	fs.StringVar(&m.LogFormat, "log-format", "json", "log format: json or console")
	fs.StringVar(&m.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&m.CrashAfterEvent, "crash-after-event", "", "test hook: exit 137 right after appending an event of this type")
	fs.DurationVar(&m.MetricsInterval, "metrics-interval", 10*time.Second, "how often the Redis-derived values are refreshed in the background: /metrics gauges (log length, shard lag and pending; negative: never) and the cache of shard streams that Grafana rows and offsets read (negative: the default 10s)")
	fs.IntVar(&m.SnapshotKeep, "snapshot-keep", 2, "snapshots kept: start-up falls back to an older one when the newest is unreadable (at least 1)")
	fs.BoolVar(&m.TrimLog, "trim-log", false, "after each snapshot, trim the log behind the oldest kept snapshot, archiving the resharding and admin events to <log-stream>:archive first")
	fs.BoolVar(&m.HA, "ha", false, "run as one of several replicas on the log: decide only while holding the leader lease, forward writes to the leader otherwise")
	fs.DurationVar(&m.LeaderLease, "leader-lease", 5*time.Second, "with --ha: leader lease duration (renewed every third of it); a follower takes over this long after the leader died")
	fs.StringVar(&m.AdvertiseURL, "advertise-url", "", "with --ha: base URL the other replicas forward writes to (default http://<listen host, or 127.0.0.1>:<listen port>)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	given := map[string]bool{} // on the command line or in the environment
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		env := "RSC_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			given[f.Name] = true
			if err := f.Value.Set(v); err != nil && envErr == nil {
				envErr = fmt.Errorf("%s=%q: %w", env, v, err)
			}
		}
	})
	if envErr != nil {
		return envErr
	}
	if given["authenticate-member-api"] && m.AuthenticateMembers && m.AllowAnonymousMembers {
		return fmt.Errorf("--authenticate-member-api=true contradicts --allow-anonymous-members")
	}
	if m.TokenTTL < time.Second {
		return fmt.Errorf("--token-ttl must be at least 1s")
	}
	if err := m.checkExposure(); err != nil {
		return err
	}
	if m.MaxMembersPerGroup < 1 {
		return fmt.Errorf("--max-members-per-group must be at least 1")
	}
	if m.MaxGroups < 1 || m.MaxTotalShards < 1 {
		return fmt.Errorf("--max-groups and --max-total-shards must be at least 1")
	}
	if m.DefaultShardCount < 1 || m.MaxShardCount < 1 || m.DefaultShardCount > m.MaxShardCount {
		return fmt.Errorf("--default-shard-count must be between 1 and --max-shard-count")
	}
	if m.MaxShardCount > events.MaxShardCount {
		// The fold refuses a log entry beyond it: what the API accepts, the
		// fold must accept on every replica.
		return fmt.Errorf("--max-shard-count must be at most %d (the largest shard count a log entry may carry)", events.MaxShardCount)
	}
	if m.SnapshotKeep < 1 {
		return fmt.Errorf("--snapshot-keep must be at least 1")
	}
	if m.DedupLayoutWindow != 0 && (m.DedupLayoutWindow < time.Second || m.DedupLayoutWindow > MaxDedupLayoutWindow) {
		return fmt.Errorf("--dedup-layout-window must be 0 (off) or between 1s and %s", MaxDedupLayoutWindow)
	}
	if err := m.checkIDMPFlags(); err != nil {
		return err
	}
	if m.RateLimitPerMinute < 0 {
		return fmt.Errorf("--rate-limit-per-minute must be 0 (off) or positive")
	}
	if m.MemberChurnPerMinute < 0 || m.RejectionsPerMinute < 0 {
		return fmt.Errorf("--member-churn-per-minute and --rejections-per-minute must be 0 (off) or positive")
	}
	if err := m.checkQuotaFlags(); err != nil {
		return err
	}
	if given["admin-password"] && m.UsersFile == "" && blankPassword(m.AdminPassword) {
		return fmt.Errorf("--admin-password: must not be empty or white space (an unset template variable?): give a real password, or leave the flag out for the default on a loopback --listen")
	}
	if err := checkAllowedHosts(m.AllowedHosts); err != nil {
		return err
	}
	if m.MaxHeartbeatHold <= 0 || m.MaxHeartbeatHold > httpapi.MaxHeartbeatHold {
		return fmt.Errorf("--max-heartbeat-hold must be positive and at most %s (the server answers within its write timeout, %s)", httpapi.MaxHeartbeatHold, httpapi.WriteTimeout)
	}
	if m.MaxHeldHeartbeats == 0 || m.MaxHeldHeartbeatsPerPrincipal == 0 || m.HeartbeatDropGrace == 0 {
		return fmt.Errorf("--max-held-heartbeats, --max-held-heartbeats-per-principal and --heartbeat-drop-grace must not be 0 (negative turns them off)")
	}
	if m.HA && m.LeaderLease < 30*time.Millisecond {
		return fmt.Errorf("--leader-lease must be at least 30ms")
	}
	return m.checkRedisFlags()
}

func (m *Main) buildLogger() zerolog.Logger {
	var w io.Writer = m.Stderr
	if m.LogFormat == "console" {
		w = zerolog.ConsoleWriter{Out: m.Stderr, TimeFormat: time.RFC3339}
	}
	lvl, err := zerolog.ParseLevel(m.LogLevel)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("coordinator", m.CoordinatorID).Logger()
}

// Run connects to Redis, starts serving at once (readiness reports not ready), loads
// the snapshot and folds the log tail, then starts deciding.
func (m *Main) Run(ctx context.Context) error {
	m.logger = m.buildLogger()
	if err := m.checkExposure(); err != nil {
		return err
	}
	usersStamp, _ := stampOf(m.UsersFile) // before reading: a change after it is reloaded
	users, usersData, err := m.loadUsers()
	if err != nil {
		return err
	}
	if err := m.checkUsersExposure(users); err != nil {
		return err
	}
	rdb, err := m.connectRedis(ctx)
	if err != nil {
		return err
	}
	m.rdb = rdb
	tokenSecret, clusterSecret, err := m.resolveSecrets(ctx)
	if err != nil {
		return err
	}
	log := redisstore.NewLog(m.rdb, m.LogStream)
	if err := m.replicate(log); err != nil {
		return err
	}
	shards := redisstore.NewShards(m.rdb)
	if err := m.setupIDMP(ctx, shards); err != nil {
		return err
	}
	snaps := redisstore.NewSnapshotStore(m.rdb, m.LogStream)
	guard := redisGuard{rdb: m.rdb, logKey: log.Key(), keys: coordinatorKeys(log, snaps, m.LogStream)}
	if err := m.checkRedisAtStart(ctx, guard); err != nil {
		return err
	}
	cfg := coordinator.Config{
		HeartbeatInterval: m.HeartbeatInterval, MemberLease: m.MemberLease, RebalanceTimeout: m.RebalanceTimeout,
		TickInterval: m.TickInterval, StaleMemberRetention: m.StaleMemberRetention,
		DefaultShardCount: m.DefaultShardCount, MaxShardCount: m.MaxShardCount,
		MaxMembersPerGroup: m.MaxMembersPerGroup, MaxGroups: m.MaxGroups, MaxTotalShards: m.MaxTotalShards, ShardCheckInterval: m.ShardCheckInterval, BarrierCheckInterval: m.BarrierCheckInterval, AutoscaleInterval: m.AutoscaleInterval,
		DisableProvisioning: m.DisableProvisioning, KeepRetiredStreams: m.KeepRetiredStreams,
		SnapshotEvery: m.SnapshotEvery, SnapshotMinInterval: m.SnapshotMinInterval, CoordinatorID: m.CoordinatorID, Logger: m.logger,
		SnapshotKeep: m.SnapshotKeep, TrimLog: m.TrimLog, Trimmer: log,
		MemberChurnPerMinute: offIfZero(m.MemberChurnPerMinute), RejectionsPerMinute: offIfZero(m.RejectionsPerMinute),
		MaxHeartbeatHold: m.MaxHeartbeatHold, MaxHeldHeartbeats: m.MaxHeldHeartbeats, MaxHeldHeartbeatsPerPrincipal: m.MaxHeldHeartbeatsPerPrincipal,
		HeartbeatDropGrace: m.HeartbeatDropGrace,
		RedisGuard:         guard, GuardInterval: m.RedisCheckInterval, AllowEviction: m.AllowRedisEviction, LogReplicas: m.LogReplicas,
		MaxGroupsPerPrincipal: offIfZero(m.MaxGroupsPerPrincipal), MaxShardsPerPrincipal: offIfZero(m.MaxShardsPerPrincipal),
		MaxGroupsPerPrefix: offIfZero(m.MaxGroupsPerPrefix), MaxShardsPerPrefix: offIfZero(m.MaxShardsPerPrefix),
		MaxMembersPerPrincipal: offIfZero(m.MaxMembersPerPrincipal), PrincipalChurnPerMinute: offIfZero(m.PrincipalChurnPerMinute),
		EmptyGroupRetention: offIfZeroDuration(m.EmptyGroupRetention),
	}
	if m.CrashAfterEvent != "" {
		target := m.CrashAfterEvent
		cfg.AfterAppend = func(rec events.Record) {
			if rec.Type == target {
				m.logger.Warn().Str("type", rec.Type).Str("id", rec.ID).Msg("crash hook: exiting after append")
				os.Exit(137)
			}
		}
	}
	var lease *redisstore.Lease
	var appendLog events.Log = log
	if m.HA {
		if lease, err = redisstore.NewLease(m.rdb, m.LogStream, m.CoordinatorID, m.AdvertiseURL); err != nil {
			return fmt.Errorf("--log-stream: %w", err)
		}
		if err := m.replicate(lease); err != nil {
			return err
		}
		appendLog = lease.FencedLog(log)
		cfg.Lease, cfg.LeaseTTL = leaderLease{lease}, m.LeaderLease
	}
	m.metrics = m.newMetrics()
	cfg.AfterAppend = thenAlso(m.metrics.AfterAppend, cfg.AfterAppend)
	cfg.AfterEvaluate = m.metrics.AfterEvaluate
	m.coord = coordinator.New(cfg, appendLog, shards, snaps, m.coordClock)
	parts := httpapi.PartsOf(m.coord)
	parts.Commands = countedHeartbeats{Commands: parts.Commands, answered: m.metrics.HeartbeatAnswered}
	m.server = httpapi.NewServer(httpapi.Config{
		Addr: m.Listen, Logger: m.logger, RateLimitPerMinute: m.RateLimitPerMinute, Hosts: m.hostPolicy(),
		Observe: m.metrics.Observe, Mount: m.metrics.Mount,
		Auth: httpapi.AuthConfig{AdminUser: m.AdminUser, AdminPassword: m.AdminPassword, TokenSecret: tokenSecret, Users: users,
			TokenTTL: m.TokenTTL, AuthenticateMemberAPI: m.memberAuth(), ClusterSecret: clusterSecret, MetricsAuth: m.MetricsAuth},
		Now: m.clock, OffsetsRefresh: m.offsetsRefresh(), LayoutWindow: m.DedupLayoutWindow,
		Readiness: m.secret.ready,
	}, parts, streamReader{shards})
	m.metrics.Watch(m.coord, shardOffsets{m.server})
	if err := m.server.Open(); err != nil {
		return err
	}
	m.warnInsecure(users)
	if lease != nil {
		if m.AdvertiseURL == "" {
			m.AdvertiseURL = m.server.URL()
		}
		lease.SetURL(m.AdvertiseURL)
		m.logger.Info().Str("holder", lease.Holder()).Str("advertise", m.AdvertiseURL).Str("lease", lease.Key()).Dur("ttl", m.LeaderLease).Msg("replica of a highly available coordinator")
		if m.CoordinatorID == "local-coordinator" {
			m.logger.Warn().Msg("--ha with the default --coordinator-id: give every replica its own, or /readyz cannot tell them apart")
		}
	}
	m.logger.Info().Str("url", m.server.URL()).Str("redis", redisurl.Redact(m.RedisURL)).Str("logStream", m.LogStream).Msg("listening")
	lctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go m.metrics.Run(lctx)
	if m.secret != nil {
		go m.secret.run(lctx, secretKeepInterval)
	}
	if m.UsersFile != "" {
		w := &usersWatcher{path: m.UsersFile, apply: m.server.SetUsers, check: m.checkUsersExposure, log: m.logger, loaded: usersData, stamp: usersStamp}
		go w.run(lctx, m.usersPoll, watchSIGHUP())
	}
	loaded := make(chan error, 1)
	go func() { loaded <- m.load(lctx) }()
	select {
	case err := <-loaded:
		return err
	case <-time.After(200 * time.Millisecond):
		// Keep loading in the background; /readyz answers 503 until it is done.
		go func() {
			if err := <-loaded; err != nil && !errors.Is(err, context.Canceled) {
				m.logger.Error().Err(err).Msg("cannot load the event log; refusing to serve decisions")
			}
		}()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// load folds the log, retrying while Redis is unreachable. An undecodable
// entry is fatal for readiness: the coordinator keeps serving, but decides
// nothing and answers every API route with COORDINATOR_METADATA_CORRUPT
// naming the entry (/readyz 503), until it is restarted on a log it can
// decode.
func (m *Main) load(ctx context.Context) error {
	backoff := 200 * time.Millisecond
	for {
		err := m.coord.Load(ctx, !m.IgnoreSnapshot)
		if err == nil {
			m.coord.Run()
			return nil
		}
		var de *events.DecodeError
		if errors.As(err, &de) {
			m.logger.Error().Err(err).Str("entry", de.ID).Msg("the event log holds an entry this build cannot decode: nothing is decided or answered (API 409 COORDINATOR_METADATA_CORRUPT, /readyz 503); see docs/operations.md, Runbook: a corrupt log")
			return nil
		}
		m.logger.Warn().Err(err).Msg("loading the event log; retrying")
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		if backoff < 5*time.Second {
			backoff *= 2
		}
	}
}

// URL is the base URL of the HTTP server.
func (m *Main) URL() string { return m.server.URL() }

// Coordinator exposes the decision engine (tests).
func (m *Main) Coordinator() *coordinator.Coordinator { return m.coord }

// Close stops serving, lets decisions in flight finish, writes a snapshot.
func (m *Main) Close() error {
	if m.cancel != nil {
		m.cancel()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	if m.server != nil {
		err = m.server.Close(ctx)
	}
	if m.coord != nil {
		m.coord.Close()
	}
	if m.rdb != nil {
		_ = m.rdb.Close()
	}
	return err
}

func (m *Main) loadUsers() ([]httpapi.User, []byte, error) {
	if m.UsersFile == "" {
		return nil, nil, nil
	}
	users, data, err := readUsers(m.UsersFile)
	if err != nil {
		return nil, nil, fmt.Errorf("--users-file %s: %w", m.UsersFile, err)
	}
	return users, data, nil
}

// offIfZero maps a flag's 0 (off) to coordinator.Config's -1 (its 0 is the
// default).
func offIfZero(n int) int {
	if n == 0 {
		return -1
	}
	return n
}

// offIfZeroDuration is offIfZero for a duration.
func offIfZeroDuration(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// checkQuotaFlags refuses a negative quota or retention (0 turns one off).
func (m *Main) checkQuotaFlags() error {
	for _, q := range []struct {
		flag string
		v    int
	}{
		{"--max-groups-per-principal", m.MaxGroupsPerPrincipal}, {"--max-shards-per-principal", m.MaxShardsPerPrincipal},
		{"--max-groups-per-prefix", m.MaxGroupsPerPrefix}, {"--max-shards-per-prefix", m.MaxShardsPerPrefix},
		{"--max-members-per-principal", m.MaxMembersPerPrincipal}, {"--principal-churn-per-minute", m.PrincipalChurnPerMinute},
		{"--metrics-max-groups", m.MetricsMaxGroups}, {"--metrics-max-shards", m.MetricsMaxShards},
	} {
		if q.v < 0 {
			return fmt.Errorf("%s must be 0 (off) or positive", q.flag)
		}
	}
	if m.EmptyGroupRetention < 0 {
		return fmt.Errorf("--empty-group-retention must be 0 (never) or positive")
	}
	return nil
}
