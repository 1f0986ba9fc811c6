package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/internal/redistest"
)

// TestIntegrationConsoleBrowserWrites drives the console's write controls in a
// real Chromium against a real coordinator: sign-in (a wrong password and an
// account without console access refused), creating a stream and a group,
// scaling the stream out with the target field and the group back in with −1,
// a set and a disabled autoscaling policy, rolling back an active scale-out
// (plainly, then with "policy":"drain" once an entry reached a new shard).
// Every confirm dialog is cancelled once first: the log then holds no event of
// the user. Each change is checked in the log with requestedBy = the signed-in
// user and the console's reason. A READ user sees no write control, and a
// user scoped to pay-* sees them only on pay-* streams.
func TestIntegrationConsoleBrowserWrites(t *testing.T) {
	consoleNeedChromium(t)
	users := apiUsersFile(t, []map[string]any{
		{"username": "admin", "password": "password", "roles": []string{"ADMIN"}},
		{"username": "viewer", "password": "v-pw", "roles": []string{"READ"}},
		{"username": "payops", "password": "p-pw", "roles": []string{"WRITE"}, "prefixes": []string{"pay-*"}},
		{"username": "member", "password": "m-pw", "roles": []string{"MEMBER"}},
	})
	// A member that heartbeats once stays live for the test: a scale-out it
	// never converges to stays active until it is rolled back.
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) {
		m.UsersFile = users
		m.MemberLease = 5 * time.Minute
	})
	const prefix, group = "orders", "billing"
	billing := "/coord/v1/monitoring/streams/" + prefix + "/groups/" + group

	ctx := consoleBrowserFor(t, 3*time.Minute)
	jsErrors := consoleWatchErrors(t, ctx)
	consoleDo(t, ctx, "open the console", chromedp.Navigate(tc.URL+"/console/"), chromedp.WaitVisible(chromedp.ID("login-form")))

	// Sign-in: a wrong password and an account without READ are refused.
	consoleSignIn(t, ctx, "admin", "wrong")
	consoleWaitFor(t, ctx, "the wrong password refused", `(() => { const e = document.getElementById('login-error'); return !e.hidden && e.textContent === 'Wrong username or password.' && !document.getElementById('login').hidden; })()`)
	consoleSignIn(t, ctx, "member", "m-pw")
	consoleWaitFor(t, ctx, "the MEMBER account refused", `document.getElementById('login-error').textContent.includes('no console access') && !document.getElementById('login').hidden`)
	consoleSignIn(t, ctx, "admin", "password")
	consoleDo(t, ctx, "see the create form", chromedp.WaitVisible(chromedp.ID("create-form")))
	if who := consoleRun(t, ctx, "read the session", chromedp.Text(chromedp.ID("session"))); !strings.Contains(who, "admin") || !strings.Contains(who, "ADMIN") {
		t.Fatalf("top bar %q: want the user and its roles", who)
	}

	// Create the stream: cancelled first, then confirmed with a typed reason.
	consoleDo(t, ctx, "fill in the stream",
		consoleClick("#create-kind-stream"),
		chromedp.SendKeys(chromedp.ID("create-prefix"), prefix),
		chromedp.SendKeys(chromedp.ID("create-shards"), "2"),
	)
	before := consoleEventsBy(t, tc, "admin")
	consoleDo(t, ctx, "ask to create the stream", consoleClick("#create-submit"))
	consoleExpectDialog(t, ctx, "Create stream orders with 2 shards")
	consoleCancel(t, ctx)
	if after := consoleEventsBy(t, tc, "admin"); len(after) != len(before) {
		t.Fatalf("cancelled stream create wrote %d event(s) of admin: %v", len(after)-len(before), after[len(before):])
	}
	consoleDo(t, ctx, "create the stream",
		consoleClick("#create-submit"),
		chromedp.WaitVisible(chromedp.ID("confirm-reason")),
		chromedp.SendKeys(chromedp.ID("confirm-reason"), "first stream"),
	)
	consoleExpectDialog(t, ctx, "Create stream orders with 2 shards")
	if body := consoleRun(t, ctx, "read the request", chromedp.TextContent(chromedp.ID("confirm-body"))); !strings.Contains(body, `"requestedBy": "admin"`) || !strings.Contains(body, `"reason": "console stream create: first stream"`) || !strings.Contains(body, `"initialShardCount": 2`) {
		t.Fatalf("the dialog's request body %s: want initialShardCount 2, requestedBy admin and the console's reason with the typed one", body)
	}
	consoleConfirm(t, ctx)
	consoleWaitStatus(t, ctx, "create-status", "ok", "Created stream orders with 2 shards")
	// The stream is listed before any group joins it (GET /monitoring/streams).
	consoleWaitFor(t, ctx, "the new stream listed without groups", `(() => { const r = document.querySelector('#streams-table tr[data-stream="orders"]'); return !!r && r.querySelector('[data-field="shardCount"]').textContent === '2' && r.querySelector('[data-field="metadataVersion"]').textContent === '1' && r.textContent.includes('none yet'); })()`)
	if st := tc.Do("GET", "/coord/v1/streams/"+prefix, nil).MustStatus(t, 200); len(st.JSON["consumerGroups"].([]any)) != 0 {
		t.Fatalf("the console's stream create made a consumer group: %s", st.Body)
	}
	created := consoleEventsBy(t, tc, "admin")[len(before):]
	if len(created) == 0 || !consoleAudited(created[0], "admin", "console stream create: first stream") || created[0]["streamPrefix"] != prefix {
		t.Fatalf("after the stream create, admin's events %v: want one of prefix %s with requestedBy admin and the console's reason", created, prefix)
	}

	// The same again: the coordinator refuses, and says so at the form.
	consoleDo(t, ctx, "create the stream again", consoleClick("#create-submit"))
	consoleExpectDialog(t, ctx, "Create stream orders with 2 shards")
	consoleConfirm(t, ctx)
	consoleWaitStatus(t, ctx, "create-status", "err", "Refused (HTTP 409")

	// Create the group.
	consoleDo(t, ctx, "fill in the group",
		consoleClick("#create-kind-group"),
		chromedp.WaitVisible(chromedp.ID("create-group")),
		chromedp.SendKeys(chromedp.ID("create-group"), group),
		consoleClick("#create-submit"),
	)
	consoleExpectDialog(t, ctx, "Create consumer group orders/billing with 2 shards")
	consoleConfirm(t, ctx)
	consoleWaitStatus(t, ctx, "create-status", "ok", "Created consumer group orders/billing with 2 shards")
	consoleDo(t, ctx, "see the group", chromedp.WaitVisible(chromedp.CSS(`#groups-table tr[data-group="orders/billing"]`)))

	// Scale the stream out with the target field: cancelled, then confirmed.
	row := `#streams-table tr[data-stream="orders"]`
	consoleDo(t, ctx, "type the target",
		chromedp.WaitVisible(chromedp.CSS(row+" .scale-target")),
		chromedp.SendKeys(chromedp.CSS(row+" .scale-target"), "4"),
	)
	before = consoleEventsBy(t, tc, "admin")
	consoleDo(t, ctx, "ask to scale the stream", consoleClick(row+" .scale-submit"))
	consoleExpectDialog(t, ctx, "Scale stream orders from 2 to 4 shards")
	consoleCancel(t, ctx)
	if after := consoleEventsBy(t, tc, "admin"); len(after) != len(before) {
		t.Fatalf("cancelled stream scale wrote %d event(s) of admin: %v", len(after)-len(before), after[len(before):])
	}
	consoleDo(t, ctx, "scale the stream", consoleClick(row+" .scale-submit"))
	consoleExpectDialog(t, ctx, "Scale stream orders from 2 to 4 shards")
	consoleConfirm(t, ctx)
	consoleWaitFor(t, ctx, "the stream scale's answer", fmt.Sprintf(`(() => { const s = document.querySelector(%q); return !!s && s.classList.contains('ok') && s.textContent.includes('Scale of stream orders to 4 shards requested'); })()`, row+" .write-status"))
	consoleSettle(t, tc, prefix, group, nil, "billing at 4 shards", func(g map[string]any) bool {
		return g["shardCount"] == 4.0 && g["activeMigration"] == nil
	})
	consoleExpectResharding(t, tc, billing, 2, 4, "admin", "console shard scale")
	consoleScreenshot(t, ctx, "console-overview.png")

	// The group page: 0 names a full drain (cancelled), then −1.
	consoleDo(t, ctx, "open the group page",
		consoleClick(`#groups-table tr[data-group="orders/billing"] a`),
		chromedp.WaitVisible(chromedp.ID("scale-card")),
	)
	consoleWaitFor(t, ctx, "the scale card at 4 shards", `document.getElementById('scale-current').textContent === '4 shards routed now.' && !document.getElementById('scale-minus').disabled`)
	before = consoleEventsBy(t, tc, "admin")
	consoleDo(t, ctx, "ask for 0 shards", chromedp.SendKeys(chromedp.ID("scale-target"), "0"), consoleClick("#scale-submit"))
	consoleExpectDialog(t, ctx, "Scale orders/billing from 4 to 0 shards")
	if note := consoleRun(t, ctx, "read the drain note", chromedp.Text(chromedp.ID("confirm-note"))); !strings.Contains(note, "0 is a full drain") {
		t.Fatalf("the dialog for 0 shards says %q: want it to name a full drain", note)
	}
	consoleCancel(t, ctx)
	consoleDo(t, ctx, "ask for one shard fewer", consoleClick("#scale-minus"))
	consoleExpectDialog(t, ctx, "Scale orders/billing from 4 to 3 shards")
	consoleCancel(t, ctx)
	if after := consoleEventsBy(t, tc, "admin"); len(after) != len(before) {
		t.Fatalf("cancelled group scales wrote %d event(s) of admin: %v", len(after)-len(before), after[len(before):])
	}
	consoleDo(t, ctx, "scale in by one", consoleClick("#scale-minus"))
	consoleExpectDialog(t, ctx, "Scale orders/billing from 4 to 3 shards")
	consoleConfirm(t, ctx)
	consoleWaitStatus(t, ctx, "scale-status", "ok", "4 → 3")
	consoleSettle(t, tc, prefix, group, nil, "billing scaled in to 3 shards", func(g map[string]any) bool {
		return g["shardCount"] == 3.0 && g["activeMigration"] == nil
	})
	consoleExpectResharding(t, tc, billing, 4, 3, "admin", "console shard scale")
	consoleWaitFor(t, ctx, "the scale card at 3 shards", `document.getElementById('scale-current').textContent === '3 shards routed now.'`)

	// Autoscaling: set a dry-run policy, then turn it off.
	consoleDo(t, ctx, "fill in a policy",
		consoleClick("#as-edit"),
		chromedp.WaitVisible(chromedp.ID("autoscaling-form")),
		chromedp.SendKeys(chromedp.ID("as-min"), "2"),
		chromedp.SendKeys(chromedp.ID("as-max"), "8"),
		chromedp.SendKeys(chromedp.ID("as-target"), "500"),
		consoleClick("#as-dryrun"),
		consoleClick("#as-submit"),
	)
	consoleExpectDialog(t, ctx, "Set the autoscaling policy of orders/billing: 2–8 shards, target 500 entries/s per shard; dry run (recommends, does not scale)")
	consoleConfirm(t, ctx)
	consoleWaitStatus(t, ctx, "autoscaling-status", "ok", "Autoscaling policy set by admin")
	consoleWaitFor(t, ctx, "the dry-run policy on the card", `(() => { const s = document.getElementById('autoscaling-state'); return !!s && s.textContent.includes('dry run') && !document.getElementById('as-off').hidden; })()`)
	policy := tc.Do("GET", "/coord/v1/streams/"+prefix+"/groups/"+group+"/autoscaling", nil).MustStatus(t, 200)
	if p, _ := policy.JSON["policy"].(map[string]any); p == nil || p["requestedBy"] != "admin" || p["reason"] != "console autoscaling set" || p["dryRun"] != true || p["minShards"] != 2.0 || p["maxShards"] != 8.0 {
		t.Fatalf("the policy set from the console: %s", policy.Body)
	}
	consoleDo(t, ctx, "turn autoscaling off", consoleClick("#as-off"))
	consoleExpectDialog(t, ctx, "Turn off autoscaling of orders/billing: the shard count then changes only when an operator scales it")
	consoleConfirm(t, ctx)
	consoleWaitStatus(t, ctx, "autoscaling-status", "ok", "Autoscaling turned off by admin")
	consoleWaitFor(t, ctx, "autoscaling off on the card", `document.getElementById('as-off').hidden && (!!document.getElementById('autoscaling-none') || document.getElementById('autoscaling-state').textContent === 'off')`)
	if ev := consoleLastEvent(t, tc, billing, "autoscaling.disabled"); ev == nil || !consoleAudited(ev, "admin", "console autoscaling disable") {
		t.Fatalf("autoscaling.disabled from the console: %v", ev)
	}

	// A member joins and converges on 3 shards, then never heartbeats again:
	// the next scale-out stays active, and the console rolls it back.
	members := []*consoleMember{{id: "member-a"}}
	consoleSettle(t, tc, prefix, group, members, "member-a owning the 3 shards", func(g map[string]any) bool {
		return g["state"] == "STABLE" && len(members[0].owned) == 3
	})
	consoleDo(t, ctx, "scale out by one", consoleClick("#scale-plus"))
	consoleExpectDialog(t, ctx, "Scale orders/billing from 3 to 4 shards")
	consoleConfirm(t, ctx)
	consoleWaitStatus(t, ctx, "scale-status", "ok", "3 → 4")
	consoleWaitFor(t, ctx, "the plain rollback offered", `!!document.querySelector('#rollback-button[data-policy="plain"]') && document.getElementById('scale-plus').disabled`)
	consoleDo(t, ctx, "roll back", consoleClick("#rollback-button"))
	first := consoleExpectDialogPrefix(t, ctx, "Roll back resharding reshard-")
	if !strings.HasSuffix(first, " of orders/billing: from 4 back to 3 shards") {
		t.Fatalf("rollback dialog %q: want it to name the group and both counts", first)
	}
	consoleConfirm(t, ctx)
	consoleWaitStatus(t, ctx, "rollback-status", "ok", "Rollback of reshard-")
	if ev := consoleLastEvent(t, tc, billing, "resharding.rolled_back"); ev == nil || !consoleAudited(ev, "admin", "console rollback") || consolePayload(ev)["policy"] == "drain" {
		t.Fatalf("plain rollback from the console: %v", ev)
	}
	consoleSettle(t, tc, prefix, group, nil, "the scale-out rolled back", func(g map[string]any) bool {
		return g["shardCount"] == 3.0 && g["activeMigration"] == nil
	})

	// Once an entry reached a new shard only a drain can roll back: the
	// console offers "policy":"drain" and says why.
	consoleWaitFor(t, ctx, "the scale card at 3 shards again", `document.getElementById('scale-current').textContent === '3 shards routed now.' && !document.getElementById('scale-plus').disabled`)
	consoleDo(t, ctx, "scale out by one again", consoleClick("#scale-plus"))
	consoleExpectDialog(t, ctx, "Scale orders/billing from 3 to 4 shards")
	consoleConfirm(t, ctx)
	consoleWaitFor(t, ctx, "the plain rollback offered again", `!!document.querySelector('#rollback-button[data-policy="plain"]')`)
	rdb := apiRedis(t, tc)
	if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: prefix + ":3", Values: []string{"payload", "early"}}).Err(); err != nil {
		t.Fatal(err)
	}
	consoleWaitForUpTo(t, ctx, "the drain rollback offered", `!!document.querySelector('#rollback-button[data-policy="drain"]')`, 20*time.Second)
	consoleDo(t, ctx, "roll back with drain", consoleClick("#rollback-button"))
	second := consoleExpectDialogPrefix(t, ctx, "Roll back resharding reshard-")
	if !strings.HasSuffix(second, " of orders/billing: from 4 back to 3 shards, draining the new shards") || second == first {
		t.Fatalf("drain rollback dialog %q: want the new resharding, the counts and the drain", second)
	}
	if body := consoleRun(t, ctx, "read the request", chromedp.TextContent(chromedp.ID("confirm-body"))); !strings.Contains(body, `"policy": "drain"`) {
		t.Fatalf("drain rollback body %s: want policy drain", body)
	}
	consoleScreenshot(t, ctx, "console-writes.png")
	consoleConfirm(t, ctx)
	consoleWaitStatus(t, ctx, "rollback-status", "ok", "Rollback of reshard-")
	if ev := consoleLastEvent(t, tc, billing, "resharding.rolled_back"); ev == nil || !consoleAudited(ev, "admin", "console rollback") || consolePayload(ev)["policy"] != "drain" {
		t.Fatalf("drain rollback from the console: %v", ev)
	}

	// A READ user: the same pages without a single write control.
	consoleDo(t, ctx, "sign out", consoleClick("#logout"), chromedp.WaitVisible(chromedp.ID("login-form")))
	consoleSignIn(t, ctx, "viewer", "v-pw")
	consoleWaitFor(t, ctx, "the viewer on the group page", `!!document.querySelector('#summary [data-field="shardCount"]') && document.querySelectorAll('#history-rows a.ev').length > 0`)
	consoleWaitFor(t, ctx, "no write control for the viewer", `document.querySelectorAll('.write, #scale-card, #rollback-button, #autoscaling-form, #create-form').length === 0 && document.getElementById('session-roles').textContent.includes('read-only')`)
	consoleDo(t, ctx, "open the overview", consoleClick(".brand"), chromedp.WaitVisible(chromedp.CSS(`#streams-table tr[data-stream="orders"]`)))
	consoleWaitFor(t, ctx, "no write control on the overview", `document.querySelectorAll('.write, .scale-submit, #create-form').length === 0`)

	// A user scoped to pay-*, in a tab of its own.
	tc.Do("POST", "/coord/v1/streams/pay-eu/groups/ledger", map[string]any{"initialShardCount": 1, "requestedBy": "console-test", "reason": "scoped user"}).MustStatus(t, 201)
	scoped, cancel := chromedp.NewContext(ctx)
	defer cancel()
	scopedErrors := consoleWatchErrors(t, scoped)
	consoleDo(t, scoped, "open the console as payops", chromedp.Navigate(tc.URL+"/console/"), chromedp.WaitVisible(chromedp.ID("login-form")))
	consoleSignIn(t, scoped, "payops", "p-pw")
	consoleDo(t, scoped, "see the scoped overview", chromedp.WaitVisible(chromedp.CSS(`#streams-table tr[data-stream="pay-eu"] .scale-submit`)), chromedp.WaitVisible(chromedp.ID("create-form")))
	// The users file scopes payops to pay-*: the coordinator lists it no
	// other stream or group.
	consoleWaitFor(t, scoped, "only pay-* listed", `!document.querySelector('#streams-table tr[data-stream="orders"]') && !document.querySelector('#groups-table tr[data-group="orders/billing"]') && document.getElementById('session-roles').textContent.includes('prefixes pay-*')`)
	consoleDo(t, scoped, "try to create outside the scope",
		consoleClick("#create-kind-group"),
		chromedp.SendKeys(chromedp.ID("create-prefix"), prefix),
		chromedp.SendKeys(chromedp.ID("create-group"), "intruder"),
		consoleClick("#create-submit"),
	)
	consoleWaitFor(t, scoped, "the create refused before any dialog", `document.getElementById('create-status').textContent.includes('outside the prefixes this account may change (pay-*)') && !(document.getElementById('confirm') || {}).open`)
	consoleDo(t, scoped, "open orders/billing", chromedp.Navigate(tc.URL+"/console/#/group/orders/billing"))
	consoleWaitFor(t, scoped, "orders/billing loaded (or refused) without write controls",
		`(!!document.querySelector('#summary [data-field="shardCount"]') || document.getElementById('error').textContent.includes('may not read')) && document.querySelectorAll('.write, #scale-card').length === 0`)
	consoleDo(t, scoped, "open pay-eu/ledger", chromedp.Navigate(tc.URL+"/console/#/group/pay-eu/ledger"), chromedp.WaitVisible(chromedp.ID("scale-card")))
	consoleWaitFor(t, scoped, "the scale card of pay-eu/ledger", `document.getElementById('scale-current').textContent === '1 shard routed now.'`)

	// The count changes while the dialog is open: confirming then sends
	// nothing and says why.
	consoleDo(t, scoped, "ask to scale pay-eu/ledger out", consoleClick("#scale-plus"))
	consoleExpectDialog(t, scoped, "Scale pay-eu/ledger from 1 to 2 shards")
	tc.Do("POST", "/coord/v1/streams/pay-eu/groups/ledger/scale", map[string]any{"targetShardCount": 3, "requestedBy": "console-test", "reason": "meanwhile"}).MustStatus(t, 202)
	consoleWaitFor(t, scoped, "the page under the dialog at 3 shards", `document.getElementById('scale-current').textContent === '3 shards routed now.' && document.getElementById('confirm').open`)
	consoleDo(t, scoped, "confirm the stale dialog", consoleClick("#confirm-ok"))
	consoleWaitFor(t, scoped, "the stale dialog refusing to send", `document.getElementById('confirm').open && document.getElementById('confirm-ok').disabled && document.getElementById('confirm-note').textContent === 'It has 3 shard(s) now, not 1 as when this opened. Nothing was sent: cancel and choose again.'`)
	consoleCancel(t, scoped)
	if evs := consoleEventsBy(t, tc, "payops"); len(evs) != 0 {
		t.Fatalf("payops sent nothing, yet the log has its events: %v", evs)
	}

	for name, errs := range map[string][]string{"admin and viewer tab": jsErrors(), "payops tab": scopedErrors()} {
		if len(errs) > 0 {
			t.Fatalf("the %s reported errors:\n%s", name, strings.Join(errs, "\n"))
		}
	}
}

// TestIntegrationConsoleBrowserSessionExpiry: when the token expires the
// console goes back to sign-in at once and says what it did not send (a
// confirm dialog left open), nothing reaches the coordinator, and signing in
// again returns to the same page.
func TestIntegrationConsoleBrowserSessionExpiry(t *testing.T) {
	consoleNeedChromium(t)
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) { m.TokenTTL = 10 * time.Second })
	tc.Do("POST", "/coord/v1/streams/exp/groups/g", map[string]any{"initialShardCount": 1, "requestedBy": "console-test", "reason": "expiry"}).MustStatus(t, 201)

	ctx := consoleBrowser(t)
	jsErrors := consoleWatchErrors(t, ctx)
	consoleDo(t, ctx, "open the group page", chromedp.Navigate(tc.URL+"/console/#/group/exp/g"), chromedp.WaitVisible(chromedp.ID("login-form")))
	consoleSignIn(t, ctx, "admin", "password")
	consoleDo(t, ctx, "see the scale card", chromedp.WaitVisible(chromedp.ID("scale-card")))
	consoleWaitFor(t, ctx, "the expiry shown as near", `document.getElementById('session-expiry').classList.contains('soon') && document.getElementById('session-expiry').textContent.startsWith('session ends at')`)
	before := consoleEventsBy(t, tc, "admin")
	consoleWaitFor(t, ctx, "the scale card at 1 shard", `document.getElementById('scale-current').textContent === '1 shard routed now.' && !document.getElementById('scale-plus').disabled`)
	consoleDo(t, ctx, "ask to scale out", consoleClick("#scale-plus"))
	consoleExpectDialog(t, ctx, "Scale exp/g from 1 to 2 shards")

	// The dialog stays open; the token expires.
	consoleWaitForUpTo(t, ctx, "back to sign-in with what was not sent", `!document.getElementById('login').hidden && !(document.getElementById('confirm') || {}).open && (() => { const m = document.getElementById('login-error').textContent; return m.includes('Your session expired at') && m.includes('Not sent: scale exp/g from 1 to 2 shards.'); })()`, 20*time.Second)
	if after := consoleEventsBy(t, tc, "admin"); len(after) != len(before) {
		t.Fatalf("the dialog left open when the session expired wrote %d event(s): %v", len(after)-len(before), after[len(before):])
	}
	if url := consoleRun(t, ctx, "read the address", chromedp.Evaluate[string](`location.hash`)); url != "#/group/exp/g" {
		t.Fatalf("after the expiry the console is at %q: want the group page kept", url)
	}
	consoleSignIn(t, ctx, "admin", "password")
	consoleDo(t, ctx, "back on the group page", chromedp.WaitVisible(chromedp.ID("scale-card")))
	if errs := jsErrors(); len(errs) > 0 {
		t.Fatalf("the page reported errors:\n%s", strings.Join(errs, "\n"))
	}
}

// consoleSignIn fills the sign-in form afresh and submits it.
func consoleSignIn(t *testing.T, ctx context.Context, user, pass string) {
	t.Helper()
	consoleDo(t, ctx, "sign in as "+user,
		chromedp.WaitVisible(chromedp.ID("login-form")),
		consoleJS(`document.getElementById('login-username').value = ''; document.getElementById('login-password').value = ''`),
		chromedp.SendKeys(chromedp.ID("login-username"), user),
		chromedp.SendKeys(chromedp.ID("login-password"), pass),
		consoleClick("#login-submit"),
	)
}

// consoleClick clicks the element with the mouse, as a user does, after
// scrolling it to the middle of the window (the top bar is sticky: an element
// scrolled only just into view can be under it).
func consoleClick(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS(sel)),
		consoleJS(fmt.Sprintf(`document.querySelector(%q).scrollIntoView({block: 'center'})`, sel)),
		chromedp.Click(chromedp.CSS(sel)),
	)
}

// consoleJS runs a statement on the page.
func consoleJS(stmt string) chromedp.Action[chromedp.Void] {
	eval := chromedp.Evaluate[bool](stmt + "; true")
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := eval(ctx, t)
		return chromedp.Void{}, err
	}
}

// consoleExpectDialog waits for the confirm dialog and checks what it names.
func consoleExpectDialog(t *testing.T, ctx context.Context, want string) {
	t.Helper()
	if got := consoleExpectDialogPrefix(t, ctx, want); got != want {
		t.Fatalf("the confirm dialog says %q, want %q", got, want)
	}
}

// consoleExpectDialogPrefix waits for the confirm dialog naming an action
// that starts with prefix, and returns what it names.
func consoleExpectDialogPrefix(t *testing.T, ctx context.Context, prefix string) string {
	t.Helper()
	consoleWaitFor(t, ctx, "the confirm dialog for "+prefix, fmt.Sprintf(`(() => { const d = document.getElementById('confirm'); return !!d && d.open && document.getElementById('confirm-text').textContent.startsWith(%q); })()`, prefix))
	return consoleRun(t, ctx, "read the confirm dialog", chromedp.Evaluate[string](`document.getElementById('confirm-text').textContent`))
}

func consoleCancel(t *testing.T, ctx context.Context) {
	t.Helper()
	consoleDo(t, ctx, "cancel", consoleClick("#confirm-cancel"))
	consoleWaitFor(t, ctx, "the dialog closed", `!document.getElementById('confirm').open`)
}

func consoleConfirm(t *testing.T, ctx context.Context) {
	t.Helper()
	consoleDo(t, ctx, "confirm", consoleClick("#confirm-ok"))
	consoleWaitFor(t, ctx, "the dialog closed", `!document.getElementById('confirm').open`)
}

// consoleWaitStatus waits for a control's status slot to show kind ("ok" or
// "err") with text in it.
func consoleWaitStatus(t *testing.T, ctx context.Context, id, kind, text string) {
	t.Helper()
	consoleWaitFor(t, ctx, fmt.Sprintf("%s %s %q", id, kind, text), fmt.Sprintf(`(() => { const s = document.getElementById(%q); return !!s && !s.hidden && s.classList.contains(%q) && s.textContent.includes(%q); })()`, id, kind, text))
}

// consoleEventsBy is every event of the log whose actor is user, oldest first.
func consoleEventsBy(t *testing.T, tc *testCoordinator, user string) []map[string]any {
	t.Helper()
	var out []map[string]any
	after := ""
	for {
		path := "/coord/v1/monitoring/events?limit=1000"
		if after != "" {
			path += "&after=" + after
		}
		r := tc.Do("GET", path, nil).MustStatus(t, 200)
		evs, _ := r.JSON["events"].([]any)
		for _, e := range evs {
			if ev, _ := e.(map[string]any); ev["actor"] == user {
				out = append(out, ev)
			}
		}
		next, _ := r.JSON["nextAfter"].(string)
		if next == "" {
			return out
		}
		after = next
	}
}

// consoleLastEvent is the group's last event of this type (nil when none).
func consoleLastEvent(t *testing.T, tc *testCoordinator, groupAPI, typ string) map[string]any {
	t.Helper()
	r := tc.Do("GET", groupAPI+"/events?limit=1000", nil).MustStatus(t, 200)
	evs, _ := r.JSON["events"].([]any)
	var last map[string]any
	for _, e := range evs {
		if ev, _ := e.(map[string]any); ev["type"] == typ {
			last = ev
		}
	}
	return last
}

func consolePayload(ev map[string]any) map[string]any {
	p, _ := ev["payload"].(map[string]any)
	return p
}

// consoleAudited reports whether an event carries the console's audit fields.
func consoleAudited(ev map[string]any, user, reason string) bool {
	p := consolePayload(ev)
	return p != nil && p["requestedBy"] == user && p["reason"] == reason
}

// consoleExpectResharding checks that the group's history holds a
// resharding from -> to requested by user with reason.
func consoleExpectResharding(t *testing.T, tc *testCoordinator, groupAPI string, from, to int, user, reason string) {
	t.Helper()
	r := tc.Do("GET", groupAPI+"/events?limit=1000", nil).MustStatus(t, 200)
	evs, _ := r.JSON["events"].([]any)
	for _, e := range evs {
		ev, _ := e.(map[string]any)
		p := consolePayload(ev)
		if ev["type"] == "resharding.preparing" && p["fromShardCount"] == float64(from) && p["toShardCount"] == float64(to) {
			if !consoleAudited(ev, user, reason) {
				t.Fatalf("resharding %d -> %d: %v, want requestedBy %s and reason %q", from, to, ev, user, reason)
			}
			return
		}
	}
	t.Fatalf("no resharding.preparing %d -> %d in the group's history: %s", from, to, r.Body)
}
