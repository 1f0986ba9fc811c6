package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/internal/procs"
)

// The member process is this same program started again with RSC_DEMO_ROLE=member:
// an ordinary service that imports client/member, nothing more. It writes its
// member events as JSON lines on stdout, which the demo narrates, and records
// what it consumed in Redis, which the demo checks.

const roleEnv = "RSC_DEMO_ROLE"

// memberEvent is one line of the member process's stdout.
type memberEvent struct {
	Member string `json:"member"`
	Kind   string `json:"kind"`
	Shards []int  `json:"shards,omitempty"`
	Count  int    `json:"count,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// memberEnv is the member process's configuration. Heartbeats need the
// MEMBER role: the member authenticates as user (the demo's admin, who holds
// every role).
func memberEnv(coordinatorURL, user, password, redisURL, prefix, group, base string, concurrency int, consumedKey string, lease time.Duration) []string {
	return append(os.Environ(), roleEnv+"=member", "RSC_DEMO_MEMBER_LEASE="+lease.String(),
		"RSC_DEMO_COORDINATOR="+coordinatorURL, "RSC_DEMO_USER="+user, "RSC_DEMO_PASSWORD="+password,
		"RSC_DEMO_REDIS="+redisURL, "RSC_DEMO_PREFIX="+prefix,
		"RSC_DEMO_GROUP="+group, "RSC_DEMO_BASE="+base, "RSC_DEMO_CONCURRENCY="+strconv.Itoa(concurrency),
		"RSC_DEMO_CONSUMED="+consumedKey)
}

// startMemberProcess starts this program again as a member process with env
// (memberEnv's) and passes each event it prints to narrate, on a goroutine
// of its own; done is closed once the process's stdout ends.
func startMemberProcess(label string, env []string, narrate func(memberEvent)) (p *process, done chan struct{}, err error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	if p, err = startProcess(label, cmd); err != nil {
		return nil, nil, err
	}
	done = make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e memberEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				narrate(e)
			}
		}
	}()
	return p, done, nil
}

// runMember is the member process: Listen until SIGTERM, then leave.
func runMember() int {
	opts, err := redis.ParseURL(os.Getenv("RSC_DEMO_REDIS"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "member:", err)
		return 2
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	conc, _ := strconv.Atoi(os.Getenv("RSC_DEMO_CONCURRENCY"))
	consumed := os.Getenv("RSC_DEMO_CONSUMED")
	lease, _ := time.ParseDuration(os.Getenv("RSC_DEMO_MEMBER_LEASE"))

	var outMu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	cfg := member.Config{
		Coordinator: client.New(os.Getenv("RSC_DEMO_COORDINATOR"),
			client.BasicAuth{Username: os.Getenv("RSC_DEMO_USER"), Password: os.Getenv("RSC_DEMO_PASSWORD")}),
		Redis:        rdb,
		StreamPrefix: os.Getenv("RSC_DEMO_PREFIX"), ConsumerGroup: os.Getenv("RSC_DEMO_GROUP"),
		MemberIDBase: os.Getenv("RSC_DEMO_BASE"), Concurrency: conc,
		// Set below the member lease of a coordinator the demo started; else
		// derived from the coordinator's heartbeat interval.
		MemberLease: lease, Block: 100 * time.Millisecond,
		ClaimMinIdle: time.Second, RetryBackoff: time.Second, ShutdownTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		OnEvent: func(e member.Event) {
			outMu.Lock()
			defer outMu.Unlock()
			_ = enc.Encode(memberEvent{Member: e.MemberID, Kind: string(e.Kind), Shards: e.Shards, Count: e.Count, Detail: e.Detail})
		},
	}
	handler := func(ctx context.Context, m member.Message) error {
		time.Sleep(time.Millisecond) // a little work, so there is something in flight
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.SAdd(ctx, consumed, m.Field("eventId"))
			p.HIncrBy(ctx, consumed+":by-member", m.MemberID, 1)
			return nil
		})
		return err
	}
	if ns := os.Getenv("RSC_DEMO_CHECK"); ns != "" {
		handler = seqHandler(rdb, seqKeys(ns)) // the ordered demo
	}
	return procs.UntilSignal("member", func(ctx context.Context) error { return member.Listen(ctx, cfg, handler) })
}
