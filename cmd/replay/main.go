// Command replay answers questions about the coordinator's event log, read from
// Redis or from a file written by `replay export`: the events themselves, the
// state at a point, a group's resharding history, what changed between two
// points, what rolling back a resharding would undo, and whether the stored
// snapshot still agrees with the log. Every command but repair only reads;
// repair rewrites the log without the entries it is told to leave out.
//
// The questions are answered by package replay; this command parses flags,
// builds the Redis client and prints.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/internal/procs"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/replay"
)

// Exit statuses.
const (
	exitOK     = 0 // the question was answered
	exitFailed = 1 // verification failed, the group or resharding does not exist, or a repair was refused
	exitUsage  = 2 // bad flags or arguments
	exitSource = 3 // the log could not be read: Redis unreachable, bad file, undecodable entry
)

const defaultRedisURL = "redis://127.0.0.1:6379/0"

const usage = `usage: replay [global flags] <command> [flags] [args]

Reads the coordinator's event log from Redis (or from a file written by
"replay export") and answers questions about the past. Only repair writes to
Redis.

commands:
  events          log entries as JSON lines
                  (--type T[,T] repeatable, namespace.* allowed; --from/--to ID; --since/--until RFC3339;
                   --stream-prefix, --group)
  state           every group, or one with --stream-prefix and --group, as the coordinator
                  believed it after entry --until ID or at time --at RFC3339 (default: now)
  history         the resharding timeline of a group (--stream-prefix, --group)
  diff            what changed for a group between --from ID and --to ID (default: start and end)
  rollback-plan   rollback-plan <reshardingId>: what undoing a resharding of a group involves
  verify          fold the log from zero and compare the snapshot at <log-stream>:snapshot
                  (--snapshot FILE instead, --no-snapshot to skip); a trimmed log is
                  folded from its oldest kept snapshot instead of zero; names every
                  entry that quarantines a stream prefix (exit 1)
  export          write the log as JSON lines to --out FILE (default stdout)
  repair          rewrite the log without entries: --skip ID (repeatable), or
                  --from-snapshot ID (keep the entries up to that kept snapshot, leave out
                  every later one); --reason TEXT required, --requested-by NAME; every other
                  entry keeps its id, the old log is kept aside, snapshots holding what is
                  left out are set aside, and log.repaired records it. Refused while a
                  coordinator holds the log's lease, unless --ignore-lease

global flags (accepted before or after the command):
  --from-file FILE  read the log from an export file ("-": stdin) instead of Redis
  --redis URL       Redis to read, in any form the coordinator's --redis takes (one
                    server, redis+cluster://, redis+sentinel://, rediss… for TLS;
                    default $RSC_REDIS, else ` + defaultRedisURL + `)
  --redis-tls-ca FILE, --redis-tls-cert FILE, --redis-tls-key FILE
                    with a rediss URL: the CA, the client certificate and its key, as the
                    coordinator's flags of the same names take them
  --log-stream KEY  stream of the event log (default ` + redisstore.DefaultLogStream + `)
  -o FORMAT         json (default) or text, for events, history, diff, rollback-plan and verify

exit status: 0 answered; 1 verification failed, the group or resharding does not
exist, or a repair was refused (lease held, entry not in the log, the log changed);
2 usage error; 3 source error (Redis unreachable, bad file, undecodable entry).
Run "replay <command> -h" for a command's flags.

A log trimmed by the coordinator (--trim-log) is read with its archive
(<log-stream>:archive): events and history list the archived resharding and
admin events before the trim point; state, diff and rollback-plan fold from the
oldest kept snapshot and refuse an earlier point (exit 1).
`

func main() {
	// The client's own log repeats, on every failed dial, what the error
	// returned to us says once.
	redis.SetLogger(quietLogger{})
	procs.Main(runContext)
}

// quietLogger drops go-redis's internal log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// run is the whole program without a process: tests call it.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	redisURL := os.Getenv("RSC_REDIS")
	if redisURL == "" {
		redisURL = defaultRedisURL
	}
	c := &cli{stdout: stdout, stderr: stderr, redisURL: redisURL, logStream: redisstore.DefaultLogStream, output: "json"}
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	c.commonFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	commands := map[string]func(context.Context, []string) error{
		"events":        c.events,
		"state":         c.state,
		"history":       c.history,
		"diff":          c.diff,
		"rollback-plan": c.rollbackPlan,
		"verify":        c.verify,
		"export":        c.export,
		"repair":        c.repair,
	}
	if rest[0] == "help" {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	cmd, ok := commands[rest[0]]
	if !ok {
		fmt.Fprintf(stderr, "replay: unknown command %q\n\n%s", rest[0], usage)
		return exitUsage
	}
	return c.exit(cmd(ctx, rest[1:]))
}

// cli holds the flags and where output goes.
type cli struct {
	stdout, stderr io.Writer

	fromFile  string
	redisURL  string
	redisTLS  redisstore.TLSFiles
	logStream string
	output    string
	prefix    string
	group     string
}

// Errors that decide the exit status.
var (
	// errUsageShown: the flag package already printed what was wrong.
	errUsageShown = errors.New("usage")
	// errMismatch: verify printed a failed result.
	errMismatch = errors.New("verification failed")
)

// usageError is a usage mistake to print before exiting with exitUsage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// exit prints err (unless already shown) and maps it to an exit status.
func (c *cli) exit(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.Is(err, errUsageShown):
		return exitUsage
	case errors.Is(err, errMismatch):
		return exitFailed
	case errors.As(err, &ue), errors.Is(err, replay.ErrInvalidArgument):
		fmt.Fprintf(c.stderr, "replay: %v\n", err)
		return exitUsage
	case errors.Is(err, replay.ErrGroupNotFound), errors.Is(err, replay.ErrReshardingNotFound), errors.Is(err, replay.ErrTrimmed), errorsIsRepairRefusal(err):
		fmt.Fprintf(c.stderr, "replay: %v\n", err)
		return exitFailed
	default:
		fmt.Fprintf(c.stderr, "replay: %v\n", err)
		return exitSource
	}
}

func (c *cli) commonFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.fromFile, "from-file", c.fromFile, "read the log from `FILE` written by replay export (- for stdin) instead of Redis")
	fs.StringVar(&c.redisURL, "redis", c.redisURL, "Redis `URL` to read, in any form the coordinator's --redis takes (the default comes from $RSC_REDIS when set)")
	fs.StringVar(&c.redisTLS.CA, "redis-tls-ca", c.redisTLS.CA, "with a rediss URL: PEM `FILE` of the CA that signed the servers' certificates (default: the system's roots)")
	fs.StringVar(&c.redisTLS.Cert, "redis-tls-cert", c.redisTLS.Cert, "with a rediss URL: PEM client certificate `FILE`, for servers that require one")
	fs.StringVar(&c.redisTLS.Key, "redis-tls-key", c.redisTLS.Key, "PEM private key `FILE` of --redis-tls-cert")
	fs.StringVar(&c.logStream, "log-stream", c.logStream, "stream `KEY` of the event log")
	fs.StringVar(&c.output, "o", c.output, "output `FORMAT`: json or text")
}

func (c *cli) groupFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.prefix, "stream-prefix", c.prefix, "stream `PREFIX` of the group")
	fs.StringVar(&c.group, "group", c.group, "consumer `GROUP` name of the group")
}

// flagSet is a command's flag set, with the global flags accepted again.
func (c *cli) flagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("replay "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: replay %s %s\n\nflags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	c.commonFlags(fs)
	return fs
}

// parse parses flags and positional arguments in any order.
func (c *cli) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errUsageShown
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if c.output != "json" && c.output != "text" {
		return nil, usagef("-o must be json or text, not %q", c.output)
	}
	return pos, nil
}

// key is the group named by --stream-prefix and --group, both required.
func (c *cli) key(cmd string) (projection.GroupKey, error) {
	if c.prefix == "" || c.group == "" {
		return projection.GroupKey{}, usagef("%s needs --stream-prefix and --group", cmd)
	}
	return projection.GroupKey{StreamPrefix: c.prefix, ConsumerGroup: c.group}, nil
}

// parseNone parses the flags of cmd, which takes no positional arguments.
func (c *cli) parseNone(fs *flag.FlagSet, cmd string, args []string) error {
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	return noArgs(cmd, pos)
}

func noArgs(cmd string, pos []string) error {
	if len(pos) > 0 {
		return usagef("%s takes no arguments, got %q", cmd, strings.Join(pos, " "))
	}
	return nil
}

// source is where the log is read from.
type source struct {
	log events.Log
	rdb redis.UniversalClient // nil for a file
	// trimmed is set when the coordinator trimmed the log's head (--trim-log):
	// log is then a replay.TrimmedLog over the log, its archive and its kept
	// snapshots.
	trimmed *replay.TrimmedLog
}

func (s *source) Close() {
	if s.rdb != nil {
		_ = s.rdb.Close()
	}
}

// open reads the export file, or connects to Redis and checks that it answers.
func (c *cli) open(ctx context.Context) (*source, error) {
	if c.fromFile != "" {
		r := io.Reader(os.Stdin)
		if c.fromFile != "-" {
			f, err := os.Open(c.fromFile)
			if err != nil {
				return nil, fmt.Errorf("open log file: %w", err)
			}
			defer f.Close()
			r = f
		}
		l, err := replay.Import(r)
		if err != nil {
			return nil, fmt.Errorf("read log file %s: %w", c.fromFile, err)
		}
		return &source{log: l}, nil
	}
	rdb, err := redisstore.NewClient(c.redisURL, c.redisTLS)
	if err != nil {
		return nil, usagef("--redis: %v", err)
	}
	where := redisstore.RedactURL(c.redisURL) // the URL may carry a password
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis at %s unreachable: %w", where, err)
	}
	if n, err := rdb.Exists(pctx, c.logStream).Result(); err == nil && n == 0 {
		fmt.Fprintf(c.stderr, "replay: warning: log stream %q does not exist in redis at %s; reading an empty log\n", c.logStream, where)
	}
	src := &source{log: redisstore.NewLog(rdb, c.logStream), rdb: rdb}
	if err := c.openTrimmed(ctx, src); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return src, nil
}

// openTrimmed makes src read a log trimmed at its head together with its
// archive, folding from the oldest kept snapshot (a fold from zero is no
// longer possible).
func (c *cli) openTrimmed(ctx context.Context, src *source) error {
	l := redisstore.NewLog(src.rdb, c.logStream)
	trimmedTo, err := l.TrimmedTo(ctx)
	if err != nil || trimmedTo == events.ZeroID {
		return err
	}
	store := redisstore.NewSnapshotStore(src.rdb, c.logStream)
	ids, err := store.Kept(ctx)
	if err != nil {
		return err
	}
	var snaps [][]byte
	for i := len(ids) - 1; i >= 0; i-- { // oldest first
		data, err := store.LoadAt(ctx, ids[i])
		if err != nil {
			return err
		}
		if data != nil {
			snaps = append(snaps, data)
		}
	}
	t, err := replay.NewTrimmedLog(l, l.Archive(), trimmedTo, snaps)
	if err != nil {
		return err
	}
	src.log, src.trimmed = t, t
	if t.BaseID() == "" {
		fmt.Fprintf(c.stderr, "replay: warning: the log was trimmed up to %s and no kept snapshot reaches that point; only events can be read\n", trimmedTo)
	}
	return nil
}

// printJSON writes v as indented JSON.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// textWriter is output that can render itself for people.
type textWriter interface{ WriteText(io.Writer) error }

// printOr prints v, or returns err when there is one.
func (c *cli) printOr(v textWriter, err error) error {
	if err != nil {
		return err
	}
	return c.print(v)
}

// print writes v as JSON, or as text with -o text.
func (c *cli) print(v textWriter) error {
	if c.output == "text" {
		return v.WriteText(c.stdout)
	}
	return c.printJSON(v)
}

func parseTime(flagName, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usagef("--%s: want an RFC3339 time such as 2025-03-01T10:00:00Z: %v", flagName, err)
	}
	return t, nil
}

// typeList is a repeatable, comma-separated --type flag.
type typeList []string

func (t *typeList) String() string { return strings.Join(*t, ",") }

func (t *typeList) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*t = append(*t, p)
		}
	}
	return nil
}

// events prints log entries: JSON lines, or one text line each.
func (c *cli) events(ctx context.Context, args []string) error {
	fs := c.flagSet("events", "[flags]")
	c.groupFlags(fs)
	var types typeList
	fs.Var(&types, "type", "keep events of `TYPE` (repeatable or comma-separated; resharding.* for a namespace)")
	from := fs.String("from", "", "first entry `ID` (inclusive)")
	to := fs.String("to", "", "last entry `ID` (inclusive)")
	since := fs.String("since", "", "keep events decided at or after `TIME` (RFC3339)")
	until := fs.String("until", "", "keep events decided at or before `TIME` (RFC3339)")
	err := c.parseNone(fs, "events", args)
	if err != nil {
		return err
	}
	f := replay.Filter{StreamPrefix: c.prefix, ConsumerGroup: c.group, Types: types, FromID: *from, ToID: *to}
	if f.Since, err = parseTime("since", *since); err != nil {
		return err
	}
	if f.Until, err = parseTime("until", *until); err != nil {
		return err
	}
	src, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	w := bufio.NewWriter(c.stdout)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for r, err := range replay.Events(ctx, src.log, f) {
		if err != nil {
			_ = w.Flush()
			return err
		}
		if c.output == "text" {
			group := "-"
			if r.StreamPrefix != "" || r.ConsumerGroup != "" {
				group = r.StreamPrefix + "/" + r.ConsumerGroup
			}
			actor := r.Actor
			if actor == "" {
				actor = "-"
			}
			_, err = fmt.Fprintf(w, "%s  %s  %s  %s  %s  %s\n", r.ID, r.Time.Format(time.RFC3339Nano), r.Type, group, actor, r.Payload)
		} else {
			err = enc.Encode(r)
		}
		if err != nil {
			return err
		}
	}
	return w.Flush()
}

// stateOutput is `replay state` without a group: every group and every
// stream at one point.
type stateOutput struct {
	LastID  string                 `json:"lastId"`
	Groups  []replay.GroupSnapshot `json:"groups"`
	Streams []replay.StreamState   `json:"streams"`
}

// state prints one group (both group flags) or every group (filtered by the one
// given) as the coordinator believed it at a point.
func (c *cli) state(ctx context.Context, args []string) error {
	fs := c.flagSet("state", "[--until ID | --at TIME] [--stream-prefix P --group G]")
	c.groupFlags(fs)
	until := fs.String("until", "", "fold up to and including entry `ID`")
	at := fs.String("at", "", "fold the entries decided at or before `TIME` (RFC3339)")
	err := c.parseNone(fs, "state", args)
	if err != nil {
		return err
	}
	if c.output != "json" {
		return usagef("state prints JSON only")
	}
	if *until != "" && *at != "" {
		return usagef("state takes --until or --at, not both")
	}
	p := replay.Point{UntilID: *until}
	if p.At, err = parseTime("at", *at); err != nil {
		return err
	}
	src, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	st, last, err := replay.StateAt(ctx, src.log, p)
	if err != nil {
		return err
	}
	if c.prefix != "" && c.group != "" {
		g, err := replay.GroupState(st, projection.GroupKey{StreamPrefix: c.prefix, ConsumerGroup: c.group})
		if err != nil {
			return err
		}
		return c.printJSON(g)
	}
	out := stateOutput{LastID: last, Groups: []replay.GroupSnapshot{}, Streams: []replay.StreamState{}}
	for _, g := range replay.GroupStates(st) {
		if (c.prefix == "" || g.StreamPrefix == c.prefix) && (c.group == "" || g.ConsumerGroup == c.group) {
			out.Groups = append(out.Groups, g)
		}
	}
	for _, s := range replay.StreamStates(st) {
		if c.prefix == "" || s.StreamPrefix == c.prefix {
			out.Streams = append(out.Streams, s)
		}
	}
	return c.printJSON(out)
}

// groupSource parses a group command's flags (no positional arguments), names
// the group and opens the log.
func (c *cli) groupSource(ctx context.Context, fs *flag.FlagSet, cmd string, args []string) (projection.GroupKey, *source, error) {
	err := c.parseNone(fs, cmd, args)
	if err != nil {
		return projection.GroupKey{}, nil, err
	}
	k, err := c.key(cmd)
	if err != nil {
		return projection.GroupKey{}, nil, err
	}
	src, err := c.open(ctx)
	if err != nil {
		return projection.GroupKey{}, nil, err
	}
	return k, src, nil
}

// history prints the resharding timeline of a group.
func (c *cli) history(ctx context.Context, args []string) error {
	fs := c.flagSet("history", "--stream-prefix P --group G [-o text]")
	c.groupFlags(fs)
	k, src, err := c.groupSource(ctx, fs, "history", args)
	if err != nil {
		return err
	}
	defer src.Close()
	return c.printOr(replay.History(ctx, src.log, k))
}

// diff prints what changed for a group between two entries.
func (c *cli) diff(ctx context.Context, args []string) error {
	fs := c.flagSet("diff", "--stream-prefix P --group G [--from ID] [--to ID] [-o text]")
	c.groupFlags(fs)
	from := fs.String("from", "", "compare from after entry `ID` (default: the start of the log)")
	to := fs.String("to", "", "compare up to and including entry `ID` (default: the end of the log)")
	k, src, err := c.groupSource(ctx, fs, "diff", args)
	if err != nil {
		return err
	}
	defer src.Close()
	return c.printOr(replay.Diff(ctx, src.log, k, *from, *to))
}

// rollbackPlan prints what undoing a resharding involves.
func (c *cli) rollbackPlan(ctx context.Context, args []string) error {
	fs := c.flagSet("rollback-plan", "--stream-prefix P --group G <reshardingId> [-o text]")
	c.groupFlags(fs)
	pos, err := c.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("rollback-plan takes one resharding id, got %d arguments", len(pos))
	}
	k, err := c.key("rollback-plan")
	if err != nil {
		return err
	}
	src, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	return c.printOr(replay.RollbackPlan(ctx, src.log, k, pos[0]))
}

// verify folds the log from zero and checks the snapshot against it; a failed
// check exits with exitFailed after printing the result.
func (c *cli) verify(ctx context.Context, args []string) error {
	fs := c.flagSet("verify", "[--no-snapshot | --snapshot FILE] [-o text]")
	noSnapshot := fs.Bool("no-snapshot", false, "only fold the log; do not check a snapshot")
	snapFile := fs.String("snapshot", "", "check the snapshot in `FILE` instead of the one in Redis")
	err := c.parseNone(fs, "verify", args)
	if err != nil {
		return err
	}
	if *noSnapshot && *snapFile != "" {
		return usagef("verify takes --no-snapshot or --snapshot, not both")
	}
	src, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	// Load the snapshot before Verify pins the end of the log, so a live log
	// cannot be behind its own snapshot.
	var snap []byte
	switch {
	case *noSnapshot:
	case *snapFile != "":
		if snap, err = os.ReadFile(*snapFile); err != nil {
			return fmt.Errorf("read snapshot: %w", err)
		}
	case src.rdb != nil:
		if snap, err = redisstore.NewSnapshotStore(src.rdb, c.logStream).Load(ctx); err != nil {
			return err
		}
	}
	res, err := replay.Verify(ctx, src.log, snap)
	if err != nil {
		return err
	}
	if err := c.print(res); err != nil {
		return err
	}
	if !res.Match {
		return errMismatch
	}
	return nil
}

// export writes the log as JSON lines to --out (atomically: a temporary file
// renamed into place) or to stdout.
func (c *cli) export(ctx context.Context, args []string) error {
	fs := c.flagSet("export", "[--out FILE]")
	out := fs.String("out", "", "write to `FILE` instead of stdout")
	err := c.parseNone(fs, "export", args)
	if err != nil {
		return err
	}
	src, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer src.Close()
	if src.trimmed != nil {
		fmt.Fprintf(c.stderr, "replay: warning: the log was trimmed up to %s: the export holds the archived resharding and admin events before it, then the log; a fold of the file from zero will not match the coordinator's state\n", src.trimmed.TrimmedTo())
	}
	if *out == "" || *out == "-" {
		_, err := replay.Export(ctx, src.log, c.stdout)
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(*out), "."+filepath.Base(*out)+".*")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	n, err := replay.Export(ctx, src.log, tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), *out)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("export to %s: %w", *out, err)
	}
	fmt.Fprintf(c.stderr, "replay: exported %d entries to %s\n", n, *out)
	return nil
}
