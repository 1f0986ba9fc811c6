package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rscoord/rsc/internal/procs"
)

// LeaderLease is the --leader-lease of a ReplicaSet: short, so a takeover
// after a kill takes about a second (members' heartbeats fail over meanwhile).
const LeaderLease = time.Second

// ReplicaSet is several coordinator processes with --ha on one log. Kill kills
// the current leader; Start restarts every replica that is down and waits
// until one leads. After ArmCrash every replica is killed and restarted with
// the crash hook, so whichever leads next crashes after that event and another
// one takes over.
type ReplicaSet struct {
	Replicas []*CoordinatorProcess
	armed    bool
}

// NewReplicaSet describes n replicas (not started) of bin on redisURL and
// logStream, each on a free loopback port, logging to dir/replica-<i>.log.
func NewReplicaSet(bin, redisURL, logStream, dir string, n int) (*ReplicaSet, error) {
	s := &ReplicaSet{}
	for i := range n {
		port, err := procs.FreePort()
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		s.Replicas = append(s.Replicas, &CoordinatorProcess{
			Bin: bin, RedisURL: redisURL, LogStream: logStream, Addr: addr,
			LogPath: filepath.Join(dir, fmt.Sprintf("replica-%d.log", i)),
			Args: append(slices.Clone(CoordinatorTimings), "--ha", "--leader-lease", LeaderLease.String(),
				"--advertise-url", "http://"+addr, "--coordinator-id", fmt.Sprintf("replica-%d", i)),
		})
	}
	return s, nil
}

// URL is every replica's base URL, comma-separated (what client.NewCoordinator takes).
func (s *ReplicaSet) URL() string {
	urls := make([]string, len(s.Replicas))
	for i, c := range s.Replicas {
		urls[i] = c.URL()
	}
	return strings.Join(urls, ",")
}

// Stream is the event log's key.
func (s *ReplicaSet) Stream() string { return s.Replicas[0].LogStream }

// Start starts every replica that is down and waits until one leads.
func (s *ReplicaSet) Start(ctx context.Context) error {
	s.armed = false
	for _, c := range s.Replicas {
		if err := c.Start(ctx); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for s.Leader() < 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("no replica leads 30s after the start:\n%s", s.Tail(10))
		}
		if err := Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// Leader is the index of the replica that reports role LEADER, or -1.
func (s *ReplicaSet) Leader() int {
	hc := &http.Client{Timeout: time.Second}
	for i, c := range s.Replicas {
		if !c.Running() {
			continue
		}
		resp, err := hc.Get(c.URL() + "/readyz")
		if err != nil {
			continue
		}
		var r struct{ Role string }
		_ = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if r.Role == "LEADER" {
			return i
		}
	}
	return -1
}

// Kill kills the leader (every replica after ArmCrash) with SIGKILL.
func (s *ReplicaSet) Kill() {
	if s.armed {
		for _, c := range s.Replicas {
			c.Kill()
		}
		return
	}
	if i := s.Leader(); i >= 0 {
		s.Replicas[i].Kill()
		return
	}
	s.Replicas[0].Kill()
}

// ArmCrash arms the crash hook on every replica's next start (see Kill).
func (s *ReplicaSet) ArmCrash(eventType string) {
	s.armed = true
	for _, c := range s.Replicas {
		c.ArmCrash(eventType)
	}
}

// Exited reports the first replica that exited by itself.
func (s *ReplicaSet) Exited() (bool, string, string) {
	for _, c := range s.Replicas {
		if exited, status, armed := c.Exited(); exited {
			return true, status, armed
		}
	}
	return false, "", ""
}

// Tail is the last n lines of every replica's log.
func (s *ReplicaSet) Tail(n int) string {
	var b strings.Builder
	for i, c := range s.Replicas {
		fmt.Fprintf(&b, "--- replica-%d\n%s\n", i, c.Tail(n))
	}
	return b.String()
}

// Stop stops every replica (SIGTERM).
func (s *ReplicaSet) Stop() {
	for _, c := range s.Replicas {
		c.Stop()
	}
}
