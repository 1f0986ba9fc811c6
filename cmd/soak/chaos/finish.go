package chaos

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/consumed"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/routing"
)

// Finish stops the producers, waits until everything published was consumed
// and acked, runs every check, stops the members, and completes Report.
func (r *Round) Finish(ctx context.Context) error {
	defer func() { r.Report.Elapsed = time.Since(r.start) }()
	ids, failed, errs := r.load.halt()
	r.Report.Published, r.Report.PublishFailed = int64(len(ids)), failed
	r.o.Logf("producers stopped: %d published, %d publish errors", len(ids), failed)
	for _, e := range topErrors(errs, 3) {
		r.o.Logf("  publish error: %s", e)
	}

	var missing []string
	deadline := time.Now().Add(r.o.StepTimeout)
	for {
		if _, err := r.watch(ctx); err != nil {
			return err
		}
		var err error
		if missing, err = consumed.Missing(ctx, r.rdb, ConsumedKey(r.o.Prefix), ids); err == nil && len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		if err := Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
	r.Report.Lost = int64(len(missing))
	if len(missing) > 0 {
		r.violation("%d of %d published messages were never consumed (e.g. %v); %s", len(missing), len(ids), missing[:min(3, len(missing))], r.whereAre(ctx, missing))
	}
	var problems []string
	deadline = time.Now().Add(r.o.StepTimeout / 2)
	for {
		if _, err := r.watch(ctx); err != nil {
			return err
		}
		problems = r.unfinishedShards(ctx)
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		if err := Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	for _, p := range problems {
		r.violation("%s", p)
	}
	consumed, err := r.rdb.SCard(ctx, ConsumedKey(r.o.Prefix)).Result()
	if err != nil {
		return err
	}
	handled, err := r.rdb.Get(ctx, HandledKey(r.o.Prefix)).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	r.Report.Consumed, r.Report.Handled = consumed, handled
	r.Report.Duplicates = handled - consumed
	r.Report.Unconfirmed = consumed - (int64(len(ids)) - r.Report.Lost)

	r.checkState(ctx)

	r.stopMembers()
	events, handledCalls := r.rec.Counts()
	for _, v := range r.rec.Check(time.Now()) {
		r.violation("member side: %s", v)
	}
	r.o.Logf("member side: %d runtime events and %d handler calls recorded", events, handledCalls)
	return nil
}

// checkState compares the served state with a fresh fold, runs replay.Verify
// and checks every event of the log for a shard held twice.
func (r *Round) checkState(ctx context.Context) {
	var diff string
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := r.watch(ctx); err != nil {
			r.violation("restart the coordinator: %v", err)
			return
		}
		ok, d, err := CompareServed(ctx, r.admin, r.rdb, r.o.Coordinator.Stream(), r.key)
		if err == nil && ok {
			diff = ""
			break
		}
		diff = d
		if err != nil {
			diff = err.Error()
		}
		if time.Now().After(deadline) {
			break
		}
		_ = Sleep(ctx, 100*time.Millisecond)
	}
	if diff != "" {
		r.violation("the served group differs from a fresh fold of the log:\n%s", diff)
	}
	res, err := VerifyReplay(ctx, r.rdb, r.o.Coordinator.Stream())
	switch {
	case err != nil:
		r.violation("replay.Verify: %v", err)
	case !res.Match:
		r.violation("replay.Verify does not match: %v", res.Problems)
	}
	n, violations, err := CheckLog(ctx, redisstore.NewLog(r.rdb, r.o.Coordinator.Stream()), r.key)
	if err != nil {
		r.violation("fold the log: %v", err)
	}
	for _, v := range violations {
		r.violation("coordinator side: %s", v)
	}
	r.Report.LogEvents = n
	r.o.Logf("state: served == fresh fold: %v; replay.Verify match: %v; log events folded and checked: %d", diff == "", err == nil && res != nil && res.Match, n)
}

// unfinishedShards lists live shards with entries pending or unread, and
// removed shards whose stream still exists.
func (r *Round) unfinishedShards(ctx context.Context) []string {
	var out []string
	for i := 0; i < r.maxShards; i++ {
		key := routing.StreamKey(r.o.Prefix, i)
		if i >= r.shards {
			if n, err := r.rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
				length, _ := r.rdb.XLen(ctx, key).Result()
				out = append(out, fmt.Sprintf("removed shard %s was not retired (%d entries)", key, length))
			}
			continue
		}
		// "Nothing unread" is judged by the group's last-delivered-id against
		// the stream's last-generated-id, not by XINFO GROUPS lag: Redis
		// before 7.2.4 rebuilds entries-read wrongly when it reloads its AOF
		// (redis/redis#10569, fixed by #12898), so lag stays above 0 forever
		// after a Redis restart. The lag is shown for diagnosis.
		p, err := r.rdb.XPending(ctx, key, r.o.Group).Result()
		if err != nil {
			out = append(out, fmt.Sprintf("XPENDING %s: %v", key, err))
			continue
		}
		info, err := r.rdb.XInfoStream(ctx, key).Result()
		if err != nil {
			out = append(out, fmt.Sprintf("XINFO STREAM %s: %v", key, err))
			continue
		}
		delivered, lag := "", int64(-1)
		if groups, err := r.rdb.XInfoGroups(ctx, key).Result(); err == nil {
			for _, g := range groups {
				if g.Name == r.o.Group {
					delivered, lag = g.LastDeliveredID, g.Lag
				}
			}
		}
		if p.Count != 0 || delivered != info.LastGeneratedID {
			out = append(out, fmt.Sprintf("live shard %s: pending %d, last-delivered-id %s of last-generated-id %s (lag %d)", key, p.Count, delivered, info.LastGeneratedID, lag))
		}
	}
	return out
}

// whereAre says, for a few missing ids, on which stream they are.
func (r *Round) whereAre(ctx context.Context, ids []string) string {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var found []string
	for i := 0; i < r.maxShards && len(found) < 5; i++ {
		key := routing.StreamKey(r.o.Prefix, i)
		msgs, err := r.rdb.XRange(ctx, key, "-", "+").Result()
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if id, _ := m.Values[EventIDField].(string); want[id] {
				found = append(found, fmt.Sprintf("%s on %s entry %s", id, key, m.ID))
				if len(found) >= 5 {
					break
				}
			}
		}
	}
	if len(found) == 0 {
		return "none of them is on a shard stream any more"
	}
	return "found " + strings.Join(found, ", ")
}

// topErrors lists the n most frequent errors with their counts.
func topErrors(errs map[string]int, n int) []string {
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return errs[keys[i]] > errs[keys[j]] })
	var out []string
	for _, k := range keys[:min(n, len(keys))] {
		out = append(out, fmt.Sprintf("%dx %s", errs[k], k))
	}
	return out
}
