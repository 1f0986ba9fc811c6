package redisstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/rscoord/rsc/internal/redistest"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/routing"
)

func TestTokenSecretKey(t *testing.T) {
	for log, want := range map[string]string{
		"coordinator:events": "{coordinator:events}:token-secret",
		"{rsc}:events":       "{rsc}:events:token-secret",
	} {
		got, err := redisstore.TokenSecretKey(log)
		if err != nil || got != want {
			t.Errorf("TokenSecretKey(%q) = %q, %v, want %q", log, got, err, want)
		}
		if routing.Slot(got) != routing.Slot(log) {
			t.Errorf("%q is not in the slot of %q", got, log)
		}
	}
	if _, err := redisstore.TokenSecretKey("a}b"); err == nil {
		t.Error("a log key without a usable slot gave a secret key")
	}
}

// TestIntegrationTokenSecret: replicas starting at once agree on one random
// secret, which survives them; another log has another secret.
func TestIntegrationTokenSecret(t *testing.T) {
	rdb := redistest.StartProcess(t).Client(t)
	ctx := context.Background()
	log := uniqueKey("test:secret")
	got := make([]string, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := redisstore.TokenSecret(ctx, rdb, log)
			if err != nil {
				t.Error(err)
			}
			got[i] = s
		}()
	}
	wg.Wait()
	for i, s := range got {
		if s != got[0] {
			t.Fatalf("replica %d got secret %q, replica 0 %q", i, s, got[0])
		}
	}
	if len(got[0]) < 40 {
		t.Fatalf("secret %q is shorter than 32 random bytes encoded", got[0])
	}
	again, err := redisstore.TokenSecret(ctx, rdb, log)
	if err != nil || again != got[0] {
		t.Fatalf("a restarted replica got %q, %v; want the stored %q", again, err, got[0])
	}
	key, _ := redisstore.TokenSecretKey(log)
	if stored := rdb.Get(ctx, key).Val(); stored != got[0] {
		t.Fatalf("%s holds %q, want %q", key, stored, got[0])
	}
	other, err := redisstore.TokenSecret(ctx, rdb, uniqueKey("test:secret"))
	if err != nil || other == got[0] {
		t.Fatalf("another log's secret %q, %v: want a different one", other, err)
	}
}
