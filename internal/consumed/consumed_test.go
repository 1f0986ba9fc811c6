package consumed

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
)

func TestMissingAcrossChunks(t *testing.T) {
	srv := redistest.StartProcess(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	var ids, want []string
	for i := range 2*chunk + 1 { // three SMISMEMBER calls, the last of one id
		id := fmt.Sprintf("e%d", i)
		ids = append(ids, id)
		if i%700 == 0 || i == 2*chunk {
			want = append(want, id)
			continue
		}
		if err := rdb.SAdd(ctx, "consumed", id).Err(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Missing(ctx, rdb, "consumed", ids)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Missing = %v, want %v", got, want)
	}
	if got, err := Missing(ctx, rdb, "consumed", nil); err != nil || got != nil {
		t.Fatalf("no ids: %v, %v", got, err)
	}
}
