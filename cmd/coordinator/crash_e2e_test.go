package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/replay"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// coordinatorBinary builds the real binary once per test run.
func coordinatorBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rsc-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "coordinator")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// process runs the coordinator binary; crashAfter sets the crash hook.
func startProcess(t *testing.T, rs *redistest.Server, port int, logStream, crashAfter string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(coordinatorBinary(t), "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--redis", rs.URL(), "--log-stream", logStream,
		"--member-lease", "2s", "--tick-interval", "100ms", "--heartbeat-interval", "200ms", "--rebalance-timeout", "5s", "--snapshot-every", "3", "--snapshot-min-interval", "-1s")
	if crashAfter != "" {
		cmd.Env = append(os.Environ(), "RSC_CRASH_AFTER_EVENT="+crashAfter)
	}
	// Written by exec's copying goroutine, which nobody joins (the process is
	// waited for with Process.Wait): read only through the lock.
	logs := &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		}
		if t.Failed() {
			t.Logf("coordinator logs:\n%s", logs.String())
		}
	})
	return cmd
}

func tryPost(url string, body any) (int, error) {
	data, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", url, bytes.NewReader(data))
	req.SetBasicAuth("admin", "password")
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestIntegrationCrashAtEveryStep kills the coordinator right after each event
// type of create, scale-in, drain, retirement and rollback is appended; a restarted
// coordinator finishes the work, its state equals a fresh replay of the log, and no
// shard was ever held by both of its two members.
func TestIntegrationCrashAtEveryStep(t *testing.T) {
	parallel(t)
	cases := []string{
		"group.created", "member.joined", "resharding.preparing", "resharding.provisioned", "resharding.activated",
		"resharding.draining", "resharding.drained", "resharding.completed", "resharding.retired", "resharding.rolled_back",
	}
	rs := redistest.StartProcess(t)
	rdb := rs.Client(t)
	for i, crashAfter := range cases {
		crashAfter := crashAfter
		t.Run(crashAfter, func(t *testing.T) {
			ctx := context.Background()
			prefix := fmt.Sprintf("crash%d", i)
			logStream := "events:" + prefix
			port := freePort(t)
			url := fmt.Sprintf("http://127.0.0.1:%d", port)
			proc := startProcess(t, rs, port, logStream, crashAfter)
			tc := &testCoordinator{t: t, URL: url, Redis: rs}
			tc.waitReady()
			exited := make(chan struct{})
			go func() { _, _ = proc.Process.Wait(); close(exited) }()

			groupURL := fmt.Sprintf("%s/coord/v1/streams/%s/groups/g", url, prefix)
			_, _ = tryPost(groupURL, map[string]any{"initialShardCount": 4, "requestedBy": "test"})
			// Two members, so that "no shard held by two members" can fail.
			m1 := newSimMember(tc, prefix, "g", "m1", rdb, true)
			m2 := newSimMember(tc, prefix, "g", "m2", rdb, true)
			m1.start(100 * time.Millisecond)
			m2.start(100 * time.Millisecond)
			defer m1.stop()
			defer m2.stop()
			for n := 0; n < 10; n++ {
				rdb.XAdd(ctx, &redis.XAddArgs{Stream: fmt.Sprintf("%s:%d", prefix, 3), Values: map[string]any{"n": n}})
			}
			// Scale in, and (for the rollback case) roll a second resharding back.
			scaleURL := groupURL + "/scale"
			var restarted, shared bool
			restart := func() {
				select {
				case <-exited:
				case <-time.After(20 * time.Second):
					t.Fatalf("coordinator did not crash after %s", crashAfter)
				}
				proc = startProcess(t, rs, port, logStream, "")
				tc.waitReady()
				restarted = true
			}
			crashed := func() bool {
				select {
				case <-exited:
					return true
				default:
					return false
				}
			}
			deadline := time.Now().Add(30 * time.Second)
			step := 0
			for time.Now().Before(deadline) {
				noOverlap(t, m1, m2)
				shared = shared || len(m1.ownedNow()) > 0 && len(m2.ownedNow()) > 0
				if crashed() && !restarted {
					restart()
				}
				g, err := tc.TryDoAs("admin", "password", "GET", fmt.Sprintf("/coord/v1/streams/%s/groups/g", prefix), nil)
				if err != nil {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if g.Status == 404 {
					_, _ = tryPost(groupURL, map[string]any{"initialShardCount": 4, "requestedBy": "test"})
					time.Sleep(50 * time.Millisecond)
					continue
				}
				if g.Status != 200 {
					time.Sleep(50 * time.Millisecond)
					continue
				}
				migs, err := tc.TryDoAs("admin", "password", "GET", fmt.Sprintf("/coord/v1/streams/%s/groups/g/migrations", prefix), nil)
				if err != nil {
					continue
				}
				list, _ := migs.JSON["migrations"].([]any)
				switch {
				case step == 0 && len(list) == 0:
					_, _ = tryPost(scaleURL, map[string]any{"targetShardCount": 2, "requestedBy": "t", "reason": "shrink"})
				case step == 0 && len(list) > 0:
					last := list[len(list)-1].(map[string]any)
					if last["state"] == "DEPRECATED" && last["retirement"] != nil && last["retirement"].(map[string]any)["retired"] == true {
						step = 1
					}
				case step == 1 && len(list) == 1:
					_, _ = tryPost(scaleURL, map[string]any{"targetShardCount": 3, "requestedBy": "t", "reason": "grow"})
				case step == 1 && len(list) == 2:
					last := list[1].(map[string]any)
					switch last["state"] {
					case "ACTIVE", "PREPARING":
						_, _ = tryPost(groupURL+"/migrations/"+last["reshardingId"].(string)+"/rollback", map[string]any{"requestedBy": "t", "reason": "undo"})
					case "ROLLED_BACK", "DEPRECATED":
						step = 2
					}
				}
				if step == 2 && (restarted || crashAfter == "resharding.rolled_back" && crashed()) {
					if crashed() && !restarted {
						restart()
					}
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if step != 2 || !restarted {
				t.Fatalf("did not finish: step %d restarted %v", step, restarted)
			}
			// State served equals a fresh replay of the log.
			log := redisstore.NewLog(rdb, logStream)
			eventually(t, 5*time.Second, "served state equals a fresh fold", func() bool {
				st := projection.New()
				if _, err := projection.Fold(ctx, log, st, projection.FoldOptions{}); err != nil {
					t.Fatal(err)
				}
				fresh, ok := st.Group(projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: "g"})
				if !ok {
					return false
				}
				want, _ := json.Marshal(httpapi.GroupOf(fresh))
				got := tc.Do("GET", fmt.Sprintf("/coord/v1/streams/%s/groups/g", prefix), nil).Body
				var a, b any
				_ = json.Unmarshal(want, &a)
				_ = json.Unmarshal(got, &b)
				wa, _ := json.Marshal(a)
				gb, _ := json.Marshal(b)
				return bytes.Equal(wa, gb)
			})
			res, err := replay.Verify(ctx, log, nil)
			if err != nil || !res.Match {
				t.Fatalf("replay verify: %+v %v", res, err)
			}
			if n := m1.ackedNow() + m2.ackedNow(); n < 10 {
				t.Fatalf("the members acked %d of the 10 entries on the removed shard", n)
			}
			if !shared {
				t.Fatal("the two members never held shards at the same time: the overlap check proved nothing")
			}
		})
	}
}
