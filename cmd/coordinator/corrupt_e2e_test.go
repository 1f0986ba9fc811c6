package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/rscoord/rsc/internal/redistest"
)

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestIntegrationUndecodableLogRefusesStart: a corrupt entry, or one of an event
// type this build does not know, stops start-up with a message naming the entry
// id; the coordinator never becomes ready and never skips the entry.
func TestIntegrationUndecodableLogRefusesStart(t *testing.T) {
	parallel(t)
	future, _ := msgpack.Marshal(map[string]any{"type": "group.teleported", "v": 1, "prefix": "p", "group": "g", "time": 1, "payload": []byte{0x80}})
	cases := []struct {
		name string
		data any
		want string
	}{
		{"corrupt bytes", "\xc1\xff not msgpack", "corrupt log entry"},
		{"future event type", future, "unknown event type"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.StartProcess(t)
			rdb := rs.Client(t)
			ctx := context.Background()
			// A healthy history, then the bad entry.
			first := startCoordinator(t, rs, func(m *Main) { m.LogStream = "bad:log" })
			createGroup(t, first, "ok", "g", 2)
			_ = first.Main.Close()
			id, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "bad:log", Values: map[string]any{"e": tc.data}}).Result()
			if err != nil {
				t.Fatal(err)
			}
			logs := &syncBuffer{}
			m := NewMain()
			m.Stderr = logs
			if err := m.ParseFlags([]string{"--listen", "127.0.0.1:0", "--redis", rs.URL(), "--log-stream", "bad:log", "--ignore-snapshot"}); err != nil {
				t.Fatal(err)
			}
			if err := m.Run(ctx); err == nil {
				// Run returned before the fold ended; it fails in the
				// background, and says so in the log.
				defer m.Close()
				eventually(t, 10*time.Second, "the log names the undecodable entry", func() bool {
					out := logs.String()
					return strings.Contains(out, id) && strings.Contains(out, tc.want)
				})
				tcb := &testCoordinator{t: t, URL: m.URL()}
				if r := tcb.DoAs("", "", "GET", "/readyz", nil); r.Status != 503 {
					t.Fatalf("/readyz = %d with an undecodable entry, want 503", r.Status)
				}
			} else if !strings.Contains(err.Error(), id) {
				t.Fatalf("start-up error %q does not name entry %s", err, id)
			}
			out := logs.String()
			if !strings.Contains(out, id) || !strings.Contains(out, tc.want) {
				t.Fatalf("logs do not name entry %s and %q:\n%s", id, tc.want, out)
			}
		})
	}
}
