package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/rscoord/rsc/wire"
)

// setupLogRestore: rscctl log restore --reason TEXT
// (POST /coord/v1/log/restore, ADMIN).
func setupLogRestore(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	requestedBy := fs.String("requested-by", defaultActor(), "audit identity recorded in the log.restored entry")
	reason := fs.String("reason", "", "why the log is restored (required; recorded in the log.restored entry)")
	return func(ctx context.Context, args []string) error {
		if *reason == "" {
			return usageErrorf("--reason is required: it is recorded in the log")
		}
		res, printed, err := fetch(ctx, a, func(ctx context.Context) (*wire.LogRestoreResponse, error) {
			return a.c.RestoreLog(ctx, wire.LogRestoreRequest{RequestedBy: *requestedBy, Reason: *reason})
		})
		if printed || err != nil {
			return err
		}
		lost := fmt.Sprint(res.LostEntries)
		if res.AtLeast {
			lost = "at least " + lost
		}
		switch res.Cause {
		case "LOG_GONE":
			fmt.Fprintf(a.stdout, "restored the event log (it was gone) from the state at %s: log.restored %s\n", res.RestoredFrom, res.EventID)
		default:
			fmt.Fprintf(a.stdout, "restored the event log (a failover lost %s entries; it ended at %s) from the state at %s: log.restored %s\n", lost, res.LogLastID, res.RestoredFrom, res.EventID)
		}
		return nil
	}
}
