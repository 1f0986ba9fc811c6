package replay

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rscoord/rsc/projection"
)

// groupName is how text output names a group.
func groupName(k projection.GroupKey) string { return k.StreamPrefix + "/" + k.ConsumerGroup }

// intList renders shard indexes as "[0 1 2]" ("[]" when empty).
func intList(s []int) string {
	parts := make([]string, len(s))
	for i, v := range s {
		parts[i] = strconv.Itoa(v)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// shardRange names the shards [lo, hi): "shard 4", "shards 4..7".
func shardRange(lo, hi int) string {
	if hi-lo == 1 {
		return fmt.Sprintf("shard %d", lo)
	}
	return fmt.Sprintf("shards %d..%d", lo, hi-1)
}

// timeText renders a decision time for text output ("-" when unknown).
func timeText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// orNone renders an empty string as "-".
func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// joinAnd joins "a", "a and b", "a, b and c".
func joinAnd(items []string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// kind names a resharding's direction as the API does.
func kind(from, to int) string {
	switch {
	case to > from:
		return "SCALE_OUT"
	case to < from:
		return "SCALE_IN"
	}
	return "NOOP"
}
