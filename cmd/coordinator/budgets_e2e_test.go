package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/internal/redistest"
)

// Budgets in bytes and memory, not only in counts (#19).

// budgetRSS reads this process's resident set size and its peak (VmRSS,
// VmHWM) in bytes; 0 where /proc is not there.
func budgetRSS() (rss, peak int64) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = kb << 10
		case "VmHWM":
			peak = kb << 10
		}
	}
	return rss, peak
}

// heapPeak samples the Go heap in use every few milliseconds until stop, and
// returns the highest value seen.
func heapPeak(stop <-chan struct{}) <-chan uint64 {
	out := make(chan uint64, 1)
	go func() {
		var peak uint64
		var ms runtime.MemStats
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
			select {
			case <-stop:
				out <- peak
				return
			case <-t.C:
			}
		}
	}()
	return out
}

// budgetFill adds n entries of size random bytes (JSON escapes each invalid
// UTF-8 byte as 6 characters: the worst case of an answer's growth) to key.
func budgetFill(tb testing.TB, rdb *redis.Client, key string, n, size int) []string {
	tb.Helper()
	ids := make([]string, 0, n)
	buf := make([]byte, size)
	for i := 0; i < n; i++ {
		_, _ = rand.Read(buf)
		id, err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: key, Values: []any{"payload", string(buf), "seq", strconv.Itoa(i)}}).Result()
		if err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// TestIntegrationMessagesByteBudget: with 60 entries of 1 MiB in a shard,
// GET .../shards/0/messages?limit=1000 answered 755 MB and the process grew
// from 36 MB to 1.8 GB. Now every messages answer (the monitoring route, and
// Grafana's one shard, merged shards, tail and record id) stays within
// MaxMessagesAnswerBytes: it ends early, says it was cut, and its cursor
// pages on, so that paging to the end visits every record exactly once. Each
// record is cut to MaxRecordBytes and says so. The log line reports the
// process's RSS and Go heap around the read (the test process runs the
// coordinator in-process), for the lead to measure on a quiet machine.
func TestIntegrationMessagesByteBudget(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	rdb := apiRedis(t, tc)
	apiCreate(t, tc, "big", "g", 1)
	apiCreate(t, tc, "bigm", "g", 2)
	ids := budgetFill(t, rdb, "big:0", 60, 1<<20)
	merged := append(budgetFill(t, rdb, "bigm:0", 15, 1<<20), budgetFill(t, rdb, "bigm:1", 15, 1<<20)...)
	const bound = httpapi.MaxMessagesAnswerBytes

	runtime.GC()
	rssBefore, _ := budgetRSS()
	stop := make(chan struct{})
	peakC := heapPeak(stop)
	first := apiDo(t, tc, "GET", apiMonPath("big", "g", "shards", "0", "messages")+"?limit=1000&direction=FORWARD", nil).apiWant(t, 200)
	close(stop)
	heap := <-peakC
	rssAfter, hwm := budgetRSS()
	t.Logf("60 x 1 MiB entries, limit=1000: answer %d bytes; process RSS %d MiB before, %d MiB after (peak VmHWM %d MiB); Go heap in use at most %d MiB during the read",
		len(first.Body), rssBefore>>20, rssAfter>>20, hwm>>20, heap>>20)
	if len(first.Body) > bound {
		t.Fatalf("answer of %d bytes, over %d", len(first.Body), bound)
	}
	if first.JSON["truncated"] != true || first.JSON["nextCursor"] == nil {
		t.Fatalf("a cut page must say so and go on: truncated %v, nextCursor %v", first.JSON["truncated"], first.JSON["nextCursor"])
	}

	t.Run("paging the monitoring route visits every record once", func(t *testing.T) {
		var seen []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > len(ids) {
				t.Fatal("paging does not end")
			}
			path := apiMonPath("big", "g", "shards", "0", "messages") + "?limit=1000&direction=FORWARD"
			if cursor != "" {
				path += "&cursor=" + cursor
			}
			r := apiDo(t, tc, "GET", path, nil).apiWant(t, 200)
			if len(r.Body) > bound {
				t.Fatalf("page %d: %d bytes", pages, len(r.Body))
			}
			for _, rec := range apiArr(t, r.JSON, "records") {
				m := rec.(map[string]any)
				// Each raw byte decodes to at most one rune (U+FFFD for invalid UTF-8).
				if m["fieldsTruncated"] != true || utf8.RuneCountInString(m["fields"].(map[string]any)["payload"].(string)) > httpapi.MaxRecordBytes {
					t.Fatalf("a 1 MiB record not cut to %d bytes: fieldsTruncated %v", httpapi.MaxRecordBytes, m["fieldsTruncated"])
				}
				seen = append(seen, m["recordId"].(string))
			}
			next, _ := r.JSON["nextCursor"].(string)
			if next == "" {
				break
			}
			cursor = next
		}
		if strings.Join(seen, ",") != strings.Join(ids, ",") {
			t.Fatalf("paged %d records, want the %d in order", len(seen), len(ids))
		}
	})

	gf := func(prefix string, kv ...string) string {
		return gfPath("/messages", append([]string{"streamPrefix", prefix, "consumerGroup", "g", "limit", "1000"}, kv...)...)
	}
	rows := func(path string) ([]map[string]any, int) {
		t.Helper()
		r := apiDo(t, tc, "GET", path, nil).apiWant(t, 200)
		var out []map[string]any
		if err := json.Unmarshal(r.Body, &out); err != nil {
			t.Fatal(err)
		}
		return out, len(r.Body)
	}
	t.Run("every Grafana answer stays within the budget", func(t *testing.T) {
		for _, path := range []string{
			gf("big", "shardIndex", "0", "direction", "FORWARD"),
			gf("big", "shardIndex", "0", "cursor", "__rsc_last__"),
			gf("bigm", "shardIndex", "all", "direction", "FORWARD"),
			gf("bigm", "shardIndex", "all", "cursor", "__rsc_last__"),
			gf("bigm", "recordId", merged[3]),
		} {
			out, size := rows(path)
			if size > bound || len(out) == 0 {
				t.Fatalf("%s: %d rows, %d bytes", path, len(out), size)
			}
			if !strings.Contains(path, "recordId") && out[0]["pageTruncated"] != true {
				t.Errorf("%s: a cut page does not say so", path)
			}
		}
	})
	t.Run("paging merged shards visits every record once", func(t *testing.T) {
		seen := map[string]int{}
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > len(merged) {
				t.Fatal("paging does not end")
			}
			kv := []string{"shardIndex", "all", "direction", "FORWARD"}
			if cursor != "" {
				kv = append(kv, "cursor", cursor)
			}
			out, size := rows(gf("bigm", kv...))
			if size > bound {
				t.Fatalf("page %d: %d bytes", pages, size)
			}
			last := ""
			for _, row := range out {
				id := row["recordId"].(string)
				if last != "" && compareStreamIDs(id, last) < 0 {
					t.Fatalf("page %d out of order: %s after %s", pages, id, last)
				}
				last = id
				seen[fmt.Sprint(row["shardIndex"])+"/"+id]++
			}
			next, _ := out[len(out)-1]["pageNextCursor"].(string)
			if next == "" {
				break
			}
			cursor = next
		}
		if len(seen) != len(merged) {
			t.Fatalf("paged %d distinct records, want %d", len(seen), len(merged))
		}
		for k, n := range seen {
			if n != 1 {
				t.Fatalf("%s seen %d times", k, n)
			}
		}
	})
}

// compareStreamIDs orders "<ms>-<seq>" ids.
func compareStreamIDs(a, b string) int {
	am, as, _ := strings.Cut(a, "-")
	bm, bs, _ := strings.Cut(b, "-")
	x, _ := strconv.ParseUint(am, 10, 64)
	y, _ := strconv.ParseUint(bm, 10, 64)
	if x != y {
		if x < y {
			return -1
		}
		return 1
	}
	p, _ := strconv.ParseUint(as, 10, 64)
	q, _ := strconv.ParseUint(bs, 10, 64)
	switch {
	case p < q:
		return -1
	case p > q:
		return 1
	}
	return 0
}

// budgetCommandStats is Redis's count of calls per command (INFO commandstats).
func budgetCommandStats(tb testing.TB, rdb *redis.Client) map[string]int64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				out[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out
}

// budgetShardReads is the calls of the commands that read shard streams for
// monitoring (the offsets script, and what a read without it would use).
func budgetShardReads(stats map[string]int64) int64 {
	var n int64
	for _, c := range []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "xinfo|stream", "xinfo|groups", "memory|usage", "xlen", "xrange", "xrevrange", "xpending", "time"} {
		n += stats[c]
	}
	return n
}

// TestIntegrationScrapesCostRedisNothing: unauthenticated /metrics cost about
// 30,000 Redis commands per scrape with 10,000 shards, and three scrapers
// slowed another client's heartbeats eightfold. Now /metrics, the Grafana
// rows and the offsets endpoint read a cache of shard streams that a
// background pass refreshes (once per shard per --metrics-interval, at most
// MaxShardReadsPerRefresh shards a pass): 30 rounds of scrapes cost Redis no
// read at all, and a refresh reads each shard once.
func TestIntegrationScrapesCostRedisNothing(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.MetricsInterval = time.Hour // the background passes do not run during the test
		m.ShardCheckInterval = -1
	})
	rdb := apiRedis(t, tc)
	const groups, shards = 3, 16
	for i := 0; i < groups; i++ {
		apiCreate(t, tc, fmt.Sprintf("scrape%d", i), "g", shards)
	}
	scrape := func() {
		tenSend(t, tc.URL, "", apiNoAuth, "GET", "/metrics", nil, nil).apiWant(t, 200)
		apiDo(t, tc, "GET", gfPath("/groups"), nil).apiWant(t, 200)
		apiDo(t, tc, "GET", gfPath("/shards", "streamPrefix", "", "consumerGroup", ""), nil).apiWant(t, 200)
		apiDo(t, tc, "GET", apiMonPath("scrape0", "g", "offsets"), nil).apiWant(t, 200)
	}
	scrape() // the first read of each group fills the cache
	// The counters count the log's appends too (its scripts): a round during
	// which the coordinator appended (a create's follow-up decisions landing
	// late on a loaded machine) is measured again; a round with a quiet log
	// must cost nothing.
	var before, after int64
	for attempt := 1; ; attempt++ {
		lastID := tc.Main.Coordinator().State().LastID()
		before = budgetShardReads(budgetCommandStats(t, rdb))
		for i := 0; i < 30; i++ {
			scrape()
		}
		after = budgetShardReads(budgetCommandStats(t, rdb))
		if after == before {
			break
		}
		if quiet := tc.Main.Coordinator().State().LastID() == lastID; quiet || attempt == 5 {
			t.Fatalf("30 rounds of scrapes cost Redis %d shard reads, want 0 (the log appended during them: %v)", after-before, !quiet)
		}
	}
	calls := budgetCommandStats(t, rdb)["evalsha"]
	tc.Main.server.RefreshOffsets(context.Background())
	stats := budgetCommandStats(t, rdb)
	if got := stats["evalsha"] - calls; got != groups*shards {
		t.Fatalf("a refresh pass made %d calls, want one per shard (%d)", got, groups*shards)
	}
	t.Logf("30 scrape rounds (/metrics, grafana/groups, grafana/shards, offsets): %d Redis commands reading shards; one refresh pass: %d calls (%d commands inside them)",
		after-before, stats["evalsha"]-calls, budgetShardReads(stats)-after)
}
