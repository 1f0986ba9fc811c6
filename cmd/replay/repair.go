package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
)

// maxReasonBytes bounds --reason and --requested-by, as the API bounds free text.
const maxReasonBytes = 256

// repairOutput is what `replay repair` prints.
type repairOutput struct {
	Log               string   `json:"log"`
	PreviousLog       string   `json:"previousLog"`
	Skipped           []string `json:"skipped"`
	SkippedCount      int64    `json:"skippedCount"`
	FromSnapshot      string   `json:"fromSnapshot,omitempty"`
	Kept              int64    `json:"kept"`
	RecordID          string   `json:"recordId"`
	TrimmedTo         string   `json:"trimmedTo"`
	SnapshotsSetAside []string `json:"snapshotsSetAside"`
	LeaseHolder       string   `json:"leaseHolder,omitempty"`
}

func (o *repairOutput) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "repaired %s: %d entries left out, %d kept with their ids; the log before the repair is %s\n", o.Log, o.SkippedCount, o.Kept, o.PreviousLog)
	for _, id := range o.Skipped {
		fmt.Fprintf(&b, "  left out %s\n", id)
	}
	if o.FromSnapshot != "" {
		fmt.Fprintf(&b, "the log starts again from the snapshot at %s (trim point %s)\n", o.FromSnapshot, o.TrimmedTo)
	}
	if len(o.SnapshotsSetAside) > 0 {
		fmt.Fprintf(&b, "snapshots set aside (they hold what was left out): %s\n", strings.Join(o.SnapshotsSetAside, ", "))
	}
	fmt.Fprintf(&b, "recorded as log.repaired %s; restart the coordinator(s)\n", o.RecordID)
	_, err := io.WriteString(w, b.String())
	return err
}

// repair rewrites the log without the entries named by --skip (or every
// entry after the snapshot named by --from-snapshot), keeping every other
// entry's id; the log before the repair is kept aside, and the repair is
// recorded in the log (log.repaired).
func (c *cli) repair(ctx context.Context, args []string) error {
	fs := c.flagSet("repair", "--skip ID [--skip ID ...] | --from-snapshot ID  --reason TEXT [--requested-by NAME] [--ignore-lease] [-o text]")
	var skip typeList
	fs.Var(&skip, "skip", "leave out log entry `ID` (repeatable or comma-separated)")
	fromSnapshot := fs.String("from-snapshot", "", "start again from the kept snapshot taken at entry `ID`: keep the entries up to it, leave out every later one")
	reason := fs.String("reason", "", "why the entries are left out (recorded in the log; required)")
	requestedBy := fs.String("requested-by", defaultRequester(), "who repairs (recorded in the log)")
	ignoreLease := fs.Bool("ignore-lease", false, "repair even while a coordinator holds the log's leader lease (restart every coordinator after)")
	err := c.parseNone(fs, "repair", args)
	if err != nil {
		return err
	}
	switch {
	case c.fromFile != "":
		return usagef("repair rewrites the log in Redis; it cannot repair --from-file")
	case len(skip) == 0 && *fromSnapshot == "":
		return usagef("repair needs --skip ID or --from-snapshot ID")
	case len(skip) > 0 && *fromSnapshot != "":
		return usagef("repair takes --skip or --from-snapshot, not both")
	case strings.TrimSpace(*reason) == "":
		return usagef("repair needs --reason: it is recorded in the log with who repaired")
	case len(*reason) > maxReasonBytes || len(*requestedBy) > maxReasonBytes:
		return usagef("--reason and --requested-by must not be longer than %d bytes", maxReasonBytes)
	}
	var first events.ID // snapshots at or after it are set aside
	for _, s := range skip {
		id, err := events.ParseID(s)
		if err != nil {
			return usagef("--skip %q: %v", s, err)
		}
		if first == (events.ID{}) || id.Less(first) {
			first = id
		}
	}
	var through events.ID
	if *fromSnapshot != "" {
		if through, err = events.ParseID(*fromSnapshot); err != nil {
			return usagef("--from-snapshot %q: %v", *fromSnapshot, err)
		}
	}

	rdb, err := redisstore.NewClient(c.redisURL, c.redisTLS)
	if err != nil {
		return usagef("--redis: %v", err)
	}
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s unreachable: %w", redisstore.RedactURL(c.redisURL), err)
	}
	log := redisstore.NewLog(rdb, c.logStream)
	store := redisstore.NewSnapshotStore(rdb, c.logStream)

	// Check everything before anything moves.
	holder, err := log.LeaseHolder(ctx)
	if err != nil {
		return err
	}
	if holder != "" {
		if !*ignoreLease {
			return fmt.Errorf("%w (%s): stop it first, or repair anyway with --ignore-lease and restart every coordinator after", redisstore.ErrLeaseHeld, holder)
		}
		fmt.Fprintf(c.stderr, "replay: warning: %s holds the log's lease; repairing anyway (--ignore-lease): restart every coordinator after\n", holder)
	}
	if len(skip) > 0 {
		found, err := log.Get(ctx, skip)
		if err != nil {
			return err
		}
		if len(found) != len(skip) {
			have := map[string]bool{}
			for _, e := range found {
				have[e.ID] = true
			}
			for _, s := range skip {
				if id, _ := events.ParseID(s); !have[id.String()] {
					return fmt.Errorf("%w: %s is not in %s (removed already?)", redisstore.ErrNotInLog, s, log.Key())
				}
			}
		}
	}
	kept, err := store.Kept(ctx)
	if err != nil {
		return err
	}
	legacyID := ""
	if len(kept) == 0 {
		if data, err := store.Load(ctx); err != nil {
			return err
		} else if data != nil {
			if st, err := projection.Restore(data); err == nil {
				legacyID = st.LastID()
			}
		}
	}
	if *fromSnapshot != "" {
		data, err := store.LoadAt(ctx, through.String())
		if err != nil {
			return err
		}
		if data == nil && legacyID == through.String() {
			data, err = store.Load(ctx)
			if err != nil {
				return err
			}
		}
		if data == nil {
			return fmt.Errorf("no kept snapshot was taken at %s (kept: %s)", through, strings.Join(append(kept, legacyID), " "))
		}
		st, err := projection.Restore(data)
		if err != nil {
			return fmt.Errorf("the snapshot at %s cannot be restored (%v): pick another", through, err)
		}
		if st.LastID() != through.String() {
			return fmt.Errorf("the snapshot kept at %s says it was taken at %s", through, st.LastID())
		}
	}

	// Snapshots that hold what is left out go first: a crash after this
	// step leaves the log as it was, folded from an older snapshot.
	stamp := time.Now().UTC().Format("20060102T150405Z")
	aside, err := store.SetAside(ctx, func(id string) bool {
		p, err := events.ParseID(id)
		if err != nil {
			return false
		}
		if *fromSnapshot != "" {
			return through.Less(p)
		}
		return !p.Less(first)
	}, legacyID, "repair-"+stamp)
	if err != nil {
		return err
	}
	out := &repairOutput{Log: log.Key(), FromSnapshot: *fromSnapshot, SnapshotsSetAside: aside, Skipped: []string{}}
	res, err := log.Repair(ctx, redisstore.RepairPlan{
		Skip: skip, Through: *fromSnapshot, IgnoreLease: *ignoreLease,
		Record: func(r redisstore.RepairResult) ([]byte, error) {
			ev := &events.LogRepaired{RequestedBy: *requestedBy, Reason: *reason, Skipped: r.Skipped, SkippedCount: r.SkippedCount,
				Through: *fromSnapshot, PreviousLog: r.PreviousLog, SnapshotsSetAside: aside, LeaseIgnored: r.LeaseHolder != ""}
			if ev.Skipped == nil {
				ev.Skipped = []string{}
			}
			return events.Encode(events.Meta{Actor: *requestedBy, Time: time.Now().UTC()}, ev)
		},
	})
	if err != nil {
		if len(aside) > 0 {
			fmt.Fprintf(c.stderr, "replay: the snapshots at %s were set aside (keys with set-aside:repair-%s beside %s); the coordinator folds the log from an older one\n", strings.Join(aside, ", "), stamp, store.Key())
		}
		return err
	}
	out.PreviousLog, out.SkippedCount, out.Kept, out.RecordID, out.TrimmedTo, out.LeaseHolder = res.PreviousLog, res.SkippedCount, res.Kept, res.RecordID, res.TrimmedTo, res.LeaseHolder
	if res.Skipped != nil {
		out.Skipped = res.Skipped
	}
	return c.print(out)
}

// defaultRequester is user@host of this process.
func defaultRequester() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	if host == "" {
		return name
	}
	return name + "@" + host
}

// errorsIsRepairRefusal reports whether err is a repair refused before it
// changed anything (exit 1).
func errorsIsRepairRefusal(err error) bool {
	return errors.Is(err, redisstore.ErrLeaseHeld) || errors.Is(err, redisstore.ErrNotInLog) || errors.Is(err, redisstore.ErrLogChanged)
}
