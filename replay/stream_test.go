package replay_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/replay"
)

// TestReplayShowsStreams: the stream events (created, a group registered by
// a member's first heartbeat, a scale without groups) are listed by
// `replay events` with who and why, and `replay state` shows the stream as
// it was at any point.
func TestReplayShowsStreams(t *testing.T) {
	ctx := context.Background()
	log := events.NewMemLog()
	at := time.Date(2026, 6, 1, 10, 0, 0, 0, time.UTC)
	var ids []string
	for i, e := range []struct {
		group string
		ev    events.Event
	}{
		{"", &events.StreamCreated{ShardCount: 2, Provisioned: true, RequestedBy: "ops", Reason: "launch", CreatedShards: []int{0, 1}}},
		{"", &events.StreamScaled{From: 2, To: 3, MetadataVersion: 2, RequestedBy: "ops", Reason: "peak", CreatedShards: []int{2}, KeptKeys: []string{}}},
		{"billing", &events.GroupCreated{ShardCount: 3, Provisioned: true, RequestedBy: "svc", Reason: "registered by the first heartbeat of member m1",
			MetadataVersion: 2, RegisteredBy: "m1", KeysChecked: true}},
	} {
		data, err := events.Encode(events.Meta{StreamPrefix: "orders", ConsumerGroup: e.group, Time: at.Add(time.Duration(i) * time.Second), Actor: "ops"}, e.ev)
		if err != nil {
			t.Fatal(err)
		}
		last := events.ZeroID
		if len(ids) > 0 {
			last = ids[len(ids)-1]
		}
		got, err := log.Append(ctx, last, [][]byte{data})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	var types []string
	for rec, err := range replay.Events(ctx, log, replay.Filter{Types: []string{"stream.*", "group.created"}}) {
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, rec.Type)
		var p map[string]any
		if err := json.Unmarshal(rec.Payload, &p); err != nil || p["requestedBy"] == nil || p["reason"] == nil {
			t.Errorf("%s payload %s: want who and why", rec.Type, rec.Payload)
		}
		if rec.Type == "group.created" && p["registeredBy"] != "m1" {
			t.Errorf("group.created payload %s: want registeredBy m1", rec.Payload)
		}
	}
	if len(types) != 3 || types[0] != "stream.created" || types[1] != "stream.scaled" || types[2] != "group.created" {
		t.Fatalf("events %v", types)
	}
	st, _, err := replay.StateAt(ctx, log, replay.Point{UntilID: ids[0]})
	if err != nil {
		t.Fatal(err)
	}
	if ss := replay.StreamStates(st); len(ss) != 1 || *ss[0].ShardCount != 2 || *ss[0].MetadataVersion != 1 || len(ss[0].ConsumerGroups) != 0 {
		t.Fatalf("the stream after its create: %+v", ss)
	}
	st, _, err = replay.StateAt(ctx, log, replay.Point{})
	if err != nil {
		t.Fatal(err)
	}
	if ss := replay.StreamStates(st); len(ss) != 1 || *ss[0].ShardCount != 3 || *ss[0].MetadataVersion != 2 || len(ss[0].ConsumerGroups) != 1 {
		t.Fatalf("the stream at the end: %+v", ss)
	}
}
