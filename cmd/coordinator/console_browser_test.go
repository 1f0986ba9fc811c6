package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/rscoord/rsc/internal/redistest"
)

// consoleChromiumPath is Debian's chromium package. The test does not install
// it: CI does (.ci/setup.sh), a developer machine may not have it. Without it
// the test skips, and fails instead when RSC_REQUIRE_BROWSER=1 (make test and
// make test-integration set it) or CI is set.
const consoleChromiumPath = "/usr/bin/chromium"

// consoleNeedChromium skips the test without Chromium, or fails it when
// RSC_REQUIRE_BROWSER=1 or CI is set.
func consoleNeedChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(consoleChromiumPath); err != nil {
		if consoleBrowserRequired() {
			t.Fatalf("%s is missing (%v), required because RSC_REQUIRE_BROWSER=1 or CI is set: run .ci/setup.sh (Debian's chromium package)", consoleChromiumPath, err)
		}
		t.Skipf("%s is missing: install Debian's chromium package to run the console browser tests (RSC_REQUIRE_BROWSER=1 fails instead)", consoleChromiumPath)
	}
}

// consoleBrowserRequired reports whether a missing Chromium fails the test.
func consoleBrowserRequired() bool {
	for _, name := range []string{"RSC_REQUIRE_BROWSER", "CI"} {
		switch v := strings.ToLower(strings.TrimSpace(os.Getenv(name))); v {
		case "", "0", "false", "no":
		default:
			return true
		}
	}
	return false
}

// TestIntegrationConsoleBrowser drives the operator console in a real headless
// Chromium against a real coordinator: log in, find the group, read the
// ownership grid, open an event of the history and see the group as it was then.
// chromedp speaks the DevTools protocol from Go, so no Node toolchain is needed.
func TestIntegrationConsoleBrowser(t *testing.T) {
	consoleNeedChromium(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	const prefix, group = "console", "checkout"
	groupAPI := "/coord/v1/monitoring/streams/" + prefix + "/groups/" + group

	// A group of 4 shards, two converged members, then a scale-in to 2 that
	// runs to completion, so the history holds a whole resharding.
	tc.Do("POST", "/coord/v1/streams/"+prefix+"/groups/"+group, map[string]any{"initialShardCount": 4, "requestedBy": "console-test", "reason": "browser test"}).MustStatus(t, 201)
	members := []*consoleMember{{id: "member-a"}, {id: "member-b"}}
	consoleSettle(t, tc, prefix, group, members, "two members with 2 shards each", func(g map[string]any) bool {
		return g["state"] == "STABLE" && len(members[0].owned) == 2 && len(members[1].owned) == 2
	})
	tc.Do("POST", "/coord/v1/streams/"+prefix+"/groups/"+group+"/scale", map[string]any{"targetShardCount": 2, "requestedBy": "console-test", "reason": "fewer shards"}).MustStatus(t, 202)
	consoleSettle(t, tc, prefix, group, members, "the scale-in to 2 shards to complete", func(g map[string]any) bool {
		return g["state"] == "STABLE" && g["activeMigration"] == nil && g["shardCount"] == 2.0 && g["assignableShardCount"] == 2.0
	})
	preparing := consoleEventID(t, tc, groupAPI, "resharding.preparing")
	activated := consoleEventID(t, tc, groupAPI, "resharding.activated")

	ctx := consoleBrowser(t)
	jsErrors := consoleWatchErrors(t, ctx)

	// Log in and find the group in the overview.
	consoleDo(t, ctx, "log in",
		chromedp.Navigate(tc.URL+"/console/"),
		chromedp.WaitVisible(chromedp.ID("login-form")),
		chromedp.SendKeys(chromedp.ID("login-username"), "admin"),
		chromedp.SendKeys(chromedp.ID("login-password"), "password"),
		chromedp.Click(chromedp.ID("login-submit")),
	)
	row := chromedp.CSS(fmt.Sprintf(`#groups-table tr[data-group="%s/%s"]`, prefix, group))
	consoleDo(t, ctx, "see the group in the overview", chromedp.WaitVisible(row))
	if text := consoleRun(t, ctx, "read the overview row", chromedp.Text(row)); !strings.Contains(text, "STABLE") || !strings.Contains(text, prefix) {
		t.Fatalf("overview row %q: want the prefix and state STABLE", text)
	}
	consoleWaitFor(t, ctx, "the group's lag status in the overview", fmt.Sprintf(`document.querySelector('#groups-table tr[data-group="%s/%s"] td[data-field="lag"]').textContent === 'OK 0.0 s'`, prefix, group))

	// The live group page: both members, the 2 routed shards.
	consoleDo(t, ctx, "open the group page",
		chromedp.Click(chromedp.CSS(fmt.Sprintf(`#groups-table tr[data-group="%s/%s"] a`, prefix, group))),
		chromedp.WaitVisible(chromedp.CSS(`#grid th[data-member="member-a"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#grid th[data-member="member-b"]`)),
	)
	consoleWaitFor(t, ctx, "the live grid with 2 shard rows", `document.querySelectorAll('#grid tr[data-shard]').length === 2 && document.querySelector('#summary [data-field="shardCount"]').textContent === '2'`)
	consoleWaitFor(t, ctx, "every shard owned in the live grid", `[...document.querySelectorAll('#grid tr[data-shard]')].every(r => r.querySelector('td[data-flags*="C"]'))`)

	// The lag in time: an entry 5 s old by Redis's clock waits on shard 0.
	// The cell shows its age to the millisecond against the Redis clock of
	// the read (in its title, with the entry's id); the status is OK (a
	// member holds the shard, and one read is no window).
	rdb := tc.Redis.Client(t)
	t0 := lagRedisMs(t, rdb)
	waiting := lagXAdd(t, rdb, prefix+":0", t0-5000)
	tc.Main.server.RefreshOffsets(context.Background())
	consoleWaitFor(t, ctx, "the lag in seconds of shard 0", fmt.Sprintf(`(() => {
		const c = document.querySelector('#grid tr[data-shard="0"] td[data-field="lagSeconds"]');
		if (!c || !c.title.startsWith(%q)) return false;
		const redisMs = Number(c.title.match(/Redis time (\d+)/)[1]);
		return c.textContent === ((redisMs - %d) / 1000).toFixed(3) && Number(c.textContent) >= 5;
	})()`, waiting, t0-5000))
	consoleWaitFor(t, ctx, "the lag status of the shards and the group", `document.querySelector('#grid tr[data-shard="0"] td[data-field="lagStatus"]').textContent === 'OK' && document.querySelector('#grid tr[data-shard="1"] td[data-field="oldestPendingSeconds"]').textContent === '0.000' && document.querySelector('#summary [data-field="lagStatus"]').textContent === 'OK'`)
	consoleScreenshot(t, ctx, "console-lag.png")

	// The history: the group as it was when the scale-in was requested.
	entry := chromedp.CSS(fmt.Sprintf(`#history-rows a[data-id="%s"]`, preparing))
	consoleDo(t, ctx, "open the resharding.preparing event", chromedp.WaitVisible(entry), chromedp.Click(entry), chromedp.WaitVisible(chromedp.ID("asof-banner")))
	consoleWaitFor(t, ctx, "the replay as of "+preparing, fmt.Sprintf(`document.getElementById('asof-id').textContent === %q && document.querySelectorAll('#grid tr[data-shard]').length === 4 && document.querySelector('#summary [data-field="shardCount"]').textContent === '4' && !!document.querySelector('#grid th[data-member="member-a"]') && !!document.querySelector('#grid th[data-member="member-b"]') && !document.getElementById('asof-end')`, preparing))
	if banner := consoleRun(t, ctx, "read the banner", chromedp.Text(chromedp.ID("asof-banner"))); !strings.Contains(banner, "As of event "+preparing) {
		t.Fatalf("banner %q: want %q", banner, "As of event "+preparing)
	}

	// Once activated, shards 2 and 3 are no longer routed but still owned: the
	// grid marks them as removed while they drain.
	entry = chromedp.CSS(fmt.Sprintf(`#history-rows a[data-id="%s"]`, activated))
	consoleDo(t, ctx, "open the resharding.activated event", chromedp.Click(entry))
	// The activation's decision goes on after it (the new target
	// assignment): the replay shows the state after the whole decision, says
	// so, and breaks no invariant.
	consoleWaitFor(t, ctx, "the replay as of "+activated, fmt.Sprintf(`document.getElementById('asof-id').textContent === %q && document.querySelector('#summary [data-field="shardCount"]').textContent === '2' && document.querySelectorAll('#grid tr.removed[data-shard]').length === 2 && document.querySelectorAll('#grid tr[data-shard]').length === 4 && !!document.getElementById('asof-end') && !document.querySelector('.violations')`, activated))

	consoleScreenshot(t, ctx, "console.png")

	consoleDo(t, ctx, "go back to live", chromedp.Click(chromedp.ID("back-to-live")), chromedp.WaitNotVisible(chromedp.ID("asof-banner")))
	consoleWaitFor(t, ctx, "the live grid again", `document.querySelectorAll('#grid tr[data-shard]').length === 2 && document.querySelector('#summary [data-field="shardCount"]').textContent === '2'`)

	if errs := jsErrors(); len(errs) > 0 {
		t.Fatalf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}
}

// consoleScreenshot saves the whole page as name in the test's temporary
// directory, and in RSC_ARTIFACTS_DIR when set.
func consoleScreenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png := consoleRun(t, ctx, "take a screenshot", chromedp.FullScreenshot(100))
	shot := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", shot)
	if dir := os.Getenv("RSC_ARTIFACTS_DIR"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot copied to %s", filepath.Join(dir, name))
	}
}

// consoleMember is a member driven from the test goroutine: it adopts what each
// answer assigns, as the reference clients do.
type consoleMember struct {
	id        string
	epoch, mv int64
	owned     []int
}

func (m *consoleMember) beat(tc *testCoordinator, prefix, group string) {
	r := tc.Heartbeat(prefix, group, m.id, m.epoch, m.mv, m.owned)
	switch r.Status {
	case "OK":
		m.epoch, m.mv, m.owned = r.MemberEpoch, r.MetadataVersion, r.Assigned
	case "SYNC_METADATA", "REVOKE_PENDING":
		m.epoch, m.mv = r.MemberEpoch, r.MetadataVersion
		var kept []int
		for _, s := range m.owned {
			for _, a := range r.Assigned {
				if s == a {
					kept = append(kept, s)
				}
			}
		}
		m.owned = kept
	default:
		m.epoch, m.mv, m.owned = 0, 0, nil
	}
}

// consoleSettle heartbeats every member until done holds for the group's view.
func consoleSettle(t *testing.T, tc *testCoordinator, prefix, group string, members []*consoleMember, what string, done func(g map[string]any) bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, m := range members {
			m.beat(tc, prefix, group)
		}
		g := tc.Do("GET", "/coord/v1/monitoring/streams/"+prefix+"/groups/"+group, nil).MustStatus(t, 200)
		if done(g.JSON) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; group %s", what, g.Body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// consoleEventID is the id of the group's first audit event of this type.
func consoleEventID(t *testing.T, tc *testCoordinator, groupAPI, typ string) string {
	t.Helper()
	r := tc.Do("GET", groupAPI+"/events?limit=1000", nil).MustStatus(t, 200)
	evs, _ := r.JSON["events"].([]any)
	for _, e := range evs {
		ev, _ := e.(map[string]any)
		if ev["type"] == typ {
			return ev["id"].(string)
		}
	}
	t.Fatalf("no %s event in the group's history: %s", typ, r.Body)
	return ""
}

// consoleBrowser starts a headless Chromium with a fresh profile for 45 s; the
// test's cleanup stops it before the profile directory is removed.
func consoleBrowser(t *testing.T) context.Context {
	t.Helper()
	return consoleBrowserFor(t, 45*time.Second)
}

// consoleBrowserFor is consoleBrowser for a test whose browser steps take up to d.
func consoleBrowserFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	profile := filepath.Join(t.TempDir(), "chromium-profile")
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(consoleChromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1440, 1000),
	)
	ctx, cancelTab := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, d)
	t.Cleanup(func() {
		cancelTimeout()
		cancelTab()
		cancelAlloc() // waits for the browser to exit
	})
	return ctx
}

// consoleWatchErrors collects uncaught exceptions and console.error calls of
// the page; the returned func reads them.
func consoleWatchErrors(t *testing.T, ctx context.Context) func() []string {
	t.Helper()
	var mu sync.Mutex
	var errs []string
	err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg = fmt.Sprintf("uncaught: %s at %s:%d:%d", d.Text, d.URL, d.LineNumber+1, d.ColumnNumber+1)
			if d.Exception != nil && d.Exception.Description != "" {
				msg += ": " + d.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type != runtime.ConsoleAPICalledTypeError {
				return
			}
			var parts []string
			for _, a := range ev.Args {
				if a.Description != "" {
					parts = append(parts, a.Description)
				} else {
					parts = append(parts, string(a.Value))
				}
			}
			msg = "console.error: " + strings.Join(parts, " ")
		default:
			return
		}
		mu.Lock()
		errs = append(errs, msg)
		mu.Unlock()
	})
	if err != nil {
		t.Fatalf("start the browser: %v", err)
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// consoleDo runs browser steps; on failure it reports what the page showed.
func consoleDo(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v%s", what, err, consolePageState(ctx))
	}
}

// consoleRun runs one browser action and returns its value.
func consoleRun[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v%s", what, err, consolePageState(ctx))
	}
	return v
}

// consoleWaitFor waits up to 10 s until a JavaScript condition on the page holds.
func consoleWaitFor(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	consoleWaitForUpTo(t, ctx, what, cond, 10*time.Second)
}

// consoleWaitForUpTo waits up to d until a JavaScript condition on the page holds.
func consoleWaitForUpTo(t *testing.T, ctx context.Context, what, cond string, d time.Duration) {
	t.Helper()
	wait := chromedp.Poll[bool](cond, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(d))
	if _, err := chromedp.Run(ctx, wait); err != nil {
		t.Fatalf("waiting for %s: %v%s", what, err, consolePageState(ctx))
	}
}

// consolePageState is the page's URL, error banner and text, for failure messages.
func consolePageState(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	state, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\nerror banner: " + document.getElementById('error').textContent + "\npage text:\n" + document.body.innerText.slice(0, 3000)`))
	if err != nil {
		return ""
	}
	return "\n" + state
}

// TestIntegrationConsoleBrowserBarriersAndAutoscaling: the console shows an
// ordered group's waiting barriers (which shard holds its entries after which
// id, and on which shard up to which id it waits, with what Redis showed), and
// the group's autoscaling policy. A 2 -> 4 scale-out of an ordering-KEY group
// whose shards hold unread entries makes the new shards 2 and 3 wait on 0 and
// 1; a dry-run autoscaling policy is configured beside it.
func TestIntegrationConsoleBrowserBarriersAndAutoscaling(t *testing.T) {
	consoleNeedChromium(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	const prefix, group = "ordcon", "billing"
	base := "/coord/v1/streams/" + prefix + "/groups/" + group
	createOrderedGroup(t, tc, prefix, group, 2)
	rdb := apiRedis(t, tc)
	fill(t, rdb, prefix, 0, 3, 1)
	fill(t, rdb, prefix, 1, 3, 1)
	tc.Do("POST", base+"/scale", map[string]any{"targetShardCount": 4, "requestedBy": "console-test", "reason": "more shards"}).MustStatus(t, 202)
	tc.Do("PUT", base+"/autoscaling", map[string]any{"enabled": true, "minShards": 2, "maxShards": 8, "targetEntriesPerSecondPerShard": 500,
		"dryRun": true, "requestedBy": "console-test", "reason": "watch first"}).MustStatus(t, 200)

	ctx := consoleBrowser(t)
	jsErrors := consoleWatchErrors(t, ctx)
	consoleDo(t, ctx, "log in",
		chromedp.Navigate(tc.URL+"/console/"),
		chromedp.WaitVisible(chromedp.ID("login-form")),
		chromedp.SendKeys(chromedp.ID("login-username"), "admin"),
		chromedp.SendKeys(chromedp.ID("login-password"), "password"),
		chromedp.Click(chromedp.ID("login-submit")),
	)
	link := chromedp.CSS(fmt.Sprintf(`#groups-table tr[data-group="%s/%s"] a`, prefix, group))
	consoleDo(t, ctx, "open the group page", chromedp.WaitVisible(link), chromedp.Click(link))
	consoleWaitFor(t, ctx, "the barriers of shards 2 and 3", `!!document.querySelector('tr[data-barrier-shard="2"]') && !!document.querySelector('tr[data-barrier-shard="3"]') && !document.querySelector('tr[data-barrier-shard="0"]')`)
	consoleWaitFor(t, ctx, "shard 2 waiting on shard 0, read from Redis", fmt.Sprintf(`(() => { const s = document.querySelector('tr[data-barrier-shard="2"] [data-source="%s:0"]'); return !!s && s.textContent.includes('up to') && s.textContent.includes('delivered to'); })()`, prefix))
	consoleWaitFor(t, ctx, "the dry-run autoscaling policy", `(() => { const s = document.getElementById('autoscaling-state'); return !!s && s.textContent.includes('dry run'); })()`)
	if text := consoleRun(t, ctx, "read the autoscaling card", chromedp.Text(chromedp.ID("autoscaling"))); !strings.Contains(text, "2–8 shards") || !strings.Contains(text, "target 500 entries/s") {
		t.Fatalf("autoscaling card %q: want the policy's bounds and target", text)
	}

	// The members read and acknowledge shards 0 and 1: the barriers go.
	readAll(t, rdb, prefix, group, 0, false)
	readAll(t, rdb, prefix, group, 1, false)
	consoleWaitFor(t, ctx, "the barriers released", `!document.querySelector('tr[data-barrier-shard]')`)
	if errs := jsErrors(); len(errs) > 0 {
		t.Fatalf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}
}
