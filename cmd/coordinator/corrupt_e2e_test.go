package main

import (
	"bytes"
	"context"
	"fmt"
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

// TestIntegrationUndecodableLogRefusesStart: an entry whose envelope cannot
// be read, or one of an event type this build does not know that names no
// stream prefix (nothing confines it to one), stops the load with a message
// naming the entry id; the coordinator never becomes ready and never skips
// the entry: it answers every API route (but login) with 409
// COORDINATOR_METADATA_CORRUPT naming it, and /readyz with 503
// METADATA_CORRUPT. (An unknown type naming a prefix quarantines that prefix
// alone: TestIntegrationUnknownEntryQuarantinesOnePrefix.)
func TestIntegrationUndecodableLogRefusesStart(t *testing.T) {
	parallel(t)
	future, _ := msgpack.Marshal(map[string]any{"type": "log.teleported", "v": 1, "time": 1, "payload": []byte{0x80}})
	cases := []struct {
		name string
		data any
		want string
	}{
		{"corrupt bytes", "\xc1\xff not msgpack", "corrupt log entry"},
		{"future event type of no prefix", future, "unknown event type"},
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
			if err := m.Run(ctx); err != nil {
				t.Fatalf("Run: %v; want the coordinator up, refusing to answer from the log", err)
			}
			defer m.Close()
			eventually(t, 10*time.Second, "the log names the undecodable entry", func() bool {
				out := logs.String()
				return strings.Contains(out, id) && strings.Contains(out, tc.want)
			})
			tcb := &testCoordinator{t: t, URL: m.URL()}
			r := tcb.DoAs("", "", "GET", "/readyz", nil)
			if r.Status != 503 || r.JSON["status"] != "METADATA_CORRUPT" || r.JSON["errorCode"] != "COORDINATOR_METADATA_CORRUPT" || !strings.Contains(fmt.Sprint(r.JSON["message"]), id) {
				t.Fatalf("/readyz with an undecodable entry: HTTP %d %s, want 503 METADATA_CORRUPT naming %s", r.Status, r.Body, id)
			}
			// Nothing is answered from a state built around the entry:
			// reads, writes and heartbeats alike are 409, naming it;
			// signing in still works.
			for _, c := range []struct {
				method, path string
				body         any
			}{
				{"GET", "/coord/v1/monitoring/groups", nil},
				{"GET", "/coord/v1/streams/ok/groups/g/producer-routing", nil},
				{"GET", "/coord/v1/streams/ok/producer-routing", nil},
				{"POST", "/coord/v1/streams/ok/groups/g/scale", map[string]any{"targetShardCount": 3, "requestedBy": "ops", "reason": "r"}},
				{"POST", "/coord/v1/streams/ok/groups/g/members/m1/heartbeat", heartbeatBody("m1", 0, 0, nil, nil)},
			} {
				r := tcb.Do(c.method, c.path, c.body)
				if r.Status != 409 || r.JSON["errorCode"] != "COORDINATOR_METADATA_CORRUPT" || !strings.Contains(fmt.Sprint(r.JSON["message"]), id) {
					t.Errorf("%s %s with an undecodable entry: HTTP %d %s, want 409 COORDINATOR_METADATA_CORRUPT naming %s", c.method, c.path, r.Status, r.Body, id)
				}
			}
			if r := tcb.Do("POST", "/coord/v1/auth/login", map[string]any{"username": "admin", "password": "password"}); r.Status != 200 {
				t.Errorf("login with an undecodable entry: HTTP %d %s", r.Status, r.Body)
			}
			out := logs.String()
			if !strings.Contains(out, id) || !strings.Contains(out, tc.want) {
				t.Fatalf("logs do not name entry %s and %q:\n%s", id, tc.want, out)
			}
		})
	}
}
