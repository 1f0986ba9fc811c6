package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// composeHAImage is the tag TestIntegrationComposeHA builds, apart from
// TestIntegrationCompose's and a developer's rsc-coordinator:local.
const composeHAImage = "rsc-coordinator:compose-ha-test"

// haReplicas are docker-compose.ha.yml's coordinator services.
var haReplicas = []string{"coordinator-1", "coordinator-2", "coordinator-3"}

// haReadyz is the part of GET /readyz an HA replica answers that the test reads.
type haReadyz struct {
	Status    string `json:"status"`
	Role      string `json:"role"`
	Leader    string `json:"leader"`
	LeaderURL string `json:"leaderUrl"`
}

// TestIntegrationComposeHA starts docker-compose.ha.yml (a Redis Cluster of 3
// masters and 3 replicas, and three coordinators with --ha) on free loopback
// ports, waits until every replica is ready and one is the leader, creates a
// group through a follower (forwarded to the leader) and reads it from all
// three, kills the leader's container (SIGKILL), waits for another replica to take the
// lease, scales the group through it and reads the result from the last
// follower.
//
// It runs when TestIntegrationCompose does (composeRequired) and then fails,
// rather than skips, when Docker or Compose is missing.
func TestIntegrationComposeHA(t *testing.T) {
	base := map[string]string{}
	used := map[int]bool{}
	var ports []string
	for i, name := range haReplicas {
		port := composeFreePort(t)
		for used[port] {
			port = composeFreePort(t)
		}
		used[port] = true
		ports = append(ports, fmt.Sprintf("RSC_PORT_%d=%d", i+1, port))
		base[name] = fmt.Sprintf("http://127.0.0.1:%d", port)
	}
	st := startCompose(t, "docker-compose.ha.yml", composeHAImage, "rsccomposeha", ports...)
	run, dc, lap, compose := st.run, st.dc, st.lap, st.compose

	leader := haWaitLeader(t, base, haReplicas, "", 90*time.Second)
	var followers []string
	for _, name := range haReplicas {
		if name != leader {
			followers = append(followers, name)
		}
	}
	lap("wait for ready and a leader")

	group := "/coord/v1/streams/orders/groups/oc"
	code, body := composeRequest(t, "POST", base[followers[0]]+group, `{"initialShardCount": 16, "requestedBy": "compose-ha-test", "reason": "created through a follower"}`, true)
	if code != http.StatusCreated {
		t.Fatalf("create group through follower %s (leader %s): status %d, want 201; body %s", followers[0], leader, code, body)
	}
	for _, name := range haReplicas {
		haWaitShardCount(t, name, base[name]+group, 16, 30*time.Second)
	}
	lap("create via follower, read x3")

	// kill, not stop: a graceful stop releases the lease at once; a crash
	// leaves it to expire (--leader-lease, 5s) before a follower takes over.
	run(time.Minute, compose[0], dc("kill", leader)...)
	lap("kill the leader " + leader)
	newLeader := haWaitLeader(t, base, followers, leader, 30*time.Second)
	lap("wait for a new leader")

	code, body = composeRequest(t, "POST", base[newLeader]+group+"/scale", `{"targetShardCount": 24, "requestedBy": "compose-ha-test", "reason": "after failover"}`, true)
	if code != http.StatusAccepted {
		t.Fatalf("scale through the new leader %s: status %d, want 202; body %s", newLeader, code, body)
	}
	for _, name := range followers {
		if name != newLeader {
			haWaitShardCount(t, name, base[name]+group, 24, 30*time.Second)
		}
	}
	lap("scale via new leader, read")
}

// haGetReadyz reads GET /readyz; ok is false when the replica does not answer
// 200 with a JSON body.
func haGetReadyz(client *http.Client, url string) (r haReadyz, ok bool, last string) {
	resp, err := client.Get(url + "/readyz")
	if err != nil {
		return r, false, err.Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, false, fmt.Sprintf("status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return r, false, fmt.Sprintf("decode /readyz: %v", err)
	}
	return r, true, fmt.Sprintf("%+v", r)
}

// haWaitLeader polls /readyz of replicas until every one is READY, exactly
// one of them reports role LEADER, it is not notLeader, every replica names it
// as the leader and the followers also give its advertised URL. It returns the leader's service
// name (the coordinator id docker-compose.ha.yml gives it).
func haWaitLeader(t *testing.T, base map[string]string, replicas []string, notLeader string, timeout time.Duration) string {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	var seen []string
	for {
		seen = seen[:0]
		leaders, agree := []string{}, true
		views := map[string]haReadyz{}
		for _, name := range replicas {
			r, ok, last := haGetReadyz(client, base[name])
			seen = append(seen, name+": "+last)
			if !ok || r.Status != "READY" {
				agree = false
				continue
			}
			views[name] = r
			if r.Role == "LEADER" {
				leaders = append(leaders, name)
			}
		}
		if agree && len(leaders) == 1 && leaders[0] != notLeader {
			leader := leaders[0]
			want := "http://" + leader + ":8080"
			for name, r := range views {
				if r.Leader != leader || (name != leader && (r.Role != "FOLLOWER" || r.LeaderURL != want)) {
					agree = false
				}
			}
			if agree {
				return leader
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no single leader other than %q among %v within %s; last /readyz:\n%s", notLeader, replicas, timeout, strings.Join(seen, "\n"))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// haWaitShardCount polls the group at url on replica name until it reports
// want shards: a follower folds the log the leader appends a moment later.
func haWaitShardCount(t *testing.T, name, url string, want int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code, body := composeRequest(t, "GET", url, "", true)
		var g struct {
			ShardCount int `json:"shardCount"`
		}
		if code == http.StatusOK && json.Unmarshal(body, &g) == nil && g.ShardCount == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s on %s: want shardCount %d within %s; last: status %d, body %s", url, name, want, timeout, code, composeTail(body))
		}
		time.Sleep(250 * time.Millisecond)
	}
}
