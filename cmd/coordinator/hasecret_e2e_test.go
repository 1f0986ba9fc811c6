package main

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rscoord/rsc/redisstore"
)

// The reproduction: in --ha the token and cluster secret kept in
// Redis was read once at start. Its key lost (eviction, a restart without
// persistence, FLUSHALL) and a follower restarted, that follower made a new
// secret: writes it forwarded were refused (403) and each replica's tokens
// were refused by the other (401), both replicas READY. Now the replicas put
// the secret they hold back within seconds, the restarted follower reads it,
// and a secret that differs from a replica's is reported on its /readyz.
func TestIntegrationHASecretLostIsPutBack(t *testing.T) {
	users := apiUsersFile(t, []map[string]any{{"username": "ops", "password": "ops-pw", "roles": []string{"ADMIN"}}})
	h, rdb := startHA(t, 2, "--users-file", users)
	ctx := context.Background()
	leader := h.waitLeader(20 * time.Second)
	follower := 1 - leader
	replica := func(i int) *testCoordinator { return &testCoordinator{t: t, URL: h.replicas[i].URL()} }
	ops := apiBasic("ops", "ops-pw")
	key, err := redisstore.TokenSecretKey(h.log)
	if err != nil {
		t.Fatal(err)
	}
	held := rdb.Get(ctx, key).Val()
	if held == "" {
		t.Fatalf("%s holds no secret", key)
	}

	if err := rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	apiEventually(t, 10*time.Second, "the replicas to put the secret back", func() (bool, string) {
		v, err := rdb.Get(ctx, key).Result()
		return err == nil && v == held, v
	})
	h.replicas[follower].Stop()
	if err := h.replicas[follower].Start(ctx); err != nil {
		t.Fatal(err)
	}
	h.waitLeader(20 * time.Second)

	// A write through the restarted follower is forwarded and accepted.
	apiSend(t, replica(follower), ops, "POST", apiGroupPath("sec", "g"), map[string]any{"initialShardCount": 1, "requestedBy": "test"}, nil).apiWant(t, 201)
	// A token either replica issued is accepted by the other.
	for i := range 2 {
		login := apiSend(t, replica(i), apiNoAuth, "POST", "/coord/v1/auth/login", map[string]any{"username": "ops", "password": "ops-pw"}, nil).apiWant(t, 200)
		tok := apiAuth("Bearer " + login.JSON["accessToken"].(string))
		apiSend(t, replica(1-i), tok, "GET", apiGroupPath("sec", "g"), nil, nil).apiWant(t, 200)
	}

	// Another secret in the key (written by a replica started while the key
	// was gone, or by hand) is reported by every replica until it is put back.
	if err := rdb.Set(ctx, key, "another-secret", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		apiEventually(t, 10*time.Second, "replica-"+strconv.Itoa(i)+" to report the mismatch", func() (bool, string) {
			r := apiSend(t, replica(i), apiNoAuth, "GET", "/readyz", nil, nil)
			return r.Status == 503 && r.JSON["errorCode"] == "TOKEN_SECRET_MISMATCH", string(r.Body)
		})
	}
	if err := rdb.Set(ctx, key, held, 0).Err(); err != nil {
		t.Fatal(err)
	}
	h.waitLeader(20 * time.Second)
}
