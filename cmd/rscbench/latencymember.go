package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	sdkmember "github.com/rscoord/rsc/client/member"
	"github.com/rscoord/rsc/internal/procs"
)

// latencyMemberEnv makes rscbench run as one member process of the latency
// benchmark (runLatencyMember) instead of a command: the benchmark starts
// its members as processes so that it can kill one with SIGKILL.
const latencyMemberEnv = "RSCBENCH_LATENCY_MEMBER"

// runLatencyMember runs one member with the SDK's defaults (held heartbeats
// unless RSCBENCH_PLAIN=1) until SIGTERM, then leaves gracefully. For every
// message it handles it prints "<n> <published ns> <handled ns>" to stdout;
// the benchmark reads the lines.
func runLatencyMember() int {
	opts, err := redis.ParseURL(os.Getenv("RSCBENCH_REDIS"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "rscbench member:", err)
		return 2
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	out := &lineWriter{w: os.Stdout}
	cfg := sdkmember.Config{
		Coordinator: client.New(os.Getenv("RSCBENCH_COORDINATOR"), client.BasicAuth{Username: "admin", Password: "password"}),
		Redis:       rdb, StreamPrefix: os.Getenv("RSCBENCH_PREFIX"), ConsumerGroup: os.Getenv("RSCBENCH_GROUP"),
		MemberIDBase: os.Getenv("RSCBENCH_MEMBER"), PlainHeartbeats: os.Getenv("RSCBENCH_PLAIN") == "1",
	}
	handler := func(_ context.Context, m sdkmember.Message) error {
		now := time.Now().UnixNano()
		n, err1 := strconv.ParseInt(m.Field("n"), 10, 64)
		t, err2 := strconv.ParseInt(m.Field("t"), 10, 64)
		if err1 == nil && err2 == nil {
			out.line(n, t, now)
		}
		return nil
	}
	return procs.UntilSignal("rscbench member", func(ctx context.Context) error { return sdkmember.Listen(ctx, cfg, handler) })
}

// lineWriter prints the handled messages' lines, one write each, before
// the handler returns (so before the ack): a process killed with SIGKILL has
// reported every message it acked, and one it handled without acking is
// delivered again and reported by its next owner.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lineWriter) line(n, published, handled int64) {
	var buf [64]byte
	b := strconv.AppendInt(buf[:0], n, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, published, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, handled, 10)
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(b)
}
