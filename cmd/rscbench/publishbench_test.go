package main

import (
	"context"
	"testing"

	"github.com/rscoord/rsc/internal/redistest"
)

// The publish command in a tiny mode: its sections are there, every measured
// figure has its baseline and ratio, the record's cost is reported, and a
// shared Redis is left as it was (streams, fences and dedup records removed).
func TestPublishTiny(t *testing.T) {
	srv := redistest.StartProcess(t)
	r := mustRun(t, "publish", "--publish-slice", "10ms", "--publish-rounds", "1", "--redis", srv.URL(), "-json")
	got := checkReport(t, decodeReport(t, r.stdout), "publish.single", "publish.batch", "publish.async", "publish.record")
	// The path the SDK takes on this engine: native where Redis has IDMP
	// (8.6), whose records path is measured next to it.
	path := "records path"
	if v, err := srv.Client(t).Do(context.Background(), "COMMAND", "INFO", "XCFGSET").Slice(); err == nil && len(v) == 1 && v[0] != nil {
		path = "native path"
		if res := got["publish.batch"]["PublishBatch of 64 with DedupWindow, records path"]; res.Ratio == nil {
			t.Errorf("publish.batch: no records path next to the native one: %+v", res)
		}
	}
	for section, names := range map[string][]string{
		"publish.single": {"Publish", "Publish with DedupWindow (new event ids), " + path, "Publish of an event id already written (dedup hit), " + path},
		"publish.batch":  {"PublishBatch of 64", "PublishBatch of 64 with DedupWindow, " + path},
		"publish.async":  {"Async.Publish from one goroutine", "Async.Publish with DedupWindow from one goroutine, " + path},
	} {
		for _, name := range names {
			if res := got[section][name]; res.Ratio == nil {
				t.Errorf("%s: %q has no ratio: %+v", section, name, res)
			}
		}
	}
	if v := value(t, got, "publish.record", "record: MEMORY USAGE of one"); v <= 0 {
		t.Errorf("MEMORY USAGE of a record = %v", v)
	}
	noKeysLeft(t, srv)
}
