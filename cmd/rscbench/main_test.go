package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rscoord/rsc/internal/redistest"
)

// These tests run every command in a tiny mode to check that it works and that
// its report is well formed. They assert nothing about speed.

type result struct {
	code           int
	stdout, stderr string
}

func runBench(args ...string) result {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

func mustRun(t *testing.T, args ...string) result {
	t.Helper()
	r := runBench(args...)
	if r.code != 0 {
		t.Fatalf("rscbench %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// jsonReport is the -json output as a reader sees it.
type jsonReport struct {
	Command  string `json:"command"`
	Env      Env    `json:"env"`
	Sections []struct {
		Name    string         `json:"name"`
		Params  map[string]any `json:"params"`
		Results []Result       `json:"results"`
	} `json:"sections"`
}

func decodeReport(t *testing.T, out string) jsonReport {
	t.Helper()
	var rep jsonReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("decode -json output: %v\n%s", err, out)
	}
	return rep
}

// checkReport checks the sections are there and every measured figure names a
// baseline of its own section, with a ratio.
func checkReport(t *testing.T, rep jsonReport, sections ...string) map[string]map[string]Result {
	t.Helper()
	got := map[string]map[string]Result{}
	for _, s := range rep.Sections {
		byName := map[string]Result{}
		for _, r := range s.Results {
			byName[r.Name] = r
		}
		got[s.Name] = byName
		for _, r := range s.Results {
			if r.Kind != kindMeasured {
				continue
			}
			b, ok := byName[r.Baseline]
			if !ok || b.Kind != kindBaseline {
				t.Errorf("%s: %q names baseline %q, which is not a baseline of the section", s.Name, r.Name, r.Baseline)
			}
			if r.Ratio == nil || *r.Ratio <= 0 || r.Value <= 0 {
				t.Errorf("%s: %q = %v with ratio %v; want a positive value and ratio", s.Name, r.Name, r.Value, r.Ratio)
			}
		}
	}
	for _, name := range sections {
		if got[name] == nil {
			t.Errorf("section %s missing; have %v", name, rep.Sections)
		}
	}
	return got
}

func value(t *testing.T, sections map[string]map[string]Result, section, name string) float64 {
	t.Helper()
	r, ok := sections[section][name]
	if !ok {
		t.Fatalf("%s: no result %q", section, name)
	}
	return r.Value
}

// noKeysLeft checks a run removed everything it wrote to a shared Redis.
func noKeysLeft(t *testing.T, srv *redistest.Server) {
	t.Helper()
	keys, err := srv.Client(t).Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Errorf("%d keys left in Redis, e.g. %v", len(keys), keys[:min(len(keys), 5)])
	}
}

func TestLogTiny(t *testing.T) {
	srv := redistest.StartProcess(t)
	r := mustRun(t, "log", "--events", "2000", "--append-slice", "20ms", "--append-rounds", "2", "--reps", "2", "--redis", srv.URL(), "-json")
	rep := decodeReport(t, r.stdout)
	got := checkReport(t, rep, "log.append", "log.fold", "log.replay", "log.startup", "log.trim")
	for _, s := range rep.Sections {
		if (s.Name == "log.fold" || s.Name == "log.replay" || s.Name == "log.startup" || s.Name == "log.trim") && s.Params["events"] != float64(2000) {
			t.Errorf("%s: events = %v, want 2000", s.Name, s.Params["events"])
		}
	}
	if v := value(t, got, "log.startup", "snapshot size"); v <= 0 {
		t.Errorf("snapshot size = %v", v)
	}
	if v := value(t, got, "log.trim", "entries removed"); v != 1800 {
		t.Errorf("entries removed by the trim = %v, want 1800 (all but the last tenth)", v)
	}
	if v := value(t, got, "log.trim", "entries archived (resharding and admin)"); v <= 0 || v >= 1800 {
		t.Errorf("entries archived = %v, want some of the 1800 removed", v)
	}
	for _, name := range []string{"Log.Append batch=1", "Log.Append batch=64"} {
		value(t, got, "log.append", name)
	}
	noKeysLeft(t, srv)
}

func TestHeartbeatTiny(t *testing.T) {
	srv := redistest.StartProcess(t)
	r := mustRun(t, "heartbeat", "--members", "200", "--groups", "2", "--shards", "16", "--requests", "400", "--concurrency", "8",
		"--rebalance-members", "20", "--rebalance-shards", "64", "--leavers", "2", "--redis", srv.URL(), "-json")
	got := checkReport(t, decodeReport(t, r.stdout), "heartbeat.steady", "heartbeat.rebalance")
	if v := value(t, got, "heartbeat.steady", "events appended per steady heartbeat"); v != 0 {
		t.Errorf("events appended per steady heartbeat = %v, want 0", v)
	}
	for _, name := range []string{"coordinator p50", "coordinator p99", "coordinator throughput"} {
		value(t, got, "heartbeat.steady", name)
	}
	if v := value(t, got, "heartbeat.rebalance", "join: shards assigned, empty -> stable"); v != 64 {
		t.Errorf("join: shards assigned = %v, want all 64", v)
	}
	// Every shard a leaver held moves, so moved >= least always. The others
	// need not: the members left hold q or q+1 shards each, and the leavers'
	// shards go to the least loaded, so balance holds without moving anything
	// else. A sticky assignor moves exactly the leavers' shards.
	moved := value(t, got, "heartbeat.rebalance", "leave: shards moved between stable states")
	least := value(t, got, "heartbeat.rebalance", "leave: minimum (the leavers' shards)")
	if least <= 0 || moved != least {
		t.Errorf("leave: moved %v shards, want exactly the leavers' %v", moved, least)
	}
	noKeysLeft(t, srv)
}

func TestOrderingTiny(t *testing.T) {
	srv := redistest.StartProcess(t)
	r := mustRun(t, "ordering", "--backlogs", "0,300", "--ordering-load", "200", "--ordering-reps", "1",
		"--publish-slice", "20ms", "--publish-rounds", "1", "--redis", srv.URL(), "-json")
	got := checkReport(t, decodeReport(t, r.stdout), "ordering.pause", "ordering.publish")
	if v := value(t, got, "ordering.pause", "backlog 300: handled without a resharding"); v <= 0 {
		t.Errorf("drain of the backlog took %v ms", v)
	}
	paused := 0
	for name, res := range got["ordering.pause"] {
		if strings.HasPrefix(name, "backlog 300, 4 -> ") && res.Value > 0 {
			paused++
		}
	}
	if paused != 2 {
		t.Errorf("want a pause for 4 -> 8 and 4 -> 6 with a backlog of 300: %v", got["ordering.pause"])
	}
	for _, name := range []string{"fenced single publish", "fenced PublishBatch of 64"} {
		if r := got["ordering.publish"][name]; r.Ratio == nil {
			t.Errorf("ordering.publish: %q has no ratio: %+v", name, r)
		}
	}
	noKeysLeft(t, srv)
}

func TestNoisyTiny(t *testing.T) {
	srv := redistest.StartProcess(t)
	r := mustRun(t, "noisy", "--noisy-records", "200", "--churners", "2", "--noisy-joins", "20", "--passes", "2", "--redis", srv.URL(), "-json")
	got := checkReport(t, decodeReport(t, r.stdout), "noisy.neighbour")
	if v := value(t, got, "noisy.neighbour", "flood joins and leaves"); v <= 0 {
		t.Errorf("the flood made %v joins and leaves a second", v)
	}
	if v := value(t, got, "noisy.neighbour", "member records in the noisy group at the end"); v < 200 {
		t.Errorf("the noisy group holds %v records, want at least the 200 it started with", v)
	}
	noKeysLeft(t, srv)
}

func TestRebalanceTable(t *testing.T) {
	r := mustRun(t, "rebalance", "--rebalance-members", "20", "--rebalance-shards", "64", "--leavers", "2")
	for _, want := range []string{"== heartbeat.rebalance", "join: rounds until stable", "leave: shards moved between stable states", "(baseline)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
}

// TestAllStartsAndStopsItsOwnRedis runs `all` without --redis: it starts a
// throwaway redis-server and stops it before returning.
func TestAllStartsAndStopsItsOwnRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("RSC_REQUIRE_DOCKER") == "1" || (os.Getenv("CI") != "" && os.Getenv("CI") != "false" && os.Getenv("CI") != "0") {
			t.Fatalf("redis-server is required here: %v", err)
		}
		t.Skipf("redis-server is not installed: %v", err)
	}
	r := mustRun(t, "all", "--quick", "--events", "1000", "--append-slice", "10ms", "--append-rounds", "1", "--reps", "1",
		"--members", "40", "--groups", "2", "--shards", "8", "--requests", "80", "--concurrency", "4",
		"--rebalance-members", "10", "--rebalance-shards", "32", "--leavers", "1",
		"--backlogs", "0,200", "--ordering-load", "100", "--publish-slice", "10ms", "--publish-rounds", "1", "-json")
	rep := decodeReport(t, r.stdout)
	checkReport(t, rep, "log.append", "log.fold", "log.replay", "log.startup", "log.trim", "heartbeat.steady", "heartbeat.rebalance",
		"ordering.pause", "ordering.publish", "noisy.neighbour")
	addr, ok := strings.CutPrefix(rep.Env.RedisSource, "throwaway redis-server ")
	if !ok {
		t.Fatalf("redisSource = %q, want a throwaway server", rep.Env.RedisSource)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("the throwaway redis-server at %s still accepts connections", addr)
	}
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"no command", nil, 2},
		{"unknown command", []string{"nope"}, 2},
		{"unknown flag", []string{"log", "--nope"}, 2},
		{"too few events", []string{"log", "--events", "10"}, 2},
		{"more leavers than members", []string{"rebalance", "--rebalance-members", "3", "--leavers", "3"}, 2},
		{"bad backlog list", []string{"ordering", "--backlogs", "0,x"}, 2},
		{"negative backlog", []string{"ordering", "--backlogs", "-1"}, 2},
		{"stray argument", []string{"rebalance", "extra"}, 2},
		{"help", []string{"help"}, 0},
		{"command help", []string{"heartbeat", "-h"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if r := runBench(tc.args...); r.code != tc.code {
				t.Errorf("exit %d, want %d\nstderr:\n%s", r.code, tc.code, r.stderr)
			}
		})
	}
}

func TestFormatNumber(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0"},
		{7, "7"},
		{1234567, "1,234,567"},
		{-1234, "-1,234"},
		{1234.6, "1,235"},
		{123.45, "123.5"},
		{1.2345, "1.23"},
		{0.012345, "0.0123"},
	} {
		if got := formatNumber(tc.in); got != tc.want {
			t.Errorf("formatNumber(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
