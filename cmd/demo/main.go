// Command demo runs the whole system on one machine and narrates it: a
// throwaway redis-server (unless --redis is given), the coordinator, a group
// with 4 shards, producers publishing through client/producer, and a member
// process with concurrency 4 consuming through client/member. It scales the
// group out 4 → 8 and in 8 → 3 while messages flow, checks at the end that
// every published message was consumed and acked, and prints the group's
// resharding history from the event log (cmd/replay). It cleans up what it
// started, and exits 0 only if every check passed.
//
// With --ordered it shows ordered groups instead (ordered.go): a group with
// "ordering": "KEY" and a plain one get the same per-key sequenced load and
// are scaled 4 → 7 → 3 side by side, each change cutting over with a
// backlog; it prints how many messages each group handled after a later
// message of their key (0 for the ordered one, the check that must hold).
//
// With --exactly-once (exactlyonce.go) two groups get the same load through
// a proxy that loses publish replies, one group's producers with DedupWindow
// and one's without, scaled 4 → 8 → 12; it prints how many event ids each
// wrote twice (0 with DedupWindow, the check that must hold).
//
//	make demo                      # installs redis-server if missing, builds, runs
//	make demo-ordered              # the same with --ordered: an ordering-KEY group beside a plain one
//	make demo-exactly-once         # the same with --exactly-once: duplicates with and without DedupWindow
//	go run ./cmd/demo [--redis redis://host:port/0]
//	demo --coordinator http://coordinator:8080 --redis redis://redis:6379/0   # use running ones (compose)
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/rscoord/rsc/internal/procs"
)

func main() {
	if os.Getenv(roleEnv) == "member" {
		os.Exit(runMember())
	}
	procs.Main(run)
}

// options are the demo's flags.
type options struct {
	redisURL       string
	coordinatorURL string
	adminUser      string
	adminPassword  string
	logStream      string
	coordinatorBin string
	replayBin      string
	prefix, group  string
	producers      int
	ratePerSecond  int
	concurrency    int
	ordered        bool
	exactlyOnce    bool
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.redisURL, "redis", "", "Redis `URL` to use (default: start a throwaway redis-server on a free port)")
	fs.StringVar(&o.coordinatorURL, "coordinator", "", "`URL` of a running coordinator to use (default: start one; it must use the same Redis as --redis)")
	fs.StringVar(&o.adminUser, "admin-user", envOr("RSC_ADMIN_USER", "admin"), "admin `user` of the coordinator (env RSC_ADMIN_USER)")
	fs.StringVar(&o.adminPassword, "admin-password", envOr("RSC_ADMIN_PASSWORD", "password"), "admin `password` of the coordinator (env RSC_ADMIN_PASSWORD)")
	fs.StringVar(&o.logStream, "log-stream", "coordinator:events", "event log `KEY` of a coordinator given with --coordinator (for the replay)")
	fs.StringVar(&o.coordinatorBin, "coordinator-bin", "bin/coordinator", "coordinator `binary` (else the one beside this program, else built with go)")
	fs.StringVar(&o.replayBin, "replay-bin", "bin/replay", "replay `binary` (else the one beside this program, else `go run ./cmd/replay`)")
	fs.StringVar(&o.prefix, "stream-prefix", "orders", "stream prefix of the demo group (a random suffix is added with --redis)")
	fs.StringVar(&o.group, "group", "order-workers", "consumer group of the demo group")
	fs.IntVar(&o.producers, "producers", 2, "number of producers")
	fs.IntVar(&o.ratePerSecond, "rate", 400, "messages per second, all producers together")
	fs.IntVar(&o.concurrency, "concurrency", 4, "logical members of the member process")
	fs.BoolVar(&o.ordered, "ordered", false, `run the ordered demo instead: a group with "ordering": "KEY" and a plain one side by side, same load, scaled 4 -> 7 -> 3 with a backlog at each cutover; prints the inversions each showed`)
	fs.BoolVar(&o.exactlyOnce, "exactly-once", false, "run the exactly-once demo instead: the same load published with and without DedupWindow through a proxy that loses 5% of the publish replies, scaled 4 -> 8 -> 12; prints the event ids each wrote twice")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.coordinatorURL != "" && o.redisURL == "" {
		return o, fmt.Errorf("--coordinator needs --redis: the Redis that coordinator uses")
	}
	if o.redisURL != "" {
		// A Redis that may hold earlier runs: do not collide with them.
		var b [3]byte
		_, _ = rand.Read(b[:])
		o.prefix += "-" + hex.EncodeToString(b[:])
	}
	if o.producers < 1 || o.ratePerSecond < 1 || o.concurrency < 1 {
		return o, fmt.Errorf("--producers, --rate and --concurrency must be positive")
	}
	return o, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "demo:", err)
		}
		return 2
	}
	d := newDemo(o, stdout)
	switch {
	case o.exactlyOnce:
		err = d.runExactlyOnce(ctx)
	case o.ordered:
		err = d.runOrdered(ctx)
	default:
		err = d.run(ctx)
	}
	if err != nil {
		d.say("FAILED", "%v", err)
		if d.coordLog != "" {
			fmt.Fprintf(stdout, "\ncoordinator log (tail):\n%s\n\n", procs.Tail(d.coordLog, 25))
		}
	}
	d.cleanup()
	elapsed := time.Since(d.start).Seconds()
	if err != nil {
		fmt.Fprintf(stdout, "\nRESULT: FAIL (%.1fs)\n", elapsed)
		return 1
	}
	if o.ordered || o.exactlyOnce {
		fmt.Fprintf(stdout, "\nRESULT: PASS — %s (%.1fs)\n", d.orderedSummary, elapsed)
		return 0
	}
	fmt.Fprintf(stdout, "\nRESULT: PASS — %d messages published, every one consumed and acked, nothing pending (%.1fs)\n", d.publishedCount(), elapsed)
	return 0
}
