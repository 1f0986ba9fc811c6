package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/rscoord/rsc/wire"
)

// Streams: rscctl streams, and rscctl stream create|adopt|scale|routing.

// setupStreams: rscctl streams (GET /coord/v1/monitoring/streams).
func setupStreams(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	return func(ctx context.Context, _ []string) error {
		resp, printed, err := fetch(ctx, a, a.c.Streams)
		if printed || err != nil {
			return err
		}
		t := newTable(a.stdout, "PREFIX", "SHARDS", "MV", "ORIGIN", "GROUPS")
		for _, s := range resp.Streams {
			shards, mv, origin := "groups differ", "-", "no metadata"
			if s.ShardCount != nil {
				shards = strconv.Itoa(*s.ShardCount)
			}
			if s.MetadataVersion != nil {
				mv = strconv.FormatInt(*s.MetadataVersion, 10)
			}
			if s.Origin != nil {
				origin = *s.Origin
			}
			groups := strings.Join(s.ConsumerGroups, ",")
			if groups == "" {
				groups = "-"
			}
			t.row(s.StreamPrefix, shards, mv, origin, groups)
		}
		return t.flush()
	}
}

// setupStreamCreate: rscctl stream create <prefix> (POST /coord/v1/streams/{p}).
func setupStreamCreate(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	shards := fs.Int("shards", 0, "initial shard count (default: the coordinator's --default-shard-count)")
	requestedBy := fs.String("requested-by", defaultActor(), "audit identity recorded with the request")
	reason := fs.String("reason", "stream create via rscctl", "audit text recorded with the request")
	return func(ctx context.Context, args []string) error {
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "shards" })
		if given && *shards < 1 {
			return usageErrorf("--shards must be at least 1")
		}
		return streamCreated(ctx, a, "created", "consumer groups register on their first heartbeat", func(ctx context.Context) (*wire.StreamCreateResponse, error) {
			return a.c.CreateStream(ctx, args[0], *shards, *requestedBy, *reason)
		})
	}
}

// streamCreated runs a stream's create or adopt and says what it did:
// "<verb> stream P with N shards (metadata version V); <note>".
func streamCreated(ctx context.Context, a *app, verb, note string, fn func(ctx context.Context) (*wire.StreamCreateResponse, error)) error {
	s, printed, err := fetch(ctx, a, fn)
	if printed || err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "%s stream %s with %d shards (metadata version %d); %s\n", verb, s.StreamPrefix, s.ShardCount, s.MetadataVersion, note)
	return nil
}

// setupStreamAdopt: rscctl stream adopt <prefix> --shards N
// (POST /coord/v1/streams/{p}/adopt).
func setupStreamAdopt(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	shards := fs.Int("shards", 0, "how many existing shard streams <prefix>:0..N-1 to take over (required)")
	requestedBy := fs.String("requested-by", defaultActor(), "audit identity recorded with the request")
	reason := fs.String("reason", "stream adopt via rscctl", "audit text recorded with the request")
	return func(ctx context.Context, args []string) error {
		if *shards < 1 {
			return usageErrorf("--shards N (at least 1) is required")
		}
		return streamCreated(ctx, a, "adopted", "the coordinator never deletes them", func(ctx context.Context) (*wire.StreamCreateResponse, error) {
			return a.c.AdoptStream(ctx, args[0], *shards, *requestedBy, *reason)
		})
	}
}

// setupStreamScale: rscctl stream scale <prefix> <N>
// (POST /coord/v1/streams/{p}/scale): every group of the stream, or the
// layout at once when it has none.
func setupStreamScale(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	reason := fs.String("reason", "", `audit text recorded with the request (default "stream scale to <target> shards via rscctl")`)
	requestedBy := fs.String("requested-by", defaultActor(), "audit identity recorded with the request")
	return func(ctx context.Context, args []string) error {
		target, err := strconv.Atoi(args[1])
		if err != nil || target < 0 {
			return usageErrorf("target %q: want a shard count (0 or more)", args[1])
		}
		if *reason == "" {
			*reason = fmt.Sprintf("stream scale to %d shards via rscctl", target)
		}
		res, printed, err := fetch(ctx, a, func(ctx context.Context) (*wire.StreamScaleResult, error) {
			return a.c.ScaleStream(ctx, args[0], target, *requestedBy, *reason)
		})
		if printed || err != nil {
			return err
		}
		if len(res.Migrations) == 0 {
			fmt.Fprintf(a.stdout, "stream %s scaled to %d shards (no consumer group: the layout changed at once)\n", res.StreamPrefix, res.TargetShardCount)
			return nil
		}
		fmt.Fprintf(a.stdout, "stream %s: scale to %d shards started\n\n", res.StreamPrefix, res.TargetShardCount)
		t := newTable(a.stdout, "GROUP", "RESHARDING", "FROM", "TO", "STATE")
		for i, m := range res.Migrations {
			t.row(res.AffectedConsumerGroups[i], m.ReshardingID, strconv.Itoa(m.FromShardCount), strconv.Itoa(m.ToShardCount), m.State)
		}
		return t.flush()
	}
}

// setupStreamRouting: rscctl stream routing <prefix>
// (GET /coord/v1/streams/{p}/producer-routing).
func setupStreamRouting(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	return func(ctx context.Context, args []string) error {
		r, printed, err := fetch(ctx, a, func(ctx context.Context) (*wire.StreamRoutingResponse, error) {
			return a.c.StreamProducerRouting(ctx, args[0])
		})
		if printed || err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "stream %s: %d shards, metadata version %d, stream keys %s\n\n", r.StreamPrefix, r.ShardCount, r.MetadataVersion, r.StreamKeyPattern)
		return printRouting(a, r.Shards, r.PreviousLayouts, r.LayoutWindowMs)
	}
}
