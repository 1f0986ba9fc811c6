package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/rscoord/rsc/wire"
)

// setupScale: rscctl scale <prefix> <group> <target>
// (POST /coord/v1/streams/{p}/groups/{g}/scale), optionally following the
// resharding until it ends.
func setupScale(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	reason := fs.String("reason", "", `audit text recorded with the request (default "scale to <target> shards via rscctl")`)
	requestedBy := fs.String("requested-by", defaultActor(), "audit identity recorded with the request")
	wait := fs.Bool("wait", false, "follow the resharding until DEPRECATED (exit 0) or ROLLED_BACK (exit 5)")
	timeout := fs.Duration("timeout", 10*time.Minute, "with --wait: give up after this long (exit 4)")
	interval := fs.Duration("interval", 500*time.Millisecond, "with --wait: how often to refresh")
	return func(ctx context.Context, args []string) error {
		target, err := strconv.Atoi(args[2])
		if err != nil || target < 0 {
			return usageErrorf("target %q: want a shard count (0 or more)", args[2])
		}
		if *timeout <= 0 || *interval <= 0 {
			return usageErrorf("--timeout and --interval must be positive")
		}
		if *reason == "" {
			*reason = fmt.Sprintf("scale to %d shards via rscctl", target)
		}
		m, data, err := call(ctx, a, func(ctx context.Context) (*wire.Resharding, error) {
			return a.c.Scale(ctx, args[0], args[1], target, *requestedBy, *reason)
		})
		if err != nil {
			return err
		}
		if !*wait {
			if a.g.output == "json" {
				return printJSON(a.stdout, data)
			}
			fmt.Fprintf(a.stdout, "resharding %s started: %s / %s %d -> %d shards (%s, phase %s)\n", m.ReshardingID, args[0], args[1], m.FromShardCount, m.ToShardCount, m.State, m.Phase)
			return nil
		}
		w := &waiter{a: a, prefix: args[0], group: args[1], id: m.ReshardingID, timeout: *timeout, interval: *interval}
		return w.run(ctx, *m)
	}
}

// setupRollback: rscctl rollback <prefix> <group> <reshardingId>
// (POST .../migrations/{reshardingId}/rollback).
func setupRollback(fs *flag.FlagSet, a *app) func(context.Context, []string) error {
	policy := fs.String("policy", "", `"metadata" (the default: only while metadata alone reverses it) or "drain" (a scale-out whose new shards hold entries drains them first)`)
	reason := fs.String("reason", "rollback via rscctl", "audit text recorded with the request")
	requestedBy := fs.String("requested-by", defaultActor(), "audit identity recorded with the request")
	return func(ctx context.Context, args []string) error {
		if *policy != "" && *policy != "metadata" && *policy != "drain" {
			return usageErrorf("--policy must be metadata or drain, not %q", *policy)
		}
		body := wire.RollbackRequest{RequestedBy: *requestedBy, Reason: *reason, Policy: *policy}
		m, printed, err := fetch(ctx, a, func(ctx context.Context) (*wire.Resharding, error) {
			return a.c.Rollback(ctx, args[0], args[1], args[2], body)
		})
		if printed || err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "resharding %s: %s (shards back to %d, phase %s)\n", m.ReshardingID, m.State, m.FromShardCount, m.Phase)
		return nil
	}
}

// waiter follows one resharding: every interval it reads the resharding, the
// members and the assignments, and shows what changed.
type waiter struct {
	a                 *app
	prefix, group, id string
	timeout, interval time.Duration

	start    time.Time
	tty      bool
	drawn    int    // lines of the last redraw (tty)
	lastLine string // last progress line printed (not a tty)
}

// progress is one poll's picture.
type progress struct {
	m         wire.Resharding
	raw       []byte   // the resharding as the API answered it
	live      []string // members with a target
	converged int
	lagging   []string // live members whose current != target
}

func (w *waiter) run(ctx context.Context, first wire.Resharding) error {
	w.start = time.Now()
	w.tty = isTerminal(w.a.stdout) && w.a.g.output != "json"
	deadline := w.start.Add(w.timeout)
	m, raw := first, []byte(nil)
	var lastErr error
	for {
		p, err := w.poll(ctx)
		var apiErr *apiError
		switch {
		case err == nil:
			lastErr = nil
			m, raw = p.m, p.raw
			w.show(p)
		case errors.As(err, &apiErr) && apiErr.Status < 500:
			w.finishDisplay()
			return err // 4xx: the group or resharding is gone, or access was revoked
		case ctx.Err() != nil:
			w.finishDisplay()
			return &exitError{code: exitUnavailable, msg: "interrupted"}
		default:
			lastErr = err // a blip: keep polling until the deadline
			w.showError(err)
		}
		if err == nil {
			switch m.State {
			case stateDeprecated:
				w.finishDisplay()
				return w.done(m, raw, "completed")
			case stateRolledBack:
				w.finishDisplay()
				if err := w.done(m, raw, "was rolled back"); err != nil {
					return err
				}
				return &exitError{code: exitRolledBack}
			}
		}
		now := time.Now()
		if !now.Before(deadline) {
			w.finishDisplay()
			if lastErr != nil {
				return lastErr
			}
			return &exitError{code: exitTimeout, msg: fmt.Sprintf("timed out after %s: resharding %s is still %s (phase %s)", w.timeout, w.id, m.State, m.Phase)}
		}
		sleep := w.interval
		if left := deadline.Sub(now); left < sleep {
			sleep = left
		}
		select {
		case <-ctx.Done():
			w.finishDisplay()
			return &exitError{code: exitUnavailable, msg: "interrupted"}
		case <-time.After(sleep):
		}
	}
}

func (w *waiter) poll(ctx context.Context) (progress, error) {
	var p progress
	m, raw, err := call(ctx, w.a, func(ctx context.Context) (*wire.Resharding, error) {
		return w.a.c.Migration(ctx, w.prefix, w.group, w.id)
	})
	if err != nil {
		return p, err
	}
	p.m, p.raw = *m, raw
	members, _, err := call(ctx, w.a, func(ctx context.Context) ([]wire.MemberMetadata, error) { return w.a.c.Members(ctx, w.prefix, w.group) })
	if err != nil {
		return p, err
	}
	asg, _, err := call(ctx, w.a, func(ctx context.Context) (*wire.Assignments, error) { return w.a.c.Assignments(ctx, w.prefix, w.group) })
	if err != nil {
		return p, err
	}
	current := map[string][]wire.ShardRef{}
	for _, m := range members {
		current[m.MemberID] = m.CurrentAssignment
	}
	for _, id := range slices.Sorted(maps.Keys(asg.TargetAssignment)) {
		p.live = append(p.live, id)
		if sameShards(current[id], asg.TargetAssignment[id]) {
			p.converged++
		} else {
			p.lagging = append(p.lagging, id)
		}
	}
	return p, nil
}

// lines renders a poll as a block (for a terminal).
func (w *waiter) lines(p progress) []string {
	m := p.m
	out := []string{
		fmt.Sprintf("resharding %s  %s / %s  %d -> %d shards (%s)  %s", m.ReshardingID, w.prefix, w.group, m.FromShardCount, m.ToShardCount, m.Kind, time.Since(w.start).Round(100*time.Millisecond)),
		fmt.Sprintf("  state %s   phase %s", m.State, m.Phase),
		"  members converged " + convergedText(p),
	}
	if len(m.Drain) > 0 {
		out = append(out, "  drain of removed shards:")
		for _, d := range m.Drain {
			out = append(out, "    "+drainText(d))
		}
	}
	out = append(out, "  revoke "+revokeText(m))
	return out
}

// line renders a poll as one line (for a log or pipe).
func (w *waiter) line(p progress) string {
	m := p.m
	s := fmt.Sprintf("%s phase=%s members=%s", m.State, m.Phase, convergedText(p))
	for _, d := range m.Drain {
		s += " [" + drainText(d) + "]"
	}
	return s + " revoke=" + revokeText(m)
}

func convergedText(p progress) string {
	s := fmt.Sprintf("%d/%d", p.converged, len(p.live))
	if len(p.lagging) > 0 {
		s += fmt.Sprintf(" (waiting for %v)", p.lagging)
	}
	return s
}

func drainText(d wire.ShardDrainRow) string {
	status := "draining"
	switch {
	case d.Drained:
		status = "drained"
	case len(d.WaitingFor) > 0:
		status = fmt.Sprintf("draining, waiting for consumer groups %v", d.WaitingFor)
	}
	owners := "none"
	if len(d.Owners) > 0 {
		owners = fmt.Sprint(d.Owners)
	}
	return fmt.Sprintf("%s pending=%s lag=%s owners=%s %s", d.StreamKey, formatCount(d.RedisPending), formatCount(d.RedisLag), owners, status)
}

func revokeText(m wire.Resharding) string {
	if m.Revoke.Remaining == 0 {
		if m.Revoke.Started {
			return "done"
		}
		return "none pending"
	}
	s := fmt.Sprintf("%d shard(s) still held:", m.Revoke.Remaining)
	for _, id := range slices.Sorted(maps.Keys(m.Revoke.Holding)) {
		s += fmt.Sprintf(" %s=%s", id, shardList(m.Revoke.Holding[id]))
	}
	return s
}

func (w *waiter) show(p progress) {
	if w.tty {
		w.redraw(w.lines(p))
		return
	}
	line := w.line(p)
	if line == w.lastLine {
		return
	}
	w.lastLine = line
	fmt.Fprintf(w.progressOut(), "%7s %s\n", "+"+time.Since(w.start).Round(100*time.Millisecond).String(), line)
}

func (w *waiter) showError(err error) {
	msg := "poll failed (retrying): " + err.Error()
	if w.tty {
		w.redraw([]string{msg})
		return
	}
	if msg != w.lastLine {
		w.lastLine = msg
		fmt.Fprintln(w.progressOut(), msg)
	}
}

// redraw replaces the previous block: cursor up over it, clear to the end of the screen.
func (w *waiter) redraw(lines []string) {
	out := w.a.stdout
	if w.drawn > 0 {
		fmt.Fprintf(out, "\x1b[%dA\x1b[J", w.drawn)
	}
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
	w.drawn = len(lines)
}

func (w *waiter) finishDisplay() { w.drawn = 0 }

// progressOut keeps stdout clean for the final JSON with -o json.
func (w *waiter) progressOut() io.Writer {
	if w.a.g.output == "json" {
		return w.a.stderr
	}
	return w.a.stdout
}

func (w *waiter) done(m wire.Resharding, raw []byte, what string) error {
	if w.a.g.output == "json" {
		return printJSON(w.a.stdout, raw)
	}
	fmt.Fprintf(w.a.stdout, "resharding %s %s: %s, %d shards, after %s\n", m.ReshardingID, what, m.State, shardsAfter(m), time.Since(w.start).Round(100*time.Millisecond))
	return nil
}

func shardsAfter(m wire.Resharding) int {
	if m.State == stateRolledBack {
		return m.FromShardCount
	}
	return m.ToShardCount
}

// Resharding states that end a resharding.
const (
	stateDeprecated = "DEPRECATED"
	stateRolledBack = "ROLLED_BACK"
)
