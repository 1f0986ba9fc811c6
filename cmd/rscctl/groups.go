package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rscoord/rsc/wire"
)

// defaultActor is the audit identity of requests that need one (requestedBy).
func defaultActor() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "rscctl"
}

// setupGroups: rscctl groups (GET /coord/v1/monitoring/groups).
func setupGroups(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	return func(ctx context.Context, _ []string) error {
		resp, printed, err := fetch(ctx, a, a.c.Groups)
		if printed || err != nil {
			return err
		}
		t := newTable(a.stdout, "PREFIX", "GROUP", "STATE", "SHARDS", "EPOCH", "MV", "MEMBERS", "ACTIVE-RESHARDING")
		for _, g := range resp.Groups {
			t.row(g.StreamPrefix, g.ConsumerGroup, g.State, shardsCell(g), strconv.FormatInt(g.GroupEpoch, 10),
				strconv.FormatInt(g.MetadataVersion, 10), strconv.Itoa(len(g.TargetAssignmentSummary)), reshardingCell(g.ActiveMigration))
		}
		return t.flush()
	}
}

// shardsCell is the routed count, with the assignable count when a scale-in
// still has removed shards assigned.
func shardsCell(g wire.Group) string {
	// An older coordinator leaves assignableShardCount out (0): it is never
	// below the routed count otherwise.
	if g.AssignableShardCount > g.ShardCount {
		return fmt.Sprintf("%d (%d assigned)", g.ShardCount, g.AssignableShardCount)
	}
	return strconv.Itoa(g.ShardCount)
}

func reshardingCell(m *wire.Resharding) string {
	if m == nil {
		return "-"
	}
	return fmt.Sprintf("%s %d->%d %s/%s", m.ReshardingID, m.FromShardCount, m.ToShardCount, m.State, m.Phase)
}

// setupGroup: rscctl group <prefix> <group> (GET /coord/v1/streams/{p}/groups/{g}).
func setupGroup(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		g, printed, err := fetch(ctx, a, func(ctx context.Context) (*wire.Group, error) { return a.c.Group(ctx, args[0], args[1]) })
		if printed || err != nil {
			return err
		}
		return printGroup(a, *g)
	}
}

func printGroup(a *app, g wire.Group) error {
	kv := newTable(a.stdout, "GROUP", g.StreamPrefix+" / "+g.ConsumerGroup)
	kv.row("STATE", g.State)
	kv.row("SHARDS", shardsCell(g))
	kv.row("GROUP EPOCH", strconv.FormatInt(g.GroupEpoch, 10))
	kv.row("ASSIGNMENT EPOCH", strconv.FormatInt(g.AssignmentEpoch, 10))
	kv.row("METADATA VERSION", strconv.FormatInt(g.MetadataVersion, 10))
	if g.Ordering != "" {
		kv.row("ORDERING", g.Ordering)
	}
	for _, b := range g.Barriers {
		var on []string
		for _, src := range b.WaitingOn {
			on = append(on, fmt.Sprintf("%s up to %s", src.StreamKey, src.CutoverID))
		}
		kv.row("  BARRIER", fmt.Sprintf("shard %d holds entries after %s since %s, waiting on %s", b.Shard.ShardIndex, b.After, formatTime(b.Since), strings.Join(on, ", ")))
	}
	kv.row("CREATED", formatTime(g.CreatedAt))
	kv.row("UPDATED", formatTime(g.UpdatedAt))
	if m := g.ActiveMigration; m != nil {
		phase := m.Phase
		if g.ActiveReshardingPhase != nil {
			phase = *g.ActiveReshardingPhase
		}
		kv.row("ACTIVE RESHARDING", fmt.Sprintf("%s: %d -> %d shards (%s), state %s, phase %s", m.ReshardingID, m.FromShardCount, m.ToShardCount, m.Kind, m.State, phase))
		if m.RequestedBy != "" || m.Reason != "" {
			kv.row("  REQUESTED", fmt.Sprintf("by %s at %s: %s", m.RequestedBy, formatTime(m.CreatedAt), m.Reason))
		}
		rb := "no"
		if m.Rollback.Eligible {
			rb = "yes"
		}
		kv.row("  ROLLBACK ELIGIBLE", rb+" ("+m.Rollback.Reason+")")
	} else {
		kv.row("ACTIVE RESHARDING", "none")
	}
	if err := kv.flush(); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	ids := map[string]bool{}
	for id := range g.TargetAssignmentSummary {
		ids[id] = true
	}
	for id := range g.CurrentAssignmentSummary {
		ids[id] = true
	}
	if len(ids) == 0 {
		fmt.Fprintln(a.stdout, "no live members")
		return nil
	}
	t := newTable(a.stdout, "MEMBER", "TARGET", "CURRENT")
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		target, current := "-", "0"
		if n, ok := g.TargetAssignmentSummary[id]; ok {
			target = strconv.Itoa(n)
		}
		if n, ok := g.CurrentAssignmentSummary[id]; ok {
			current = strconv.Itoa(n)
		}
		t.row(id, target, current)
	}
	return t.flush()
}

// setupCreate: rscctl create <prefix> <group> (POST /coord/v1/streams/{p}/groups/{g}).
func setupCreate(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	shards := fs.Int("shards", 0, "initial shard count (default: the coordinator's --default-shard-count)")
	requestedBy := fs.String("requested-by", defaultActor(), "audit identity recorded with the request")
	reason := fs.String("reason", "", "audit text recorded with the request")
	ordering := fs.String("ordering", "", "KEY keeps per-key order across reshardings; NONE (default) does not")
	return func(ctx context.Context, args []string) error {
		body := wire.CreateRequest{RequestedBy: *requestedBy, Reason: *reason}
		if *ordering != "" {
			body.Ordering = ordering
		}
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "shards" })
		if given {
			if *shards < 1 {
				return usageErrorf("--shards must be at least 1")
			}
			body.InitialShardCount = shards
		}
		g, printed, err := fetch(ctx, a, func(ctx context.Context) (*wire.Group, error) {
			return a.c.CreateGroupWith(ctx, args[0], args[1], body)
		})
		if printed || err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "created %s / %s with %d shards, ordering %s (metadata version %d)\n", g.StreamPrefix, g.ConsumerGroup, g.ShardCount, g.Ordering, g.MetadataVersion)
		return nil
	}
}

// setupOrdering: rscctl ordering <prefix> <group> <KEY|NONE>
// (PUT /coord/v1/streams/{p}/groups/{g}/ordering).
func setupOrdering(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	requestedBy := fs.String("requested-by", defaultActor(), "audit identity recorded with the request")
	reason := fs.String("reason", "", "audit text recorded with the request")
	return func(ctx context.Context, args []string) error {
		ordering := args[2]
		body := wire.OrderingRequest{Ordering: &ordering, RequestedBy: *requestedBy, Reason: *reason}
		g, printed, err := fetch(ctx, a, func(ctx context.Context) (*wire.Group, error) { return a.c.SetOrdering(ctx, args[0], args[1], body) })
		if printed || err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%s / %s: ordering %s (metadata version %d)\n", g.StreamPrefix, g.ConsumerGroup, g.Ordering, g.MetadataVersion)
		return nil
	}
}

// setupMembers: rscctl members <prefix> <group>
// (GET /coord/v1/monitoring/streams/{p}/groups/{g}/members).
func setupMembers(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		members, printed, err := fetch(ctx, a, func(ctx context.Context) ([]wire.MemberMetadata, error) { return a.c.Members(ctx, args[0], args[1]) })
		if printed || err != nil {
			return err
		}
		if len(members) == 0 {
			fmt.Fprintln(a.stdout, "no members")
			return nil
		}
		t := newTable(a.stdout, "MEMBER", "STATE", "EPOCH", "CURRENT", "GRANTED", "TARGET", "REVOKING", "LEASE-EXPIRES")
		for _, m := range members {
			t.row(m.MemberID, m.State, strconv.FormatInt(m.MemberEpoch, 10), shardList(m.CurrentAssignment), shardList(m.GrantedAssignment),
				shardList(m.TargetAssignment), shardList(m.Revoking), formatTime(m.MemberLeaseExpiresAt))
		}
		return t.flush()
	}
}

// setupRouting: rscctl routing <prefix> <group>
// (GET /coord/v1/streams/{p}/groups/{g}/producer-routing).
func setupRouting(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		r, printed, err := fetch(ctx, a, func(ctx context.Context) (*wire.ProducerRoutingResponse, error) {
			return a.c.ProducerRouting(ctx, args[0], args[1])
		})
		if printed || err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%s / %s: %d shards, metadata version %d, stream keys %s\n\n", r.StreamPrefix, r.ConsumerGroup, r.ShardCount, r.MetadataVersion, r.StreamKeyPattern)
		return printRouting(a, r.Shards, r.PreviousLayouts, r.LayoutWindowMs)
	}
}

// printRouting lists a routing answer's shards and previous layouts.
func printRouting(a *app, shards []wire.RoutingShard, layouts []wire.RoutingLayout, windowMs int64) error {
	t := newTable(a.stdout, "SHARD", "STREAM-KEY", "SLOT")
	for _, s := range shards {
		t.row(strconv.Itoa(s.ShardIndex), s.StreamKey, strconv.Itoa(s.RedisSlot))
	}
	if err := t.flush(); err != nil {
		return err
	}
	return printLayouts(a, layouts, windowMs)
}

// printLayouts lists a routing answer's previous layouts (nothing when it
// has none).
func printLayouts(a *app, layouts []wire.RoutingLayout, windowMs int64) error {
	if len(layouts) == 0 {
		return nil
	}
	fmt.Fprintf(a.stdout, "\nprevious layouts within %s (newest first):\n", time.Duration(windowMs)*time.Millisecond)
	t := newTable(a.stdout, "SINCE-VERSION", "SHARDS", "FENCE", "ENDED-AT")
	for _, l := range layouts {
		t.row(strconv.FormatInt(l.MetadataVersion, 10), strconv.Itoa(l.ShardCount), strconv.FormatInt(l.Fence, 10), l.EndedAt.UTC().Format(time.RFC3339))
	}
	return t.flush()
}

// setupReshardings: rscctl migrations <prefix> <group>
// (GET /coord/v1/streams/{p}/groups/{g}/migrations).
func setupReshardings(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		resp, printed, err := fetch(ctx, a, func(ctx context.Context) (*wire.ReshardingsResponse, error) {
			return a.c.Migrations(ctx, args[0], args[1])
		})
		if printed || err != nil {
			return err
		}
		if len(resp.Migrations) == 0 {
			fmt.Fprintln(a.stdout, "no reshardings")
			return nil
		}
		t := newTable(a.stdout, "RESHARDING", "ACTIVE", "KIND", "FROM", "TO", "STATE", "PHASE", "REQUESTED-BY", "CREATED", "UPDATED")
		for _, m := range resp.Migrations {
			active := ""
			if resp.ActiveReshardingID != nil && *resp.ActiveReshardingID == m.ReshardingID {
				active = "*"
			}
			t.row(m.ReshardingID, active, m.Kind, strconv.Itoa(m.FromShardCount), strconv.Itoa(m.ToShardCount), m.State, m.Phase,
				m.RequestedBy, formatTime(m.CreatedAt), formatTime(m.UpdatedAt))
		}
		return t.flush()
	}
}
