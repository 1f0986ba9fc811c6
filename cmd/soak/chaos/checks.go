package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/client"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/replay"
)

// CheckLog folds the whole log into a fresh projection with projection.Fold
// (the fold the coordinator uses) and after every event checks that no
// shard of group k is held (granted, owned or revoking) by two members that
// can hold shards. It returns the number of events folded and one line per
// violation (a violation lasting several events is reported once, at its
// first event).
func CheckLog(ctx context.Context, log events.Log, k projection.GroupKey) (int, []string, error) {
	st := projection.New()
	var violations []string
	active := map[string]bool{}
	n, err := projection.Fold(ctx, log, st, projection.FoldOptions{After: func(rec events.Record) {
		g, ok := st.Group(k)
		if !ok {
			return
		}
		now := map[string]bool{}
		for _, v := range projection.ViewAssignments(g).InvariantViolations {
			if !strings.Contains(v, "held by more than one member") {
				continue
			}
			now[v] = true
			if !active[v] {
				violations = append(violations, fmt.Sprintf("log entry %s (%s): %s", rec.ID, rec.Type, v))
			}
		}
		active = now
	}})
	return n, violations, err
}

// CompareServed compares the group the coordinator serves (GET the group) with
// httpapi.GroupOf of a fresh fold of the log, as normalized JSON. It
// reports whether they are equal and, if not, both documents.
func CompareServed(ctx context.Context, admin *client.Client, rdb redis.UniversalClient, logStream string, k projection.GroupKey) (bool, string, error) {
	var served json.RawMessage
	if err := admin.Do(ctx, http.MethodGet, client.GroupPath(k.StreamPrefix, k.ConsumerGroup), nil, &served); err != nil {
		return false, "", err
	}
	st := projection.New()
	if _, err := projection.Fold(ctx, redisstore.NewLog(rdb, logStream), st, projection.FoldOptions{}); err != nil {
		return false, "", err
	}
	g, ok := st.Group(k)
	if !ok {
		return false, "", fmt.Errorf("group %s/%s is not in the log", k.StreamPrefix, k.ConsumerGroup)
	}
	folded, err := json.Marshal(httpapi.GroupOf(g))
	if err != nil {
		return false, "", err
	}
	a, b := normalizeJSON(served), normalizeJSON(folded)
	if bytes.Equal(a, b) {
		return true, "", nil
	}
	return false, fmt.Sprintf("served: %s\nfolded: %s", a, b), nil
}

func normalizeJSON(data []byte) []byte {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return data
	}
	out, _ := json.Marshal(v)
	return out
}

// VerifyReplay runs replay.Verify on the log with the stored snapshot (loaded
// first, so the live log cannot be behind it).
func VerifyReplay(ctx context.Context, rdb redis.UniversalClient, logStream string) (*replay.VerifyResult, error) {
	snap, err := redisstore.NewSnapshotStore(rdb, logStream).Load(ctx)
	if err != nil {
		return nil, err
	}
	return replay.Verify(ctx, redisstore.NewLog(rdb, logStream), snap)
}
