// Package consumed checks what the demo and the soak published against what
// their handlers recorded as consumed: the ids of the messages handled, kept
// in a Redis set so that a killed member process loses none of them.
package consumed

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// chunk is how many ids one SMISMEMBER asks about.
const chunk = 1000

// Missing returns the ids that are not members of the set key, in the order
// of ids, asking chunk ids at a time.
func Missing(ctx context.Context, rdb redis.Cmdable, key string, ids []string) ([]string, error) {
	var out []string
	for start := 0; start < len(ids); start += chunk {
		part := ids[start:min(start+chunk, len(ids))]
		members := make([]any, len(part))
		for i, id := range part {
			members[i] = id
		}
		found, err := rdb.SMIsMember(ctx, key, members...).Result()
		if err != nil {
			return nil, err
		}
		for i, ok := range found {
			if !ok {
				out = append(out, part[i])
			}
		}
	}
	return out, nil
}
