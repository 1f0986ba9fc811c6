package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/routing"
)

func TestSnapshotKeysShareTheNewestsSlot(t *testing.T) {
	for _, logKey := range []string{"coordinator:events", "{rsc}:events"} {
		s := redisstore.NewSnapshotStore(nil, logKey)
		if routing.Slot(s.IDsKey()) != routing.Slot(s.Key()) {
			t.Errorf("log %q: %s is in slot %d, %s in %d", logKey, s.IDsKey(), routing.Slot(s.IDsKey()), s.Key(), routing.Slot(s.Key()))
		}
	}
}

// sidePattern matches the store's keys besides the newest.
func sidePattern(s *redisstore.SnapshotStore) string {
	return strings.TrimSuffix(s.IDsKey(), "ids") + "*"
}

// storeKeys lists the keys of the store's hash tag in Redis, sorted.
func storeKeys(tb testing.TB, rdb *redis.Client, s *redisstore.SnapshotStore) []string {
	tb.Helper()
	keys, err := rdb.Keys(context.Background(), sidePattern(s)).Result()
	if err != nil {
		tb.Fatal(err)
	}
	if n, _ := rdb.Exists(context.Background(), s.Key()).Result(); n == 1 {
		keys = append(keys, s.Key())
	}
	sort.Strings(keys)
	return keys
}

func mustSave(tb testing.TB, s *redisstore.SnapshotStore, id string, keep int) {
	tb.Helper()
	if err := s.Save(context.Background(), id, []byte("state after "+id), keep); err != nil {
		tb.Fatalf("Save(%s, keep %d): %v", id, keep, err)
	}
}

func TestIntegrationSnapshotStoreRotation(t *testing.T) {
	ctx := context.Background()
	_, rdb := MustStartRedis(t)

	t.Run("keeps the newest K", func(t *testing.T) {
		s := redisstore.NewSnapshotStore(rdb, uniqueKey("test:events"))
		for i := 1; i <= 5; i++ {
			mustSave(t, s, fmt.Sprintf("%d-0", i*10), 3)
		}
		kept, err := s.Kept(ctx)
		if err != nil || !slices.Equal(kept, []string{"50-0", "40-0", "30-0"}) {
			t.Fatalf("Kept = %v, %v; want the newest 3, newest first", kept, err)
		}
		if got, _ := s.Load(ctx); string(got) != "state after 50-0" {
			t.Errorf("Load = %q, want the newest at %s", got, s.Key())
		}
		if got, _ := rdb.Get(ctx, s.Key()).Result(); got != "state after 50-0" {
			t.Errorf("%s holds %q, want the newest (tools read it there)", s.Key(), got)
		}
		for _, id := range kept {
			if got, err := s.LoadAt(ctx, id); err != nil || string(got) != "state after "+id {
				t.Errorf("LoadAt(%s) = %q, %v", id, got, err)
			}
		}
		for _, id := range []string{"10-0", "20-0", "35-0"} {
			if got, err := s.LoadAt(ctx, id); err != nil || got != nil {
				t.Errorf("LoadAt(%s) of a snapshot not kept = %q, %v; want nil, nil", id, got, err)
			}
		}
		keys, err := s.Keys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(keys)
		if got := storeKeys(t, rdb, s); !slices.Equal(got, keys) || len(got) != 4 {
			t.Errorf("keys in Redis %v, Keys() %v; want the newest, the id list and 2 older", got, keys)
		}
	})

	t.Run("a smaller keep drops the older ones", func(t *testing.T) {
		s := redisstore.NewSnapshotStore(rdb, uniqueKey("test:events"))
		for i := 1; i <= 4; i++ {
			mustSave(t, s, fmt.Sprintf("%d-0", i), 4)
		}
		mustSave(t, s, "5-0", 1)
		if kept, _ := s.Kept(ctx); !slices.Equal(kept, []string{"5-0"}) {
			t.Fatalf("Kept = %v, want [5-0]", kept)
		}
		if got := storeKeys(t, rdb, s); !slices.Equal(got, sorted(s.IDsKey(), s.Key())) {
			t.Errorf("keys left: %v", got)
		}
	})

	t.Run("never goes backwards", func(t *testing.T) {
		s := redisstore.NewSnapshotStore(rdb, uniqueKey("test:events"))
		mustSave(t, s, "100-5", 2)
		mustSave(t, s, "200-0", 2)
		for _, id := range []string{"200-0", "100-9", "50-0"} {
			err := s.Save(ctx, id, []byte("late"), 2)
			if !errors.Is(err, events.ErrConflict) {
				t.Errorf("Save(%s) after 200-0: %v, want ErrConflict", id, err)
			}
		}
		if kept, _ := s.Kept(ctx); !slices.Equal(kept, []string{"200-0", "100-5"}) {
			t.Errorf("Kept = %v after refused saves", kept)
		}
		if got, _ := s.Load(ctx); string(got) != "state after 200-0" {
			t.Errorf("newest = %q after refused saves", got)
		}
		if err := s.Save(ctx, "not-an-id", nil, 2); err == nil {
			t.Error("Save with a malformed id: no error")
		}
	})

	t.Run("concurrent saves keep the newest", func(t *testing.T) {
		s := redisstore.NewSnapshotStore(rdb, uniqueKey("test:events"))
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for i := 1; i <= 40; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				if err := s.Save(ctx, fmt.Sprintf("%d-0", i), []byte(fmt.Sprintf("state after %d-0", i)), 2); err != nil && !errors.Is(err, events.ErrConflict) {
					errs <- err
				}
			}(i)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		kept, _ := s.Kept(ctx)
		if len(kept) == 0 || kept[0] != "40-0" || len(kept) > 2 {
			t.Fatalf("Kept = %v, want 40-0 newest and at most 2", kept)
		}
		if len(kept) == 2 {
			if c, _ := events.CompareIDs(kept[1], kept[0]); c >= 0 {
				t.Errorf("Kept = %v, not newest first", kept)
			}
		}
		for _, id := range kept {
			if got, _ := s.LoadAt(ctx, id); string(got) != "state after "+id {
				t.Errorf("LoadAt(%s) = %q", id, got)
			}
		}
		if got := storeKeys(t, rdb, s); len(got) != len(kept)+1 {
			t.Errorf("keys left %v for %d kept snapshots", got, len(kept))
		}
	})

	t.Run("a snapshot stored by a build that kept one", func(t *testing.T) {
		s := redisstore.NewSnapshotStore(rdb, uniqueKey("test:events"))
		if err := rdb.Set(ctx, s.Key(), "legacy", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if kept, err := s.Kept(ctx); err != nil || len(kept) != 0 {
			t.Fatalf("Kept = %v, %v; want none (its id is unknown)", kept, err)
		}
		if got, _ := s.Load(ctx); string(got) != "legacy" {
			t.Fatalf("Load = %q", got)
		}
		mustSave(t, s, "7-0", 2)
		if kept, _ := s.Kept(ctx); !slices.Equal(kept, []string{"7-0"}) {
			t.Fatalf("Kept = %v after the first save", kept)
		}
	})

	t.Run("the newest removed by hand", func(t *testing.T) {
		s := redisstore.NewSnapshotStore(rdb, uniqueKey("test:events"))
		mustSave(t, s, "1-0", 3)
		mustSave(t, s, "2-0", 3)
		if err := rdb.Del(ctx, s.Key()).Err(); err != nil {
			t.Fatal(err)
		}
		mustSave(t, s, "3-0", 3)
		if kept, _ := s.Kept(ctx); !slices.Equal(kept, []string{"3-0", "1-0"}) {
			t.Fatalf("Kept = %v, want the lost 2-0 dropped", kept)
		}
		if got, _ := s.LoadAt(ctx, "1-0"); string(got) != "state after 1-0" {
			t.Fatalf("LoadAt(1-0) = %q", got)
		}
	})
}

func sorted(s ...string) []string {
	sort.Strings(s)
	return s
}
