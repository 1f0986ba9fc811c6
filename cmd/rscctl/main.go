// Command rscctl is the operator's command line for the coordinator: it lists and
// inspects groups, creates them, starts and follows reshardings, rolls them back,
// reads the audit history, and hands `replay` questions to the replay tool.
//
// It talks to the coordinator over its HTTP API only (docs/openapi.yaml) and
// reads and writes package wire's bodies, the server's own; it imports nothing
// else of the repository. All logic is in run, which tests call directly.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/rscoord/rsc/internal/procs"
)

// Exit statuses; `rscctl help` documents them.
const (
	exitOK          = 0   // done
	exitRefused     = 1   // the API refused the request (4xx): errorCode and message are printed
	exitUsage       = 2   // bad command, flags or arguments
	exitUnavailable = 3   // the coordinator cannot be reached, or answered 5xx (or the wait was interrupted)
	exitTimeout     = 4   // --wait timed out before the resharding finished
	exitRolledBack  = 5   // --wait saw the resharding end ROLLED_BACK instead of completing
	exitNoReplay    = 127 // `rscctl replay`: no replay binary was found
)

const usage = `usage: rscctl [global flags] <command> [flags] [args]

Operates the coordinator of sharded Redis Streams over its HTTP API.

commands:
  login                          get a bearer token (--save stores it for later calls)
  streams                        list streams (metadata, groups)
  stream create <prefix>         create a stream's shard streams, no consumer group (--shards N,
                                 --requested-by, --reason); groups register on their first heartbeat
  stream adopt <prefix>          take over existing shard streams <prefix>:0..N-1 (--shards N)
  stream scale <prefix> <N>      scale the stream: every group of it, or at once without groups
  stream routing <prefix>        stream-scoped producer routing: shards, stream keys, cluster slots
  groups                         list groups
  group <prefix> <group>         one group: epochs, assignment summary, active resharding
  create <prefix> <group>        create a group (--shards N, --ordering KEY|NONE, --requested-by,
                                 --reason)
  ordering <prefix> <group> <KEY|NONE>
                                 switch a group's ordering (no resharding active, no barrier)
  scale <prefix> <group> <N>     start a resharding to N shards (--reason; --wait follows it
                                 to the end, --timeout bounds the wait)
  rollback <prefix> <group> <id> roll a resharding back (--policy metadata|drain)
  autoscale <prefix> <group>     show the group's autoscaling (policy, load, last decision);
                                 --min N --max N --target R [--max-lag S --window S
                                 --out-cooldown S --in-cooldown S --step F --dry-run] sets the
                                 policy, --off turns it off
  history <prefix> <group>       the group's audit events (--after ID, --limit N, --type T[,T])
  members <prefix> <group>       members with their current, granted, target and revoking shards
  routing <prefix> <group>       producer routing: shards, stream keys, cluster slots
  migrations <prefix> <group>    the group's reshardings
  log restore                    write the state the coordinator holds back to an event log
                                 that lost it (/readyz LOG_LOST; --requested-by, --reason required;
                                 ADMIN)
  replay [args...]               run the replay tool with these arguments (it reads the event
                                 log from Redis; see "rscctl replay --help")
  help [command]                 this text, or a command's flags

global flags (before or after the command):
  --url URL          coordinator base URL (default $RSC_URL, else http://127.0.0.1:8080)
  --user NAME        Basic auth user (default $RSC_USER, else admin)
  --password PASS    Basic auth password (default $RSC_PASSWORD, else password)
  --token TOKEN      bearer token (default $RSC_TOKEN); wins over --user/--password
  -o FORMAT          table (default) or json (the API's JSON, indented)

credentials: --token/$RSC_TOKEN, else --user/--password or $RSC_USER/$RSC_PASSWORD when
given, else the token saved by "rscctl login --save" (~/.config/rscctl/token), else
admin/password.

Path parameters (prefix, group, resharding id) are percent-encoded, so names with "/",
spaces or other special characters work as typed.

exit status:
  0    done
  1    the coordinator refused the request (HTTP 4xx); its errorCode and message are printed
  2    usage error: unknown command, bad flag, wrong number of arguments
  3    the coordinator cannot be reached, or it failed (HTTP 5xx); also an interrupted --wait
  4    scale --wait: timed out before the resharding reached DEPRECATED
  5    scale --wait: the resharding ended ROLLED_BACK instead of completing
  127  replay: no replay binary next to rscctl or on PATH
  replay passes the replay tool's own exit status through.
`

func main() {
	procs.Main(runContext)
}

// run executes one rscctl command line and returns its exit status.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

// command is one subcommand: its flags are registered on fs by setup, and exec
// runs it with the positional arguments.
type command struct {
	name    string
	args    string // positional arguments, for usage
	summary string
	nargs   int // exact number of positional arguments; -1: any
	setup   func(fs *flag.FlagSet, a *app) func(ctx context.Context, args []string) error
}

func commands() []command {
	return []command{
		{"login", "", "get a bearer token", 0, setupLogin},
		{"streams", "", "list streams", 0, setupStreams},
		{"stream create", "<prefix>", "create a stream (its shard streams, no consumer group)", 1, setupStreamCreate},
		{"stream adopt", "<prefix>", "take over a stream's existing shard streams", 1, setupStreamAdopt},
		{"stream scale", "<prefix> <target>", "scale a stream (every group of it)", 2, setupStreamScale},
		{"stream routing", "<prefix>", "the stream-scoped producer routing", 1, setupStreamRouting},
		{"groups", "", "list groups", 0, setupGroups},
		{"group", "<prefix> <group>", "show one group", 2, setupGroup},
		{"create", "<prefix> <group>", "create a group", 2, setupCreate},
		{"ordering", "<prefix> <group> <KEY|NONE>", "switch a group's ordering", 3, setupOrdering},
		{"scale", "<prefix> <group> <target>", "start a resharding", 3, setupScale},
		{"rollback", "<prefix> <group> <reshardingId>", "roll a resharding back", 3, setupRollback},
		{"autoscale", "<prefix> <group>", "show, set or turn off the group's autoscaling", 2, setupAutoscale},
		{"history", "<prefix> <group>", "the group's audit events", 2, setupHistory},
		{"members", "<prefix> <group>", "the group's members", 2, setupMembers},
		{"routing", "<prefix> <group>", "the group's producer routing", 2, setupRouting},
		{"migrations", "<prefix> <group>", "the group's reshardings", 2, setupReshardings},
		{"log restore", "", "write the coordinator's state back to a lost event log", 0, setupLogRestore},
	}
}

func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := newApp(stdout, stderr)
	top := flag.NewFlagSet("rscctl", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	a.g.register(top)
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return exitOK
		}
		fmt.Fprintf(stderr, "rscctl: %v\n\n%s", err, usage)
		return exitUsage
	}
	a.g.noteExplicit(top)
	rest := top.Args()
	if len(rest) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	name, rest := rest[0], rest[1:]
	if (name == "stream" || name == "log") && len(rest) > 0 {
		name, rest = name+" "+rest[0], rest[1:]
	}
	switch name {
	case "help":
		return a.help(rest)
	case "replay":
		return a.replay(ctx, rest)
	}
	for _, c := range commands() {
		if c.name == name {
			return a.runCommand(ctx, c, rest)
		}
	}
	fmt.Fprintf(stderr, "rscctl: unknown command %q\n\n%s", name, usage)
	return exitUsage
}

func (a *app) help(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(a.stdout, usage)
		return exitOK
	}
	name := args[0]
	if (name == "stream" || name == "log") && len(args) > 1 {
		name += " " + args[1]
	}
	for _, c := range commands() {
		if c.name == name {
			fs := a.commandFlags(c)
			c.setup(fs, a)
			fs.SetOutput(a.stdout)
			fs.Usage()
			return exitOK
		}
	}
	if args[0] == "replay" {
		fmt.Fprintln(a.stdout, `usage: rscctl replay [args...]: runs the replay tool with these arguments; "rscctl replay --help" shows its usage`)
		return exitOK
	}
	fmt.Fprintf(a.stderr, "rscctl help: unknown command %q\n", args[0])
	return exitUsage
}

func (a *app) commandFlags(c command) *flag.FlagSet {
	fs := flag.NewFlagSet("rscctl "+c.name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: rscctl %s [flags] %s\n\n%s.\n", c.name, c.args, c.summary)
		if hasFlags(fs) {
			fmt.Fprintln(fs.Output(), "\nflags (the global flags are accepted too, see \"rscctl help\"):")
			printFlags(fs)
		}
	}
	return fs
}

func (a *app) runCommand(ctx context.Context, c command, args []string) int {
	fs := a.commandFlags(c)
	execute := c.setup(fs, a)
	a.g.register(fs)
	fs.SetOutput(io.Discard)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(a.stdout)
			fs.Usage()
			return exitOK
		}
		fmt.Fprintf(a.stderr, "rscctl %s: %v\n", c.name, err)
		fs.SetOutput(a.stderr)
		fs.Usage()
		return exitUsage
	}
	a.g.noteExplicit(fs)
	if c.nargs >= 0 && len(pos) != c.nargs {
		fmt.Fprintf(a.stderr, "rscctl %s: want %d argument(s) %s, got %d\n", c.name, c.nargs, c.args, len(pos))
		fs.SetOutput(a.stderr)
		fs.Usage()
		return exitUsage
	}
	if a.g.output != "table" && a.g.output != "json" {
		fmt.Fprintf(a.stderr, "rscctl %s: -o must be table or json, not %q\n", c.name, a.g.output)
		return exitUsage
	}
	if err := a.connect(); err != nil {
		fmt.Fprintf(a.stderr, "rscctl %s: %v\n", c.name, err)
		return exitUsage
	}
	return a.report(c.name, execute(ctx, pos))
}

// report prints err (if any) and maps it to an exit status.
func (a *app) report(name string, err error) int {
	if err == nil {
		return exitOK
	}
	var exit *exitError
	if errors.As(err, &exit) {
		if exit.msg != "" {
			fmt.Fprintf(a.stderr, "rscctl %s: %s\n", name, exit.msg)
		}
		return exit.code
	}
	fmt.Fprintf(a.stderr, "rscctl %s: %v\n", name, err)
	var apiErr *apiError
	var unreachable *unreachableError
	switch {
	case errors.As(err, &apiErr) && apiErr.Status >= 500:
		return exitUnavailable
	case errors.As(err, &apiErr):
		return exitRefused
	case errors.As(err, &unreachable):
		return exitUnavailable
	case errors.As(err, new(*usageError)):
		return exitUsage
	}
	return exitUnavailable
}

// exitError ends a command with a given status and message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// usageError is a bad argument found after flag parsing.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}
