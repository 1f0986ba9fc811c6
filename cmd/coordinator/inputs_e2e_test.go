package main

import (
	"strings"
	"testing"

	"github.com/rscoord/rsc/internal/redistest"
)

// Small inputs that used to be read one way by the coordinator and another by
// Redis, a log reader or a person: stream ids past Redis's range, invisible
// characters in names, JSON keys a case-insensitive decoder merges.

const inputsMaxID = "18446744073709551615-18446744073709551615"

// inputsWarnLines counts the log's warn lines.
func inputsWarnLines(logs *apiSyncBuffer) int {
	return strings.Count(logs.String(), `"level":"warn"`)
}

// TestIntegrationStreamIDsOutOfRange: an id no exclusive range can start from
// (after the greatest id, before 0-0) is 400 INVALID_REQUEST on every route
// that takes one, not a 503 "Redis is unavailable" with a warn line per
// request; nothing about the group changes.
func TestIntegrationStreamIDsOutOfRange(t *testing.T) {
	parallel(t)
	logs := &apiSyncBuffer{}
	tc := startCoordinator(t, redistest.StartProcess(t), func(m *Main) { m.Stderr = logs })
	apiCreate(t, tc, "ids", "g", 2)
	grafana := func(kv ...string) string {
		return gfPath("/messages", append([]string{"streamPrefix", "ids", "consumerGroup", "g"}, kv...)...)
	}
	messages := apiMonPath("ids", "g", "shards", "0", "messages")
	warns := inputsWarnLines(logs)
	for _, path := range []string{
		"/coord/v1/monitoring/events?after=" + inputsMaxID,
		apiMonPath("ids", "g", "events") + "?after=" + inputsMaxID,
		"/coord/v1/monitoring/events?after=18446744073709551616-0", // past uint64
		messages + "?direction=FORWARD&cursor=" + inputsMaxID,
		messages + "?direction=BACKWARD&cursor=0-0",
		grafana("direction", "FORWARD", "cursor", inputsMaxID),
		grafana("direction", "BACKWARD", "cursor", "0-0"),
		grafana("shardIndex", "all", "direction", "FORWARD", "cursor", "all:0="+inputsMaxID+",1=1-0"),
	} {
		r := apiDo(t, tc, "GET", path, nil)
		r.apiWantError(t, 400, "INVALID_REQUEST")
		if !strings.Contains(r.apiMsg(), "18446744073709551615") && !strings.Contains(r.apiMsg(), "0-0") && !strings.Contains(r.apiMsg(), "stream id") {
			t.Errorf("%s: message %q does not say what was wrong", path, r.apiMsg())
		}
	}
	// The same ids where an inclusive bound takes them are served.
	apiDo(t, tc, "GET", apiMonPath("ids", "g", "replay")+"?until="+inputsMaxID, nil).apiWant(t, 200)
	apiDo(t, tc, "GET", messages+"?direction=BACKWARD&cursor="+inputsMaxID, nil).apiWant(t, 200)
	apiDo(t, tc, "GET", grafana("recordId", inputsMaxID), nil).apiWant(t, 200)
	if got := inputsWarnLines(logs); got != warns {
		t.Fatalf("%d warn lines written by refused ids:\n%s", got-warns, logs.String())
	}
}

// TestIntegrationFormatCharactersRefused: zero-width and bidirectional
// control characters (Unicode category Cf) make two names look alike in a log
// or the console; names, member ids and free text refuse them, and nothing is
// created or recorded.
func TestIntegrationFormatCharactersRefused(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	apiCreate(t, tc, "cf", "g", 1)
	epoch := apiDo(t, tc, "GET", apiGroupPath("cf", "g"), nil).apiWant(t, 200).JSON["groupEpoch"]
	for _, c := range []struct{ name, prefix, group string }{
		{"zero-width space in a prefix", "cf\u200b", "g"},
		{"right-to-left override in a group", "cf", "g\u202e"},
		{"byte-order mark in a prefix", "\ufeffcf", "g"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := apiDo(t, tc, "POST", apiGroupPath(c.prefix, c.group), map[string]any{"initialShardCount": 1, "requestedBy": "t"})
			r.apiWantError(t, 400, "INVALID_REQUEST")
			if !strings.Contains(r.apiMsg(), "must not contain") {
				t.Fatalf("message %q", r.apiMsg())
			}
		})
	}
	for _, c := range []struct{ name, field, value string }{
		{"zero-width joiner in requestedBy", "requestedBy", "ops\u200d"},
		{"left-to-right isolate in reason", "reason", "scale \u2066out"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := map[string]any{"targetShardCount": 2, "requestedBy": "t", c.field: c.value}
			r := apiDo(t, tc, "POST", apiGroupPath("cf", "g", "scale"), body).apiWantError(t, 400, "INVALID_REQUEST")
			if !strings.Contains(r.apiMsg(), c.field) || !strings.Contains(r.apiMsg(), "format characters") {
				t.Fatalf("message %q", r.apiMsg())
			}
		})
	}
	t.Run("bidi control in a member id", func(t *testing.T) {
		id := "m\u202e1"
		r := apiSend(t, tc, apiMember, "POST", apiHBPath("cf", "g", id), heartbeatBody(id, 0, 0, nil, nil), nil)
		r.apiWantError(t, 400, "INVALID_REQUEST")
	})
	t.Run("zero-width space in a memberName", func(t *testing.T) {
		body := heartbeatBody("m1", 0, 0, nil, nil)
		body["memberName"] = "m\u200b1"
		apiSend(t, tc, apiMember, "POST", apiHBPath("cf", "g", "m1"), body, nil).apiWantError(t, 400, "INVALID_REQUEST")
	})
	// A refused admin command is recorded (command.rejected); nothing else is.
	groups := apiArr(t, apiDo(t, tc, "GET", "/coord/v1/monitoring/groups", nil).apiWant(t, 200).JSON, "groups")
	if len(groups) != 1 {
		t.Fatalf("groups %v", groups)
	}
	g := apiDo(t, tc, "GET", apiGroupPath("cf", "g"), nil).apiWant(t, 200).JSON
	if g["shardCount"] != 1.0 || g["groupEpoch"] != epoch {
		t.Fatalf("group changed: %v", g)
	}
	for _, e := range apiAllEvents(t, tc, apiMonPath("cf", "g", "events")) {
		if e.Type != "group.created" && e.Type != "command.rejected" {
			t.Errorf("event %s appended by refused input", e.Type)
		}
	}
}

// TestIntegrationJSONKeysReadOneWay: {"targetShardCount":3,"TARGETSHARDCOUNT":5}
// scaled to 5 (the last key, matched case-insensitively); a key given twice,
// or differing from the contract's only by case, at any depth, is now 400
// naming it, and changes nothing. Unknown keys stay ignored.
func TestIntegrationJSONKeysReadOneWay(t *testing.T) {
	parallel(t)
	tc := startCoordinator(t, redistest.StartProcess(t), nil)
	apiCreate(t, tc, "keys", "g", 2)
	scale := apiGroupPath("keys", "g", "scale")
	for _, c := range []struct{ name, path, body, key string }{
		{"case variant", scale, `{"targetShardCount":3,"TARGETSHARDCOUNT":5,"requestedBy":"t"}`, `"TARGETSHARDCOUNT"`},
		{"duplicate", scale, `{"targetShardCount":3,"targetShardCount":5,"requestedBy":"t"}`, `"targetShardCount"`},
		{"case variant alone", scale, `{"TargetShardCount":5,"requestedBy":"t"}`, `"TargetShardCount"`},
		{"nested in a heartbeat", apiHBPath("keys", "g", "m1"),
			`{"memberId":"m1","memberEpoch":0,"metadataVersion":0,"runtimeConsumerCapacity":{"runtimeMaxConcurrency":1,"RuntimeMaxConcurrency":9}}`,
			`"runtimeConsumerCapacity.RuntimeMaxConcurrency"`},
		{"in an array of a heartbeat", apiHBPath("keys", "g", "m1"),
			`{"memberId":"m1","memberEpoch":0,"metadataVersion":0,"ownedShards":[{"shardIndex":0,"shardIndex":1}]}`,
			`"ownedShards[0].shardIndex"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := apiSend(t, tc, apiAdmin, "POST", c.path, c.body, map[string]string{"Content-Type": "application/json"})
			r.apiWantError(t, 400, "INVALID_REQUEST")
			if !strings.Contains(r.apiMsg(), c.key) {
				t.Fatalf("message %q does not name %s", r.apiMsg(), c.key)
			}
		})
	}
	g := apiDo(t, tc, "GET", apiGroupPath("keys", "g"), nil).apiWant(t, 200).JSON
	if g["shardCount"] != 2.0 || g["groupEpoch"] != 1.0 {
		t.Fatalf("a refused body changed the group: %v", g)
	}
	r := apiSend(t, tc, apiAdmin, "POST", scale, `{"targetShardCount":3,"requestedBy":"t","reason":"r","Colour":"blue","colour":"red"}`, map[string]string{"Content-Type": "application/json"})
	r.apiWant(t, 202)
	if got := apiDo(t, tc, "GET", apiGroupPath("keys", "g"), nil).JSON["shardCount"]; got != 3.0 {
		t.Fatalf("shardCount %v after a scale to 3", got)
	}
}
